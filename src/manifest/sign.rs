//! Signing a manifest: the one way every bundle signature and co-signature airlock writes is
//! made (FORMAT.md section 2: a minisign signature of the exact bytes of `manifest.json`, its
//! trusted comment naming the bundle, its version and the bytes' SHA-256).

use blake2::Blake2b512;
use sha2::{Digest, Sha256};

use super::{Manifest, trusted_comment};
use crate::keys::{self, KeyError, SecretKey, Signature};

/// The untrusted comment of every signature airlock makes (a bundle's, a co-signature, a
/// file's), like minisign's "signature from minisign secret key".
pub const UNTRUSTED_COMMENT: &str = "signature from airlock secret key";

/// A manifest's signature and the SHA-256 hex of the bytes it signs.
pub struct Signed {
    /// The minisign signature, as `manifest.json.minisig` or a co-signature holds it.
    pub signature: Signature,
    /// SHA-256 of `bytes`, lowercase hex (the trusted comment names it).
    pub manifest_sha256: String,
}

/// Signs `bytes`, the exact serialisation of `manifest`, with `key`.
pub fn sign(key: &SecretKey, manifest: &Manifest, bytes: &[u8]) -> Result<Signed, KeyError> {
    sign_hashed(
        key,
        manifest,
        hex::encode(Sha256::digest(bytes)),
        &Blake2b512::digest(bytes).into(),
    )
}

/// [`sign`] for bytes already written and hashed on the way (the seal streams `manifest.json`
/// into its file): `manifest_sha256` is their SHA-256 in lowercase hex, `prehash` their
/// BLAKE2b-512, minisign's prehash.
pub fn sign_hashed(
    key: &SecretKey,
    manifest: &Manifest,
    manifest_sha256: String,
    prehash: &[u8; 64],
) -> Result<Signed, KeyError> {
    let signature = keys::sign_prehashed(
        key,
        prehash,
        UNTRUSTED_COMMENT,
        &trusted_comment(&manifest.name, manifest.version, &manifest_sha256),
    )?;
    Ok(Signed {
        signature,
        manifest_sha256,
    })
}
