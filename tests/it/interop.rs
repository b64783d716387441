//! Interoperability with the real `minisign` binary, in both directions.

use crate::support::*;
use std::process::{Command, Stdio};

fn minisign(env: &Env, args: &[&str]) -> std::process::Output {
    Command::new("minisign")
        .args(args)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("the real minisign must be installed: apt-get install minisign (scripts/test.sh does it)")
}

#[test]
fn minisign_key_pair_signs_bundles_airlock_trusts() {
    let env = Env::new();
    env.model("m");
    let out = minisign(&env, &["-G", "-W", "-p", "ms.pub", "-s", "ms.key"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.ok(&["pack", "m", "-o", "b", "--key", "ms.key"]);
    env.ok(&["verify", "b", "--trust", "ms.pub", "--deep"]);
    let out = minisign(&env, &["-Vm", "b/manifest.json", "-p", "ms.pub"]);
    assert!(out.status.success());
    // A key id airlock prints is the one minisign prints.
    let pubtext = std::fs::read_to_string(env.path("ms.pub")).unwrap();
    let (_, j) = env.json(&["verify", "b", "--trust", "ms.pub"]);
    assert!(
        pubtext.contains(j["signer"].as_str().unwrap()),
        "{pubtext} {j}"
    );
}

#[test]
fn airlock_signatures_and_keys_work_in_minisign() {
    let env = Env::new();
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--name",
        "org/model",
        "--version",
        "7",
    ]);
    let out = minisign(&env, &["-Vm", "b/manifest.json", "-p", "k.pub"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("version=7 name=org/model"), "{text}");
    // The airlock secret key signs with minisign, and airlock verifies minisign's signature.
    env.write("msg.txt", b"hello");
    let out = minisign(
        &env,
        &["-S", "-s", "k.key", "-m", "msg.txt", "-t", "trusted"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = minisign(&env, &["-Vm", "msg.txt", "-p", "k.pub"]);
    assert!(out.status.success());
    // minisign refuses a manifest airlock's signature does not cover.
    let mut m = std::fs::read(env.path("b/manifest.json")).unwrap();
    m[10] ^= 1;
    std::fs::write(env.path("b/manifest.json"), m).unwrap();
    assert!(
        !minisign(&env, &["-Vm", "b/manifest.json", "-p", "k.pub"])
            .status
            .success()
    );
}

#[test]
fn encrypted_airlock_key_signs_with_password_file() {
    let env = Env::new();
    env.model("m");
    env.write("pw", b"correct horse\n");
    env.write("bad", b"wrong\n");
    env.ok(&["keygen", "--out", "enc", "--password-file", "pw"]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(env.path("enc.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let text = env.fails(
        1,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "enc.key",
            "--password-file",
            "bad",
        ],
    );
    assert!(text.contains("wrong password"), "{text}");
    assert!(!env.path("b").exists());
    let text = env.fails(2, &["pack", "m", "-o", "b", "--key", "enc.key"]);
    assert!(text.contains("--password-file"), "{text}");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "enc.key",
        "--password-file",
        "pw",
    ]);
    let out = minisign(&env, &["-Vm", "b/manifest.json", "-p", "enc.pub"]);
    assert!(out.status.success());
    // keygen never overwrites without --force.
    let text = env.fails(2, &["keygen", "--out", "enc", "--unencrypted"]);
    assert!(text.contains("--force"), "{text}");
    env.ok(&["keygen", "--out", "enc", "--unencrypted", "--force"]);
}
