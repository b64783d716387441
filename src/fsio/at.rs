//! Links made and entries looked at relative to directory handles: the `*at` calls a writer
//! needs besides opening (which is [`super::open`]'s) and renaming ([`super::rename`]'s). None
//! follows a link. Errors are [`Error`]s naming the entry.

use std::os::fd::AsFd;

use rustix::fs::{AtFlags, Stat};

use super::error::{Error, Op, Result, as_is, at};

/// Creates the symbolic link `name` in `dir` holding `target` (its text; nothing is looked up).
/// Fails with `AlreadyExists` if `name` is taken.
pub fn symlink_at<P: rustix::path::Arg>(target: P, dir: &impl AsFd, name: &str) -> Result<()> {
    rustix::fs::symlinkat(target, dir, name).map_err(|e| Error::os(Op::Link, name, e))
}

/// Makes `to` in `to_dir` a hard link to the entry `from` of `from_dir`, which is not followed
/// if it is a link. Fails with `AlreadyExists` if `to` is taken.
pub fn hard_link_at<P: rustix::path::Arg, Q: rustix::path::Arg>(
    from_dir: &impl AsFd,
    from: P,
    to_dir: &impl AsFd,
    to: Q,
) -> Result<()> {
    at(Op::Link, to, as_is, |to| {
        rustix::fs::linkat(from_dir, from, to_dir, to, AtFlags::empty())
    })
}

/// The status of the entry `name` in `dir` itself (a link is described, not followed).
pub fn stat_at<P: rustix::path::Arg>(dir: &impl AsFd, name: P) -> Result<Stat> {
    at(Op::Stat, name, as_is, |c| {
        rustix::fs::statat(dir, c, AtFlags::SYMLINK_NOFOLLOW)
    })
}

/// Whether two statuses are of the same file (device and inode).
pub fn same_file(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// Whether the entry `name` in `dir` is the file open as `fd` (same device and inode), which
/// tells whether a directory airlock made is still where it put it. `Ok(false)` when nothing
/// is there.
pub fn is_entry_of(dir: &impl AsFd, name: &str, fd: &impl AsFd) -> Result<bool> {
    let held = rustix::fs::fstat(fd).map_err(|e| Error::os(Op::Stat, name, e))?;
    match stat_at(dir, name) {
        Ok(st) => Ok(same_file(&st, &held)),
        Err(e) if e.errno() == Some(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_made_below_a_handle_and_entries_are_told_apart_by_inode() {
        let t = tempfile::tempdir().unwrap();
        let root = super::super::open_dir_path(t.path(), super::super::Follow::Never).unwrap();
        std::fs::write(t.path().join("f"), b"x").unwrap();
        symlink_at("f", &root, "l").unwrap();
        assert_eq!(
            std::fs::read_link(t.path().join("l")).unwrap(),
            std::path::Path::new("f")
        );
        let e = symlink_at("g", &root, "l").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        // A hard link to the link is a link, not the file it names.
        hard_link_at(&root, "l", &root, "h").unwrap();
        assert!(
            std::fs::symlink_metadata(t.path().join("h"))
                .unwrap()
                .is_symlink()
        );
        // A directory moved away and replaced is no longer the entry of its name.
        std::fs::create_dir(t.path().join("d")).unwrap();
        let d = super::super::open_dir_at(&root, "d").unwrap();
        assert!(is_entry_of(&root, "d", &d).unwrap());
        std::fs::rename(t.path().join("d"), t.path().join("moved")).unwrap();
        assert!(!is_entry_of(&root, "d", &d).unwrap());
        std::fs::create_dir(t.path().join("d")).unwrap();
        assert!(!is_entry_of(&root, "d", &d).unwrap());
        assert!(is_entry_of(&root, "moved", &d).unwrap());
    }
}
