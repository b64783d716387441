//! Opening a bundle: reading `manifest.json` and `manifest.json.minisig` (bounded), verifying
//! the signature against the trust set and validating the manifest. No volume is read here.
//!
//! Both files come from the media, so both are hostile until the signature verifies: each is
//! opened without blocking (a FIFO must not hang the reader), must be a regular file (not
//! `/dev/zero`, a FIFO or a directory, followed through a symlink or not), and at most its
//! documented limit plus one byte is ever read (FORMAT.md, sections 2 and 9).

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsio::{Follow, OpenError, read_capped};
use crate::keys::{self, PublicKey, Signature};
use crate::manifest::{self, Manifest};

/// Largest `manifest.json.minisig` accepted, in bytes (FORMAT.md, section 8).
pub const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;

/// Where an opened bundle came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A bundle directory (on removable media, or anywhere on disk).
    Dir(PathBuf),
    /// An artifact in an OCI registry: its `oci://` reference.
    Registry(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Dir(d) => d.display().fmt(f),
            Origin::Registry(r) => r.fmt(f),
        }
    }
}

/// A bundle whose manifest signature has been verified.
#[derive(Debug)]
pub struct Opened {
    /// Where it came from.
    pub origin: Origin,
    /// The parsed, validated manifest.
    pub manifest: Manifest,
    /// The exact signed bytes.
    pub manifest_bytes: Vec<u8>,
    /// SHA-256 of the manifest bytes.
    pub manifest_sha256: String,
    /// The signature file's text.
    pub signature_text: String,
    /// The key that signed it.
    pub signer: PublicKey,
    /// Non-fatal observations (trusted comment disagreements).
    pub warnings: Vec<String>,
}

fn too_large(len: u64, cap: u64) -> String {
    if len > cap + 1 {
        format!("is {len} bytes, more than the {cap}-byte limit")
    } else {
        format!("holds more than the {cap}-byte limit")
    }
}

/// Reads `manifest.json` (bounded); the errors say what a missing or hostile file is.
fn read_manifest_bytes(path: &Path) -> Result<Vec<u8>> {
    let cap = manifest::MAX_MANIFEST_BYTES;
    read_capped(path, cap, Follow::Final).map_err(|e| match e {
        OpenError::NotFound => not_a_bundle(path),
        OpenError::NotRegular(what) => Error::BadManifest {
            path: path.to_path_buf(),
            reason: format!("is {what}, not a regular file; refusing to read it"),
        },
        OpenError::TooLarge(len) => Error::BadManifest {
            path: path.to_path_buf(),
            reason: too_large(len, cap),
        },
        e @ (OpenError::Io(_) | OpenError::Link) => Error::io(path, e.into()),
    })
}

/// Reads `manifest.json.minisig` (bounded) as UTF-8 text. `Ok(None)` when it does not exist.
fn read_signature_text(path: &Path) -> Result<Option<String>> {
    let bytes = match read_capped(path, MAX_SIGNATURE_BYTES, Follow::Final) {
        Ok(b) => b,
        Err(OpenError::NotFound) => return Ok(None),
        Err(OpenError::NotRegular(what)) => {
            return Err(Error::BadSignature {
                path: path.to_path_buf(),
                reason: format!("is {what}, not a regular file; refusing to read it"),
            });
        }
        Err(OpenError::TooLarge(len)) => {
            return Err(Error::BadSignature {
                path: path.to_path_buf(),
                reason: format!(
                    "{} (too large to be a signature)",
                    too_large(len, MAX_SIGNATURE_BYTES)
                ),
            });
        }
        Err(e @ (OpenError::Io(_) | OpenError::Link)) => return Err(Error::io(path, e.into())),
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| Error::BadSignature {
            path: path.to_path_buf(),
            reason: "is not UTF-8 text".into(),
        })
}

/// The error for a manifest that is not there. A bundle path that does not exist, is not a
/// directory or cannot be read is an operational problem (exit 1: an unmounted stick must not
/// look like tampering); a directory without a manifest is not a bundle (exit 3).
fn not_a_bundle(manifest_path: &Path) -> Error {
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let name = manifest_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Error::io(
            dir,
            io::Error::new(io::ErrorKind::NotFound, "no such directory"),
        ),
        Err(e) => Error::io(dir, e),
        Ok(m) if !m.is_dir() => Error::io(
            dir,
            io::Error::new(
                io::ErrorKind::NotADirectory,
                "is not a directory (a bundle is a directory)",
            ),
        ),
        Ok(_) => Error::NotABundle {
            path: dir.to_path_buf(),
            reason: format!("has no {name}: it is not a bundle, or an incomplete copy of one"),
        },
    }
}

/// Reads the manifest and signature of `dir` without checking the signature (for `inspect`).
pub fn read_unverified(dir: &Path) -> Result<(Manifest, Vec<u8>, Option<Signature>)> {
    let mpath = dir.join(manifest::MANIFEST_NAME);
    let bytes = read_manifest_bytes(&mpath)?;
    let m = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: mpath.clone(),
        reason,
    })?;
    let spath = dir.join(manifest::SIGNATURE_NAME);
    let sig = match read_signature_text(&spath)? {
        Some(text) => Some(Signature::parse(&text).map_err(|e| Error::Key {
            path: spath,
            source: e,
        })?),
        None => None,
    };
    Ok((m, bytes, sig))
}

/// A manifest whose signature verified.
pub struct Signed {
    /// The parsed, validated manifest.
    pub manifest: Manifest,
    /// Its exact bytes.
    pub bytes: Vec<u8>,
    /// The signature file's text.
    pub signature_text: String,
    /// The trusted key that signed it.
    pub signer: PublicKey,
    /// Trusted-comment disagreements.
    pub warnings: Vec<String>,
}

/// Verifies the signature of a manifest against `trust` and parses it. Used for bundles and
/// for receipts alike: `manifest_path` and `sig_path` name the two files.
pub fn verify_signed(manifest_path: &Path, sig_path: &Path, trust: &[PublicKey]) -> Result<Signed> {
    let bytes = read_manifest_bytes(manifest_path)?;
    let Some(text) = read_signature_text(sig_path)? else {
        return Err(Error::MissingSignature {
            path: sig_path.to_path_buf(),
        });
    };
    verify_signed_bytes(bytes, text, manifest_path, sig_path, trust)
}

/// [`verify_signed`] on a manifest and signature already read (bounded) from elsewhere, such
/// as a registry: the same checks, in the same order. `manifest_path` and `sig_path` only name
/// the two in errors.
pub fn verify_signed_bytes(
    bytes: Vec<u8>,
    text: String,
    manifest_path: &Path,
    sig_path: &Path,
    trust: &[PublicKey],
) -> Result<Signed> {
    let sig = Signature::parse(&text).map_err(|e| Error::BadSignature {
        path: sig_path.to_path_buf(),
        reason: format!("is not a valid minisign signature: {e}"),
    })?;
    let Some(signer) = trust.iter().find(|k| k.key_id == sig.key_id) else {
        let trusted: Vec<String> = trust.iter().map(|k| k.key_id_hex()).collect();
        return Err(Error::UntrustedKey {
            path: sig_path.to_path_buf(),
            key_id: sig.key_id_hex(),
            trusted: trusted.join(", "),
        });
    };
    keys::verify(signer, &sig, &bytes).map_err(|e| Error::BadSignature {
        path: manifest_path.to_path_buf(),
        reason: format!(
            "does not match its signature from key {}: {e}",
            signer.key_id_hex()
        ),
    })?;
    let manifest = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: manifest_path.to_path_buf(),
        reason,
    })?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let mut warnings = Vec::new();
    match manifest::parse_trusted_comment(&sig.trusted_comment) {
        Some(tc) => {
            if tc.manifest_sha256 != sha {
                warnings.push(format!(
                    "the signature's trusted comment names manifest sha256 {}, the manifest is {sha}",
                    tc.manifest_sha256
                ));
            }
            if tc.name != manifest.name || tc.version != manifest.version {
                warnings.push(format!(
                    "the signature's trusted comment says {:?} version {}, the manifest says {:?} version {}",
                    tc.name, tc.version, manifest.name, manifest.version
                ));
            }
        }
        None => warnings.push(format!(
            "the signature's trusted comment {:?} is not in airlock's form",
            sig.trusted_comment
        )),
    }
    Ok(Signed {
        manifest,
        bytes,
        signature_text: text,
        signer: signer.clone(),
        warnings,
    })
}

/// Opens `dir` and verifies its manifest signature against `trust`. No volume is read.
pub fn open(dir: &Path, trust: &[PublicKey]) -> Result<Opened> {
    let Signed {
        manifest,
        bytes: manifest_bytes,
        signature_text,
        signer,
        warnings,
    } = verify_signed(
        &dir.join(manifest::MANIFEST_NAME),
        &dir.join(manifest::SIGNATURE_NAME),
        trust,
    )?;
    let manifest_sha256 = hex::encode(Sha256::digest(&manifest_bytes));
    Ok(Opened {
        origin: Origin::Dir(dir.to_path_buf()),
        manifest,
        manifest_bytes,
        manifest_sha256,
        signature_text,
        signer,
        warnings,
    })
}

impl Opened {
    /// The bundle directory of a bundle on disk. Only the code that reads volumes asks, and
    /// only for a bundle it opened from a directory.
    ///
    /// # Panics
    ///
    /// For an artifact opened from a registry, which has no bundle directory.
    pub fn dir(&self) -> &Path {
        match &self.origin {
            Origin::Dir(d) => d,
            Origin::Registry(r) => panic!("{r}: a registry artifact has no bundle directory"),
        }
    }
}
