//! The certificate method: the signing certificate and the chain a signature carries
//! (`verificationMaterial.x509CertificateChain`), checked against the certificates the operator
//! trusts (`--oms-cert-chain`), as the reference verifier's OpenSSL store does:
//!
//! - a path from the signing certificate, through the carried intermediates or the trusted
//!   ones, to a self-signed certificate the operator trusts, each certificate's signature
//!   verified with its issuer's key (ECDSA P-256/384/521, RSA PKCS#1 v1.5 of 2048 bits or more,
//!   or Ed25519; SHA-256/384/512), at most [`MAX_DEPTH`] certificates;
//! - every certificate valid at the moment the signing certificate became valid (its
//!   `notBefore`: the reference's signing time, so a signature outlives its certificate);
//! - every issuer a CA (`basicConstraints` CA, its path length respected, `keyUsage`
//!   keyCertSign when present); an unknown critical extension, or name constraints (which
//!   airlock does not evaluate), refuses the certificate;
//! - the signing certificate usable for signing: `keyUsage` digitalSignature, or else the
//!   code-signing extended key usage; its key ECDSA on a supported curve.
//!
//! Revocation is not checked (the reference does not either): the chain is the operator's
//! trust, offline.

use der::{Decode, Encode};
use sha2::{Digest, Sha256, Sha384, Sha512};
use x509_cert::Certificate;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage};

use super::keys::{KeyError, VerifyingKey};

/// Most certificates in a path, the signing certificate and the trusted root included.
pub(crate) const MAX_DEPTH: usize = 10;
/// Most certificates a signature may carry, or the operator may trust.
pub const MAX_CERTIFICATES: usize = 64;

const BASIC_CONSTRAINTS: &str = "2.5.29.19";
const KEY_USAGE: &str = "2.5.29.15";
const EXT_KEY_USAGE: &str = "2.5.29.37";
const CODE_SIGNING: &str = "1.3.6.1.5.5.7.3.3";
/// Critical extensions that are understood (or, like policies and alternative names, have no
/// bearing on this check, as with OpenSSL's defaults).
const KNOWN_CRITICAL: [&str; 6] = [
    BASIC_CONSTRAINTS,
    KEY_USAGE,
    EXT_KEY_USAGE,
    "2.5.29.17", // subjectAltName
    "2.5.29.32", // certificatePolicies
    "2.5.29.14", // subjectKeyIdentifier
];

/// Why a certificate, or a chain of them, is refused (issue 34 item 6: typed). `Display` is
/// the reason after the file's name. A subject is the certificate's, as [`Cert::subject`] gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// Not a certificate; the parser's reason.
    #[error("holds a certificate that does not parse: {0}")]
    Parse(String),
    /// basicConstraints that do not parse.
    #[error("has basicConstraints that do not parse: {0}")]
    BasicConstraints(String),
    /// A keyUsage that does not parse.
    #[error("has a keyUsage that does not parse: {0}")]
    KeyUsage(String),
    /// An extendedKeyUsage that does not parse.
    #[error("has an extendedKeyUsage that does not parse: {0}")]
    ExtKeyUsage(String),
    /// A part that does not encode back to DER; the encoder's reason.
    #[error("{0}")]
    Der(String),
    /// The PEM text or a certificate's key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The signature's bit string is not whole bytes.
    #[error("has a signature that is not a whole number of bytes")]
    PartialSignature,
    /// A signature algorithm airlock does not verify (its OID).
    #[error(
        "is signed with the algorithm {0}, which airlock does not verify (ECDSA, RSA PKCS#1 v1.5 or Ed25519 with SHA-256/384/512)"
    )]
    Algorithm(String),
    /// An RSA key that is not whole bytes.
    #[error("has a malformed RSA key")]
    RsaMalformed,
    /// An RSA key that does not parse; the parser's reason.
    #[error("has an RSA key that does not parse: {0}")]
    RsaParse(String),
    /// An RSA key too short (its bits).
    #[error("has an RSA key of {0} bits (2048 or more needed)")]
    RsaShort(usize),
    /// An Ed25519 key that is not whole bytes.
    #[error("has a malformed Ed25519 key")]
    Ed25519Malformed,
    /// PEM text without a certificate.
    #[error("holds no PEM CERTIFICATE block")]
    NoCertificate,
    /// An empty chain.
    #[error("carries an empty certificate chain")]
    EmptyChain,
    /// Too many certificates to consider.
    #[error("has more than {MAX_CERTIFICATES} certificates to consider")]
    TooMany,
    /// No path to a trusted root (the signing certificate's subject).
    #[error(
        "has no path of at most {MAX_DEPTH} certificates from the signing certificate ({0}) to a trusted root"
    )]
    NoPath(String),
    /// No trusted issuer for a certificate (its subject, its issuer).
    #[error(
        "has no trusted issuer for the certificate {subject:?} (issuer {issuer:?}): the chain does not lead to a certificate in --oms-cert-chain"
    )]
    NoIssuer {
        /// The certificate's subject.
        subject: String,
        /// Its issuer.
        issuer: String,
    },
    /// A critical extension airlock does not evaluate (subject, OID).
    #[error(
        "has a certificate ({subject:?}) with the critical extension {oid}, which airlock does not evaluate"
    )]
    Critical {
        /// The certificate's subject.
        subject: String,
        /// The extension's OID.
        oid: String,
    },
    /// A certificate not valid at the signing time.
    #[error("has a certificate ({0:?}) that was not valid when the signing certificate was issued")]
    NotValid(String),
    /// An issuer that is not a CA.
    #[error("has an issuer ({0:?}) that is not a certificate authority (basicConstraints CA)")]
    NotCa(String),
    /// An issuer whose path length constraint is exceeded (subject, the constraint).
    #[error("has an issuer ({0:?}) whose path length constraint {1} is exceeded")]
    PathLength(String, u8),
    /// An issuer whose keyUsage does not allow keyCertSign.
    #[error("has an issuer ({0:?}) whose keyUsage does not allow signing certificates")]
    NoCertSign(String),
    /// A signing certificate not usable for signing.
    #[error(
        "has a signing certificate ({0:?}) that cannot be used for signing (no keyUsage digitalSignature, no code-signing extended key usage)"
    )]
    NotForSigning(String),
    /// The signing certificate's key is not one OMS signs with.
    #[error("has a signing certificate whose key {0}")]
    LeafKey(Box<CertError>),
}

/// A parsed certificate with its DER.
#[derive(Clone, Debug)]
pub struct Cert {
    /// The certificate.
    pub cert: Certificate,
    /// Its exact DER.
    pub der: Vec<u8>,
}

impl Cert {
    /// Parses DER.
    pub fn from_der(der: &[u8]) -> Result<Cert, CertError> {
        let cert = Certificate::from_der(der).map_err(|e| CertError::Parse(e.to_string()))?;
        Ok(Cert {
            cert,
            der: der.to_vec(),
        })
    }

    /// The subject, for messages.
    pub fn subject(&self) -> String {
        self.cert.tbs_certificate.subject.to_string()
    }

    /// SHA-256 of the DER (the certificate's fingerprint), hex.
    pub fn fingerprint(&self) -> String {
        hex::encode(Sha256::digest(&self.der))
    }

    fn name_bytes(n: &x509_cert::name::Name) -> Vec<u8> {
        n.to_der().unwrap_or_default()
    }

    fn self_issued(&self) -> bool {
        let t = &self.cert.tbs_certificate;
        Self::name_bytes(&t.subject) == Self::name_bytes(&t.issuer)
    }

    fn extension(&self, oid: &str) -> Option<(bool, &[u8])> {
        self.cert
            .tbs_certificate
            .extensions
            .as_ref()?
            .iter()
            .find(|e| e.extn_id.to_string() == oid)
            .map(|e| (e.critical, e.extn_value.as_bytes()))
    }

    fn basic_constraints(&self) -> Result<Option<BasicConstraints>, CertError> {
        match self.extension(BASIC_CONSTRAINTS) {
            None => Ok(None),
            Some((_, v)) => BasicConstraints::from_der(v)
                .map(Some)
                .map_err(|e| CertError::BasicConstraints(e.to_string())),
        }
    }

    fn key_usage(&self) -> Result<Option<KeyUsage>, CertError> {
        match self.extension(KEY_USAGE) {
            None => Ok(None),
            Some((_, v)) => KeyUsage::from_der(v)
                .map(Some)
                .map_err(|e| CertError::KeyUsage(e.to_string())),
        }
    }

    fn ext_key_usage(&self) -> Result<Option<ExtendedKeyUsage>, CertError> {
        match self.extension(EXT_KEY_USAGE) {
            None => Ok(None),
            Some((_, v)) => ExtendedKeyUsage::from_der(v)
                .map(Some)
                .map_err(|e| CertError::ExtKeyUsage(e.to_string())),
        }
    }

    fn unknown_critical(&self) -> Option<String> {
        self.cert
            .tbs_certificate
            .extensions
            .as_ref()?
            .iter()
            .find(|e| e.critical && !KNOWN_CRITICAL.contains(&e.extn_id.to_string().as_str()))
            .map(|e| e.extn_id.to_string())
    }

    /// Whether `at` (seconds since the epoch) is within the validity period.
    fn valid_at(&self, at: u64) -> bool {
        let v = &self.cert.tbs_certificate.validity;
        v.not_before.to_unix_duration().as_secs() <= at
            && at <= v.not_after.to_unix_duration().as_secs()
    }

    /// The ECDSA key of the certificate, if it is one OMS signs with.
    pub fn ecdsa_key(&self) -> Result<VerifyingKey, CertError> {
        let spki = self
            .cert
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .map_err(|e| CertError::Der(e.to_string()))?;
        Ok(VerifyingKey::from_spki_der(&spki)?)
    }

    /// Whether `self` signed `child`.
    fn signed(&self, child: &Cert) -> Result<bool, CertError> {
        let tbs = child
            .cert
            .tbs_certificate
            .to_der()
            .map_err(|e| CertError::Der(e.to_string()))?;
        let sig = child
            .cert
            .signature
            .as_bytes()
            .ok_or(CertError::PartialSignature)?;
        let alg = child.cert.signature_algorithm.oid.to_string();
        let spki = &self.cert.tbs_certificate.subject_public_key_info;
        let key_alg = spki.algorithm.oid.to_string();
        let digest = |name: &str| -> Option<Vec<u8>> {
            Some(match name {
                "sha256" => Sha256::digest(&tbs).to_vec(),
                "sha384" => Sha384::digest(&tbs).to_vec(),
                "sha512" => Sha512::digest(&tbs).to_vec(),
                _ => return None,
            })
        };
        let hash = match alg.as_str() {
            "1.2.840.10045.4.3.2" | "1.2.840.113549.1.1.11" => "sha256",
            "1.2.840.10045.4.3.3" | "1.2.840.113549.1.1.12" => "sha384",
            "1.2.840.10045.4.3.4" | "1.2.840.113549.1.1.13" => "sha512",
            "1.3.101.112" => "ed25519",
            other => return Err(CertError::Algorithm(other.to_string())),
        };
        match (alg.starts_with("1.2.840.10045.4.3"), key_alg.as_str()) {
            (true, "1.2.840.10045.2.1") => {
                let key = self.ecdsa_key()?;
                Ok(key.verify_digest(&digest(hash).expect("a sha"), sig))
            }
            (false, "1.2.840.113549.1.1.1") if alg.starts_with("1.2.840.113549.1.1.") => {
                use rsa::pkcs1::DecodeRsaPublicKey;
                use rsa::traits::PublicKeyParts;
                let bits = spki
                    .subject_public_key
                    .as_bytes()
                    .ok_or(CertError::RsaMalformed)?;
                let key = rsa::RsaPublicKey::from_pkcs1_der(bits)
                    .map_err(|e| CertError::RsaParse(e.to_string()))?;
                if key.size() < 256 {
                    return Err(CertError::RsaShort(key.size() * 8));
                }
                let scheme = match hash {
                    "sha256" => rsa::Pkcs1v15Sign::new::<Sha256>(),
                    "sha384" => rsa::Pkcs1v15Sign::new::<Sha384>(),
                    _ => rsa::Pkcs1v15Sign::new::<Sha512>(),
                };
                Ok(key
                    .verify(scheme, &digest(hash).expect("a sha"), sig)
                    .is_ok())
            }
            (false, "1.3.101.112") if hash == "ed25519" => {
                let bits = spki
                    .subject_public_key
                    .as_bytes()
                    .ok_or(CertError::Ed25519Malformed)?;
                let Ok(key_bytes) = <[u8; 32]>::try_from(bits) else {
                    return Ok(false);
                };
                let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(&key_bytes) else {
                    return Ok(false);
                };
                let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
                    return Ok(false);
                };
                Ok(key.verify_strict(&tbs, &sig).is_ok())
            }
            _ => Ok(false),
        }
    }
}

/// Parses the certificates of PEM text (`--oms-cert-chain`).
pub fn parse_pem(text: &str) -> Result<Vec<Cert>, CertError> {
    let blocks = super::keys::certificate_blocks(text)?;
    if blocks.is_empty() {
        return Err(CertError::NoCertificate);
    }
    blocks.iter().map(|b| Cert::from_der(b)).collect()
}

/// Verifies the carried `chain` (the signing certificate first) against `trusted`; returns the
/// signing certificate's key and the path found, signing certificate first.
pub fn verify_chain(
    chain: &[Cert],
    trusted: &[Cert],
) -> Result<(VerifyingKey, Vec<Cert>), CertError> {
    let leaf = chain.first().ok_or(CertError::EmptyChain)?;
    if chain.len() > MAX_CERTIFICATES || trusted.len() > MAX_CERTIFICATES {
        return Err(CertError::TooMany);
    }
    let at = leaf
        .cert
        .tbs_certificate
        .validity
        .not_before
        .to_unix_duration()
        .as_secs();
    let mut path: Vec<Cert> = vec![leaf.clone()];
    loop {
        let current = path.last().expect("not empty").clone();
        let is_trusted = trusted.iter().any(|t| t.der == current.der);
        if is_trusted && current.self_issued() && current.signed(&current)? {
            break;
        }
        if path.len() >= MAX_DEPTH {
            return Err(CertError::NoPath(leaf.subject()));
        }
        let issuer_name = Cert::name_bytes(&current.cert.tbs_certificate.issuer);
        let mut found = None;
        for cand in trusted.iter().chain(chain[1..].iter()) {
            if Cert::name_bytes(&cand.cert.tbs_certificate.subject) != issuer_name
                || path.iter().any(|p| p.der == cand.der && !p.self_issued())
            {
                continue;
            }
            if cand.der == current.der {
                continue;
            }
            if cand.signed(&current)? {
                found = Some(cand.clone());
                break;
            }
        }
        match found {
            Some(c) => path.push(c),
            None => {
                return Err(CertError::NoIssuer {
                    subject: current.subject(),
                    issuer: current.cert.tbs_certificate.issuer.to_string(),
                });
            }
        }
    }
    for (i, c) in path.iter().enumerate() {
        if let Some(oid) = c.unknown_critical() {
            return Err(CertError::Critical {
                subject: c.subject(),
                oid,
            });
        }
        if !c.valid_at(at) {
            return Err(CertError::NotValid(c.subject()));
        }
        if i == 0 {
            continue;
        }
        let bc = c.basic_constraints()?;
        if !bc.as_ref().is_some_and(|b| b.ca) {
            return Err(CertError::NotCa(c.subject()));
        }
        if let Some(len) = bc.and_then(|b| b.path_len_constraint) {
            let below = path[1..i].iter().filter(|p| !p.self_issued()).count();
            if below > len as usize {
                return Err(CertError::PathLength(c.subject(), len));
            }
        }
        if let Some(ku) = c.key_usage()?
            && !ku.key_cert_sign()
        {
            return Err(CertError::NoCertSign(c.subject()));
        }
    }
    let usable = match leaf.key_usage()? {
        Some(ku) if ku.digital_signature() => true,
        _ => leaf
            .ext_key_usage()?
            .is_some_and(|e| e.0.iter().any(|o| o.to_string() == CODE_SIGNING)),
    };
    if !usable {
        return Err(CertError::NotForSigning(leaf.subject()));
    }
    let key = leaf
        .ecdsa_key()
        .map_err(|why| CertError::LeafKey(Box::new(why)))?;
    Ok((key, path))
}
