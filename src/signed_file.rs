//! A file signed with minisign (`airlock sign FILE`, `airlock cosign FILE`): where its
//! signatures are, reading them without trusting them, and [`verify`], the library half of
//! `airlock verify FILE`: `FILE.minisig` checked against the trust set the way `minisign -Vm
//! FILE -p KEY.pub` checks it.
//!
//! With a TUF root a file is held to the same rule as a bundle's manifest (FORMAT.md section
//! 18.2): the root must be current, and the threshold of distinct keys of its `targets` role
//! must sign, counting `FILE.minisig` and the co-signatures `FILE.KEYID.minisig` beside it,
//! read and counted by the code that reads and counts a bundle's `manifest.json.KEYID.minisig`
//! ([`open::read_cosignatures`], [`Policy::require`]). Only the hashing differs: the file is
//! streamed once into its prehash, which the signatures are checked against.

use std::path::{Path, PathBuf};

use crate::bundle::open;
use crate::error::{Error, Result};
use crate::fsio::{self, Follow};
use crate::keys;
use crate::scheme::{Message, Refusal};
use crate::trust::Policy;
use crate::trust::policy::{Counted, SigFile};

/// Largest `.minisig` read (four short lines; minisign's own limits keep it under 10 KiB).
const MAX_SIGNATURE_BYTES: u64 = 16 << 10;

/// `FILE.minisig`: where the signature of `file` is.
pub fn signature_path(file: &Path) -> PathBuf {
    let mut sig_path = file.as_os_str().to_owned();
    sig_path.push(".minisig");
    PathBuf::from(sig_path)
}

/// The path of `name` beside `file`, spelled as the operator spelled `file` (`name` alone
/// for a bare file name, not `./name`).
pub fn beside(file: &Path, name: &std::ffi::OsStr) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(name),
        _ => PathBuf::from(name),
    }
}

/// The file name of `file` (what its co-signatures are named after), or an error for a path
/// without one (`..`, `/`).
pub fn file_name(file: &Path) -> Result<&std::ffi::OsStr> {
    file.file_name().ok_or_else(|| {
        Error::Usage(format!(
            "{}: name the signed file itself (a path that ends in its name)",
            file.display()
        ))
    })
}

/// What [`verify`] found: the signatures that counted, and what the operator should hear.
pub struct Verified {
    /// The signatures that counted, the primary first when it counted.
    pub counted: Counted,
    /// Trusted comments naming another file, co-signatures not read, signatures not counted.
    pub warnings: Vec<String>,
}

/// Verifies `FILE.minisig` and its co-signatures over `file` with the keys of `trust`, to its
/// threshold (module documentation).
///
/// `file` is opened once, without blocking, and checked to be a regular file before its
/// signature is read; the bytes hashed are read through that handle, at most its size.
pub fn verify(file: &Path, trust: &Policy) -> Result<Verified> {
    refuse_special(file)?;
    let (opened, len) =
        fsio::open_regular(file, Follow::Final).map_err(|e| Error::io(file, e.into()))?;
    let sig_path = signature_path(file);
    let text = read_signature(&sig_path, file)?;
    // An expired root vouches for nothing (FORMAT.md section 18.1); a file carries no newer one.
    trust.check_current()?;
    trust.identify(&text).map_err(|e| Error::BadSignature {
        path: sig_path.clone(),
        reason: e.to_string(),
    })?;
    let mut notes = Vec::new();
    let mut cosigs =
        open::read_cosignatures(&fsio::parent_dir(file), file_name(file)?, &mut notes)?;
    for c in &mut cosigs {
        if let Some(name) = c.path.file_name() {
            c.path = beside(file, name);
        }
    }
    let digest = prehash_exactly(opened, len).map_err(|e| Error::io(file, e))?;
    let mut files = vec![SigFile {
        path: sig_path.clone(),
        text,
    }];
    files.extend(cosigs);
    let counted = trust.require(Message::Prehashed(&digest), file, &files, |why| {
        plain_failure(file, &sig_path, why, trust)
    })?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut warnings = Vec::new();
    // minisign's trusted comment names the file it signed: a renamed or swapped file shows.
    for (s, _) in &counted.signatures {
        if let Some(signed) = s
            .comment
            .iter()
            .flat_map(|c| c.split('\t'))
            .find_map(|f| f.strip_prefix("file:"))
            && signed != name
        {
            warnings.push(format!(
                "the signature's trusted comment names the file {signed:?}, not {name:?}: check that this is the file that was signed"
            ));
        }
    }
    warnings.dedup();
    warnings.extend(notes);
    warnings.extend(
        counted
            .not_counted
            .iter()
            .map(|n| format!("{n} (not counted)")),
    );
    Ok(Verified { counted, warnings })
}

/// The error of a plain key set when `FILE.minisig` does not count and no co-signature does
/// (the messages a single signature has always had): signed by a key not in the set, or a
/// signature that does not verify this file with the key it names.
fn plain_failure(file: &Path, sig_path: &Path, why: Option<Refusal>, trust: &Policy) -> Error {
    let reason = match why {
        Some(Refusal::UnknownKey { key_id }) => {
            return Error::UntrustedKey {
                path: sig_path.to_path_buf(),
                key_id,
                trusted: trust.labels(),
            };
        }
        Some(Refusal::Malformed(e)) => e,
        Some(Refusal::Invalid { key_id, reason } | Refusal::Unsupported { key_id, reason }) => {
            // A plain key set's keys are labelled by their key id.
            format!(
                "does not verify {} with key {key_id}: {reason}",
                file.display()
            )
        }
        None => "verified on a second look; run the command again".into(),
    };
    Error::BadSignature {
        path: sig_path.to_path_buf(),
        reason,
    }
}

/// The text of the signature file `sig_path` of `file`: a regular file (a final link
/// followed) of at most [`MAX_SIGNATURE_BYTES`], refused before reading otherwise.
pub fn read_signature(sig_path: &Path, file: &Path) -> Result<String> {
    use fsio::Cause;
    refuse_special(sig_path)?;
    let bytes = match fsio::read_capped(sig_path, MAX_SIGNATURE_BYTES, Follow::Final)
        .map_err(fsio::Error::into_cause)
    {
        Ok(bytes) => bytes,
        // A file without a signature beside it is the wrong path or an incomplete copy, not a
        // failed verification (exit 1, as for a bundle path that is not a directory).
        Err(Cause::NotFound) => {
            return Err(Error::io(
                sig_path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "missing: {} is one file, not a bundle (a directory), and is checked by this signature; copy it beside the file, or name the bundle's directory",
                        file.display()
                    ),
                ),
            ));
        }
        // A regular file too large to be a signature is a signature that fails (exit 3).
        Err(Cause::TooLarge(n)) => {
            return Err(Error::BadSignature {
                path: sig_path.to_path_buf(),
                reason: format!(
                    "{n} bytes{}, more than the {MAX_SIGNATURE_BYTES}-byte limit (too large to be a minisign signature)",
                    if n > MAX_SIGNATURE_BYTES + 1 {
                        ""
                    } else {
                        " or more"
                    }
                ),
            });
        }
        // A FIFO, a device or a directory is no signature file at all: the wrong path (exit 1).
        Err(e) => return Err(Error::io(sig_path, e.into())),
    };
    String::from_utf8(bytes).map_err(|_| Error::BadSignature {
        path: sig_path.to_path_buf(),
        reason: "is not a minisign signature (not UTF-8 text)".into(),
    })
}

/// Refuses `path` when it leads (a final link followed) to something that exists and is not a
/// regular file, without opening it: opening a device can act on it (a tape rewinds). The
/// open that follows checks its handle again, for a file swapped in between.
fn refuse_special(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "is {}, not a regular file",
                    fsio::describe_type(m.file_type())
                ),
            ),
        )),
        _ => Ok(()),
    }
}

/// [`keys::prehash`] of the `len` bytes of `file` (its size when it was opened): at most
/// `len + 1` bytes are read, and a file that grew or shrank meanwhile is refused, so the
/// digest is of the file as it was checked, never of bytes without end.
fn prehash_exactly(file: impl std::io::Read, len: u64) -> std::io::Result<[u8; 64]> {
    let mut bounded = file.take(len.saturating_add(1));
    let digest = keys::prehash(&mut bounded)?;
    let read = len.saturating_add(1) - bounded.limit();
    let why = match read.cmp(&len) {
        std::cmp::Ordering::Equal => return Ok(digest),
        std::cmp::Ordering::Greater => format!("grew while it was read ({len} bytes when opened)"),
        std::cmp::Ordering::Less => {
            format!("shrank while it was read ({len} bytes when opened, {read} read)")
        }
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{why}: check it again once nothing writes to it"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_of_exactly_the_size_the_file_had_when_opened() {
        let bytes = b"the release binary".as_slice();
        let len = bytes.len() as u64;
        assert_eq!(
            prehash_exactly(bytes, len).unwrap(),
            keys::prehash(bytes).unwrap()
        );
        // More bytes than the size (a file appended to, or one without end): refused after
        // reading one byte past the size.
        let endless = std::io::repeat(7);
        let e = prehash_exactly(endless, len).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("grew while it was read (18 bytes"),
            "{e}"
        );
        // Fewer (truncated meanwhile).
        let e = prehash_exactly(&bytes[..5], len).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("shrank while it was read (18 bytes when opened, 5 read)"),
            "{e}"
        );
    }
}
