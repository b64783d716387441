//! Hugging Face cache support, checked against the real `huggingface_hub`.
//!
//! Without network access nothing can be downloaded, so each source cache is built by
//! huggingface_hub's own cache-writing functions (`_create_symlink`,
//! `_cache_commit_hash_for_specific_revision`, `write_tree_cache`, `git_hash`) exactly as a
//! download leaves it, and confirmed valid with its offline readers before airlock packs it.
//! After an unpack, the destination must satisfy the same readers: `scan_cache_dir` with no
//! warnings, and `hf_hub_download` / `snapshot_download` under `HF_HUB_OFFLINE=1` resolving every
//! file with identical bytes, with nothing logged.
//!
//! The venv is the one `scripts/make-fixtures.py --venv-only` makes ($AIRLOCK_VENV, default
//! `<repo>/.venv`, huggingface_hub pinned in scripts/requirements-test.txt). Without it these
//! tests fail rather than skip.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::*;

pub(crate) const COMMIT_A: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
pub(crate) const COMMIT_B: &str = "b1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
pub(crate) const REPO: &str = "acme/tiny-model";

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin").join("python");
    assert!(
        python.is_file(),
        "huggingface_hub is not installed for the tests: {} does not exist. Run scripts/test.sh \
         (or `python3 scripts/make-fixtures.py --venv-only`), or point AIRLOCK_VENV at a venv \
         with scripts/requirements-test.txt installed",
        python.display()
    );
    python
}

/// Runs a Python script in the venv with `input` as JSON on stdin; returns its JSON stdout.
fn python(script: &str, input: &Value) -> Value {
    let mut child = Command::new(venv_python())
        .args(["-c", script])
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_UPDATE_CHECK", "1")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the venv's python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(input).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "python printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Writes a repository into a cache the way a huggingface_hub download does, using its own
/// functions. Input: `{cache, repo_type?, repo_id, commit, revision, listing, files: [{path, lfs, shared?,
/// text | random | safetensors}]}`. Output: `{path: {etag, sha256, size}}`.
const BUILD: &str = r#"
import hashlib, json, os, random, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import save
from huggingface_hub import file_download as fd
from huggingface_hub import _tree_cache as tc
from huggingface_hub.utils.sha import git_hash
from huggingface_hub.utils._shared_blobs import publish_blob_to_shared_store

spec = json.load(sys.stdin)
storage = os.path.join(spec["cache"], fd.repo_folder_name(repo_id=spec["repo_id"], repo_type=spec.get("repo_type", "model")))
entries, out = {}, {}
for f in spec["files"]:
    if "text" in f:
        data = f["text"].encode()
    elif "random" in f:
        data = random.Random(f["seed"]).randbytes(f["random"])
        if f.get("flip"):
            data = bytearray(data)
            for at in f["flip"]:
                data[at] ^= 0x5A
            data = bytes(data)
    else:
        rng = np.random.default_rng(f["safetensors"])
        data = save({"w": rng.standard_normal((64, 32), dtype=np.float32), "b": np.zeros(32, np.float32)})
    sha = hashlib.sha256(data).hexdigest()
    if f["lfs"]:
        etag = sha
        pointer_text = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n".encode()
        entries[f["path"]] = tc.TreeCacheEntry(size=len(data), blob_id=git_hash(pointer_text), lfs_sha256=sha, lfs_size=len(data))
    else:
        etag = git_hash(data)
        entries[f["path"]] = tc.TreeCacheEntry(size=len(data), blob_id=etag)
    blob = os.path.join(storage, "blobs", etag)
    pointer = fd._get_pointer_path(storage, spec["commit"], os.path.join(*f["path"].split("/")))
    os.makedirs(os.path.dirname(blob), exist_ok=True)
    os.makedirs(os.path.dirname(pointer), exist_ok=True)
    if not os.path.exists(blob):
        tmp = Path(blob + ".0123abcd.incomplete")
        tmp.write_bytes(data)
        fd._chmod_and_move(tmp, Path(blob))
        if f.get("shared"):
            # A Xet download published to the cache-wide store: the repo blob becomes a link.
            xet_hash = hashlib.sha256(b"xet" + data).hexdigest()
            assert publish_blob_to_shared_store(blob_path=blob, xet_hash=xet_hash, cache_dir=spec["cache"], expected_size=len(data))
    fd._create_symlink(blob, pointer, new_blob=False)
    out[f["path"]] = {"etag": etag, "sha256": sha, "size": len(data)}
fd._cache_commit_hash_for_specific_revision(storage, spec["revision"], spec["commit"])
if spec.get("listing", True):
    tc.write_tree_cache(storage, spec["commit"], entries)
json.dump(out, sys.stdout)
"#;

/// Resolves a repository with huggingface_hub's offline readers. Input: `{cache, repo_type,
/// repo_id, revision, files}`. Output: what `scan_cache_dir` reports, the sha256 of every file
/// `hf_hub_download` returns (offline and with local_files_only), the snapshot
/// `snapshot_download` returns with the sha256 of every file in it, and every warning
/// huggingface_hub logged or raised.
const VERIFY: &str = r#"
import hashlib, json, logging, os, sys, warnings
spec = json.load(sys.stdin)
assert os.environ.get("HF_HUB_OFFLINE") == "1"
logged = []
class Keep(logging.Handler):
    def emit(self, record):
        logged.append(record.getMessage())
logging.getLogger("huggingface_hub").addHandler(Keep(level=logging.WARNING))
def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
with warnings.catch_warnings(record=True) as raised:
    warnings.simplefilter("always")
    from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download
    info = scan_cache_dir(spec["cache"])
    repos = [
        {
            "repo_id": r.repo_id,
            "repo_type": r.repo_type,
            "nb_files": r.nb_files,
            "revisions": sorted(
                [{"commit": v.commit_hash, "refs": sorted(v.refs),
                  "files": sorted(str(f.file_path.relative_to(v.snapshot_path)) for f in v.files)}
                 for v in r.revisions],
                key=lambda v: v["commit"]),
        }
        for r in sorted(info.repos, key=lambda r: r.repo_id)
    ]
    files, errors = {}, {}
    for path in spec["files"]:
        try:
            p = hf_hub_download(spec["repo_id"], path, revision=spec["revision"], repo_type=spec["repo_type"], cache_dir=spec["cache"])
            q = hf_hub_download(spec["repo_id"], path, revision=spec["revision"], repo_type=spec["repo_type"], cache_dir=spec["cache"], local_files_only=True)
            assert p == q, (p, q)
            files[path] = sha(p)
        except Exception as e:
            errors[path] = f"{type(e).__name__}: {e}"
    snapshot, snapshot_files = None, {}
    try:
        snapshot = snapshot_download(spec["repo_id"], revision=spec["revision"], repo_type=spec["repo_type"], cache_dir=spec["cache"])
        for root, _, names in os.walk(snapshot):
            for n in names:
                full = os.path.join(root, n)
                snapshot_files[os.path.relpath(full, snapshot)] = sha(full)
    except Exception as e:
        errors["<snapshot_download>"] = f"{type(e).__name__}: {e}"
json.dump({
    "scan_warnings": [str(w) for w in info.warnings],
    "incomplete_files": len(info.incomplete_files),
    "repos": repos,
    "files": files,
    "errors": errors,
    "snapshot": snapshot,
    "snapshot_files": snapshot_files,
    "logged": logged,
    "raised": [str(w.message) for w in raised],
}, sys.stdout)
"#;

fn spec_files() -> Value {
    json!([
        {"path": ".gitattributes", "lfs": false, "text": "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
        {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\", \"hidden_size\": 32}\n"},
        {"path": "model.safetensors", "lfs": true, "safetensors": 7},
        {"path": "extra/weights.bin", "lfs": true, "random": 300000, "seed": 3},
        {"path": "tokenizer/deep/vocab.txt", "lfs": false, "text": "a\nb\nc\n"},
        {"path": "tokenizer/copy-of-vocab.txt", "lfs": false, "text": "a\nb\nc\n"},
        {"path": "empty.txt", "lfs": false, "text": ""},
    ])
}

/// Builds `REPO` at `commit` in `cache` (relative to the env) with `files`; returns the per-file
/// `{etag, sha256, size}` huggingface_hub's functions produced.
pub(crate) fn build(env: &Env, cache: &str, commit: &str, files: Value, listing: bool) -> Value {
    build_repo(env, cache, REPO, commit, files, listing)
}

/// [`build`] for repository `repo_id`.
pub(crate) fn build_repo(
    env: &Env,
    cache: &str,
    repo_id: &str,
    commit: &str,
    files: Value,
    listing: bool,
) -> Value {
    build_typed(env, cache, ("model", repo_id), commit, files, listing)
}

/// [`build`] for repository `repo = (repo_type, repo_id)`.
pub(crate) fn build_typed(
    env: &Env,
    cache: &str,
    repo: (&str, &str),
    commit: &str,
    files: Value,
    listing: bool,
) -> Value {
    let (repo_type, repo_id) = repo;
    python(
        BUILD,
        &json!({
            "cache": env.path(cache),
            "repo_type": repo_type,
            "repo_id": repo_id,
            "commit": commit,
            "revision": "main",
            "listing": listing,
            "files": files,
        }),
    )
}

fn verify(env: &Env, cache: &str, repo_id: &str, files: &[String]) -> Value {
    verify_at(env, cache, ("model", repo_id, "main"), files)
}

/// `verify` for `(repo_type, repo_id, revision)`.
pub(crate) fn verify_at(
    env: &Env,
    cache: &str,
    repo: (&str, &str, &str),
    files: &[String],
) -> Value {
    let (repo_type, repo_id, revision) = repo;
    python(
        VERIFY,
        &json!({"cache": env.path(cache), "repo_type": repo_type, "repo_id": repo_id, "revision": revision, "files": files}),
    )
}

/// Asserts huggingface_hub resolves every file of `built` in `cache` with the same bytes and
/// says nothing about it.
pub(crate) fn assert_client_resolves(
    env: &Env,
    cache: &str,
    repo_id: &str,
    built: &Value,
) -> Value {
    assert_client_resolves_typed(env, cache, ("model", repo_id), built)
}

/// [`assert_client_resolves`] for `repo = (repo_type, repo_id)`.
pub(crate) fn assert_client_resolves_typed(
    env: &Env,
    cache: &str,
    repo: (&str, &str),
    built: &Value,
) -> Value {
    let paths: Vec<String> = built.as_object().unwrap().keys().cloned().collect();
    let v = verify_at(env, cache, (repo.0, repo.1, "main"), &paths);
    assert_eq!(v["scan_warnings"], json!([]), "{v:#}");
    assert_eq!(v["errors"], json!({}), "{v:#}");
    assert_eq!(v["logged"], json!([]), "{v:#}");
    assert_eq!(v["raised"], json!([]), "{v:#}");
    for (path, info) in built.as_object().unwrap() {
        assert_eq!(v["files"][path], info["sha256"], "{path}: {v:#}");
        assert_eq!(v["snapshot_files"][path], info["sha256"], "{path}: {v:#}");
    }
    assert_eq!(
        v["snapshot_files"].as_object().unwrap().len(),
        paths.len(),
        "{v:#}"
    );
    v
}

/// Every entry under `root`: path, and the link target or content, for before/after
/// comparisons.
fn listing(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !root.exists() {
        return out;
    }
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(root).unwrap().display().to_string();
        let ft = e.file_type();
        let what = if ft.is_symlink() {
            format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
        } else if ft.is_dir() {
            "dir".to_string()
        } else {
            let bytes = std::fs::read(e.path()).unwrap();
            format!("{} bytes {:x?}", bytes.len(), &bytes[..bytes.len().min(16)])
        };
        out.push((rel, what));
    }
    out
}

fn flip_bit(path: &Path, at: usize) {
    let mut v = std::fs::read(path).unwrap();
    v[at] ^= 0x04;
    std::fs::write(path, v).unwrap();
}

fn repo_folder(env: &Env, cache: &str) -> PathBuf {
    env.path(&format!("{cache}/models--acme--tiny-model"))
}

fn pack_hf(env: &Env, cache: &str, out: &str) -> (i32, Value) {
    env.json(&[
        "pack",
        "--hf-repo",
        REPO,
        "--hf-cache",
        cache,
        "-o",
        out,
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        "100000",
    ])
}

#[test]
fn cache_round_trip_through_a_bundle_satisfies_the_real_client() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    // The source is what huggingface_hub itself accepts.
    assert_client_resolves(&env, "src", REPO, &built);

    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["name"], REPO);
    assert_eq!(j["source"]["commit"], COMMIT_A);
    assert_eq!(j["source"]["revision"], "main");
    assert_eq!(j["source"]["repo_type"], "model");
    assert_eq!(j["listing_checked"], true);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(env.path("b/manifest.json")).unwrap()).unwrap();
    for (i, f) in manifest["files"].as_array().unwrap().iter().enumerate() {
        let path = f["path"].as_str().unwrap();
        assert_eq!(
            manifest["source"]["etags"][i], built[path]["etag"],
            "{path}"
        );
        assert_eq!(f["executable"], false);
    }
    assert_eq!(manifest["source"]["repo_id"], REPO);

    // Into a cache directory that does not exist yet.
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["commit"], COMMIT_A);
    assert_eq!(j["commit_derived"], false);
    assert_eq!(j["snapshot_state"], "created");
    assert_eq!(j["blobs_written"], 6, "{j:#}");
    assert_eq!(j["blobs_reused"], 0);
    assert_eq!(j["previous_commit"], Value::Null);
    let v = assert_client_resolves(&env, "dst", REPO, &built);
    assert_eq!(v["repos"][0]["revisions"][0]["refs"], json!(["main"]));
    assert_eq!(v["repos"][0]["revisions"][0]["commit"], COMMIT_A);
    assert_eq!(v["incomplete_files"], 0);

    // The layout itself: blobs named as huggingface_hub named them, relative links, the ref
    // without a newline, nothing else (no staging left in .locks).
    let dst = repo_folder(&env, "dst");
    assert_eq!(
        std::fs::read(dst.join("refs/main")).unwrap(),
        COMMIT_A.as_bytes()
    );
    let src_blobs: Vec<_> = listing(&repo_folder(&env, "src").join("blobs"));
    assert_eq!(listing(&dst.join("blobs")), src_blobs);
    assert_eq!(
        std::fs::read_link(dst.join(format!("snapshots/{COMMIT_A}/tokenizer/deep/vocab.txt")))
            .unwrap(),
        PathBuf::from(format!(
            "../../../../blobs/{}",
            built["tokenizer/deep/vocab.txt"]["etag"].as_str().unwrap()
        ))
    );
    assert_eq!(
        listing(&repo_folder(&env, "src").join("snapshots")),
        listing(&dst.join("snapshots"))
    );
    let top: Vec<String> = std::fs::read_dir(env.path("dst"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(top, ["models--acme--tiny-model"], "{top:?}");

    env.ok(&["check", "--hf-cache", "dst"]);
    let (code, j) = env.json(&["check", "--hf-cache", "dst", "--hf-repo", REPO]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["blobs_checked"], 6);

    // Again: nothing to do, every existing blob checked and kept.
    let before = listing(&env.path("dst"));
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["snapshot_state"], "unchanged");
    assert_eq!(j["blobs_reused"], 6);
    assert_eq!(j["blobs_written"], 0);
    assert_eq!(listing(&env.path("dst")), before);
}

#[test]
fn blobs_in_the_shared_store_are_followed_and_checked() {
    let env = Env::new();
    let mut files = spec_files();
    files[2]["shared"] = json!(true);
    files[3]["shared"] = json!(true);
    let built = build(&env, "src", COMMIT_A, files, true);
    let blob = repo_folder(&env, "src")
        .join("blobs")
        .join(built["model.safetensors"]["etag"].as_str().unwrap());
    assert!(blob.is_symlink(), "the shared store was not used");
    assert_client_resolves(&env, "src", REPO, &built);
    env.ok(&["check", "--hf-cache", "src"]);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    env.ok(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_client_resolves(&env, "dst", REPO, &built);
    // Rot in the shared payload is found through the repository's link, and refused by pack.
    let payload = std::fs::canonicalize(&blob).unwrap();
    assert!(payload.starts_with(env.path("src/blobs").canonicalize().unwrap()));
    flip_bit(&payload, 5000);
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["problems"][0]["path"], json!(blob), "{j:#}");
    let (code, j) = pack_hf(&env, "src", "b2");
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "blob-mismatch");
}

#[test]
fn default_cache_is_found_like_huggingface_hub_does() {
    let env = Env::new();
    let built = build(
        &env,
        "home/.cache/huggingface/hub",
        COMMIT_A,
        spec_files(),
        true,
    );
    let run = |vars: &[(&str, &str)], out: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
        cmd.args([
            "pack",
            "--hf-repo",
            REPO,
            "-o",
            out,
            "--key",
            "k.key",
            "--json",
        ])
        .current_dir(env.dir.path())
        .env_remove("HF_HUB_CACHE")
        .env_remove("HUGGINGFACE_HUB_CACHE")
        .env_remove("HF_HOME")
        .env_remove("XDG_CACHE_HOME");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        let j: Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code().unwrap(), j)
    };
    let home = env.path("home");
    let home = home.to_str().unwrap();
    let (code, j) = run(&[("HOME", home)], "b1");
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(
        j["hf_cache"],
        json!(env.path("home/.cache/huggingface/hub"))
    );
    let (code, j) = run(
        &[
            ("HOME", "/nonexistent"),
            ("HF_HOME", "$H/.cache/huggingface"),
            ("H", home),
        ],
        "b2",
    );
    assert_eq!(code, 0, "{j:#}");
    let (code, j) = run(
        &[
            ("HOME", "/nonexistent"),
            ("HF_HUB_CACHE", &format!("{home}/.cache/huggingface/hub")),
        ],
        "b3",
    );
    assert_eq!(code, 0, "{j:#}");
    let (code, j) = run(&[("HOME", home), ("HF_HUB_CACHE", "")], "b4");
    assert_eq!(code, 2, "{j:#}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HF_HUB_CACHE"),
        "{j:#}"
    );
    let (code, j) = run(&[("HOME", "/nonexistent")], "b5");
    assert_eq!(code, 1, "{j:#}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/.cache/huggingface/hub/models--acme--tiny-model"),
        "{j:#}"
    );
    assert_eq!(built.as_object().unwrap().len(), 7);
}

#[test]
fn corrupted_missing_and_incomplete_blobs_are_refused_by_name() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let repo = repo_folder(&env, "src");
    let blob = |path: &str| {
        repo.join("blobs")
            .join(built[path]["etag"].as_str().unwrap())
    };
    let refused = |needles: &[&str], kind: &str| {
        let (code, j) = pack_hf(&env, "src", "b");
        assert_eq!(code, 3, "{j:#}");
        assert_eq!(j["error"]["kind"], kind, "{j:#}");
        let msg = j["error"]["message"].as_str().unwrap();
        for n in needles {
            assert!(msg.contains(n), "{n:?} not in {msg}");
        }
        assert!(!env.path("b").exists());
        assert!(staging_leftovers(env.dir.path()).is_empty());
        j
    };

    // A flipped bit in an LFS blob (sha256 etag) and in a small one (git blob id).
    for (path, at) in [("model.safetensors", 300), ("config.json", 3)] {
        let b = blob(path);
        let good = std::fs::read(&b).unwrap();
        flip_bit(&b, at);
        refused(
            &[path, built[path]["etag"].as_str().unwrap()],
            "blob-mismatch",
        );
        std::fs::write(&b, good).unwrap();
    }

    // A blob deleted from under its link.
    let b = blob("extra/weights.bin");
    let good = std::fs::read(&b).unwrap();
    std::fs::remove_file(&b).unwrap();
    refused(&["extra/weights.bin", "missing"], "hf-cache");
    std::fs::write(&b, &good).unwrap();

    // A truncated blob: the hub's listing gives the size.
    std::fs::write(&b, &good[..1000]).unwrap();
    refused(&["extra/weights.bin", "truncated"], "hf-cache");
    std::fs::write(&b, &good).unwrap();

    // An interrupted download: huggingface_hub's temporary name, no link yet. The listing names
    // the file it was for.
    let link = repo.join(format!("snapshots/{COMMIT_A}/extra/weights.bin"));
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&b).unwrap();
    let incomplete = repo.join(format!(
        "blobs/{}.5f3e2a1b.incomplete",
        built["extra/weights.bin"]["etag"].as_str().unwrap()
    ));
    std::fs::write(&incomplete, &good[..5000]).unwrap();
    refused(&["extra/weights.bin", "interrupted download"], "hf-cache");
    std::fs::remove_file(&incomplete).unwrap();

    // The download never finished and left nothing: the listing still tells.
    let j = refused(
        &["extra/weights.bin", "not in the snapshot"],
        "model-checks",
    );
    assert_eq!(j["findings"][0]["code"], "hf-file-missing", "{j:#}");
    std::fs::write(&b, &good).unwrap();
    std::os::unix::fs::symlink(
        format!(
            "../../../blobs/{}",
            built["extra/weights.bin"]["etag"].as_str().unwrap()
        ),
        &link,
    )
    .unwrap();

    // A ref with a trailing newline breaks huggingface_hub's offline lookup: refused, said so.
    std::fs::write(repo.join("refs/main"), format!("{COMMIT_A}\n")).unwrap();
    refused(&["refs/main", "unstripped"], "hf-cache");
    std::fs::write(repo.join("refs/main"), COMMIT_A).unwrap();

    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
}

#[test]
fn an_incomplete_download_without_a_listing_is_still_refused() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), false);
    let repo = repo_folder(&env, "src");
    let etag = built["model.safetensors"]["etag"].as_str().unwrap();
    std::fs::write(repo.join(format!("blobs/{etag}.incomplete")), b"partial").unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    let msg = j["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(".incomplete") && msg.contains("model.safetensors"),
        "{msg}"
    );
    let unknown = repo.join(format!("blobs/{}.1234abcd.incomplete", "f".repeat(64)));
    std::fs::remove_file(repo.join(format!("blobs/{etag}.incomplete"))).unwrap();
    std::fs::write(&unknown, b"partial").unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not link to"),
        "{j:#}"
    );
    std::fs::remove_file(&unknown).unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["listing_checked"], false);
    assert!(
        j["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("completeness")),
        "{j:#}"
    );
}

#[test]
fn failed_unpack_leaves_the_cache_as_it_was() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    // The destination already holds an older commit of the same repository, whose config
    // differs: the failed unpack must leave its blobs, snapshot and ref alone.
    let mut old = spec_files();
    old[1]["text"] = json!("{\"model_type\": \"older\"}\n");
    let older = python(
        BUILD,
        &json!({"cache": env.path("dst"), "repo_id": REPO, "commit": COMMIT_B, "revision": "main", "files": old}),
    );
    // Damage the last volume: everything streams and verifies until the very end.
    let last = std::fs::read_dir(env.path("b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("data."))
        .max()
        .unwrap();
    let vol = env.path(&format!("b/{last}"));
    let len = std::fs::metadata(&vol).unwrap().len() as usize;
    flip_bit(&vol, len - 1500);
    for cache in ["dst", "fresh"] {
        let before = listing(&env.path(cache));
        let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", cache]);
        assert_eq!(code, 3, "{j:#}");
        assert!(
            j["error"]["message"].as_str().unwrap().contains(&last),
            "{j:#}"
        );
        assert_eq!(listing(&env.path(cache)), before, "{cache} changed");
    }
    assert!(!env.path("fresh").exists());
    assert_client_resolves(&env, "dst", REPO, &older);
    assert_eq!(
        built.as_object().unwrap().len(),
        older.as_object().unwrap().len()
    );
}

#[test]
fn a_failure_after_the_blobs_moved_is_undone() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    let mut old = spec_files();
    old[1]["text"] = json!("{\"model_type\": \"older\"}\n");
    let older = python(
        BUILD,
        &json!({"cache": env.path("dst"), "repo_id": REPO, "commit": COMMIT_B, "revision": "v1", "files": old}),
    );
    // refs/main cannot be written: it is a directory. The unpack gets as far as the ref, the
    // last step, and must then take back the blobs and the snapshot it added.
    std::fs::create_dir_all(repo_folder(&env, "dst").join("refs/main/x")).unwrap();
    let before = listing(&env.path("dst"));
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 1, "{j:#}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refs/main"),
        "{j:#}"
    );
    assert_eq!(listing(&env.path("dst")), before);
    assert_eq!(older.as_object().unwrap().len(), 7);
}

#[test]
fn killed_unpack_leaves_nothing_huggingface_hub_sees() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    // What a killed unpack leaves: a staging directory in .locks whose lock is free.
    let stale = env.path("dst/.locks/.airlock-staging-models--acme--tiny-model-0011223344556677");
    std::fs::create_dir_all(stale.join("repo/blobs")).unwrap();
    std::fs::write(stale.join(".airlock-lock"), b"").unwrap();
    std::fs::write(stale.join("repo/blobs/.incoming-0"), b"half").unwrap();
    let v = verify(&env, "dst", REPO, &[]);
    assert_eq!(v["scan_warnings"], json!([]), "{v:#}");
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["cleaned_stale"], json!([stale]), "{j:#}");
    assert_eq!(
        std::fs::read_dir(env.path("dst/.locks")).unwrap().count(),
        0
    );
    assert_client_resolves(&env, "dst", REPO, &built);
}

#[test]
fn existing_blobs_are_reused_after_checking_and_damaged_ones_replaced() {
    let env = Env::new();
    let built_a = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "a");
    assert_eq!(code, 0, "{j:#}");
    env.ok(&["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);

    // A new commit on main changes only the config.
    let mut files = spec_files();
    files[1]["text"] = json!("{\"model_type\": \"tiny\", \"hidden_size\": 64}\n");
    let built_b = build(&env, "src", COMMIT_B, files, true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    // Meanwhile a blob the new commit shares has rotted in the destination.
    let rotten = repo_folder(&env, "dst")
        .join("blobs")
        .join(built_a["model.safetensors"]["etag"].as_str().unwrap());
    flip_bit(&rotten, 200);
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["blobs_written"], 1, "{j:#}");
    assert_eq!(j["blobs_reused"], 4, "{j:#}");
    assert_eq!(j["blobs_repaired"], json!([rotten]), "{j:#}");
    assert_eq!(j["previous_commit"], COMMIT_A);
    assert_eq!(j["snapshot_state"], "created");
    let v = assert_client_resolves(&env, "dst", REPO, &built_b);
    let revisions = &v["repos"][0]["revisions"];
    assert_eq!(revisions[0]["commit"], COMMIT_A);
    assert_eq!(revisions[0]["refs"], json!([]));
    assert_eq!(revisions[1]["refs"], json!(["main"]));
    env.ok(&["check", "--hf-cache", "dst"]);
}

#[test]
fn a_partial_snapshot_of_the_same_commit_is_completed_atomically() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    // The destination got two files of the same commit with hf_hub_download, and one more
    // file the bundle does not carry.
    let files = json!([
        spec_files()[1].clone(),
        spec_files()[2].clone(),
        {"path": "README.md", "lfs": false, "text": "# tiny\n"},
    ]);
    let partial = python(
        BUILD,
        &json!({"cache": env.path("dst"), "repo_id": REPO, "commit": COMMIT_A, "revision": "main", "listing": false, "files": files}),
    );
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["snapshot_state"], "merged");
    assert_eq!(j["blobs_reused"], 2);
    let mut all = built.clone();
    all["README.md"] = partial["README.md"].clone();
    assert_client_resolves(&env, "dst", REPO, &all);
}

#[test]
fn check_finds_a_flipped_bit_in_a_cache() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    env.ok(&["check", "--hf-cache", "src"]);
    let rotten = repo_folder(&env, "src")
        .join("blobs")
        .join(built["extra/weights.bin"]["etag"].as_str().unwrap());
    flip_bit(&rotten, 123_456);
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "hf-cache");
    assert_eq!(j["problems"].as_array().unwrap().len(), 1, "{j:#}");
    assert_eq!(j["problems"][0]["kind"], "blob-mismatch");
    assert_eq!(j["problems"][0]["path"], json!(rotten));
    assert!(
        j["problems"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("extra/weights.bin"),
        "{j:#}"
    );
    let text = env.fails(3, &["check", "--hf-cache", "src", "--hf-repo", REPO]);
    assert!(
        text.contains("BAD") && text.contains("extra/weights.bin"),
        "{text}"
    );
    // A dangling link and a bad ref are named too.
    std::fs::remove_file(&rotten).unwrap();
    std::fs::write(
        repo_folder(&env, "src").join("refs/main"),
        format!("{COMMIT_A}\n"),
    )
    .unwrap();
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3);
    let kinds: Vec<&str> = j["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["bad-ref", "missing-blob"], "{j:#}");
    let text = env.fails(
        1,
        &["check", "--hf-cache", "src", "--hf-repo", "acme/other"],
    );
    assert!(text.contains("models--acme--other"), "{text}");
}

#[test]
fn directory_bundle_installs_into_a_cache_under_a_derived_commit() {
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let text = env.fails(2, &["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert!(text.contains("--hf-repo"), "{text}");
    let (code, j) = env.json(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--hf-cache",
        "dst",
        "--hf-repo",
        "acme/m",
    ]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["commit_derived"], true);
    use sha2::Digest;
    let manifest = std::fs::read(env.path("b/manifest.json")).unwrap();
    let derived = &hex::encode(sha2::Sha256::digest(&manifest))[..40];
    assert_eq!(j["commit"], derived);
    assert_eq!(j["revision"], "main");
    let m: Value = serde_json::from_slice(&manifest).unwrap();
    let mut expect = serde_json::Map::new();
    for f in m["files"].as_array().unwrap() {
        expect.insert(
            f["path"].as_str().unwrap().into(),
            json!({"sha256": f["sha256"]}),
        );
    }
    let v = assert_client_resolves(&env, "dst", "acme/m", &Value::Object(expect));
    assert_eq!(v["repos"][0]["revisions"][0]["commit"], derived);
    // Small files are named by their git blob id, as the hub names files stored in git.
    let blobs = env.path("dst/models--acme--m/blobs");
    let config = std::fs::read(env.path("m/config.json")).unwrap();
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", config.len()));
    h.update(&config);
    assert!(blobs.join(hex::encode(h.finalize())).is_file());
    // The empty directory travels as a directory of the snapshot.
    assert!(
        env.path(&format!(
            "dst/models--acme--m/snapshots/{derived}/empty-dir"
        ))
        .is_dir()
    );
    // The trace note of FORMAT.md 14.2, byte for byte: keys `bundle`, `revision`, `version`
    // in this order, one line (issue 36 item 9).
    let version = m["version"].as_u64().unwrap();
    assert_eq!(
        std::fs::read_to_string(env.path(&format!("dst/models--acme--m/.airlock/{derived}")))
            .unwrap(),
        format!("{{\"bundle\":\"m\",\"revision\":\"main\",\"version\":{version}}}\n")
    );
    env.ok(&["check", "--hf-cache", "dst"]);
    // Same bundle, same commit: nothing changes.
    let before = listing(&env.path("dst"));
    env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--hf-cache",
        "dst",
        "--hf-repo",
        "acme/m",
    ]);
    assert_eq!(listing(&env.path("dst")), before);
}

#[test]
fn snapshot_files_that_are_not_links_are_packed_with_computed_etags() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), false);
    // Where symlinks are unavailable huggingface_hub copies the blob into the snapshot.
    let snap = repo_folder(&env, "src").join(format!("snapshots/{COMMIT_A}"));
    let link = snap.join("config.json");
    let content = std::fs::read(&link).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::fs::write(&link, &content).unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    let m: Value =
        serde_json::from_slice(&std::fs::read(env.path("b/manifest.json")).unwrap()).unwrap();
    let i = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .position(|f| f["path"] == "config.json")
        .unwrap();
    assert_eq!(m["source"]["etags"][i], built["config.json"]["etag"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_client_resolves(&env, "dst", REPO, &built);
}

#[test]
fn a_commit_revision_writes_no_ref_and_unpack_can_name_one() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = env.json(&[
        "pack",
        "--hf-repo",
        REPO,
        "--hf-cache",
        "src",
        "--revision",
        COMMIT_A,
        "-o",
        "b",
        "--key",
        "k.key",
    ]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["source"]["revision"], COMMIT_A);
    // As huggingface_hub does for a commit: a snapshot, no ref.
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["ref"], Value::Null);
    assert!(
        j["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("--revision")),
        "{j:#}"
    );
    assert!(!repo_folder(&env, "dst").join("refs").exists());
    let paths: Vec<String> = built.as_object().unwrap().keys().cloned().collect();
    let v = verify_at(&env, "dst", ("model", REPO, COMMIT_A), &paths);
    assert_eq!(v["errors"], json!({}), "{v:#}");
    assert_eq!(v["scan_warnings"], json!([]), "{v:#}");
    // Installed under another name, type and ref.
    let (code, j) = env.json(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--hf-cache",
        "dst",
        "--hf-repo",
        "other/copy",
        "--repo-type",
        "dataset",
        "--revision",
        "refs/pr/1",
    ]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(
        std::fs::read(env.path("dst/datasets--other--copy/refs/refs/pr/1")).unwrap(),
        COMMIT_A.as_bytes()
    );
    let v = verify_at(&env, "dst", ("dataset", "other/copy", "refs/pr/1"), &paths);
    assert_eq!(v["errors"], json!({}), "{v:#}");
    assert_eq!(v["scan_warnings"], json!([]), "{v:#}");
    for (path, info) in built.as_object().unwrap() {
        assert_eq!(v["files"][path], info["sha256"], "{path}");
    }
    let text = env.fails(
        2,
        &[
            "unpack",
            "b",
            "--trust",
            "k.pub",
            "--hf-cache",
            "dst",
            "--revision",
            COMMIT_B,
        ],
    );
    assert!(text.contains("commit"), "{text}");
}

#[test]
fn usage_errors_for_the_cache_flags() {
    let env = Env::new();
    env.model("m");
    for args in [
        // (A directory with --hf-repo packs it beside the repository: tests/it/dirrepos.rs.)
        &[
            "pack",
            "m",
            "--revision",
            "main",
            "-o",
            "b",
            "--key",
            "k.key",
        ][..],
        &[
            "pack",
            "m",
            "--repo-type",
            "model",
            "-o",
            "b",
            "--key",
            "k.key",
        ],
        &["check", "m", "--repo-type", "model"],
        &[
            "unpack",
            "b",
            "--trust",
            "k.pub",
            "--dest",
            "x",
            "--hf-cache",
            "c",
        ],
        &[
            "unpack",
            "b",
            "--trust",
            "k.pub",
            "--hf-repo",
            REPO,
            "--dest",
            "x",
        ],
        &["unpack", "b", "--trust", "k.pub"],
        &["check", "m", "--hf-cache", "c"],
        &["check"],
    ] {
        env.fails(2, args);
    }
    let mut b = BTreeMap::new();
    b.insert("bad id", "acme/../x");
    for (what, id) in b {
        let text = env.fails(
            2,
            &[
                "pack",
                "--hf-repo",
                id,
                "--hf-cache",
                "c",
                "-o",
                "b",
                "--key",
                "k.key",
            ],
        );
        assert!(text.contains("repository id"), "{what}: {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Regression tests for a hostile or damaged cache (issue 10) and the cache's messages (issue 15).

/// Moves `dir` to `elsewhere` and leaves a symlink to it in its place.
fn replace_with_link(dir: &Path, elsewhere: &Path) {
    std::fs::rename(dir, elsewhere).unwrap();
    std::os::unix::fs::symlink(elsewhere, dir).unwrap();
}

fn undo_link(dir: &Path, elsewhere: &Path) {
    std::fs::remove_file(dir).unwrap();
    std::fs::rename(elsewhere, dir).unwrap();
}

fn problem_kinds(j: &Value) -> Vec<String> {
    j["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap().to_string())
        .collect()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

#[test]
fn refs_snapshots_blobs_or_the_repo_folder_as_symlinks_are_refused_by_pack_and_check() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let repo = repo_folder(&env, "src");
    let elsewhere = env.path("elsewhere");
    for part in ["refs", "snapshots", "blobs", ""] {
        let dir = if part.is_empty() {
            repo.clone()
        } else {
            repo.join(part)
        };
        replace_with_link(&dir, &elsewhere);
        let (code, j) = pack_hf(&env, "src", "b");
        assert_eq!(code, 3, "{part}: {j:#}");
        let message = j["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{}: is a symlink", dir.display())),
            "{part}: {message}"
        );
        env.assert_nothing_packed("b");
        let (code, j) = env.json(&["check", "--hf-cache", "src"]);
        assert_eq!(code, 3, "{part}: {j:#}");
        assert_eq!(problem_kinds(&j), ["unsafe-link"], "{part}: {j:#}");
        assert_eq!(j["problems"][0]["path"], json!(dir), "{part}: {j:#}");
        undo_link(&dir, &elsewhere);
    }
    env.ok(&["check", "--hf-cache", "src"]);
}

#[test]
fn a_snapshot_link_to_a_file_outside_the_repository_is_refused_by_pack_and_check() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let link = repo_folder(&env, "src").join(format!("snapshots/{COMMIT_A}/config.json"));
    env.write("secret.txt", b"not part of any model\n");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(env.path("secret.txt"), &link).unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("config.json: is a symlink to")
            && message.contains("not a blob of this repository"),
        "{message}"
    );
    env.assert_nothing_packed("b");
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(problem_kinds(&j), ["unsafe-link"], "{j:#}");
    assert_eq!(j["problems"][0]["path"], json!(link));
    // A link that climbs out and back in through the blobs folder of another repository.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(
        "../../../models--acme--other/blobs/0123456789abcdef0123456789abcdef01234567",
        &link,
    )
    .unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
}

#[test]
fn unpack_into_a_cache_whose_blobs_or_refs_are_symlinks_writes_nothing_at_the_link_target() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "a");
    assert_eq!(code, 0, "{j:#}");
    let mut files = spec_files();
    files[1]["text"] = json!("{\"model_type\": \"tiny\", \"hidden_size\": 64}\n");
    build(&env, "src", COMMIT_B, files, true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    env.ok(&["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);
    let repo = repo_folder(&env, "dst");
    let elsewhere = env.path("elsewhere");
    for part in ["blobs", "refs", "snapshots"] {
        let dir = repo.join(part);
        replace_with_link(&dir, &elsewhere);
        let before = listing(&elsewhere);
        let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
        assert!(
            text.contains(&format!("{}: is a symlink", dir.display())),
            "{part}: {text}"
        );
        assert_eq!(
            listing(&elsewhere),
            before,
            "{part}: the link target was written"
        );
        undo_link(&dir, &elsewhere);
    }
    env.ok(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);
}

#[test]
fn a_ref_that_is_dev_zero_a_fifo_or_too_long_is_refused_without_reading_it() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let main = repo_folder(&env, "src").join("refs/main");
    std::fs::remove_file(&main).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &main).unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is a symlink to /dev/zero"),
        "{j:#}"
    );
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(problem_kinds(&j), ["bad-ref"], "{j:#}");
    std::fs::remove_file(&main).unwrap();
    mkfifo(&main);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    assert!(
        j["error"]["message"].as_str().unwrap().contains("a FIFO"),
        "{j:#}"
    );
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(problem_kinds(&j), ["bad-ref"], "{j:#}");
    std::fs::remove_file(&main).unwrap();
    std::fs::write(&main, COMMIT_A.repeat(1000)).unwrap();
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert!(
        j["problems"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("more than a commit id"),
        "{j:#}"
    );
}

#[test]
fn a_blob_that_is_dev_zero_or_a_fifo_is_refused_by_pack_check_and_unpack() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "a");
    assert_eq!(code, 0, "{j:#}");
    let blob = repo_folder(&env, "src")
        .join("blobs")
        .join(built["config.json"]["etag"].as_str().unwrap());
    std::fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &blob).unwrap();
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    env.assert_nothing_packed("b");
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(problem_kinds(&j), ["unsafe-link"], "{j:#}");
    std::fs::remove_file(&blob).unwrap();
    mkfifo(&blob);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 3, "{j:#}");
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");

    // The same blob already in the destination cache, as /dev/zero and as a FIFO: the unpack
    // refuses it by name instead of hashing it forever, and leaves the cache as it was.
    env.ok(&["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);
    let dst_blob = repo_folder(&env, "dst")
        .join("blobs")
        .join(built["config.json"]["etag"].as_str().unwrap());
    for plant in ["zero", "fifo"] {
        std::fs::remove_file(&dst_blob).unwrap();
        if plant == "zero" {
            std::os::unix::fs::symlink("/dev/zero", &dst_blob).unwrap();
        } else {
            mkfifo(&dst_blob);
        }
        let text = env.fails(1, &["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);
        assert!(
            text.contains(&dst_blob.display().to_string()) && text.contains("not a regular file"),
            "{plant}: {text}"
        );
    }
}

#[test]
fn check_hf_cache_fails_a_snapshot_that_lost_a_shard_its_index_lists() {
    let env = Env::new();
    let index = json!({
        "metadata": {"total_size": 8448},
        "weight_map": {
            "w": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        }
    });
    let files = json!([
        {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\"}\n"},
        {"path": "model.safetensors.index.json", "lfs": false, "text": index.to_string()},
        {"path": "model-00001-of-00002.safetensors", "lfs": true, "safetensors": 1},
    ]);
    build(&env, "src", COMMIT_A, files, false);
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert!(
        problem_kinds(&j).contains(&"shard-missing".to_string()),
        "{j:#}"
    );
    assert!(
        j["problems"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("model.safetensors.index.json"),
        "{j:#}"
    );
}

#[test]
fn check_hf_cache_hint_says_unpack_again_where_airlock_installed_the_data() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "a");
    assert_eq!(code, 0, "{j:#}");
    env.ok(&["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);
    let out = env.ok(&["check", "--hf-cache", "dst"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" in 1 repository match"), "{text}");
    let etag = built["extra/weights.bin"]["etag"].as_str().unwrap();
    flip_bit(&repo_folder(&env, "dst").join("blobs").join(etag), 1000);
    flip_bit(&repo_folder(&env, "src").join("blobs").join(etag), 1000);
    let (code, j) = env.json(&["check", "--hf-cache", "dst"]);
    assert_eq!(code, 3, "{j:#}");
    let hint = j["error"]["hint"].as_str().unwrap();
    assert!(hint.contains("unpack the bundle again"), "{hint}");
    assert!(!hint.contains("hf download"), "{hint}");
    // Where huggingface_hub downloaded the data, downloading again is the fix.
    let (code, j) = env.json(&["check", "--hf-cache", "src"]);
    assert_eq!(code, 3, "{j:#}");
    assert!(
        j["error"]["hint"].as_str().unwrap().contains("hf download"),
        "{j:#}"
    );
}

#[test]
fn packing_or_checking_a_snapshot_folder_suggests_the_cache_flags_once() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let snapshot = format!("src/models--acme--tiny-model/snapshots/{COMMIT_A}");
    let cache = env.path("src");
    let text = env.fails(2, &["pack", &snapshot, "-o", "b", "--key", "k.key"]);
    let flags = format!("--hf-repo {REPO} --hf-cache {}", cache.display());
    assert_eq!(text.matches(&flags).count(), 1, "{text}");
    assert_eq!(text.matches("is a symlink").count(), 0, "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    env.assert_nothing_packed("b");
    let text = env.fails(2, &["check", &snapshot]);
    let flags = format!("--hf-cache {} --hf-repo {REPO}", cache.display());
    assert_eq!(text.matches(&flags).count(), 1, "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn after_a_blob_repair_the_unpack_summary_counts_the_repaired_blob() {
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "a");
    assert_eq!(code, 0, "{j:#}");
    env.ok(&["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);
    let etag = built["model.safetensors"]["etag"].as_str().unwrap();
    flip_bit(&repo_folder(&env, "dst").join("blobs").join(etag), 300);
    let out = env.ok(&["unpack", "a", "--trust", "k.pub", "--hf-cache", "dst"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("0 new blob(s), 5 reused, 1 repaired"),
        "{text}"
    );
    env.ok(&["check", "--hf-cache", "dst"]);
}

#[test]
fn hf_download_local_dir_bookkeeping_is_left_out_with_a_warning() {
    let env = Env::new();
    env.model("m");
    env.write("m/.cache/huggingface/.gitignore", b"*");
    env.write(
        "m/.cache/huggingface/download/config.json.metadata",
        b"a1b2c3\nabc\n1700000000.0\n",
    );
    env.write("m/.cache/other/keep.txt", b"kept\n");
    let (code, j) = env.json(&["pack", "m", "-o", "b", "--key", "k.key"]);
    assert_eq!(code, 0, "{j:#}");
    assert!(
        j["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains(".cache/huggingface/ left out")),
        "{j:#}"
    );
    let out = env.ok(&["inspect", "b", "--sha256sums"]);
    let sums = String::from_utf8_lossy(&out.stdout);
    assert!(!sums.contains(".cache/huggingface"), "{sums}");
    assert!(sums.contains(".cache/other/keep.txt"), "{sums}");
}

// ---------------------------------------------------------------------------------------------
// A shared cache's `.locks`, where airlock stages, is a folder other users write (issue 36).

/// A bundle source that, once the target has begun and before the first entry, does what
/// another local user who can write `.locks` can do: renames airlock's staging directory away
/// and puts one of their own in its place, holding a blob under the etag of a file of the
/// bundle with other bytes (and the folders the staged tree has).
struct SwapsTheStaging<'a> {
    bundle: airlock::source::BundleOnDisk<'a>,
    locks: PathBuf,
    commit: &'a str,
    etag: &'a str,
}

const PLANTED: &[u8] = b"planted by another user\n";

impl airlock::pipeline::Source for SwapsTheStaging<'_> {
    fn opened(&self) -> &airlock::bundle::open::Opened {
        self.bundle.opened()
    }

    fn complete(&self) -> bool {
        self.bundle.complete()
    }

    fn feed(
        &self,
        sink: &mut dyn airlock::entries::EntrySink,
        progress: &dyn airlock::progress::Progress,
    ) -> airlock::error::Result<airlock::pipeline::Fed> {
        let staging: Vec<PathBuf> = std::fs::read_dir(&self.locks)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(".airlock-staging-")
            })
            .collect();
        assert_eq!(staging.len(), 1, "{staging:?}");
        let staging = &staging[0];
        std::fs::rename(staging, self.locks.join("moved")).unwrap();
        let repo = staging.join("repo");
        std::fs::create_dir_all(repo.join("snapshots").join(self.commit)).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::write(repo.join("blobs").join(self.etag), PLANTED).unwrap();
        self.bundle.feed(sink, progress)
    }
}

#[test]
fn a_staging_directory_swapped_by_another_user_puts_none_of_their_bytes_in_the_cache() {
    use airlock::unpack::{HfUnpackOptions, To};
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    // A cache holding an older commit of the repository (another config), and a new cache.
    let mut old = spec_files();
    old[1]["text"] = json!("{\"model_type\": \"older\"}\n");
    let older = python(
        BUILD,
        &json!({"cache": env.path("dst"), "repo_id": REPO, "commit": COMMIT_B, "revision": "main", "files": old}),
    );
    let keys = airlock::trust::load_paths(&[env.path("k.pub")]).unwrap();
    let trust = airlock::trust::Policy::any_of(&keys);
    let opened = airlock::bundle::open::open_with(&env.path("b"), &trust).unwrap();
    let etag = built["config.json"]["etag"].as_str().unwrap();
    for cache in ["dst", "fresh"] {
        let repo = repo_folder(&env, cache);
        let before = listing(&repo);
        let source = SwapsTheStaging {
            bundle: airlock::source::BundleOnDisk(&opened),
            locks: env.path(&format!("{cache}/.locks")),
            commit: COMMIT_A,
            etag,
        };
        let to = To::HfCache(HfUnpackOptions {
            cache: env.path(cache),
            repo_id: None,
            repo_type: None,
            revision: None,
            check_space: false,
            trust: trust.clone(),
            resume: true,
            repos: Vec::new(),
        });
        let result = airlock::unpack::unpack(&source, to, &airlock::progress::Silent);
        // Before: the planted blob was kept as "the same content twice", the other user's tree
        // renamed into the cache, and the install reported a success.
        let blob = repo.join("blobs").join(etag);
        assert!(
            std::fs::read(&blob).map_or(true, |b| b != PLANTED),
            "{cache}: {} holds the other user's bytes",
            blob.display()
        );
        let err = match result {
            Ok(done) => {
                panic!("{cache}: installed after the staging directory was swapped: {done:?}")
            }
            Err(e) => e,
        };
        assert_eq!(err.exit_code(), 3, "{cache}: {err}");
        assert_eq!(err.kind(), "hf-cache", "{cache}: {err}");
        assert!(
            err.to_string()
                .contains("was moved or replaced while airlock staged the install in it"),
            "{cache}: {err}"
        );
        assert!(err.hint().unwrap().contains("chmod +t"), "{cache}: {err:?}");
        assert_eq!(listing(&repo), before, "{cache}: the repository changed");
        // The other user's directory is theirs: left as it was. Airlock's own, moved away, is
        // emptied through its handle.
        let locks = env.path(&format!("{cache}/.locks"));
        let theirs: Vec<PathBuf> = std::fs::read_dir(&locks)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap() != "moved")
            .collect();
        assert_eq!(theirs.len(), 1, "{cache}: {theirs:?}");
        assert_eq!(
            std::fs::read(theirs[0].join("repo/blobs").join(etag)).unwrap(),
            PLANTED
        );
        assert_eq!(
            std::fs::read_dir(locks.join("moved")).unwrap().count(),
            0,
            "{cache}: the moved work directory was not emptied"
        );
    }
    assert!(!repo_folder(&env, "fresh").exists());
    assert_client_resolves(&env, "dst", REPO, &older);
}

#[test]
fn unpack_refuses_a_locks_folder_that_is_a_link_or_that_every_user_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let built = build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    std::fs::create_dir(env.path("dst")).unwrap();
    let locks = env.path("dst/.locks");
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let unpack = ["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"];

    // A link: before, the staged tree was built wherever it led (outside the cache).
    std::os::unix::fs::symlink(&elsewhere, &locks).unwrap();
    let before = listing(&env.path("dst"));
    let (code, j) = env.json(&unpack);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "hf-cache", "{j:#}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "{}: is a symlink to {}, not a directory",
            locks.display(),
            elsewhere.display()
        )),
        "{message}"
    );
    assert!(
        j["error"]["hint"].as_str().unwrap().contains("chmod +t"),
        "{j:#}"
    );
    assert_eq!(listing(&env.path("dst")), before);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // Writable by every user, no sticky bit: before, accepted.
    std::fs::remove_file(&locks).unwrap();
    std::fs::create_dir(&locks).unwrap();
    std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, j) = env.json(&unpack);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "hf-cache", "{j:#}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "{}: is a directory writable by all users (mode 0777, no sticky bit)",
            locks.display()
        )),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(env.path("dst")).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&locks).unwrap().count(), 0);

    // With the sticky bit (as /tmp has), only an entry's owner can rename it: accepted.
    std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o1777)).unwrap();
    env.ok(&unpack);
    assert_client_resolves(&env, "dst", REPO, &built);
    assert_eq!(std::fs::read_dir(&locks).unwrap().count(), 0);
    let mode = std::fs::metadata(&locks).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777);
}

/// Issue 33 item 9. Before: `pack --hf-repo` said every file matched "the hash the hub
/// published" also for a cache airlock's own `unpack --hf-cache` had built, whose blob names
/// came from a bundle's manifest. Now the line and JSON `blob_names_from` say whose names they
/// are: the hub's for a download, airlock's install (with its receipt) for a cache it built.
#[test]
fn a_cache_airlock_built_is_not_said_to_hold_the_hubs_hashes() {
    let env = Env::new();
    build(&env, "src", COMMIT_A, spec_files(), true);
    let (code, j) = pack_hf(&env, "src", "b");
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["blob_names_from"], "hub");
    env.ok(&["unpack", "b", "--trust", "k.pub", "--hf-cache", "dst"]);

    let (code, j) = pack_hf(&env, "dst", "b2");
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["blob_names_from"], "airlock-install");
    let out = env.ok(&[
        "pack",
        "--hf-repo",
        REPO,
        "--hf-cache",
        "dst",
        "-o",
        "b3",
        "--key",
        "k.key",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let receipt = repo_folder(&env, "dst").join(format!(".airlock/receipts/{COMMIT_A}"));
    assert!(
        text.contains(&format!(
            "matched its blob name (names airlock's own install wrote from the signed manifest of the bundle it installed, receipt {})",
            receipt.display()
        )) && !text.contains("the hub published"),
        "{text}"
    );
    let out = env.ok(&[
        "pack",
        "--hf-repo",
        REPO,
        "--hf-cache",
        "src",
        "-o",
        "b4",
        "--key",
        "k.key",
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("(the hash the hub published)"));
}

/// `check --hf-cache C --hf-repo R --revision REV` checks that one snapshot and only the blobs
/// its files link to; damage in another snapshot's blob is not read, and a revision the cache
/// lacks is `not-cached` naming the path looked for.
#[test]
fn check_hf_cache_with_a_revision_checks_only_that_snapshot_and_its_blobs() {
    let env = Env::new();
    let old = build(&env, "src", COMMIT_A, spec_files(), true);
    // A second commit: main moves to it; it shares the config, not the weights.
    let new = build(
        &env,
        "src",
        COMMIT_B,
        json!([
            {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\", \"hidden_size\": 32}\n"},
            {"path": "model.safetensors", "lfs": true, "safetensors": 8},
        ]),
        true,
    );
    assert_eq!(old["config.json"]["etag"], new["config.json"]["etag"]);
    let rotten = repo_folder(&env, "src")
        .join("blobs")
        .join(old["extra/weights.bin"]["etag"].as_str().unwrap());
    flip_bit(&rotten, 1000);
    // The whole repository: the damage is found.
    env.fails(3, &["check", "--hf-cache", "src", "--hf-repo", REPO]);
    // main (COMMIT_B), by its ref name and by its commit: clean, two blobs.
    for rev in ["main", COMMIT_B] {
        let (code, j) = env.json(&[
            "check",
            "--hf-cache",
            "src",
            "--hf-repo",
            REPO,
            "--revision",
            rev,
        ]);
        assert_eq!(code, 0, "{rev}: {j:#}");
        assert_eq!(j["blobs_checked"], 2, "{rev}: {j:#}");
        assert_eq!(j["repos"][0]["snapshots"], json!([COMMIT_B]), "{j:#}");
        let refs = if rev == "main" {
            json!({"main": COMMIT_B})
        } else {
            json!({})
        };
        assert_eq!(j["repos"][0]["refs"], refs, "{j:#}");
    }
    // The old commit holds the damaged blob.
    let (code, j) = env.json(&[
        "check",
        "--hf-cache",
        "src",
        "--hf-repo",
        REPO,
        "--revision",
        COMMIT_A,
    ]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["problems"][0]["path"], json!(rotten), "{j:#}");
    assert_eq!(j["problems"].as_array().unwrap().len(), 1, "{j:#}");
    // Revisions the cache does not hold: exit 1, the path looked for named.
    let (code, j) = env.json(&[
        "check",
        "--hf-cache",
        "src",
        "--hf-repo",
        REPO,
        "--revision",
        "v2",
    ]);
    assert_eq!(code, 1, "{j:#}");
    assert_eq!(j["error"]["kind"], "not-cached", "{j:#}");
    let msg = j["error"]["message"].as_str().unwrap();
    let refs = repo_folder(&env, "src").join("refs/v2");
    assert!(msg.contains(&refs.display().to_string()), "{msg}");
    assert!(msg.contains("its refs: main"), "{msg}");
    let absent = "c1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
    let text = env.fails(
        1,
        &[
            "check",
            "--hf-cache",
            "src",
            "--hf-repo",
            REPO,
            "--revision",
            absent,
        ],
    );
    let snap = repo_folder(&env, "src").join("snapshots").join(absent);
    assert!(text.contains(&snap.display().to_string()), "{text}");
    // --revision names a revision of one repository.
    env.fails(2, &["check", "--hf-cache", "src", "--revision", "main"]);
}
