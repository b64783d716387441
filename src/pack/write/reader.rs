//! The reader room of the volume writer: the calling thread reads each source file once, in
//! stream order, hashes it (SHA-256, the Hugging Face etag when asked, the value scan of a
//! model file) and packs its bytes for the writer thread ([`super::batch::Outbox`]); two
//! read-ahead threads ([`load_ahead`]) read the small files the scan did not keep. A file that
//! changes while it is read fails the pack. It knows nothing of tar, zstd or volumes.

use std::borrow::Cow;
use std::fs::File;
use std::path::Path;

use crossbeam_channel::{Receiver, Sender};
use sha2::{Digest, Sha256};

use super::batch::{BUFFER_SIZE, Item, Outbox};
use crate::error::{Error, Result};
use crate::hfcache::EtagCheck;
use crate::hfcache::{EtagKind, GitBlobSha1};
use crate::inspect::values::{self, FileScan, Layout, Scanner};
use crate::inspect::{TreeChecks, format};
use crate::progress::Progress;
use crate::scan::{Prefetched, ScanEntry};

/// What [`read_file`] computed.
pub(super) struct FileDigests {
    pub(super) sha256: [u8; 32],
    /// The verified or computed etag, when one was asked for.
    pub(super) etag: Option<String>,
    /// The value scan, when one was asked for and the file has a layout.
    pub(super) values: Option<FileScan>,
}

/// A value scanner for the file `path` (in the bundle) open as `file`, `size` bytes: when
/// `scan` asks for one, its name or first bytes make it a model file ([`Layout::of`]) and its
/// header passes the model checks. Reads the header through positioned reads, leaving the
/// file's offset alone.
fn scanner_for(
    file: &File,
    source: &Path,
    path: &str,
    size: u64,
    scan: bool,
) -> Result<Option<Scanner>> {
    if !scan {
        return Ok(None);
    }
    let layout = Layout::of(path, file, size).map_err(|e| Error::io(source, e))?;
    Ok(layout.map(Scanner::new))
}

/// The digests of one file, taken as its bytes go by: SHA-256, the git blob id when the etag
/// check needs it, the value scan when one was asked for.
struct Digester {
    sha256: Sha256,
    git: Option<GitBlobSha1>,
    scanner: Option<Scanner>,
}

impl Digester {
    fn new(etag: Option<&EtagCheck>, size: u64, scanner: Option<Scanner>) -> Self {
        Digester {
            sha256: Sha256::new(),
            git: wants_git_sha1(etag, size).then(|| GitBlobSha1::new(size)),
            scanner,
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        self.sha256.update(bytes);
        if let Some(g) = &mut self.git {
            g.update(bytes);
        }
        if let Some(s) = &mut self.scanner {
            s.update(bytes);
        }
    }

    /// The digests, the etag checked or computed as `etag` asks (`path` in the bundle, read
    /// from `source`).
    fn finish(self, etag: Option<&EtagCheck>, path: &str, source: &Path) -> Result<FileDigests> {
        let sha256: [u8; 32] = self.sha256.finalize().into();
        let etag = match etag {
            None => None,
            Some(_) => settle_etag(
                etag,
                self.git.map(GitBlobSha1::finish),
                &hex::encode(sha256),
                path,
                source,
            )?,
        };
        Ok(FileDigests {
            sha256,
            etag,
            values: self.scanner.and_then(Scanner::finish),
        })
    }
}

/// Whether the value scan, when `scan` asks for it, reads the file `path` (in the bundle)
/// whose bytes are at hand (`bytes`, the whole file): a model file by its name or first bytes,
/// which is read from the file itself (the scanner reads its header there), not sent from
/// these bytes.
fn value_scanned(scan: bool, path: &str, bytes: &[u8]) -> bool {
    scan && format::has_values_in(path, bytes, bytes.len() as u64)
}

/// Whether the etag check needs the git blob id (the etag of a small file).
fn wants_git_sha1(etag: Option<&EtagCheck>, size: u64) -> bool {
    match etag {
        Some(EtagCheck::Expect(e)) => EtagKind::of(e) == Some(EtagKind::GitSha1),
        Some(EtagCheck::Compute) => EtagKind::for_size(size) == EtagKind::GitSha1,
        None => false,
    }
}

/// The file's etag as `etag` asks: checked against the expected one (a mismatch is
/// [`Error::BlobMismatch`]), or computed; from the git blob id when one was computed, else the
/// SHA-256.
fn settle_etag(
    etag: Option<&EtagCheck>,
    git: Option<String>,
    sha256: &str,
    path: &str,
    source: &Path,
) -> Result<Option<String>> {
    Ok(match etag {
        None => None,
        Some(EtagCheck::Compute) => Some(git.unwrap_or_else(|| sha256.to_string())),
        Some(EtagCheck::Expect(want)) => {
            let actual = git.unwrap_or_else(|| sha256.to_string());
            if *actual != **want {
                return Err(Error::BlobMismatch {
                    repo_path: path.to_string(),
                    blob: source.to_path_buf(),
                    etag: want.to_string(),
                    actual,
                });
            }
            Some(actual)
        }
    })
}

/// SHA-256 of the model file at `source` (`path` in the bundle, `size` bytes as scanned) and
/// its etag checked or computed as `etag` asks, read once: for the files a delta does not
/// stream (taken from the base), whose digests go into the manifest all the same.
pub fn digest_file(
    source: &Path,
    path: &str,
    size: u64,
    etag: Option<&EtagCheck>,
) -> Result<(String, Option<String>)> {
    digest_and_scan(source, path, size, etag, false).map(|(sha256, etag, _)| (sha256, etag))
}

/// [`digest_file`], and with `scan` the value scan of a model file in the same read.
pub fn digest_and_scan(
    source: &Path,
    path: &str,
    size: u64,
    etag: Option<&EtagCheck>,
    scan: bool,
) -> Result<(String, Option<String>, Option<FileScan>)> {
    let file = crate::scan::open_source(source, path).map_err(|e| Error::io(source, e))?;
    let len = file.metadata().map_err(|e| Error::io(source, e))?.len();
    if len != size {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: format!("size went from {size} to {len} bytes since the scan"),
        });
    }
    let mut digester = Digester::new(etag, size, scanner_for(&file, source, path, size, scan)?);
    let mut buf = vec![0u8; BUFFER_SIZE.min(size as usize)];
    let mut pos = 0u64;
    while pos < size {
        let n = (size - pos).min(BUFFER_SIZE as u64) as usize;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf[..n], pos)
            .map_err(|e| Error::io(source, e))?;
        digester.update(&buf[..n]);
        pos += n as u64;
    }
    let d = digester.finish(etag, path, source)?;
    Ok((hex::encode(d.sha256), d.etag, d.values))
}

/// Reads one source file once: hashes it, sends its buffers, and checks it did not change. With
/// `etag`, also checks the content against the etag (or computes one), and with `scan` runs
/// the value scan on a model file, in the same pass.
#[allow(clippy::too_many_arguments)]
pub(super) fn read_file(
    source: &Path,
    path: &str,
    size: u64,
    etag: Option<&EtagCheck>,
    scan: bool,
    opener: &mut crate::scan::SourceOpener,
    out: &mut Outbox<'_, '_>,
    progress: &dyn Progress,
) -> Result<Option<FileDigests>> {
    // The `fstat` that checked the file is regular is the "before" of the change check.
    let (file, before) = opener
        .open_stat(source, path)
        .map_err(|e| Error::io(source, e))?;
    if before.st_size as u64 != size {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: format!(
                "size went from {size} to {} bytes since the scan",
                before.st_size
            ),
        });
    }
    let grew = || Error::SourceChanged {
        path: source.to_path_buf(),
        what: format!("grew past {size} bytes while being read"),
    };
    let mut digester = Digester::new(etag, size, scanner_for(&file, source, path, size, scan)?);
    // A model read cold leaves the page cache as it found it (`ReadBehind`).
    let mut behind = crate::writeback::ReadBehind::new();
    let mut total: u64 = 0;
    // Whether a read came back short of a byte asked past the declared size: the file ended
    // there (a regular file's read is short only at its end), so no probe read is needed.
    let mut ended = false;
    while total < size {
        let Ok(buf) = out.room() else {
            // The writer thread failed; its error is reported by the caller.
            return Ok(None);
        };
        let want = (buf.len() as u64).min(size - total) as usize;
        // One byte more than is left, when the buffer has room for it: the read that takes
        // the last bytes also tells whether the file goes on (one read a small file, not two).
        let ask = if buf.len() > want { want + 1 } else { want };
        let n = behind
            .read_at(&file, &mut buf[..ask], total)
            .map_err(|e| Error::io(source, e))?;
        if n == 0 {
            return Err(Error::SourceChanged {
                path: source.to_path_buf(),
                what: format!("ended after {total} of {size} bytes"),
            });
        }
        if n > want {
            return Err(grew());
        }
        ended = ask > want && n < ask;
        digester.update(&buf[..n]);
        out.filled(n);
        total += n as u64;
        progress.advance(n as u64);
    }
    // Probe for growth past the declared size, unless the last read already saw the end.
    let mut probe = [0u8; 1];
    if !(ended && total == size)
        && std::os::unix::fs::FileExt::read_at(&file, &mut probe, total)
            .map_err(|e| Error::io(source, e))?
            != 0
    {
        return Err(grew());
    }
    behind.finish(&file, total);
    let after = rustix::fs::fstat(&file).map_err(|e| Error::io(source, e.into()))?;
    if !crate::scan::same_state(&before, &after) {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: "its size or modification time changed while it was read".into(),
        });
    }
    digester.finish(etag, path, source).map(Some)
}

/// Sends the bytes the scan read of one file ([`Prefetched`]) as [`read_file`] sends what it
/// reads, hashing them and checking or computing the etag as `etag` asks; the file is not
/// opened again.
fn send_prefetched(
    bytes: &[u8],
    source: &Path,
    path: &str,
    etag: Option<&EtagCheck>,
    out: &mut Outbox<'_, '_>,
    progress: &dyn Progress,
) -> Result<Option<FileDigests>> {
    let mut digester = Digester::new(etag, bytes.len() as u64, None);
    digester.update(bytes);
    let mut rest = bytes;
    while !rest.is_empty() {
        let Ok(room) = out.room() else {
            return Ok(None);
        };
        let n = room.len().min(rest.len());
        room[..n].copy_from_slice(&rest[..n]);
        out.filled(n);
        rest = &rest[n..];
    }
    progress.advance(bytes.len() as u64);
    digester.finish(etag, path, source).map(Some)
}

/// What a read-ahead thread hands over: each file's bytes, or `None` when the reading thread is
/// to read it itself.
pub(super) type LoadBatch = Vec<Option<std::sync::Arc<[u8]>>>;

/// Small files a read-ahead thread hands over at once.
pub(super) const LOAD_BATCH: usize = 64;
/// Read-ahead threads ([`load_ahead`]), taking the batches in turn.
pub(super) const LOADERS: usize = 2;
/// Batches the read-ahead thread may have waiting (with [`LOAD_BATCH`] files of at most
/// [`crate::scan::PREFETCH_FILE_MAX`] bytes: 16 MiB at most, a few hundred KiB for small files).
pub(super) const LOAD_BATCHES: usize = 4;

/// Whether the read-ahead thread reads `e` for the reading thread ([`load_ahead`]): a small
/// file whose bytes the scan did not keep, and whose name does not say the value scan reads it
/// (the bytes of one whose content says so are not used: [`value_scanned`]).
fn loads_ahead(e: &StreamEntry<'_>, scan_values: bool) -> bool {
    matches!(e, StreamEntry::File { path, size, prefetched: None, .. }
        if *size <= crate::scan::PREFETCH_FILE_MAX
            && !(scan_values && values::named_for_scan(path)))
}

/// The read-ahead thread: reads whole, in stream order, the small files the scan did not keep
/// (past its budget: the files of a tree of a million small files), as the scan would have
/// ([`crate::scan::Prefetched`]: opened by the packer's rules, exactly the scanned size,
/// unchanged by its `fstat` after the read), so their opens and reads run beside the reading
/// thread's hashing instead of before it. `None` for a file that could not be read so: the
/// reading thread reads it itself and reports what is wrong. Stops when the reading thread
/// stops taking batches; holds at most [`LOAD_BATCHES`] batches, so memory stays flat.
///
/// A file whose model checks the scan left to this pass ([`ScanEntry::File::checks_left`]) is
/// checked here, on the handle that read it, with the bytes read (the scan only found its size):
/// its one open. Returns those checks; a file it could not read so is left to the reading
/// thread, which has it checked by path ([`read_entries`]).
pub(super) fn load_ahead(
    stream: &Stream<'_>,
    scan_values: bool,
    part: usize,
    tx: Sender<LoadBatch>,
) -> TreeChecks {
    let mut checks = TreeChecks::default();
    let mut opener = crate::scan::SourceOpener::default();
    let mut batch = Vec::with_capacity(LOAD_BATCH);
    let mine = stream
        .iter()
        .filter(|e| loads_ahead(e, scan_values))
        .enumerate()
        .filter(|(i, _)| i / LOAD_BATCH % LOADERS == part)
        .map(|(_, e)| e);
    for e in mine {
        let StreamEntry::File {
            source,
            path,
            size,
            checks_left,
            seen,
            ..
        } = &e
        else {
            continue;
        };
        let through_link = source.through_link();
        let source = source.path(path);
        let read = match seen {
            // Found by the scan's `fstatat`: opened and read unchecked, its one `fstat` after
            // the read shows it is that regular file, unchanged.
            Some(seen) => opener.open_unchecked(&source, path).ok().and_then(|file| {
                let bytes = crate::scan::read_whole(&file, *size)?;
                seen.still(&file, *size).then_some((file, bytes))
            }),
            None => opener.open_stat(&source, path).ok().and_then(|(file, st)| {
                let bytes = (st.st_size as u64 == *size)
                    .then(|| crate::scan::read_whole(&file, *size))
                    .flatten()?;
                crate::scan::unchanged(&file, &st).then_some((file, bytes))
            }),
        };
        let loaded = read.map(|(file, bytes)| {
            if *checks_left {
                match through_link {
                    // A Hugging Face snapshot's file, read as its blob.
                    true => checks.opened_through_link(path, &source, &file, *size, Some(&bytes)),
                    false => checks.opened_read(path, &source, &file, *size, Some(&bytes)),
                }
            }
            bytes
        });
        batch.push(loaded);
        if batch.len() == LOAD_BATCH
            && tx
                .send(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(LOAD_BATCH),
                ))
                .is_err()
        {
            return checks;
        }
    }
    let _ = tx.send(batch);
    checks
}

/// The reading thread's side of [`load_ahead`]: the files its threads read, one at a time, in
/// order (batch `k` from thread `k % LOADERS`).
pub(super) struct Loaded {
    rx: Vec<Receiver<LoadBatch>>,
    /// Batches taken so far.
    taken: usize,
    batch: std::vec::IntoIter<Option<std::sync::Arc<[u8]>>>,
}

impl Loaded {
    /// The reading thread's side of the read-ahead threads whose batches arrive on `rx`.
    pub(super) fn new(rx: Vec<Receiver<LoadBatch>>) -> Loaded {
        Loaded {
            rx,
            taken: 0,
            batch: Vec::new().into_iter(),
        }
    }

    /// The bytes of the next file [`loads_ahead`] chose, if a read-ahead thread read it.
    fn next(&mut self) -> Option<std::sync::Arc<[u8]>> {
        loop {
            if let Some(loaded) = self.batch.next() {
                return loaded;
            }
            let batch = self.rx[self.taken % LOADERS].recv().ok()?;
            self.taken += 1;
            self.batch = batch.into_iter();
        }
    }
}

/// One entry of the stream, in bundle order.
#[derive(Clone, Debug)]
pub enum StreamEntry<'a> {
    /// A directory.
    Dir(Cow<'a, str>),
    /// A file: its path in the bundle, where its bytes are on this host, its size and mode,
    /// and what to do about its Hugging Face etag while it is hashed (`None`: nothing).
    File {
        /// The path in the bundle (borrowed from the model's list when it is the model's).
        path: Cow<'a, str>,
        /// Where its bytes are.
        source: Source<'a>,
        /// Its size, from the scan (the read is held to it).
        size: u64,
        /// Its executable bit.
        executable: bool,
        /// Its etag check.
        etag: Option<&'a EtagCheck>,
        /// Its bytes, when the scan read them ([`Prefetched`]): the file is not opened again.
        prefetched: Option<Prefetched>,
        /// Its model checks are left to this pass ([`ScanEntry::File::checks_left`]).
        checks_left: bool,
        /// What the scan's `fstatat` saw of it, when the scan did not open it
        /// ([`ScanEntry::File::seen`]).
        seen: Option<crate::scan::Seen>,
    },
}

impl StreamEntry<'_> {
    /// The entry's path.
    pub fn path(&self) -> &str {
        match self {
            StreamEntry::Dir(p) => p,
            StreamEntry::File { path, .. } => path,
        }
    }

    /// The entry, borrowing what it owns.
    fn borrowed(&self) -> StreamEntry<'_> {
        match self {
            StreamEntry::Dir(p) => StreamEntry::Dir(Cow::Borrowed(p)),
            StreamEntry::File {
                path,
                source,
                size,
                executable,
                etag,
                prefetched,
                checks_left,
                seen,
            } => StreamEntry::File {
                path: Cow::Borrowed(path),
                source: match source {
                    Source::At(p) => Source::At(Cow::Borrowed(p)),
                    Source::Linked(link) => Source::Linked(link),
                    Source::Below(root) => Source::Below(root),
                },
                size: *size,
                executable: *executable,
                etag: *etag,
                prefetched: prefetched.clone(),
                checks_left: *checks_left,
                seen: *seen,
            },
        }
    }
}

/// Where a stream file's bytes are on this host.
#[derive(Clone, Debug)]
pub enum Source<'a> {
    /// At this path (a delta's patch).
    At(Cow<'a, Path>),
    /// Where this link of the model leads (a link's target, a blob of a Hugging Face cache):
    /// a blob's path is made when the file is opened, not each time the stream is walked.
    Linked(&'a crate::scan::Link),
    /// Below this model directory, at the entry's path in the bundle: the path is made when
    /// the file is opened, not held for every file of the model.
    Below(&'a Path),
}

impl Source<'_> {
    /// Whether the file is reached through a link of the model (its checks then resolve the
    /// link, [`TreeChecks::opened_through_link`]).
    fn through_link(&self) -> bool {
        matches!(self, Source::Linked(_))
    }

    /// The path of the file `rel` (its path in the bundle).
    pub fn path(&self, rel: &str) -> Cow<'_, Path> {
        match self {
            Source::At(p) => Cow::Borrowed(p),
            Source::Linked(link) => link.path(),
            Source::Below(root) => Cow::Owned(root.join(rel)),
        }
    }
}

/// The entries a volume writer streams, in bundle order.
pub enum Stream<'a> {
    /// Listed one by one (a delta's: carried files and patches).
    Listed(Vec<StreamEntry<'a>>),
    /// A model's own entries ([`model_entries`]), seen as stream entries as they are read: a
    /// model of a million files is not copied into a second list.
    Model {
        /// The model's entries.
        entries: &'a [ScanEntry],
        /// The etag check of each file, in order (empty: none).
        etags: &'a [EtagCheck],
        /// The model directory, below which a file that is not a link is read.
        root: &'a Path,
    },
}

impl Stream<'_> {
    /// The entries, in order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = StreamEntry<'_>> + Send + '_> {
        match self {
            Stream::Listed(list) => Box::new(list.iter().map(StreamEntry::borrowed)),
            Stream::Model {
                entries,
                etags,
                root,
            } => Box::new(model_entries(entries, etags, root)),
        }
    }
}

/// A model's entries (`entries`, scanned below `root`, with one etag check a file in `etags`
/// or none) as the writer takes them.
pub fn model_entries<'m>(
    entries: &'m [ScanEntry],
    etags: &'m [EtagCheck],
    root: &'m Path,
) -> impl Iterator<Item = StreamEntry<'m>> + Send + 'm {
    let mut file_index = 0;
    entries.iter().map(move |e| match e {
        ScanEntry::Dir { path } => StreamEntry::Dir(Cow::Borrowed(path)),
        ScanEntry::File {
            path,
            link,
            size,
            executable,
            prefetched,
            checks_left,
            seen,
            ..
        } => {
            let etag = etags.get(file_index);
            file_index += 1;
            StreamEntry::File {
                path: Cow::Borrowed(path),
                source: match link {
                    Some(l) => Source::Linked(l),
                    None => Source::Below(root),
                },
                size: *size,
                executable: *executable,
                etag,
                prefetched: prefetched.clone(),
                checks_left: *checks_left,
                seen: *seen,
            }
        }
    })
}

/// What the reading thread found of the files it read, in stream order: a SHA-256 a file, and
/// the etags and value scans of the files that have them, by their index among the files. A
/// model of a million files holds 32 bytes a file here (their paths, sizes and modes are the
/// stream's: not copied again).
#[derive(Debug, Default)]
pub struct WrittenFiles {
    /// SHA-256 of each file's bytes as read.
    pub sha256: Vec<[u8; 32]>,
    /// The etag of each file one was computed for ([`EtagCheck::Compute`]), by index; a file
    /// whose etag was checked equal to the one expected ([`EtagCheck::Expect`]) has that one,
    /// not kept again here (a dataset of a million files).
    pub etags: Vec<(usize, String)>,
    /// The value scan of each model file that had one, by index.
    pub values: Vec<(usize, Box<FileScan>)>,
    /// The model checks of the files the scan left to this pass
    /// ([`ScanEntry::File::checks_left`]), decided on by the caller at its end.
    pub checks: TreeChecks,
}

impl WrittenFiles {
    /// One [`WrittenFile`] a file, in order.
    pub fn into_files(self) -> Vec<WrittenFile> {
        let mut etags = self.etags.into_iter().peekable();
        let mut values = self.values.into_iter().peekable();
        self.sha256
            .into_iter()
            .enumerate()
            .map(|(i, sha256)| WrittenFile {
                sha256,
                etag: etags.next_if(|(at, _)| *at == i).map(|(_, e)| e),
                values: values.next_if(|(at, _)| *at == i).map(|(_, v)| v),
            })
            .collect()
    }
}

/// One file as written (its path, size and mode are the stream entry's).
#[derive(Clone, Debug)]
pub struct WrittenFile {
    /// SHA-256 of its bytes as read.
    pub sha256: [u8; 32],
    /// Its etag, checked or computed, when one was asked for.
    pub etag: Option<String>,
    /// Its value scan, when one was asked for and it is a model file (boxed: most files have
    /// none, and the list holds one entry a file).
    pub values: Option<Box<FileScan>>,
}

/// The reading thread's loop: every entry of `entries` in stream order, each file's bytes read
/// once (or taken from the scan or a read-ahead thread) and handed to the writer thread through
/// `out`; what was read is added to `files` and `directories`. Returns early, `Ok`, when the
/// writer thread stopped (the caller reports its error).
pub(super) fn read_entries<'s>(
    stream: &'s Stream<'_>,
    scan_values: bool,
    out: &mut Outbox<'_, 's>,
    loaded: &mut Loaded,
    files: &mut WrittenFiles,
    directories: &mut Vec<String>,
    progress: &dyn Progress,
) -> Result<()> {
    let mut opener = crate::scan::SourceOpener::default();
    for entry in stream.iter() {
        match &entry {
            StreamEntry::Dir(path) => {
                directories.push(path.to_string());
                if out.push(Item::Dir(path.clone())).is_err() {
                    return Ok(());
                }
            }
            StreamEntry::File {
                path,
                source,
                size,
                executable,
                etag,
                prefetched,
                checks_left,
                ..
            } => {
                progress.item(path);
                let begin = Item::Begin {
                    path: path.clone(),
                    size: *size,
                    executable: *executable,
                };
                if out.push(begin).is_err() {
                    return Ok(());
                }
                // The value scan reads a model file's header from the file itself.
                let kept = prefetched
                    .as_ref()
                    .map(|p| p.bytes())
                    .filter(|b| b.len() as u64 == *size);
                let ahead = match loads_ahead(&entry, scan_values) {
                    true => loaded.next(),
                    false => None,
                };
                // A file whose checks were left to this pass and that no read-ahead thread
                // read (and checked) is read below, or fails the pack: checked by path at the
                // end.
                if *checks_left && ahead.is_none() {
                    files.checks.by_path(path, !source.through_link());
                }
                let at_hand = kept
                    .or(ahead.as_deref())
                    .filter(|b| !value_scanned(scan_values, path, b));
                let source = source.path(path);
                let digests = match at_hand {
                    Some(bytes) => send_prefetched(bytes, &source, path, *etag, out, progress)?,
                    None => read_file(
                        &source,
                        path,
                        *size,
                        *etag,
                        scan_values,
                        &mut opener,
                        out,
                        progress,
                    )?,
                };
                let Some(digests) = digests else {
                    return Ok(());
                };
                if out.push(Item::End).is_err() {
                    return Ok(());
                }
                let index = files.sha256.len();
                files.sha256.push(digests.sha256);
                // An etag that was checked equal to the expected one is not kept again: the
                // manifest takes the expected one ([`WrittenFiles::etags`]).
                if let Some(computed) = digests.etag
                    && !matches!(etag, Some(EtagCheck::Expect(_)))
                {
                    files.etags.push((index, computed));
                }
                if let Some(values) = digests.values {
                    files.values.push((index, Box::new(values)));
                }
            }
        }
    }
    let _ = out.send();
    Ok(())
}
