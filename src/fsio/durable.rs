//! The durable steps: a new file written and fsynced with an explicit mode, directory syncs,
//! the two `renameat2` flavours. Errors name the path ([`crate::error::Error::io`]).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, RenameFlags};

use super::open::{create_at, create_new, dir_flags, open_dir_at};
use crate::error::{Error, Result};

/// The parent directory of `path` (`.` for a bare name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

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

/// 64 random bits in hex, for temporary names.
fn random_suffix() -> String {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the system's random source works");
    hex::encode(b)
}

/// Creates the new file `name` in the directory `dir` (shown as `dir_path` in errors) for
/// writing, with exactly `mode`: exclusive (a name already taken, a link included, is an
/// `AlreadyExists` error) and never through a link.
pub fn create_new_at(dir: &impl AsFd, dir_path: &Path, name: &str, mode: u32) -> Result<File> {
    create_at(dir, name, mode, false).map_err(|e| Error::io(dir_path.join(name), e.into()))
}

fn finish_write(mut f: File, path: &Path, bytes: &[u8]) -> Result<()> {
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    f.sync_all().map_err(|e| Error::io(path, e))
}

/// Opens the directory `path` without following a final symlink.
pub fn open_dir(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(path, dir_flags(), Mode::empty()).map_err(|e| Error::io(path, e.into()))
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

/// Renames `from` to `to`, failing with `AlreadyExists` if `to` exists.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        from,
        rustix::fs::CWD,
        to,
        RenameFlags::NOREPLACE,
    )
    .map_err(io::Error::from)
}

/// Swaps `a` and `b` atomically; both must exist.
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        a,
        rustix::fs::CWD,
        b,
        RenameFlags::EXCHANGE,
    )
    .map_err(io::Error::from)
}

/// `renameat2` between two directory handles.
pub fn rename_at(
    from_dir: &impl AsFd,
    from: &str,
    to_dir: &impl AsFd,
    to: &str,
    flags: RenameFlags,
) -> io::Result<()> {
    rustix::fs::renameat_with(from_dir, from, to_dir, to, flags).map_err(io::Error::from)
}
