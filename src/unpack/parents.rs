//! The missing parents of `unpack --dest`: `unpack … --dest /models/llama-3-8b` on a fresh
//! target, where `/models` does not exist yet, creates it rather than sending the operator off
//! to make it.
//!
//! Each missing directory is created private (mode 0700, set explicitly whatever the umask,
//! like the staging directory beside it), one component at a time relative to the handle of
//! the directory above it, and opened without following a link, so nothing is created through
//! a link planted on the way. The operator is told which directories were made (and can open
//! them up for other users). They are made only after every check that needs no content
//! passed, and removed again (only while still empty) when the install does not complete: a
//! failed unpack leaves the filesystem as it found it.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsio;

/// The mode of a directory `unpack` creates above the destination.
pub const PARENT_MODE: u32 = 0o700;

/// The part of a destination's parent that does not exist yet.
#[derive(Debug)]
pub struct Missing {
    /// The nearest ancestor that exists (a directory).
    pub existing: PathBuf,
    /// The names to create below it, outermost first.
    names: Vec<String>,
}

impl Missing {
    /// Looks at `parent` (the destination's parent directory): `Ok(None)` when it exists.
    /// An ancestor that exists but is not a directory, or a missing component that is not a
    /// plain name (`..`, not UTF-8), is a usage error naming it.
    pub fn find(parent: &Path) -> Result<Option<Missing>> {
        let mut names = Vec::new();
        let mut p = parent.to_path_buf();
        loop {
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => break,
                Ok(_) => {
                    return Err(Error::Usage(format!("{} is not a directory", p.display())));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, e)),
            }
            // A dangling link where a directory should be is not created through.
            if std::fs::symlink_metadata(&p).is_ok() {
                return Err(Error::Usage(format!(
                    "{} is a link to nothing: remove it or give --dest a real path",
                    p.display()
                )));
            }
            let name = match (p.file_name().and_then(|n| n.to_str()), p.parent()) {
                (Some(n), Some(_)) if n != ".." => n.to_string(),
                _ => {
                    return Err(Error::Usage(format!(
                        "{}: cannot create this directory for --dest",
                        p.display()
                    )));
                }
            };
            names.push(name);
            p = fsio::parent_dir(&p);
        }
        if names.is_empty() {
            return Ok(None);
        }
        names.reverse();
        Ok(Some(Missing { existing: p, names }))
    }

    /// Creates the missing directories (module documentation). What was made is removed again
    /// when the returned guard is dropped without [`Made::keep`].
    pub fn create(&self) -> Result<Made> {
        let mut made = Made {
            created: Vec::new(),
            keep: false,
            _registered: Vec::new(),
        };
        let mut dir: OwnedFd = fsio::open_dir_path(&self.existing, fsio::Follow::Final)
            .map_err(|e| Error::io(&self.existing, e.into()))?;
        let mut path = self.existing.clone();
        for name in &self.names {
            let fd = crate::durable::mkdir_at(&dir, &path, name, PARENT_MODE)?;
            crate::durable::sync_dir_fd(&dir, &path)?;
            // Below the working directory, `no/such` rather than `./no/such`.
            path = if path == Path::new(".") {
                PathBuf::from(name)
            } else {
                path.join(name)
            };
            made.created.push(path.clone());
            made._registered
                .push(crate::staging::register_created(path.clone()));
            dir = fd;
        }
        Ok(made)
    }
}

/// Directories created above a destination; removed on drop (innermost first, each only while
/// empty) unless kept.
#[derive(Debug)]
pub struct Made {
    created: Vec<PathBuf>,
    keep: bool,
    /// Each created directory registered for the signal handler, which removes those that
    /// are still empty ([`crate::staging::interrupt`]).
    _registered: Vec<crate::staging::CreatedDir>,
}

impl Made {
    /// The install completed: the directories stay. Returns them, outermost first.
    pub fn keep(mut self) -> Vec<PathBuf> {
        self.keep = true;
        std::mem::take(&mut self.created)
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // `remove_dir` removes only an empty directory, and never follows a link.
        for p in self.created.iter().rev() {
            if std::fs::remove_dir(p).is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_the_missing_parents_private_and_removes_them_unless_kept() {
        let t = tempfile::tempdir().unwrap();
        let parent = t.path().join("a/b/c");
        let missing = Missing::find(&parent).unwrap().unwrap();
        assert_eq!(missing.existing, t.path());
        let made = missing.create().unwrap();
        for p in ["a", "a/b", "a/b/c"] {
            let mode = std::fs::metadata(t.path().join(p))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, PARENT_MODE, "{p}");
        }
        drop(made);
        assert!(!t.path().join("a").exists());
        let kept = Missing::find(&parent)
            .unwrap()
            .unwrap()
            .create()
            .unwrap()
            .keep();
        assert_eq!(
            kept,
            vec![
                t.path().join("a"),
                t.path().join("a/b"),
                t.path().join("a/b/c")
            ]
        );
        assert!(parent.is_dir());
        assert!(Missing::find(&parent).unwrap().is_none());
    }

    #[test]
    fn a_file_or_a_dangling_link_on_the_way_is_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"").unwrap();
        assert!(Missing::find(&t.path().join("f/x")).is_err());
        std::os::unix::fs::symlink(t.path().join("nowhere"), t.path().join("l")).unwrap();
        let e = Missing::find(&t.path().join("l/x")).unwrap_err();
        assert!(e.to_string().contains("link to nothing"), "{e}");
        assert!(!t.path().join("nowhere").exists());
    }
}
