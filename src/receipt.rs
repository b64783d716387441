//! Re-verifying an installed model against the receipt `unpack` left in `DIR/.airlock/`.
//!
//! Bit rot and drift show up here: every file in the receipt is re-hashed (in parallel) or, with
//! `sizes_only`, just sized; files that are missing, modified or not in the receipt are each
//! named.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::paths::{self, RECEIPT_DIR};
use crate::progress::Progress;

/// One difference between the tree and its receipt.
#[derive(Clone, Debug, serde::Serialize, PartialEq, Eq)]
pub struct Drift {
    /// Relative path.
    pub path: String,
    /// `missing`, `modified`, `size`, `mode`, `extra`, `type` or `unreadable`.
    pub kind: &'static str,
    /// Details.
    pub detail: String,
}

fn hash_file(path: &Path, progress: &dyn Progress) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        progress.advance(n as u64);
    }
    Ok(hex::encode(h.finalize()))
}

/// Compares `dir` with `manifest`. Returns every difference, sorted by path.
pub fn compare(
    dir: &Path,
    manifest: &Manifest,
    sizes_only: bool,
    progress: &dyn Progress,
) -> Result<Vec<Drift>> {
    progress.start(
        if sizes_only { "sizes" } else { "hash" },
        if sizes_only {
            0
        } else {
            manifest.totals.file_bytes
        },
    );
    let mut drift: Vec<Drift> = manifest
        .files
        .par_iter()
        .filter_map(|f| {
            let full = dir.join(&f.path);
            let meta = match std::fs::symlink_metadata(&full) {
                Ok(m) => m,
                Err(_) => {
                    return Some(Drift {
                        path: f.path.clone(),
                        kind: "missing",
                        detail: "is missing".into(),
                    });
                }
            };
            if !meta.is_file() {
                return Some(Drift {
                    path: f.path.clone(),
                    kind: "type",
                    detail: "is no longer a regular file".into(),
                });
            }
            use std::os::unix::fs::PermissionsExt;
            let executable = meta.permissions().mode() & 0o111 != 0;
            if executable != f.executable {
                return Some(Drift {
                    path: f.path.clone(),
                    kind: "mode",
                    detail: format!(
                        "is {}executable, the receipt says it is {}",
                        if executable { "" } else { "not " },
                        if f.executable {
                            "executable"
                        } else {
                            "not executable"
                        }
                    ),
                });
            }
            if meta.len() != f.size {
                return Some(Drift {
                    path: f.path.clone(),
                    kind: "size",
                    detail: format!("is {} bytes, the receipt says {}", meta.len(), f.size),
                });
            }
            if sizes_only {
                return None;
            }
            progress.item(&f.path);
            match hash_file(&full, progress) {
                Ok(h) if h == f.sha256 => None,
                Ok(h) => Some(Drift {
                    path: f.path.clone(),
                    kind: "modified",
                    detail: format!(
                        "content changed (sha256 {h}, the receipt says {})",
                        f.sha256
                    ),
                }),
                Err(e) => Some(Drift {
                    path: f.path.clone(),
                    kind: "unreadable",
                    detail: format!("cannot be read: {e}"),
                }),
            }
        })
        .collect();
    for d in &manifest.directories {
        if !std::fs::symlink_metadata(dir.join(d)).is_ok_and(|m| m.is_dir()) {
            drift.push(Drift {
                path: d.clone(),
                kind: "missing",
                detail: "directory is missing".into(),
            });
        }
    }
    let known: std::collections::HashSet<&str> = manifest
        .files
        .iter()
        .map(|f| f.path.as_str())
        .chain(manifest.directories.iter().map(|d| d.as_str()))
        .collect();
    let walker = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == RECEIPT_DIR));
    for item in walker {
        let item = item.map_err(|e| {
            let p = e.path().unwrap_or(dir).to_path_buf();
            Error::io(
                p,
                e.into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("filesystem loop")),
            )
        })?;
        let rel = item
            .path()
            .strip_prefix(dir)
            .expect("under dir")
            .to_string_lossy()
            .into_owned();
        if !known.contains(rel.as_str()) {
            drift.push(Drift {
                path: rel,
                kind: "extra",
                detail: "is not in the receipt".into(),
            });
        }
    }
    drift.sort_by(|a, b| paths::bundle_order(&a.path, &b.path));
    progress.finish();
    Ok(drift)
}
