//! The signature file (`model.sig`): a Sigstore bundle (`application/vnd.dev.sigstore.bundle.
//! v0.3+json`) whose `dsseEnvelope` holds the statement and one ECDSA signature over its DSSE
//! pre-authentication encoding, and whose `verificationMaterial` says who signed: a
//! `publicKey.hint` (the key method) or an `x509CertificateChain` (the certificate method).
//! No transparency-log entry: the key and certificate methods are offline.
//!
//! [`sign`] writes the bundle as `model_signing sign key|certificate` does (compact JSON, the
//! same field order); [`verify`] reads one as `model_signing verify key|certificate` does:
//! the media type exact, the payload type in-toto JSON, the first signature checked over
//! `PAE(payload)` with the hash of the key's curve, then the statement ([`super::statement`]).
//! The reference also accepts a signature over a mis-encoded PAE made by its 0.2 release; airlock
//! does not (such signatures carry a pre-1.0 statement, which is refused anyway).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::keys::{SigningKey, VerifyingKey};
use super::statement::{self, Statement, StatementError};
use super::x509::{self, Cert, CertError};
use crate::scheme::{Refusal, Verified as Scheme};

/// The bundle's media type.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The DSSE payload type.
pub(crate) const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// DSSE v1 pre-authentication encoding of an in-toto payload.
pub(crate) fn pae(payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {PAYLOAD_TYPE} {} ",
        PAYLOAD_TYPE.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Who signs: a key alone, or a key with its certificate and chain (DER, signing certificate
/// first).
pub enum Signer<'a> {
    /// `model_signing sign key`.
    Key(&'a SigningKey),
    /// `model_signing sign certificate`.
    Certificate(&'a SigningKey, &'a [Vec<u8>]),
}

/// Signs `payload` (a statement) and returns the bundle's bytes.
pub fn sign(payload: &[u8], signer: &Signer<'_>) -> Vec<u8> {
    let key = match signer {
        Signer::Key(k) | Signer::Certificate(k, _) => k,
    };
    let sig = key.sign(&pae(payload));
    let material = match signer {
        Signer::Key(k) => format!(
            "{{\"publicKey\":{{\"hint\":\"{}\"}},\"tlogEntries\":[]}}",
            k.verifying_key().hint()
        ),
        Signer::Certificate(_, chain) => format!(
            "{{\"x509CertificateChain\":{{\"certificates\":[{}]}},\"tlogEntries\":[]}}",
            chain
                .iter()
                .map(|c| format!("{{\"rawBytes\":\"{}\"}}", STANDARD.encode(c)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    format!(
        "{{\"mediaType\":\"{MEDIA_TYPE}\",\"verificationMaterial\":{material},\"dsseEnvelope\":{{\"payload\":\"{}\",\"payloadType\":\"{PAYLOAD_TYPE}\",\"signatures\":[{{\"sig\":\"{}\",\"keyid\":\"\"}}]}}}}",
        STANDARD.encode(payload),
        STANDARD.encode(&sig)
    )
    .into_bytes()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBundle {
    media_type: String,
    verification_material: RawMaterial,
    dsse_envelope: Option<RawEnvelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMaterial {
    public_key: Option<RawKeyId>,
    x509_certificate_chain: Option<RawChain>,
    certificate: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawKeyId {
    hint: Option<String>,
}

#[derive(Deserialize)]
struct RawChain {
    certificates: Vec<RawCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvelope {
    payload: String,
    payload_type: String,
    signatures: Vec<RawSig>,
}

#[derive(Deserialize)]
struct RawSig {
    sig: String,
}

/// What a signature is checked against.
pub enum Trust<'a> {
    /// A public key (`--oms-trust`).
    Key(&'a VerifyingKey),
    /// Trusted certificates (`--oms-cert-chain`).
    Certificates(&'a [Cert]),
}

/// How a signature verified.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The statement it signs.
    pub statement: Statement,
    /// `key` or `certificate`.
    pub method: &'static str,
    /// The key's hint (key method) or the signing certificate's SHA-256 fingerprint.
    pub signer: String,
    /// The signing certificate's subject (certificate method).
    pub subject: Option<String>,
    /// What the operator should know (an old bundle without a key hint).
    pub notes: Vec<String>,
}

/// Why a bundle is refused (issue 34 item 6: typed). `Display` is the reason after the
/// signature's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Not a Sigstore bundle in JSON; the parser's reason.
    #[error("is not a Sigstore bundle in JSON: {0}")]
    Json(String),
    /// Another media type.
    #[error("is a bundle of media type {}, not {MEDIA_TYPE:?}", crate::display::quote(.0))]
    MediaType(String),
    /// No DSSE envelope where a model signature is verified.
    #[error("holds no DSSE envelope (a message signature is not a model signature)")]
    NotModelSignature,
    /// No DSSE envelope.
    #[error("holds no DSSE envelope")]
    NoEnvelope,
    /// Another DSSE payload type.
    #[error("has the DSSE payload type {}, not {PAYLOAD_TYPE:?}", crate::display::quote(.0))]
    PayloadType(String),
    /// No signature in the envelope.
    #[error("holds no signature")]
    NoSignature,
    /// No signed in-toto statement.
    #[error("holds no signed in-toto statement")]
    NoStatement,
    /// A field that is not base64 (the field, the decoder's reason).
    #[error("has a {0} that is not base64: {1}")]
    Base64(&'static str, String),
    /// Made with the certificate method, verified with a key.
    #[error(
        "was made with the certificate method (it carries a certificate chain): verify it with --oms-cert-chain"
    )]
    CertificateMethod,
    /// No public key hint nor certificate chain.
    #[error("has no publicKey in its verification material")]
    NoPublicKey,
    /// A key hint that is not the trusted key's.
    #[error(
        "was signed by another key: its key hint is {}, the trusted key's is {trusted}",
        crate::display::bounded(.hint)
    )]
    OtherKey {
        /// The hint the bundle carries.
        hint: String,
        /// The trusted key's.
        trusted: String,
    },
    /// Made with the key method, verified with certificates.
    #[error(
        "was made with the key method (it carries a key hint, no certificate): verify it with --oms-trust"
    )]
    KeyMethod,
    /// No certificate chain.
    #[error("carries no x509CertificateChain")]
    NoChain,
    /// More certificates than allowed (how many).
    #[error("carries {0} certificates, more than {max}", max = x509::MAX_CERTIFICATES)]
    ChainTooLong(usize),
    /// A carried certificate, or the chain, refused.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// The signature does not verify with the trusted key.
    #[error(
        "does not verify with the trusted key: the signature or the statement was changed, or another key signed it"
    )]
    KeyMismatch,
    /// The signature does not verify with its signing certificate's key.
    #[error(
        "does not verify with its signing certificate's key: the signature or the statement was changed"
    )]
    CertificateMismatch,
    /// Signs another statement than the one expected.
    #[error("signs another statement than the one expected")]
    OtherStatement,
    /// Names no signer.
    #[error("names no signer (no key hint, no certificate)")]
    NoSigner,
    /// The statement refused.
    #[error(transparent)]
    Statement(#[from] StatementError),
    /// Refused by the signature scheme (its reason, made by [`crate::scheme::Refusal::reason`]).
    #[error("{0}")]
    Refused(String),
}

fn b64(field: &'static str, s: &str) -> Result<Vec<u8>, BundleError> {
    STANDARD
        .decode(s)
        .map_err(|e| BundleError::Base64(field, e.to_string()))
}

/// Verifies the bundle `bytes` against `trust` and returns its statement. `Err` says what
/// failed, for a message that names the file. (The code verifies through the scheme seam,
/// [`super::scheme::Oms`], which calls [`check`]; this is [`check`] with the statement read.)
pub fn verify(bytes: &[u8], trust: &Trust<'_>) -> Result<Verified, BundleError> {
    let v = check(bytes, trust, &[]).map_err(|r| BundleError::Refused(r.reason()))?;
    Ok(verified(v)?)
}

/// The statement a signature that verified carries, parsed: [`Verified`].
pub fn verified(v: crate::scheme::Verified) -> Result<Verified, StatementError> {
    let statement = statement::parse(v.payload.as_deref().unwrap_or_default())?;
    Ok(Verified {
        statement,
        method: v.method,
        signer: v.key_id,
        subject: v.subject,
        notes: v.notes,
    })
}

/// Checks the bundle `bytes` against `trust` as `model_signing verify` does, up to its
/// signature: the payload it carries (which must be `expected` unless that is empty) is
/// returned unparsed with who signed it; [`Refusal::Malformed`] for what is not an OMS
/// signature, [`Refusal::Invalid`] for one that does not verify with what is trusted.
pub fn check(bytes: &[u8], trust: &Trust<'_>, expected: &[u8]) -> Result<Scheme, Refusal> {
    let bad = |r: BundleError| Refusal::Malformed(r.to_string());
    let raw = parse_raw(bytes).map_err(bad)?;
    let env = raw
        .dsse_envelope
        .ok_or_else(|| bad(BundleError::NotModelSignature))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(bad(BundleError::PayloadType(env.payload_type)));
    }
    let first = env
        .signatures
        .first()
        .ok_or_else(|| bad(BundleError::NoSignature))?;
    let sig = b64("signature", &first.sig).map_err(bad)?;
    let payload = b64("payload", &env.payload).map_err(bad)?;
    let material = raw.verification_material;
    let mut notes = Vec::new();
    let invalid = |reason: BundleError| Refusal::Invalid {
        key_id: String::new(),
        reason: reason.to_string(),
    };
    let (key, method, signer, subject) = match trust {
        Trust::Key(k) => {
            let Some(id) = material.public_key else {
                return Err(invalid(
                    if material.x509_certificate_chain.is_some() || material.certificate.is_some() {
                        BundleError::CertificateMethod
                    } else {
                        BundleError::NoPublicKey
                    },
                ));
            };
            let hint = k.hint();
            match id.hint {
                Some(h) if h != hint => {
                    return Err(invalid(BundleError::OtherKey {
                        hint: h,
                        trusted: hint,
                    }));
                }
                Some(_) => {}
                None => notes.push(
                    "the signature carries no key hint (an older model_signing wrote it); it was checked against the trusted key".into(),
                ),
            }
            ((*k).clone(), "key", hint, None)
        }
        Trust::Certificates(trusted) => {
            let Some(chain) = material.x509_certificate_chain else {
                return Err(invalid(if material.public_key.is_some() {
                    BundleError::KeyMethod
                } else {
                    BundleError::NoChain
                }));
            };
            if chain.certificates.len() > x509::MAX_CERTIFICATES {
                return Err(bad(BundleError::ChainTooLong(chain.certificates.len())));
            }
            let certs = chain
                .certificates
                .iter()
                .map(|c| b64("certificate", &c.raw_bytes).and_then(|d| Ok(Cert::from_der(&d)?)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?;
            let (key, path) = x509::verify_chain(&certs, trusted).map_err(|e| invalid(e.into()))?;
            (
                key,
                "certificate",
                path[0].fingerprint(),
                Some(path[0].subject()),
            )
        }
    };
    if !key.verify(&pae(&payload), &sig) {
        return Err(invalid(match trust {
            Trust::Key(_) => BundleError::KeyMismatch,
            Trust::Certificates(_) => BundleError::CertificateMismatch,
        }));
    }
    if !expected.is_empty() && payload != expected {
        return Err(invalid(BundleError::OtherStatement));
    }
    Ok(Scheme {
        key: 0,
        key_id: signer,
        method,
        subject,
        payload: Some(payload),
        notes,
        ..Scheme::default()
    })
}

/// A Sigstore bundle's JSON of the media type OMS writes, or why it is not one.
fn parse_raw(bytes: &[u8]) -> Result<RawBundle, BundleError> {
    let raw: RawBundle = serde_json::from_slice(bytes)
        .map_err(|e| BundleError::Json(crate::display::json_error(&e)))?;
    if raw.media_type != MEDIA_TYPE {
        return Err(BundleError::MediaType(raw.media_type));
    }
    Ok(raw)
}

/// Whom a bundle names as its signer, unverified: its key hint, or its signing certificate's
/// fingerprint.
pub fn signer_named(bytes: &[u8]) -> Result<String, BundleError> {
    let raw = parse_raw(bytes)?;
    let m = raw.verification_material;
    if let Some(h) = m.public_key.and_then(|k| k.hint) {
        return Ok(h);
    }
    let first = m
        .x509_certificate_chain
        .and_then(|c| c.certificates.into_iter().next())
        .ok_or(BundleError::NoSigner)?;
    Ok(Cert::from_der(&b64("certificate", &first.raw_bytes)?)?.fingerprint())
}

/// The statement of a bundle, without checking who signed it: for a bundle's carried
/// signature, whose bytes the manifest's minisign signature already vouches for, compared with
/// the manifest's own list (a packer that lied in one of the two is caught).
pub fn read_statement(bytes: &[u8]) -> Result<Statement, BundleError> {
    let raw = parse_raw(bytes)?;
    let env = raw.dsse_envelope.ok_or(BundleError::NoEnvelope)?;
    if env.payload_type != PAYLOAD_TYPE || env.signatures.is_empty() {
        return Err(BundleError::NoStatement);
    }
    Ok(statement::parse(&b64("payload", &env.payload)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oms::statement::Resource;

    fn key() -> SigningKey {
        SigningKey::P384(p384::ecdsa::SigningKey::from_slice(&[9u8; 48]).unwrap())
    }

    #[test]
    fn a_signed_bundle_verifies_and_names_the_key_hint() {
        let k = key();
        let payload = statement::build(
            "m",
            vec![Resource {
                name: "w.bin".into(),
                sha256: [5; 32],
            }],
            &[],
        );
        let bytes = sign(&payload, &Signer::Key(&k));
        let vk = k.verifying_key();
        let v = verify(&bytes, &Trust::Key(&vk)).unwrap();
        assert_eq!(v.statement.resources[0].name, "w.bin");
        assert_eq!(v.signer, vk.hint());
        let other = SigningKey::P384(p384::ecdsa::SigningKey::from_slice(&[8u8; 48]).unwrap());
        let err = verify(&bytes, &Trust::Key(&other.verifying_key()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("another key"), "{err}");
    }

    #[test]
    fn a_changed_payload_or_malformed_base64_is_refused() {
        let k = key();
        let payload = statement::build(
            "m",
            vec![Resource {
                name: "w.bin".into(),
                sha256: [5; 32],
            }],
            &[],
        );
        let bytes = String::from_utf8(sign(&payload, &Signer::Key(&k))).unwrap();
        let other = STANDARD.encode(statement::build(
            "m",
            vec![Resource {
                name: "w.bin".into(),
                sha256: [6; 32],
            }],
            &[],
        ));
        let swapped = bytes.replace(&STANDARD.encode(&payload), &other);
        let vk = k.verifying_key();
        let err = verify(swapped.as_bytes(), &Trust::Key(&vk))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not verify"), "{err}");
        let bad = bytes.replace("\"sig\":\"", "\"sig\":\"!");
        let err = verify(bad.as_bytes(), &Trust::Key(&vk))
            .unwrap_err()
            .to_string();
        assert!(err.contains("base64"), "{err}");
    }
}
