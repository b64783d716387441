//! What a person or a script sees: help, JSON documents, usage errors.

use crate::support::*;

#[test]
fn every_command_has_help() {
    let env = Env::new();
    for cmd in [
        "keygen",
        "pack",
        "verify",
        "unpack",
        "inspect",
        "check",
        "completions",
        "man",
    ] {
        let out = env.ok(&[cmd, "--help"]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage: airlock"),
            "{cmd}"
        );
    }
    let out = env.ok(&["--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Exit codes"));
}

#[test]
fn json_is_one_document_on_success_and_failure() {
    let env = Env::new();
    env.model("m");
    let (code, j) = env.json(&["pack", "m", "-o", "b", "--key", "k.key"]);
    assert_eq!(code, 0);
    assert_eq!(j["command"], "pack");
    assert_eq!(j["ok"], true);
    assert_eq!(j["files"], 6);
    let (code, j) = env.json(&["verify", "b", "--trust", "k.pub", "--deep"]);
    assert_eq!(
        (code, j["ok"].clone(), j["files_checked"].clone()),
        (0, true.into(), 6.into())
    );
    // A bundle path that is not there is operational (exit 1), not a failed verification.
    let (code, j) = env.json(&["verify", "nonexistent", "--trust", "k.pub"]);
    assert_eq!(code, 1);
    assert_eq!(j["ok"], false);
    assert_eq!(j["error"]["kind"], "io");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nonexistent")
    );
    let (code, j) = env.json(&["verify"]);
    assert_eq!(code, 2);
    assert_eq!(j["error"]["kind"], "usage");
    let (code, j) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(code, 0);
    assert_eq!(j["dest"], "out");
    let (code, j) = env.json(&["check", "out"]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["receipt"], true);
}

/// The sizes of a bundle's volumes, read from the files, checked against the manifest.
fn volume_sizes(env: &Env, bundle: &str) -> Vec<u64> {
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(env.path(&format!("{bundle}/manifest.json"))).unwrap(),
    )
    .unwrap();
    m["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let name = v["name"].as_str().unwrap();
            let len = std::fs::metadata(env.path(&format!("{bundle}/{name}")))
                .unwrap()
                .len();
            assert_eq!(len, v["size"].as_u64().unwrap(), "{bundle}/{name}");
            len
        })
        .collect()
}

/// `--volume-size` cuts every volume but the last at exactly the size asked for, in each unit
/// (the model is several times larger than every size used, so the cut is what is measured).
#[test]
fn volume_size_gives_the_sizes_asked_for() {
    let env = Env::new();
    env.model("m");
    let mut stream = None;
    for (i, (flag, bytes)) in [
        ("100K", 100 * 1024),
        ("100KiB", 100 * 1024),
        ("100KB", 100_000),
        ("123457", 123_457),
        ("4096", 4096),
        ("1M", 1 << 20),
    ]
    .into_iter()
    .enumerate()
    {
        let out = format!("b{i}");
        env.ok(&[
            "pack",
            "m",
            "-o",
            &out,
            "--key",
            "k.key",
            "--compress",
            "none",
            "--volume-size",
            flag,
        ]);
        let sizes = volume_sizes(&env, &out);
        let (last, full) = sizes.split_last().unwrap();
        assert!(full.iter().all(|&s| s == bytes), "{flag}: {sizes:?}");
        assert!(*last > 0 && *last <= bytes, "{flag}: {sizes:?}");
        let total: u64 = sizes.iter().sum();
        assert_eq!(*stream.get_or_insert(total), total, "{flag}: same stream");
        if bytes < (1 << 20) {
            assert!(
                sizes.len() >= 3,
                "{flag}: the model must span volumes: {sizes:?}"
            );
        } else {
            assert_eq!(sizes.len(), 1, "{flag}: {sizes:?}");
        }
    }
}

#[test]
fn volume_size_accepts_the_documented_units() {
    let env = Env::new();
    env.model("m");
    for (i, flag) in ["fat32", "4GiB", "4gb"].into_iter().enumerate() {
        let out = format!("b{i}");
        env.ok(&[
            "pack",
            "m",
            "-o",
            &out,
            "--key",
            "k.key",
            "--volume-size",
            flag,
        ]);
        assert_eq!(volume_sizes(&env, &out).len(), 1, "{flag}");
    }
    for (flag, why) in [
        ("12XB", "unknown unit"),
        ("4095", "at least 4096 bytes"),
        ("M", "is not a size"),
        ("99999999999999999999T", "too large"),
    ] {
        let text = env.fails(
            2,
            &[
                "pack",
                "m",
                "-o",
                "bad",
                "--key",
                "k.key",
                "--volume-size",
                flag,
            ],
        );
        assert!(text.contains(why), "{flag}: {text}");
        env.assert_nothing_packed("bad");
    }
}

#[test]
fn completions_and_man_page_generate() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.ok(&["completions", shell]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("unpack"),
            "{shell}"
        );
    }
    let out = env.ok(&["man"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(".TH airlock"));
}
