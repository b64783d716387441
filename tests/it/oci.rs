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

pub(crate) const USER: &str = "alice";
pub(crate) const PASSWORD: &str = "correct horse";

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

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `docker-registry` with its CA, htpasswd, storage and log in a temp dir.
pub(crate) struct Registry {
    dir: tempfile::TempDir,
    child: Arc<Mutex<Child>>,
    pub(crate) port: u16,
}

impl Registry {
    pub(crate) fn start() -> Registry {
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

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.path("registry.log")).unwrap_or_default()
    }

    /// Blob uploads started (POST .../blobs/uploads/), from the registry's access log.
    pub(crate) fn uploads(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("\"POST /v2/") && l.contains("/blobs/uploads/"))
            .count()
    }

    /// Writes `docker/config.json` with an `auths` entry per (port, password).
    pub(crate) fn docker_config(&self, entries: &[(u16, &str)]) {
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

    pub(crate) fn reference(&self, repo_tag: &str) -> String {
        format!("oci://127.0.0.1:{}/{repo_tag}", self.port)
    }

    /// Runs airlock in `env`'s tree with this registry's docker config and CA.
    pub(crate) fn airlock(&self, env: &Env, args: &[&str]) -> Output {
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

    pub(crate) fn ok(&self, env: &Env, args: &[&str]) -> String {
        let out = self.airlock(env, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "airlock {args:?}: {text}");
        text
    }

    pub(crate) fn fails(&self, env: &Env, code: i32, args: &[&str]) -> String {
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
    pub(crate) fn blob_file(&self, sha256: &str) -> PathBuf {
        self.path(&format!(
            "storage/docker/registry/v2/blobs/sha256/{}/{sha256}/data",
            &sha256[..2]
        ))
    }

    /// GET with curl (an independent client), authenticated, trusting the test CA.
    pub(crate) fn curl(&self, path: &str, accept: &str) -> Vec<u8> {
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
pub(crate) fn big_model(env: &Env, rel: &str, weight_bytes: usize) -> PathBuf {
    let m = env.model(rel);
    env.write(
        &format!("{rel}/model.safetensors.bin"),
        &pseudo_random(weight_bytes, 7),
    );
    m
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
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

/// The Python of the venv `scripts/make-fixtures.py --venv-only` makes ($AIRLOCK_VENV,
/// default `<repo>/.venv`), which has the real `safetensors` package.
pub(crate) fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin").join("python");
    assert!(
        python.is_file(),
        "the safetensors package is not installed for the tests: {} does not exist. Run \
         `python3 scripts/make-fixtures.py --venv-only`, or point AIRLOCK_VENV at a venv with \
         scripts/requirements-test.txt installed",
        python.display()
    );
    python
}

/// Two bf16 shards written by the real safetensors writer (shard 2 over 8 MiB, so installs
/// stream it), an index and a config. Version 2 retrains 2% of shard 2's elements and changes
/// the config.
const SYNTH: &str = r#"
import json, os, sys
import numpy as np
from safetensors import TensorSpec, serialize_file

out, v = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
weight_map, keep = {}, []
for i in (1, 2):
    rng = np.random.default_rng(100 + i)
    name = f"model-{i:05d}-of-00002.safetensors"
    tensors = {}
    for t, n in (("attn", 1 << 20), ("mlp", 3 << 20)):
        data = rng.integers(0, 1 << 16, n, dtype=np.uint16)
        if v == 2 and i == 2:
            step = np.random.default_rng(7 + (t == "mlp"))
            idx = step.choice(n, size=n // 50, replace=False)
            data[idx] = step.integers(0, 1 << 16, idx.size, dtype=np.uint16)
        data[(data & 0x7F80) == 0x7F80] &= 0xFF7F  # random bits, but no NaN or Inf (the value scan)
        keep.append(data)
        key = f"layers.{i}.{t}.weight"
        tensors[key] = TensorSpec(dtype="bfloat16", shape=[n // 256, 256],
                                  data_ptr=data.ctypes.data, data_len=data.nbytes)
        weight_map[key] = name
    serialize_file(tensors, os.path.join(out, name), metadata={"format": "pt"})
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16"}
if v == 2:
    config["rope_theta"] = 500000.0
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
json.dump({"metadata": {"total_size": 16 << 20}, "weight_map": weight_map},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
"#;

fn synth(env: &Env, rel: &str, version: u32) {
    let out = Command::new(venv_python())
        .args([
            "-c",
            SYNTH,
            env.path(rel).to_str().unwrap(),
            &version.to_string(),
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "synth {version}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Version 1 packed in full and, on the landing host, installed into `base`; version 2 packed
/// as a delta over it (`d2`): shard 1 and the index copied, shard 2 patched (`safetensors`
/// map), `extra.bin` and the config patched (`bytes` map), a new file carried.
pub(crate) fn delta_versions(env: &Env) {
    synth(env, "v1", 1);
    env.write("v1/extra.bin", &pseudo_random(1 << 20, 11));
    env.ok(&[
        "pack",
        "v1",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "1",
    ]);
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "base"]);
    synth(env, "v2", 2);
    let mut extra = pseudo_random(1 << 20, 11);
    for at in [10, 4096, 500_000, (1 << 20) - 1] {
        extra[at] ^= 0x5a;
    }
    env.write("v2/extra.bin", &extra);
    env.write("v2/generation_config.json", b"{\"temperature\": 0.6}\n");
    env.ok(&[
        "pack",
        "v2",
        "-o",
        "d2",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "base",
    ]);
}

/// A tree as `(path, sha256)` (the safetensors writer makes 0600 files; installs are 0644).
pub(crate) fn digests(t: Vec<(String, u32, Option<Vec<u8>>)>) -> Vec<(String, Option<String>)> {
    t.into_iter()
        .map(|(p, _, c)| (p, c.map(|c| sha256_hex(&c))))
        .collect()
}

/// `(path, op)` of every file of a bundle's manifest (`carried` for files in the stream).
fn ops(env: &Env, bundle: &str) -> Vec<(String, String)> {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.path(bundle).join("manifest.json")).unwrap())
            .unwrap();
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let op = match &f["from"] {
                serde_json::Value::Null => "carried".to_string(),
                from => format!(
                    "{}{}",
                    from["op"].as_str().unwrap(),
                    from["map"]
                        .as_str()
                        .map(|m| format!(" {m}"))
                        .unwrap_or_default()
                ),
            };
            (f["path"].as_str().unwrap().to_string(), op)
        })
        .collect()
}

#[test]
fn a_delta_is_pushed_over_its_base_and_installs_whole_from_the_registry() {
    let reg = Registry::start();
    let env = Env::new();
    delta_versions(&env);
    let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(p, o)| (p.to_string(), o.to_string()))
            .collect()
    };
    assert_eq!(
        ops(&env, "d2"),
        owned(&[
            ("config.json", "xor bytes"),
            ("extra.bin", "xor bytes"),
            ("generation_config.json", "carried"),
            ("model-00001-of-00002.safetensors", "copy"),
            ("model-00002-of-00002.safetensors", "xor safetensors"),
            ("model.safetensors.index.json", "copy"),
        ])
    );
    let v1 = reg.reference("models/m:1");
    let v2 = reg.reference("models/m:2");

    // The base is not in the repository yet: refused, naming it, before any upload.
    let err = reg.fails(&env, 1, &["push", "d2", &v2, "--trust", "k.pub"]);
    assert!(
        err.contains("push m version 1 to oci://") && err.contains("or push the full bundle"),
        "{err}"
    );
    assert_eq!(reg.uploads(), 0, "{}", reg.log());
    assert_eq!(reg.storage_bytes(), 0);

    reg.ok(&env, &["push", "b1", &v1, "--trust", "k.pub"]);
    let uploads = reg.uploads();
    let before = reg.storage_bytes();
    let out = reg.airlock(&env, &["push", "d2", &v2, "--trust", "k.pub", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Only the changed files and the airlock layers; the copied files are the base's blobs.
    let mut uploaded: Vec<&str> = doc["uploaded_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    uploaded.sort_unstable();
    assert_eq!(
        uploaded,
        [
            ".airlock/manifest.json",
            ".airlock/manifest.json.minisig",
            "config.json",
            "extra.bin",
            "generation_config.json",
            "model-00002-of-00002.safetensors",
        ],
        "{doc}"
    );
    assert_eq!(doc["layers"], 8, "{doc}");
    // The changed blobs, the airlock manifest and signature, the ModelPack config.
    assert_eq!(reg.uploads() - uploads, 7, "{}", reg.log());
    let shard = std::fs::read(env.path("v2/model-00002-of-00002.safetensors")).unwrap();
    assert_eq!(
        std::fs::read(reg.blob_file(&sha256_hex(&shard))).unwrap(),
        shard
    );
    assert!(reg.storage_bytes() - before < 12 << 20);
    // The config was patched, not carried: its precision still reaches the ModelPack config.
    let manifest: serde_json::Value = serde_json::from_slice(&reg.curl(
        "models/m/manifests/2",
        "application/vnd.oci.image.manifest.v1+json",
    ))
    .unwrap();
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 8);
    let config: serde_json::Value = serde_json::from_slice(&reg.curl(
        &format!(
            "models/m/blobs/{}",
            manifest["config"]["digest"].as_str().unwrap()
        ),
        "*/*",
    ))
    .unwrap();
    assert_eq!(config["config"]["precision"], "bf16", "{config}");

    // A node with nothing installed gets the whole version 2.
    reg.ok(
        &env,
        &["unpack", &v2, "--trust", "k.pub", "--dest", "fresh"],
    );
    assert_eq!(
        digests(tree_without_receipt(&env.path("fresh"))),
        digests(tree(&env.path("v2")))
    );
    env.ok(&["check", "fresh", "--trust", "k.pub"]);
    // A node on version 1 is replaced by it.
    reg.ok(&env, &["unpack", &v1, "--trust", "k.pub", "--dest", "node"]);
    let text = reg.ok(
        &env,
        &[
            "unpack",
            &v2,
            "--trust",
            "k.pub",
            "--dest",
            "node",
            "--replace",
        ],
    );
    assert!(text.contains("version 2"), "{text}");
    assert_eq!(
        digests(tree_without_receipt(&env.path("node"))),
        digests(tree(&env.path("v2")))
    );
    assert!(staging_leftovers(env.dir.path()).is_empty());

    // Pushing the delta again uploads nothing.
    let uploads = reg.uploads();
    reg.ok(&env, &["push", "d2", &v2, "--trust", "k.pub"]);
    assert_eq!(reg.uploads(), uploads, "{}", reg.log());

    // A chain: version 3 as a delta over the version 2 a node installed from the registry
    // (whose airlock manifest is the delta's): pushed over it, installed whole.
    std::fs::create_dir_all(env.path("v3")).unwrap();
    for f in std::fs::read_dir(env.path("v2")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), env.path("v3").join(f.file_name())).unwrap();
    }
    let mut extra = std::fs::read(env.path("v3/extra.bin")).unwrap();
    extra[777_777] ^= 0x11;
    env.write("v3/extra.bin", &extra);
    env.ok(&[
        "pack",
        "v3",
        "-o",
        "d3",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "3",
        "--base",
        "node",
    ]);
    assert!(ops(&env, "d3").contains(&("extra.bin".into(), "xor bytes".into())));
    let v3 = reg.reference("models/m:3");
    let uploads = reg.uploads();
    reg.ok(&env, &["push", "d3", &v3, "--trust", "k.pub"]);
    // extra.bin, the airlock manifest and signature, the ModelPack config.
    assert_eq!(reg.uploads() - uploads, 4, "{}", reg.log());
    reg.ok(
        &env,
        &["unpack", &v3, "--trust", "k.pub", "--dest", "fresh3"],
    );
    assert_eq!(
        digests(tree_without_receipt(&env.path("fresh3"))),
        digests(tree(&env.path("v3")))
    );
}

#[test]
fn a_delta_push_over_a_damaged_base_blob_is_exit_3_and_publishes_nothing() {
    let reg = Registry::start();
    let env = Env::new();
    delta_versions(&env);
    let v2 = reg.reference("models/m:2");
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
    // The stored base of the patched shard rots (same size, one bit).
    let base_shard = std::fs::read(env.path("v1/model-00002-of-00002.safetensors")).unwrap();
    let blob = reg.blob_file(&sha256_hex(&base_shard));
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[5 << 20] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();

    let err = reg.fails(&env, 3, &["push", "d2", &v2, "--trust", "k.pub"]);
    assert!(
        err.contains("the base of model-00002-of-00002.safetensors"),
        "{err}"
    );
    // The new shard was never stored and the tag was not written.
    let new_shard = std::fs::read(env.path("v2/model-00002-of-00002.safetensors")).unwrap();
    assert!(!reg.blob_file(&sha256_hex(&new_shard)).exists());
    let text = reg.fails(
        &env,
        1,
        &["unpack", &v2, "--trust", "k.pub", "--dest", "out"],
    );
    assert!(text.contains("no such tag"), "{text}");
    assert!(!env.path("out").exists());
}

/// Issue 21: a bundle signed by two of three release officers and carrying a root update is
/// published with its co-signature and root as layers of their own; `unpack oci://` with the
/// target's root.json counts both signatures, adopts the new root after installing and keeps
/// the co-signature in the receipt. Without the co-signature layer the same artifact is short
/// of the threshold: exit 3, nothing installed, the root unchanged.
#[test]
fn a_multi_signed_bundle_with_a_root_update_installs_from_the_registry() {
    let reg = Registry::start();
    let env = Env::new();
    for k in ["alice", "bob", "carol", "sec1"] {
        env.ok(&["keygen", "--out", k, "--unencrypted"]);
    }
    let init = |out: &str, version_of: Option<&str>, expires: &str| {
        let mut args = vec!["trust"];
        match version_of {
            None => args.extend(["init", "--out", out]),
            Some(prev) => args.extend(["rotate", prev, "--out", out]),
        }
        args.extend([
            "--key",
            "alice.pub",
            "--key",
            "bob.pub",
            "--key",
            "carol.pub",
            "--threshold",
            "2",
            "--root-key",
            "sec1.pub",
            "--root-threshold",
            "1",
            "--expires",
            expires,
        ]);
        env.ok(&args);
        env.ok(&["trust", "sign", out, "--key", "sec1.key"]);
    };
    init("root.json", None, "2099-01-01");
    init("root2.json", Some("root.json"), "2099-06-01");
    std::fs::create_dir(env.path("t")).unwrap();
    std::fs::copy(env.path("root.json"), env.path("t/root.json")).unwrap();
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "alice.key",
        "--trust-update",
        "root2.json",
    ]);
    env.ok(&["cosign", "b", "--key", "bob.key"]);
    let target = reg.reference("models/m:1");
    reg.ok(&env, &["push", "b", &target, "--trust", "t/root.json"]);
    reg.ok(
        &env,
        &["unpack", &target, "--trust", "t/root.json", "--dest", "out"],
    );
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&env.path("m")));
    let bob = std::fs::read_to_string(env.path("bob.pub")).unwrap();
    let bob_id = bob.lines().next().unwrap().rsplit(' ').next().unwrap();
    assert!(
        env.path(&format!("out/.airlock/manifest.json.{bob_id}.minisig"))
            .is_file()
    );
    assert_eq!(
        std::fs::read(env.path("t/root.json")).unwrap(),
        std::fs::read(env.path("root2.json")).unwrap()
    );
    env.ok(&["check", "out", "--trust", "t/root.json"]);

    // The same bundle published with only its first signature (as `push` with a plain key
    // set and the co-signature removed would): short of the threshold.
    std::fs::remove_file(env.path(&format!("b/manifest.json.{bob_id}.minisig"))).unwrap();
    let single = reg.reference("models/m:single");
    reg.ok(&env, &["push", "b", &single, "--trust", "alice.pub"]);
    let before = std::fs::read(env.path("t/root.json")).unwrap();
    let text = reg.fails(
        &env,
        3,
        &[
            "unpack",
            &single,
            "--trust",
            "t/root.json",
            "--dest",
            "out2",
        ],
    );
    assert!(text.contains("signed by 1 of the 2"), "{text}");
    assert!(!env.path("out2").exists());
    assert_eq!(std::fs::read(env.path("t/root.json")).unwrap(), before);
}
