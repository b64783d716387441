//! OpenSSF Model Signing behind the signature scheme seam ([`crate::scheme`]): a Sigstore
//! bundle whose DSSE envelope carries the in-toto statement it signs
//! ([`Message::Enclosed`]), checked against the operator's OMS key or certificates
//! ([`TrustMaterial`]); the checks are [`super::bundle`]'s, as `model_signing` makes them.

use super::TrustMaterial;
use super::bundle::{self, Signer as OmsKey};
use crate::keys::KeyError;
use crate::scheme::{Message, Refusal, Scheme, Signer, Verified};

/// The OMS scheme.
#[derive(Clone, Copy, Debug, Default)]
pub struct Oms;

impl Scheme for Oms {
    type Trust = TrustMaterial;

    fn name(&self) -> &'static str {
        "OMS"
    }

    /// As `model.sig` (FORMAT.md section 19); OMS signatures are not co-signatures.
    fn extension(&self) -> &'static str {
        "sig"
    }

    fn signer_of(&self, signature: &[u8]) -> Result<String, Refusal> {
        bundle::signer_named(signature).map_err(|e| Refusal::Malformed(e.to_string()))
    }

    /// Only [`Message::Enclosed`]: the statement is the signature's own payload (any, when the
    /// expected payload given is empty), returned in [`Verified::payload`].
    fn verify(
        &self,
        message: Message<'_>,
        signature: &[u8],
        trust: &TrustMaterial,
    ) -> Result<Verified, Refusal> {
        match message {
            Message::Enclosed(expected) => bundle::check(signature, &trust.as_trust(), expected),
            _ => Err(Refusal::Malformed(
                "an OMS signature signs the statement it carries, not bytes beside it".into(),
            )),
        }
    }
}

/// An OMS signing key (with its certificate chain for the certificate method).
pub struct OmsSigner<'a>(pub &'a OmsKey<'a>);

impl Signer for OmsSigner<'_> {
    fn scheme(&self) -> &'static str {
        "OMS"
    }

    fn extension(&self) -> &'static str {
        "sig"
    }

    fn key_id(&self) -> String {
        match self.0 {
            OmsKey::Key(k) | OmsKey::Certificate(k, _) => k.verifying_key().hint(),
        }
    }

    /// Encloses the message in the signature (a DSSE envelope over it); OMS has no signed
    /// comment, and signs no digest of bytes it does not carry.
    fn sign(&self, message: Message<'_>, _comment: &str) -> Result<Vec<u8>, KeyError> {
        match message {
            Message::Enclosed(payload) | Message::Manifest(payload) => {
                Ok(bundle::sign(payload, self.0))
            }
            Message::Prehashed(_) => Err(KeyError::UnsupportedAlgorithm {
                what: "OMS message",
                found: "a prehashed digest".into(),
            }),
        }
    }
}
