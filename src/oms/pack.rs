//! OMS at pack time, with one read of the model:
//!
//! - the publisher's signature (`pack --oms-trust`/`--oms-cert-chain`) is verified before a
//!   byte of the bundle is written (the signature, then the list of signed files against the
//!   scan), and each signed digest against the digest the writer computed as it packed the
//!   file, before the manifest is sealed: a model that differs from what its publisher signed
//!   never becomes a bundle (exit 3, nothing left behind);
//! - airlock's own signature (`pack --oms-key`) is made from the writer's digests when the
//!   manifest is built, written beside `manifest.json` and listed in its `oms` object.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{Ignore, Signer, SigningKey, TrustMaterial, Verified};
use crate::error::{Error, Result};
use crate::manifest::{FileEntry, MAX_OMS_SIGNATURE_BYTES, Oms, OmsPublisher};
use crate::scan::ScanEntry;

/// airlock's own signature: the key, and for the certificate method the signing certificate
/// and its chain (DER, signing certificate first).
pub struct Emit {
    /// The key.
    pub key: SigningKey,
    /// The certificates to carry; empty for the key method.
    pub chain: Vec<Vec<u8>>,
}

/// The publisher's signature, verified against the operator's trust.
pub struct Publisher {
    /// Its path in the model.
    pub path: String,
    /// Where it was read from (for messages).
    pub shown: PathBuf,
    /// The verified signature.
    pub verified: Verified,
    /// SHA-256 of the bytes that verified.
    pub sha256: String,
    /// What the comparison leaves out.
    pub ignore: Ignore,
}

/// What the seal does about OMS.
#[derive(Default)]
pub struct Sealing {
    /// Sign with this (`--oms-key`).
    pub emit: Option<Emit>,
    /// Check the digests against this (`--oms-trust`).
    pub publisher: Option<Publisher>,
}

/// Reads the publisher's signature `rel` from the scanned model (bounded) and verifies it
/// against `trust`, then checks the list of signed files against the scan. `shown` names the
/// model in messages.
pub fn check_publisher(
    entries: &[ScanEntry],
    model_root: &Path,
    rel: &str,
    trust: &TrustMaterial,
) -> Result<Publisher> {
    let shown = model_root.join(rel);
    let Some(source) = entries
        .iter()
        .find(|e| matches!(e, ScanEntry::File { path, .. } if path == rel))
        .and_then(|e| e.source(model_root))
    else {
        return Err(Error::OmsSignature {
            path: shown,
            reason: "is not in the model: --oms-trust checks the publisher's OMS signature the model carries (name it with --oms-signature if it is not model.sig)".into(),
        });
    };
    let file = crate::scan::open_source(&source, rel).map_err(|e| Error::io(&shown, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_OMS_SIGNATURE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(&shown, e))?;
    if bytes.len() as u64 > MAX_OMS_SIGNATURE_BYTES {
        return Err(Error::OmsSignature {
            path: shown,
            reason: format!("is larger than the {MAX_OMS_SIGNATURE_BYTES}-byte limit"),
        });
    }
    let verified = super::verify_bytes(&shown, &bytes, trust)?;
    let ignore = super::verify_ignore(&verified, &[rel.to_string()]);
    // The names first: a model that lacks a signed file, or holds an unsigned one, is refused
    // before anything is packed.
    let names: BTreeMap<String, [u8; 32]> = entries
        .iter()
        .filter_map(|e| match e {
            ScanEntry::File { path, .. } => Some(path.clone()),
            ScanEntry::Dir { .. } => None,
        })
        .filter(|p| !ignore.covers(p))
        .map(|p| {
            let digest = verified
                .statement
                .resources
                .iter()
                .find(|r| r.name == p)
                .map_or([0; 32], |r| r.sha256);
            (p, digest)
        })
        .collect();
    let mismatches = super::compare(&verified, &names, &ignore, false);
    if !mismatches.is_empty() {
        return Err(super::mismatch_error(&shown, &mismatches));
    }
    Ok(Publisher {
        path: rel.to_string(),
        shown,
        sha256: hex::encode(Sha256::digest(&bytes)),
        verified,
        ignore,
    })
}

impl Sealing {
    /// Checks the publisher's digests against the packed files, makes airlock's signature and
    /// writes it into `dir`; returns the manifest's `oms` object.
    pub fn seal(&self, model_name: &str, files: &[FileEntry], dir: &Path) -> Result<Option<Oms>> {
        let publisher = match &self.publisher {
            None => None,
            Some(p) => {
                let packed_sig = files.iter().find(|f| f.path == p.path);
                if packed_sig.map(|f| f.sha256.as_str()) != Some(p.sha256.as_str()) {
                    return Err(Error::SourceChanged {
                        path: p.shown.clone(),
                        what:
                            "the publisher's OMS signature was not the file verified before packing"
                                .into(),
                    });
                }
                let actual: BTreeMap<String, [u8; 32]> = files
                    .iter()
                    .filter(|f| !p.ignore.covers(&f.path))
                    .map(|f| {
                        let mut d = [0u8; 32];
                        hex::decode_to_slice(&f.sha256, &mut d).expect("validated digests");
                        (f.path.clone(), d)
                    })
                    .collect();
                let mismatches = super::compare(&p.verified, &actual, &p.ignore, false);
                if !mismatches.is_empty() {
                    return Err(super::mismatch_error(&p.shown, &mismatches));
                }
                Some(OmsPublisher {
                    signature: p.path.clone(),
                    method: p.verified.method.to_string(),
                    signer: p.verified.signer.clone(),
                })
            }
        };
        let signature = match &self.emit {
            None => None,
            Some(e) => {
                let name = super::site_signature_name(files.iter().map(|f| f.path.as_str()))?;
                let signer = if e.chain.is_empty() {
                    Signer::Key(&e.key)
                } else {
                    Signer::Certificate(&e.key, &e.chain)
                };
                let bytes = super::emit(model_name, files, name, &signer)?;
                if bytes.len() as u64 > MAX_OMS_SIGNATURE_BYTES {
                    return Err(Error::ManifestTooLarge {
                        path: dir.join(name),
                        reason: format!(
                            "cannot sign this model with OMS: its signature would be {} bytes, more than the {MAX_OMS_SIGNATURE_BYTES}-byte limit every reader enforces",
                            bytes.len()
                        ),
                    });
                }
                crate::durable::write_synced(&dir.join(name), &bytes, 0o644)?;
                Some(super::manifest_entry(name, &bytes))
            }
        };
        Ok((signature.is_some() || publisher.is_some()).then_some(Oms {
            signature,
            publisher,
        }))
    }
}
