//! Every source feeds every target (issue 20): the combinations nobody wired by hand.
//!
//! - A delta installs into a Hugging Face cache over the revision airlock put there, and the
//!   real `huggingface_hub` resolves the new revision offline; `pack --hf-repo --base` makes it.
//! - `unpack oci://... --hf-cache` installs from a registry into a cache, delta tags included.
//! - `unpack BUNDLE|oci://... --oci-layout DIR[:TAG]` writes an OCI image layout holding the
//!   artifact `push` publishes: Debian's `skopeo` and the `oras` Python package read it and copy
//!   it into a real registry, from which airlock installs the same tree; an existing layout is
//!   updated (a new tag, shared blobs) and a kill -9 never corrupts it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::hfcache::{COMMIT_A, COMMIT_B, REPO, assert_client_resolves, build, verify_at};
use crate::oci::{Registry, delta_versions, digests, venv_python};
use crate::support::*;

/// The files of revision 1 (`flip`: bytes XORed into the random file to make revision 2).
fn revision(flip: &[usize], config: &str) -> Value {
    json!([
        {"path": "config.json", "lfs": false, "text": config},
        {"path": "model.safetensors", "lfs": true, "safetensors": 7},
        {"path": "weights/part.bin", "lfs": true, "random": 3_000_000, "seed": 5, "flip": flip},
        {"path": "tokenizer/vocab.txt", "lfs": false, "text": "a\nb\nc\n"},
    ])
}

fn pack_hf(env: &Env, out: &str, version: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "pack",
        "--hf-repo",
        REPO,
        "--hf-cache",
        "staging",
        "-o",
        out,
        "--key",
        "k.key",
        "--version",
        version,
    ];
    args.extend(extra);
    let (code, j) = env.json(&args);
    assert_eq!(code, 0, "{j:#}");
    j
}

/// Two revisions in the staging host's cache (the real huggingface_hub wrote them), packed in
/// full (`b1`) and as a delta of revision 2 over revision 1's bundle (`d2`). Returns what
/// huggingface_hub wrote for revision 2.
fn two_revisions(env: &Env) -> Value {
    build(
        env,
        "staging",
        COMMIT_A,
        revision(&[], "{\"hidden\": 32}\n"),
        true,
    );
    pack_hf(env, "b1", "1", &[]);
    let built2 = build(
        env,
        "staging",
        COMMIT_B,
        revision(
            &[100, 200_000, 2_999_999],
            "{\"hidden\": 32, \"rope\": 2}\n",
        ),
        true,
    );
    let j = pack_hf(env, "d2", "2", &["--base", "b1"]);
    assert_eq!(j["base"]["version"], 1, "{j:#}");
    // Unchanged files are taken from the base; the large file with three changed bytes is
    // patched against revision 1's (extracted from its verified bundle); the config carried.
    assert_eq!(j["delta"]["copied_files"], 2, "{j:#}");
    assert_eq!(j["delta"]["patched_files"], 1, "{j:#}");
    assert!(
        j["delta"]["patch_bytes"].as_u64().unwrap() < 100_000,
        "{j:#}"
    );
    let m: Value =
        serde_json::from_slice(&std::fs::read(env.path("d2/manifest.json")).unwrap()).unwrap();
    assert_eq!(m["source"]["commit"], COMMIT_B);
    for (i, f) in m["files"].as_array().unwrap().iter().enumerate() {
        let path = f["path"].as_str().unwrap();
        assert_eq!(m["source"]["etags"][i], built2[path]["etag"], "{path}");
    }
    built2
}

#[test]
fn a_delta_installs_into_a_hugging_face_cache_over_the_revision_airlock_put_there() {
    let env = Env::new();
    let built2 = two_revisions(&env);

    // The target's cache first holds revision 1, from its full bundle.
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--hf-cache", "target"]);
    // A cache without it: the delta is refused (exit 3) and the cache is left as it was.
    std::fs::create_dir(env.path("empty")).unwrap();
    let (code, j) = env.json(&["unpack", "d2", "--trust", "k.pub", "--hf-cache", "empty"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "delta-base", "{j:#}");
    assert_eq!(
        std::fs::read_dir(env.path("empty"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != ".locks")
            .count(),
        0
    );

    let (code, j) = env.json(&["unpack", "d2", "--trust", "k.pub", "--hf-cache", "target"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["commit"], COMMIT_B, "{j:#}");
    assert_eq!(j["previous_commit"], COMMIT_A, "{j:#}");
    // huggingface_hub resolves revision 2 offline, byte for byte, and still revision 1.
    let v = assert_client_resolves(&env, "target", REPO, &built2);
    let commits: Vec<&str> = v["repos"][0]["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["commit"].as_str().unwrap())
        .collect();
    assert_eq!(commits, [COMMIT_A, COMMIT_B]);
    let v1 = verify_at(
        &env,
        "target",
        ("model", REPO, COMMIT_A),
        &["weights/part.bin".to_string()],
    );
    assert_eq!(v1["errors"], json!({}), "{v1:#}");
    env.ok(&["check", "--hf-cache", "target", "--hf-repo", REPO]);

    // The base rotted in the cache: the delta names the file, nothing changes.
    let target2 = env.path("target2");
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--hf-cache", "target2"]);
    let blob = std::fs::canonicalize(target2.join(format!(
        "models--acme--tiny-model/snapshots/{COMMIT_A}/weights/part.bin"
    )))
    .unwrap();
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[7] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    let (code, j) = env.json(&["unpack", "d2", "--trust", "k.pub", "--hf-cache", "target2"]);
    assert_eq!(code, 3, "{j:#}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("weights/part.bin"),
        "{j:#}"
    );
    assert!(
        !target2
            .join(format!("models--acme--tiny-model/snapshots/{COMMIT_B}"))
            .exists()
    );
}

#[test]
fn a_registry_installs_into_a_hugging_face_cache_full_and_delta_tags() {
    let reg = Registry::start();
    let env = Env::new();
    let built2 = two_revisions(&env);
    let v1 = reg.reference("models/tiny:1");
    let v2 = reg.reference("models/tiny:2");
    reg.ok(&env, &["push", "b1", &v1, "--trust", "k.pub"]);
    reg.ok(&env, &["push", "d2", &v2, "--trust", "k.pub"]);
    // The delta tag holds the whole revision 2: it installs into an empty cache.
    reg.ok(
        &env,
        &["unpack", &v2, "--trust", "k.pub", "--hf-cache", "node"],
    );
    assert_client_resolves(&env, "node", REPO, &built2);
    // And the full tag beside it.
    reg.ok(
        &env,
        &["unpack", &v1, "--trust", "k.pub", "--hf-cache", "node"],
    );
    env.ok(&["check", "--hf-cache", "node", "--hf-repo", REPO]);
}

/// The `oras` Python package (in the test venv) reading the layout: it must validate, list
/// every blob of the tag, and push the layout into the registry under `target`.
const ORAS: &str = r#"
import json, sys
import oras.provider
from oras.layout.layout import Layout
spec = json.load(sys.stdin)
layout = Layout(spec["layout"])
layout.validate()
blobs = layout.get_ordered_blobs(spec["tag"])
reg = oras.provider.Registry(hostname=spec["host"], tls_verify=spec["ca"], auth_backend="basic")
reg.auth.set_basic_auth(spec["user"], spec["password"])
layout.push_to_registry(provider=reg, target=spec["target"], tag=spec["tag"])
json.dump({"blobs": blobs}, sys.stdout)
"#;

fn oras(input: &Value) -> Value {
    use std::io::Write;
    let mut child = Command::new(venv_python())
        .args(["-c", ORAS])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the venv's python (scripts/setup.sh)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "oras failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn skopeo(args: &[&str]) -> Vec<u8> {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .expect("skopeo is missing: run scripts/setup.sh");
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn index(layout: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap()
}

fn blob_count(layout: &Path) -> usize {
    std::fs::read_dir(layout.join("blobs/sha256"))
        .unwrap()
        .count()
}

#[test]
fn an_oci_layout_holds_the_pushed_artifact_and_skopeo_and_oras_copy_it_into_a_registry() {
    let reg = Registry::start();
    let env = Env::new();
    delta_versions(&env);
    let layout = env.path("layout");

    env.ok(&[
        "unpack",
        "b1",
        "--trust",
        "k.pub",
        "--oci-layout",
        "layout:v1",
    ]);
    let after_v1 = blob_count(&layout);
    // A delta onto the base the layout holds: its unchanged files are the same blobs.
    let (code, j) = env.json(&[
        "unpack",
        "d2",
        "--trust",
        "k.pub",
        "--oci-layout",
        "layout:v2",
    ]);
    assert_eq!(code, 0, "{j:#}");
    assert!(j["blobs_reused"].as_u64().unwrap() >= 2, "{j:#}");
    let idx = index(&layout);
    let tags: Vec<&str> = idx["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .unwrap()
        })
        .collect::<Vec<_>>();
    assert_eq!(tags, ["v1", "v2"]);
    assert!(blob_count(&layout) < 2 * after_v1, "blobs are shared");

    // The same artifact push publishes: skopeo sees it...
    let raw: Value = serde_json::from_slice(&skopeo(&[
        "inspect",
        "--raw",
        &format!("oci:{}:v2", layout.display()),
    ]))
    .unwrap();
    assert_eq!(
        raw["artifactType"],
        "application/vnd.cncf.model.manifest.v1+json"
    );
    // (A delta is pushed over its base, already in the repository.)
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
            "push",
            "d2",
            &reg.reference("models/m:pushed"),
            "--trust",
            "k.pub",
        ],
    );
    let pushed: Value = serde_json::from_slice(&reg.curl(
        "models/m/manifests/pushed",
        raw["mediaType"].as_str().unwrap(),
    ))
    .unwrap();
    assert_eq!(
        raw, pushed,
        "the layout holds the very image manifest push publishes"
    );

    // ...and copies it into a registry, from which airlock installs version 1 whole.
    let certs = env.path("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::copy(reg.path("ca.pem"), certs.join("ca.crt")).unwrap();
    skopeo(&[
        "copy",
        "--dest-cert-dir",
        certs.to_str().unwrap(),
        "--dest-creds",
        &format!("{}:{}", crate::oci::USER, crate::oci::PASSWORD),
        &format!("oci:{}:v1", layout.display()),
        &format!("docker://127.0.0.1:{}/models/m:skopeo", reg.port),
    ]);
    reg.ok(
        &env,
        &[
            "unpack",
            &reg.reference("models/m:skopeo"),
            "--trust",
            "k.pub",
            "--dest",
            "from-skopeo",
        ],
    );
    assert_eq!(
        digests(tree_without_receipt(&env.path("from-skopeo"))),
        digests(tree(&env.path("v1")))
    );

    // The oras package validates the layout and pushes version 2 (a delta's full tree).
    let out = oras(&json!({
        "layout": layout,
        "tag": "v2",
        "host": format!("127.0.0.1:{}", reg.port),
        "ca": reg.path("ca.pem"),
        "user": crate::oci::USER,
        "password": crate::oci::PASSWORD,
        "target": format!("127.0.0.1:{}/models/m:oras", reg.port),
    }));
    assert!(out["blobs"].as_array().unwrap().len() >= 8, "{out:#}");
    reg.ok(
        &env,
        &[
            "unpack",
            &reg.reference("models/m:oras"),
            "--trust",
            "k.pub",
            "--dest",
            "from-oras",
        ],
    );
    assert_eq!(
        digests(tree_without_receipt(&env.path("from-oras"))),
        digests(tree(&env.path("v2")))
    );

    // And a registry artifact unpacks into a layout too.
    reg.ok(
        &env,
        &[
            "unpack",
            &reg.reference("models/m:pushed"),
            "--trust",
            "k.pub",
            "--oci-layout",
            "layout2",
        ],
    );
    assert_eq!(
        index(&env.path("layout2"))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
        "2"
    );
}

#[test]
fn a_killed_unpack_never_corrupts_an_oci_layout() {
    let env = Env::new();
    delta_versions(&env);
    env.ok(&[
        "unpack",
        "b1",
        "--trust",
        "k.pub",
        "--oci-layout",
        "layout:v1",
    ]);
    let layout = env.path("layout");
    let good_index = std::fs::read(layout.join("index.json")).unwrap();
    // Kill version 2's unpack at different points: when its work directory appears, and later.
    for delay_ms in [0u64, 30, 120] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args([
                "unpack",
                "d2",
                "--trust",
                "k.pub",
                "--oci-layout",
                "layout:v2",
            ])
            .current_dir(env.dir.path())
            .env_remove("AIRLOCK_TRUST")
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while staging_leftovers(&layout).is_empty()
            && start.elapsed() < std::time::Duration::from_secs(20)
            && child.try_wait().unwrap().is_none()
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Whatever the kill interrupted, the layout reads as before or with v2 complete.
        let now = std::fs::read(layout.join("index.json")).unwrap();
        let idx: Value = serde_json::from_slice(&now).unwrap();
        for d in idx["manifests"].as_array().unwrap() {
            let tag = d["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .unwrap();
            skopeo(&[
                "inspect",
                "--raw",
                &format!("oci:{}:{tag}", layout.display()),
            ]);
        }
        if now != good_index {
            // It finished: then v2 is complete.
            break;
        }
    }
    // A rerun completes and removes what the killed ones left.
    env.ok(&[
        "unpack",
        "d2",
        "--trust",
        "k.pub",
        "--oci-layout",
        "layout:v2",
    ]);
    assert!(
        staging_leftovers(&layout).is_empty(),
        "{:?}",
        staging_leftovers(&layout)
    );
    for tag in ["v1", "v2"] {
        skopeo(&[
            "inspect",
            "--raw",
            &format!("oci:{}:{tag}", layout.display()),
        ]);
    }
    // Nothing airlock did not make is ever written there: a layout from another tool with
    // foreign files is refused, a non-empty directory that is not a layout is left alone.
    std::fs::create_dir(env.path("notes")).unwrap();
    env.write("notes/todo.txt", b"x");
    let text = env.fails(
        2,
        &["unpack", "b1", "--trust", "k.pub", "--oci-layout", "notes"],
    );
    assert!(text.contains("neither an OCI image layout"), "{text}");
    assert_eq!(
        std::fs::read_dir(env.path("notes")).unwrap().count(),
        1,
        "nothing written"
    );
    let _: PathBuf = layout;
}

/// Issue 36 item 7. Before: SIGINT during the first `unpack --oci-layout` into a new directory
/// left `blobs/` (up to the whole model) without `oci-layout` or `index.json`, and the same
/// command then failed (exit 2, "neither an OCI image layout nor empty", no hint), although
/// the interrupt message said a rerun reuses the blobs. Now `oci-layout` is written before the
/// first blob, so the rerun completes the layout, reusing the blobs; a directory an earlier
/// airlock left that way is completed too; anything else is still refused, with a hint.
#[test]
fn an_interrupted_first_unpack_into_a_new_oci_layout_is_completed_by_the_rerun() {
    let env = Env::new();
    env.model("m");
    for i in 0..6 {
        env.write(
            &format!("m/shard-{i}.bin"),
            &pseudo_random(16 << 20, 70 + i),
        );
    }
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
    ]);
    let layout = env.path("layout");
    let args = [
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--oci-layout",
        "layout:v1",
        "--progress",
        "none",
    ];
    let blobs = |dir: &Path| std::fs::read_dir(dir.join("blobs/sha256")).map_or(0, |d| d.count());
    let mut interrupted = 0;
    for attempt in 0..5 {
        let _ = std::fs::remove_dir_all(&layout);
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .current_dir(env.dir.path())
            .env_remove("AIRLOCK_TRUST")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Interrupted once some verified blobs are in place, before the commit.
        let start = std::time::Instant::now();
        let mut done = None;
        while blobs(&layout) == 0 && start.elapsed() < std::time::Duration::from_secs(60) {
            done = child.try_wait().unwrap();
            if done.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let code = match done {
            Some(st) => st.code(),
            None => {
                let st = Command::new("kill")
                    .args(["-INT", &child.id().to_string()])
                    .status()
                    .unwrap();
                assert!(st.success());
                child.wait().unwrap().code()
            }
        };
        if code == Some(0) {
            eprintln!("attempt {attempt}: finished before the signal");
            continue;
        }
        assert_eq!(code, Some(130), "attempt {attempt}");
        interrupted += 1;
        // What it leaves: a layout without an index yet, with the blobs it had verified.
        assert!(layout.join("oci-layout").is_file(), "attempt {attempt}");
        assert!(!layout.join("index.json").exists(), "attempt {attempt}");
        assert!(blobs(&layout) > 0, "attempt {attempt}");
        assert!(staging_leftovers(&layout).is_empty(), "attempt {attempt}");
        // The same command completes it, reusing those blobs.
        let (code, j) = env.json(&args);
        assert_eq!(code, 0, "attempt {attempt}: {j:#}");
        assert!(j["blobs_reused"].as_u64().unwrap() > 0, "{j:#}");
        skopeo(&["inspect", "--raw", &format!("oci:{}:v1", layout.display())]);
        assert!(staging_leftovers(&layout).is_empty());
        if interrupted == 2 {
            break;
        }
    }
    assert!(interrupted > 0, "no run was interrupted before its commit");

    // What the earlier airlock left (blobs, no oci-layout, no index.json) is completed too.
    std::fs::remove_file(layout.join("oci-layout")).unwrap();
    std::fs::remove_file(layout.join("index.json")).unwrap();
    let (code, j) = env.json(&args);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["blobs_written"], 0, "{j:#}");
    skopeo(&["inspect", "--raw", &format!("oci:{}:v1", layout.display())]);

    // Anything else without oci-layout is refused, naming what is there, with a hint, and
    // left as it was: a file beside the blobs, a blob that is not named by a digest.
    std::fs::remove_file(layout.join("oci-layout")).unwrap();
    std::fs::remove_file(layout.join("index.json")).unwrap();
    env.write("layout/README", b"mine\n");
    let text = env.fails(2, &args);
    assert!(
        text.contains("neither an OCI image layout") && text.contains("\"README\""),
        "{text}"
    );
    assert!(text.contains("airlock: hint: "), "{text}");
    assert!(!layout.join("oci-layout").exists());
    std::fs::remove_file(layout.join("README")).unwrap();
    env.write("layout/blobs/sha256/notes.txt", b"mine\n");
    let text = env.fails(2, &args);
    assert!(text.contains("neither an OCI image layout"), "{text}");
    assert!(!layout.join("oci-layout").exists());
}

/// Runs skopeo, for a command that must fail: its stderr.
fn skopeo_fails(args: &[&str]) -> String {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .expect("skopeo is missing: run scripts/setup.sh");
    assert!(!out.status.success(), "skopeo {args:?} passed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Issue 33 item 8. Before: the docs said skopeo reads the layout, but plain `skopeo inspect
/// oci:DIR:TAG` fails on it. The artifact stays ModelPack (its config is the model config), so
/// CLI.md now lists the skopeo commands that work and those that do not, and why; each runs
/// here with the real skopeo, as listed.
#[test]
fn the_skopeo_commands_the_docs_list_work_on_a_layout_and_the_others_fail_as_said() {
    let env = Env::new();
    delta_versions(&env);
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--oci-layout", "lay:1"]);
    let lay = env.path("lay");
    let src = format!("oci:{}:1", lay.display());
    let digest = index(&lay)["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let blob = |layout: &Path, digest: &str| {
        std::fs::read(
            layout
                .join("blobs/sha256")
                .join(digest.trim_start_matches("sha256:")),
        )
        .unwrap()
    };
    let manifest = blob(&lay, &digest);

    let cli =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CLI.md")).unwrap();
    let section = &cli[cli
        .find("### skopeo and the OCI image layout")
        .expect("CLI.md lists the skopeo commands")..];
    let section = &section[..section.find("\n## ").unwrap()];
    let listed = |command: &str| {
        assert!(
            section.contains(&format!("`{command}")),
            "CLI.md lists `{command}`"
        )
    };

    // What works: the manifest and config as they are, copies to other layouts, dir:, archives.
    listed("skopeo inspect --raw oci:DIR:TAG");
    assert_eq!(skopeo(&["inspect", "--raw", &src]), manifest);
    listed("skopeo inspect --config --raw oci:DIR:TAG");
    let config: Value =
        serde_json::from_slice(&skopeo(&["inspect", "--config", "--raw", &src])).unwrap();
    assert!(config["modelfs"]["diffIds"].is_array(), "{config:#}");
    listed("skopeo copy oci:DIR:TAG oci:OTHER:TAG");
    let other = env.path("other");
    skopeo(&["copy", &src, &format!("oci:{}:1", other.display())]);
    assert_eq!(index(&other)["manifests"][0]["digest"], digest.as_str());
    assert_eq!(blob(&other, &digest), manifest);
    let dir = env.path("d");
    skopeo(&["copy", &src, &format!("dir:{}", dir.display())]);
    assert_eq!(std::fs::read(dir.join("manifest.json")).unwrap(), manifest);
    skopeo(&[
        "copy",
        &src,
        &format!("oci-archive:{}:1", env.path("a.tar").display()),
    ]);
    assert!(env.path("a.tar").is_file());

    // What does not, with the reason CLI.md quotes.
    let reason = r#"unsupported image-specific operation on artifact with type \"application/vnd.cncf.model.config.v1+json\""#;
    let flowed = section.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flowed.contains(&reason.replace("\\\"", "\"")),
        "CLI.md quotes the error"
    );
    for (command, args) in [
        ("skopeo inspect oci:DIR:TAG", vec!["inspect", src.as_str()]),
        (
            "skopeo inspect --config oci:DIR:TAG",
            vec!["inspect", "--config", src.as_str()],
        ),
    ] {
        listed(command);
        let err = skopeo_fails(&args);
        assert!(err.contains(reason), "{command}: {err}");
    }
    listed("skopeo copy oci:DIR:TAG docker-archive:FILE");
    let archive = format!("docker-archive:{}:m:1", env.path("da.tar").display());
    let err = skopeo_fails(&["copy", &src, &archive]);
    assert!(err.contains(reason), "{err}");
    listed("skopeo list-tags oci:DIR");
    let err = skopeo_fails(&["list-tags", &format!("oci:{}", lay.display())]);
    assert!(
        err.contains("Unsupported transport 'oci' for tag listing"),
        "{err}"
    );
}
