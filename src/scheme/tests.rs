//! The seam proven: a third scheme, registered here in a test only, is one file's worth of code
//! (a key the trust policy holds signing raw Ed25519 over the message's SHA-256, as a hardware
//! token would), and opening a bundle accepts and refuses its signatures through the trait,
//! exactly as minisign's.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

use super::minisign::key_id_bytes;
use super::*;
use crate::bundle::open;
use crate::error::Error;
use crate::keys::{self, SecretKey};
use crate::trust::Policy;

const HEADER: &str = "airlock-test-token-ed25519";

/// The test-only third scheme: `HEADER`, the key id, the base64 signature, one a line.
#[derive(Debug)]
struct Token;

fn parse(signature: &[u8]) -> Result<(String, [u8; 64]), Refusal> {
    let not = || Refusal::Malformed(format!("does not start with {HEADER:?}"));
    let text = std::str::from_utf8(signature).map_err(|_| not())?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(not());
    }
    let key_id = lines.next().unwrap_or_default().to_string();
    key_id_bytes(&key_id).ok_or_else(|| Refusal::Malformed("no key id".into()))?;
    let sig: [u8; 64] = STANDARD
        .decode(lines.next().unwrap_or_default())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Refusal::Malformed("no signature".into()))?;
    Ok((key_id, sig))
}

fn digest(message: Message<'_>) -> Result<Vec<u8>, Refusal> {
    match message {
        Message::Manifest(b) => Ok(Sha256::digest(b).to_vec()),
        Message::Prehashed(d) => Ok(d.to_vec()),
        Message::Enclosed(_) => Err(Refusal::Malformed("carries nothing".into())),
    }
}

impl Scheme for Token {
    type Trust = [TrustedKey];

    fn name(&self) -> &'static str {
        "token"
    }

    fn extension(&self) -> &'static str {
        "token"
    }

    fn signer_of(&self, signature: &[u8]) -> Result<String, Refusal> {
        parse(signature).map(|(id, _)| id)
    }

    fn verify(
        &self,
        message: Message<'_>,
        signature: &[u8],
        trust: &[TrustedKey],
    ) -> Result<Verified, Refusal> {
        let (key_id, sig) = parse(signature)?;
        let id = key_id_bytes(&key_id);
        let msg = digest(message)?;
        let mut named = false;
        for (i, k) in trust.iter().enumerate() {
            if k.minisign_id.is_some_and(|k| Some(k) != id) {
                continue;
            }
            named = true;
            if keys::verify_raw(&k.public, &msg, &sig) {
                return Ok(Verified {
                    key: i,
                    key_id,
                    method: "key",
                    ..Verified::default()
                });
            }
        }
        Err(if named {
            Refusal::Invalid {
                key_id,
                reason: "the token's signature does not verify".into(),
            }
        } else {
            Refusal::UnknownKey { key_id }
        })
    }
}

struct TokenSigner<'a>(&'a SecretKey);

impl Signer for TokenSigner<'_> {
    fn scheme(&self) -> &'static str {
        "token"
    }
    fn extension(&self) -> &'static str {
        "token"
    }
    fn key_id(&self) -> String {
        self.0.public_key().key_id_hex()
    }
    fn sign(&self, message: Message<'_>, _comment: &str) -> Result<Vec<u8>, KeyError> {
        let msg = digest(message).expect("a message the token signs");
        Ok(format!(
            "{HEADER}\n{}\n{}\n",
            self.key_id(),
            STANDARD.encode(keys::sign_raw(self.0, &msg))
        )
        .into_bytes())
    }
}

/// A bundle signed (minisign) by a fresh key, returned with it.
fn packed(dir: &Path) -> SecretKey {
    let model = dir.join("m");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), b"{\"a\": 1}\n").unwrap();
    let key = SecretKey::generate().unwrap();
    crate::pack::pack(
        &mut crate::pack::Model::open(&crate::pack::ModelSpec::Dir(model)).unwrap(),
        crate::pack::PackOptions {
            out: dir.join("b"),
            key: &key,
            name: "m".into(),
            version: 1,
            compress: crate::pack::Compress::None,
            volume_size: 1 << 20,
            chunk_size: None,
            created_unix: 0,
            warnings: vec![],
            parity: None,
            base: None,
            trust_update: vec![],
            values: None,
            left_checks: Default::default(),
            oms: Default::default(),
        },
        &crate::progress::Silent,
    )
    .unwrap();
    key
}

fn with_token(mut p: Policy) -> Policy {
    p.schemes.push(Arc::new(Token));
    p
}

#[test]
fn a_registered_scheme_counts_at_bundle_open_and_an_unregistered_one_does_not() {
    let t = tempfile::tempdir().unwrap();
    let publisher = packed(t.path());
    let b = t.path().join("b");
    let bytes = std::fs::read(b.join(crate::manifest::MANIFEST_NAME)).unwrap();
    let token = SecretKey::generate().unwrap();
    let id = token.public_key().key_id_hex();
    let sig = TokenSigner(&token)
        .sign(Message::Manifest(&bytes), "")
        .unwrap();
    // The token's co-signature has a name of its own: manifest.json.KEYID.token.
    let signer = TokenSigner(&token);
    let cosig = b.join(open::cosignature_name(&id, signer.extension()));
    assert!(cosig.ends_with(format!("manifest.json.{id}.token")));
    std::fs::write(&cosig, &sig).unwrap();

    // Only the token's key is trusted: the minisign primary is by another key, the token's
    // co-signature counts through its scheme.
    let only_token = Policy::any_of(&[token.public_key()]);
    let o = open::open_with(&b, &with_token(only_token.clone())).unwrap();
    assert_eq!(o.trust.signers.len(), 1);
    assert_eq!(o.trust.signers[0].key_id, id);
    assert_eq!(o.trust.signers[0].file, cosig);
    assert_eq!(o.signer.key_id_hex(), id);
    assert_eq!(o.trust.cosignatures.len(), 1);
    // Unregistered, the same file is not a signature the policy reads.
    match open::open_with(&b, &only_token) {
        Err(Error::UntrustedKey { key_id, .. }) => {
            assert_eq!(key_id, publisher.public_key().key_id_hex())
        }
        other => panic!("{other:?}"),
    }

    // Both keys, both needed: minisign's and the token's signatures count together.
    let mut both = with_token(Policy::any_of(&[
        publisher.public_key(),
        token.public_key(),
    ]));
    both.threshold = 2;
    let o = open::open_with(&b, &both).unwrap();
    assert_eq!(o.trust.signers.len(), 2);

    // A token signature over other bytes is refused through the trait, with its reason.
    let forged = TokenSigner(&token)
        .sign(Message::Manifest(b"another manifest"), "")
        .unwrap();
    std::fs::write(&cosig, &forged).unwrap();
    match open::open_with(&b, &both) {
        Err(Error::SignatureThreshold { detail, .. }) => assert!(
            detail.contains(&format!(
                "the signature by key {id} does not verify (the manifest or the signature was changed)"
            )),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }
    // Without the scheme registered, no scheme of the policy reads a .token file.
    both.schemes = policy_schemes();
    match open::open_with(&b, &both) {
        Err(Error::SignatureThreshold { detail, .. }) => assert!(
            detail.contains("no signature scheme of the trust policy reads .token files"),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }
    // A file named for the token is offered to the token only: a minisign co-signature
    // under that name does not count, though minisign would verify it.
    let minisign_cosig = MinisignSigner(&token)
        .sign(Message::Manifest(&bytes), "")
        .unwrap();
    std::fs::write(&cosig, &minisign_cosig).unwrap();
    match open::open_with(&b, &with_token(both.clone())) {
        Err(Error::SignatureThreshold { detail, .. }) => {
            assert!(detail.contains("does not start with"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    // Bundles written before each scheme had its name: a token co-signature named .minisig
    // is still offered to every scheme in turn and counts; unregistered, it is not a
    // minisign signature.
    std::fs::remove_file(&cosig).unwrap();
    let old_name = b.join(open::cosignature_name(&id, minisign::EXTENSION));
    std::fs::write(&old_name, &sig).unwrap();
    let o = open::open_with(&b, &with_token(both.clone())).unwrap();
    assert_eq!(o.trust.signers.len(), 2);
    assert_eq!(o.trust.signers[1].file, old_name);
    match open::open_with(&b, &both) {
        Err(Error::SignatureThreshold { detail, .. }) => {
            assert!(detail.contains("not a minisign signature"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    std::fs::rename(&old_name, &cosig).unwrap();

    // The primary slot too: the token's signature as manifest.json.minisig.
    std::fs::remove_file(&cosig).unwrap();
    std::fs::write(b.join(crate::manifest::SIGNATURE_NAME), &sig).unwrap();
    let o = open::open_with(&b, &with_token(only_token.clone())).unwrap();
    assert_eq!(o.signer.key_id_hex(), id);
    match open::open_with(&b, &only_token) {
        Err(Error::BadSignature { reason, .. }) => {
            assert!(
                reason.starts_with("is not a valid minisign signature"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn minisign_refusals_are_typed() {
    let a = SecretKey::generate().unwrap();
    let b = SecretKey::generate().unwrap();
    let sig = MinisignSigner(&a)
        .sign(Message::Manifest(b"m"), "c")
        .unwrap();
    let trust = |k: &SecretKey| {
        vec![TrustedKey {
            public: k.public_key().key,
            minisign_id: Some(k.public_key().key_id),
            label: k.public_key().key_id_hex(),
        }]
    };
    let v = Minisign
        .verify(Message::Manifest(b"m"), &sig, &trust(&a))
        .unwrap();
    assert_eq!(v.key, 0);
    assert_eq!(v.key_id, a.public_key().key_id_hex());
    assert_eq!(v.comment.as_deref(), Some("c"));
    assert_eq!(Minisign.signer_of(&sig).unwrap(), v.key_id);
    assert!(matches!(
        Minisign.verify(Message::Manifest(b"x"), &sig, &trust(&a)),
        Err(Refusal::Invalid { .. })
    ));
    assert_eq!(
        Minisign.verify(Message::Manifest(b"m"), &sig, &trust(&b)),
        Err(Refusal::UnknownKey {
            key_id: a.public_key().key_id_hex()
        })
    );
    assert!(matches!(
        Minisign.verify(Message::Manifest(b"m"), b"not a signature", &trust(&a)),
        Err(Refusal::Malformed(_))
    ));
    assert!(matches!(
        Minisign.verify(Message::Enclosed(b"m"), &sig, &trust(&a)),
        Err(Refusal::Malformed(_))
    ));
    assert!(
        MinisignSigner(&a)
            .sign(Message::Enclosed(b"m"), "c")
            .is_err()
    );
    assert_eq!(
        key_id_bytes(&a.public_key().key_id_hex()),
        Some(a.public_key().key_id)
    );
    // The signature is byte for byte what minisign's own signing code makes.
    let direct = keys::sign(&a, b"m", UNTRUSTED_COMMENT_FOR_TEST, "c").unwrap();
    let parsed = Minisign::parse(&sig).unwrap();
    assert_eq!(parsed.untrusted_comment, direct.untrusted_comment);
    assert_eq!(parsed.signature, direct.signature);
    assert_eq!(parsed.global_signature, direct.global_signature);
}

const UNTRUSTED_COMMENT_FOR_TEST: &str = minisign::UNTRUSTED_COMMENT;

#[test]
fn oms_verifies_and_signs_through_the_trait() {
    use crate::oms::scheme::{Oms, OmsSigner};
    use crate::oms::statement::{self, Resource};
    use crate::oms::{SigningKey, TrustMaterial, bundle};

    let key = SigningKey::P384(p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).unwrap());
    let other = SigningKey::P384(p384::ecdsa::SigningKey::from_slice(&[8u8; 48]).unwrap());
    let payload = statement::build(
        "m",
        vec![Resource {
            name: "w.bin".into(),
            sha256: [5; 32],
        }],
        &[],
    );
    let signer = bundle::Signer::Key(&key);
    let sig = OmsSigner(&signer)
        .sign(Message::Enclosed(&payload), "")
        .unwrap();
    // Byte for byte what the OMS writer makes (the vectors tests hold it to model_signing).
    assert_eq!(sig, bundle::sign(&payload, &signer));
    let hint = key.verifying_key().hint();
    assert_eq!(OmsSigner(&signer).key_id(), hint);
    assert_eq!(Oms.signer_of(&sig).unwrap(), hint);

    let trusted = TrustMaterial::Key(key.verifying_key());
    let v = Oms.verify(Message::Enclosed(&[]), &sig, &trusted).unwrap();
    assert_eq!(v.key_id, hint);
    assert_eq!(v.method, "key");
    assert_eq!(v.payload.as_deref(), Some(payload.as_slice()));
    assert!(
        Oms.verify(Message::Enclosed(&payload), &sig, &trusted)
            .is_ok()
    );
    assert!(matches!(
        Oms.verify(Message::Enclosed(b"another statement"), &sig, &trusted),
        Err(Refusal::Invalid { .. })
    ));
    match Oms.verify(
        Message::Enclosed(&[]),
        &sig,
        &TrustMaterial::Key(other.verifying_key()),
    ) {
        Err(Refusal::Invalid { reason, .. }) => assert!(reason.contains("another key"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Oms.verify(Message::Manifest(&payload), &sig, &trusted),
        Err(Refusal::Malformed(_))
    ));
    assert!(matches!(
        Oms.verify(Message::Enclosed(&[]), b"{}", &trusted),
        Err(Refusal::Malformed(_))
    ));
    // A minisign signature is not an OMS one, and the other way round.
    assert!(matches!(
        Minisign.signer_of(&sig),
        Err(Refusal::Malformed(_))
    ));
}
