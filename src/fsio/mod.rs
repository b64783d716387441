//! The one module that opens files: everything airlock reads from removable media (a bundle),
//! from a tree another user may write (a destination's parent, an installed model, a delta's
//! base, a Hugging Face cache, an OCI layout) or from a path the operator named (keys, configs),
//! and everything it creates in such places; the two `renameat2` flavours; and the links made
//! and the entries looked at relative to a directory handle (`symlinkat`, `linkat`,
//! `fstatat`). The durable steps built on it (write and fsync with an explicit mode, directory
//! syncs) are [`crate::durable`].
//!
//! The rules, so that a caller cannot get them wrong:
//!
//! - **No link is followed** below a directory handle: paths are opened one component at a time
//!   with `O_NOFOLLOW` ([`open_below`], [`open_file_below`]), which also lets a tree hold paths
//!   longer than `PATH_MAX`. A path the operator gave may have its final component followed
//!   only where the caller says so ([`Follow::Final`]).
//! - **No open blocks**: files are opened `O_NONBLOCK` (a FIFO returns at once) and checked to
//!   be regular files on the open handle before a byte is read (`/dev/zero`, a FIFO, a
//!   directory or a socket is refused, named by [`describe_type`]).
//! - **Every read is bounded**: [`read_capped`] reads at most the limit plus one byte; hashing
//!   ([`hash_file`]) reads a file of a size the caller checked first.
//! - **Creation is exclusive** (`O_CREAT | O_EXCL | O_NOFOLLOW`, relative to a directory
//!   handle) and the mode is set with `fchmod`: the process umask is never trusted.
//!
//! It lives below every reader and writer, so that installing never imports from the bundle
//! writer (and the writer never from an installer). A unit test (`only_fsio_opens_files`)
//! fails when a file is opened anywhere else in `src/`, or a tree is changed or listed by path
//! (`create_dir`, `rename`, `remove_*`, `read_dir`, `set_permissions`, links, rustix's path
//! calls, `CWD`): elsewhere a tree is changed below a directory handle and listed with
//! [`list_dir`] or [`dir_entries`].

mod at;
mod error;
mod medium;
mod open;
mod rename;

pub use at::*;
pub use error::{Cause, Error, Op, Result};
pub use medium::*;
pub use open::*;
pub use rename::*;
