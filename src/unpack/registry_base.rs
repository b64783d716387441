//! A registry repository as the base of a delta: what `push` of a delta bundle applies its
//! patches onto (docs/FORMAT.md section 16).
//!
//! The artifact a push publishes is always the complete new version (one layer per file), so
//! each file of a delta reaches the registry from one of three places: carried files out of
//! the stream; `copy` files are the base file's content, whose blob the repository already
//! holds (the base version was pushed there: never uploaded again); `xor` files are rebuilt by
//! the pipeline's delta stage ([`crate::delta::apply`]) from the base file's blob, fetched here
//! by the digest the base's airlock manifest gives. That manifest is itself fetched by the
//! digest the delta's signed manifest names (`base.manifest_sha256`), so the chain is held to
//! the signature.
//!
//! [`RegistryBase::open`] checks everything the push needs from the base before anything is
//! uploaded: a repository without the base fails with nothing pushed. Memory stays flat: each
//! base blob is streamed to an unlinked temporary file (the patch decoder reads the base at the
//! offsets the tensor alignment gives), one file at a time, in the system temporary directory
//! (`TMPDIR`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use crate::entries::Base;
use crate::error::{Error, RegistryNext, Result};
use crate::manifest::{self, FileEntry, Manifest};
use crate::oci::client::Registry;
use crate::oci::modelpack;

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
             nothing was pushed",
            m.name, m.version, base.version, r.registry, r.repository,
        ),
        next: RegistryNext::Do(format!(
            "push {} version {} to oci://{}/{} first (its full bundle: `airlock push BUNDLE oci://{}/{}:TAG`), then push this delta again; or push the full bundle of version {} instead",
            base.name, base.version, r.registry, r.repository, r.registry, r.repository, m.version
        )),
    }
}

fn artifact(registry: &Registry, reason: String) -> Error {
    Error::Artifact {
        reference: registry.reference.to_string(),
        reason,
    }
}

/// The base of a delta in a registry repository (module documentation).
pub struct RegistryBase<'r> {
    registry: &'r Registry,
    manifest: Manifest,
    /// What the delta is (name, version, base version), for messages.
    delta: Manifest,
}

impl<'r> RegistryBase<'r> {
    /// Checks that the repository holds what the delta `m` needs from its base, given the
    /// blobs it lacks (`missing`, `sha256:HEX`). Uploads nothing.
    pub fn open(
        m: &Manifest,
        registry: &'r Registry,
        missing: &HashSet<String>,
    ) -> Result<RegistryBase<'r>> {
        let base = m.base.as_ref().expect("a delta");
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
        let base_files: HashMap<&str, &FileEntry> =
            base_m.files.iter().map(|f| (f.path.as_str(), f)).collect();
        // Blobs this push makes itself: the carried and the patched files'.
        let made: HashSet<String> = m
            .files
            .iter()
            .filter(|f| {
                f.from
                    .as_ref()
                    .is_none_or(|from| from.op != manifest::OP_COPY)
            })
            .map(|f| digest(&f.sha256))
            .collect();
        let mut lacking = Vec::new();
        for f in &m.files {
            let Some(from) = &f.from else { continue };
            let d = digest(&f.sha256);
            if !missing.contains(&d) {
                continue;
            }
            if from.op == manifest::OP_COPY {
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
            match registry.blob_size(&digest(&b.sha256))? {
                Some(size) if size == b.size => {}
                _ => lacking.push(format!("{} (the base of {})", from.path, f.path)),
            }
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
        Ok(RegistryBase {
            registry,
            manifest: base_m,
            delta: m.clone(),
        })
    }
}

impl Base for RegistryBase<'_> {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Streams the base file's blob into an unlinked temporary file, checking its size and
    /// SHA-256 against the base manifest as it arrives.
    fn open(&mut self, b: &FileEntry) -> Result<File> {
        let registry = self.registry;
        let bdigest = digest(&b.sha256);
        let (reader, _skip) = registry.open_blob(&bdigest, 0)?;
        let mut file = temp_file()?;
        let tmp = std::env::temp_dir();
        let mut reader = reader.take(b.size + 1);
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = reader.read(&mut buf).map_err(|e| {
                registry.failed(format!(
                    "reading blob {bdigest} (the base of {}): {e}",
                    b.path
                ))
            })?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            file.write_all(&buf[..n]).map_err(|e| Error::io(&tmp, e))?;
            got += n as u64;
        }
        let sha = digest(&hex::encode(hash.finalize()));
        if got != b.size || sha != bdigest {
            return Err(self.rotten(
                b,
                format!(
                    "it holds {got} bytes with digest {sha}, the base's manifest says {} bytes",
                    b.size
                ),
            ));
        }
        Ok(file)
    }

    /// [`RegistryBase::open`] already checked the blob as it arrived.
    fn open_checked(&mut self, b: &FileEntry) -> Result<File> {
        self.open(b)
    }

    fn refuse(&self, reason: String) -> Error {
        no_base(&self.delta, self.registry, reason)
    }

    fn rotten(&self, b: &FileEntry, what: String) -> Error {
        artifact(
            self.registry,
            format!(
                "blob {} (the base of {}) is damaged: {what}",
                digest(&b.sha256),
                b.path
            ),
        )
    }
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
    let name = path.file_name().expect("a name was given");
    let dir_fd = crate::fsio::open_dir_path(&dir, crate::fsio::Follow::Final)
        .map_err(|e| Error::io(&dir, e.into()))?;
    let file = crate::fsio::create_at(&dir_fd, &name.to_string_lossy(), 0o600, true)
        .map_err(|e| Error::io(&path, e.into()))?;
    rustix::fs::unlinkat(&dir_fd, name, rustix::fs::AtFlags::empty())
        .map_err(|e| Error::io(&path, e.into()))?;
    Ok(file)
}
