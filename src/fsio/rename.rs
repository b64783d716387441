//! Renames between paths or directory handles (`renameat2`: `RENAME_NOREPLACE`,
//! `RENAME_EXCHANGE`) and the parent of a path. Errors are [`fsio::Error`](super::Error)s of
//! [`Op::Rename`] naming the name the entry was to take (its cause is the system's errno).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::RenameFlags;

use super::error::{Error, Op, Result};

/// The parent directory of `path` (`.` for a bare name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Renames `from` to `to`, failing with `AlreadyExists` (`EEXIST`) if `to` exists.
pub fn rename_noreplace(from: &Path, to: &Path) -> Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        from,
        rustix::fs::CWD,
        to,
        RenameFlags::NOREPLACE,
    )
    .map_err(|e| Error::os(Op::Rename, to, e))
}

/// Swaps `a` and `b` atomically; both must exist.
pub fn exchange(a: &Path, b: &Path) -> Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        a,
        rustix::fs::CWD,
        b,
        RenameFlags::EXCHANGE,
    )
    .map_err(|e| Error::os(Op::Rename, b, e))
}

/// `renameat2` between two directory handles; the error names `to` (relative to `to_dir`).
pub fn rename_at<P: rustix::path::Arg, Q: rustix::path::Arg>(
    from_dir: &impl AsFd,
    from: P,
    to_dir: &impl AsFd,
    to: Q,
    flags: RenameFlags,
) -> Result<()> {
    super::error::at(Op::Rename, to, super::error::as_is, |to| {
        rustix::fs::renameat_with(from_dir, from, to_dir, to, flags)
    })
}
