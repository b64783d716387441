//! The keys OMS v1.0 signs with: ECDSA over NIST P-256, P-384 and P-521 (the curves of
//! Sigstore's protobuf specs; the reference tool refuses every other key, Ed25519 included),
//! each with the hash its size calls for (SHA-256, SHA-384, SHA-512), signatures in DER.
//!
//! Public keys are PEM `PUBLIC KEY` (SubjectPublicKeyInfo). Private keys are PEM
//! `EC PRIVATE KEY` (SEC1), `PRIVATE KEY` (PKCS#8) or `ENCRYPTED PRIVATE KEY` (PKCS#8 with
//! PBES2: PBKDF2 or scrypt, AES-CBC), what `openssl` and Python's `cryptography` write. The
//! legacy OpenSSL encryption of a SEC1 key (`Proc-Type: 4,ENCRYPTED`, an MD5 key derivation) is
//! refused with the command that converts it. Every parse error says what the file is instead.
//!
//! The key's identity in a signature is the reference's `publicKey.hint`: the SHA-256 of the
//! public key written as `cryptography` writes it (SubjectPublicKeyInfo with the uncompressed
//! point and the named curve, PEM with 64-column lines), so [`VerifyingKey::hint`] matches what
//! `model_signing sign key` records for the same key.

use der::Decode;
use pkcs8::EncodePublicKey;
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// `id-ecPublicKey`.
const EC_PUBLIC_KEY: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256_OID: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384_OID: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.3.132.0.34");
const P521_OID: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.3.132.0.35");

/// Why a public key or a PEM block is refused (issue 34 item 6: typed). `Display` is the
/// reason after the file's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not a DER SubjectPublicKeyInfo; the parser's reason.
    #[error("is not a DER SubjectPublicKeyInfo: {0}")]
    Spki(String),
    /// A key of a kind OMS does not sign with: its algorithm OID and curve OID.
    #[error("{}", describe_unsupported(.algorithm, .curve.as_deref()))]
    Unsupported {
        /// The algorithm OID.
        algorithm: String,
        /// The curve OID, if any.
        curve: Option<String>,
    },
    /// The key's bit string is not whole bytes.
    #[error("has a public key that is not a whole number of bytes")]
    PartialBytes,
    /// The point is not on the curve.
    #[error("holds a point that is not on {}", .0.name())]
    NotOnCurve(Curve),
    /// The private scalar is not valid on the curve.
    #[error("holds a private scalar that is not valid on {}", .0.name())]
    BadScalar(Curve),
    /// A BEGIN line without its END line.
    #[error("has a -----BEGIN {0}----- line without its -----END {0}----- line")]
    Unterminated(&'static str),
    /// A block that does not decode (label, the decoder's reason).
    #[error("has a {0} block that does not decode: {1}")]
    Undecodable(&'static str, String),
    /// A block whose label is not the one asked for.
    #[error("has a malformed {0} block")]
    Malformed(&'static str),
    /// A certificate where a key was expected.
    #[error(
        "holds a certificate, not a {0}: for the certificate method pass it with --oms-cert-chain"
    )]
    Certificate(&'static str),
    /// A private key where a public key was expected.
    #[error("holds a private key, not a {0}: give the public key (openssl ec -in KEY.pem -pubout)")]
    PrivateKey(&'static str),
    /// A minisign key.
    #[error("is a minisign key, not a PEM {0} of an ECDSA key on P-256, P-384 or P-521")]
    Minisign(&'static str),
    /// No block of the label.
    #[error("holds no PEM {0} block")]
    NoBlock(&'static str),
}

/// What a key of an unsupported kind is, by the OIDs of its algorithm identifier.
fn describe_unsupported(alg: &str, param: Option<&str>) -> String {
    let what = match (alg, param) {
        ("1.2.840.10045.2.1", Some("1.3.132.0.10")) => "an ECDSA key on secp256k1".to_string(),
        ("1.2.840.10045.2.1", Some(p)) => format!("an ECDSA key on the curve {p}"),
        ("1.2.840.10045.2.1", None) => "an ECDSA key without a named curve".to_string(),
        ("1.3.101.112", _) => "an Ed25519 key".to_string(),
        ("1.3.101.113", _) => "an Ed448 key".to_string(),
        ("1.2.840.113549.1.1.1", _) => "an RSA key".to_string(),
        (oid, _) => format!("a key of algorithm {oid}"),
    };
    format!(
        "is {what}; OMS v1.0 signs with ECDSA on P-256, P-384 or P-521 only (the reference verifier refuses any other key)"
    )
}

/// A supported curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-256 (secp256r1), with SHA-256.
    P256,
    /// NIST P-384 (secp384r1), with SHA-384.
    P384,
    /// NIST P-521 (secp521r1), with SHA-512.
    P521,
}

impl Curve {
    fn from_oid(oid: &der::asn1::ObjectIdentifier) -> Option<Curve> {
        match *oid {
            P256_OID => Some(Curve::P256),
            P384_OID => Some(Curve::P384),
            P521_OID => Some(Curve::P521),
            _ => None,
        }
    }

    /// The curve's name as the reference tool prints it.
    pub fn name(self) -> &'static str {
        match self {
            Curve::P256 => "secp256r1",
            Curve::P384 => "secp384r1",
            Curve::P521 => "secp521r1",
        }
    }
}

/// An ECDSA public key on a supported curve.
#[derive(Clone)]
pub enum VerifyingKey {
    /// P-256.
    P256(p256::ecdsa::VerifyingKey),
    /// P-384.
    P384(p384::ecdsa::VerifyingKey),
    /// P-521.
    P521(p521::ecdsa::VerifyingKey),
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VerifyingKey({}, hint {})",
            self.curve().name(),
            self.hint()
        )
    }
}

impl PartialEq for VerifyingKey {
    fn eq(&self, other: &Self) -> bool {
        self.to_pem() == other.to_pem()
    }
}

impl Eq for VerifyingKey {}

impl VerifyingKey {
    /// The key of a DER SubjectPublicKeyInfo; `Err` says what the key is when it is not one of
    /// the supported kinds.
    pub fn from_spki_der(der_bytes: &[u8]) -> Result<VerifyingKey, KeyError> {
        let spki = spki::SubjectPublicKeyInfoRef::from_der(der_bytes)
            .map_err(|e| KeyError::Spki(e.to_string()))?;
        let param = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.decode_as::<der::asn1::ObjectIdentifier>().ok());
        let curve = (spki.algorithm.oid == EC_PUBLIC_KEY)
            .then(|| param.as_ref().and_then(Curve::from_oid))
            .flatten()
            .ok_or_else(|| KeyError::Unsupported {
                algorithm: spki.algorithm.oid.to_string(),
                curve: param.as_ref().map(|p| p.to_string()),
            })?;
        let point = spki
            .subject_public_key
            .as_bytes()
            .ok_or(KeyError::PartialBytes)?;
        Self::from_sec1_point(curve, point)
    }

    /// The key of an encoded curve point.
    pub(crate) fn from_sec1_point(curve: Curve, point: &[u8]) -> Result<VerifyingKey, KeyError> {
        let bad = |_| KeyError::NotOnCurve(curve);
        Ok(match curve {
            Curve::P256 => {
                VerifyingKey::P256(p256::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(bad)?)
            }
            Curve::P384 => {
                VerifyingKey::P384(p384::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(bad)?)
            }
            Curve::P521 => {
                VerifyingKey::P521(p521::ecdsa::VerifyingKey::from_sec1_bytes(point).map_err(bad)?)
            }
        })
    }

    /// Parses a PEM `PUBLIC KEY` (text around the block, as `certtool` writes, is allowed).
    pub fn from_pem(text: &str) -> Result<VerifyingKey, KeyError> {
        let der_bytes = pem_block(text, "PUBLIC KEY")?;
        Self::from_spki_der(&der_bytes)
    }

    /// The curve.
    pub fn curve(&self) -> Curve {
        match self {
            VerifyingKey::P256(_) => Curve::P256,
            VerifyingKey::P384(_) => Curve::P384,
            VerifyingKey::P521(_) => Curve::P521,
        }
    }

    /// The SubjectPublicKeyInfo PEM as Python's `cryptography` writes it.
    pub(crate) fn to_pem(&self) -> String {
        let doc = match self {
            VerifyingKey::P256(k) => p256::PublicKey::from(k).to_public_key_der(),
            VerifyingKey::P384(k) => p384::PublicKey::from(k).to_public_key_der(),
            VerifyingKey::P521(k) => {
                let point = k.to_encoded_point(false);
                p521::PublicKey::from_sec1_bytes(point.as_bytes())
                    .expect("a verifying key is a valid point")
                    .to_public_key_der()
            }
        }
        .expect("an EC public key encodes");
        doc.to_pem("PUBLIC KEY", pkcs8::LineEnding::LF)
            .expect("PEM encodes")
    }

    /// The reference's key hint: SHA-256 (hex) of [`VerifyingKey::to_pem`].
    pub fn hint(&self) -> String {
        hex::encode(Sha256::digest(self.to_pem().as_bytes()))
    }

    /// Verifies the DER ECDSA signature `sig` over `msg`, hashed as the curve calls for.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        match self {
            VerifyingKey::P256(_) => self.verify_digest(&Sha256::digest(msg), sig),
            VerifyingKey::P384(_) => self.verify_digest(&Sha384::digest(msg), sig),
            VerifyingKey::P521(_) => self.verify_digest(&Sha512::digest(msg), sig),
        }
    }

    /// Verifies a DER signature over an already computed digest (any length: it is reduced
    /// as ECDSA says), for certificate signatures whose hash the certificate names.
    pub fn verify_digest(&self, digest: &[u8], sig: &[u8]) -> bool {
        use ecdsa::signature::hazmat::PrehashVerifier;
        match self {
            VerifyingKey::P256(k) => p256::ecdsa::Signature::from_der(sig)
                .is_ok_and(|s| k.verify_prehash(digest, &s).is_ok()),
            VerifyingKey::P384(k) => p384::ecdsa::Signature::from_der(sig)
                .is_ok_and(|s| k.verify_prehash(digest, &s).is_ok()),
            VerifyingKey::P521(k) => p521::ecdsa::Signature::from_der(sig)
                .is_ok_and(|s| k.verify_prehash(digest, &s).is_ok()),
        }
    }
}

/// An ECDSA private key on a supported curve. The scalars are zeroized on drop.
pub enum SigningKey {
    /// P-256.
    P256(p256::ecdsa::SigningKey),
    /// P-384.
    P384(p384::ecdsa::SigningKey),
    /// P-521.
    P521(p521::ecdsa::SigningKey),
}

/// Why a private key did not load.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyLoadError {
    /// It is encrypted and the password does not decrypt it.
    WrongPassword,
    /// It is encrypted and no password was given.
    NeedsPassword,
    /// Anything else: what the file is.
    Invalid(String),
}

impl std::fmt::Display for KeyLoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyLoadError::WrongPassword => f.write_str("the password does not decrypt it"),
            KeyLoadError::NeedsPassword => f.write_str("is encrypted and needs a password"),
            KeyLoadError::Invalid(why) => f.write_str(why),
        }
    }
}

/// Whether the PEM text is an encrypted private key (one that needs a password).
pub fn is_encrypted(text: &str) -> bool {
    text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
}

impl SigningKey {
    /// Loads a PEM private key (module documentation), decrypting it with `password` when it is
    /// an encrypted PKCS#8 key.
    pub fn from_pem(text: &str, password: Option<&[u8]>) -> Result<SigningKey, KeyLoadError> {
        let invalid = KeyLoadError::Invalid;
        if text.contains("Proc-Type: 4,ENCRYPTED") {
            return Err(invalid(
                "is a key in OpenSSL's legacy encrypted PEM form (Proc-Type: 4,ENCRYPTED), which airlock does not read; convert it to encrypted PKCS#8: openssl pkcs8 -topk8 -in KEY.pem -out KEY.p8.pem".into(),
            ));
        }
        if let Some(der_bytes) =
            find_block(text, "ENCRYPTED PRIVATE KEY").map_err(|e| invalid(e.to_string()))?
        {
            let Some(password) = password else {
                return Err(KeyLoadError::NeedsPassword);
            };
            let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der_bytes.as_slice())
                .map_err(|e| invalid(format!("is not an encrypted PKCS#8 key: {e}")))?;
            let plain = info.decrypt(password).map_err(|e| match e {
                pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::DecryptFailed) => {
                    KeyLoadError::WrongPassword
                }
                pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::AlgorithmParametersInvalid { .. })
                | pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::UnsupportedAlgorithm { .. }) => invalid(
                    "is encrypted with a scheme airlock does not read (it reads PBES2 with PBKDF2 or scrypt and AES-CBC, what openssl pkcs8 -topk8 writes)".into(),
                ),
                // A wrong password usually shows as bad padding or a key that does not parse.
                _ => KeyLoadError::WrongPassword,
            })?;
            return Self::from_pkcs8_der(plain.as_bytes()).map_err(|e| match e {
                KeyLoadError::Invalid(_) => KeyLoadError::WrongPassword,
                e => e,
            });
        }
        if let Some(der_bytes) =
            find_block(text, "PRIVATE KEY").map_err(|e| invalid(e.to_string()))?
        {
            return Self::from_pkcs8_der(&der_bytes);
        }
        if let Some(der_bytes) =
            find_block(text, "EC PRIVATE KEY").map_err(|e| invalid(e.to_string()))?
        {
            let k = sec1::EcPrivateKey::from_der(&der_bytes)
                .map_err(|e| invalid(format!("is not a SEC1 EC private key: {e}")))?;
            let curve = match k.parameters.and_then(|p| p.named_curve()) {
                Some(oid) => Curve::from_oid(&oid).ok_or_else(|| {
                    invalid(describe_unsupported(
                        &EC_PUBLIC_KEY.to_string(),
                        Some(&oid.to_string()),
                    ))
                })?,
                None => match k.private_key.len() {
                    32 => Curve::P256,
                    48 => Curve::P384,
                    66 => Curve::P521,
                    _ => {
                        return Err(invalid(describe_unsupported(
                            &EC_PUBLIC_KEY.to_string(),
                            None,
                        )));
                    }
                },
            };
            return Self::from_scalar(curve, k.private_key).map_err(|e| invalid(e.to_string()));
        }
        for other in [
            "OPENSSH PRIVATE KEY",
            "RSA PRIVATE KEY",
            "PUBLIC KEY",
            "CERTIFICATE",
        ] {
            if text.contains(&format!("-----BEGIN {other}-----")) {
                return Err(invalid(format!(
                    "holds a {other} block, not an ECDSA private key in PEM (EC PRIVATE KEY, PRIVATE KEY or ENCRYPTED PRIVATE KEY)"
                )));
            }
        }
        if text.starts_with("untrusted comment:") {
            return Err(invalid(
                "is a minisign key; OMS needs an ECDSA key on P-256, P-384 or P-521 in PEM (openssl ecparam -name prime256v1 -genkey -noout -out oms.key)".into(),
            ));
        }
        Err(invalid(
            "holds no PEM private key (EC PRIVATE KEY, PRIVATE KEY or ENCRYPTED PRIVATE KEY)"
                .into(),
        ))
    }

    fn from_pkcs8_der(der_bytes: &[u8]) -> Result<SigningKey, KeyLoadError> {
        let invalid = KeyLoadError::Invalid;
        let info = pkcs8::PrivateKeyInfo::try_from(der_bytes)
            .map_err(|e| invalid(format!("is not a PKCS#8 private key: {e}")))?;
        let param = info.algorithm.parameters_oid().ok();
        let curve = (info.algorithm.oid == EC_PUBLIC_KEY)
            .then(|| param.as_ref().and_then(Curve::from_oid))
            .flatten()
            .ok_or_else(|| {
                invalid(describe_unsupported(
                    &info.algorithm.oid.to_string(),
                    param.as_ref().map(|p| p.to_string()).as_deref(),
                ))
            })?;
        let k = sec1::EcPrivateKey::from_der(info.private_key)
            .map_err(|e| invalid(format!("holds an EC key that does not parse: {e}")))?;
        Self::from_scalar(curve, k.private_key).map_err(|e| invalid(e.to_string()))
    }

    fn from_scalar(curve: Curve, scalar: &[u8]) -> Result<SigningKey, KeyError> {
        let bad = |_| KeyError::BadScalar(curve);
        Ok(match curve {
            Curve::P256 => {
                SigningKey::P256(p256::ecdsa::SigningKey::from_slice(scalar).map_err(bad)?)
            }
            Curve::P384 => {
                SigningKey::P384(p384::ecdsa::SigningKey::from_slice(scalar).map_err(bad)?)
            }
            Curve::P521 => {
                SigningKey::P521(p521::ecdsa::SigningKey::from_slice(scalar).map_err(bad)?)
            }
        })
    }

    /// The public half.
    pub fn verifying_key(&self) -> VerifyingKey {
        match self {
            SigningKey::P256(k) => VerifyingKey::P256(*k.verifying_key()),
            SigningKey::P384(k) => VerifyingKey::P384(*k.verifying_key()),
            SigningKey::P521(k) => VerifyingKey::P521(p521::ecdsa::VerifyingKey::from(k)),
        }
    }

    /// Signs `msg` (hashed as the curve calls for; RFC 6979 nonces), DER-encoded.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        use ecdsa::signature::Signer;
        match self {
            SigningKey::P256(k) => {
                let s: p256::ecdsa::Signature = k.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
            SigningKey::P384(k) => {
                let s: p384::ecdsa::Signature = k.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
            SigningKey::P521(k) => {
                let s: p521::ecdsa::Signature = k.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
        }
    }
}

/// The DER of the first PEM block labelled `label` in `text`, if there is one. Text before and
/// after it is allowed (`certtool` prints a description first); a block that is there but does
/// not decode is an error.
pub(crate) fn find_block(
    text: &str,
    label: &'static str,
) -> Result<Option<Zeroizing<Vec<u8>>>, KeyError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let Some(start) = text.find(&begin) else {
        return Ok(None);
    };
    let Some(stop) = text[start..].find(&end) else {
        return Err(KeyError::Unterminated(label));
    };
    let block = &text[start..start + stop + end.len()];
    let (found, bytes) = pem_rfc7468::decode_vec(block.as_bytes())
        .map_err(|e| KeyError::Undecodable(label, e.to_string()))?;
    if found != label {
        return Err(KeyError::Malformed(label));
    }
    Ok(Some(Zeroizing::new(bytes)))
}

/// The DER of the PEM block `label` that `text` must hold.
pub(crate) fn pem_block(text: &str, label: &'static str) -> Result<Vec<u8>, KeyError> {
    match find_block(text, label)? {
        Some(b) => Ok(b.to_vec()),
        None if text.contains("-----BEGIN CERTIFICATE-----") => Err(KeyError::Certificate(label)),
        None if text.contains("PRIVATE KEY-----") => Err(KeyError::PrivateKey(label)),
        None if text.starts_with("untrusted comment:") => Err(KeyError::Minisign(label)),
        None => Err(KeyError::NoBlock(label)),
    }
}

/// Every `CERTIFICATE` block of a PEM text, as DER, in order.
pub fn certificate_blocks(text: &str) -> Result<Vec<Vec<u8>>, KeyError> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(b) = find_block(rest, "CERTIFICATE")? {
        out.push(b.to_vec());
        let end = rest.find("-----END CERTIFICATE-----").expect("found above");
        rest = &rest[end + "-----END CERTIFICATE-----".len()..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_p256_key_signs_and_verifies_and_refuses_other_messages() {
        let sk = SigningKey::P256(p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap());
        let vk = sk.verifying_key();
        let sig = sk.sign(b"hello");
        assert!(vk.verify(b"hello", &sig));
        assert!(!vk.verify(b"hellp", &sig));
        assert!(!vk.verify(b"hello", &sig[..sig.len() - 1]));
        let again = VerifyingKey::from_pem(&vk.to_pem()).unwrap();
        assert_eq!(again, vk);
    }
}
