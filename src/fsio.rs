//! Small filesystem steps that both the bundle writer and the installers need: durable writes,
//! directory syncs, the two `renameat2` flavours, and bounded reads of files that may be
//! hostile.
//!
//! They live here, below both, so that installing never imports from the bundle writer (and the
//! writer never from an installer). Everything that creates a file sets its mode explicitly:
//! the process umask is never trusted.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};

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
    let fd = rustix::fs::open(
        path,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| Error::io(path, e.into()))?;
    finish_write(fd, path, bytes, mode)
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
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| Error::io(&path, e.into()))?;
    finish_write(fd, &path, bytes, mode)
}

/// Creates the new file `name` in the directory `dir` (shown as `dir_path` in errors) for
/// writing, with exactly `mode`: exclusive (a name already taken, a link included, is an
/// `AlreadyExists` error) and never through a link.
pub fn create_new_at(dir: &impl AsFd, dir_path: &Path, name: &str, mode: u32) -> Result<File> {
    let path = dir_path.join(name);
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| Error::io(&path, e.into()))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| Error::io(&path, e.into()))?;
    Ok(File::from(fd))
}

fn finish_write(fd: OwnedFd, path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| Error::io(path, e.into()))?;
    let mut f = File::from(fd);
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    f.sync_all().map_err(|e| Error::io(path, e))
}

/// Opens the directory `path` without following a final symlink.
pub fn open_dir(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(path, dir_flags(), Mode::empty()).map_err(|e| Error::io(path, e.into()))
}

/// Opens the directory `name` inside `dir` without following a symlink.
pub fn open_dir_at<P: rustix::path::Arg>(dir: &impl AsFd, name: P) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(dir, name, dir_flags(), Mode::empty())
}

fn dir_flags() -> OFlags {
    OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC
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

/// Reads the regular file `path`, refusing anything larger than `limit` bytes.
///
/// The file is opened with `O_NONBLOCK` (a FIFO cannot hang the open) and, with `follow`
/// false, `O_NOFOLLOW`; `fstat` on the open handle must show a regular file (so a FIFO, a
/// device such as `/dev/zero` or a directory is refused without reading a byte); and at most
/// `limit + 1` bytes are read, so a file that grows while it is read is refused too. Errors:
/// `InvalidInput` for a file that is not regular, `FileTooLarge` for one over the limit.
pub fn read_regular_capped(path: &Path, limit: u64, follow: bool) -> io::Result<Vec<u8>> {
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| {
        if e == rustix::io::Errno::LOOP && !follow {
            io::Error::new(io::ErrorKind::InvalidInput, "is a symbolic link")
        } else {
            io::Error::from(e)
        }
    })?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is not a regular file (a directory, FIFO, socket or device)",
        ));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("is larger than the {limit}-byte limit"),
        )
    };
    if st.st_size as u64 > limit {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(st.st_size as usize);
    File::from(fd).take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(out)
}

/// The entries of an open directory (without `.` and `..`) with their types, a type the
/// directory listing leaves unknown being read with `fstatat` (never following a link).
pub fn dir_entries(dir: &OwnedFd) -> io::Result<Vec<(std::ffi::OsString, FileType)>> {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = std::ffi::OsString::from_vec(name.to_vec());
        let kind = match e.file_type() {
            FileType::Unknown => match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            },
            k => k,
        };
        out.push((name, kind));
    }
    Ok(out)
}

/// Whether the directory `name` in `dir` is the root of a mount (a bind mount of the same
/// filesystem included, which `st_dev` alone cannot tell). `None` when the kernel cannot say.
pub fn is_mount_root_at<P: rustix::path::Arg>(dir: &impl AsFd, name: P) -> Option<bool> {
    let st = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .ok()?;
    let mask = rustix::fs::StatxAttributes::MOUNT_ROOT;
    st.stx_attributes_mask
        .contains(mask)
        .then(|| st.stx_attributes.contains(mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_reads_refuse_devices_fifos_and_large_files() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_regular_capped(&f, 5, false).unwrap(), b"12345");
        let e = read_regular_capped(&f, 4, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let e = read_regular_capped(Path::new("/dev/zero"), 4, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let fifo = t.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read_regular_capped(&fifo, 4, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        std::os::unix::fs::symlink(&f, t.path().join("link")).unwrap();
        assert!(read_regular_capped(&t.path().join("link"), 5, false).is_err());
        assert!(read_regular_capped(&t.path().join("link"), 5, true).is_ok());
    }
}
