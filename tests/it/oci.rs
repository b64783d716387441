//! `airlock push` and `airlock unpack oci://` against a real registry: Debian's
//! `docker-registry` (CNCF distribution) on 127.0.0.1, TLS from a CA each test makes with
//! openssl, htpasswd (bcrypt) auth, credentials in a docker config. The artifact is also read
//! with curl, an independent client, to show other tools see a ModelPack artifact.
//!
//! Faults are real too: the registry's storage is edited on disk, and a TCP relay in front of
//! the registry cuts a transfer (once, or for good after killing the registry) at a byte count,
//! not at a time, so the tests do not depend on timing.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::support::*;

const USER: &str = "alice";
const PASSWORD: &str = "correct horse";

fn run_tool(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run it ({e}); scripts/setup.sh installs it"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `docker-registry` with its CA, htpasswd, storage and log in a temp dir.
struct Registry {
    dir: tempfile::TempDir,
    child: Arc<Mutex<Child>>,
    port: u16,
}

impl Registry {
    fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let openssl =
            |args: &[&str]| run_tool(Command::new("openssl").args(args).current_dir(d), "openssl");
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=airlock test CA",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(
            d.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ]);
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .expect("htpasswd (apache2-utils) is missing: run scripts/setup.sh");
        assert!(htpasswd.status.success());
        std::fs::write(d.join("htpasswd"), &htpasswd.stdout).unwrap();
        std::fs::create_dir(d.join("storage")).unwrap();
        let port = free_port();
        std::fs::write(
            d.join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {root}/storage\nhttp:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {root}/srv.pem\n    key: {root}/srv.key\nauth:\n  htpasswd:\n    realm: airlock-test\n    path: {root}/htpasswd\n",
                root = d.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .args(["serve", "config.yml"])
            .current_dir(d)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect(
                "docker-registry (Debian's CNCF distribution) is missing: run scripts/setup.sh",
            );
        let reg = Registry {
            dir,
            child: Arc::new(Mutex::new(child)),
            port,
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the registry did not start: {}",
                reg.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        reg.docker_config(&[(port, PASSWORD)]);
        reg
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("registry.log")).unwrap_or_default()
    }

    /// Blob uploads started (POST .../blobs/uploads/), from the registry's access log.
    fn uploads(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("\"POST /v2/") && l.contains("/blobs/uploads/"))
            .count()
    }

    /// Writes `docker/config.json` with an `auths` entry per (port, password).
    fn docker_config(&self, entries: &[(u16, &str)]) {
        use base64::Engine;
        let auths: serde_json::Map<String, serde_json::Value> = entries
            .iter()
            .map(|(port, pw)| {
                let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{pw}"));
                (
                    format!("127.0.0.1:{port}"),
                    serde_json::json!({ "auth": auth }),
                )
            })
            .collect();
        std::fs::create_dir_all(self.path("docker")).unwrap();
        std::fs::write(
            self.path("docker/config.json"),
            serde_json::json!({ "auths": auths }).to_string(),
        )
        .unwrap();
    }

    fn reference(&self, repo_tag: &str) -> String {
        format!("oci://127.0.0.1:{}/{repo_tag}", self.port)
    }

    /// Runs airlock in `env`'s tree with this registry's docker config and CA.
    fn airlock(&self, env: &Env, args: &[&str]) -> Output {
        let ca = self.path("ca.pem");
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--ca-file", ca.to_str().unwrap()]);
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(&all)
            .current_dir(env.dir.path())
            .env_remove("AIRLOCK_TRUST")
            .env("DOCKER_CONFIG", self.path("docker"))
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .output()
            .expect("run airlock")
    }

    fn ok(&self, env: &Env, args: &[&str]) -> String {
        let out = self.airlock(env, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "airlock {args:?}: {text}");
        text
    }

    fn fails(&self, env: &Env, code: i32, args: &[&str]) -> String {
        let out = self.airlock(env, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(out.status.code(), Some(code), "airlock {args:?}: {text}");
        text
    }

    /// Bytes under the registry's storage directory.
    fn storage_bytes(&self) -> u64 {
        walkdir::WalkDir::new(self.path("storage"))
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .map(|e| e.metadata().unwrap().len())
            .sum()
    }

    /// The blob's data file in the registry's storage.
    fn blob_file(&self, sha256: &str) -> PathBuf {
        self.path(&format!(
            "storage/docker/registry/v2/blobs/sha256/{}/{sha256}/data",
            &sha256[..2]
        ))
    }

    /// GET with curl (an independent client), authenticated, trusting the test CA.
    fn curl(&self, path: &str, accept: &str) -> Vec<u8> {
        let out = Command::new("curl")
            .args(["-sSf", "--cacert"])
            .arg(self.path("ca.pem"))
            .args(["-u", &format!("{USER}:{PASSWORD}"), "-H"])
            .arg(format!("Accept: {accept}"))
            .arg(format!("https://127.0.0.1:{}/v2/{path}", self.port))
            .output()
            .expect("curl is missing: run scripts/setup.sh");
        assert!(
            out.status.success(),
            "curl {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn kill(&self) {
        let mut c = self.child.lock().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the relay does when `limit` bytes have gone from the registry to the client.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    /// Close that connection once; later connections are relayed in full.
    Once,
    /// Kill the registry, close everything and refuse new connections.
    KillRegistry,
}

/// A TCP relay on its own port in front of the registry (TLS passes through untouched).
struct Relay {
    port: u16,
    fired: Arc<AtomicBool>,
}

fn relay(reg: &Registry, limit: u64, cut: Cut) -> Relay {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = reg.port;
    let fired = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let child = reg.child.clone();
    let f = fired.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { break };
            if cut == Cut::KillRegistry && f.load(Ordering::SeqCst) {
                // The listener goes with this thread: later connects are refused.
                break;
            }
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let (mut c2, mut s2) = (c2, s2);
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(std::net::Shutdown::Write);
            });
            let (sent, f, child) = (sent.clone(), f.clone(), child.clone());
            std::thread::spawn(move || {
                let (mut client, mut server) = (client, server);
                let mut buf = [0u8; 16384];
                loop {
                    let n = match server.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    let total = sent.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                    if total >= limit && !f.swap(true, Ordering::SeqCst) {
                        if cut == Cut::KillRegistry {
                            let mut c = child.lock().unwrap();
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        break;
                    }
                }
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = server.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    reg.docker_config(&[(reg.port, PASSWORD), (port, PASSWORD)]);
    Relay { port, fired }
}

/// A model with a larger weight file, so transfers take several buffers (above 8 MiB it is
/// streamed straight into staging; smaller files are fetched ahead into memory).
fn big_model(env: &Env, rel: &str, weight_bytes: usize) -> PathBuf {
    let m = env.model(rel);
    env.write(
        &format!("{rel}/model.safetensors.bin"),
        &pseudo_random(weight_bytes, 7),
    );
    m
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn push_then_unpack_round_trips_and_a_second_push_uploads_nothing() {
    let reg = Registry::start();
    let env = Env::new();
    let model = env.model("m");
    // A precision in config.json: the second push reads it back from the registry instead of
    // the bundle, and must build the very same ModelPack config (else it would upload one).
    env.write("m/config.json", b"{\"torch_dtype\": \"bfloat16\"}\n");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let target = reg.reference("models/m:1");
    let first = reg.ok(&env, &["push", "b", &target, "--trust", "k.pub"]);
    assert!(first.contains("OK   published"), "{first}");
    let uploads = reg.uploads();
    assert!(uploads > 0, "{}", reg.log());

    reg.ok(
        &env,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&model));
    assert!(staging_leftovers(env.dir.path()).is_empty());
    env.ok(&["check", "out", "--trust", "k.pub"]);

    let again = reg.airlock(&env, &["push", "b", &target, "--trust", "k.pub", "--json"]);
    assert!(again.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(doc["uploaded_files"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["uploaded_bytes"], 0, "{doc}");
    assert_eq!(reg.uploads(), uploads, "the second push started uploads");
    let manifest: serde_json::Value = serde_json::from_slice(&reg.curl(
        "models/m/manifests/1",
        "application/vnd.oci.image.manifest.v1+json",
    ))
    .unwrap();
    let config: serde_json::Value = serde_json::from_slice(&reg.curl(
        &format!(
            "models/m/blobs/{}",
            manifest["config"]["digest"].as_str().unwrap()
        ),
        "*/*",
    ))
    .unwrap();
    assert_eq!(config["config"]["precision"], "bf16", "{config}");
}

#[test]
fn an_independent_client_reads_a_modelpack_artifact() {
    let reg = Registry::start();
    let env = Env::new();
    let model = env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key", "--version", "4"]);
    reg.ok(
        &env,
        &[
            "push",
            "b",
            &reg.reference("models/m:v4"),
            "--trust",
            "k.pub",
        ],
    );

    let manifest: serde_json::Value = serde_json::from_slice(&reg.curl(
        "models/m/manifests/v4",
        "application/vnd.oci.image.manifest.v1+json",
    ))
    .unwrap();
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.cncf.model.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.cncf.model.config.v1+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    let mut paths = Vec::new();
    for layer in layers {
        let path = layer["annotations"]["org.cncf.model.filepath"]
            .as_str()
            .unwrap()
            .to_string();
        let media_type = layer["mediaType"].as_str().unwrap();
        let digest = layer["digest"].as_str().unwrap();
        let blob = reg.curl(&format!("models/m/blobs/{digest}"), "*/*");
        assert_eq!(format!("sha256:{}", sha256_hex(&blob)), digest);
        if let Some(receipt) = path.strip_prefix(".airlock/") {
            let expect = match receipt {
                "manifest.json" => "application/vnd.airlock.manifest.v1+json",
                "manifest.json.minisig" => "application/vnd.airlock.signature.v1",
                other => panic!("unexpected receipt layer {other}"),
            };
            assert_eq!(media_type, expect);
            assert_eq!(
                blob,
                std::fs::read(env.path(&format!("b/{receipt}"))).unwrap()
            );
        } else {
            // Raw layers: the file itself, byte for byte.
            assert_eq!(blob, std::fs::read(model.join(&path)).unwrap(), "{path}");
            let kind = match path.as_str() {
                "weights/part-1.bin" | "weights/part-2.bin" => "weight",
                "run.sh" => "code",
                _ => "weight.config",
            };
            assert_eq!(
                media_type,
                format!("application/vnd.cncf.model.{kind}.v1.raw"),
                "{path}"
            );
        }
        paths.push(path);
    }
    assert!(paths.contains(&"weights/part-1.bin".to_string()));
    assert!(paths.contains(&".airlock/manifest.json.minisig".to_string()));
    let config: serde_json::Value = serde_json::from_slice(&reg.curl(
        &format!(
            "models/m/blobs/{}",
            manifest["config"]["digest"].as_str().unwrap()
        ),
        "*/*",
    ))
    .unwrap();
    assert_eq!(config["descriptor"]["name"], "m");
    assert_eq!(config["descriptor"]["version"], "4");
    assert_eq!(config["config"]["format"], "pytorch");
    assert_eq!(config["modelfs"]["type"], "layers");
    assert_eq!(
        config["modelfs"]["diffIds"].as_array().unwrap().len(),
        layers.len()
    );
}

#[test]
fn a_config_only_update_adds_under_a_mebibyte_and_replaces_the_install() {
    let reg = Registry::start();
    let env = Env::new();
    big_model(&env, "m", 6 << 20);
    env.ok(&["pack", "m", "-o", "b1", "--key", "k.key", "--version", "1"]);
    reg.ok(
        &env,
        &[
            "push",
            "b1",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
        ],
    );
    reg.ok(
        &env,
        &[
            "unpack",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
            "--dest",
            "out",
        ],
    );
    let before = reg.storage_bytes();
    assert!(before > 6 << 20);

    env.write(
        "m/config.json",
        b"{\"model_type\": \"test\", \"torch_dtype\": \"bfloat16\"}\n",
    );
    env.ok(&["pack", "m", "-o", "b2", "--key", "k.key", "--version", "2"]);
    let uploads = reg.uploads();
    reg.ok(
        &env,
        &[
            "push",
            "b2",
            &reg.reference("models/m:2"),
            "--trust",
            "k.pub",
        ],
    );
    let added = reg.storage_bytes() - before;
    assert!(added < 1 << 20, "the update added {added} bytes");
    // config.json, the airlock manifest and signature, the ModelPack config.
    assert_eq!(reg.uploads() - uploads, 4, "{}", reg.log());

    let text = reg.ok(
        &env,
        &[
            "unpack",
            &reg.reference("models/m:2"),
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ],
    );
    assert!(text.contains("version 2"), "{text}");
    assert_eq!(
        std::fs::read(env.path("out/config.json")).unwrap(),
        std::fs::read(env.path("m/config.json")).unwrap()
    );
    // And the older version is refused over it.
    reg.fails(
        &env,
        3,
        &[
            "unpack",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
            "--dest",
            "out",
            "--replace",
        ],
    );
}

#[test]
fn a_wrong_password_is_exit_1_naming_the_registry_and_the_credentials_file() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    reg.docker_config(&[(reg.port, "wrong")]);
    let target = reg.reference("models/m:1");
    for args in [
        vec!["push", "b", target.as_str(), "--trust", "k.pub"],
        vec![
            "unpack",
            target.as_str(),
            "--trust",
            "k.pub",
            "--dest",
            "out",
        ],
    ] {
        let text = reg.fails(&env, 1, &args);
        assert!(
            text.contains(&format!("registry 127.0.0.1:{}", reg.port))
                && text.contains("authentication refused")
                && text.contains(&reg.path("docker/config.json").display().to_string()),
            "{text}"
        );
    }
    assert_eq!(reg.uploads(), 0);
    assert!(!env.path("out").exists());
    // No credentials at all: the same exit, saying none were found.
    std::fs::remove_file(reg.path("docker/config.json")).unwrap();
    let text = reg.fails(&env, 1, &["push", "b", &target, "--trust", "k.pub"]);
    assert!(text.contains("none were found"), "{text}");
}

#[test]
fn an_untrusted_signer_and_a_tag_without_signature_are_exit_3_nothing_installed() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    env.ok(&["keygen", "--out", "other", "--unencrypted"]);
    let target = reg.reference("models/m:1");
    reg.ok(&env, &["push", "b", &target, "--trust", "k.pub"]);
    let text = reg.fails(
        &env,
        3,
        &["unpack", &target, "--trust", "other.pub", "--dest", "out"],
    );
    assert!(text.contains("not in the trust set"), "{text}");
    assert!(!env.path("out").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());

    // A bundle the trust set does not verify is not pushed either.
    let uploads = reg.uploads();
    reg.fails(
        &env,
        3,
        &[
            "push",
            "b",
            &reg.reference("models/m:2"),
            "--trust",
            "other.pub",
        ],
    );
    assert_eq!(reg.uploads(), uploads);

    // An artifact pushed by another tool (no airlock layers) under a tag.
    let config = b"{}";
    let digest = format!("sha256:{}", sha256_hex(config));
    let upload = Command::new("curl")
        .args([
            "-sSf",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-X",
            "POST",
            "--cacert",
        ])
        .arg(reg.path("ca.pem"))
        .args(["-u", &format!("{USER}:{PASSWORD}")])
        .arg(format!(
            "https://127.0.0.1:{}/v2/models/m/blobs/uploads/",
            reg.port
        ))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&upload.stdout).to_string();
    let location = headers
        .lines()
        .find_map(|l| {
            l.strip_prefix("Location: ")
                .or_else(|| l.strip_prefix("location: "))
        })
        .expect("upload location")
        .trim()
        .to_string();
    let sep = if location.contains('?') { '&' } else { '?' };
    run_tool(
        Command::new("curl")
            // Not curl's default form type: distribution would parse the body as a form.
            .args([
                "-sSf",
                "-X",
                "PUT",
                "-H",
                "Content-Type: application/octet-stream",
            ])
            .args(["--data-binary", "{}", "--cacert"])
            .arg(reg.path("ca.pem"))
            .args(["-u", &format!("{USER}:{PASSWORD}")])
            .arg(format!("{location}{sep}digest={digest}")),
        "curl PUT blob",
    );
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.cncf.model.manifest.v1+json",
        "config": {"mediaType": "application/vnd.cncf.model.config.v1+json", "digest": digest, "size": 2},
        "layers": [],
    });
    run_tool(
        Command::new("curl")
            .args(["-sSf", "-X", "PUT", "--cacert"])
            .arg(reg.path("ca.pem"))
            .args(["-u", &format!("{USER}:{PASSWORD}")])
            .args([
                "-H",
                "Content-Type: application/vnd.oci.image.manifest.v1+json",
            ])
            .args(["--data-binary", &manifest.to_string()])
            .arg(format!(
                "https://127.0.0.1:{}/v2/models/m/manifests/foreign",
                reg.port
            )),
        "curl PUT manifest",
    );
    let text = reg.fails(
        &env,
        3,
        &[
            "unpack",
            &reg.reference("models/m:foreign"),
            "--trust",
            "k.pub",
            "--dest",
            "out",
        ],
    );
    assert!(text.contains("no airlock manifest"), "{text}");
    assert!(!env.path("out").exists());
}

#[test]
fn a_tampered_layer_in_the_registry_is_exit_3_and_nothing_is_installed() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let target = reg.reference("models/m:1");
    reg.ok(&env, &["push", "b", &target, "--trust", "k.pub"]);
    let blob = reg.blob_file(&sha256_hex(
        &std::fs::read(env.path("m/weights/part-2.bin")).unwrap(),
    ));
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[1000] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    let text = reg.fails(
        &env,
        3,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert!(
        text.contains("weights/part-2.bin") && text.contains("does not match the signed manifest"),
        "{text}"
    );
    assert!(!env.path("out").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());

    // A longer blob is refused at the first byte past the signed size.
    bytes[1000] ^= 1;
    bytes.extend_from_slice(b"more");
    std::fs::write(&blob, &bytes).unwrap();
    reg.fails(
        &env,
        3,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert!(!env.path("out").exists());
}

#[test]
fn pushing_a_damaged_bundle_uploads_nothing() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let vol = env.path("b/data.000");
    let mut bytes = std::fs::read(&vol).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&vol, &bytes).unwrap();
    reg.fails(
        &env,
        3,
        &[
            "push",
            "b",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
        ],
    );
    assert_eq!(reg.uploads(), 0, "{}", reg.log());
    assert_eq!(reg.storage_bytes(), 0);
}

#[test]
fn a_transfer_cut_once_resumes_and_installs() {
    let reg = Registry::start();
    let env = Env::new();
    let model = big_model(&env, "m", 12 << 20);
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    reg.ok(
        &env,
        &[
            "push",
            "b",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
        ],
    );
    let relay = relay(&reg, 3 << 20, Cut::Once);
    let target = format!("oci://127.0.0.1:{}/models/m:1", relay.port);
    reg.ok(
        &env,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert!(relay.fired.load(Ordering::SeqCst), "the relay never cut");
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&model));
    // The resumed request asked for the rest only.
    assert!(reg.log().contains("206"), "no ranged GET in the log");
}

#[test]
fn a_registry_killed_mid_transfer_is_exit_1_and_nothing_is_installed() {
    let reg = Registry::start();
    let env = Env::new();
    big_model(&env, "m", 12 << 20);
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    reg.ok(
        &env,
        &[
            "push",
            "b",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
        ],
    );
    let relay = relay(&reg, 3 << 20, Cut::KillRegistry);
    let target = format!("oci://127.0.0.1:{}/models/m:1", relay.port);
    let text = reg.fails(
        &env,
        1,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert!(relay.fired.load(Ordering::SeqCst));
    assert!(
        text.contains(&format!("registry 127.0.0.1:{}", relay.port)),
        "{text}"
    );
    assert!(!env.path("out").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());
    // And a registry that is not there at all.
    let text = reg.fails(
        &env,
        1,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    assert!(text.contains("cannot connect"), "{text}");
}

#[test]
fn tls_needs_the_site_ca_and_references_are_checked() {
    let reg = Registry::start();
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    // Without --ca-file the test CA is not trusted.
    let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "push",
            "b",
            &reg.reference("models/m:1"),
            "--trust",
            "k.pub",
        ])
        .current_dir(env.dir.path())
        .env("DOCKER_CONFIG", reg.path("docker"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("certificate"));
    assert_eq!(reg.uploads(), 0);
    let text = reg.fails(
        &env,
        2,
        &["push", "b", "oci://127.0.0.1/Models:1", "--trust", "k.pub"],
    );
    assert!(text.contains("not a registry reference"), "{text}");
}
