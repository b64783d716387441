//! Signing a manifest: the one way every bundle signature and co-signature airlock writes is
//! made (FORMAT.md section 2: a minisign signature of the exact bytes of `manifest.json`, its
//! trusted comment naming the bundle, its version and the bytes' SHA-256), through the
//! signature scheme seam ([`crate::scheme::Signer`]).

use blake2::Blake2b512;
use sha2::{Digest, Sha256};

use super::{Manifest, trusted_comment};
use crate::keys::{KeyError, SecretKey};
use crate::scheme::{Message, MinisignSigner, Signer};

/// A manifest's signature and the SHA-256 hex of the bytes it signs.
pub struct Signed {
    /// The signature file's bytes, as `manifest.json.minisig` or a co-signature holds them.
    pub signature: Vec<u8>,
    /// SHA-256 of `bytes`, lowercase hex (the trusted comment names it).
    pub manifest_sha256: String,
}

/// Signs `bytes`, the exact serialisation of `manifest`, with `key`.
pub fn sign(key: &SecretKey, manifest: &Manifest, bytes: &[u8]) -> Result<Signed, KeyError> {
    sign_hashed(
        &MinisignSigner(key),
        manifest,
        hex::encode(Sha256::digest(bytes)),
        &Blake2b512::digest(bytes).into(),
    )
}

/// [`sign`] for bytes already written and hashed on the way (the seal streams `manifest.json`
/// into its file), by any signer: `manifest_sha256` is their SHA-256 in lowercase hex,
/// `prehash` their BLAKE2b-512, minisign's prehash.
pub fn sign_hashed(
    key: &dyn Signer,
    manifest: &Manifest,
    manifest_sha256: String,
    prehash: &[u8; 64],
) -> Result<Signed, KeyError> {
    let signature = key.sign(
        Message::Prehashed(prehash),
        &trusted_comment(&manifest.name, manifest.version, &manifest_sha256),
    )?;
    Ok(Signed {
        signature,
        manifest_sha256,
    })
}
