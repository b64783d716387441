//! Two-person signing, rotation and expiry with a TUF root (issue 21), against independent
//! implementations: python-tuf's Metadata API (`tuf`) and securesystemslib load and verify
//! every root airlock writes and every rotation, airlock accepts roots python-tuf wrote and
//! signed, and Debian's minisign verifies every co-signature. The hostile cases each end in
//! exit 3 with nothing installed and the root file unchanged.
//!
//! The venv is the one `scripts/make-fixtures.py --venv-only` makes ($AIRLOCK_VENV, default
//! `<repo>/.venv`, tuf and securesystemslib pinned in scripts/requirements-test.txt).

use std::path::PathBuf;
use std::process::Command;

use crate::support::*;

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin").join("python");
    assert!(
        python.is_file(),
        "python-tuf is not installed for the tests: {} does not exist. Run \
         `python3 scripts/make-fixtures.py --venv-only`, or point AIRLOCK_VENV at a venv with \
         scripts/requirements-test.txt installed",
        python.display()
    );
    python
}

/// Runs a Python script in the venv, in the test's tree; returns stdout, asserting success.
fn python(env: &Env, script: &str, args: &[&str]) -> String {
    let out = Command::new(venv_python())
        .arg("-c")
        .arg(script)
        .args(args)
        .current_dir(env.dir.path())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// python-tuf: loads ROOT, checks that it verifies itself (verify_delegate), and with PREVIOUS
/// that PREVIOUS's root role verifies it too; prints the key ids of its targets role. Also
/// checks that python-tuf's serializer writes back the very bytes airlock wrote.
const TUF_CHECK: &str = r#"
import sys
from tuf.api.metadata import Metadata, Root
from tuf.api.serialization.json import JSONSerializer
raw = open(sys.argv[1], "rb").read()
md = Metadata[Root].from_bytes(raw)
assert isinstance(md.signed, Root)
payload = md.signed_bytes
md.signed.verify_delegate(Root.type, payload, md.signatures)
if len(sys.argv) > 2:
    prev = Metadata[Root].from_bytes(open(sys.argv[2], "rb").read())
    assert md.signed.version == prev.signed.version + 1
    prev.signed.verify_delegate(Root.type, payload, md.signatures)
    res = md.signed.get_root_verification_result(prev.signed, payload, md.signatures)
    assert res.verified, res
assert JSONSerializer().serialize(md) + b"\n" == raw, "python-tuf lays the file out differently"
print(" ".join(md.signed.roles["targets"].keyids))
"#;

/// airlock keys for three release officers and two security officers, and a signed root:
/// bundles need 2 of alice, bob, carol; the root needs sec1.
fn officers(env: &Env) {
    for k in ["alice", "bob", "carol", "dave", "sec1", "sec2"] {
        env.ok(&["keygen", "--out", k, "--unencrypted"]);
    }
    env.ok(&[
        "trust",
        "init",
        "--out",
        "root.json",
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
        "2099-01-01",
    ]);
    env.ok(&["trust", "sign", "root.json", "--key", "sec1.key"]);
}

/// Root version 2: dave replaces alice, sec2 replaces sec1; signed by both root keys.
fn rotate(env: &Env) {
    env.ok(&[
        "trust",
        "rotate",
        "root.json",
        "--out",
        "root2.json",
        "--key",
        "bob.pub",
        "--key",
        "carol.pub",
        "--key",
        "dave.pub",
        "--root-key",
        "sec2.pub",
        "--root-threshold",
        "1",
        "--expires",
        "2099-06-01",
    ]);
    env.ok(&["trust", "sign", "root2.json", "--key", "sec2.key"]);
    env.ok(&[
        "trust",
        "sign",
        "root2.json",
        "--key",
        "sec1.key",
        "--previous",
        "root.json",
    ]);
}

fn minisign_id(env: &Env, pubfile: &str) -> String {
    let text = std::fs::read_to_string(env.path(pubfile)).unwrap();
    text.lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn python_tuf_verifies_every_root_airlock_writes_and_each_rotation() {
    let env = Env::new();
    officers(&env);
    let ids = python(&env, TUF_CHECK, &["root.json"]);
    assert_eq!(ids.split_whitespace().count(), 3, "{ids}");
    rotate(&env);
    python(&env, TUF_CHECK, &["root2.json", "root.json"]);
    // `trust show` agrees, and says who can do what.
    let show = env.ok(&["trust", "show", "root2.json", "--previous", "root.json"]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("2 of 3 key(s)"), "{text}");
    assert!(text.contains(&minisign_id(&env, "dave.pub")), "{text}");
}

#[test]
fn a_bundle_installs_only_with_the_threshold_and_minisign_verifies_each_cosignature() {
    let env = Env::new();
    officers(&env);
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "alice.key"]);
    let e = env.fails(3, &["unpack", "b", "--trust", "root.json", "--dest", "out"]);
    assert!(e.contains("signed by 1 of the 2"), "{e}");
    assert!(e.contains("1 more needed"), "{e}");
    assert!(!env.path("out").exists());
    env.ok(&["cosign", "b", "--key", "bob.key"]);
    let bob = minisign_id(&env, "bob.pub");
    let cosig = env.path(&format!("b/manifest.json.{bob}.minisig"));
    assert!(cosig.is_file());
    // Debian's minisign accepts both signatures, each with its signer's key.
    for (sig, key) in [
        ("b/manifest.json.minisig".to_string(), "alice.pub"),
        (format!("b/manifest.json.{bob}.minisig"), "bob.pub"),
    ] {
        let out = Command::new("minisign")
            .args(["-Vm", "b/manifest.json", "-x", &sig, "-p", key])
            .current_dir(env.dir.path())
            .output()
            .expect("minisign is missing: run scripts/setup.sh");
        assert!(
            out.status.success(),
            "minisign rejects {sig}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A second co-signature by the same key is refused.
    env.fails(2, &["cosign", "b", "--key", "bob.key"]);
    let (code, doc) = env.json(&["verify", "b", "--trust", "root.json"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["signers"].as_array().unwrap().len(), 2, "{doc}");
    // A plain key set still works exactly as before, and an older reader's view: the
    // co-signature is one more file, the first signature alone verifies.
    env.ok(&["verify", "b", "--trust", "alice.pub"]);
    env.ok(&["unpack", "b", "--trust", "root.json", "--dest", "out"]);
    assert_eq!(tree_without_receipt(&env.path("out")), tree(&env.path("m")));
    assert!(
        env.path(&format!("out/.airlock/manifest.json.{bob}.minisig"))
            .is_file()
    );
    let (code, doc) = env.json(&["check", "out", "--trust", "root.json"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["receipt_signers"].as_array().unwrap().len(), 2, "{doc}");
    // The receipt's co-signature removed: check now fails the threshold.
    std::fs::remove_file(env.path(&format!("out/.airlock/manifest.json.{bob}.minisig"))).unwrap();
    let e = env.fails(3, &["check", "out", "--trust", "root.json"]);
    assert!(e.contains("signed by 1 of the 2"), "{e}");
}

/// The root file and its history are as they were.
fn root_unchanged(env: &Env, before: &[u8]) {
    assert_eq!(std::fs::read(env.path("target/root.json")).unwrap(), before);
    assert!(!env.path("target/root.history").exists());
}

fn target_root(env: &Env) -> Vec<u8> {
    std::fs::create_dir_all(env.path("target")).unwrap();
    std::fs::copy(env.path("root.json"), env.path("target/root.json")).unwrap();
    std::fs::read(env.path("root.json")).unwrap()
}

#[test]
fn a_rotation_travels_with_a_bundle_and_old_installs_still_check_and_replace() {
    let env = Env::new();
    officers(&env);
    let before = target_root(&env);
    env.model("m");
    env.ok(&["pack", "m", "-o", "b1", "--key", "alice.key"]);
    env.ok(&["cosign", "b1", "--key", "bob.key"]);
    env.ok(&[
        "unpack",
        "b1",
        "--trust",
        "target/root.json",
        "--dest",
        "out",
    ]);
    rotate(&env);
    env.write("m/config.json", b"{\"model_type\": \"test\", \"v\": 2}\n");
    // The packer's key must be in the new targets role.
    let e = env.fails(
        2,
        &[
            "pack",
            "m",
            "-o",
            "bx",
            "--key",
            "alice.key",
            "--version",
            "2",
            "--trust-update",
            "root2.json",
        ],
    );
    assert!(e.contains("not in the targets role"), "{e}");
    // bob and carol are in both versions' targets role.
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b2",
        "--key",
        "bob.key",
        "--version",
        "2",
        "--trust-update",
        "root2.json",
    ]);
    env.ok(&["cosign", "b2", "--key", "carol.key"]);
    // verify checks the rotation but never changes the root file.
    let out = env.ok(&["verify", "b2", "--trust", "target/root.json"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("carries trust root version 2"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    root_unchanged(&env, &before);
    // Stripping the root from the bundle breaks it.
    std::fs::rename(env.path("b2/2.root.json"), env.path("2.root.json.aside")).unwrap();
    let e = env.fails(3, &["verify", "b2", "--trust", "target/root.json"]);
    assert!(e.contains("does not hold that file as signed"), "{e}");
    std::fs::rename(env.path("2.root.json.aside"), env.path("b2/2.root.json")).unwrap();
    // unpack --replace over the install signed under version 1: the new root is written
    // after the install, with the chain kept.
    let (code, doc) = env.json(&[
        "unpack",
        "b2",
        "--trust",
        "target/root.json",
        "--dest",
        "out",
        "--replace",
    ]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["trust_update"]["applied"], true, "{doc}");
    assert_eq!(
        std::fs::read(env.path("target/root.json")).unwrap(),
        std::fs::read(env.path("root2.json")).unwrap()
    );
    assert_eq!(
        std::fs::read(env.path("target/root.history/1.root.json")).unwrap(),
        before
    );
    python(
        &env,
        TUF_CHECK,
        &[
            "target/root.history/2.root.json",
            "target/root.history/1.root.json",
        ],
    );
    // alice is retired: a bundle she signs no longer installs, but an install signed under
    // version 1 still checks, with a note naming the version that vouched for it.
    env.ok(&["unpack", "b1", "--trust", "root.json", "--dest", "old"]);
    let (code, doc) = env.json(&["check", "old", "--trust", "target/root.json"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["vouched_by_root_version"], 1, "{doc}");
    let e = env.fails(
        3,
        &[
            "unpack",
            "b1",
            "--trust",
            "target/root.json",
            "--dest",
            "new",
        ],
    );
    assert!(e.contains("not one of the targets role"), "{e}");
    assert!(!env.path("new").exists());
    // A second bundle carrying the same version changes nothing.
    env.ok(&[
        "unpack",
        "b2",
        "--trust",
        "target/root.json",
        "--dest",
        "again",
    ]);
}

#[test]
fn airlock_accepts_roots_python_tuf_wrote_and_signed() {
    let env = Env::new();
    for k in ["alice", "bob"] {
        env.ok(&["keygen", "--out", k, "--unencrypted"]);
    }
    // python-tuf builds the root: the targets role holds airlock's two minisign keys (their
    // raw Ed25519 halves), the root role a key securesystemslib made, which signs it; version
    // 2 rotates the root key, signed by both. Another root expired in 2020.
    let script = r#"
import base64, sys
from datetime import datetime, timezone
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from securesystemslib.signer import CryptoSigner, SSlibKey
from tuf.api.metadata import Metadata, Root, Role
from tuf.api.serialization.json import JSONSerializer

def pub(path):
    raw = base64.b64decode(open(path).read().splitlines()[1])
    return SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(raw[10:42]))

def signer():
    sk = Ed25519PrivateKey.generate()
    return CryptoSigner(sk, SSlibKey.from_crypto(sk.public_key()))

def root(version, root_signer, expires):
    r = Root(version=version, expires=expires)
    for k in (pub("alice.pub"), pub("bob.pub")):
        r.add_key(k, "targets")
        r.add_key(k, "snapshot")
        r.add_key(k, "timestamp")
    r.roles["targets"].threshold = 2
    r.add_key(root_signer.public_key, "root")
    return Metadata(r)

s1, s2 = signer(), signer()
v1 = root(1, s1, datetime(2099, 1, 1, tzinfo=timezone.utc))
v1.sign(s1)
open("py-root.json", "wb").write(JSONSerializer().serialize(v1))
v2 = root(2, s2, datetime(2099, 6, 1, tzinfo=timezone.utc))
v2.sign(s1, append=True)
v2.sign(s2, append=True)
open("py-root2.json", "wb").write(JSONSerializer().serialize(v2))
old = root(1, s1, datetime(2020, 1, 1, tzinfo=timezone.utc))
old.sign(s1)
open("py-expired.json", "wb").write(JSONSerializer().serialize(old))
"#;
    python(&env, script, &[]);
    env.ok(&["trust", "show", "py-root.json"]);
    env.ok(&[
        "trust",
        "show",
        "py-root2.json",
        "--previous",
        "py-root.json",
    ]);
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "alice.key",
        "--trust-update",
        "py-root2.json",
    ]);
    env.ok(&["cosign", "b", "--key", "bob.key"]);
    env.ok(&["verify", "b", "--trust", "py-root.json"]);
    env.ok(&["pack", "m", "-o", "b0", "--key", "alice.key"]);
    env.ok(&["cosign", "b0", "--key", "bob.key"]);
    // An expired root (by this machine's clock) is exit 3, naming the date.
    let e = env.fails(3, &["verify", "b0", "--trust", "py-expired.json"]);
    assert!(e.contains("expired at 2020-01-01T00:00:00Z"), "{e}");
    // As in TUF, an expired root still vouches for its successor: a bundle carrying version 2
    // (signed by the expired root's key) brings the target back.
    env.ok(&["verify", "b", "--trust", "py-expired.json"]);
    // The override is for a clock known to be wrong, and it is loud.
    let e = env.fails(
        3,
        &[
            "verify",
            "b0",
            "--trust",
            "py-root.json",
            "--assume-now",
            "2099-02-01",
        ],
    );
    assert!(e.contains("expired"), "{e}");
    let out = env.ok(&[
        "verify",
        "b0",
        "--trust",
        "py-expired.json",
        "--assume-now",
        "2019-12-01",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NOT against this machine's clock"), "{err}");
    // unpack adopts python-tuf's version 2.
    std::fs::create_dir(env.path("t")).unwrap();
    std::fs::copy(env.path("py-root.json"), env.path("t/root.json")).unwrap();
    env.ok(&["unpack", "b", "--trust", "t/root.json", "--dest", "out"]);
    assert_eq!(
        std::fs::read(env.path("t/root.json")).unwrap(),
        std::fs::read(env.path("py-root2.json")).unwrap()
    );
}

/// Makes `name.json` from root.json by a text edit (before any signature: signed by sec1
/// afterwards if `sign`).
fn edited_root(env: &Env, name: &str, from: &str, to: &str) {
    let text = std::fs::read_to_string(env.path("root.json")).unwrap();
    assert!(text.contains(from), "{from:?} not in root.json");
    env.write(name, text.replacen(from, to, 1).as_bytes());
}

#[test]
fn hostile_trust_roots_and_signatures_are_exit_3_with_nothing_installed() {
    let env = Env::new();
    officers(&env);
    let before = target_root(&env);
    env.model("m");
    env.ok(&["pack", "m", "-o", "b", "--key", "alice.key"]);
    let unpack_refused = |bundle: &str, trust: &str, want: &str| {
        let e = env.fails(3, &["unpack", bundle, "--trust", trust, "--dest", "out"]);
        assert!(e.contains(want), "{want:?}: {e}");
        assert!(
            !env.path("out").exists(),
            "{want:?}: something was installed"
        );
        assert!(staging_leftovers(env.dir.path()).is_empty());
    };
    // Two signatures by the same key count once.
    let alice = minisign_id(&env, "alice.pub");
    std::fs::copy(
        env.path("b/manifest.json.minisig"),
        env.path(&format!("b/manifest.json.{alice}.minisig")),
    )
    .unwrap();
    unpack_refused("b", "target/root.json", "counts once");
    std::fs::remove_file(env.path(&format!("b/manifest.json.{alice}.minisig"))).unwrap();
    // A key outside the targets role (a root key) does not count.
    env.ok(&["cosign", "b", "--key", "sec1.key"]);
    unpack_refused("b", "target/root.json", "not one of the targets role");
    // Roots that are not valid: threshold 0, above the key count, a key id twice in a role,
    // an unknown key type.
    edited_root(&env, "t0.json", "\"threshold\": 2", "\"threshold\": 0");
    unpack_refused("b", "t0.json", "threshold 0");
    edited_root(&env, "t4.json", "\"threshold\": 2", "\"threshold\": 4");
    unpack_refused("b", "t4.json", "could never be met");
    let text = std::fs::read_to_string(env.path("root.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let id = v["signed"]["roles"]["targets"]["keyids"][0].clone();
    v["signed"]["roles"]["targets"]["keyids"]
        .as_array_mut()
        .unwrap()
        .push(id.clone());
    env.write(
        "dup.json",
        serde_json::to_string_pretty(&v).unwrap().as_bytes(),
    );
    unpack_refused("b", "dup.json", "twice");
    // The same key id twice among the keys (a duplicate JSON key).
    edited_root(
        &env,
        "dupkey.json",
        "\"keys\": {",
        &format!("\"keys\": {{\n   {id}: {{}},"),
    );
    unpack_refused("b", "dupkey.json", "appears twice");
    edited_root(
        &env,
        "rsa.json",
        "\"keytype\": \"ed25519\"",
        "\"keytype\": \"rsa\"",
    );
    unpack_refused("b", "rsa.json", "ed25519 keys");
    // An unsigned root (init without sign) is not trusted.
    env.ok(&[
        "trust",
        "init",
        "--out",
        "unsigned.json",
        "--key",
        "alice.pub",
        "--threshold",
        "1",
        "--expires",
        "2099-01-01",
    ]);
    unpack_refused(
        "b",
        "unsigned.json",
        "not signed by the threshold of its own root keys",
    );
    root_unchanged(&env, &before);

    // A rotation signed only by the new root key.
    env.ok(&["cosign", "b", "--key", "bob.key"]);
    env.ok(&[
        "trust",
        "rotate",
        "root.json",
        "--out",
        "new-only.json",
        "--root-key",
        "sec2.pub",
        "--root-threshold",
        "1",
        "--expires",
        "2099-06-01",
    ]);
    env.ok(&["trust", "sign", "new-only.json", "--key", "sec2.key"]);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b-new-only",
        "--key",
        "alice.key",
        "--version",
        "2",
        "--trust-update",
        "new-only.json",
    ]);
    env.ok(&["cosign", "b-new-only", "--key", "bob.key"]);
    unpack_refused("b-new-only", "target/root.json", "version 1's root keys");
    root_unchanged(&env, &before);
    // A root update made and signed by a key that was never trusted.
    env.ok(&["keygen", "--out", "mallory", "--unencrypted"]);
    env.ok(&[
        "trust",
        "rotate",
        "root.json",
        "--out",
        "evil.json",
        "--key",
        "mallory.pub",
        "--threshold",
        "1",
        "--root-key",
        "mallory.pub",
        "--root-threshold",
        "1",
        "--expires",
        "2099-06-01",
    ]);
    env.ok(&["trust", "sign", "evil.json", "--key", "mallory.key"]);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b-evil",
        "--key",
        "mallory.key",
        "--version",
        "2",
        "--trust-update",
        "evil.json",
    ]);
    unpack_refused("b-evil", "target/root.json", "version 1's root keys");
    root_unchanged(&env, &before);
    // A rollback: the target is at version 2; a bundle carries a different version 1.
    rotate(&env);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b2",
        "--key",
        "bob.key",
        "--version",
        "2",
        "--trust-update",
        "root2.json",
    ]);
    env.ok(&["cosign", "b2", "--key", "carol.key"]);
    env.ok(&["verify", "b2", "--trust", "target/root.json"]);
    env.ok(&[
        "unpack",
        "b2",
        "--trust",
        "target/root.json",
        "--dest",
        "v2",
    ]);
    let at_v2 = std::fs::read(env.path("target/root.json")).unwrap();
    env.ok(&[
        "trust",
        "init",
        "--out",
        "fork1.json",
        "--key",
        "bob.pub",
        "--threshold",
        "1",
        "--root-key",
        "sec1.pub",
        "--root-threshold",
        "1",
        "--expires",
        "2099-01-01",
    ]);
    env.ok(&["trust", "sign", "fork1.json", "--key", "sec1.key"]);
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b-fork",
        "--key",
        "bob.key",
        "--version",
        "3",
        "--trust-update",
        "fork1.json",
    ]);
    env.ok(&["cosign", "b-fork", "--key", "carol.key"]);
    unpack_refused("b-fork", "target/root.json", "rollback");
    assert_eq!(std::fs::read(env.path("target/root.json")).unwrap(), at_v2);
}

/// Issue 36 item 2. Before: `verify FILE --trust root.json` took `FILE.minisig` by any one key
/// of the targets role (exit 0 under a root that needs two, and after it expired), so the next
/// airlock release crossed on one officer's signature. Now a file is held to the rule a
/// bundle's manifest is: the root current, and its threshold of distinct targets keys,
/// counting `FILE.minisig` and the co-signatures `FILE.KEYID.minisig` beside it.
#[test]
fn a_file_verifies_under_a_root_only_with_its_threshold_of_distinct_role_keys_and_not_once_expired()
{
    let env = Env::new();
    officers(&env);
    let (alice, bob, carol, dave) = (
        minisign_id(&env, "alice.pub"),
        minisign_id(&env, "bob.pub"),
        minisign_id(&env, "carol.pub"),
        minisign_id(&env, "dave.pub"),
    );
    let file = "airlock-0.2.0-x86_64-linux";
    env.write(file, &pseudo_random(70_000, 36));
    env.ok(&["sign", file, "--key", "alice.key"]);
    let verify = ["verify", file, "--trust", "root.json"];

    // One signature of the two the root needs: exit 3, naming the file, the count and who
    // else may sign; the hint is about this file, not a bundle.
    let e = env.fails(3, &verify);
    assert!(
        e.contains(&format!("{file}: signed by 1 of the 2 distinct keys")),
        "{e}"
    );
    assert!(e.contains(&format!("({alice} in {file}.minisig)")), "{e}");
    assert!(
        e.contains(&format!("1 more needed from: {bob}, {carol}")),
        "{e}"
    );
    assert!(
        e.contains(&format!("airlock cosign {file} --key THEIR.key")),
        "{e}"
    );
    assert!(!e.contains("manifest.json"), "{e}");
    let (code, doc) = env.json(&verify);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["error"]["kind"], "signature-threshold", "{doc}");

    // The same key twice counts once: alice's signature again as a co-signature, under her
    // own id and under bob's (a file name vouches for nothing).
    for id in [&alice, &bob] {
        let copy = format!("{file}.{id}.minisig");
        std::fs::copy(env.path(&format!("{file}.minisig")), env.path(&copy)).unwrap();
        let e = env.fails(3, &verify);
        assert!(e.contains("signed by 1 of the 2"), "{id}: {e}");
        assert!(e.contains("each key counts once"), "{id}: {e}");
        std::fs::remove_file(env.path(&copy)).unwrap();
    }

    // A co-signature by a key outside the targets role (dave) does not count.
    let out = env.ok(&["cosign", file, "--key", "dave.key", "--trust", "root.json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not yet enough signatures"), "{text}");
    assert!(env.path(&format!("{file}.{dave}.minisig")).is_file());
    let e = env.fails(3, &verify);
    assert!(e.contains("signed by 1 of the 2"), "{e}");
    assert!(
        e.contains(&format!("signed by key {dave}, which is not one of")),
        "{e}"
    );

    // A co-signature by the signer of FILE.minisig, or a second one by one key, is refused.
    env.fails(2, &["cosign", file, "--key", "alice.key"]);

    // A second key of the role: OK, exit 0, both named.
    let out = env.ok(&["cosign", file, "--key", "bob.key", "--trust", "root.json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the file now meets"), "{text}");
    env.fails(2, &["cosign", file, "--key", "bob.key"]);
    let out = env.ok(&verify);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("OK   {file}: signatures by ")),
        "{text}"
    );
    assert!(text.contains("signed by 2 of the 2 required"), "{text}");
    let (code, doc) = env.json(&verify);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["signers"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(doc["threshold"], 2, "{doc}");
    // Debian's minisign accepts the co-signature with its signer's key.
    let out = Command::new("minisign")
        .args([
            "-Vm",
            file,
            "-x",
            &format!("{file}.{bob}.minisig"),
            "-p",
            "bob.pub",
        ])
        .current_dir(env.dir.path())
        .output()
        .expect("minisign is missing: run scripts/setup.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A co-signature over other bytes does not count.
    std::fs::remove_file(env.path(&format!("{file}.{bob}.minisig"))).unwrap();
    env.write("other", b"other bytes\n");
    env.ok(&["sign", "other", "--key", "bob.key"]);
    std::fs::copy(
        env.path("other.minisig"),
        env.path(&format!("{file}.{bob}.minisig")),
    )
    .unwrap();
    let e = env.fails(3, &verify);
    assert!(e.contains("signed by 1 of the 2"), "{e}");
    assert!(e.contains("does not verify (the file"), "{e}");
    std::fs::remove_file(env.path(&format!("{file}.{bob}.minisig"))).unwrap();

    // `sign -o FILE.KEYID.minisig` writes the same co-signature.
    env.ok(&[
        "sign",
        file,
        "--key",
        "carol.key",
        "-o",
        &format!("{file}.{carol}.minisig"),
    ]);
    env.ok(&verify);

    // A plain key set is as before: FILE.minisig by one of its keys.
    env.ok(&["verify", file, "--trust", "alice.pub"]);

    // The root expired (2099-01-01): refused, whatever signed.
    let e = env.fails(
        3,
        &[
            "verify",
            file,
            "--trust",
            "root.json",
            "--assume-now",
            "2100-01-01",
        ],
    );
    assert!(e.contains("expired at 2099-01-01T00:00:00Z"), "{e}");
    assert!(e.contains("nothing signed under it is accepted"), "{e}");
    // And still current the day before.
    env.ok(&[
        "verify",
        file,
        "--trust",
        "root.json",
        "--assume-now",
        "2098-12-31",
    ]);
}

/// Issue 33 item 2. Before: `trust init` without `--root-key` printed the two roles as bare key
/// ids, and `trust rotate --key ...` that dropped alice from the targets role kept the root
/// role (the same keys), so alice, rotated out of signing bundles, could still sign the next
/// root; nothing said so. Now both say in words who can sign bundles and who can change the
/// root, naming each key by its file, and rotate warns about a key that leaves the targets
/// role but stays in the root role.
#[test]
fn init_and_rotate_say_who_signs_and_warn_when_a_rotated_out_key_keeps_the_root() {
    let env = Env::new();
    for k in ["alice", "bob", "carol"] {
        env.ok(&["keygen", "--out", k, "--unencrypted"]);
    }
    let (alice, bob) = (minisign_id(&env, "alice.pub"), minisign_id(&env, "bob.pub"));
    let out = env.ok(&[
        "trust",
        "init",
        "--out",
        "root.json",
        "--key",
        "alice.pub",
        "--key",
        "bob.pub",
        "--threshold",
        "1",
        "--expires",
        "2099-01-01",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "who can sign bundles: a bundle is trusted when signed by any one of 2 keys (alice.pub ({alice}), bob.pub ({bob}))"
        )) || stdout.contains(&format!(
            "who can sign bundles: a bundle is trusted when signed by any one of 2 keys (bob.pub ({bob}), alice.pub ({alice}))"
        )),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("who can change this root: version 2 needs signatures by any one of 2 keys")
            && stdout.contains("(no --root-key given: the --key keys)")
            && stdout.contains("the same keys sign bundles and change the root"),
        "{stdout}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    env.ok(&["trust", "sign", "root.json", "--key", "alice.key"]);

    // alice leaves the targets role; the root role is kept: warned, by name.
    let out = env.ok(&[
        "trust",
        "rotate",
        "root.json",
        "--out",
        "root2.json",
        "--key",
        "bob.pub",
        "--key",
        "carol.pub",
        "--expires",
        "2099-06-01",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("(no --root-key given: kept from version 1)"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "airlock: warning: key {alice} leaves the targets role but stays in the root role: from version 2 it can no longer sign bundles, but it can still sign version 3 of the root"
        )),
        "{stderr}"
    );
    let (_, j) = env.json(&[
        "trust",
        "rotate",
        "root.json",
        "--out",
        "root2b.json",
        "--key",
        "bob.pub",
        "--expires",
        "2099-06-01",
    ]);
    assert_eq!(
        j["left_targets_kept_root"],
        serde_json::json!([alice]),
        "{j:#}"
    );

    // With the root role given without her: no warning, and the roles are told apart.
    let out = env.ok(&[
        "trust",
        "rotate",
        "root.json",
        "--out",
        "root3.json",
        "--key",
        "bob.pub",
        "--key",
        "carol.pub",
        "--root-key",
        "bob.pub",
        "--root-threshold",
        "1",
        "--expires",
        "2099-06-01",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "who can change this root: version 3 needs signatures by the one key bob.pub ({bob})"
        )) && !stdout.contains("the same keys"),
        "{stdout}"
    );
}

/// Issue 33 item 10. Before: a bundle carrying root version 3 to a target at version 1 was
/// refused with the generic trust-update hint (`check it with airlock trust show ...`), which
/// did not say what to bring. Now the hint names the versions to carry, one `--trust-update`
/// each, oldest first, and the bundle path in the cosign hint is the one given.
#[test]
fn a_missing_root_version_hint_names_the_versions_to_carry() {
    let env = Env::new();
    officers(&env);
    let before = target_root(&env);
    rotate(&env);
    env.ok(&[
        "trust",
        "rotate",
        "root2.json",
        "--out",
        "root3.json",
        "--expires",
        "2099-07-01",
    ]);
    env.ok(&["trust", "sign", "root3.json", "--key", "sec2.key"]);
    env.model("m");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b3",
        "--key",
        "bob.key",
        "--trust-update",
        "root3.json",
    ]);
    env.ok(&["cosign", "b3", "--key", "carol.key"]);
    let (code, j) = env.json(&[
        "unpack",
        "b3",
        "--trust",
        "target/root.json",
        "--dest",
        "out",
    ]);
    assert_eq!(code, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "trust-update", "{j:#}");
    let message = j["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("is root version 3, but this target trusts version 1 and the bundle does not carry version 2"),
        "{message}"
    );
    let hint = j["error"]["hint"].as_str().unwrap();
    assert!(
        hint.contains("every root version from 2 to 3")
            && hint.contains("`--trust-update 2.root.json --trust-update 3.root.json`"),
        "{hint}"
    );
    root_unchanged(&env, &before);
    assert!(!env.path("out").exists());

    // One signature short: the cosign hint names this bundle, not BUNDLE.
    env.ok(&["pack", "m", "-o", "one", "--key", "alice.key"]);
    let (code, j) = env.json(&["verify", "one", "--trust", "target/root.json"]);
    assert_eq!(
        (code, j["error"]["kind"].as_str()),
        (3, Some("signature-threshold")),
        "{j:#}"
    );
    let hint = j["error"]["hint"].as_str().unwrap();
    assert!(
        hint.contains("`airlock cosign one --key THEIR.key`"),
        "{hint}"
    );
}
