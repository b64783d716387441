//! The seam for signature schemes (issue 34 item 4): one trait to verify a signature over a
//! message and say which trusted key (or identity) made it, or refuse it with a typed reason
//! ([`Scheme`]), and one to make a signature ([`Signer`]). Every signature airlock checks or
//! makes goes through them:
//!
//! - minisign ([`minisign`]): a bundle's `manifest.json.minisig` and co-signatures, a receipt's,
//!   a registry artifact's signature layers, `verify FILE` and `cosign FILE` (counted by the
//!   trust policy, `trust::Policy::count`, with the schemes the policy registers), and every
//!   signature made (`manifest::sign`: `pack`'s seal and `cosign BUNDLE`; `sign FILE`);
//! - OpenSSF Model Signing (`oms::scheme`): a Sigstore bundle whose DSSE envelope carries the
//!   statement it signs, checked against the operator's OMS key or certificates.
//!
//! A scheme knows a signature's bytes and its trust material, nothing of files, bundles or
//! policies: reading the signature (bounded), counting distinct keys to a threshold and the
//! messages for the operator stay with their callers. A third scheme (a hardware key signing
//! with a key the trust policy holds, Sigstore keyless) is one file implementing [`Scheme`]
//! (and [`Signer`] if airlock signs with it) plus one line registering it
//! ([`policy_schemes`] for the trust policy's keys).

pub mod minisign;

use std::fmt::Debug;
use std::sync::Arc;

pub use minisign::{Minisign, MinisignSigner, TrustedKey};

use crate::keys::KeyError;

/// What a signature is made or checked over.
#[derive(Clone, Copy, Debug)]
pub enum Message<'a> {
    /// A manifest, held whole (minisign's prehashed and legacy signatures both cover it).
    Manifest(&'a [u8]),
    /// A file too large to hold, by its BLAKE2b-512 [`crate::keys::prehash`], read once: only a
    /// prehashed (`ED`) signature covers it, as `minisign -S` signs by default.
    Prehashed(&'a [u8; 64]),
    /// A payload the signature carries inside itself (a DSSE envelope's in-toto statement):
    /// signing encloses it; verifying returns it in [`Verified::payload`] for the caller to read.
    Enclosed(&'a [u8]),
}

impl Message<'_> {
    /// What the message is, for messages: "the manifest", "the file", "the statement".
    pub fn what(&self) -> &'static str {
        match self {
            Message::Manifest(_) => "the manifest",
            Message::Prehashed(_) => "the file",
            Message::Enclosed(_) => "the statement",
        }
    }
}

/// A signature that verified: who made it, and what it says beside the message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// Which trusted key made it: its index in the trust list given (0 for a scheme whose
    /// trust is not a list of keys).
    pub key: usize,
    /// How the signature names its signer: a minisign key id (16 uppercase hex digits), an OMS
    /// key hint or the signing certificate's fingerprint.
    pub key_id: String,
    /// How the signer is trusted: `key` (a trusted key), `certificate` (a chain to a trusted
    /// certificate).
    pub method: &'static str,
    /// The identity a certificate names (its subject), for the certificate method.
    pub subject: Option<String>,
    /// The comment the signature signs with the message (minisign's trusted comment).
    pub comment: Option<String>,
    /// The payload the signature carries ([`Message::Enclosed`]).
    pub payload: Option<Vec<u8>>,
    /// What the operator should know (an old signature without a key hint).
    pub notes: Vec<String>,
}

/// Why a signature does not count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a signature of this scheme, or not a well-formed one (another scheme may read it).
    Malformed(String),
    /// Names a key the trust does not hold.
    UnknownKey {
        /// The key it names.
        key_id: String,
    },
    /// Made with an algorithm this build does not verify.
    Unsupported {
        /// The key it names.
        key_id: String,
        /// What is not supported.
        reason: String,
    },
    /// Does not verify with the trusted key it names (the message, the signature or the
    /// signer is not what was trusted).
    Invalid {
        /// The key it names.
        key_id: String,
        /// What failed.
        reason: String,
    },
}

impl Refusal {
    /// The scheme's own words for it.
    pub fn reason(&self) -> String {
        match self {
            Refusal::Malformed(r)
            | Refusal::Unsupported { reason: r, .. }
            | Refusal::Invalid { reason: r, .. } => r.clone(),
            Refusal::UnknownKey { key_id } => {
                format!("signed by key {key_id}, which is not trusted")
            }
        }
    }
}

/// A signature scheme: verifies a signature's bytes over a message against its trust material.
pub trait Scheme: Debug + Send + Sync {
    /// What it checks signatures against: a list of trusted keys for schemes the trust policy
    /// counts ([`TrustedKey`]), or the scheme's own material (OMS: a key or certificates).
    type Trust: ?Sized;

    /// Its name, for messages ("not a minisign signature").
    fn name(&self) -> &'static str;

    /// The extension of its signature files (`minisig`): a co-signature by the key KEYID is
    /// `SIGNED.KEYID.EXTENSION` (FORMAT.md section 18.3), so each scheme's co-signatures have a
    /// name of their own; 1 to 16 characters of `a-z0-9` ([`is_extension`]).
    fn extension(&self) -> &'static str;

    /// Whom `signature` names as its signer, without verifying it: [`Refusal::Malformed`] when
    /// it is not a signature of this scheme.
    fn signer_of(&self, signature: &[u8]) -> Result<String, Refusal>;

    /// Verifies `signature` over `message` with `trust`: which trusted key made it, or why it
    /// does not count.
    fn verify(
        &self,
        message: Message<'_>,
        signature: &[u8],
        trust: &Self::Trust,
    ) -> Result<Verified, Refusal>;
}

/// A scheme whose signatures the trust policy counts, against its keys.
pub type PolicyScheme = Arc<dyn Scheme<Trust = [TrustedKey]>>;

/// The schemes a trust policy counts, in the order a signature file is offered to them (the
/// first that reads it decides): minisign. A scheme that verifies with the policy's keys is
/// registered here.
pub fn policy_schemes() -> Vec<PolicyScheme> {
    vec![Arc::new(Minisign)]
}

/// Whether `ext` can be a scheme's signature file extension ([`Scheme::extension`]): 1 to 16
/// characters of `a-z0-9`.
pub fn is_extension(ext: &[u8]) -> bool {
    (1..=16).contains(&ext.len())
        && ext
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// One signing key of a scheme.
pub trait Signer {
    /// The scheme's name.
    fn scheme(&self) -> &'static str;

    /// The extension of its signature files ([`Scheme::extension`]).
    fn extension(&self) -> &'static str;

    /// How its signatures name it ([`Verified::key_id`]).
    fn key_id(&self) -> String;

    /// Signs `message`; `comment` is signed with it where the scheme has a signed comment
    /// (minisign's trusted comment). Returns the signature file's bytes.
    fn sign(&self, message: Message<'_>, comment: &str) -> Result<Vec<u8>, KeyError>;
}

#[cfg(test)]
mod tests;
