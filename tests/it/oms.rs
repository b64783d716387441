//! OpenSSF Model Signing (issue 22) against the reference tool itself: `model_signing` 1.1.1 in
//! the test venv (`python -m model_signing`), both ways, with keys and certificate chains made
//! by openssl. airlock emits at pack time and `model_signing verify` passes on the install
//! until a byte changes; `model_signing sign` signs and `airlock check` verifies and refuses
//! tampering; the publisher's signature is checked at pack time and kept; push publishes the
//! signature; hostile signatures and bundles are refused with the file named.

use std::path::Path;
use std::process::{Command, Output};

use crate::oci::{Registry, sha256_hex, venv_python};
use crate::support::*;

/// Runs `python -m model_signing ARGS` in the test tree.
fn model_signing(env: &Env, args: &[&str]) -> Output {
    Command::new(venv_python())
        .args(["-m", "model_signing"])
        .args(args)
        .current_dir(env.dir.path())
        .output()
        .expect("the venv's python (scripts/setup.sh installs model-signing)")
}

fn reference_ok(env: &Env, args: &[&str]) {
    let out = model_signing(env, args);
    assert!(
        out.status.success(),
        "model_signing {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn reference_fails(env: &Env, args: &[&str]) -> String {
    let out = model_signing(env, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "model_signing {args:?} passed: {text}"
    );
    text
}

fn openssl(env: &Env, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(env.dir.path())
        .output()
        .expect("openssl (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `NAME.key` (SEC1) and `NAME.pub` on `curve`.
fn ec_key(env: &Env, name: &str, curve: &str) {
    openssl(
        env,
        &[
            "ecparam",
            "-name",
            curve,
            "-genkey",
            "-noout",
            "-out",
            &format!("{name}.key"),
        ],
    );
    openssl(
        env,
        &[
            "ec",
            "-in",
            &format!("{name}.key"),
            "-pubout",
            "-out",
            &format!("{name}.pub"),
        ],
    );
}

/// A root CA, an intermediate and a code-signing leaf (all P-384), as PEM files.
fn cert_chain(env: &Env) {
    for n in ["root", "int", "leaf"] {
        ec_key(env, n, "secp384r1");
    }
    env.write(
        "ca.ext",
        b"basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n",
    );
    env.write(
        "leaf.ext",
        b"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n",
    );
    openssl(
        env,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "root.key",
            "-subj",
            "/CN=test root",
            "-days",
            "30",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-out",
            "root.pem",
        ],
    );
    for (n, issuer, ext) in [("int", "root", "ca.ext"), ("leaf", "int", "leaf.ext")] {
        openssl(
            env,
            &[
                "req",
                "-new",
                "-key",
                &format!("{n}.key"),
                "-subj",
                &format!("/CN=test {n}"),
                "-out",
                &format!("{n}.csr"),
            ],
        );
        openssl(
            env,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{n}.csr"),
                "-CA",
                &format!("{issuer}.pem"),
                "-CAkey",
                &format!("{issuer}.key"),
                "-CAcreateserial",
                "-days",
                "30",
                "-extfile",
                ext,
                "-out",
                &format!("{n}.pem"),
            ],
        );
    }
}

/// A model with weights, a config, a nested file and the `.gitattributes` a Hugging Face
/// model has (which OMS leaves out by default).
fn model(env: &Env, rel: &str) {
    env.write(
        &format!("{rel}/config.json"),
        b"{\"model_type\": \"test\"}\n",
    );
    env.write(&format!("{rel}/model.dat"), &pseudo_random(200_000, 7));
    env.write(&format!("{rel}/tokenizer/vocab.txt"), b"a\nb\n");
    env.write(&format!("{rel}/.gitattributes"), b"*.bin filter=lfs\n");
}

fn flip_byte(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 1;
    f.write_all_at(&b, at).unwrap();
}

/// Re-signs the reference-tool signature `from` with `key` after a change to its statement:
/// `dotdot` prefixes the first resource with `../`, `digest` gives it another digest (and the
/// subject its new root), `extra` adds a resource the model does not hold. The result is a
/// signature the trusted key really made, over a hostile statement.
fn resign(env: &Env, key: &str, from: &str, to: &str, change: &str) {
    let script = r#"
import base64, hashlib, json, sys
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), None)
d = json.load(open(sys.argv[2]))
p = json.loads(base64.b64decode(d['dsseEnvelope']['payload']))
res = p['predicate']['resources']
change = sys.argv[4]
if change == 'dotdot':
    res[0]['name'] = '../' + res[0]['name']
elif change == 'digest':
    res[0]['digest'] = hashlib.sha256(b'other content').hexdigest()
elif change == 'extra':
    res.append({'name': 'not-in-the-model.bin', 'algorithm': 'sha256', 'digest': hashlib.sha256(b'x').hexdigest()})
elif change == 'hostile-name':
    res.append({'name': 'gone\x1b[1A\x1b[2K\x1b[32mOK\x1b]52;c;ZXZpbA==\x07\u202e.bin', 'algorithm': 'sha256', 'digest': hashlib.sha256(b'x').hexdigest()})
root = hashlib.sha256(b''.join(bytes.fromhex(r['digest']) for r in res)).hexdigest()
p['subject'][0]['digest']['sha256'] = root
payload = json.dumps(p, indent=2).encode()
pae = b'DSSEv1 28 application/vnd.in-toto+json %d ' % len(payload) + payload
sig = key.sign(pae, ec.ECDSA(hashes.SHA256()))
d['dsseEnvelope']['payload'] = base64.b64encode(payload).decode()
d['dsseEnvelope']['signatures'][0]['sig'] = base64.b64encode(sig).decode()
json.dump(d, open(sys.argv[3], 'w'))
"#;
    let out = Command::new(venv_python())
        .args(["-c", script, key, from, to, change])
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn airlock_signs_and_model_signing_verifies_the_install_until_a_byte_changes() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "oms", "prime256v1");
    let packed = env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-key",
        "oms.key",
    ]);
    assert!(String::from_utf8_lossy(&packed.stdout).contains("OMS signature model.sig"));
    assert!(env.path("b/model.sig").is_file());
    env.ok(&["verify", "b", "--trust", "k.pub", "--deep"]);
    let unpacked = env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(
        String::from_utf8_lossy(&unpacked.stdout).contains("the OMS signature is at out/model.sig"),
        "{}",
        String::from_utf8_lossy(&unpacked.stdout)
    );
    assert!(env.path("out/model.sig").is_file());
    let verify = [
        "verify",
        "key",
        "out",
        "--signature",
        "out/model.sig",
        "--public_key",
        "oms.pub",
    ];
    reference_ok(&env, &verify);
    env.ok(&["check", "out", "--oms-trust", "oms.pub"]);
    // The receipt covers model.sig like a model file.
    env.ok(&["check", "out", "--trust", "k.pub"]);

    flip_byte(&env.path("out/model.dat"), 100_000);
    let text = reference_fails(&env, &verify);
    assert!(text.contains("model.dat"), "{text}");
    let text = env.fails(3, &["check", "out", "--oms-trust", "oms.pub"]);
    assert!(
        text.contains("model.dat: does not match its signed digest"),
        "{text}"
    );
}

#[test]
fn model_signing_signs_and_airlock_verifies_then_refuses_tampering() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "pub1", "secp384r1");
    ec_key(&env, "other", "secp384r1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "m",
            "--private_key",
            "pub1.key",
            "--signature",
            "m/model.sig",
        ],
    );
    let out = env.ok(&["check", "m", "--oms-trust", "pub1.pub"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 files match it"));
    // A wrong key.
    let text = env.fails(3, &["check", "m", "--oms-trust", "other.pub"]);
    assert!(
        text.contains("another key") && text.contains("model.sig"),
        "{text}"
    );
    // An unsigned extra file: a failure, unless asked otherwise.
    env.write("m/planted.py", b"import os\n");
    let text = env.fails(3, &["check", "m", "--oms-trust", "pub1.pub"]);
    assert!(text.contains("planted.py: is not signed"), "{text}");
    env.ok(&[
        "check",
        "m",
        "--oms-trust",
        "pub1.pub",
        "--oms-ignore-unsigned",
    ]);
    env.ok(&[
        "check",
        "m",
        "--oms-trust",
        "pub1.pub",
        "--oms-ignore",
        "planted.py",
    ]);
    std::fs::remove_file(env.path("m/planted.py")).unwrap();
    // A changed byte, a missing file.
    flip_byte(&env.path("m/config.json"), 3);
    let text = env.fails(3, &["check", "m", "--oms-trust", "pub1.pub"]);
    assert!(text.contains("config.json: does not match"), "{text}");
    flip_byte(&env.path("m/config.json"), 3);
    std::fs::remove_file(env.path("m/tokenizer/vocab.txt")).unwrap();
    let text = env.fails(3, &["check", "m", "--oms-trust", "pub1.pub"]);
    assert!(
        text.contains("tokenizer/vocab.txt: is signed but missing"),
        "{text}"
    );
}

/// OMS mismatch paths are named escaped (issue 36 item 4): a file planted in the model under a
/// name holding escape sequences, and a signed resource name holding them, reached the terminal
/// raw in `check`'s error.
#[test]
fn oms_mismatch_paths_cannot_write_to_the_terminal() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "pub1", "prime256v1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "m",
            "--private_key",
            "pub1.key",
            "--signature",
            "m/model.sig",
        ],
    );
    env.write(&format!("m/planted{HOSTILE_TEXT}.py"), b"import os\n");
    let out = env.run(&["check", "m", "--oms-trust", "pub1.pub"]);
    assert_eq!(out.status.code(), Some(3));
    let text = assert_inert(&out, "check --oms-trust, planted file");
    assert!(
        text.contains(&format!("planted{HOSTILE_SHOWN}.py: is not signed")),
        "{text}"
    );
    std::fs::remove_file(env.path(&format!("m/planted{HOSTILE_TEXT}.py"))).unwrap();
    resign(
        &env,
        "pub1.key",
        "m/model.sig",
        "m/model.sig",
        "hostile-name",
    );
    for json in [false, true] {
        let mut args = vec!["check", "m", "--oms-trust", "pub1.pub"];
        if json {
            args.push("--json");
        }
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(3));
        let text = assert_inert(&out, "check --oms-trust, hostile signed name");
        assert!(text.contains("gone"), "{text}");
    }
}

#[test]
fn the_certificate_method_works_both_ways() {
    let env = Env::new();
    model(&env, "m");
    cert_chain(&env);
    // The reference signs with the certificate; airlock verifies up to the root.
    reference_ok(
        &env,
        &[
            "sign",
            "certificate",
            "m",
            "--private_key",
            "leaf.key",
            "--signing_certificate",
            "leaf.pem",
            "--certificate_chain",
            "int.pem",
            "--signature",
            "m/model.sig",
        ],
    );
    let out = env.ok(&["check", "m", "--oms-cert-chain", "root.pem"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("CN=test leaf"));
    // The intermediate is not a root.
    let text = env.fails(3, &["check", "m", "--oms-cert-chain", "int.pem"]);
    assert!(text.contains("trusted"), "{text}");
    // Packed with the publisher's chain and no site signature, the install holds one file the
    // publisher did not sign (the receipt); the command unpack prints for the stock verifier
    // leaves out just that, and passes with the root for its placeholder.
    env.ok(&[
        "pack",
        "m",
        "-o",
        "bp",
        "--key",
        "k.key",
        "--oms-cert-chain",
        "root.pem",
    ]);
    let out = env.ok(&["unpack", "bp", "--trust", "k.pub", "--dest", "outp"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed = stdout
        .split('`')
        .find(|s| s.starts_with("model_signing verify certificate "))
        .unwrap_or_else(|| panic!("unpack names the stock command: {stdout}"));
    let d = std::fs::canonicalize(env.path("outp")).unwrap();
    assert!(
        printed.ends_with(&format!(
            "--certificate_chain PUBLISHER-CA.pem --ignore-paths {}/.airlock",
            d.display()
        )) && stdout.contains("airlock's .airlock is not signed by the publisher"),
        "{stdout}"
    );
    let printed = printed.replace("PUBLISHER-CA.pem", "root.pem");
    let args: Vec<&str> = printed.split_whitespace().skip(1).collect();
    reference_ok(&env, &args);
    let bare: Vec<&str> = args[..args.len() - 2].to_vec();
    reference_fails(&env, &bare);
    std::fs::remove_file(env.path("m/model.sig")).unwrap();

    // airlock signs with the certificate; the reference verifies the install.
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-key",
        "leaf.key",
        "--oms-signing-cert",
        "leaf.pem",
        "--oms-signing-chain",
        "int.pem",
    ]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    reference_ok(
        &env,
        &[
            "verify",
            "certificate",
            "out",
            "--signature",
            "out/model.sig",
            "--certificate_chain",
            "root.pem",
        ],
    );
    env.ok(&["check", "out", "--oms-cert-chain", "root.pem"]);
    // A key that is not the certificate's is refused before packing.
    ec_key(&env, "stray", "secp384r1");
    let text = env.fails(
        1,
        &[
            "pack",
            "m",
            "-o",
            "b2",
            "--key",
            "k.key",
            "--oms-key",
            "stray.key",
            "--oms-signing-cert",
            "leaf.pem",
        ],
    );
    assert!(
        text.contains("is not the key of the signing certificate"),
        "{text}"
    );
    env.assert_nothing_packed("b2");
}

#[test]
fn pack_checks_the_publishers_signature_and_the_install_keeps_both() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "publisher", "prime256v1");
    ec_key(&env, "site", "secp521r1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "m",
            "--private_key",
            "publisher.key",
            "--signature",
            "m/model.sig",
        ],
    );
    let (code, v) = env.json(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-trust",
        "publisher.pub",
        "--oms-key",
        "site.key",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["oms_publisher"]["signature"], "model.sig");
    assert_eq!(v["oms_publisher"]["method"], "key");
    assert_eq!(v["oms_signature"]["name"], "model.airlock.sig");
    let manifest = env.read_json("b/manifest.json");
    assert_eq!(manifest["oms"]["publisher"]["signature"], "model.sig");
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    // The site's signature, at its own name, for the nodes.
    reference_ok(
        &env,
        &[
            "verify",
            "key",
            "out",
            "--signature",
            "out/model.airlock.sig",
            "--public_key",
            "site.pub",
        ],
    );
    // The publisher's, untouched: airlock leaves its own files out; the reference is told to.
    env.ok(&[
        "check",
        "out",
        "--oms-trust",
        "publisher.pub",
        "--trust",
        "k.pub",
    ]);
    reference_ok(
        &env,
        &[
            "verify",
            "key",
            "out",
            "--signature",
            "out/model.sig",
            "--public_key",
            "publisher.pub",
            "--ignore-paths",
            "out/.airlock",
            "--ignore-paths",
            "out/model.airlock.sig",
        ],
    );
}

#[test]
fn pack_refuses_a_model_that_differs_from_what_its_publisher_signed() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "publisher", "prime256v1");
    ec_key(&env, "other", "prime256v1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "m",
            "--private_key",
            "publisher.key",
            "--signature",
            "m/model.sig",
        ],
    );
    // Another key.
    let text = env.fails(
        3,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--oms-trust",
            "other.pub",
        ],
    );
    assert!(
        text.contains("m/model.sig") && text.contains("another key"),
        "{text}"
    );
    env.assert_nothing_packed("b");
    // A weight changed after signing: found as the writer hashes it, before the seal.
    flip_byte(&env.path("m/model.dat"), 5);
    let text = env.fails(
        3,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--oms-trust",
            "publisher.pub",
        ],
    );
    assert!(
        text.contains("model.dat: does not match its signed digest"),
        "{text}"
    );
    env.assert_nothing_packed("b");
    flip_byte(&env.path("m/model.dat"), 5);
    // An unsigned file: refused before anything is written.
    env.write("m/extra.txt", b"unsigned\n");
    let text = env.fails(
        3,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--oms-trust",
            "publisher.pub",
        ],
    );
    assert!(text.contains("extra.txt: is not signed"), "{text}");
    env.assert_nothing_packed("b");
    // No signature at all.
    std::fs::remove_file(env.path("m/extra.txt")).unwrap();
    std::fs::remove_file(env.path("m/model.sig")).unwrap();
    let text = env.fails(
        3,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--oms-trust",
            "publisher.pub",
        ],
    );
    assert!(text.contains("is not in the model"), "{text}");
    env.assert_nothing_packed("b");
}

#[test]
fn a_bundle_whose_oms_signature_lists_other_files_than_its_manifest_is_refused() {
    // A hostile packer: the manifest (validly signed) lists a model.sig that signs a file the
    // manifest does not hold. Nothing reaches the destination.
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "oms", "prime256v1");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-key",
        "oms.key",
    ]);
    resign(&env, "oms.key", "b/model.sig", "hostile.sig", "extra");
    let hostile = std::fs::read(env.path("hostile.sig")).unwrap();
    std::fs::write(env.path("b/model.sig"), &hostile).unwrap();
    let mut manifest = env.read_json("b/manifest.json");
    manifest["oms"]["signature"]["size"] = hostile.len().into();
    manifest["oms"]["signature"]["sha256"] = sha256_hex(&hostile).into();
    std::fs::write(
        env.path("b/manifest.json"),
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    env.ok(&["sign", "b/manifest.json", "--key", "k.key", "--force"]);
    let text = env.fails(3, &["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert!(
        text.contains("not-in-the-model.bin is signed but not in the manifest"),
        "{text}"
    );
    assert!(!env.path("out").exists());
    assert!(staging_leftovers(env.dir.path()).is_empty());
    // A model.sig swapped after packing (the manifest untouched) is refused as well.
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--oms-key",
        "oms.key",
    ]);
    std::fs::write(env.path("b2/model.sig"), &hostile).unwrap();
    let text = env.fails(3, &["unpack", "b2", "--trust", "k.pub", "--dest", "out"]);
    assert!(
        text.contains("b2/model.sig") && text.contains("changed or replaced"),
        "{text}"
    );
    assert!(!env.path("out").exists());
}

#[test]
fn hostile_signatures_are_refused_with_the_file_named() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "pub1", "prime256v1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "m",
            "--private_key",
            "pub1.key",
            "--signature",
            "good.sig",
        ],
    );
    let check = |sig: &str| {
        env.fails(
            3,
            &[
                "check",
                "m",
                "--oms-trust",
                "pub1.pub",
                "--oms-signature",
                sig,
            ],
        )
    };
    // Signed by the trusted key, over other digests.
    resign(&env, "pub1.key", "good.sig", "digest.sig", "digest");
    let text = check("digest.sig");
    assert!(text.contains("does not match its signed digest"), "{text}");
    // Signed by the trusted key, a resource path climbing out of the model.
    resign(&env, "pub1.key", "good.sig", "dotdot.sig", "dotdot");
    let text = check("dotdot.sig");
    assert!(
        text.contains("dotdot.sig") && text.contains("'..' component"),
        "{text}"
    );
    // Malformed JSON, malformed base64.
    env.write("broken.sig", b"{\"mediaType\": ");
    let text = check("broken.sig");
    assert!(
        text.contains("broken.sig: is not a Sigstore bundle"),
        "{text}"
    );
    let good = std::fs::read_to_string(env.path("good.sig")).unwrap();
    env.write(
        "b64.sig",
        good.replace("\"sig\": \"", "\"sig\": \"*")
            .replace("\"sig\":\"", "\"sig\":\"*")
            .as_bytes(),
    );
    let text = check("b64.sig");
    assert!(text.contains("not base64"), "{text}");
    // Huge (sparse: no disk used) and a FIFO: refused before reading.
    let huge = std::fs::File::create(env.path("huge.sig")).unwrap();
    huge.set_len(300 << 20).unwrap();
    let text = check("huge.sig");
    assert!(
        text.contains("huge.sig") && text.contains("larger than the limit"),
        "{text}"
    );
    rustix::fs::mknodat(
        rustix::fs::CWD,
        env.path("fifo.sig"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let text = check("fifo.sig");
    assert!(text.contains("a FIFO"), "{text}");
    // Unsupported curves, as the trusted key or the signing key: exit 1, named.
    openssl(
        &env,
        &["genpkey", "-algorithm", "ed25519", "-out", "ed.key"],
    );
    openssl(
        &env,
        &["pkey", "-in", "ed.key", "-pubout", "-out", "ed.pub"],
    );
    ec_key(&env, "k1", "secp256k1");
    let text = env.fails(
        1,
        &[
            "check",
            "m",
            "--oms-trust",
            "k1.pub",
            "--oms-signature",
            "good.sig",
        ],
    );
    assert!(
        text.contains("k1.pub") && text.contains("secp256k1"),
        "{text}"
    );
    let text = env.fails(
        1,
        &[
            "pack",
            "m",
            "-o",
            "b",
            "--key",
            "k.key",
            "--oms-key",
            "ed.key",
        ],
    );
    assert!(
        text.contains("ed.key") && text.contains("Ed25519"),
        "{text}"
    );
    env.assert_nothing_packed("b");
    // A link in the model is never followed.
    std::os::unix::fs::symlink("/etc/hostname", env.path("m/link")).unwrap();
    let text = env.fails(
        3,
        &[
            "check",
            "m",
            "--oms-trust",
            "pub1.pub",
            "--oms-signature",
            "good.sig",
        ],
    );
    assert!(
        text.contains("m/link") && text.contains("symbolic link"),
        "{text}"
    );
}

#[test]
fn push_publishes_the_oms_signature_as_a_layer_and_unpack_places_it() {
    let reg = Registry::start();
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "oms", "prime256v1");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-key",
        "oms.key",
    ]);
    let target = reg.reference("models/m:1");
    reg.ok(&env, &["push", "b", &target, "--trust", "k.pub"]);
    let image: serde_json::Value = serde_json::from_slice(&reg.curl(
        "models/m/manifests/1",
        "application/vnd.oci.image.manifest.v1+json",
    ))
    .unwrap();
    let layer = image["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json")
        .expect("an OMS signature layer");
    assert_eq!(
        layer["annotations"]["org.opencontainers.image.title"],
        "model.sig"
    );
    let sig = std::fs::read(env.path("b/model.sig")).unwrap();
    assert_eq!(layer["digest"], format!("sha256:{}", sha256_hex(&sig)));
    reg.ok(
        &env,
        &["unpack", &target, "--trust", "k.pub", "--dest", "out"],
    );
    reference_ok(
        &env,
        &[
            "verify",
            "key",
            "out",
            "--signature",
            "out/model.sig",
            "--public_key",
            "oms.pub",
        ],
    );
    env.ok(&["check", "out", "--trust", "k.pub", "--oms-trust", "oms.pub"]);
}

#[test]
fn a_cache_install_keeps_the_oms_signature_beside_its_receipt() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "oms", "prime256v1");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-key",
        "oms.key",
    ]);
    env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--hf-cache",
        "cache",
        "--hf-repo",
        "org/m",
    ]);
    let receipts = env.path("cache/models--org--m/.airlock/receipts");
    let commit = std::fs::read_dir(&receipts)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let sig = commit.join("model.sig");
    assert!(sig.is_file(), "{}", sig.display());
    let snapshot = env
        .path("cache/models--org--m/snapshots")
        .join(commit.file_name().unwrap());
    assert!(!snapshot.join("model.sig").exists());
    // The snapshot's files are links into blobs/: the reference reads them with
    // --allow_symlinks, the signature given from the receipt folder.
    reference_ok(
        &env,
        &[
            "verify",
            "key",
            snapshot.to_str().unwrap(),
            "--signature",
            sig.to_str().unwrap(),
            "--public_key",
            "oms.pub",
            "--allow_symlinks",
        ],
    );
}

#[test]
fn pack_checks_a_publishers_signature_in_a_hugging_face_snapshot() {
    // The publisher signed the repository's files (model.sig is a file of the repository);
    // the snapshot holds them as links into blobs/, which pack follows by the cache's rules.
    let env = Env::new();
    let files = [
        ("config.json", "{\"model_type\": \"tiny\"}\n"),
        ("weights.txt", "0.25 0.5 0.75\n"),
        ("tokenizer/vocab.txt", "a\nb\n"),
    ];
    for (p, t) in files {
        env.write(&format!("signed/{p}"), t.as_bytes());
    }
    ec_key(&env, "publisher", "prime256v1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "signed",
            "--private_key",
            "publisher.key",
            "--signature",
            "signed/model.sig",
        ],
    );
    let sig = std::fs::read_to_string(env.path("signed/model.sig")).unwrap();
    let mut spec: Vec<serde_json::Value> = files
        .iter()
        .map(|(p, t)| serde_json::json!({"path": p, "lfs": false, "text": t}))
        .collect();
    spec.push(serde_json::json!({"path": "model.sig", "lfs": false, "text": sig}));
    let commit = "0123456789abcdef0123456789abcdef01234567";
    crate::hfcache::build(&env, "cache", commit, serde_json::Value::Array(spec), false);
    let (code, v) = env.json(&[
        "pack",
        "--hf-repo",
        "acme/tiny-model",
        "--hf-cache",
        "cache",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-trust",
        "publisher.pub",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["oms_publisher"]["signature"], "model.sig");
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    env.ok(&["check", "out", "--oms-trust", "publisher.pub"]);
    // Another publisher key: exit 3, nothing packed.
    ec_key(&env, "other", "prime256v1");
    let text = env.fails(
        3,
        &[
            "pack",
            "--hf-repo",
            "acme/tiny-model",
            "--hf-cache",
            "cache",
            "-o",
            "b2",
            "--key",
            "k.key",
            "--oms-trust",
            "other.pub",
        ],
    );
    assert!(text.contains("another key"), "{text}");
    env.assert_nothing_packed("b2");
}

/// RUNBOOK section 3.5, from its heading to the next section.
fn runbook_stock_verifiers() -> String {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/RUNBOOK.md"))
            .unwrap();
    let start = text
        .find("### 3.5 Clusters that check the publisher's OMS signature")
        .expect("RUNBOOK has section 3.5");
    let rest = &text[start..];
    let end = rest[4..].find("\n## ").map_or(rest.len(), |i| i + 4);
    rest[..end].to_string()
}

/// The fenced blocks of `lang` in `text`.
fn fenced(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&open) {
        let body = &rest[i + open.len()..];
        let end = body.find("```").expect("closed block");
        out.push(body[..end].to_string());
        rest = &body[end..];
    }
    out
}

/// What the operator's webhook reads from a `ModelValidation`'s `spec`.
#[derive(Debug, Default)]
struct ModelValidation {
    key_path: String,
    path: String,
    signature_path: String,
    ignore_paths: Vec<String>,
}

/// The `ModelValidation` documents of a YAML block (the few keys the webhook reads, by line).
fn model_validations(yaml: &str) -> Vec<ModelValidation> {
    let mut out = Vec::new();
    for doc in yaml.split("\n---\n") {
        if !doc.contains("kind: ModelValidation") {
            continue;
        }
        let mut mv = ModelValidation::default();
        let mut in_ignore = false;
        for line in doc.lines() {
            let t = line.trim();
            let value = |key: &str| t.strip_prefix(key).map(|v| v.trim().to_string());
            if in_ignore {
                if let Some(p) = t.strip_prefix("- ") {
                    mv.ignore_paths.push(p.trim().to_string());
                    continue;
                }
                in_ignore = false;
            }
            if let Some(v) = value("keyPath:") {
                mv.key_path = v;
            } else if let Some(v) = value("signaturePath:") {
                mv.signature_path = v;
            } else if let Some(v) = value("path:") {
                mv.path = v;
            } else if t == "ignorePaths:" {
                in_ignore = true;
            }
        }
        out.push(mv);
    }
    out
}

/// The arguments the operator's webhook gives `model_signing` for `mv` (its
/// `validationConfigToArgs`, public-key method), with the pod's paths moved onto the test
/// install `dest` and the key onto `key`.
fn operator_args(mv: &ModelValidation, dest: &Path, key: &str) -> Vec<String> {
    let host = |p: &str| -> String {
        let rel = p
            .strip_prefix(mv.path.as_str())
            .unwrap_or_else(|| panic!("{p} is not under {}", mv.path));
        format!("{}{rel}", dest.display())
    };
    assert!(mv.key_path.ends_with("/publisher.pub"), "{mv:?}");
    let mut args = vec![
        "verify".to_string(),
        "key".to_string(),
        format!("--signature={}", host(&mv.signature_path)),
        "--public_key".to_string(),
        key.to_string(),
    ];
    for p in &mv.ignore_paths {
        args.push("--ignore-paths".to_string());
        args.push(host(p));
    }
    args.push(host(&mv.path));
    args
}

/// Issue 33 item 1. Before: after `pack --oms-trust` and `unpack`, the stock `model_signing
/// verify` of the publisher's `model.sig` failed on airlock's `.airlock/` and
/// `model.airlock.sig`, and no document said which settings make it pass. Now RUNBOOK 3.5
/// gives them per consumer, and each runs here as written against the real model_signing:
/// the CLI line, the operator's ModelValidation for a plain mount and for KServe's
/// `/mnt/models`, the command unpack prints; the site's signature passes with defaults; the
/// settings leave out airlock's two paths and nothing else.
#[test]
fn the_publishers_signature_verifies_on_the_install_with_the_documented_settings() {
    let env = Env::new();
    model(&env, "m");
    ec_key(&env, "publisher", "prime256v1");
    ec_key(&env, "site", "prime256v1");
    reference_ok(
        &env,
        &[
            "sign",
            "key",
            "m",
            "--private_key",
            "publisher.key",
            "--signature",
            "m/model.sig",
        ],
    );
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--oms-trust",
        "publisher.pub",
        "--oms-key",
        "site.key",
    ]);
    let out = env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let dest = std::fs::canonicalize(env.path("out")).unwrap();
    let d = dest.display().to_string();

    // The stock verifier with its defaults: airlock's two paths are extra files.
    let default = [
        "verify",
        "key",
        &d,
        "--signature",
        &format!("{d}/model.sig"),
        "--public_key",
        "publisher.pub",
    ];
    let text = reference_fails(&env, &default);
    assert!(
        text.contains(".airlock/manifest.json") && text.contains("model.airlock.sig"),
        "{text}"
    );

    // The command unpack printed, with the publisher's key for its placeholder.
    let printed = stdout
        .split('`')
        .find(|s| s.starts_with("model_signing verify key "))
        .unwrap_or_else(|| panic!("unpack names the stock command: {stdout}"));
    let printed: Vec<String> = printed
        .replace("PUBLISHER.pub", "publisher.pub")
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    assert_eq!(
        printed,
        [
            "verify",
            "key",
            &d,
            "--signature",
            &format!("{d}/model.sig"),
            "--public_key",
            "publisher.pub",
            "--ignore-paths",
            &format!("{d}/.airlock"),
            "--ignore-paths",
            &format!("{d}/model.airlock.sig"),
        ]
    );
    let printed: Vec<&str> = printed.iter().map(String::as_str).collect();
    reference_ok(&env, &printed);
    let (code, v) = env.json(&["unpack", "b", "--trust", "k.pub", "--dest", "out-json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["oms_publisher_ignore_paths"],
        serde_json::json!([".airlock", "model.airlock.sig"])
    );
    // An OCI layout holds them as layers: its output says an extraction needs the same.
    let layout = env.ok(&["unpack", "b", "--trust", "k.pub", "--oci-layout", "lay:1"]);
    let text = String::from_utf8_lossy(&layout.stdout);
    assert!(
        text.contains("an extraction of this artifact holds airlock's .airlock and model.airlock.sig beside the model"),
        "{text}"
    );

    // RUNBOOK 3.5's model_signing line, as written, the model moved to the test install;
    // CLI.md gives the same line.
    let section = runbook_stock_verifiers();
    let sh = fenced(&section, "sh");
    assert_eq!(sh.len(), 1, "{sh:?}");
    let line = sh[0].trim();
    let cli =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CLI.md")).unwrap();
    assert!(
        cli.contains(line),
        "CLI.md gives RUNBOOK 3.5's line: {line}"
    );
    let args: Vec<String> = line
        .replace("/srv/models/tiny", &d)
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    reference_ok(&env, &args);

    // Each ModelValidation of RUNBOOK 3.5 (a plain mount at /data; KServe's /mnt/models), run
    // as the operator's webhook runs it; without its ignorePaths it fails.
    let yaml: Vec<ModelValidation> = fenced(&section, "yaml")
        .iter()
        .flat_map(|y| model_validations(y))
        .collect();
    let mounts: Vec<&str> = yaml.iter().map(|mv| mv.path.as_str()).collect();
    assert_eq!(mounts, ["/data", "/mnt/models"], "{yaml:?}");
    for mv in &yaml {
        assert_eq!(mv.ignore_paths.len(), 2, "{mv:?}");
        let args = operator_args(mv, &dest, "publisher.pub");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        reference_ok(&env, &args);
        let bare = operator_args(
            &ModelValidation {
                ignore_paths: Vec::new(),
                key_path: mv.key_path.clone(),
                path: mv.path.clone(),
                signature_path: mv.signature_path.clone(),
            },
            &dest,
            "publisher.pub",
        );
        let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
        reference_fails(&env, &bare);
    }

    // The site's signature needs no settings: the fallback for a verifier without ignore paths.
    reference_ok(
        &env,
        &[
            "verify",
            "key",
            &d,
            "--signature",
            &format!("{d}/model.airlock.sig"),
            "--public_key",
            "site.pub",
        ],
    );

    // The settings leave out airlock's paths and nothing else: a planted file fails (while
    // --ignore_unsigned_files, which the RUNBOOK warns against, lets it through), and so does
    // a changed byte.
    env.write("out/planted.py", b"import os\n");
    let text = reference_fails(&env, &args);
    assert!(text.contains("planted.py"), "{text}");
    let mut lax = default.to_vec();
    lax.push("--ignore_unsigned_files");
    reference_ok(&env, &lax);
    std::fs::remove_file(env.path("out/planted.py")).unwrap();
    reference_ok(&env, &args);
    flip_byte(&env.path("out/model.dat"), 100_000);
    let text = reference_fails(&env, &args);
    assert!(text.contains("model.dat"), "{text}");
}
