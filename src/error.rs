//! The library's error type and the exit code each variant maps to.
//!
//! Variants are what a caller branches on; every one that concerns a file names it. The three
//! classes match the documented exit codes: 1 the environment failed (I/O, space, password),
//! 2 the command was used wrongly, 3 the bundle or model failed verification.

use std::io;
use std::path::{Path, PathBuf};

use crate::keys::KeyError;

/// Exit code for success.
pub const EXIT_OK: u8 = 0;
/// Exit code for an operational failure: I/O, no space, wrong password.
pub const EXIT_OPERATIONAL: u8 = 1;
/// Exit code for a usage error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for a bundle or model that failed verification.
pub const EXIT_VERIFY: u8 = 3;

/// Everything that can go wrong in airlock.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem operation failed on `path`.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The destination filesystem lacks room for the model.
    #[error(
        "not enough free space in {}: the model needs {needed} bytes ({}), the filesystem has {available} bytes ({}) available",
        path.display(),
        human(*needed),
        human(*available)
    )]
    NoSpace {
        /// The directory whose filesystem is too small.
        path: PathBuf,
        /// Bytes needed.
        needed: u64,
        /// Bytes available to this user.
        available: u64,
    },
    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(String),
    /// A key or signature file could not be used (unreadable, malformed, wrong password).
    #[error("{}: {source}", path.display())]
    Key {
        /// The key or signature file.
        path: PathBuf,
        /// What is wrong with it.
        source: KeyError,
    },
    /// The source model directory holds something airlock will not pack.
    #[error("{}: {reason}", path.display())]
    Source {
        /// The offending path.
        path: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// A source file changed while it was being packed.
    #[error("{}: changed while being packed ({what}); pack again once nothing writes to the model", path.display())]
    SourceChanged {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
    /// The model failed its format checks.
    #[error("the model has {count} error(s); the first: {first}")]
    ModelChecks {
        /// Number of error findings.
        count: usize,
        /// The first finding, formatted.
        first: String,
    },
    /// The bundle has no signature file.
    #[error("{}: missing; the bundle is unsigned and cannot be trusted", path.display())]
    MissingSignature {
        /// Where the signature was expected.
        path: PathBuf,
    },
    /// The signature was made by a key that is not trusted.
    #[error("{}: signed by key {key_id}, which is not in the trust set ({trusted})", path.display())]
    UntrustedKey {
        /// The signature file.
        path: PathBuf,
        /// The signer's key id.
        key_id: String,
        /// The trusted key ids.
        trusted: String,
    },
    /// The signature does not verify.
    #[error("{}: {reason}", path.display())]
    BadSignature {
        /// The signature or manifest file.
        path: PathBuf,
        /// Why verification failed.
        reason: String,
    },
    /// The manifest breaks the format.
    #[error("{}: {reason}", path.display())]
    BadManifest {
        /// The manifest file.
        path: PathBuf,
        /// What rule it breaks.
        reason: String,
    },
    /// One or more volumes fail their size or digest.
    #[error("{}", summary)]
    BadVolumes {
        /// Human summary naming every bad volume.
        summary: String,
    },
    /// The data stream breaks the format or disagrees with the manifest.
    #[error("{volume}: {reason}")]
    BadStream {
        /// Where in the bundle (volume name or "tar stream").
        volume: String,
        /// What is wrong.
        reason: String,
    },
    /// A file's content differs from the manifest.
    #[error("{path}: {reason}")]
    BadFile {
        /// The file's path in the bundle.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Installing would go back to an older version.
    #[error(
        "{}: version {installed} of {name:?} is installed; refusing to install the older version {offered} (pass --allow-downgrade to do it anyway)",
        path.display()
    )]
    Downgrade {
        /// The destination.
        path: PathBuf,
        /// Bundle name.
        name: String,
        /// Installed version.
        installed: u64,
        /// Offered version.
        offered: u64,
    },
    /// An installed model differs from its receipt.
    #[error("{}: {count} problem(s) against the receipt; the first: {first}", path.display())]
    ReceiptMismatch {
        /// The installed directory.
        path: PathBuf,
        /// Number of problems.
        count: usize,
        /// The first problem.
        first: String,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl AsRef<Path>, source: io::Error) -> Error {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// The documented exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Io { .. } | Error::NoSpace { .. } | Error::SourceChanged { .. } => {
                EXIT_OPERATIONAL
            }
            Error::Key { source, .. } => match source.kind() {
                KeyError::BadSignature
                | KeyError::BadGlobalSignature
                | KeyError::KeyIdMismatch { .. } => EXIT_VERIFY,
                _ => EXIT_OPERATIONAL,
            },
            Error::Source { .. } => EXIT_OPERATIONAL,
            Error::Usage(_) => EXIT_USAGE,
            Error::ModelChecks { .. }
            | Error::MissingSignature { .. }
            | Error::UntrustedKey { .. }
            | Error::BadSignature { .. }
            | Error::BadManifest { .. }
            | Error::BadVolumes { .. }
            | Error::BadStream { .. }
            | Error::BadFile { .. }
            | Error::Downgrade { .. }
            | Error::ReceiptMismatch { .. } => EXIT_VERIFY,
        }
    }

    /// A stable machine-readable name for the variant, used in JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::NoSpace { .. } => "no-space",
            Error::Usage(_) => "usage",
            Error::Key { .. } => "key",
            Error::Source { .. } => "source",
            Error::SourceChanged { .. } => "source-changed",
            Error::ModelChecks { .. } => "model-checks",
            Error::MissingSignature { .. } => "missing-signature",
            Error::UntrustedKey { .. } => "untrusted-key",
            Error::BadSignature { .. } => "bad-signature",
            Error::BadManifest { .. } => "bad-manifest",
            Error::BadVolumes { .. } => "bad-volumes",
            Error::BadStream { .. } => "bad-stream",
            Error::BadFile { .. } => "bad-file",
            Error::Downgrade { .. } => "downgrade",
            Error::ReceiptMismatch { .. } => "receipt-mismatch",
        }
    }

    /// What the operator should do next, when there is something useful to say.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            Error::NoSpace { .. } => "free space on the destination filesystem or unpack elsewhere".into(),
            Error::MissingSignature { .. } => "copy manifest.json.minisig from the staging host again".into(),
            Error::UntrustedKey { .. } => {
                "check the signer with your key custodian; add its .pub to the trust directory only if it is genuine".into()
            }
            Error::BadSignature { .. } | Error::BadManifest { .. } => {
                "copy manifest.json and manifest.json.minisig from the staging host again".into()
            }
            Error::BadVolumes { .. } => "copy the named volume(s) again from the staging host; the others are good".into(),
            Error::BadStream { .. } | Error::BadFile { .. } => {
                "the bundle is damaged or was built by a hostile packer: do not use it; pack and copy it again".into()
            }
            Error::SourceChanged { .. } => "stop whatever writes to the model directory, then pack again".into(),
            Error::ReceiptMismatch { .. } => "unpack the model again from its bundle".into(),
            Error::ModelChecks { .. } => {
                "fix the files named above (each finding says how) and pack again; --no-model-checks packs anyway".into()
            }
            _ => return None,
        })
    }
}

/// Formats a byte count the way people read disk sizes (GiB etc., one decimal).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Result with the library error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
