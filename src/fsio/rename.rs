//! Renames between paths or directory handles (`renameat2`: `RENAME_NOREPLACE`,
//! `RENAME_EXCHANGE`) and the parent of a path. Errors are `io::Error`s.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::RenameFlags;

/// The parent directory of `path` (`.` for a bare name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
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
pub fn rename_at<P: rustix::path::Arg, Q: rustix::path::Arg>(
    from_dir: &impl AsFd,
    from: P,
    to_dir: &impl AsFd,
    to: Q,
    flags: RenameFlags,
) -> io::Result<()> {
    rustix::fs::renameat_with(from_dir, from, to_dir, to, flags).map_err(io::Error::from)
}
