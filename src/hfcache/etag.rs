//! Etag hashing: the git blob id and the SHA-256 that name a blob, computed as bytes go by.
//! Which kind a name is lives with the other name rules ([`super::names::EtagKind`]).

use std::io;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::layout;
use super::names::EtagKind;
use crate::inspect::values::{self, FileScan, Scanner};
use crate::progress::Progress;

/// What the packer does about one file's Hugging Face etag (its blob name) while it hashes it
/// (`pack::source` decides it, `pack::write` does it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtagCheck {
    /// The content must hash to this etag (SHA-256 for 64 hex digits, the git blob id for 40);
    /// otherwise the pack fails with [`crate::error::Error::BlobMismatch`].
    Expect(std::sync::Arc<str>),
    /// Nothing names the file: compute its etag by [`EtagKind::for_size`].
    Compute,
}

/// The git blob id of a stream of known length, computed as the bytes go by.
#[derive(Clone)]
pub struct GitBlobSha1(Sha1);

impl GitBlobSha1 {
    /// Starts the hash of a `len`-byte blob (the `blob <len>\0` header).
    pub fn new(len: u64) -> GitBlobSha1 {
        let mut h = Sha1::new();
        h.update(format!("blob {len}\0").as_bytes());
        GitBlobSha1(h)
    }

    /// More content.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The 40-hex id.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// Hashes the file at `path` the way an etag of `kind` names it.
///
/// A final symlink is followed (a blob may be a link into the cache-wide shared store), but
/// only a regular file is read: the open does not block on a FIFO, a device such as
/// `/dev/zero` is refused, and at most the size the open file reports is read (one byte more
/// only to notice growth), so a hostile blob cannot keep the reader busy forever.
pub fn hash_file(path: &Path, kind: EtagKind, progress: &dyn Progress) -> io::Result<String> {
    hash_and_scan(path, kind, None, progress).map(|(etag, _)| etag)
}

/// [`hash_file`], and when `scan_as` names the blob as a model file (its path in a snapshot)
/// the value scan ([`crate::inspect::values`]) in the same read.
///
/// A file whose size changes while it is read fails with a [`SizeChanged`] inside the
/// `io::Error` (kind `Other`).
pub fn hash_and_scan(
    path: &Path,
    kind: EtagKind,
    scan_as: Option<&str>,
    progress: &dyn Progress,
) -> io::Result<(String, Option<FileScan>)> {
    let (f, len) = layout::open_regular(path, true)?;
    let mut scanner = match scan_as {
        Some(rel) => values::scanner_for(rel, &f, len)?,
        None => None,
    };
    let mut sha256 = Sha256::new();
    let mut git = GitBlobSha1::new(len);
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    // A blob read cold leaves the page cache as it found it, a warm one stays cached
    // ([`crate::writeback::ReadBehind`]).
    let mut behind = crate::writeback::ReadBehind::new();
    // At most one byte past the size the open file reported (to notice growth).
    let limit = len.saturating_add(1);
    while total < limit {
        let want = (limit - total).min(buf.len() as u64) as usize;
        let n = match behind.read_at(&f, &mut buf[..want], total) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        match kind {
            EtagKind::GitSha1 => git.update(&buf[..n]),
            EtagKind::Sha256 => sha256.update(&buf[..n]),
        }
        if let Some(s) = &mut scanner {
            s.update(&buf[..n]);
        }
        total += n as u64;
        progress.advance(n as u64);
    }
    behind.finish(&f, total);
    if total != len {
        return Err(io::Error::other(SizeChanged {
            before: len,
            read: total,
        }));
    }
    let etag = match kind {
        EtagKind::GitSha1 => git.finish(),
        EtagKind::Sha256 => hex::encode(sha256.finalize()),
    };
    Ok((etag, scanner.and_then(Scanner::finish)))
}

/// A file whose size changed while [`hash_and_scan`] read it (typed inside its `io::Error`):
/// its size when opened, and the bytes read (at most one past that size).
#[derive(Debug)]
pub(crate) struct SizeChanged {
    before: u64,
    read: u64,
}

impl std::fmt::Display for SizeChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let before = self.before;
        if self.read > before {
            write!(
                f,
                "changed size while being read ({before} then more than {before} bytes)"
            )
        } else {
            write!(
                f,
                "changed size while being read ({before} then {} bytes)",
                self.read
            )
        }
    }
}

impl std::error::Error for SizeChanged {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_known_answers() {
        // `git hash-object` of "Hello, World!" (huggingface_hub's git_hash docstring).
        let mut g = GitBlobSha1::new(13);
        g.update(b"Hello, ");
        g.update(b"World!");
        assert_eq!(g.finish(), "b45ef6fec89518d314f546fd6c3025367b721684");
        // The empty blob.
        assert_eq!(
            GitBlobSha1::new(0).finish(),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
    }

    #[test]
    fn a_blob_that_is_dev_zero_or_a_fifo_is_refused_not_read_forever() {
        let t = tempfile::tempdir().unwrap();
        let link = t.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = hash_file(&link, EtagKind::Sha256, &crate::progress::Silent).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let fifo = t.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let err = hash_file(&fifo, EtagKind::GitSha1, &crate::progress::Silent).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
