//! The missing parents of `unpack --dest`: `unpack … --dest /models/llama-3-8b` on a fresh
//! target, where `/models` does not exist yet, creates it rather than sending the operator off
//! to make it.
//!
//! Each missing directory gets the mode `--parent-mode` asks for, else the mode of the nearest
//! directory that exists without write for group and others (and without the set-id and
//! sticky bits): under `/` (0755), a fresh `/models` is 0755, so the service that serves the
//! model can reach it; under a private home (0700) it stays 0700. The mode is set explicitly,
//! whatever the umask (issue 33 item 5: parents made 0700, as the staging directory is, left a
//! fresh `/models` unreadable by the model server). Nobody but the owner can write them, so no
//! one else can rename the installed tree away. They are created one component at a time
//! relative to the handle of the directory above, and opened without following a link, so
//! nothing is created through a link planted on the way. The operator is told which
//! directories were made, with which mode and why. They are made only after every check that
//! needs no content passed, and removed again (only while still empty) when the install does
//! not complete: a failed unpack leaves the filesystem as it found it.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fsio;

/// The permission bits a created parent may take from its ancestor: no write for group and
/// others, no set-id or sticky bit.
const FROM_ANCESTOR: u32 = 0o755;

/// The mode of the directories `unpack` creates above the destination, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ParentMode {
    /// The permission bits.
    pub mode: u32,
    /// The existing ancestor whose mode it follows, or `None` when `--parent-mode` gave it.
    pub from: Option<PathBuf>,
}

/// Checks a `--parent-mode` value: permission bits only (at most 0777), with read, write and
/// search for the owner (airlock stages inside the directory it makes).
///
/// # Errors
///
/// What is wrong with it, for a usage error.
pub fn check_mode(mode: u32) -> std::result::Result<u32, ModeError> {
    if mode > 0o777 {
        return Err(ModeError::NotPermissionBits(mode));
    }
    if mode & 0o700 != 0o700 {
        return Err(ModeError::OwnerNeedsRwx(mode));
    }
    Ok(mode)
}

/// Why a `--parent-mode` value is refused ([`check_mode`]); the mode is shown in octal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// More than permission bits (a set-id or sticky bit).
    #[error("{0:04o}: permission bits only, at most 0777 (no set-id or sticky bit)")]
    NotPermissionBits(u32),
    /// The owner lacks read, write or search.
    #[error(
        "{0:04o}: the owner needs read, write and search (7 in the first digit): unpack stages the model inside the directory it makes"
    )]
    OwnerNeedsRwx(u32),
}

/// The part of a destination's parent that does not exist yet.
#[derive(Debug)]
pub struct Missing {
    /// The nearest ancestor that exists (a directory).
    pub existing: PathBuf,
    /// Its permission bits.
    existing_mode: u32,
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
        let existing_mode = loop {
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => {
                    break std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777;
                }
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
        };
        if names.is_empty() {
            return Ok(None);
        }
        names.reverse();
        Ok(Some(Missing {
            existing: p,
            existing_mode,
            names,
        }))
    }

    /// The mode the missing directories get: `asked` (`--parent-mode`, checked by
    /// [`check_mode`]), else the nearest existing ancestor's without write for group and
    /// others.
    pub fn mode(&self, asked: Option<u32>) -> ParentMode {
        match asked {
            Some(mode) => ParentMode { mode, from: None },
            None => ParentMode {
                mode: self.existing_mode & FROM_ANCESTOR,
                from: Some(self.existing.clone()),
            },
        }
    }

    /// Creates the missing directories with `mode` (module documentation). What was made is
    /// removed again when the returned guard is dropped without [`Made::keep`].
    pub fn create(&self, mode: ParentMode) -> Result<Made> {
        let mut made = Made {
            created: Vec::new(),
            handles: Vec::new(),
            mode: mode.clone(),
            keep: false,
            _registered: Vec::new(),
        };
        let mut dir: Arc<OwnedFd> = Arc::new(
            fsio::open_dir_path(&self.existing, fsio::Follow::Final)
                .map_err(|e| Error::io(&self.existing, e.into()))?,
        );
        let mut path = self.existing.clone();
        for name in &self.names {
            let fd = crate::durable::mkdir_at(&*dir, &path, name, mode.mode)?;
            crate::durable::sync_dir_fd(&*dir, &path)?;
            // Below the working directory, `no/such` rather than `./no/such`.
            path = if path == Path::new(".") {
                PathBuf::from(name)
            } else {
                path.join(name)
            };
            made.created.push(path.clone());
            made.handles.push((dir.clone(), name.clone()));
            made._registered.push(crate::staging::register_created(
                dir.clone(),
                name,
                path.clone(),
            ));
            dir = Arc::new(fd);
        }
        Ok(made)
    }
}

/// Directories created above a destination; removed on drop (innermost first, each only while
/// empty) unless kept.
#[derive(Debug)]
pub struct Made {
    created: Vec<PathBuf>,
    /// Each created directory as the handle of the directory it was made in and its name.
    handles: Vec<(Arc<OwnedFd>, String)>,
    mode: ParentMode,
    keep: bool,
    /// Each created directory registered for the signal handler, which removes those that
    /// are still empty ([`crate::staging::interrupt`]).
    _registered: Vec<crate::staging::CreatedDir>,
}

impl Made {
    /// The install completed: the directories stay. Returns them, outermost first, and their
    /// mode.
    pub fn keep(mut self) -> (Vec<PathBuf>, ParentMode) {
        self.keep = true;
        (std::mem::take(&mut self.created), self.mode.clone())
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // `rmdir` removes only an empty directory, and never follows a link.
        for (parent, name) in self.handles.iter().rev() {
            if rustix::fs::unlinkat(&**parent, name.as_str(), rustix::fs::AtFlags::REMOVEDIR)
                .is_err()
            {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_the_missing_parents_and_removes_them_unless_kept() {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
        let parent = t.path().join("a/b/c");
        let missing = Missing::find(&parent).unwrap().unwrap();
        assert_eq!(missing.existing, t.path());
        let mode = missing.mode(Some(0o711));
        assert_eq!(mode.from, None);
        let made = missing.create(mode).unwrap();
        for p in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode_of(&t.path().join(p)), 0o711, "{p}");
        }
        drop(made);
        assert!(!t.path().join("a").exists());
        let missing = Missing::find(&parent).unwrap().unwrap();
        let (kept, mode) = missing.create(missing.mode(None)).unwrap().keep();
        assert_eq!(
            kept,
            vec![
                t.path().join("a"),
                t.path().join("a/b"),
                t.path().join("a/b/c")
            ]
        );
        assert_eq!(
            mode,
            ParentMode {
                mode: 0o750,
                from: Some(t.path().to_path_buf())
            }
        );
        assert_eq!(mode_of(&parent), 0o750);
        assert!(parent.is_dir());
        assert!(Missing::find(&parent).unwrap().is_none());
    }

    /// Issue 33 item 5: below a directory anyone may write to (`/tmp`, 1777), the parents are
    /// 0755: no write for group and others, no sticky bit.
    #[test]
    fn the_ancestor_gives_its_mode_without_write_for_group_and_others() {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let missing = Missing::find(&t.path().join("models")).unwrap().unwrap();
        assert_eq!(missing.mode(None).mode, 0o755);
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let missing = Missing::find(&t.path().join("models")).unwrap().unwrap();
        assert_eq!(missing.mode(None).mode, 0o700);
    }

    #[test]
    fn a_parent_mode_needs_the_owner_rwx_and_no_special_bits() {
        assert_eq!(check_mode(0o755), Ok(0o755));
        assert_eq!(check_mode(0o700), Ok(0o700));
        assert_eq!(check_mode(0o555), Err(ModeError::OwnerNeedsRwx(0o555)));
        assert_eq!(
            check_mode(0o2755),
            Err(ModeError::NotPermissionBits(0o2755))
        );
        assert_eq!(
            ModeError::NotPermissionBits(0o2755).to_string(),
            "2755: permission bits only, at most 0777 (no set-id or sticky bit)"
        );
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
