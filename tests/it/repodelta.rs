//! Deltas of bundles of several Hugging Face repositories (issue 35 item 2; FORMAT.md section
//! 14.4 "Deltas"): each repository is diffed against the same repository of the base, a
//! repository new in the delta is carried whole, one the delta drops stays in a cache as it
//! was and leaves a directory install; `unpack --hf-cache` installs every repository of the
//! delta onto its installed base revision, or none.

use serde_json::{Value, json};

use crate::hfcache::{COMMIT_A, COMMIT_B, assert_client_resolves, build_repo};
use crate::support::*;

const TINY: &str = "acme/tiny-model";
const EMBED: &str = "acme/embedder";
const DROPPED: &str = "acme/dropped";
const NEW: &str = "acme/reranker";

fn tiny_v1() -> Value {
    json!([
        {"path": ".gitattributes", "lfs": false, "text": "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
        {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\", \"hidden_size\": 32}\n"},
        {"path": "model.safetensors", "lfs": true, "safetensors": 7},
        {"path": "extra/weights.bin", "lfs": true, "random": 300000, "seed": 3},
        {"path": "tokenizer/vocab.txt", "lfs": false, "text": "a\nb\nc\n"},
    ])
}

/// Version 2 of the tiny model: a changed config, a few bytes of the weights flipped (a small
/// patch), a renamed vocabulary (a copy from another path of the same repository).
fn tiny_v2() -> Value {
    json!([
        {"path": ".gitattributes", "lfs": false, "text": "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
        {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\", \"hidden_size\": 32, \"v\": 2}\n"},
        {"path": "model.safetensors", "lfs": true, "safetensors": 7},
        {"path": "extra/weights.bin", "lfs": true, "random": 300000, "seed": 3, "flip": [10, 150000, 299999]},
        {"path": "tok/vocab.txt", "lfs": false, "text": "a\nb\nc\n"},
    ])
}

fn embedder() -> Value {
    json!([
        {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"bert\"}\n"},
        {"path": "model.safetensors", "lfs": true, "safetensors": 11},
    ])
}

fn small(text: &str) -> Value {
    json!([
        {"path": "config.json", "lfs": false, "text": text},
        {"path": "weights.bin", "lfs": true, "random": 20000, "seed": 5},
    ])
}

fn pack(env: &Env, repos: &[&str], out: &str, version: &str, base: Option<&str>) -> (i32, Value) {
    let mut args = vec!["pack", "--hf-cache", "src"];
    for r in repos {
        args.extend(["--hf-repo", r]);
    }
    args.extend([
        "-o",
        out,
        "--key",
        "k.key",
        "--name",
        "stack",
        "--version",
        version,
        "--no-model-checks",
    ]);
    if let Some(b) = base {
        args.extend(["--base", b]);
    }
    env.json(&args)
}

fn folder(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// The content of every regular file below `root` (links followed), by relative path.
fn contents(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = walkdir::WalkDir::new(root)
        .min_depth(1)
        .follow_links(true)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path().strip_prefix(root).unwrap().display().to_string(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .filter(|(p, _)| !p.starts_with(".airlock"))
        .collect();
    out.sort();
    out
}

#[test]
fn a_delta_of_several_repositories_installs_each_onto_its_base_or_none() {
    let env = Env::new();
    // Version 1: three repositories, as huggingface_hub downloads them.
    let t1 = build_repo(&env, "src", TINY, COMMIT_A, tiny_v1(), true);
    let e1 = build_repo(&env, "src", EMBED, COMMIT_A, embedder(), true);
    build_repo(&env, "src", DROPPED, COMMIT_A, small("{\"d\": 1}\n"), true);
    let (code, j) = pack(&env, &[TINY, EMBED, DROPPED], "v1", "1", None);
    assert_eq!(code, 0, "{j}");
    for dest in ["d", "d-bad"] {
        env.ok(&["unpack", "v1", "--trust", "k.pub", "--dest", dest]);
    }
    for cache in ["dst", "dst-norcpt", "dst-link"] {
        env.ok(&["unpack", "v1", "--trust", "k.pub", "--hf-cache", cache]);
    }

    // Version 2: the tiny model changes, the embedder does not, the third repository is
    // dropped and a reranker is new.
    let t2 = build_repo(&env, "src", TINY, COMMIT_B, tiny_v2(), true);
    let r2 = build_repo(&env, "src", NEW, COMMIT_A, small("{\"r\": 1}\n"), true);
    let (code, j) = pack(&env, &[TINY, EMBED, NEW], "v2", "2", Some("v1"));
    assert_eq!(code, 0, "{j}");
    let d = &j["delta"];
    // Patched: the tiny model's weights and its changed config (each against the file at its
    // path in the same repository of the base).
    assert_eq!(d["patched_files"], 2, "{j}");
    // Unchanged: the tiny model's .gitattributes and model.safetensors, its renamed vocabulary,
    // the embedder's two files.
    assert_eq!(d["copied_files"], 5, "{j}");
    // Carried: the new reranker's two files.
    assert_eq!(d["carried_files"], 2, "{j}");
    let m: Value =
        serde_json::from_slice(&std::fs::read(env.path("v2/manifest.json")).unwrap()).unwrap();
    let repos: Vec<&str> = m["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["source"]["repo_id"].as_str().unwrap())
        .collect();
    assert_eq!(repos, [EMBED, NEW, TINY]);
    let tf = folder(TINY);
    let from_of = |path: &str| {
        m["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path} in {m:#}"))["from"]
            .clone()
    };
    assert_eq!(
        from_of(&format!("{tf}/tok/vocab.txt"))["path"],
        format!("{tf}/tokenizer/vocab.txt")
    );
    assert_eq!(from_of(&format!("{tf}/extra/weights.bin"))["op"], "xor");
    assert_eq!(
        from_of(&format!("{}/config.json", folder(NEW))),
        Value::Null
    );
    let (code, v) = env.json(&["verify", "v2", "--trust", "k.pub", "--deep"]);
    assert_eq!(code, 0, "{v}");

    // Into the cache: every repository of the delta, each onto its base revision.
    let (code, u) = env.json(&["unpack", "v2", "--trust", "k.pub", "--hf-cache", "dst"]);
    assert_eq!(code, 0, "{u}");
    assert_client_resolves(&env, "dst", TINY, &t2);
    assert_client_resolves(&env, "dst", EMBED, &e1);
    assert_client_resolves(&env, "dst", NEW, &r2);
    // The old revision of the tiny model is still there, as after any install of a new
    // commit; the dropped repository is left as it was.
    let tiny = env.path(&format!("dst/{tf}"));
    assert!(tiny.join("snapshots").join(COMMIT_A).is_dir());
    assert_eq!(
        std::fs::read_to_string(tiny.join("refs/main")).unwrap(),
        COMMIT_B
    );
    assert!(
        env.path(&format!("dst/{}/snapshots/{COMMIT_A}", folder(DROPPED)))
            .is_dir()
    );
    // Each repository has the delta's receipt, so `check` sees each and the next delta finds
    // its base.
    let v2_sha = {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(
            std::fs::read(env.path("v2/manifest.json")).unwrap(),
        ))
    };
    for (repo, commit) in [(TINY, COMMIT_B), (EMBED, COMMIT_A), (NEW, COMMIT_A)] {
        let receipt = env.path(&format!(
            "dst/{}/.airlock/receipts/{commit}/manifest.json",
            folder(repo)
        ));
        use sha2::{Digest, Sha256};
        assert_eq!(
            hex::encode(Sha256::digest(std::fs::read(&receipt).unwrap())),
            v2_sha,
            "{repo}"
        );
        env.ok(&["check", "--hf-cache", "dst", "--hf-repo", repo]);
    }
    // The same bytes a full bundle of version 2 installs.
    let (code, j) = pack(&env, &[TINY, EMBED, NEW], "v2full", "2", None);
    assert_eq!(code, 0, "{j}");
    env.ok(&["unpack", "v2full", "--trust", "k.pub", "--hf-cache", "full"]);
    for repo in [TINY, EMBED, NEW] {
        let snap = |cache: &str| {
            let commit = if repo == TINY { COMMIT_B } else { COMMIT_A };
            contents(&env.path(&format!("{cache}/{}/snapshots/{commit}", folder(repo))))
        };
        assert_eq!(snap("dst"), snap("full"), "{repo}");
    }

    // A base repository whose receipt is gone: refused, nothing of any repository changed.
    let gone = env.path(&format!(
        "dst-norcpt/{}/.airlock/receipts/{COMMIT_A}",
        folder(EMBED)
    ));
    std::fs::remove_dir_all(&gone).unwrap();
    let before = contents(&env.path("dst-norcpt"));
    let err = env.fails(
        3,
        &[
            "unpack",
            "v2",
            "--trust",
            "k.pub",
            "--hf-cache",
            "dst-norcpt",
        ],
    );
    assert!(err.contains(EMBED) && err.contains("too"), "{err}");
    assert_eq!(contents(&env.path("dst-norcpt")), before);
    assert!(!env.path(&format!("dst-norcpt/{}", folder(NEW))).exists());

    // A repository that cannot be published (the new one's folder is a link planted there):
    // all or none, so the tiny model's ref still names version 1.
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.path(&format!("dst-link/{}", folder(NEW)))).unwrap();
    let out = env.run(&["unpack", "v2", "--trust", "k.pub", "--hf-cache", "dst-link"]);
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(env.path(&format!("dst-link/{tf}/refs/main"))).unwrap(),
        COMMIT_A
    );
    assert!(
        !env.path(&format!("dst-link/{tf}/snapshots/{COMMIT_B}"))
            .exists()
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // Into a directory: the whole tree of version 2 over version 1's install, byte for byte
    // the full bundle's; the dropped repository's folder goes with version 1.
    env.ok(&[
        "unpack",
        "v2",
        "--trust",
        "k.pub",
        "--dest",
        "d",
        "--replace",
    ]);
    env.ok(&["unpack", "v2full", "--trust", "k.pub", "--dest", "dfull"]);
    assert_eq!(contents(&env.path("d")), contents(&env.path("dfull")));
    assert!(!env.path(&format!("d/{}", folder(DROPPED))).exists());
    env.ok(&["check", "d"]);
    // A base file changed since it was installed: refused, the install left as it was.
    let w = env.path(&format!("d-bad/{tf}/extra/weights.bin"));
    let mut bytes = std::fs::read(&w).unwrap();
    bytes[7] ^= 1;
    std::fs::write(&w, &bytes).unwrap();
    let before = contents(&env.path("d-bad"));
    env.fails(
        3,
        &[
            "unpack",
            "v2",
            "--trust",
            "k.pub",
            "--dest",
            "d-bad",
            "--replace",
        ],
    );
    assert_eq!(contents(&env.path("d-bad")), before);
    assert_eq!(t1["extra/weights.bin"]["size"], 300000);
}

/// A delta keeps the shape of its base (several repositories, or one model) and shares at
/// least one repository with it: otherwise pack refuses before writing anything (exit 2).
#[test]
fn a_delta_of_several_repositories_needs_a_base_of_several_with_one_in_common() {
    let env = Env::new();
    build_repo(&env, "src", TINY, COMMIT_A, tiny_v1(), true);
    build_repo(&env, "src", EMBED, COMMIT_A, embedder(), true);
    build_repo(&env, "src", DROPPED, COMMIT_A, small("{\"d\": 1}\n"), true);
    build_repo(&env, "src", NEW, COMMIT_A, small("{\"r\": 1}\n"), true);
    let (code, j) = pack(&env, &[TINY, EMBED], "v1", "1", None);
    assert_eq!(code, 0, "{j}");
    let (code, j) = pack(&env, &[TINY], "one", "1", None);
    assert_eq!(code, 0, "{j}");
    let (code, j) = pack(&env, &[TINY], "x1", "2", Some("v1"));
    assert_eq!(code, 2, "{j}");
    assert!(j.to_string().contains("keeps the shape of its base"), "{j}");
    env.assert_nothing_packed("x1");
    let (code, j) = pack(&env, &[TINY, EMBED], "x2", "2", Some("one"));
    assert_eq!(code, 2, "{j}");
    assert!(j.to_string().contains("keeps the shape of its base"), "{j}");
    env.assert_nothing_packed("x2");
    let (code, j) = pack(&env, &[DROPPED, NEW], "x3", "2", Some("v1"));
    assert_eq!(code, 2, "{j}");
    assert!(j.to_string().contains("none of these repositories"), "{j}");
    env.assert_nothing_packed("x3");
}
