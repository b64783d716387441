//! Bundles of several Hugging Face repositories (issue 35 item 2; FORMAT.md section 14.4):
//! an adapter and its base cross in one bundle under one signature and install together, and
//! every hostile variant is refused whole, naming the repository or file.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::support::*;

/// Rewrites `BUNDLE/manifest.json` with `edit` applied and signs it again with `k.key`, as a
/// dishonest or buggy packer holding the trusted key would.
fn resign(env: &Env, bundle: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = env.path(&format!("{bundle}/manifest.json"));
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    let mut bytes = serde_json::to_vec_pretty(&v).unwrap();
    bytes.push(b'\n');
    let key = airlock::keys::SecretKey::load(&env.path("k.key"), None).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    let name = v["name"].as_str().unwrap();
    let version = v["version"].as_u64().unwrap();
    let sig = airlock::keys::sign(
        &key,
        &bytes,
        "signature from airlock secret key",
        &airlock::manifest::trusted_comment(name, version, &sha),
    )
    .unwrap();
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(
        env.path(&format!("{bundle}/manifest.json.minisig")),
        sig.to_file_text(),
    )
    .unwrap();
}

/// A staging cache `src` holding `org/base` (a config and a 12 MiB LFS-sized file) and
/// `org/adapter`, whose adapter_config.json names `org/base`: each packed from a directory and
/// installed there by airlock.
fn staging_cache(env: &Env) {
    env.write("base/config.json", br#"{"model_type":"x"}"#);
    env.write("base/weights/w.bin", &pseudo_random(12 << 20, 7));
    env.write(
        "adapter/adapter_config.json",
        br#"{"base_model_name_or_path":"org/base","peft_type":"LORA"}"#,
    );
    env.write("adapter/notes.txt", b"an adapter\n");
    for (dir, repo) in [("base", "org/base"), ("adapter", "org/adapter")] {
        let b = format!("b-{dir}");
        env.ok(&["pack", dir, "-o", &b, "--key", "k.key", "--no-model-checks"]);
        env.install_in_hf_cache(&b, "src", repo);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    if !dir.exists() {
        return Vec::new();
    }
    let mut v: Vec<String> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .map(|e| {
            e.unwrap()
                .path()
                .strip_prefix(dir)
                .unwrap()
                .display()
                .to_string()
        })
        .filter(|p| !p.starts_with(".locks"))
        .collect();
    v.sort();
    v
}

#[test]
fn with_dependencies_packs_the_base_from_the_cache_and_both_install_or_neither() {
    let env = Env::new();
    staging_cache(&env);
    // --with-dependencies adds the base the adapter names, from the local cache.
    let (code, j) = env.json(&[
        "pack",
        "--hf-cache",
        "src",
        "--hf-repo",
        "org/adapter",
        "--with-dependencies",
        "-o",
        "multi",
        "--key",
        "k.key",
    ]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(
        j["dependencies_added"],
        serde_json::json!(["org/base@main"])
    );
    let ids: Vec<&str> = j["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["repo_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["org/adapter", "org/base"]);
    // The same bundle from two --hf-repo.
    env.ok(&[
        "pack",
        "--hf-cache",
        "src",
        "--hf-repo",
        "org/base",
        "--hf-repo",
        "org/adapter@main",
        "-o",
        "multi2",
        "--key",
        "k.key",
    ]);
    // verify and inspect list the repositories.
    let (code, v) = env.json(&["verify", "multi", "--trust", "k.pub"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["repos"].as_array().unwrap().len(), 2);
    let text = String::from_utf8(env.ok(&["inspect", "multi"]).stdout).unwrap();
    assert!(
        text.contains("repository:  Hugging Face model org/base"),
        "{text}"
    );

    // A target where one repository cannot be installed (its folder is a link planted
    // there, exit 2 as for a bundle of one: `exists and is not a directory`): the install is
    // refused after the adapter (first in bundle order) was staged and published, and that
    // is undone: nothing of either repository appears.
    std::fs::create_dir_all(env.path("tgt")).unwrap();
    std::fs::create_dir_all(env.path("elsewhere")).unwrap();
    std::os::unix::fs::symlink(env.path("elsewhere"), env.path("tgt/models--org--base")).unwrap();
    let text = env.fails(
        2,
        &["unpack", "multi", "--trust", "k.pub", "--hf-cache", "tgt"],
    );
    assert!(text.contains("models--org--base"), "{text}");
    assert_eq!(entries(&env.path("tgt")), ["models--org--base"]);
    assert!(entries(&env.path("elsewhere")).is_empty());

    // Into a clean cache: both, each with its receipt, each checked on its own.
    let (code, u) = env.json(&["unpack", "multi", "--trust", "k.pub", "--hf-cache", "cache"]);
    assert_eq!(code, 0, "{u}");
    assert_eq!(u["repos"].as_array().unwrap().len(), 2);
    for repo in ["org/adapter", "org/base"] {
        let folder = format!("cache/models--{}", repo.replace('/', "--"));
        let receipts = env.path(&format!("{folder}/.airlock/receipts"));
        assert_eq!(std::fs::read_dir(&receipts).unwrap().count(), 1, "{repo}");
        env.ok(&["check", "--hf-cache", "cache", "--hf-repo", repo]);
    }
    // The adapter's base is there for the loader: no repository missing.
    let (_, c) = env.json(&[
        "check",
        "--hf-cache",
        "cache",
        "--hf-repo",
        "org/adapter",
        "--offline-ready",
    ]);
    let codes: Vec<&str> = c["offline_findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert!(!codes.contains(&"offline-repo-missing"), "{c}");
    // The operator cannot rename them, and an OCI layout or a registry is refused whole.
    let text = env.fails(
        2,
        &[
            "unpack",
            "multi",
            "--trust",
            "k.pub",
            "--hf-cache",
            "c2",
            "--hf-repo",
            "o/x",
        ],
    );
    assert!(text.contains("carries 2 repositories"), "{text}");
    // An OCI layout holds the one artifact push publishes: every file a layer at its bundle
    // path, below its repository's folder.
    env.ok(&[
        "unpack",
        "multi",
        "--trust",
        "k.pub",
        "--oci-layout",
        "layout",
    ]);
    let index = env.read_json("layout/index.json");
    let digest = index["manifests"][0]["digest"].as_str().unwrap();
    let image: serde_json::Value = serde_json::from_slice(
        &std::fs::read(env.path(&format!(
            "layout/blobs/sha256/{}",
            digest.strip_prefix("sha256:").unwrap()
        )))
        .unwrap(),
    )
    .unwrap();
    let paths: Vec<&str> = image["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l["annotations"]["org.cncf.model.filepath"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert!(
        paths.contains(&"models--org--base/weights/w.bin"),
        "{paths:?}"
    );
    // Into a directory: each repository in its own folder, one receipt for the tree.
    env.ok(&["unpack", "multi", "--trust", "k.pub", "--dest", "d"]);
    assert!(env.path("d/models--org--base/weights/w.bin").is_file());
    assert!(
        env.path("d/models--org--adapter/adapter_config.json")
            .is_file()
    );
    env.ok(&["check", "d"]);
}

#[test]
fn hostile_repository_lists_are_refused_naming_the_problem() {
    let env = Env::new();
    staging_cache(&env);
    // Two spellings of one repository (the same folder on a case-insensitive filesystem).
    let text = env.fails(
        2,
        &[
            "pack",
            "--hf-cache",
            "src",
            "--hf-repo",
            "org/base",
            "--hf-repo",
            "ORG/BASE",
            "-o",
            "x",
            "--key",
            "k.key",
        ],
    );
    assert!(text.contains("name the same repository"), "{text}");
    env.assert_nothing_packed("x");
    // A repository id with `..`.
    let text = env.fails(
        2,
        &[
            "pack",
            "--hf-cache",
            "src",
            "--hf-repo",
            "org/base",
            "--hf-repo",
            "../etc",
            "-o",
            "x",
            "--key",
            "k.key",
        ],
    );
    assert!(text.contains("../etc"), "{text}");
    // A dependency the cache does not hold: refused naming it, never fetched.
    env.write(
        "lonely/adapter_config.json",
        br#"{"base_model_name_or_path":"org/not-here","peft_type":"LORA"}"#,
    );
    env.ok(&[
        "pack",
        "lonely",
        "-o",
        "b-lonely",
        "--key",
        "k.key",
        "--no-model-checks",
    ]);
    env.ok(&[
        "unpack",
        "b-lonely",
        "--trust",
        "k.pub",
        "--hf-cache",
        "src",
        "--hf-repo",
        "org/lonely",
    ]);
    let text = env.fails(
        1,
        &[
            "pack",
            "--hf-cache",
            "src",
            "--hf-repo",
            "org/lonely",
            "--with-dependencies",
            "-o",
            "x",
            "--key",
            "k.key",
        ],
    );
    assert!(text.contains("org/not-here@main is needed"), "{text}");
    env.assert_nothing_packed("x");

    env.ok(&[
        "pack",
        "--hf-cache",
        "src",
        "--hf-repo",
        "org/base",
        "--hf-repo",
        "org/adapter",
        "-o",
        "multi",
        "--key",
        "k.key",
    ]);
    // Signed by the trusted key, yet each broken: refused before anything is written.
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        // Both entries claim the same folder.
        (
            "out of order or twice",
            Box::new(|v| v["repos"][1] = v["repos"][0].clone()),
        ),
        // A repository the bundle claims and does not carry.
        (
            "models--org--ghost",
            Box::new(|v| {
                let mut ghost = v["repos"][1].clone();
                ghost["path"] = "models--org--ghost".into();
                ghost["source"]["repo_id"] = "org/ghost".into();
                v["repos"].as_array_mut().unwrap().push(ghost);
            }),
        ),
        // A repository id that climbs out of the cache.
        (
            "repo_id",
            Box::new(|v| {
                v["repos"][0]["source"]["repo_id"] = "org/..".into();
                v["repos"][0]["path"] = "models--org--..".into();
            }),
        ),
    ];
    for (i, (want, edit)) in cases.into_iter().enumerate() {
        let b = format!("bad{i}");
        copy_dir(&env.path("multi"), &env.path(&b));
        resign(&env, &b, edit);
        let text = env.fails(3, &["unpack", &b, "--trust", "k.pub", "--hf-cache", "c"]);
        assert!(text.contains(want), "{want}: {text}");
        assert!(
            entries(&env.path("c")).is_empty(),
            "{want}: {:?}",
            entries(&env.path("c"))
        );
        env.fails(3, &["unpack", &b, "--trust", "k.pub", "--dest", "d"]);
        assert!(!env.path("d").exists());
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The goal of issue 35: a bundle of several repositories installs a PEFT adapter and its base
/// that load together with the real libraries and no network (`unshare -n`).
#[test]
fn an_adapter_and_its_base_from_one_bundle_load_together_offline() {
    let python = crate::offline_ready::venv_python();
    let env = Env::new();
    let out = std::process::Command::new(&python)
        .arg(crate::offline_ready::script())
        .arg("build-peft")
        .arg(env.path("models"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the models failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The staging host's cache: both repositories, as airlock installs them there.
    for name in ["lora-base", "lora-adapter"] {
        let b = format!("b-{name}");
        env.ok(&[
            "pack",
            &format!("models/{name}"),
            "-o",
            &b,
            "--key",
            "k.key",
        ]);
        env.ok(&[
            "unpack",
            &b,
            "--trust",
            "k.pub",
            "--hf-cache",
            "staging",
            "--hf-repo",
            &format!("airlock-test/{name}"),
        ]);
    }
    // One bundle: the adapter, and its base found by --with-dependencies.
    let (code, j) = env.json(&[
        "pack",
        "--hf-cache",
        "staging",
        "--hf-repo",
        "airlock-test/lora-adapter",
        "--with-dependencies",
        "-o",
        "pair",
        "--key",
        "k.key",
    ]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(
        j["dependencies_added"],
        serde_json::json!(["airlock-test/lora-base@main"])
    );
    // The target: a fresh cache, one unpack.
    env.ok(&["unpack", "pair", "--trust", "k.pub", "--hf-cache", "cache"]);
    let (_, c) = env.json(&[
        "check",
        "--hf-cache",
        "cache",
        "--hf-repo",
        "airlock-test/lora-adapter",
        "--offline-ready",
    ]);
    let errors: Vec<&serde_json::Value> = c["offline_findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert!(errors.is_empty(), "{c}");
    // Loaded with no network. peft asks the hub whether the adapter exists unless
    // HF_HUB_OFFLINE=1 (the offline-needs-hub-offline warning): that caller loads both.
    let loads = crate::offline_ready::load_all(&python, &env, true);
    assert_eq!(loads.get("lora-adapter"), Some(&None), "{loads:?}");
    assert_eq!(loads.get("lora-base"), Some(&None), "{loads:?}");
    // The caller without it fails, for the reason airlock's warning gave.
    let loads = crate::offline_ready::load_all(&python, &env, false);
    let err = loads["lora-adapter"].clone().unwrap_or_default();
    assert!(err.contains("file_exists"), "{err}");
}

/// `multi`: org/adapter then org/base (bundle order), packed from the staging cache.
fn pack_multi(env: &Env) {
    staging_cache(env);
    env.ok(&[
        "pack",
        "--hf-cache",
        "src",
        "--hf-repo",
        "org/base",
        "--hf-repo",
        "org/adapter",
        "-o",
        "multi",
        "--key",
        "k.key",
    ]);
}

#[test]
fn one_repository_by_name_goes_into_the_directory_itself_and_the_rest_is_only_hashed() {
    let env = Env::new();
    pack_multi(&env);
    // One repository: its files at the top of --dest, its receipt the whole signed manifest
    // and part.json naming it; `check` checks that part.
    let (code, j) = env.json(&[
        "unpack", "multi", "--trust", "k.pub", "--dest", "d-base", "--repo", "org/base",
    ]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["part"], serde_json::json!(["models--org--base"]), "{j}");
    // The files and bytes of that part, not of the bundle (CLI.md, unpack JSON).
    assert_eq!(j["files"], 2, "{j}");
    assert_eq!(
        j["bytes"].as_u64(),
        Some((12 << 20) + br#"{"model_type":"x"}"#.len() as u64),
        "{j}"
    );
    assert_eq!(
        tree_without_receipt(&env.path("d-base"))
            .into_iter()
            .map(|(p, _, _)| p)
            .collect::<Vec<_>>(),
        ["config.json", "weights", "weights/w.bin"]
    );
    assert_eq!(
        std::fs::read(env.path("d-base/weights/w.bin")).unwrap(),
        pseudo_random(12 << 20, 7)
    );
    assert_eq!(
        std::fs::read_to_string(env.path("d-base/.airlock/part.json")).unwrap(),
        "{\"repos\":[\"models--org--base\"]}\n"
    );
    assert_eq!(
        std::fs::read(env.path("d-base/.airlock/manifest.json")).unwrap(),
        std::fs::read(env.path("multi/manifest.json")).unwrap()
    );
    env.ok(&["check", "d-base", "--trust", "k.pub"]);
    // A changed file of that part is found.
    env.write("d-base/config.json", br#"{"model_type":"y"}"#);
    env.fails(3, &["check", "d-base", "--trust", "k.pub"]);

    // Several: each in its folder, by id, TYPE:ID or folder name.
    env.ok(&[
        "unpack",
        "multi",
        "--trust",
        "k.pub",
        "--dest",
        "two",
        "--repo",
        "model:org/adapter",
        "--repo",
        "models--org--base",
    ]);
    assert!(env.path("two/models--org--base/weights/w.bin").is_file());
    assert!(
        env.path("two/models--org--adapter/adapter_config.json")
            .is_file()
    );
    env.ok(&["check", "two", "--trust", "k.pub"]);

    // Into a cache: only the chosen repository appears, with its receipt; the success line
    // counts its files.
    let out = env.ok(&[
        "unpack",
        "multi",
        "--trust",
        "k.pub",
        "--hf-cache",
        "c1",
        "--repo",
        "org/adapter",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" 2 files ("), "{text}");
    assert_eq!(
        entries(&env.path("c1"))
            .iter()
            .filter(|p| !p.contains('/'))
            .collect::<Vec<_>>(),
        ["models--org--adapter"]
    );
    env.ok(&["check", "--hf-cache", "c1", "--hf-repo", "org/adapter"]);

    // A name the bundle does not carry: exit 2, listing what it carries, nothing written.
    let text = env.fails(
        2,
        &[
            "unpack", "multi", "--trust", "k.pub", "--dest", "none", "--repo", "org/nope",
        ],
    );
    assert!(text.contains("model:org/adapter, model:org/base"), "{text}");
    assert!(!env.path("none").exists());
    let text = env.fails(
        2,
        &[
            "unpack",
            "multi",
            "--trust",
            "k.pub",
            "--hf-cache",
            "c2",
            "--repo",
            "org/nope",
        ],
    );
    assert!(text.contains("org/nope"), "{text}");
    assert!(entries(&env.path("c2")).is_empty());

    // part.json rewritten to name a repository the manifest does not carry: refused, named.
    std::fs::write(
        env.path("d-base/.airlock/part.json"),
        "{\"repos\":[\"models--org--nope\"]}\n",
    )
    .unwrap();
    let text = env.fails(3, &["check", "d-base", "--trust", "k.pub"]);
    assert!(text.contains("part.json"), "{text}");

    // The unchosen repository's bytes are still verified: damage in them (the base's 12 MiB
    // file, at the end of the stream) fails the install of the adapter alone, nothing written.
    let volume = std::fs::read_dir(env.path("multi"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&volume).unwrap();
    let at = bytes.len() - (2 << 20);
    bytes[at] ^= 0xff;
    std::fs::write(&volume, &bytes).unwrap();
    env.fails(
        3,
        &[
            "unpack",
            "multi",
            "--trust",
            "k.pub",
            "--dest",
            "d-adapter",
            "--repo",
            "org/adapter",
        ],
    );
    assert!(!env.path("d-adapter").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());
}

/// GET requests of blob `sha256` in the registry's access log.
fn blob_gets(reg: &crate::oci::Registry, sha256: &str) -> usize {
    reg.log()
        .lines()
        .filter(|l| l.contains("\"GET /v2/") && l.contains(&format!("/blobs/sha256:{sha256}")))
        .count()
}

#[test]
fn a_bundle_of_several_is_pushed_as_one_artifact_and_installs_whole_or_in_part() {
    let reg = crate::oci::Registry::start();
    let env = Env::new();
    pack_multi(&env);
    let target = reg.reference("models/multi:1");
    let text = reg.ok(&env, &["push", "multi", &target, "--trust", "k.pub"]);
    assert!(text.contains("OK   published"), "{text}");
    let weights = hex::encode(Sha256::digest(pseudo_random(12 << 20, 7)));

    // Into a cache: every repository, each checked on its own.
    reg.ok(
        &env,
        &["unpack", &target, "--trust", "k.pub", "--hf-cache", "cache"],
    );
    for repo in ["org/adapter", "org/base"] {
        env.ok(&["check", "--hf-cache", "cache", "--hf-repo", repo]);
    }
    let fetched = blob_gets(&reg, &weights);
    assert!(fetched >= 1, "{}", reg.log());

    // One repository into a directory: the other's layers are never fetched.
    reg.ok(
        &env,
        &[
            "unpack",
            &target,
            "--trust",
            "k.pub",
            "--dest",
            "d-adapter",
            "--repo",
            "org/adapter",
        ],
    );
    assert!(env.path("d-adapter/adapter_config.json").is_file());
    assert!(!env.path("d-adapter/weights").exists());
    env.ok(&["check", "d-adapter", "--trust", "k.pub"]);
    assert_eq!(
        blob_gets(&reg, &weights),
        fetched,
        "the base's weights were fetched"
    );
    // Into a cache, the same.
    reg.ok(
        &env,
        &[
            "unpack",
            &target,
            "--trust",
            "k.pub",
            "--hf-cache",
            "c1",
            "--repo",
            "org/adapter",
        ],
    );
    assert!(!env.path("c1/models--org--base").exists());
    env.ok(&["check", "--hf-cache", "c1", "--hf-repo", "org/adapter"]);
    assert_eq!(blob_gets(&reg, &weights), fetched);

    // The base alone: its weights fetched and checked against the signed manifest; a
    // tampered blob in the registry is exit 3, nothing installed.
    let blob = reg.blob_file(&weights);
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[5] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    reg.fails(
        &env,
        3,
        &[
            "unpack", &target, "--trust", "k.pub", "--dest", "d-base", "--repo", "org/base",
        ],
    );
    assert!(!env.path("d-base").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());
}

/// `pack --hf-repo TYPE:ORG/NAME`: a model and a dataset of a real huggingface_hub cache layout
/// cross in one bundle, each with its type in the manifest, and install into a fresh cache
/// where huggingface_hub finds each under its type.
#[test]
fn a_model_and_a_dataset_cross_in_one_bundle_each_with_its_type() {
    use crate::hfcache::{COMMIT_A, COMMIT_B, assert_client_resolves_typed, build_typed};
    let env = Env::new();
    let model = build_typed(
        &env,
        "src",
        ("model", "acme/tiny-model"),
        COMMIT_A,
        serde_json::json!([
            {"path": "config.json", "lfs": false, "text": "{\"model_type\": \"tiny\"}\n"},
            {"path": "model.safetensors", "lfs": true, "safetensors": 5},
        ]),
        true,
    );
    // The dataset shares the model's name: only the type tells them apart.
    let data = build_typed(
        &env,
        "src",
        ("dataset", "acme/tiny-model"),
        COMMIT_B,
        serde_json::json!([
            {"path": "README.md", "lfs": false, "text": "# data\n"},
            {"path": "train/part-0.bin", "lfs": true, "random": 200000, "seed": 9},
        ]),
        true,
    );
    let (code, j) = env.json(&[
        "pack",
        "--hf-cache",
        "src",
        "--hf-repo",
        "acme/tiny-model",
        "--hf-repo",
        "dataset:acme/tiny-model@main",
        "--with-dependencies",
        "-o",
        "both",
        "--key",
        "k.key",
    ]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["dependencies_added"], serde_json::json!([]), "{j}");
    let m = env.read_json("both/manifest.json");
    let repos: Vec<(String, String, String, String)> = m["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = &r["source"];
            (
                r["path"].as_str().unwrap().to_string(),
                s["repo_type"].as_str().unwrap().to_string(),
                s["repo_id"].as_str().unwrap().to_string(),
                s["commit"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = |p: &str, t: &str, c: &str| (p.into(), t.into(), "acme/tiny-model".into(), c.into());
    assert_eq!(
        repos,
        vec![
            want("datasets--acme--tiny-model", "dataset", COMMIT_B),
            want("models--acme--tiny-model", "model", COMMIT_A),
        ]
    );
    // A fresh cache on the target: one unpack installs both, each under its type.
    env.ok(&["unpack", "both", "--trust", "k.pub", "--hf-cache", "dst"]);
    let v = assert_client_resolves_typed(&env, "dst", ("model", "acme/tiny-model"), &model);
    let types: Vec<&str> = v["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["repo_type"].as_str().unwrap())
        .collect();
    assert_eq!(types.len(), 2, "{v:#}");
    assert!(
        types.contains(&"model") && types.contains(&"dataset"),
        "{v:#}"
    );
    assert_client_resolves_typed(&env, "dst", ("dataset", "acme/tiny-model"), &data);
    // Each checks on its own by its type.
    env.ok(&[
        "check",
        "--hf-cache",
        "dst",
        "--hf-repo",
        "acme/tiny-model",
        "--repo-type",
        "dataset",
    ]);
    // And one of them alone by its typed name.
    env.ok(&[
        "unpack",
        "both",
        "--trust",
        "k.pub",
        "--hf-cache",
        "one",
        "--repo",
        "dataset:acme/tiny-model",
    ]);
    assert_client_resolves_typed(&env, "one", ("dataset", "acme/tiny-model"), &data);
    assert!(!env.path("one/models--acme--tiny-model").exists());
}

#[test]
fn a_repository_type_prefix_is_checked_and_one_repository_twice_is_refused() {
    let env = Env::new();
    staging_cache(&env);
    let pack = |repos: &[&str]| {
        let mut args = vec!["pack", "--hf-cache", "src"];
        for r in repos {
            args.extend(["--hf-repo", r]);
        }
        args.extend(["-o", "x", "--key", "k.key"]);
        let text = env.fails(2, &args);
        env.assert_nothing_packed("x");
        text
    };
    // An unknown type, named.
    let text = pack(&["weights:org/base", "org/adapter"]);
    assert!(
        text.contains("\"weights\" is not a Hugging Face repository type"),
        "{text}"
    );
    assert!(text.contains("--hf-repo weights:org/base"), "{text}");
    // The same repository, once with its type and once by the default.
    let text = pack(&["model:org/base", "org/base@main"]);
    assert!(text.contains("name the same repository"), "{text}");
    assert!(text.contains("models--org--base"), "{text}");
    // --repo-type is the default for the names without a prefix.
    let text = env.fails(
        1,
        &[
            "pack",
            "--hf-cache",
            "src",
            "--repo-type",
            "dataset",
            "--hf-repo",
            "org/base",
            "--hf-repo",
            "model:org/adapter",
            "-o",
            "x",
            "--key",
            "k.key",
        ],
    );
    assert!(text.contains("datasets--org--base"), "{text}");
    env.assert_nothing_packed("x");
    // And a prefix overrides it: both models pack.
    env.ok(&[
        "pack",
        "--hf-cache",
        "src",
        "--repo-type",
        "dataset",
        "--hf-repo",
        "model:org/base",
        "--hf-repo",
        "model:org/adapter",
        "-o",
        "ok",
        "--key",
        "k.key",
    ]);
}
