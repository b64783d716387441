//! The one error of [`crate::fsio`] (issue 34 item 6): what was done ([`Op`]), to which path
//! (as the caller named it: an operator's path, or a name relative to a directory handle) and
//! why it failed ([`Cause`]: an errno, or a refusal of fsio's rules such as a link where none
//! is followed, a file that is not regular, a file over its limit).
//!
//! It reaches the user only through `crate::Error`: a caller either matches the cause
//! ([`Error::cause`], [`Error::errno`]) or hands it on as an `io::Error` (`From`), whose text
//! is the cause's alone (the caller's message names the file), so the messages and exit codes
//! of every case are those of the three error types it replaced (`io::Error`,
//! `rustix::io::Errno` and `OpenError`).

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A result of an fsio operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Why an fsio operation failed: the operation, the path and the cause.
#[derive(Debug)]
pub struct Error {
    op: Op,
    path: PathBuf,
    cause: Cause,
}

/// What fsio was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Opening a file to read it.
    Open,
    /// Reading a file opened for it.
    Read,
    /// Opening a directory.
    OpenDir,
    /// Listing a directory.
    List,
    /// Opening what a name leads to as a path handle.
    OpenPath,
    /// Creating a new file.
    Create,
    /// Opening (or creating) a lock file.
    Lock,
    /// Reading an entry's status.
    Stat,
    /// Making a link.
    Link,
    /// Renaming an entry (the path is the name it was to take).
    Rename,
}

impl Op {
    /// The operation as a verb ("open", "create").
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Read => "read",
            Op::OpenDir => "open the directory",
            Op::List => "list",
            Op::OpenPath => "look up",
            Op::Create => "create",
            Op::Lock => "lock",
            Op::Stat => "stat",
            Op::Link => "link",
            Op::Rename => "rename onto",
        }
    }
}

/// Why it failed: a refusal of fsio's rules or the system's error. Was `fsio::OpenError`.
#[derive(Debug)]
pub enum Cause {
    /// The file does not exist (or a path component is not a directory), as fsio's readers
    /// report it; the `*_at` calls that pass the system's answer on report `ENOENT` as
    /// [`Cause::Io`] (see [`Error::errno`]).
    NotFound,
    /// A symbolic link where none may be followed (below a directory handle: a link, or a
    /// file, where a directory of the path should be).
    Link,
    /// Not a regular file; the text says what it is ("a FIFO").
    NotRegular(&'static str),
    /// More than the limit; the number is its size when known, else `limit + 1`.
    TooLarge(u64),
    /// The system's error (an errno, or a read that failed).
    Io(io::Error),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::NotFound => f.write_str("no such file"),
            Cause::Link => f.write_str("is a symbolic link (not followed)"),
            Cause::NotRegular(what) => write!(f, "is {what}, not a regular file"),
            Cause::TooLarge(n) => write!(f, "is larger than the limit ({n} bytes or more)"),
            Cause::Io(e) => e.fmt(f),
        }
    }
}

impl From<Cause> for io::Error {
    fn from(e: Cause) -> io::Error {
        match e {
            Cause::NotFound => io::ErrorKind::NotFound.into(),
            Cause::Io(e) => e,
            Cause::TooLarge(_) => io::Error::new(io::ErrorKind::FileTooLarge, e.to_string()),
            Cause::Link | Cause::NotRegular(_) => {
                io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
            }
        }
    }
}

impl Error {
    /// An error of `op` on `path`.
    pub fn new(op: Op, path: impl Into<PathBuf>, cause: Cause) -> Error {
        Error {
            op,
            path: path.into(),
            cause,
        }
    }

    /// The system's error `errno` of `op` on `path`.
    pub(super) fn os(op: Op, path: impl Into<PathBuf>, errno: rustix::io::Errno) -> Error {
        Error::new(op, path, Cause::Io(errno.into()))
    }

    /// What was done.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The path it was done to, as the caller named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why it failed.
    pub fn cause(&self) -> &Cause {
        &self.cause
    }

    /// Why it failed, taken out (to match on its refusals).
    pub fn into_cause(self) -> Cause {
        self.cause
    }

    /// The system's errno, when the cause is one ([`Cause::Io`] from the system).
    pub fn errno(&self) -> Option<rustix::io::Errno> {
        match &self.cause {
            Cause::Io(e) => e.raw_os_error().map(rustix::io::Errno::from_raw_os_error),
            _ => None,
        }
    }

    /// `io::Error`'s kind of [`Error`]'s conversion.
    pub fn kind(&self) -> io::ErrorKind {
        match &self.cause {
            Cause::NotFound => io::ErrorKind::NotFound,
            Cause::Io(e) => e.kind(),
            Cause::TooLarge(_) => io::ErrorKind::FileTooLarge,
            Cause::Link | Cause::NotRegular(_) => io::ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for Error {
    /// Names the operation, the file and the problem: "cannot open a/b: is a FIFO, not a
    /// regular file".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} {}: {}",
            self.op.verb(),
            self.path.display(),
            self.cause
        )
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// The cause's `io::Error`, with the cause's text only (a caller's message names the file):
/// the text and kind the replaced types gave.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        e.cause.into()
    }
}

/// Runs the system call `call` on the name `name`, naming it in the error (`map` turns the
/// errno into the cause). The name is converted once, as the call itself would, and copied
/// only when the call fails.
pub(super) fn at<P: rustix::path::Arg, T>(
    op: Op,
    name: P,
    map: fn(rustix::io::Errno) -> Cause,
    call: impl FnOnce(&CStr) -> rustix::io::Result<T>,
) -> Result<T> {
    use std::os::unix::ffi::OsStrExt;
    let mut failed = PathBuf::new();
    name.into_with_c_str(|c| {
        call(c).inspect_err(|_| {
            failed = PathBuf::from(std::ffi::OsStr::from_bytes(c.to_bytes()));
        })
    })
    .map_err(|e| Error::new(op, failed, map(e)))
}

/// The cause of the system's `errno`, passed on as it is.
pub(super) fn as_is(e: rustix::io::Errno) -> Cause {
    Cause::Io(e.into())
}
