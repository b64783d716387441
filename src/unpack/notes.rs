//! What every install reports besides its result (stale work directories cleaned, model-check
//! findings on the staged files, volumes rebuilt from parity), and the free-space arithmetic
//! every target shares.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::inspect::Finding;
use crate::manifest::Manifest;
use crate::staging;

/// What every install reports besides its result.
#[derive(Debug, Default, serde::Serialize)]
pub struct InstallNotes {
    /// Stale staging directories removed first.
    pub cleaned_stale: Vec<PathBuf>,
    /// Staging directories that look abandoned but could not be removed, and why.
    pub stale_skipped: Vec<(PathBuf, String)>,
    /// Model-check findings on the installed files (reported, not fatal: the bundle is signed
    /// and `pack` already refused errors unless told otherwise).
    pub findings: Vec<Finding>,
    /// Files the model checks could not reach (a path too long for path-based reads); their
    /// bytes were verified against the manifest all the same.
    pub unchecked: Vec<String>,
    /// Data volumes that were damaged and rebuilt from parity as they were read (FORMAT.md
    /// section 17); the installed bytes match the signed digests all the same.
    pub repaired_volumes: Vec<String>,
    /// Missing parents of the destination created for it, outermost first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub created_parents: Vec<PathBuf>,
    /// Their mode, and where it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_parents_mode: Option<super::parents::ParentMode>,
    /// What an interrupted install of the same bundle had staged and this one kept, proven.
    pub resumed: Option<super::resume::Resumed>,
    /// Bytes read from the bundle's volumes by this run.
    pub volume_bytes_read: u64,
}

impl InstallNotes {
    /// The notes of an install that cleaned up `cleanup` and checked the staged files under
    /// `root` (at `prefix` + each manifest path).
    pub fn new(cleanup: staging::Cleanup, root: &Path, prefix: &str, m: &Manifest) -> Result<Self> {
        let (findings, unchecked) = check_staged(root, prefix, m)?;
        Ok(InstallNotes {
            cleaned_stale: cleanup.removed,
            stale_skipped: cleanup.skipped,
            findings,
            unchecked,
            repaired_volumes: Vec::new(),
            created_parents: Vec::new(),
            created_parents_mode: None,
            resumed: None,
            volume_bytes_read: crate::fsio::volume_bytes_read(),
        })
    }
}

/// The model-format checks on the staged files under `root` (each at `PREFIX` + its manifest
/// path): exactly the bytes about to become visible. Returns the findings (paths without the
/// prefix) and the files too deep for the path-based checks to open.
///
/// Each file is opened once, below the handle of its directory (held while the files of that
/// directory follow one another, as the manifest lists them), and checked on its handle; what
/// needs other files of the tree (a shard index, a config) and the links of a Hugging Face
/// snapshot are checked by path at the end. One path-based check a file resolved the root and
/// every component of the file's path again: 11% of an unpack of 100,000 small files.
fn check_staged(root: &Path, prefix: &str, m: &Manifest) -> Result<(Vec<Finding>, Vec<String>)> {
    let mut checks = crate::inspect::TreeChecks::default();
    // The staged tree's root, as named; every component below it without following a link.
    let root_fd = crate::fsio::open_dir_following(root);
    let mut opener = root_fd.as_ref().ok().map(crate::fsio::BelowOpener::new);
    for f in &m.files {
        let rel = format!("{prefix}{}", f.path);
        let path = root.join(&rel);
        let opened = match opener.as_mut() {
            Some(o) => o.open_stat(&rel).ok(),
            None => None,
        };
        match opened {
            Some((file, st)) => checks.opened(&rel, &path, &file, st.st_size as u64),
            // A link (a Hugging Face snapshot's files link to its blobs) is resolved and its
            // target checked by path at the end, as the path-based walk does.
            None => {
                let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
                checks.by_path(&rel, !link)
            }
        }
    }
    let (findings, unchecked) = checks.finish(root).map_err(|e| Error::io(root, e))?;
    let strip = |p: String| match p.strip_prefix(prefix) {
        Some(rest) => rest.to_string(),
        None => p,
    };
    let findings = findings
        .into_iter()
        .map(|mut finding| {
            finding.path = strip(std::mem::take(&mut finding.path));
            finding
        })
        .collect();
    Ok((findings, unchecked.into_iter().map(strip).collect()))
}

/// Bytes to reserve for a manifest's files on disk: contents plus a block per entry.
pub fn space_needed(m: &Manifest, receipt_bytes: u64) -> u64 {
    let entries = m
        .totals
        .files
        .saturating_add(m.totals.directories)
        .saturating_add(4);
    m.totals
        .file_bytes
        .saturating_add(entries.saturating_mul(4096))
        .saturating_add(receipt_bytes)
}

/// Bytes available to an unprivileged writer on the filesystem holding `dir`.
pub(crate) fn space_available(dir: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(dir).map_err(|e| Error::io(dir, e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Refuses to start when the filesystem holding `dir` has less than `needed` bytes free.
pub fn check_space(dir: &Path, needed: u64) -> Result<()> {
    let available = space_available(dir)?;
    if needed > available {
        return Err(Error::NoSpace {
            path: dir.to_path_buf(),
            needed,
            available,
            filesystem: crate::fsinfo::mount_of(dir),
        });
    }
    Ok(())
}
