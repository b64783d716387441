//! Walks a model directory into the sorted list of entries a bundle will hold.
//!
//! Only regular files and directories are packed. A symlink to a regular file inside
//! `link_root` is stored as the file it points to (that is how a Hugging Face snapshot holds its
//! files); everything else that is not a plain file or directory is refused with its path, as is
//! any name that [`paths::check_relative`] would refuse on the other side.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::paths::{self, CollisionSet, RECEIPT_DIR};

/// One entry to pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEntry {
    /// A directory at this relative path.
    Dir {
        /// Relative path.
        path: String,
    },
    /// A regular file.
    File {
        /// Relative path in the bundle.
        path: String,
        /// Where to read it (the link target for symlinks).
        source: PathBuf,
        /// Size seen when scanning.
        size: u64,
        /// Whether any executable bit is set.
        executable: bool,
    },
}

impl ScanEntry {
    /// The entry's relative path.
    pub fn path(&self) -> &str {
        match self {
            ScanEntry::Dir { path } | ScanEntry::File { path, .. } => path,
        }
    }
}

fn refuse(path: &Path, reason: impl Into<String>) -> Error {
    Error::Source {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks the name of `full` (under `root`) the way a bundle needs it: UTF-8, a safe relative
/// path ([`paths::check_relative`]) and no case or normalisation collision with an earlier name.
/// Returns the `/`-separated relative path.
pub fn check_name(root: &Path, full: &Path, collisions: &mut CollisionSet) -> Result<String> {
    let rel = full.strip_prefix(root).unwrap_or(full);
    let Some(rel) = rel.to_str() else {
        return Err(refuse(
            full,
            "has a name that is not valid UTF-8; rename it before packing",
        ));
    };
    if let Err(why) = paths::check_relative(rel) {
        return Err(refuse(
            full,
            format!("cannot be carried in a bundle: its name {why}"),
        ));
    }
    if let Some(earlier) = collisions.insert(rel) {
        return Err(refuse(
            full,
            format!(
                "has the same name as {earlier:?} on case-insensitive or normalising filesystems; rename one of them"
            ),
        ));
    }
    Ok(rel.to_string())
}

/// Scans `root`. Symlinks must resolve to regular files under `link_root` (usually `root`
/// itself; the repository folder for a Hugging Face snapshot). A top-level `.airlock` receipt
/// directory is skipped, so an installed model can be packed again.
pub fn scan(root: &Path, link_root: &Path) -> Result<Vec<ScanEntry>> {
    let meta = std::fs::metadata(root).map_err(|e| Error::io(root, e))?;
    if !meta.is_dir() {
        return Err(refuse(root, "is not a directory"));
    }
    let link_root = std::fs::canonicalize(link_root).map_err(|e| Error::io(link_root, e))?;
    let mut out = Vec::new();
    let mut collisions = CollisionSet::default();
    let walker = walkdir::WalkDir::new(root)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == RECEIPT_DIR));
    for item in walker {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(root).to_path_buf();
            let source = e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("filesystem loop"));
            Error::io(path, source)
        })?;
        let full = item.path();
        let rel = check_name(root, full, &mut collisions)?;
        let rel = rel.as_str();
        let ft = item.file_type();
        if ft.is_dir() {
            out.push(ScanEntry::Dir {
                path: rel.to_string(),
            });
        } else if ft.is_file() {
            let m = item.metadata().map_err(|e| Error::io(full, e.into()))?;
            out.push(ScanEntry::File {
                path: rel.to_string(),
                source: full.to_path_buf(),
                size: m.len(),
                executable: m.permissions().mode() & 0o111 != 0,
            });
        } else if ft.is_symlink() {
            let target = std::fs::canonicalize(full)
                .map_err(|_| refuse(full, "is a dangling symlink: its target does not exist"))?;
            if !target.starts_with(&link_root) {
                return Err(refuse(
                    full,
                    format!(
                        "is a symlink to {}, outside {}",
                        target.display(),
                        link_root.display()
                    ),
                ));
            }
            let m = std::fs::metadata(&target).map_err(|e| Error::io(&target, e))?;
            if !m.is_file() {
                return Err(refuse(
                    full,
                    "is a symlink to something other than a regular file (only file links are followed)",
                ));
            }
            out.push(ScanEntry::File {
                path: rel.to_string(),
                source: target,
                size: m.len(),
                executable: m.permissions().mode() & 0o111 != 0,
            });
        } else {
            return Err(refuse(
                full,
                "is a device, socket or FIFO; a bundle carries regular files and directories only",
            ));
        }
    }
    out.sort_by(|a, b| paths::bundle_order(a.path(), b.path()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn scans_in_bundle_order_and_follows_file_links() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        std::fs::write(r.join("a/b/w.bin"), b"1234").unwrap();
        std::fs::write(r.join("a.txt"), b"x").unwrap();
        std::fs::create_dir(r.join(".airlock")).unwrap();
        std::fs::write(r.join(".airlock/manifest.json"), b"{}").unwrap();
        symlink("a/b/w.bin", r.join("link.bin")).unwrap();
        let got = scan(r, r).unwrap();
        let names: Vec<_> = got.iter().map(|e| e.path()).collect();
        assert_eq!(names, ["a", "a/b", "a/b/w.bin", "a.txt", "link.bin"]);
        match &got[4] {
            ScanEntry::File { size, source, .. } => {
                assert_eq!(*size, 4);
                assert!(source.ends_with("a/b/w.bin"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_dangling_and_escaping_links_and_fifos() {
        let t = tempfile::tempdir().unwrap();
        let inner = t.path().join("m");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(t.path().join("outside"), b"x").unwrap();
        symlink("../outside", inner.join("esc")).unwrap();
        let err = scan(&inner, &inner).unwrap_err().to_string();
        assert!(err.contains("esc") && err.contains("outside"), "{err}");
        std::fs::remove_file(inner.join("esc")).unwrap();
        symlink("nowhere", inner.join("dangling")).unwrap();
        let err = scan(&inner, &inner).unwrap_err().to_string();
        assert!(err.contains("dangling"), "{err}");
        std::fs::remove_file(inner.join("dangling")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            inner.join("fifo"),
            rustix::fs::FileType::Fifo,
            0o644.into(),
            0,
        )
        .unwrap();
        let err = scan(&inner, &inner).unwrap_err().to_string();
        assert!(err.contains("FIFO") && err.contains("fifo"), "{err}");
    }

    #[test]
    fn refuses_case_collisions() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("Model.bin"), b"x").unwrap();
        std::fs::write(t.path().join("model.bin"), b"y").unwrap();
        let err = scan(t.path(), t.path()).unwrap_err().to_string();
        assert!(err.contains("case-insensitive"), "{err}");
    }
}
