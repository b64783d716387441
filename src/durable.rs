//! The durable steps every writer shares: a new file written with an explicit mode and
//! synced, a small file replaced atomically, directories created with an explicit mode and
//! synced. Files are created through [`crate::fsio`] (exclusive, never through a link); errors
//! name the path ([`Error::io`]).
//!
//! They live here, below both, so that installing never imports from the bundle writer (and
//! the writer never from an installer). The process umask is never trusted.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, RenameFlags};

use crate::error::{Error, Result};
use crate::fsio::{self, Follow, create_at, create_new, open_dir_at, rename_at};

/// Creates the new file `path` with exactly `mode`, writes `bytes` and syncs it.
pub fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let f = create_new(path, mode).map_err(|e| Error::io(path, e))?;
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

/// Replaces (or creates) `name` in the directory `dir` with `bytes` at exactly `mode`, atomically:
/// written to a new temporary name in `dir` (exclusive, never through a link), synced, renamed
/// over `name`, and the directory synced. A link at `name` is replaced, never followed.
pub fn replace_at(
    dir: &impl AsFd,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    let tmp = format!(".{name}.airlock-tmp-{}", random_suffix());
    write_synced_at(dir, dir_path, &tmp, bytes, mode)?;
    if let Err(e) = rename_at(dir, &tmp, dir, name, RenameFlags::empty()) {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        return Err(Error::io(dir_path.join(name), e));
    }
    sync_dir_fd(dir, dir_path)
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
