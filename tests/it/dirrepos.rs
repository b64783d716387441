//! A model directory beside Hugging Face repositories in one bundle (issue 35 item 2; FORMAT.md
//! section 14.4, `dir`): `pack DIR --hf-repo A`, installed into a directory as `D/NAME/`
//! beside `D/models--ORG--NAME/`, refused whole by a cache install.

use crate::support::*;

/// A staging cache `src` holding `org/a` (installed there by airlock from a directory), and the
/// model directory `mydir` (testdata/tiny-model: safetensors, config, tokenizer).
fn staging(env: &Env) {
    env.write("a/config.json", br#"{"model_type":"bert"}"#);
    env.write("a/weights/w.bin", &pseudo_random(200_000, 3));
    env.ok(&[
        "pack",
        "a",
        "-o",
        "b-a",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
    env.ok(&[
        "unpack",
        "b-a",
        "--trust",
        "k.pub",
        "--hf-cache",
        "src",
        "--hf-repo",
        "org/a",
    ]);
    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tiny-model");
    for (rel, _, content) in tree(&tiny) {
        if let Some(bytes) = content {
            env.write(&format!("mydir/{rel}"), &bytes);
        }
    }
}

fn snapshot(env: &Env) -> std::path::PathBuf {
    let folder = env.path("src/models--org--a");
    let commit = std::fs::read_to_string(folder.join("refs/main")).unwrap();
    folder.join("snapshots").join(commit.trim())
}

#[test]
fn a_directory_beside_a_repository_packs_verifies_and_lands_beside_it() {
    let env = Env::new();
    staging(&env);
    env.ok(&[
        "pack",
        "mydir",
        "--hf-repo",
        "org/a",
        "--hf-cache",
        "src",
        "-o",
        "b",
        "--key",
        "k.key",
    ]);
    let m = env.read_json("b/manifest.json");
    assert_eq!(m["dir"], serde_json::json!({"path": "mydir"}));
    assert_eq!(m["name"], "mydir+org/a");
    assert_eq!(m["repos"][0]["path"], "models--org--a");
    // The repository's etags are its own files' only.
    assert_eq!(
        m["repos"][0]["source"]["etags"].as_array().unwrap().len(),
        2
    );
    assert!(m["source"].is_null());
    // inspect names the directory beside the repository, with its files.
    let dir_files = tree(&env.path("mydir"))
        .into_iter()
        .filter(|(_, _, c)| c.is_some())
        .count() as u64;
    let text = String::from_utf8_lossy(&env.ok(&["inspect", "b"]).stdout).into_owned();
    assert!(
        text.contains(&format!("directory:   mydir/: {dir_files} files")),
        "{text}"
    );
    let (_, j) = env.json(&["inspect", "b"]);
    assert_eq!(j["dir"]["path"], "mydir");
    assert_eq!(j["dir"]["files"], dir_files);
    assert_eq!(
        j["dir"]["files"].as_u64().unwrap() + j["repos"][0]["files"].as_u64().unwrap(),
        m["files"].as_array().unwrap().len() as u64
    );
    env.ok(&["verify", "b", "--trust", "k.pub", "--deep"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "d"]);
    // Both parts byte for byte, and nothing else beside them.
    assert_eq!(tree(&env.path("d/mydir")), tree(&env.path("mydir")));
    let snap = snapshot(&env);
    for f in ["config.json", "weights/w.bin"] {
        assert_eq!(
            std::fs::read(env.path("d/models--org--a").join(f)).unwrap(),
            std::fs::read(snap.join(f)).unwrap(),
            "{f}"
        );
    }
    let mut top: Vec<String> = std::fs::read_dir(env.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, [".airlock", "models--org--a", "mydir"]);
    env.ok(&["check", "d"]);
    // A delta of such a bundle does not exist: refused before anything is written.
    let text = env.fails(
        2,
        &[
            "pack",
            "mydir",
            "--hf-repo",
            "org/a",
            "--hf-cache",
            "src",
            "-o",
            "b2",
            "--key",
            "k.key",
            "--base",
            "b",
        ],
    );
    assert!(
        text.contains("a delta of a directory and repositories"),
        "{text}"
    );
    env.assert_nothing_packed("b2");
}

#[test]
fn a_cache_install_refuses_the_directory_before_writing_anything() {
    let env = Env::new();
    staging(&env);
    env.ok(&[
        "pack",
        "mydir",
        "--hf-repo",
        "org/a",
        "--hf-cache",
        "src",
        "-o",
        "b",
        "--key",
        "k.key",
    ]);
    std::fs::create_dir(env.path("c")).unwrap();
    let text = env.fails(2, &["unpack", "b", "--trust", "k.pub", "--hf-cache", "c"]);
    assert!(
        text.contains("carries the model directory \"mydir\""),
        "{text}"
    );
    assert!(text.contains("--dest"), "{text}");
    assert!(
        tree(&env.path("c")).is_empty(),
        "{:?}",
        tree(&env.path("c"))
    );
    // Only its repositories, chosen: installed, the directory's bytes hashed and dropped.
    env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--hf-cache",
        "c",
        "--repo",
        "org/a",
    ]);
    assert!(env.path("c/models--org--a/refs/main").exists());
    assert!(!env.path("c/mydir").exists());
}
