//! minisign behind the [`Scheme`] seam: the signature format and the Ed25519 checks are
//! [`crate::keys`] (byte-compatible with minisign); this file says which trusted key verifies a
//! signature and makes airlock's signatures, every one with [`UNTRUSTED_COMMENT`].
//!
//! Keys are matched to signatures by the Ed25519 key that verifies them. A key that carries a
//! minisign key id (every key of a `.pub` file, and every key airlock writes into a root) only
//! matches a signature with that id, exactly as minisign checks the id before the signature; a
//! key from a root written by other tooling, without one, is tried against any signature.

use ed25519_dalek::VerifyingKey;

use super::{Message, Refusal, Scheme, Signer, Verified};
use crate::keys::{self, KeyError, PublicKey, SecretKey, Signature};

/// The untrusted comment of every signature airlock makes (a bundle's, a co-signature, a
/// file's), like minisign's "signature from minisign secret key".
pub const UNTRUSTED_COMMENT: &str = "signature from airlock secret key";

/// The extension of minisign's signature files: `manifest.json.minisig`, a co-signature
/// `manifest.json.KEYID.minisig`.
pub const EXTENSION: &str = "minisig";

/// A key whose signatures count (the trust policy's `PolicyKey`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedKey {
    /// The Ed25519 key.
    pub public: VerifyingKey,
    /// Its minisign key id, when known (always for `.pub` keys).
    pub minisign_id: Option<[u8; 8]>,
    /// How messages name it.
    pub label: String,
}

/// The key id bytes of a key id as airlock writes it (16 hex digits, `PublicKey::key_id_hex`).
pub fn key_id_bytes(hex: &str) -> Option<[u8; 8]> {
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
        .map(u64::to_le_bytes)
}

/// The minisign scheme.
#[derive(Clone, Copy, Debug, Default)]
pub struct Minisign;

impl Minisign {
    /// Parses a signature file's bytes.
    pub fn parse(signature: &[u8]) -> Result<Signature, Refusal> {
        let text = std::str::from_utf8(signature)
            .map_err(|_| Refusal::Malformed("is not UTF-8 text".into()))?;
        Signature::parse(text).map_err(|e| Refusal::Malformed(e.to_string()))
    }
}

impl Scheme for Minisign {
    type Trust = [TrustedKey];

    fn name(&self) -> &'static str {
        "minisign"
    }

    fn extension(&self) -> &'static str {
        EXTENSION
    }

    fn signer_of(&self, signature: &[u8]) -> Result<String, Refusal> {
        Ok(Minisign::parse(signature)?.key_id_hex())
    }

    fn verify(
        &self,
        message: Message<'_>,
        signature: &[u8],
        trust: &[TrustedKey],
    ) -> Result<Verified, Refusal> {
        let sig = Minisign::parse(signature)?;
        let key_id = sig.key_id_hex();
        let mut tried = None;
        for (i, k) in trust.iter().enumerate() {
            if k.minisign_id.is_some_and(|id| id != sig.key_id) {
                continue;
            }
            let pk = PublicKey {
                key_id: sig.key_id,
                key: k.public,
            };
            let checked = match message {
                Message::Manifest(bytes) => keys::verify(&pk, &sig, bytes),
                Message::Prehashed(digest) => keys::verify_prehashed(&pk, &sig, digest),
                Message::Enclosed(_) => {
                    return Err(Refusal::Malformed(
                        "a minisign signature does not carry what it signs".into(),
                    ));
                }
            };
            match checked {
                Ok(()) => {
                    return Ok(Verified {
                        key: i,
                        key_id,
                        method: "key",
                        comment: Some(sig.trusted_comment),
                        ..Verified::default()
                    });
                }
                Err(e) => tried = Some(e),
            }
        }
        Err(match tried {
            Some(e @ KeyError::UnsupportedAlgorithm { .. }) => Refusal::Unsupported {
                key_id,
                reason: e.to_string(),
            },
            Some(e) => Refusal::Invalid {
                key_id,
                reason: e.to_string(),
            },
            None => Refusal::UnknownKey { key_id },
        })
    }
}

/// A minisign secret key, signing as airlock does: prehashed (`ED`), with airlock's untrusted
/// comment and the trusted comment given.
pub struct MinisignSigner<'a>(pub &'a SecretKey);

impl MinisignSigner<'_> {
    /// [`Signer::sign`] as the parsed signature.
    pub fn signature(&self, message: Message<'_>, comment: &str) -> Result<Signature, KeyError> {
        match message {
            Message::Manifest(bytes) => keys::sign(self.0, bytes, UNTRUSTED_COMMENT, comment),
            Message::Prehashed(digest) => {
                keys::sign_prehashed(self.0, digest, UNTRUSTED_COMMENT, comment)
            }
            // minisign signs bytes beside the signature; it carries none.
            Message::Enclosed(_) => Err(KeyError::UnsupportedAlgorithm {
                what: "minisign message",
                found: "an enclosed payload".into(),
            }),
        }
    }
}

impl Signer for MinisignSigner<'_> {
    fn scheme(&self) -> &'static str {
        "minisign"
    }

    fn extension(&self) -> &'static str {
        EXTENSION
    }

    fn key_id(&self) -> String {
        self.0.public_key().key_id_hex()
    }

    fn sign(&self, message: Message<'_>, comment: &str) -> Result<Vec<u8>, KeyError> {
        Ok(self
            .signature(message, comment)?
            .to_file_text()
            .into_bytes())
    }
}

/// A minisign secret key signs as [`MinisignSigner`] does, so `&SecretKey` is a `&dyn Signer`.
impl Signer for SecretKey {
    fn scheme(&self) -> &'static str {
        MinisignSigner(self).scheme()
    }

    fn extension(&self) -> &'static str {
        EXTENSION
    }

    fn key_id(&self) -> String {
        MinisignSigner(self).key_id()
    }

    fn sign(&self, message: Message<'_>, comment: &str) -> Result<Vec<u8>, KeyError> {
        MinisignSigner(self).sign(message, comment)
    }
}
