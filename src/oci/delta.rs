//! Pushing a delta bundle (docs/FORMAT.md section 16) over its base, already in the repository.
//!
//! A delta's stream carries the changed files whole and a patch for each `xor` file; `copy`
//! files are not in it at all. The artifact a push publishes is still the complete new version
//! (one layer per file), so each file's blob comes from one of three places:
//!
//! - carried: out of the stream, as for a full bundle;
//! - `copy`: it is the base file's content, so its blob must already be in the repository (the
//!   base version was pushed there): checked with `HEAD`, never uploaded;
//! - `xor`: the base file's blob is fetched from the repository (by the digest the base's
//!   airlock manifest gives; that manifest is itself fetched by the digest the delta's signed
//!   manifest names, `base.manifest_sha256`, so the chain is held to the signature), the patch
//!   is decoded against it as the stream passes, and the rebuilt bytes are uploaded as the new
//!   file's blob. Its size and SHA-256 are checked against the signed manifest before the
//!   upload's last piece is sent, and the registry checks the digest too.
//!
//! Everything the push needs from the base is checked by [`plan`] before anything is uploaded:
//! a repository without the base fails with nothing pushed.
//!
//! Memory stays flat: the base blob of each patched file is streamed to an unlinked temporary
//! file (the patch decoder reads the base at the offsets the tensor alignment gives), one file at
//! a time, in the system temporary directory (`TMPDIR`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::client::Registry;
use super::modelpack;
use crate::delta::patch::Map;
use crate::error::{Error, Result};
use crate::manifest::{self, Manifest};

/// How one `xor` file's blob is rebuilt.
pub(super) struct Rebuild {
    /// `sha256:HEX` of the base file's blob.
    pub base_digest: String,
    /// Bytes of the base file.
    pub base_size: u64,
    /// The patch's alignment.
    pub map: Map,
}

/// What a delta push takes from the base already in the repository.
pub(super) struct Plan {
    /// By index of the target file in the delta's `files`: the `xor` files whose blob the
    /// repository lacks.
    pub rebuild: HashMap<usize, Rebuild>,
}

fn digest(sha256: &str) -> String {
    format!("sha256:{sha256}")
}

/// The error for a repository that does not hold the delta's base.
fn no_base(m: &Manifest, registry: &Registry, what: String) -> Error {
    let base = m.base.as_ref().expect("a delta");
    let r = &registry.reference;
    Error::Registry {
        registry: r.registry.clone(),
        reason: format!(
            "{} version {} is a delta over version {}, which oci://{}/{} does not hold ({what}); \
             nothing was pushed: push {} version {} to oci://{}/{} first, or push the full bundle",
            m.name,
            m.version,
            base.version,
            r.registry,
            r.repository,
            base.name,
            base.version,
            r.registry,
            r.repository
        ),
    }
}

fn artifact(registry: &Registry, reason: String) -> Error {
    Error::Artifact {
        reference: registry.reference.to_string(),
        reason,
    }
}

/// Checks that the repository holds what the delta `m` needs from its base, given the blobs
/// it lacks (`missing`), and says how to rebuild each patched file it lacks. Uploads nothing.
pub(super) fn plan(m: &Manifest, registry: &Registry, missing: &HashSet<String>) -> Result<Plan> {
    let base = m.base.as_ref().expect("a delta");
    // Blobs this push makes itself: the carried files' and the patched files'.
    let made: HashSet<String> = m
        .files
        .iter()
        .filter(|f| f.from.as_ref().is_none_or(|from| from.op != "copy"))
        .map(|f| digest(&f.sha256))
        .collect();
    let needed = m
        .files
        .iter()
        .any(|f| f.from.is_some() && missing.contains(&digest(&f.sha256)));
    let mut plan = Plan {
        rebuild: HashMap::new(),
    };
    if !needed {
        return Ok(plan);
    }
    // The base's airlock manifest, by the digest the signed delta manifest names.
    let mdigest = digest(&base.manifest_sha256);
    let Some(bytes) = registry.blob_bytes(&mdigest, manifest::MAX_MANIFEST_BYTES)? else {
        return Err(no_base(
            m,
            registry,
            format!("no blob {mdigest}, the base's airlock manifest"),
        ));
    };
    if modelpack::digest_of(&bytes) != mdigest {
        return Err(artifact(
            registry,
            format!("blob {mdigest} (the base's airlock manifest) does not hash to its digest"),
        ));
    }
    let base_m = Manifest::parse(&bytes).map_err(|e| {
        artifact(
            registry,
            format!("the base's airlock manifest {mdigest} cannot be read: {e}"),
        )
    })?;
    if base_m.name != base.name || base_m.version != base.version {
        return Err(artifact(
            registry,
            format!(
                "blob {mdigest} is the manifest of {} version {}, the delta names {} version {}",
                base_m.name, base_m.version, base.name, base.version
            ),
        ));
    }
    let base_files: HashMap<&str, &manifest::FileEntry> =
        base_m.files.iter().map(|f| (f.path.as_str(), f)).collect();

    let mut lacking = Vec::new();
    for (index, f) in m.files.iter().enumerate() {
        let Some(from) = &f.from else { continue };
        let d = digest(&f.sha256);
        if !missing.contains(&d) {
            continue;
        }
        if from.op == "copy" {
            if !made.contains(&d) {
                lacking.push(format!("{} (copied from the base's {})", f.path, from.path));
            }
            continue;
        }
        let Some(b) = base_files.get(from.path.as_str()) else {
            return Err(artifact(
                registry,
                format!(
                    "{}: the base's manifest {mdigest} has no {}, which the delta patches",
                    f.path, from.path
                ),
            ));
        };
        let base_digest = digest(&b.sha256);
        match registry.blob_size(&base_digest)? {
            Some(size) if size == b.size => {}
            _ => {
                lacking.push(format!("{} (the base of {})", from.path, f.path));
                continue;
            }
        }
        let map = match from.map.as_deref() {
            Some("safetensors") => Map::Safetensors,
            _ => Map::Bytes,
        };
        plan.rebuild.insert(
            index,
            Rebuild {
                base_digest,
                base_size: b.size,
                map,
            },
        );
    }
    if !lacking.is_empty() {
        let n = lacking.len();
        let shown: Vec<_> = lacking.into_iter().take(3).collect();
        let more = if n > 3 {
            format!(" and {} more", n - 3)
        } else {
            String::new()
        };
        return Err(no_base(
            m,
            registry,
            format!("it lacks the blob of {}{more}", shown.join(", ")),
        ));
    }
    Ok(plan)
}

/// Creates an unlinked temporary file in the system temporary directory.
fn temp_file() -> Result<File> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    let path: PathBuf = dir.join(format!(
        ".airlock-push-base-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = crate::fsio::create_temp(&path).map_err(|e| Error::io(&path, e))?;
    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
    Ok(file)
}

/// Streams the base blob of patched file `path` into an unlinked temporary file, checking its
/// size and SHA-256 against the base manifest, and returns the file.
pub(super) fn fetch_base(registry: &Registry, r: &Rebuild, path: &str) -> Result<File> {
    let (reader, _skip) = registry.open_blob(&r.base_digest, 0)?;
    let mut file = temp_file()?;
    let tmp = std::env::temp_dir();
    let mut reader = reader.take(r.base_size + 1);
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        let n = reader.read(&mut buf).map_err(|e| Error::Registry {
            registry: registry.reference.registry.clone(),
            reason: format!("reading blob {} (the base of {path}): {e}", r.base_digest),
        })?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        file.write_all(&buf[..n]).map_err(|e| Error::io(&tmp, e))?;
        got += n as u64;
    }
    let sha = digest(&hex::encode(hash.finalize()));
    if got != r.base_size || sha != r.base_digest {
        return Err(artifact(
            registry,
            format!(
                "blob {} (the base of {path}) holds {got} bytes with digest {sha}, the base's manifest says {} bytes",
                r.base_digest, r.base_size
            ),
        ));
    }
    Ok(file)
}
