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
    // The key id airlock prints is the number minisign prints, in minisign 0.12's fixed
    // 16-digit form. minisign 0.11 drops leading zeros (1 key in 16 has one), so the comment is
    // compared as a number, and airlock's text must be exactly that number zero-padded.
    let pubtext = std::fs::read_to_string(env.path("ms.pub")).unwrap();
    let (_, j) = env.json(&["verify", "b", "--trust", "ms.pub"]);
    let signer = j["signer"].as_str().unwrap();
    let shown = minisign_comment_key_id(&pubtext);
    assert_eq!(signer, format!("{shown:016X}"), "{pubtext} {j}");
    assert_eq!(signer, key_id_of(&pubtext), "{pubtext} {j}");
}

/// The key id in a `.pub` file's comment line, as a number (minisign 0.11 writes `%X`, 0.12 and
/// later `%016X`).
fn minisign_comment_key_id(pubtext: &str) -> u64 {
    let hex = pubtext
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("untrusted comment: minisign public key "))
        .unwrap_or_else(|| panic!("not a minisign public key comment: {pubtext}"));
    assert!(
        !hex.is_empty() && hex.len() <= 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hex:?}"
    );
    u64::from_str_radix(hex, 16).unwrap()
}

/// The key id decoded from a `.pub` file's key line (bytes 2..10, little-endian), 16 digits.
fn key_id_of(pubtext: &str) -> String {
    use base64::Engine;
    let line = pubtext.lines().nth(1).unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(line)
        .unwrap();
    format!(
        "{:016X}",
        u64::from_le_bytes(raw[2..10].try_into().unwrap())
    )
}

/// The leading-zero case happens for 1 minisign key in 16, so it is made every time: a real
/// minisign key pair whose key id is rewritten (in the public key, the secret key and its
/// checksum) to have leading zeros, then signs with minisign and verifies with airlock.
#[test]
fn key_id_with_leading_zeros_matches_across_tools() {
    let env = Env::new();
    env.model("m");
    let out = minisign(&env, &["-G", "-W", "-p", "ms.pub", "-s", "ms.key"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = 0x0000_0A1B_2C3D_4E5Fu64.to_le_bytes();
    rewrite_key_id(&env, &id);
    env.write("msg.txt", b"hello");
    let out = minisign(&env, &["-S", "-s", "ms.key", "-m", "msg.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = minisign(&env, &["-Vm", "msg.txt", "-p", "ms.pub"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.ok(&["pack", "m", "-o", "b", "--key", "ms.key"]);
    let (code, j) = env.json(&["verify", "b", "--trust", "ms.pub"]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(j["signer"], "00000A1B2C3D4E5F", "{j}");
    let pubtext = std::fs::read_to_string(env.path("ms.pub")).unwrap();
    assert_eq!(minisign_comment_key_id(&pubtext), 0x0A1B_2C3D_4E5F);
    // minisign reads the bundle's signature made with the same key.
    let out = minisign(&env, &["-Vm", "b/manifest.json", "-p", "ms.pub"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Puts `id` into the unencrypted minisign pair `ms.key`/`ms.pub`: the key id is bytes 2..10 of
/// the public key, and in the secret key the key id (bytes 54..62) is covered by a BLAKE2b-256
/// checksum of signature algorithm, key id and secret key (bytes 126..158).
fn rewrite_key_id(env: &Env, id: &[u8; 8]) {
    use base64::Engine;
    use blake2::Digest;
    let b64 = base64::engine::general_purpose::STANDARD;
    let pubtext = std::fs::read_to_string(env.path("ms.pub")).unwrap();
    let mut raw = b64.decode(pubtext.lines().nth(1).unwrap()).unwrap();
    raw[2..10].copy_from_slice(id);
    // minisign 0.11 writes the comment without leading zeros; keep that shape.
    let n = u64::from_le_bytes(*id);
    env.write(
        "ms.pub",
        format!(
            "untrusted comment: minisign public key {n:X}\n{}\n",
            b64.encode(&raw)
        )
        .as_bytes(),
    );
    let keytext = std::fs::read_to_string(env.path("ms.key")).unwrap();
    let mut lines: Vec<String> = keytext.lines().map(String::from).collect();
    let mut sk = b64.decode(&lines[1]).unwrap();
    assert_eq!(&sk[..2], b"Ed", "signature algorithm");
    assert_eq!(&sk[2..4], b"\0\0", "the key must be unencrypted (-W)");
    sk[54..62].copy_from_slice(id);
    let mut h = blake2::Blake2b::<blake2::digest::consts::U32>::new();
    h.update(&sk[..2]);
    h.update(&sk[54..62]);
    h.update(&sk[62..126]);
    let sum = h.finalize();
    sk[126..158].copy_from_slice(&sum);
    lines[1] = b64.encode(&sk);
    env.write("ms.key", (lines.join("\n") + "\n").as_bytes());
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
fn password_file_is_read_bounded_and_a_fifo_works() {
    let env = Env::new();
    env.model("m");
    env.write("pw", b"correct horse\n");
    env.ok(&["keygen", "--out", "enc", "--password-file", "pw"]);
    // /dev/zero given by mistake: refused after 64 KiB, naming the file, nothing written.
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
            "/dev/zero",
        ],
    );
    assert!(
        text.contains("/dev/zero") && text.contains("not a password file"),
        "{text}"
    );
    assert!(!env.path("b").exists());
    // A FIFO (as `--password-file <(pass show key)` gives) is read like a file.
    let fifo = env.path("pw.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, b"correct horse\n").unwrap())
    };
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "enc.key",
        "--password-file",
        fifo.to_str().unwrap(),
    ]);
    writer.join().unwrap();
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
