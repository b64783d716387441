//! The registry client against hostile registries (issue 26, items 5, 6, 7, 9 and 10).
//!
//! The honest path runs against the real registry of `oci.rs` (Debian's `docker-registry`,
//! TLS from a test CA, htpasswd). The attacks need a registry that misbehaves on purpose, so
//! they run against a scripted one: a small HTTP/1.1 server on 127.0.0.1 (plain, for
//! `--plain-http`, or TLS with the real registry's certificate), one request per connection,
//! that serves what a test scripts and records what it was sent. Where it serves a real
//! artifact, it reads it from the real registry's storage after a real `push`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::oci::{PASSWORD, Registry, USER};
use crate::support::*;

/// One request as the scripted server received it.
#[derive(Clone, Debug)]
struct Req {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a scripted server answers: it writes the whole response (status line on) to the
/// connection, which is closed after it.
type Handler = dyn Fn(&Req, &mut dyn Write) -> std::io::Result<()> + Send + Sync;

/// A scripted server and the requests it has seen.
struct Scripted {
    port: u16,
    seen: Arc<Mutex<Vec<Req>>>,
}

impl Scripted {
    fn seen(&self) -> Vec<Req> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request head and discards its body (`Content-Length` bytes).
fn read_request(r: &mut dyn BufRead) -> std::io::Result<Req> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = match (parts.next(), parts.next()) {
        (Some(m), Some(p)) => (m.to_string(), p.to_string()),
        _ => return Err(std::io::Error::other(format!("bad request line {line:?}"))),
    };
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let req = Req {
        method,
        path,
        headers,
    };
    let len: u64 = req
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::io::copy(&mut r.take(len), &mut std::io::sink())?;
    Ok(req)
}

fn serve_one(
    stream: &mut (impl Read + Write),
    handler: &Handler,
    seen: &Mutex<Vec<Req>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut *stream);
    let req = read_request(&mut reader)?;
    drop(reader);
    seen.lock().unwrap().push(req.clone());
    handler(&req, stream)?;
    stream.flush()
}

/// Starts a scripted server: plain HTTP, or TLS with `tls`.
fn scripted(tls: Option<Arc<rustls::ServerConfig>>, handler: Arc<Handler>) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = conn.set_write_timeout(Some(Duration::from_secs(30)));
            let (handler, seen, tls) = (handler.clone(), s.clone(), tls.clone());
            std::thread::spawn(move || match tls {
                None => {
                    let mut conn = conn;
                    let _ = serve_one(&mut conn, &*handler, &seen);
                }
                Some(cfg) => {
                    let Ok(server) = rustls::ServerConnection::new(cfg) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(server, conn);
                    if serve_one(&mut tls, &*handler, &seen).is_ok() {
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                    }
                }
            });
        }
    });
    Scripted { port, seen }
}

/// A TLS server configuration with the real registry's certificate (issued by its test CA
/// for 127.0.0.1, so it serves any port).
fn tls_config(reg: &Registry) -> Arc<rustls::ServerConfig> {
    let certs = ureq::tls::parse_pem(&std::fs::read(reg.path("srv.pem")).unwrap())
        .filter_map(|i| match i.unwrap() {
            ureq::tls::PemItem::Certificate(c) => {
                Some(rustls::pki_types::CertificateDer::from(c.der().to_vec()))
            }
            _ => None,
        })
        .collect();
    let key = ureq::tls::parse_pem(&std::fs::read(reg.path("srv.key")).unwrap())
        .find_map(|i| match i.unwrap() {
            ureq::tls::PemItem::PrivateKey(k) => Some(rustls::pki_types::PrivateKeyDer::from(
                rustls::pki_types::PrivatePkcs8KeyDer::from(k.der().to_vec()),
            )),
            _ => None,
        })
        .expect("srv.key holds a key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    )
}

/// Writes a whole response.
fn respond(
    w: &mut dyn Write,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(body)
}

/// Runs airlock with the real registry's docker config, and `extra` in the environment.
fn airlock_env(reg: &Registry, env: &Env, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env_remove("AIRLOCK_REGISTRY_STALL")
        .env("DOCKER_CONFIG", reg.path("docker"))
        .env("SOURCE_DATE_EPOCH", "1700000000");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().expect("run airlock")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

/// Pushes bundle `b` to the real registry under `repo_tag`; returns the image manifest's
/// digest.
fn push(reg: &Registry, env: &Env, b: &str, repo_tag: &str) -> String {
    let out = reg.airlock(
        env,
        &[
            "push",
            b,
            &reg.reference(repo_tag),
            "--trust",
            "k.pub",
            "--json",
        ],
    );
    assert!(out.status.success(), "push: {}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["manifest_digest"].as_str().unwrap().to_string()
}

/// The digest of the layer of `media_type` in an image manifest.
fn layer_digest(image: &[u8], media_type: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(image).unwrap();
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["mediaType"] == media_type)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Packs version `v` of model `m` (its weights differ per version) into bundle `b`.
fn pack_version(env: &Env, v: u32, b: &str) {
    if !env.path("m").exists() {
        env.model("m");
    }
    env.write(
        "m/weights/part-1.bin",
        &pseudo_random(300_000, 10 + v as u64),
    );
    env.ok(&[
        "pack",
        "m",
        "-o",
        b,
        "--key",
        "k.key",
        "--version",
        &v.to_string(),
    ]);
}

#[test]
fn push_sends_no_credentials_to_an_upload_location_on_another_host() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let expected = {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
        )
    };
    for tls in [false, true] {
        let cfg = tls.then(|| tls_config(&reg));
        let scheme = if tls { "https" } else { "http" };
        // The other host: takes the uploads and records them.
        let other = scripted(
            cfg.clone(),
            Arc::new(|req: &Req, w: &mut dyn Write| {
                if req.method == "PUT" {
                    respond(w, "201 Created", &[], b"")
                } else {
                    respond(w, "404 Not Found", &[], b"")
                }
            }),
        );
        let other_port = other.port;
        let want = expected.clone();
        let hostile = scripted(
            cfg,
            Arc::new(move |req: &Req, w: &mut dyn Write| {
                if req.header("authorization") != Some(want.as_str()) {
                    return respond(
                        w,
                        "401 Unauthorized",
                        &[("WWW-Authenticate", "Basic realm=\"hostile\"".into())],
                        b"",
                    );
                }
                match req.method.as_str() {
                    "GET" if req.path == "/v2/" => respond(w, "200 OK", &[], b"{}"),
                    "POST" if req.path.ends_with("/blobs/uploads/") => respond(
                        w,
                        "202 Accepted",
                        &[(
                            "Location",
                            format!("{scheme}://127.0.0.1:{other_port}/upload/1?_state=x"),
                        )],
                        b"",
                    ),
                    "PUT" if req.path.contains("/manifests/") => {
                        respond(w, "201 Created", &[], b"")
                    }
                    _ => respond(w, "404 Not Found", &[], b""),
                }
            }),
        );
        // Credentials for the hostile registry only.
        reg.docker_config(&[(hostile.port, PASSWORD)]);
        let target = format!("oci://127.0.0.1:{}/models/m:1", hostile.port);
        let ca = reg.path("ca.pem");
        let mut args = vec!["push", "b", &target, "--trust", "k.pub"];
        if tls {
            args.extend(["--ca-file", ca.to_str().unwrap()]);
        } else {
            args.push("--plain-http");
        }
        let out = airlock_env(&reg, &env, &args, &[]);
        assert!(out.status.success(), "{scheme}: {}", text(&out));
        let uploads = other.seen();
        assert!(
            uploads.iter().filter(|r| r.method == "PUT").count() >= 3,
            "{scheme}: {uploads:?}"
        );
        for r in &uploads {
            assert_eq!(
                r.header("authorization"),
                None,
                "{scheme}: credentials went to the upload Location on another port: {r:?}"
            );
        }
        // The registry itself got them (so they were there to leak).
        assert!(
            hostile
                .seen()
                .iter()
                .any(|r| r.header("authorization") == Some(expected.as_str()))
        );
    }
}

#[test]
fn a_pinned_digest_answered_with_another_version_is_exit_3_and_nothing_is_installed() {
    let reg = Registry::start();
    let env = Env::new();
    pack_version(&env, 1, "b1");
    pack_version(&env, 2, "b2");
    let v1 = push(&reg, &env, "b1", "models/m:1");
    let v2 = push(&reg, &env, "b2", "models/m:2");
    assert_ne!(v1, v2);

    // The honest path, on the real registry: the pin installs exactly version 2.
    let pinned = format!("oci://127.0.0.1:{}/models/m@{v2}", reg.port);
    let ok = reg.ok(
        &env,
        &["unpack", &pinned, "--trust", "k.pub", "--dest", "honest"],
    );
    assert!(ok.contains("version 2"), "{ok}");

    // A registry answering the pin (and tag 2) with version 1, validly signed: the pin is
    // answered without a digest header; the tag with version 2's digest stated.
    let (r1, r2) = (reg.path("storage"), (v1.clone(), v2.clone()));
    let hostile = scripted(
        None,
        Arc::new(move |req: &Req, w: &mut dyn Write| {
            let (v1, v2) = &r2;
            if req.path.ends_with(&format!("/manifests/{v2}")) {
                return respond(
                    w,
                    "200 OK",
                    &[("Content-Type", OCI_MANIFEST.into())],
                    &stored_in(&r1, v1),
                );
            }
            if req.path.ends_with("/manifests/2") {
                return respond(
                    w,
                    "200 OK",
                    &[
                        ("Content-Type", OCI_MANIFEST.into()),
                        ("Docker-Content-Digest", v2.clone()),
                    ],
                    &stored_in(&r1, v1),
                );
            }
            storage_answer(&r1, req, w)
        }),
    );
    for (reference, why) in [
        (
            format!("oci://127.0.0.1:{}/models/m@{v2}", hostile.port),
            "not the pinned version",
        ),
        (
            format!("oci://127.0.0.1:{}/models/m:2", hostile.port),
            "Docker-Content-Digest",
        ),
    ] {
        let out = airlock_env(
            &reg,
            &env,
            &[
                "unpack",
                &reference,
                "--trust",
                "k.pub",
                "--dest",
                "out",
                "--plain-http",
            ],
            &[],
        );
        let t = text(&out);
        assert_eq!(out.status.code(), Some(3), "{reference}: {t}");
        assert!(t.contains(why), "{reference}: {t}");
        assert!(
            !env.path("out").exists(),
            "{reference}: something was installed"
        );
        assert!(staging_leftovers(env.dir.path()).is_empty());
    }
}

/// The bytes of blob (or manifest) `digest` in a registry's storage directory.
fn stored_in(storage: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").unwrap();
    std::fs::read(storage.join(format!(
        "docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    )))
    .unwrap()
}

/// Answers as a read-only, anonymous registry whose blobs are those of the real registry's
/// storage directory: `/v2/` and blobs (with `Range`); anything else is 404.
fn storage_answer(storage: &Path, req: &Req, w: &mut dyn Write) -> std::io::Result<()> {
    if req.path == "/v2/" {
        return respond(w, "200 OK", &[], b"{}");
    }
    let Some((_, digest)) = req.path.split_once("/blobs/") else {
        return respond(w, "404 Not Found", &[], b"");
    };
    let body = stored_in(storage, digest);
    let from: usize = req
        .header("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    if from > 0 {
        return respond(
            w,
            "206 Partial Content",
            &[(
                "Content-Range",
                format!("bytes {from}-{}/{}", body.len() - 1, body.len()),
            )],
            &body[from..],
        );
    }
    respond(w, "200 OK", &[], &body)
}

/// The image manifest, airlock manifest and signature of a real push, served as they are;
/// `blob` answers every other blob `GET` (the model's files).
fn serve_artifact(
    storage: std::path::PathBuf,
    image_digest: String,
    blob: impl Fn(&Req, &[u8], &mut dyn Write) -> std::io::Result<()> + Send + Sync + 'static,
) -> Scripted {
    let image = stored_in(&storage, &image_digest);
    let own = [
        layer_digest(&image, "application/vnd.airlock.manifest.v1+json"),
        layer_digest(&image, "application/vnd.airlock.signature.v1"),
    ];
    scripted(
        None,
        Arc::new(move |req: &Req, w: &mut dyn Write| {
            if req.path.contains("/manifests/") {
                return respond(
                    w,
                    "200 OK",
                    &[
                        ("Content-Type", OCI_MANIFEST.into()),
                        ("Docker-Content-Digest", image_digest.clone()),
                    ],
                    &image,
                );
            }
            match req.path.split_once("/blobs/") {
                Some((_, d)) if req.method == "GET" && !own.iter().any(|o| o == d) => {
                    blob(req, &stored_in(&storage, d), w)
                }
                _ => storage_answer(&storage, req, w),
            }
        }),
    )
}

#[test]
fn a_small_layer_is_read_to_its_descriptor_size_not_to_the_limit() {
    let reg = Registry::start();
    let env = Env::new();
    pack_version(&env, 1, "b");
    let digest = push(&reg, &env, "b", "models/m:1");
    let storage = reg.path("storage");
    let image = stored_in(&storage, &digest);
    let manifest_layer = layer_digest(&image, "application/vnd.airlock.manifest.v1+json");
    // The airlock manifest's blob (a few KiB by its descriptor) answered with an endless body.
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let hostile = scripted(
        None,
        Arc::new(move |req: &Req, w: &mut dyn Write| {
            if req.path.contains("/manifests/") {
                return respond(
                    w,
                    "200 OK",
                    &[("Content-Type", OCI_MANIFEST.into())],
                    &image,
                );
            }
            if !req.path.ends_with(&format!("/blobs/{manifest_layer}")) {
                return storage_answer(&storage, req, w);
            }
            w.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")?;
            let chunk = vec![b' '; 1 << 20];
            for _ in 0..512 {
                w.write_all(&chunk)?;
                counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
            Ok(())
        }),
    );
    let reference = format!("oci://127.0.0.1:{}/models/m:1", hostile.port);
    let out = airlock_env(
        &reg,
        &env,
        &[
            "unpack",
            &reference,
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--plain-http",
        ],
        &[],
    );
    let t = text(&out);
    // What the server got out before airlock hung up: the descriptor's size and what the
    // sockets buffer, not the 256 MiB manifest limit.
    let n = sent.load(Ordering::SeqCst);
    assert!(n < 64 << 20, "airlock read {n} bytes of a small layer: {t}");
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(t.contains("holds more than"), "{t}");
    assert!(!env.path("out").exists());
}

#[test]
fn a_registry_that_drips_is_cut_off_as_stalled_and_nothing_is_installed() {
    let reg = Registry::start();
    let env = Env::new();
    pack_version(&env, 1, "b");
    let digest = push(&reg, &env, "b", "models/m:1");
    // Every file's blob: 1000 bytes at once, then a byte every 50 ms (a minute at most, then
    // the connection closes and airlock may resume).
    let hostile = serve_artifact(reg.path("storage"), digest, |req, body, w| {
        let from: usize = req
            .header("range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let rest = &body[from.min(body.len())..];
        let status = if from > 0 {
            "206 Partial Content"
        } else {
            "200 OK"
        };
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
            rest.len()
        );
        if from > 0 {
            head.push_str(&format!(
                "Content-Range: bytes {from}-{}/{}\r\n",
                body.len() - 1,
                body.len()
            ));
        }
        w.write_all(format!("{head}\r\n").as_bytes())?;
        let burst = rest.len().min(1000);
        w.write_all(&rest[..burst])?;
        w.flush()?;
        for b in rest[burst..].iter().take(1200) {
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(std::slice::from_ref(b))?;
            w.flush()?;
        }
        Ok(())
    });
    let reference = format!("oci://127.0.0.1:{}/models/m:1", hostile.port);
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "unpack",
            &reference,
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--plain-http",
        ])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("DOCKER_CONFIG", reg.path("docker"))
        .env("AIRLOCK_REGISTRY_STALL", "65536/1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Not a timing assertion: a guard so that, without a stall deadline, the test fails in
    // minutes instead of dripping for hours.
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(150) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("airlock was still reading a dripping registry after 150 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("stalled"), "{t}");
    assert!(t.contains("AIRLOCK_REGISTRY_STALL"), "{t}");
    assert!(!env.path("out").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());
}

#[test]
fn push_refuses_an_image_manifest_unpack_would_refuse_before_uploading_anything() {
    let reg = Registry::start();
    let env = Env::new();
    // 2,000 files of ~1,000-byte paths: each layer descriptor carries its path twice, so the
    // image manifest is ~4.6 MB, over the 4 MiB every reader (and distribution) accepts.
    let deep = ["a", "b", "c", "d"].map(|c| c.repeat(250)).join("/");
    for i in 0..2000 {
        env.write(&format!("m/{deep}/f{i:05}"), format!("{i}\n").as_bytes());
    }
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let t = reg.fails(
        &env,
        1,
        &[
            "push",
            "b",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
        ],
    );
    assert!(t.contains("image manifest would be"), "{t}");
    assert!(t.contains("4194304"), "{t}");
    assert!(t.contains("nothing was uploaded"), "{t}");
    assert_eq!(reg.uploads(), 0, "uploads started: {}", reg.log());
}

/// Runs `airlock ARGS` against a scripted registry with stall window `stall`, killing it (and
/// failing the test) if it is still running after `guard`; returns its output and how long it
/// ran.
fn run_guarded(env: &Env, args: &[&str], stall: &str, guard: Duration) -> (Output, Duration) {
    std::fs::create_dir_all(env.path("docker")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .env("DOCKER_CONFIG", env.path("docker"))
        .env("AIRLOCK_REGISTRY_STALL", stall)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > guard {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "airlock {args:?} was still waiting on a registry dripping its headers after {guard:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = start.elapsed();
    (child.wait_with_output().unwrap(), took)
}

/// Writes a response head one byte a second, never ending it (a minute at most).
fn drip_head(w: &mut dyn Write) -> std::io::Result<()> {
    let head = b"HTTP/1.1 200 OK\r\nX-Drip: "
        .iter()
        .chain(std::iter::repeat(&b'a'));
    for b in head.take(60) {
        w.write_all(std::slice::from_ref(b))?;
        w.flush()?;
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

/// Issue 36 item 8: a registry that drips its response headers held `unpack oci://` for
/// about 8 minutes (120 s for the headers, tried 4 times). Now the headers of a request,
/// all its tries together, get one stall window.
#[test]
fn a_registry_that_drips_its_headers_fails_within_the_stall_window_pull_and_push() {
    let env = Env::new();
    pack_version(&env, 1, "b");
    // Unpack: every answer drips, the `/v2/` ping first.
    let all = scripted(None, Arc::new(|_req: &Req, w: &mut dyn Write| drip_head(w)));
    let reference = format!("oci://127.0.0.1:{}/models/m:1", all.port);
    let args = [
        "unpack",
        &reference,
        "--trust",
        "k.pub",
        "--dest",
        "out",
        "--plain-http",
    ];
    let (out, took) = run_guarded(&env, &args, "1/2", Duration::from_secs(30));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("registry") && t.contains("stall"), "{t}");
    assert!(t.contains("AIRLOCK_REGISTRY_STALL"), "{t}");
    assert!(took < Duration::from_secs(20), "took {took:?}: {t}");
    assert!(!env.path("out").exists());
    // Push: the ping answers, then every request drips (the blob HEAD first, retried).
    let after_ping = scripted(
        None,
        Arc::new(|req: &Req, w: &mut dyn Write| {
            if req.path == "/v2/" {
                respond(w, "200 OK", &[], b"{}")
            } else {
                drip_head(w)
            }
        }),
    );
    let reference = format!("oci://127.0.0.1:{}/models/m:1", after_ping.port);
    let args = ["push", "b", &reference, "--trust", "k.pub", "--plain-http"];
    let (out, took) = run_guarded(&env, &args, "1/2", Duration::from_secs(30));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("stall"), "{t}");
    assert!(took < Duration::from_secs(20), "took {took:?}: {t}");
    assert!(after_ping.seen().len() >= 2, "{:?}", after_ping.seen());
}

/// Issue 36 item 8: a tag answered with another validly signed version (tag `2` serving
/// version 1) installed with exit 0 and no word. Now a warning says so, and
/// `--require-tag-version` refuses it (exit 3, nothing installed). The trust root pins no
/// model versions, so only the flag refuses.
#[test]
fn a_tag_that_names_another_version_than_the_signed_manifest_is_said_and_refused_on_request() {
    let reg = Registry::start();
    let env = Env::new();
    pack_version(&env, 1, "b1");
    // Whoever writes the registry's tags puts version 1 under tag 2 (and tag v1 honestly).
    push(&reg, &env, "b1", "models/m:2");
    push(&reg, &env, "b1", "models/m:v1");
    let wrong = reg.reference("models/m:2");
    let t = reg.ok(
        &env,
        &["unpack", &wrong, "--trust", "k.pub", "--dest", "warned"],
    );
    assert!(
        t.contains("names version 2") && t.contains("version 1"),
        "no word of the tag's version: {t}"
    );
    let t = reg.fails(
        &env,
        3,
        &[
            "unpack",
            &wrong,
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--require-tag-version",
        ],
    );
    assert!(t.contains("names version 2"), "{t}");
    assert!(t.contains("--require-tag-version"), "{t}");
    assert!(!env.path("out").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());
    // The tag that names the signed version installs without a word of it.
    let honest = reg.reference("models/m:v1");
    let t = reg.ok(
        &env,
        &[
            "unpack",
            &honest,
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--require-tag-version",
        ],
    );
    assert!(!t.contains("names version"), "{t}");
    // A bundle directory has no tag to hold.
    let t = reg.fails(
        &env,
        2,
        &[
            "unpack",
            "b1",
            "--trust",
            "k.pub",
            "--dest",
            "dir",
            "--require-tag-version",
        ],
    );
    assert!(t.contains("oci://"), "{t}");
}
