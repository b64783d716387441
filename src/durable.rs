//! The durable steps every writer shares: a new file written with an explicit mode and
//! synced, a small file replaced or created atomically ([`Staged`], the one way airlock does it), directories created with an explicit mode and
//! synced. Files are created through [`crate::fsio`] (exclusive, never through a link); errors
//! name the path ([`Error::io`]).
//!
//! They live here, below both, so that installing never imports from the bundle writer (and
//! the writer never from an installer). The process umask is never trusted.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, RenameFlags};

use crate::error::{Error, Result};
use crate::fsio::{self, Follow, create_at, create_new, open_dir_at, rename_at};

/// Creates the new file `path` with exactly `mode`, writes `bytes` and syncs it.
pub fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let f = create_new(path, mode).map_err(|e| Error::io(path, e.into()))?;
    finish_write(f, path, bytes)
}

/// Creates `name` in the directory `dir` (shown as `dir_path` in errors) with exactly `mode`,
/// writes `bytes` and syncs it.
pub fn write_synced_at(
    dir: &impl AsFd,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    let path = dir_path.join(name);
    let f = create_at(dir, name, mode, false).map_err(|e| Error::io(&path, e.into()))?;
    finish_write(f, &path, bytes)
}

/// How a small file written by [`Staged`] takes its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Over whatever is at the name (a file, or a link, which is replaced and never followed;
    /// a directory there fails).
    Replace,
    /// Only if the name is free: a name taken meanwhile (a link included) is an
    /// `AlreadyExists` error and nothing there is touched.
    New,
}

/// A small file written whole under a temporary name in its directory (exclusive, never
/// through a link, with exactly its mode: the umask is never trusted) and synced, then moved
/// to its name in one step by [`Staged::publish`], which syncs the directory: a failure at
/// any point leaves the name as it was, never a half-written file. The temporary file is
/// removed on drop unless published. This is the one way airlock replaces a small file (a
/// layout's `index.json`, a cache ref's trace, a placement note, a trust root, keys,
/// signatures and co-signatures); a caller with a directory handle passes it, a caller with
/// only the operator's path uses [`Staged::write_path`].
pub struct Staged<D: AsFd> {
    dir: D,
    dir_path: PathBuf,
    name: OsString,
    tmp: Option<String>,
    /// Where the temporary file is when it is not `dir` ([`Staged::write_via`]).
    via: Option<D>,
}

impl<D: AsFd> Staged<D> {
    /// Writes `bytes` with exactly `mode` under a new temporary name in `dir` (shown as
    /// `dir_path` in errors) beside `name`, and syncs it. Nothing is touched at `name` yet.
    pub fn write(
        dir: D,
        dir_path: &Path,
        name: impl AsRef<OsStr>,
        bytes: &[u8],
        mode: u32,
    ) -> Result<Staged<D>> {
        let name = name.as_ref().to_os_string();
        let tmp = format!(
            ".{}.airlock-tmp-{}",
            name.to_string_lossy().replace('/', "_"),
            random_suffix()
        );
        write_synced_at(&dir, dir_path, &tmp, bytes, mode)?;
        Ok(Staged {
            dir,
            dir_path: dir_path.to_path_buf(),
            name,
            tmp: Some(tmp),
            via: None,
        })
    }

    /// [`Staged::write`], the temporary file written in `work` (a private directory of
    /// airlock's on the same filesystem, shown as `work_path`) rather than beside `name` in
    /// `dir`: where others can write `dir` (a shared cache's `refs/`), nobody can swap the
    /// temporary file before it is moved to its name.
    pub fn write_via(
        work: D,
        work_path: &Path,
        dir: D,
        dir_path: &Path,
        name: impl AsRef<OsStr>,
        bytes: &[u8],
        mode: u32,
    ) -> Result<Staged<D>> {
        let mut staged = Staged::write(work, work_path, name, bytes, mode)?;
        staged.via = Some(std::mem::replace(&mut staged.dir, dir));
        staged.dir_path = dir_path.to_path_buf();
        Ok(staged)
    }

    /// The directory holding the temporary file.
    fn tmp_dir(&self) -> &D {
        self.via.as_ref().unwrap_or(&self.dir)
    }

    /// The final path, for messages.
    fn dest(&self) -> PathBuf {
        self.dir_path.join(&self.name)
    }

    /// Moves the file to its name ([`Place`]) and syncs the directory.
    pub fn publish(mut self, how: Place) -> Result<()> {
        let tmp = self.tmp.take().expect("not yet published");
        let (placed, linked) = match how {
            Place::Replace => (
                rename_at(
                    self.tmp_dir(),
                    tmp.as_str(),
                    &self.dir,
                    &self.name,
                    RenameFlags::empty(),
                ),
                false,
            ),
            Place::New => match rename_at(
                self.tmp_dir(),
                tmp.as_str(),
                &self.dir,
                &self.name,
                RenameFlags::NOREPLACE,
            ) {
                // A filesystem without `RENAME_NOREPLACE`: a hard link fails as well when the
                // name is taken.
                Err(e) if e.errno() == Some(rustix::io::Errno::INVAL) => (
                    fsio::hard_link_at(self.tmp_dir(), &tmp, &self.dir, &self.name),
                    true,
                ),
                r => (r, false),
            },
        };
        if placed.is_err() || linked {
            let _ =
                rustix::fs::unlinkat(self.tmp_dir(), tmp.as_str(), rustix::fs::AtFlags::empty());
        }
        placed.map_err(|e| Error::io(self.dest(), e.into()))?;
        sync_dir_fd(&self.dir, &self.dir_path)
    }
}

impl Staged<OwnedFd> {
    /// [`Staged::write`] beside the operator's `path`: its directory is opened once (a link
    /// in the path followed, as the shell would) and everything happens below that handle.
    pub fn write_path(path: &Path, bytes: &[u8], mode: u32) -> Result<Staged<OwnedFd>> {
        let name = path
            .file_name()
            .ok_or_else(|| Error::io(path, NoFileName.into()))?;
        let dir_path = fsio::parent_dir(path);
        let dir = open_dir_following(&dir_path)?;
        Staged::write(dir, &dir_path, name, bytes, mode)
    }
}

/// A path that ends in no file name (`/`, `..`), given where a file is to be written (typed
/// inside the `io::Error` of the error naming the path, kind `InvalidInput`).
#[derive(Debug, thiserror::Error)]
#[error("does not name a file")]
struct NoFileName;

impl From<NoFileName> for std::io::Error {
    fn from(e: NoFileName) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

impl<D: AsFd> Drop for Staged<D> {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ =
                rustix::fs::unlinkat(self.tmp_dir(), tmp.as_str(), rustix::fs::AtFlags::empty());
        }
    }
}

/// Replaces (or creates) `name` in the directory `dir` with `bytes` at exactly `mode`,
/// atomically ([`Staged`], [`Place::Replace`]). A link at `name` is replaced, never followed.
pub fn replace_at(
    dir: &impl AsFd,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    Staged::write(dir.as_fd(), dir_path, name, bytes, mode)?.publish(Place::Replace)
}

/// Creates `name` in the directory `dir` with `bytes` at exactly `mode`, atomically and only
/// if the name is free ([`Staged`], [`Place::New`]).
pub fn write_new_at(
    dir: &impl AsFd,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    Staged::write(dir.as_fd(), dir_path, name, bytes, mode)?.publish(Place::New)
}

/// Creates the new file `name` in the directory `dir` (shown as `dir_path` in errors) for
/// writing, with exactly `mode`: exclusive (a name already taken, a link included, is an
/// `AlreadyExists` error) and never through a link.
pub fn create_new_at(dir: &impl AsFd, dir_path: &Path, name: &str, mode: u32) -> Result<File> {
    create_at(dir, name, mode, false).map_err(|e| Error::io(dir_path.join(name), e.into()))
}

/// Opens the directory `path` without following a final symlink.
pub fn open_dir(path: &Path) -> Result<OwnedFd> {
    fsio::open_dir_path(path, Follow::Never).map_err(|e| Error::io(path, e.into()))
}

/// Creates the directory `name` inside `dir` with exactly `mode` and returns its handle.
pub fn mkdir_at(dir: &impl AsFd, dir_path: &Path, name: &str, mode: u32) -> Result<OwnedFd> {
    let path = dir_path.join(name);
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))
        .map_err(|e| Error::io(&path, e.into()))?;
    let fd = open_dir_at(dir, name).map_err(|e| Error::io(&path, e.into()))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| Error::io(&path, e.into()))?;
    Ok(fd)
}

/// Opens the directory `path` the operator named, links followed as the shell would.
pub fn open_dir_following(path: &Path) -> Result<OwnedFd> {
    fsio::open_dir_path(path, Follow::Final).map_err(|e| Error::io(path, e.into()))
}

/// Syncs an open directory (its entries become durable).
pub fn sync_dir_fd(fd: &impl AsFd, path: &Path) -> Result<()> {
    rustix::fs::fsync(fd).map_err(|e| Error::io(path, e.into()))
}

/// Syncs the directory at `path`.
pub fn sync_dir(path: &Path) -> Result<()> {
    sync_dir_fd(&open_dir(path)?, path)
}

/// 64 random bits in hex, for temporary names.
fn random_suffix() -> String {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the system's random source works");
    hex::encode(b)
}

fn finish_write(mut f: File, path: &Path, bytes: &[u8]) -> Result<()> {
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    f.sync_all().map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("airlock-tmp"))
            .collect()
    }

    #[test]
    fn a_small_file_is_replaced_whole_with_its_own_mode_and_a_link_is_replaced_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let fd = open_dir(d).unwrap();
        // 0666 survives any umask but 0: the mode is set, not asked for.
        replace_at(&fd, d, "f", b"one", 0o666).unwrap();
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"one");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&d.join("f")), 0o666);
        replace_at(&fd, d, "f", b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"two");
        assert_eq!(mode(&d.join("f")), 0o600);
        // A link at the name is replaced; its target is untouched.
        std::fs::write(d.join("target"), b"keep").unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("l")).unwrap();
        replace_at(&fd, d, "l", b"new", 0o644).unwrap();
        assert_eq!(std::fs::read(d.join("target")).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(d.join("l")).unwrap().is_symlink());
        // A directory in the way: an error naming it, nothing left behind.
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/x"), b"x").unwrap();
        let e = replace_at(&fd, d, "sub", b"no", 0o644).unwrap_err();
        assert!(e.to_string().contains("sub"), "{e}");
        assert!(leftovers(d).is_empty(), "{:?}", leftovers(d));
    }

    #[test]
    fn a_new_file_never_takes_a_name_already_taken_and_a_dropped_one_leaves_nothing() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let fd = open_dir(d).unwrap();
        write_new_at(&fd, d, "sig", b"a", 0o644).unwrap();
        let e = write_new_at(&fd, d, "sig", b"b", 0o644).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
            "{e}"
        );
        assert_eq!(std::fs::read(d.join("sig")).unwrap(), b"a");
        // A dangling link is a taken name too, and is not followed.
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        assert!(write_new_at(&fd, d, "dangling", b"b", 0o644).is_err());
        assert!(!d.join("nowhere").exists());
        // Written, then dropped unpublished (a second file failed): nothing at the name, no
        // temporary file.
        let staged = Staged::write_path(&d.join("key"), b"secret", 0o600).unwrap();
        assert_eq!(leftovers(d).len(), 1);
        drop(staged);
        assert!(!d.join("key").exists());
        assert!(leftovers(d).is_empty(), "{:?}", leftovers(d));
        // Through a private work directory: the temporary file never appears beside the name.
        let work = tempfile::tempdir_in(d).unwrap();
        let work_fd = open_dir(work.path()).unwrap();
        let staged = Staged::write_via(
            work_fd.as_fd(),
            work.path(),
            fd.as_fd(),
            d,
            "ref",
            b"c",
            0o644,
        )
        .unwrap();
        assert!(leftovers(d).is_empty());
        assert_eq!(leftovers(work.path()).len(), 1);
        staged.publish(Place::Replace).unwrap();
        assert_eq!(std::fs::read(d.join("ref")).unwrap(), b"c");
        assert!(leftovers(work.path()).is_empty());
    }
}
