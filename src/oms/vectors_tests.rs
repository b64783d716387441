//! Known answers: the signatures the reference project publishes as its own regression
//! vectors (sigstore/model-transparency `scripts/tests/`, copied into `testdata/oms/` with the
//! public key and CA certificate they verify with; see `testdata/oms/README.md`), and keys in
//! every PEM form `openssl` writes.

use std::path::{Path, PathBuf};

use super::*;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/oms")
        .join(rel)
}

fn text(rel: &str) -> String {
    String::from_utf8(fsio::read_capped(&data(rel), 1 << 20, fsio::Follow::Never).unwrap()).unwrap()
}

fn key_trust() -> TrustMaterial {
    TrustMaterial::Key(load_public_key(&data("keys/signing-key-pub.pem")).unwrap())
}

fn cert_trust() -> TrustMaterial {
    TrustMaterial::Certificates(load_certificates(&[data("keys/ca-cert.pem")]).unwrap())
}

fn verify_vector(dir: &str, trust: &TrustMaterial) -> Result<DirReport> {
    verify_dir(
        &data(dir),
        &DirOptions {
            signature: &data(&format!("{dir}/model.sig")),
            trust,
            ignore: vec!["ignore-me".into()],
            ignore_unsigned: false,
        },
        &crate::progress::Silent,
    )
}

#[test]
fn the_key_hint_is_the_one_the_reference_recorded() {
    // v1.1.0's bundle carries publicKey.hint; certtool wrote the PEM with a text preamble,
    // the hint is over cryptography's re-encoding.
    let k = VerifyingKey::from_pem(&text("keys/signing-key-pub.pem")).unwrap();
    assert_eq!(k.curve(), keys::Curve::P384);
    assert_eq!(
        k.hint(),
        "e8450dec4eb99dae995da9af1bc2cc9f76ed669ee2e744f57abba763df3e3f8e"
    );
}

#[test]
fn the_reference_key_vectors_verify_with_their_digests() {
    for dir in ["v1.1.0-elliptic-key", "v1.0.1-elliptic-key"] {
        let r = verify_vector(dir, &key_trust()).unwrap_or_else(|e| panic!("{dir}: {e}"));
        assert_eq!(r.files, 2, "{dir}");
        assert_eq!(r.verified.method, "key");
        let names: Vec<&str> = r
            .verified
            .statement
            .resources
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["signme-1", "signme-2"]);
        assert_eq!(
            hex::encode(r.verified.statement.resources[1].sha256),
            "32dcb1f8e1ae52d5963e56a6ba06ab58b424c15ed2a6b70d2feca1d089370028"
        );
    }
    // v1.0.1 predates the key hint: it verifies, with a note saying so.
    let r = verify_vector("v1.0.1-elliptic-key", &key_trust()).unwrap();
    assert!(
        r.verified.notes[0].contains("no key hint"),
        "{:?}",
        r.verified.notes
    );
}

#[test]
fn the_reference_certificate_vectors_verify_through_rsa_intermediates() {
    for dir in ["v1.1.0-certificate", "v1.0.1-certificate"] {
        let r = verify_vector(dir, &cert_trust()).unwrap_or_else(|e| panic!("{dir}: {e}"));
        assert_eq!(r.verified.method, "certificate");
        assert_eq!(r.files, 2);
        assert_eq!(r.verified.subject.as_deref(), Some("CN=intermediate-ca"));
    }
}

#[test]
fn a_vector_checked_with_the_other_method_or_key_is_refused() {
    let err = verify_vector("v1.1.0-certificate", &key_trust()).unwrap_err();
    assert!(err.to_string().contains("--oms-cert-chain"), "{err}");
    let err = verify_vector("v1.1.0-elliptic-key", &cert_trust()).unwrap_err();
    assert!(err.to_string().contains("--oms-trust"), "{err}");
    let other = TrustMaterial::Key(load_public_key(&data("keys/p384.pub")).unwrap());
    let err = verify_vector("v1.1.0-elliptic-key", &other).unwrap_err();
    assert_eq!(err.exit_code(), crate::error::EXIT_VERIFY);
    assert!(err.to_string().contains("another key"), "{err}");
    // The intermediate alone is not a root: OpenSSL's rule, no partial chains.
    let int_only =
        TrustMaterial::Certificates(load_certificates(&[data("keys/int-ca-cert.pem")]).unwrap());
    let err = verify_vector("v1.1.0-certificate", &int_only).unwrap_err();
    assert!(err.to_string().contains("trusted"), "{err}");
}

#[test]
fn a_vector_with_an_unsigned_file_fails_unless_it_is_ignored() {
    // Without --ignore-paths ignore-me, v1.0.1 (which does not list ignore-me) has an
    // unsigned file; v1.1.0 recorded it in ignore_paths.
    let dir = "v1.0.1-elliptic-key";
    let opts = DirOptions {
        signature: &data(&format!("{dir}/model.sig")),
        trust: &key_trust(),
        ignore: vec![],
        ignore_unsigned: false,
    };
    let err = verify_dir(&data(dir), &opts, &crate::progress::Silent).unwrap_err();
    assert!(
        err.to_string().contains("ignore-me: is not signed"),
        "{err}"
    );
    let opts = DirOptions {
        ignore_unsigned: true,
        ..opts
    };
    verify_dir(&data(dir), &opts, &crate::progress::Silent).unwrap();
    let dir = "v1.1.0-elliptic-key";
    let opts = DirOptions {
        signature: &data(&format!("{dir}/model.sig")),
        trust: &key_trust(),
        ignore: vec![],
        ignore_unsigned: false,
    };
    verify_dir(&data(dir), &opts, &crate::progress::Silent).unwrap();
}

#[test]
fn a_single_file_signature_is_refused_by_name() {
    // v1.0.0 signed one file as the model: its resource is ".".
    let trust = key_trust();
    let bytes = fsio::read_capped(
        &data("v1.0.0-elliptic-key/model.sig"),
        1 << 20,
        fsio::Follow::Never,
    )
    .unwrap();
    let err = bundle::verify(&bytes, &trust.as_trust())
        .unwrap_err()
        .to_string();
    assert!(err.contains("'.' component"), "{err}");
}

#[test]
fn every_pem_form_openssl_writes_loads_to_its_public_key() {
    let cases = [
        ("keys/p256-pkcs8.key", "keys/p256.pub", None),
        ("keys/p521-sec1.key", "keys/p521.pub", None),
        (
            "keys/p384-encrypted.key",
            "keys/p384.pub",
            Some(&b"correct-horse"[..]),
        ),
    ];
    for (key, public, password) in cases {
        let sk =
            SigningKey::from_pem(&text(key), password).unwrap_or_else(|e| panic!("{key}: {e}"));
        let vk = load_public_key(&data(public)).unwrap();
        assert_eq!(sk.verifying_key(), vk, "{key}");
        let sig = sk.sign(b"payload");
        assert!(vk.verify(b"payload", &sig), "{key}");
    }
    assert_eq!(
        SigningKey::from_pem(&text("keys/p384-encrypted.key"), Some(b"wrong")).err(),
        Some(keys::KeyLoadError::WrongPassword)
    );
    assert_eq!(
        SigningKey::from_pem(&text("keys/p384-encrypted.key"), None).err(),
        Some(keys::KeyLoadError::NeedsPassword)
    );
    let legacy = SigningKey::from_pem(&text("keys/legacy-encrypted.key"), Some(b"x"));
    assert!(
        matches!(&legacy, Err(keys::KeyLoadError::Invalid(w)) if w.contains("openssl pkcs8 -topk8")),
        "{:?}",
        legacy.err()
    );
}

#[test]
fn unsupported_curves_are_named() {
    for (file, what) in [
        ("keys/secp256k1.pub", "secp256k1"),
        ("keys/ed25519.pub", "Ed25519"),
    ] {
        let err = load_public_key(&data(file)).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::EXIT_OPERATIONAL);
        assert!(err.to_string().contains(what), "{err}");
    }
    for (file, what) in [
        ("keys/secp256k1.key", "secp256k1"),
        ("keys/ed25519.key", "Ed25519"),
    ] {
        let err = SigningKey::from_pem(&text(file), None).err().unwrap();
        assert!(err.to_string().contains(what), "{err}");
    }
}

#[test]
fn emit_signs_the_model_files_and_leaves_out_its_own() {
    let sk = SigningKey::from_pem(&text("keys/p256-pkcs8.key"), None).unwrap();
    let file = |path: &str, byte: u8| FileEntry {
        path: path.into(),
        size: 1,
        sha256: hex::encode([byte; 32]),
        executable: false,
        from: None,
    };
    let files = [
        file(".gitattributes", 1),
        file("model.sig", 2),
        file("w.bin", 3),
    ];
    let name = site_signature_name(files.iter().map(|f| f.path.as_str())).unwrap();
    assert_eq!(name, "model.airlock.sig");
    let bytes = emit("m", &files, name, &Signer::Key(&sk)).unwrap();
    let v = bundle::verify(&bytes, &Trust::Key(&sk.verifying_key())).unwrap();
    let names: Vec<&str> = v
        .statement
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["model.sig", "w.bin"]);
    assert_eq!(
        v.statement.ignore_paths,
        [
            "model.airlock.sig",
            ".airlock",
            ".git",
            ".gitattributes",
            ".github",
            ".gitignore"
        ]
    );
}
