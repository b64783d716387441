//! Opening files under the rules of [`crate::fsio`]: no link followed, no blocking open,
//! regular files only, bounded reads, exclusive creation with an explicit mode. Every function
//! that takes a path or a name fails with an [`Error`] naming it; those that read a handle
//! already open (hashing, listing an open directory) with an `io::Error` (this file sits on the
//! ground floor: `keys` reads key files through it).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sha2::{Digest, Sha256};

use super::error::{Cause, Error, Op, Result, as_is, at};

/// Opens the directory `path` (the operator's path to a parent or a bundle: with
/// [`Follow::Final`] a final link is followed, as the shell would).
pub fn open_dir_path(path: &Path, follow: Follow) -> Result<OwnedFd> {
    let flags = match follow {
        Follow::Never => dir_flags(),
        Follow::Final => OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
    };
    rustix::fs::open(path, flags, Mode::empty()).map_err(|e| Error::os(Op::OpenDir, path, e))
}

/// Opens the directory `path` as `open(2)` would resolve it (links followed), one component
/// at a time, so its length is not limited by `PATH_MAX`.
pub fn open_dir_following(path: &Path) -> Result<OwnedFd> {
    use std::path::Component;
    let fail = |e| Error::os(Op::OpenDir, path, e);
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(
        if path.has_root() { "/" } else { "." },
        flags,
        Mode::empty(),
    )
    .map_err(fail)?;
    for c in path.components() {
        let next = match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
            Component::ParentDir => rustix::fs::openat(&fd, "..", flags, Mode::empty()),
            Component::Normal(n) => rustix::fs::openat(&fd, n, flags, Mode::empty()),
        };
        fd = next.map_err(fail)?;
    }
    Ok(fd)
}

/// Opens what `name` in `dir` leads to (a link followed) as a path handle only (`O_PATH`:
/// nothing can be read through it, no open of a FIFO or device happens), to learn where a link
/// leads by its descriptor.
pub fn open_path_at<P: rustix::path::Arg>(dir: &impl AsFd, name: P) -> Result<OwnedFd> {
    at(Op::OpenPath, name, as_is, |c| {
        rustix::fs::openat(dir, c, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
    })
}

/// Opens the directory `name` inside `dir` without following a symlink.
pub fn open_dir_at<P: rustix::path::Arg>(dir: &impl AsFd, name: P) -> Result<OwnedFd> {
    at(Op::OpenDir, name, as_is, |c| {
        rustix::fs::openat(dir, c, dir_flags(), Mode::empty())
    })
}

pub(super) fn dir_flags() -> OFlags {
    OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC
}

/// Whether the final component of a path the operator gave may be a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Never: a final symbolic link is refused.
    Never,
    /// The final component may be a link (to a regular file); every check applies to what it
    /// leads to. For paths the operator names on the command line (a bundle's
    /// `manifest.json`, FORMAT.md section 2; a key file).
    Final,
}

fn open_error(e: rustix::io::Errno, nofollow: bool) -> Cause {
    match e {
        rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => Cause::NotFound,
        rustix::io::Errno::LOOP if nofollow => Cause::Link,
        e => Cause::Io(e.into()),
    }
}

/// Below a directory handle, `ENOTDIR` means a link (or a file) stands where a directory of
/// the path should be: opened with `O_DIRECTORY | O_NOFOLLOW`, a link to a directory gives
/// `ENOTDIR`, not `ELOOP`.
fn below_error(e: rustix::io::Errno) -> Cause {
    match e {
        rustix::io::Errno::NOENT => Cause::NotFound,
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => Cause::Link,
        e => Cause::Io(e.into()),
    }
}

/// What a file type is called in messages.
pub fn describe_type(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

fn describe_raw(mode: rustix::fs::RawMode) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        FileType::Symlink => "a symbolic link",
        FileType::RegularFile => "a regular file",
        FileType::Unknown => "not a regular file",
    }
}

const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOCTTY);

/// Checks on the open handle that `fd` is a regular file; returns it with its size.
fn regular(fd: OwnedFd) -> std::result::Result<(File, u64), Cause> {
    regular_stat(fd).map(|(f, st)| (f, st.st_size as u64))
}

/// [`regular`], returning the whole status of the one `fstat` that checked the type (size,
/// mode, modification time, inode), so a caller needs no second `fstat`.
fn regular_stat(fd: OwnedFd) -> std::result::Result<(File, rustix::fs::Stat), Cause> {
    let st = rustix::fs::fstat(&fd).map_err(|e| Cause::Io(e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Cause::NotRegular(describe_raw(st.st_mode)));
    }
    Ok((File::from(fd), st))
}

/// Opens the regular file `name` (one component) in the directory `dir` for reading: not
/// through a link, without blocking, checked to be a regular file on the open handle. Returns
/// its status too (the `fstat` of that check).
pub fn open_file_at(dir: &impl AsFd, name: &std::ffi::OsStr) -> Result<(File, rustix::fs::Stat)> {
    rustix::fs::openat(dir, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        .map_err(below_error)
        .and_then(regular_stat)
        .map_err(|c| Error::new(Op::Open, name, c))
}

/// Opens `name` (one component) in the directory `dir` for reading, not through a link and
/// without blocking, but unlike [`open_file_at`] without looking at what it opened: for a
/// reader that reads a bound it chose and trusts nothing it read until an `fstat` of the
/// handle after the read shows the regular file it expects (the pack's read-ahead of a file
/// its scan found by `fstatat`: [`crate::scan::Seen`]). A FIFO or directory opened so fails
/// its read; a device, which only root makes, gives at most the bound and fails the `fstat`.
pub fn open_at_unchecked(dir: &impl AsFd, name: &std::ffi::OsStr) -> Result<File> {
    rustix::fs::openat(dir, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        .map(File::from)
        .map_err(|e| Error::new(Op::Open, name, below_error(e)))
}

/// Opens `path` for reading without blocking and checks on the open handle that it is a
/// regular file. Returns the file and its size.
pub fn open_regular(path: &Path, follow: Follow) -> Result<(File, u64)> {
    let nofollow = follow == Follow::Never;
    let flags = if nofollow {
        READ_FLAGS | OFlags::NOFOLLOW
    } else {
        READ_FLAGS
    };
    rustix::fs::open(path, flags, Mode::empty())
        .map_err(|e| open_error(e, nofollow))
        .and_then(regular)
        .map_err(|c| Error::new(Op::Open, path, c))
}

/// Reads all of the open regular file `f` (of `len` bytes by its `fstat`) if it holds at most
/// `limit` bytes, reading at most `limit + 1` (a file that grows while it is read is refused).
fn read_open_capped(f: File, len: u64, limit: u64) -> std::result::Result<Vec<u8>, Cause> {
    if len > limit {
        return Err(Cause::TooLarge(len));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(len as usize)
        .map_err(|_| Cause::Io(io::Error::from(io::ErrorKind::OutOfMemory)))?;
    f.take(limit + 1).read_to_end(&mut out).map_err(Cause::Io)?;
    if out.len() as u64 > limit {
        return Err(Cause::TooLarge(limit + 1));
    }
    Ok(out)
}

/// Opens `path` for reading as a stream the operator named as input that may be a pipe
/// (`--password-file <(pass show key)`): the open may wait for the pipe's writer, as the
/// operator expects, and a final link is followed. Read it with a bound (`Read::take`).
pub fn open_operator_stream(path: &Path) -> Result<File> {
    let fail = |e| Error::new(Op::Open, path, Cause::Io(e));
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| fail(e.into()))?;
    let file = File::from(fd);
    if file.metadata().map_err(fail)?.is_dir() {
        return Err(fail(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory",
        )));
    }
    Ok(file)
}

/// Reads the whole regular file `path` if it holds at most `limit` bytes: anything but a
/// regular file is refused before reading, and at most `limit + 1` bytes are read.
pub fn read_capped(path: &Path, limit: u64, follow: Follow) -> Result<Vec<u8>> {
    let (f, len) = open_regular(path, follow)?;
    read_open_capped(f, len, limit).map_err(|c| Error::new(Op::Read, path, c))
}

/// [`read_capped`] with the error as an `io::Error` (its cause's: `InvalidInput` for a file
/// that is not regular or is a link, `FileTooLarge` for one over the limit), for `io::Error`
/// plumbing.
pub fn read_regular_capped(path: &Path, limit: u64, follow: bool) -> io::Result<Vec<u8>> {
    let follow = if follow { Follow::Final } else { Follow::Never };
    read_capped(path, limit, follow).map_err(io::Error::from)
}

/// Opens the directory `rel` below `root` one component at a time, never following a link
/// (`rel` empty or `.`: `root` itself, as a new handle).
pub fn open_below(root: &impl AsFd, rel: &str) -> Result<OwnedFd> {
    below(root, rel).map_err(|e| Error::os(Op::OpenDir, rel, e))
}

/// [`open_below`] with the system's error.
fn below(root: &impl AsFd, rel: &str) -> rustix::io::Result<OwnedFd> {
    let mut fd = rustix::fs::openat(root, ".", dir_flags(), Mode::empty())?;
    for c in rel.split('/').filter(|c| !c.is_empty() && *c != ".") {
        fd = rustix::fs::openat(&fd, c, dir_flags(), Mode::empty())?;
    }
    Ok(fd)
}

/// Opens the regular file `rel` below `root` for reading: one component at a time, no link
/// followed on the way or at the end, without blocking, checked to be a regular file.
pub fn open_file_below(root: &impl AsFd, rel: &str) -> Result<(File, u64)> {
    let fd = match rel.rsplit_once('/') {
        Some((parents, name)) => below(root, parents).and_then(|dir| {
            rustix::fs::openat(&dir, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        }),
        // A name in `root` itself: no handle of `root` to open first.
        None => rustix::fs::openat(root, rel, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty()),
    };
    fd.map_err(below_error)
        .and_then(regular)
        .map_err(|c| Error::new(Op::Open, rel, c))
}

/// Opens regular files below a directory handle as [`open_file_below`] does, keeping the
/// handle of the last file's directory: the next file of the same directory (files in bundle
/// order come directory by directory) is one `openat` below it, not a walk from the root. The
/// held handle was reached by the same rules (no link followed), so none is followed later.
pub struct BelowOpener<'r, R: AsFd> {
    root: &'r R,
    last: Option<(String, OwnedFd)>,
}

impl<'r, R: AsFd> BelowOpener<'r, R> {
    /// Opens files below `root`.
    pub fn new(root: &'r R) -> Self {
        BelowOpener { root, last: None }
    }

    /// [`open_file_below`] of `rel`.
    pub fn open(&mut self, rel: &str) -> Result<(File, u64)> {
        self.open_stat(rel).map(|(f, st)| (f, st.st_size as u64))
    }

    /// [`BelowOpener::open`], returning the file's whole status (the `fstat` that checked it is
    /// a regular file) in place of its size.
    pub fn open_stat(&mut self, rel: &str) -> Result<(File, rustix::fs::Stat)> {
        self.open_stat_cause(rel)
            .map_err(|c| Error::new(Op::Open, rel, c))
    }

    fn open_stat_cause(
        &mut self,
        rel: &str,
    ) -> std::result::Result<(File, rustix::fs::Stat), Cause> {
        let Some((parents, name)) = rel.rsplit_once('/') else {
            let fd =
                rustix::fs::openat(self.root, rel, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
                    .map_err(below_error)?;
            return regular_stat(fd);
        };
        let dir = match self.last.take() {
            Some((held, fd)) if held == parents => fd,
            _ => below(self.root, parents).map_err(below_error)?,
        };
        let fd = rustix::fs::openat(&dir, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
            .map_err(below_error);
        self.last = Some((parents.to_string(), dir));
        regular_stat(fd?)
    }
}

/// Reads the regular file `rel` below `root` ([`open_file_below`]) if it holds at most `limit`
/// bytes.
pub fn read_below_capped(root: &impl AsFd, rel: &str, limit: u64) -> Result<Vec<u8>> {
    let (f, len) = open_file_below(root, rel)?;
    read_open_capped(f, len, limit).map_err(|c| Error::new(Op::Read, rel, c))
}

/// Creates the new file `name` in `dir` (exclusive, never through a link) with exactly `mode`,
/// open for writing (and reading with `read`).
pub fn create_at(dir: &impl AsFd, name: &str, mode: u32, read: bool) -> Result<File> {
    let access = if read { OFlags::RDWR } else { OFlags::WRONLY };
    let create = || {
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC | access,
            Mode::from_raw_mode(mode),
        )?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    };
    create().map_err(|e| Error::os(Op::Create, name, e))
}

/// Creates the new file `path` (exclusive, a final link refused) with exactly `mode`, for
/// writing. For files in directories airlock created itself and holds by path (a work
/// directory); anywhere else, [`create_at`] through a handle.
pub fn create_new(path: &Path, mode: u32) -> Result<File> {
    let create = || {
        let fd = rustix::fs::open(
            path,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    };
    create().map_err(|e| Error::os(Op::Create, path, e))
}

/// Opens the lock file `name` in `dir`, creating it with exactly `mode` if it is missing: never
/// through a link, and only a regular file (a FIFO planted there does not block).
pub fn open_lock_at(dir: &impl AsFd, name: &str, mode: u32) -> Result<File> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(below_error)
    .and_then(regular)
    .map(|(f, _)| f)
    .map_err(|c| Error::new(Op::Lock, name, c))
}

/// Creates the new file `path` (exclusive, a final link refused) with mode 0600, open for
/// reading and writing: a scratch file its caller unlinks.
pub fn create_temp(path: &Path) -> Result<File> {
    let create = || {
        let fd = rustix::fs::open(
            path,
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        Ok(File::from(fd))
    };
    create().map_err(|e| Error::os(Op::Create, path, e))
}

/// Bytes read per step when hashing a file.
const HASH_PIECE: usize = 1 << 20;

/// SHA-256 (hex) of the open file `f` from its start to its end, with positioned reads (the
/// file position is not moved), and the number of bytes hashed; `advance` is told of each
/// piece (a progress bar). Call [`hash_exact`] when the size is known in advance.
pub fn hash_file(f: &File, advance: &dyn Fn(u64)) -> io::Result<(String, u64)> {
    HASH_BUFFER.with_borrow_mut(|buf| {
        // One buffer per thread, reused: zeroing a fresh 1 MiB for every file was most of the
        // time `check` spent on a tree of small files.
        buf.resize(HASH_PIECE, 0);
        let mut h = Sha256::new();
        let mut pos = 0u64;
        loop {
            let n = match f.read_at(buf, pos) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
            pos += n as u64;
            advance(n as u64);
        }
        Ok((hex::encode(h.finalize()), pos))
    })
}

thread_local! {
    /// [`hash_file`]'s buffer.
    static HASH_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// SHA-256 (hex) of exactly the first `len` bytes of `f`, reading no more; `UnexpectedEof`
/// when the file is shorter.
pub fn hash_exact(f: &File, len: u64) -> io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; HASH_PIECE.min(len as usize)];
    let mut pos = 0u64;
    while pos < len {
        let n = (len - pos).min(HASH_PIECE as u64) as usize;
        f.read_exact_at(&mut buf[..n], pos)?;
        h.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(hex::encode(h.finalize()))
}

/// The entries of an open directory (without `.` and `..`) with their types, a type the
/// directory listing leaves unknown being read with `fstatat` (never following a link).
pub fn dir_entries(dir: &OwnedFd) -> io::Result<Vec<(std::ffi::OsString, FileType)>> {
    dir_entries_named(dir, |_| true)
}

/// [`dir_entries`], keeping only the entries whose name `keep` accepts (the others are not
/// held, nor their type read): a folder of a million entries listed for a few of them.
pub fn dir_entries_named(
    dir: &OwnedFd,
    keep: impl Fn(&std::ffi::OsStr) -> bool,
) -> io::Result<Vec<(std::ffi::OsString, FileType)>> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." || !keep(std::ffi::OsStr::from_bytes(name)) {
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

/// The entries of the directory `path` ([`dir_entries`]): with [`Follow::Final`] as the
/// operator names it (links followed, as `read_dir` would), with [`Follow::Never`] only if
/// `path` itself is no link.
pub fn list_dir(path: &Path, follow: Follow) -> Result<Vec<(std::ffi::OsString, FileType)>> {
    dir_entries(&open_dir_path(path, follow)?).map_err(|e| Error::new(Op::List, path, Cause::Io(e)))
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

    #[test]
    fn bounded_read_refuses_devices_fifos_and_directories_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(matches!(
            read_capped(&zero, 16, Follow::Final).map_err(Error::into_cause),
            Err(Cause::NotRegular("a character device"))
        ));
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert!(matches!(
            read_capped(&fifo, 16, Follow::Final).map_err(Error::into_cause),
            Err(Cause::NotRegular("a FIFO"))
        ));
        assert!(matches!(
            read_capped(dir.path(), 16, Follow::Final).map_err(Error::into_cause),
            Err(Cause::NotRegular("a directory"))
        ));
        let big = dir.path().join("big");
        std::fs::write(&big, [0u8; 17]).unwrap();
        assert!(matches!(
            read_capped(&big, 16, Follow::Final).map_err(Error::into_cause),
            Err(Cause::TooLarge(17))
        ));
        std::fs::write(&big, [0u8; 16]).unwrap();
        assert_eq!(read_capped(&big, 16, Follow::Final).unwrap().len(), 16);
        assert!(matches!(
            read_capped(&dir.path().join("absent"), 16, Follow::Final).map_err(Error::into_cause),
            Err(Cause::NotFound)
        ));
    }

    /// Calls that open a file by path or through a handle. Outside this module they may appear
    /// only where [`OPEN_ALLOWED`] says why.
    const OPENING_CALLS: &[&str] = &[
        "File::open(",
        "File::create(",
        "File::create_new(",
        "OpenOptions::new(",
        "fs::read(",
        "fs::read_to_string(",
        "fs::write(",
        "fs::copy(",
        "fs::open(",
        "fs::openat(",
    ];

    /// Calls that change a tree or list a directory by path (the standard library's, and
    /// rustix's path-based ones, or any `*at` call from the working directory, `CWD`):
    /// outside this module a tree is changed below a handle airlock holds (`mkdirat`,
    /// `unlinkat`, `fchmod`, [`super::rename_at`], [`super::symlink_at`],
    /// [`super::hard_link_at`], [`super::create_at`]) and listed with [`super::list_dir`] or
    /// [`super::dir_entries`], so that a link planted on the way is never followed by
    /// accident and the rule is visible at the call. The names are matched as a call
    /// (`fs::rename(`) and in a `use` line (`use std::fs::{rename, …}` then `rename(`).
    const TREE_CALLS: &[&str] = &[
        "fs::create_dir(",
        "fs::create_dir_all(",
        "fs::rename(",
        "fs::hard_link(",
        "fs::soft_link(",
        "fs::symlink(",
        "fs::set_permissions(",
        "fs::read_dir(",
        "fs::remove_file(",
        "fs::remove_dir(",
        "fs::remove_dir_all(",
        "DirBuilder",
        "fs::mkdir(",
        "fs::unlink(",
        "fs::rmdir(",
        "fs::link(",
        "fs::chmod(",
        "fs::chown(",
        "fs::mknod(",
        "CWD",
    ];

    /// (file, call, why): the opens and the path-based tree calls that stay outside this
    /// module.
    const OPEN_ALLOWED: &[(&str, &str, &str)] = &[
        (
            "src/fsinfo.rs",
            "fs::read_to_string(",
            "/proc/self/mountinfo: the kernel's own file, for a message",
        ),
        (
            "src/copy.rs",
            "fs::write(",
            "the flag file of the tests' pause before a read-back (debug builds only)",
        ),
        (
            "src/copy.rs",
            "fs::remove_file(",
            "the two flag files of the tests' pause before a read-back, in the test's own \
             directory (debug builds only)",
        ),
    ];

    /// The calls of a line of code that are not allowed in `rel`: the opening and tree calls
    /// it makes, and the tree calls a `use` line imports (a name then called bare).
    fn offending_calls(rel: &str, code: &str) -> Vec<&'static str> {
        let allowed = |call: &str| OPEN_ALLOWED.iter().any(|(f, c, _)| *f == rel && *c == call);
        let mut out = Vec::new();
        for call in OPENING_CALLS.iter().chain(TREE_CALLS) {
            if code.contains(call) && !allowed(call) {
                out.push(*call);
            }
        }
        let trimmed = code.trim_start();
        if (trimmed.starts_with("use ") || trimmed.starts_with("pub use "))
            && (code.contains("std::fs")
                || code.contains("unix::fs")
                || code.contains("rustix::fs"))
        {
            for call in TREE_CALLS.iter().chain(OPENING_CALLS) {
                let Some(name) = call.strip_prefix("fs::").and_then(|c| c.strip_suffix('(')) else {
                    continue;
                };
                let word = code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == name);
                if word && !allowed(call) {
                    out.push(*call);
                }
            }
        }
        out
    }

    #[test]
    fn the_below_opener_holds_a_directory_and_follows_no_link() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        std::fs::write(r.join("a/b/f"), b"f").unwrap();
        std::fs::write(r.join("a/b/g"), b"g").unwrap();
        std::fs::write(r.join("top"), b"top").unwrap();
        std::fs::create_dir(r.join("out")).unwrap();
        std::fs::write(r.join("out/h"), b"host").unwrap();
        let root = open_dir_path(r, Follow::Never).unwrap();
        let mut o = BelowOpener::new(&root);
        let read = |o: &mut BelowOpener<'_, OwnedFd>, rel: &str| {
            let (mut f, len) = o.open(rel).map_err(Error::into_cause)?;
            let mut s = String::new();
            f.read_to_string(&mut s).map_err(Cause::Io)?;
            assert_eq!(s.len() as u64, len);
            Ok::<_, Cause>(s)
        };
        assert_eq!(read(&mut o, "a/b/f").unwrap(), "f");
        assert_eq!(read(&mut o, "a/b/g").unwrap(), "g");
        assert_eq!(read(&mut o, "top").unwrap(), "top");
        assert!(matches!(read(&mut o, "a/b/missing"), Err(Cause::NotFound)));
        // A held directory swapped for a link: the held handle is the directory itself (no
        // `h` in it), never the link's target.
        std::fs::rename(r.join("a/b"), r.join("b-moved")).unwrap();
        std::os::unix::fs::symlink(r.join("out"), r.join("a/b")).unwrap();
        assert!(matches!(read(&mut o, "a/b/h"), Err(Cause::NotFound)));
        // Opened afresh (another directory first): the link in the path, or a file that is a
        // link, is refused.
        std::os::unix::fs::symlink(r.join("out/h"), r.join("a/h")).unwrap();
        assert!(matches!(read(&mut o, "a/h"), Err(Cause::Link)));
        assert!(matches!(read(&mut o, "a/b/h"), Err(Cause::Link)));
    }

    #[test]
    fn only_fsio_opens_files() {
        let mut found = Vec::new();
        for (rel, code) in crate::source_rules::non_test_sources() {
            if rel.starts_with("src/fsio/") {
                continue;
            }
            for (n, line) in code.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if !offending_calls(&rel, code).is_empty() {
                    found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "files opened, or a tree changed or listed by path, outside src/fsio/ (open them \
             through fsio: no link followed, no blocking, regular files only, bounded; change a \
             tree below a directory handle: mkdirat, unlinkat, fchmod, fsio::rename_at, \
             symlink_at, hard_link_at, create_at; list it with fsio::list_dir or dir_entries; \
             or add the call to OPEN_ALLOWED with the reason):\n{}",
            found.join("\n")
        );
        // Every allowance is still needed (a stale one would hide a new call in that file).
        for (file, call, _) in OPEN_ALLOWED {
            let used = crate::source_rules::non_test_sources()
                .iter()
                .any(|(rel, code)| rel == file && code.contains(call));
            assert!(
                used,
                "OPEN_ALLOWED lists {call} in {file}, which no longer makes it"
            );
        }
    }

    /// The rule sees each kind of call it is about, qualified or imported, and lets the
    /// handle-relative ones and the allowed ones pass.
    #[test]
    fn the_file_access_rule_catches_each_path_based_call() {
        let planted = [
            "std::fs::create_dir_all(&p)?;",
            "std::fs::rename(&a, &b)?;",
            "fs::hard_link(&a, &b)?;",
            "std::os::unix::fs::symlink(&a, &b)?;",
            "fs::set_permissions(&p, perms)?;",
            "for e in std::fs::read_dir(&p)? {",
            "let _ = std::fs::remove_file(&p);",
            "std::fs::remove_dir_all(&p)?;",
            "let f = File::create(&p)?;",
            "let f = std::fs::OpenOptions::new().write(true).open(&p)?;",
            "rustix::fs::mkdir(&p, Mode::from_raw_mode(0o755))?;",
            "rustix::fs::renameat(rustix::fs::CWD, &a, rustix::fs::CWD, &b)?;",
            "use std::os::unix::fs::symlink;",
            "use std::fs::{File, remove_file};",
            "std::fs::DirBuilder::new().mode(0o700).create(&p)?;",
        ];
        for line in planted {
            assert!(
                !offending_calls("src/unpack/dir.rs", line).is_empty(),
                "not caught: {line}"
            );
        }
        let fine = [
            "rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755))?;",
            "rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR)?;",
            "fsio::rename_at(&a, x, &b, y, RenameFlags::NOREPLACE)?;",
            "let rd = fsio::list_dir(&p, Follow::Never)?;",
            "f.set_permissions(perms)?;",
            "use std::fs::File;",
            "use std::os::unix::fs::{MetadataExt, PermissionsExt};",
            "let m = std::fs::symlink_metadata(&p)?;",
        ];
        for line in fine {
            assert!(
                offending_calls("src/unpack/dir.rs", line).is_empty(),
                "caught: {line}"
            );
        }
        assert!(offending_calls("src/copy.rs", "let _ = std::fs::remove_file(&flag);").is_empty());
        assert!(
            !offending_calls("src/repair.rs", "let _ = std::fs::remove_file(&flag);").is_empty()
        );
    }
}
