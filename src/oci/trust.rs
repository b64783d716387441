//! The co-signatures and trust roots of a published bundle (FORMAT.md section 18): fetched
//! from their layers, each bounded to its limit and checked against its descriptor, for
//! `unpack oci://` to verify exactly as a bundle directory's files are.

use std::path::PathBuf;

use crate::bundle::open::{Carried, MAX_SIGNATURE_BYTES};
use crate::error::{Error, Result};
use crate::oci::Registry;
use crate::oci::modelpack::{self, Layer};
use crate::trust::Policy;
use crate::trust::policy::SigFile;
use crate::trust::root::MAX_ROOT_BYTES;
use crate::trust::update;

fn fetch(registry: &Registry, layer: &Layer, cap: u64) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::Artifact {
        reference: registry.reference.to_string(),
        reason,
    };
    if layer.size > cap {
        return Err(bad(format!(
            "its {} layer {} declares {} bytes, more than the {cap}-byte limit",
            layer.media_type, layer.path, layer.size
        )));
    }
    let bytes = registry.blob_bytes(&layer.digest, cap)?.ok_or_else(|| {
        bad(format!(
            "its {} blob {} is missing",
            layer.path, layer.digest
        ))
    })?;
    if modelpack::digest_of(&bytes) != layer.digest || bytes.len() as u64 != layer.size {
        return Err(bad(format!(
            "its {} blob does not match its descriptor {}",
            layer.path, layer.digest
        )));
    }
    Ok(bytes)
}

/// The co-signatures (with notes on any that cannot be read) and the roots the artifact
/// carries. A root that is not valid is an error when `policy` is a root's, a note otherwise.
pub fn fetch_all(
    registry: &Registry,
    image: &[u8],
    policy: &Policy,
) -> Result<(Vec<SigFile>, Vec<String>, Carried)> {
    let reference = registry.reference.to_string();
    let (cosig_layers, root_layers) =
        modelpack::trust_layers(image).map_err(|reason| Error::Artifact {
            reference: reference.clone(),
            reason: reason.to_string(),
        })?;
    let mut notes = Vec::new();
    let mut cosigs = Vec::new();
    for l in &cosig_layers {
        let path = PathBuf::from(format!("{reference}#.airlock/{}", l.path));
        let bytes = fetch(registry, l, MAX_SIGNATURE_BYTES)?;
        match String::from_utf8(bytes) {
            Ok(text) => cosigs.push(SigFile { path, text }),
            Err(_) => notes.push(format!(
                "{}: is not UTF-8 text (not counted)",
                path.display()
            )),
        }
    }
    let mut roots = Vec::new();
    for l in &root_layers {
        let path = PathBuf::from(format!("{reference}#.airlock/{}", l.path));
        let bytes = fetch(registry, l, MAX_ROOT_BYTES)?;
        match update::parse_carried(PathBuf::from(&l.path), bytes) {
            Ok((_, f, r)) => roots.push((path, f, r)),
            Err(e) if policy.root.is_none() => notes.push(format!("{e} (not used)")),
            Err(e) => return Err(e),
        }
    }
    Ok((cosigs, notes, roots))
}
