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

#[test]
fn volume_size_accepts_the_documented_units() {
    let env = Env::new();
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--volume-size",
        "fat32",
    ]);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--volume-size",
        "4GiB",
    ]);
    let text = env.fails(
        2,
        &[
            "pack",
            "m",
            "-o",
            "b3",
            "--key",
            "k.key",
            "--volume-size",
            "12XB",
        ],
    );
    assert!(text.contains("unknown unit"), "{text}");
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
