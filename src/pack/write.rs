//! The volume writer: the entries a plan gives → tar → zstd → volumes, with every byte hashed
//! once on the way. It writes what it is given and knows nothing of deltas or manifests.
//!
//! Two threads share the work. The calling thread reads each source file once, hashes it (and
//! checks or computes its Hugging Face etag) and hands the buffers over; the writer thread
//! frames them as tar, compresses and cuts volumes; a third hashes each chunk of the volumes.
//! Buffers travel back for reuse, so memory stays at a few megabytes whatever the model size.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crossbeam_channel::{Receiver, Sender, bounded};
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

use crate::error::{Error, Result};
use crate::fsio;
pub use crate::hfcache::EtagCheck;
use crate::hfcache::{EtagKind, GitBlobSha1};
use crate::inspect::format::{self, Format};
use crate::inspect::values::{self, FileScan, Layout, Scanner};
use crate::manifest::{self, Volume};
use crate::progress::Progress;
use crate::scan::{Prefetched, ScanEntry};
use crate::tar;
use crate::writeback::{FLUSH_EVERY, Flusher};

/// Size of the buffers that carry file data between the threads.
pub const BUFFER_SIZE: usize = 1 << 20;
const BUFFERS: usize = 8;
/// Bytes of input per zstd worker job.
const ZSTD_JOB_SIZE: u32 = 2 << 20;

/// How to compress the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compress {
    /// Store the tar stream as is.
    None,
    /// zstd at this level with this many worker threads (0 = single-threaded).
    Zstd {
        /// zstd level (1..=19).
        level: i32,
        /// zstd worker threads.
        workers: u32,
    },
}

/// Bytes `--compress auto` samples from each large file.
pub const AUTO_SAMPLE_BYTES: u64 = 4 << 20;
/// Files smaller than this are not sampled.
pub const AUTO_SAMPLE_MIN_FILE: u64 = 1 << 20;
/// At most this many files are sampled (spread over the file list).
pub const AUTO_SAMPLE_FILES: usize = 32;
/// The estimated saving below which `--compress auto` stores instead of compressing.
pub const AUTO_MIN_SAVING: f64 = 0.03;

/// Estimates the fraction of the file bytes zstd would save, for `--compress auto`: up to
/// [`AUTO_SAMPLE_BYTES`] from the middle of each file of at least [`AUTO_SAMPLE_MIN_FILE`]
/// bytes (at most [`AUTO_SAMPLE_FILES`] of them) are compressed at level 1, and the savings
/// are weighted by file size. Weights (quantized, or already compressed) gain next to nothing
/// and cost a compression pass; bf16 weights gain about a fifth, and level 1 gains as much as
/// higher levels on them. `None` when no file is large enough to sample.
pub fn estimate_saving(entries: &[ScanEntry]) -> Result<Option<f64>> {
    use std::os::unix::fs::FileExt;
    let large: Vec<(&Path, &str, u64)> = entries
        .iter()
        .filter_map(|e| match e {
            ScanEntry::File {
                source, size, path, ..
            } if *size >= AUTO_SAMPLE_MIN_FILE => Some((source.as_path(), path.as_str(), *size)),
            _ => None,
        })
        .collect();
    if large.is_empty() {
        return Ok(None);
    }
    let step = large.len().div_ceil(AUTO_SAMPLE_FILES);
    let (mut saved, mut total) = (0.0f64, 0.0f64);
    let mut buf = Vec::new();
    for &(path, rel, size) in large.iter().step_by(step) {
        let n = size.min(AUTO_SAMPLE_BYTES);
        let offset = (size - n) / 2 / 4096 * 4096;
        buf.resize(n as usize, 0);
        let f = crate::scan::open_source(path, rel).map_err(|e| Error::io(path, e))?;
        f.read_exact_at(&mut buf, offset)
            .map_err(|e| Error::io(path, e))?;
        let packed = zstd::bulk::compress(&buf, 1).map_err(|e| Error::io(path, e))?;
        let saving = 1.0 - packed.len() as f64 / n as f64;
        saved += saving * size as f64;
        total += size as f64;
    }
    Ok(Some(saved / total))
}

/// One entry event of a [`Batch`]; `Data(n)` is the next `n` bytes of the batch's buffer.
enum Item {
    Dir(String),
    Begin {
        path: String,
        size: u64,
        executable: bool,
    },
    Data(usize),
    End,
}

/// What the reading thread sends the writer thread: entry events and the file bytes they
/// refer to, packed into one pooled buffer. A buffer is sent when it is full (or at most
/// [`BATCH_ITEMS`] events are waiting, or at the end), so many small files travel in one
/// message: one hand-over between the threads per MiB of data, not three per file (with 512-byte
/// files the hand-overs, not the reads, were the pack's cost on a loaded machine).
struct Batch {
    items: Vec<Item>,
    buf: Vec<u8>,
    len: usize,
}

/// Most entry events in one [`Batch`] (a model of empty files fills no buffer).
const BATCH_ITEMS: usize = 4096;

/// The reading thread's side of the hand-over: fills pooled buffers with file bytes and
/// records the entry events that go with them.
struct Outbox<'a> {
    tx: &'a Sender<Batch>,
    pool: &'a Receiver<Vec<u8>>,
    items: Vec<Item>,
    /// The buffer being filled, taken from the pool only when there are bytes to put in it:
    /// every buffer taken must travel back.
    buf: Option<Vec<u8>>,
    len: usize,
}

/// The writer thread stopped (its error is reported by the caller).
struct WriterGone;

impl<'a> Outbox<'a> {
    fn new(tx: &'a Sender<Batch>, pool: &'a Receiver<Vec<u8>>) -> Self {
        Outbox {
            tx,
            pool,
            items: Vec::new(),
            buf: None,
            len: 0,
        }
    }

    /// Records an entry event without data.
    fn push(&mut self, item: Item) -> std::result::Result<(), WriterGone> {
        self.items.push(item);
        if self.items.len() >= BATCH_ITEMS {
            self.send()?;
        }
        Ok(())
    }

    /// Room for the next bytes of the current file (never empty): the rest of the buffer
    /// being filled, or a fresh buffer once it is full.
    fn room(&mut self) -> std::result::Result<&mut [u8], WriterGone> {
        if self.len == BUFFER_SIZE {
            self.send()?;
        }
        let pool = self.pool;
        let buf = self
            .buf
            .get_or_insert_with(|| pool.recv().unwrap_or_else(|_| vec![0u8; BUFFER_SIZE]));
        Ok(&mut buf[self.len..])
    }

    /// The first `n` bytes of [`Outbox::room`] hold the current file's next bytes.
    fn filled(&mut self, n: usize) {
        self.len += n;
        match self.items.last_mut() {
            Some(Item::Data(m)) => *m += n,
            _ => self.items.push(Item::Data(n)),
        }
    }

    /// Sends what is waiting.
    fn send(&mut self) -> std::result::Result<(), WriterGone> {
        if self.items.is_empty() {
            return Ok(());
        }
        let batch = Batch {
            items: std::mem::take(&mut self.items),
            buf: self.buf.take().unwrap_or_default(),
            len: std::mem::take(&mut self.len),
        };
        self.tx.send(batch).map_err(|_| WriterGone)
    }
}

/// Writes volumes, cutting at `volume_size` and at chunk boundaries for the chunk digests.
///
/// The chunk digests are computed by a [`ChunkHasher`] thread from copies of the same bytes, so
/// the writer thread only writes. Format version 2 has no whole-volume digest (the signed chunk
/// digests are the authority, FORMAT.md section 6): a pack makes two SHA-256 passes over the
/// data (files and chunks), where version 1 made three.
struct VolumeWriter {
    dir: PathBuf,
    volume_size: u64,
    chunk_size: u64,
    file: Option<File>,
    in_volume: u64,
    in_chunk: u64,
    chunk_hasher: ChunkHasher,
    /// Chunks cut in the open volume.
    chunks: usize,
    /// Early writeback of the open volume.
    flusher: Flusher,
    since_flush: u64,
    /// Closed volumes, and how many chunk digests belong to each.
    done: Vec<(Volume, usize)>,
}

/// Buffers of volume bytes travelling to the chunk-hashing thread (each [`BUFFER_SIZE`]).
const CHUNK_BUFFERS: usize = 4;

/// Bytes of the stream, and the offsets in them where a chunk ends.
struct ChunkMsg {
    buf: Vec<u8>,
    cuts: Vec<usize>,
}

/// SHA-256 of each chunk of the volume stream, on a thread of its own. Bytes are copied into
/// pooled buffers (a copy costs far less than a hash pass) and digests come back in order when
/// the stream is finished. A buffer travels when it is full, with the chunk ends that fall in
/// it: a bundle with parity has chunks of a few KiB, and a message per chunk made the two
/// threads hand over tens of thousands of times.
///
/// The same thread also takes each chunk's XXH3-64, a non-cryptographic checksum some twenty
/// times cheaper than SHA-256: the parity pass reads the volumes back and checks each unit
/// against it, so the parity is over the bytes written without a third SHA-256 pass (the
/// signed digest stays the authority; a rebuilt unit is checked against it).
struct ChunkHasher {
    tx: Option<Sender<ChunkMsg>>,
    pool: Receiver<Vec<u8>>,
    current: ChunkMsg,
    thread: Option<std::thread::JoinHandle<Vec<(String, u64)>>>,
}

impl ChunkHasher {
    fn new() -> Self {
        let (tx, rx) = bounded::<ChunkMsg>(CHUNK_BUFFERS);
        let (recycle, pool) = bounded::<Vec<u8>>(CHUNK_BUFFERS);
        for _ in 1..CHUNK_BUFFERS {
            let _ = recycle.send(Vec::with_capacity(BUFFER_SIZE));
        }
        let thread = std::thread::spawn(move || {
            let mut digests = Vec::new();
            let mut h = Sha256::new();
            let mut check = Xxh3::new();
            for ChunkMsg { mut buf, cuts } in rx {
                let mut at = 0;
                for cut in cuts {
                    h.update(&buf[at..cut]);
                    check.update(&buf[at..cut]);
                    digests.push((
                        hex::encode(std::mem::take(&mut h).finalize()),
                        check.digest(),
                    ));
                    check.reset();
                    at = cut;
                }
                h.update(&buf[at..]);
                check.update(&buf[at..]);
                buf.clear();
                let _ = recycle.send(buf);
            }
            digests
        });
        ChunkHasher {
            tx: Some(tx),
            pool,
            current: ChunkMsg {
                buf: Vec::with_capacity(BUFFER_SIZE),
                cuts: Vec::new(),
            },
            thread: Some(thread),
        }
    }

    fn gone() -> io::Error {
        io::Error::other("internal error: the chunk-hashing thread stopped")
    }

    fn send_current(&mut self) -> io::Result<()> {
        if self.current.buf.is_empty() && self.current.cuts.is_empty() {
            return Ok(());
        }
        let next = self.pool.recv().map_err(|_| Self::gone())?;
        let full = std::mem::replace(
            &mut self.current,
            ChunkMsg {
                buf: next,
                cuts: Vec::new(),
            },
        );
        let tx = self.tx.as_ref().ok_or_else(Self::gone)?;
        tx.send(full).map_err(|_| Self::gone())
    }

    fn update(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.current.buf.len() == BUFFER_SIZE {
                self.send_current()?;
            }
            let n = bytes.len().min(BUFFER_SIZE - self.current.buf.len());
            self.current.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// The current chunk ends after the bytes given so far.
    fn cut(&mut self) {
        self.current.cuts.push(self.current.buf.len());
    }

    /// Every chunk's digest and checksum, in stream order.
    fn finish(mut self) -> io::Result<Vec<(String, u64)>> {
        self.send_current()?;
        self.tx = None;
        let thread = self.thread.take().expect("joined once");
        thread.join().map_err(|_| Self::gone())
    }
}

fn temp_volume_name(index: usize) -> String {
    format!("volume-{index}.tmp")
}

impl VolumeWriter {
    /// A writer of volumes of `volume_size` bytes, in chunks of `chunk_size`, into `dir`; with
    /// `drop_written`, the volumes' pages leave the page cache once flushed.
    fn new(dir: &Path, volume_size: u64, chunk_size: u64, drop_written: bool) -> Self {
        VolumeWriter {
            dir: dir.to_path_buf(),
            volume_size,
            chunk_size,
            file: None,
            in_volume: 0,
            in_chunk: 0,
            chunk_hasher: ChunkHasher::new(),
            chunks: 0,
            flusher: if drop_written {
                Flusher::dropping()
            } else {
                Flusher::new()
            },
            since_flush: 0,
            done: Vec::new(),
        }
    }

    fn close_volume(&mut self) -> io::Result<()> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        if self.in_chunk > 0 {
            self.chunk_hasher.cut();
            self.chunks += 1;
        }
        file.sync_all()?;
        self.since_flush = 0;
        let index = self.done.len();
        self.done.push((
            Volume {
                name: temp_volume_name(index),
                size: self.in_volume,
                sha256: None,
                chunks: Vec::new(),
            },
            std::mem::take(&mut self.chunks),
        ));
        self.in_volume = 0;
        self.in_chunk = 0;
        Ok(())
    }

    /// The volumes, renamed to their final names, with their chunk digests; and each chunk's
    /// XXH3-64 checksum, per volume.
    fn finish(mut self) -> io::Result<(Vec<Volume>, Vec<Vec<u64>>)> {
        self.close_volume()?;
        if let Some((path, e)) = self.flusher.finish() {
            return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
        }
        let mut digests = self.chunk_hasher.finish()?.into_iter();
        let count = self.done.len();
        // BUNDLE.partial, airlock's own work directory: the volumes are renamed below its
        // handle.
        let dir_fd = crate::fsio::open_dir_path(&self.dir, crate::fsio::Follow::Never)?;
        let mut volumes = Vec::with_capacity(count);
        let mut checks = Vec::with_capacity(count);
        for (i, (mut v, chunks)) in self.done.into_iter().enumerate() {
            let (sha, check): (Vec<String>, Vec<u64>) = digests.by_ref().take(chunks).unzip();
            if sha.len() != chunks {
                return Err(ChunkHasher::gone());
            }
            v.chunks = sha;
            checks.push(check);
            let name = manifest::volume_name(i, count);
            crate::fsio::rename_at(
                &dir_fd,
                v.name.as_str(),
                &dir_fd,
                name.as_str(),
                rustix::fs::RenameFlags::empty(),
            )?;
            v.name = name;
            volumes.push(v);
        }
        Ok((volumes, checks))
    }
}

impl Write for VolumeWriter {
    /// Writes up to the end of the open volume in one call; the chunk ends within are marked
    /// for the hashing thread (with parity a chunk is a few KiB, and a `write` per chunk cost
    /// a system call each).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.file.is_none() {
            let path = self.dir.join(temp_volume_name(self.done.len()));
            self.file = Some(fsio::create_new(&path, 0o644)?);
        }
        let room_volume = self.volume_size - self.in_volume;
        let n = (buf.len() as u64).min(room_volume) as usize;
        let file = self.file.as_mut().expect("opened above");
        file.write_all(&buf[..n])?;
        self.since_flush += n as u64;
        if self.since_flush >= FLUSH_EVERY {
            let path = self.dir.join(temp_volume_name(self.done.len()));
            self.flusher.flush(file, path);
            self.since_flush = 0;
        }
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let m = (rest.len() as u64).min(self.chunk_size - self.in_chunk) as usize;
            self.chunk_hasher.update(&rest[..m])?;
            rest = &rest[m..];
            self.in_chunk += m as u64;
            if self.in_chunk == self.chunk_size {
                self.chunk_hasher.cut();
                self.chunks += 1;
                self.in_chunk = 0;
            }
        }
        self.in_volume += n as u64;
        if self.in_volume == self.volume_size {
            self.close_volume()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Sink {
    Plain(BufWriter<VolumeWriter>),
    Zstd(zstd::stream::write::Encoder<'static, VolumeWriter>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Zstd(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Zstd(w) => w.flush(),
        }
    }
}

impl Sink {
    fn finish(self) -> io::Result<VolumeWriter> {
        match self {
            Sink::Plain(w) => w.into_inner().map_err(|e| e.into_error()),
            Sink::Zstd(w) => w.finish(),
        }
    }
}

/// The writer thread: tar framing, compression, volumes. Returns the volumes, their chunks'
/// checksums and the stream size.
fn write_stream(
    rx: Receiver<Batch>,
    recycle: Sender<Vec<u8>>,
    sink: Sink,
) -> io::Result<(Vec<Volume>, Vec<Vec<u64>>, u64)> {
    let mut tar = tar::Writer::new(sink);
    for batch in rx {
        let mut at = 0;
        for item in batch.items {
            match item {
                Item::Dir(path) => tar.append_dir(&path)?,
                Item::Begin {
                    path,
                    size,
                    executable,
                } => tar.begin_file(&path, size, executable)?,
                Item::Data(n) => {
                    tar.write_data(&batch.buf[at..at + n])?;
                    at += n;
                }
                Item::End => tar.end_file()?,
            }
        }
        debug_assert_eq!(at, batch.len);
        if !batch.buf.is_empty() {
            let _ = recycle.send(batch.buf);
        }
    }
    let size = tar.offset() + 2 * tar::BLOCK as u64;
    let sink = tar.finish()?;
    let (volumes, checks) = sink.finish()?.finish()?;
    Ok((volumes, checks, size))
}

/// What [`read_file`] computed.
struct FileDigests {
    sha256: String,
    /// The verified or computed etag, when one was asked for.
    etag: Option<String>,
    /// The value scan, when one was asked for and the file has a layout.
    values: Option<FileScan>,
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
        let sha256 = hex::encode(self.sha256.finalize());
        let etag = settle_etag(
            etag,
            self.git.map(GitBlobSha1::finish),
            &sha256,
            path,
            source,
        )?;
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
    scan && format::identify(path, bytes, bytes.len() as u64).is_some_and(Format::has_values)
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
            if &actual != want {
                return Err(Error::BlobMismatch {
                    repo_path: path.to_string(),
                    blob: source.to_path_buf(),
                    etag: want.clone(),
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
    Ok((d.sha256, d.etag, d.values))
}

/// Reads one source file once: hashes it, sends its buffers, and checks it did not change. With
/// `etag`, also checks the content against the etag (or computes one), and with `scan` runs
/// the value scan on a model file, in the same pass.
#[allow(clippy::too_many_arguments)]
fn read_file(
    source: &Path,
    path: &str,
    size: u64,
    etag: Option<&EtagCheck>,
    scan: bool,
    opener: &mut crate::scan::SourceOpener,
    out: &mut Outbox<'_>,
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
    out: &mut Outbox<'_>,
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
type LoadBatch = Vec<Option<std::sync::Arc<[u8]>>>;

/// Small files a read-ahead thread hands over at once.
const LOAD_BATCH: usize = 64;
/// Read-ahead threads ([`load_ahead`]), taking the batches in turn.
const LOADERS: usize = 2;
/// Batches the read-ahead thread may have waiting (with [`LOAD_BATCH`] files of at most
/// [`crate::scan::PREFETCH_FILE_MAX`] bytes: 16 MiB at most, a few hundred KiB for small files).
const LOAD_BATCHES: usize = 4;

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
fn load_ahead(entries: &[StreamEntry<'_>], scan_values: bool, part: usize, tx: Sender<LoadBatch>) {
    let mut opener = crate::scan::SourceOpener::default();
    let mut batch = Vec::with_capacity(LOAD_BATCH);
    let mine = entries
        .iter()
        .filter(|e| loads_ahead(e, scan_values))
        .enumerate()
        .filter(|(i, _)| i / LOAD_BATCH % LOADERS == part)
        .map(|(_, e)| e);
    for e in mine {
        let StreamEntry::File {
            source, path, size, ..
        } = e
        else {
            continue;
        };
        let loaded = opener.open_stat(source, path).ok().and_then(|(file, st)| {
            let bytes = (st.st_size as u64 == *size)
                .then(|| crate::scan::read_whole(&file, *size))
                .flatten()?;
            crate::scan::unchanged(&file, &st).then_some(bytes)
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
            return;
        }
    }
    let _ = tx.send(batch);
}

/// The reading thread's side of [`load_ahead`]: the files its threads read, one at a time, in
/// order (batch `k` from thread `k % LOADERS`).
struct Loaded {
    rx: Vec<Receiver<LoadBatch>>,
    /// Batches taken so far.
    taken: usize,
    batch: std::vec::IntoIter<Option<std::sync::Arc<[u8]>>>,
}

impl Loaded {
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
        source: Cow<'a, Path>,
        /// Its size, from the scan (the read is held to it).
        size: u64,
        /// Its executable bit.
        executable: bool,
        /// Its etag check.
        etag: Option<EtagCheck>,
        /// Its bytes, when the scan read them ([`Prefetched`]): the file is not opened again.
        prefetched: Option<Prefetched>,
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
}

/// How to cut and compress the stream.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions {
    /// Compression.
    pub compress: Compress,
    /// Largest volume, bytes.
    pub volume_size: u64,
    /// Chunk size for the per-chunk digests.
    pub chunk_size: u64,
    /// Run the value scan ([`crate::inspect::values`]) on the model files as they are read.
    pub scan_values: bool,
    /// Drop the volumes' pages from the page cache once they are on disk
    /// ([`Flusher::dropping`]): false when a later pass reads them back (parity).
    pub drop_written: bool,
}

/// One file as written.
#[derive(Clone, Debug)]
pub struct WrittenFile {
    /// Its path in the bundle.
    pub path: String,
    /// Its size.
    pub size: u64,
    /// Its executable bit.
    pub executable: bool,
    /// SHA-256 of its bytes as read.
    pub sha256: String,
    /// Its etag, checked or computed, when one was asked for.
    pub etag: Option<String>,
    /// Its value scan, when one was asked for and it is a model file (boxed: most files have
    /// none, and the list holds one entry a file).
    pub values: Option<Box<FileScan>>,
}

/// What [`write`] wrote.
#[derive(Debug)]
pub struct Written {
    /// The data volumes, named, with their chunk digests.
    pub volumes: Vec<Volume>,
    /// Each data volume's chunks' XXH3-64 checksums, of the bytes as written (not part of the
    /// format: the parity pass checks the bytes it reads back against them).
    pub chunk_checks: Vec<Vec<u64>>,
    /// The uncompressed stream's size.
    pub stream_size: u64,
    /// Every file, in stream order.
    pub files: Vec<WrittenFile>,
    /// Every directory, in stream order.
    pub directories: Vec<String>,
}

/// Writes `entries` as the bundle's stream into volumes in `dir` (a work directory).
pub fn write(
    entries: &[StreamEntry<'_>],
    dir: &Path,
    opts: &WriteOptions,
    progress: &dyn Progress,
) -> Result<Written> {
    let volumes_writer =
        VolumeWriter::new(dir, opts.volume_size, opts.chunk_size, opts.drop_written);
    let sink = match opts.compress {
        Compress::None => Sink::Plain(BufWriter::with_capacity(BUFFER_SIZE, volumes_writer)),
        Compress::Zstd { level, workers } => {
            let mut enc = zstd::stream::write::Encoder::new(volumes_writer, level)
                .map_err(|e| Error::io(dir, e))?;
            if workers > 0 {
                enc.multithread(workers).map_err(|e| Error::io(dir, e))?;
                // zstd's default job (4 windows, 8 MiB at level 3) keeps ~110 MiB of job
                // buffers resident with 2 workers; 2 MiB jobs keep ~40 MiB, at the same ratio
                // and speed within noise (docs/PERFORMANCE.md).
                enc.set_parameter(zstd::stream::raw::CParameter::JobSize(ZSTD_JOB_SIZE))
                    .map_err(|e| Error::io(dir, e))?;
            }
            Sink::Zstd(enc)
        }
    };
    let total: u64 = entries
        .iter()
        .map(|e| match e {
            StreamEntry::File { size, .. } => *size,
            StreamEntry::Dir(_) => 0,
        })
        .sum();
    progress.start("pack", total);
    let (tx, rx) = bounded::<Batch>(BUFFERS);
    let (recycle_tx, pool) = bounded::<Vec<u8>>(BUFFERS + 2);
    for _ in 0..BUFFERS {
        let _ = recycle_tx.send(vec![0u8; BUFFER_SIZE]);
    }
    let mut files = Vec::new();
    let mut directories = Vec::new();
    let (read_result, write_result) = std::thread::scope(|s| {
        let writer = s.spawn(move || write_stream(rx, recycle_tx, sink));
        let scan_values = opts.scan_values;
        let mut loaded = Loaded {
            rx: (0..LOADERS)
                .map(|part| {
                    let (load_tx, load_rx) = bounded(LOAD_BATCHES);
                    s.spawn(move || load_ahead(entries, scan_values, part, load_tx));
                    load_rx
                })
                .collect(),
            taken: 0,
            batch: Vec::new().into_iter(),
        };
        let read_result = (|| -> Result<()> {
            let mut out = Outbox::new(&tx, &pool);
            let mut opener = crate::scan::SourceOpener::default();
            for entry in entries {
                match entry {
                    StreamEntry::Dir(path) => {
                        directories.push(path.to_string());
                        if out.push(Item::Dir(path.to_string())).is_err() {
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
                    } => {
                        progress.item(path);
                        let begin = Item::Begin {
                            path: path.to_string(),
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
                        let ahead = match loads_ahead(entry, opts.scan_values) {
                            true => loaded.next(),
                            false => None,
                        };
                        let at_hand = kept
                            .or(ahead.as_deref())
                            .filter(|b| !value_scanned(opts.scan_values, path, b));
                        let digests = match at_hand {
                            Some(bytes) => send_prefetched(
                                bytes,
                                source,
                                path,
                                etag.as_ref(),
                                &mut out,
                                progress,
                            )?,
                            None => read_file(
                                source,
                                path,
                                *size,
                                etag.as_ref(),
                                opts.scan_values,
                                &mut opener,
                                &mut out,
                                progress,
                            )?,
                        };
                        let Some(digests) = digests else {
                            return Ok(());
                        };
                        if out.push(Item::End).is_err() {
                            return Ok(());
                        }
                        files.push(WrittenFile {
                            path: path.to_string(),
                            size: *size,
                            executable: *executable,
                            sha256: digests.sha256,
                            etag: digests.etag,
                            values: digests.values.map(Box::new),
                        });
                    }
                }
            }
            let _ = out.send();
            Ok(())
        })();
        drop(tx);
        let write_result = writer.join().expect("writer thread panicked");
        (read_result, write_result)
    });
    read_result?;
    let (volumes, chunk_checks, stream_size) = write_result.map_err(|e| Error::io(dir, e))?;
    progress.finish();
    Ok(Written {
        volumes,
        chunk_checks,
        stream_size,
        files,
        directories,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each volume's chunk digests and checksums are those of its own bytes, cut every
    /// `chunk_size` bytes from the volume's start, whatever the sizes of the writes: writes
    /// span many chunks and volume ends, and chunk ends fall anywhere in the hashing thread's
    /// buffers (including on a buffer's first and last byte).
    #[test]
    fn chunk_digests_follow_the_chunks_whatever_the_writes() {
        let t = tempfile::tempdir().unwrap();
        let stream: Vec<u8> = (0..(3 * BUFFER_SIZE + 12_345) as u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
            .collect();
        for (chunk_size, volume_size, write) in [
            (4096u64, 1_000_000u64, 70_001usize),
            (4096, 4096 * 300, BUFFER_SIZE),
            (1 << 20, 3 << 20, 1 << 20),
            (64 << 20, 1 << 30, 3),
            (16_384, 49_152, 5_000_000),
        ] {
            let dir = t.path().join(format!("{chunk_size}-{volume_size}-{write}"));
            std::fs::create_dir(&dir).unwrap();
            let mut w = VolumeWriter::new(&dir, volume_size, chunk_size, false);
            for piece in stream.chunks(write) {
                w.write_all(piece).unwrap();
            }
            let (volumes, checks) = w.finish().unwrap();
            let mut at = 0usize;
            for (v, check) in volumes.iter().zip(&checks) {
                let bytes = std::fs::read(dir.join(&v.name)).unwrap();
                assert_eq!(bytes, stream[at..at + bytes.len()], "{}", v.name);
                at += bytes.len();
                let pieces: Vec<&[u8]> = bytes.chunks(chunk_size as usize).collect();
                let want: Vec<String> = pieces
                    .iter()
                    .map(|c| hex::encode(Sha256::digest(c)))
                    .collect();
                assert_eq!(
                    v.chunks, want,
                    "{chunk_size} {volume_size} {write} {}",
                    v.name
                );
                let want: Vec<u64> = pieces
                    .iter()
                    .map(|c| xxhash_rust::xxh3::xxh3_64(c))
                    .collect();
                assert_eq!(check, &want);
            }
            assert_eq!(at, stream.len());
        }
    }

    /// Many small files travel to the writer thread in one message with their entry events,
    /// not three messages a file (the hand-overs were the cost of packing 512-byte files), and
    /// a file larger than a buffer is split across messages in order.
    /// The small files the scan did not keep are read by the read-ahead threads, in batches
    /// taken in turn, and still travel in stream order with their own bytes and digests,
    /// between files the reading thread reads itself (a large one) and one the scan kept; a
    /// file whose size is no longer the scanned one is left to the reading thread, which
    /// refuses it by name.
    #[test]
    fn files_read_ahead_travel_in_order_with_their_bytes() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        let mut want: Vec<(String, Vec<u8>)> = Vec::new();
        for i in 0..(LOAD_BATCH * LOADERS * 3 + 7) {
            let bytes: Vec<u8> = (0..(i * 37 % 3000)).map(|b| (b * 31 + i) as u8).collect();
            let path = format!("d{}/f{i:04}", i / 100);
            std::fs::create_dir_all(m.join(format!("d{}", i / 100))).unwrap();
            std::fs::write(m.join(&path), &bytes).unwrap();
            want.push((path, bytes));
        }
        let big: Vec<u8> = (0..(crate::scan::PREFETCH_FILE_MAX as u32 + 5000))
            .map(|b| (b % 253) as u8)
            .collect();
        std::fs::write(m.join("d1/g"), &big).unwrap();
        want.push(("d1/g".into(), big));
        want.sort_by(|a, b| crate::paths::bundle_order(&a.0, &b.0));
        let entries: Vec<StreamEntry> = want
            .iter()
            .map(|(path, bytes)| StreamEntry::File {
                path: path.into(),
                source: m.join(path).into(),
                size: bytes.len() as u64,
                executable: false,
                etag: None,
                // One file the scan kept: its kept bytes travel, not the file's.
                prefetched: (path == "d2/f0200").then(|| crate::scan::Prefetched::for_test(bytes)),
            })
            .collect();
        std::fs::write(m.join("d2/f0200"), b"rewritten since the scan").unwrap();
        let opts = WriteOptions {
            compress: Compress::None,
            volume_size: 1 << 30,
            chunk_size: 1 << 20,
            scan_values: false,
            drop_written: true,
        };
        let out = t.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let written = write(&entries, &out, &opts, &crate::progress::Silent).unwrap();
        let stream = std::fs::read(out.join(&written.volumes[0].name)).unwrap();
        let mut archive = ::tar::Archive::new(&stream[..]);
        let got: Vec<(String, Vec<u8>)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut bytes).unwrap();
                (e.path().unwrap().to_str().unwrap().to_string(), bytes)
            })
            .collect();
        assert_eq!(got.len(), want.len());
        for ((gp, gb), (wp, wb)) in got.iter().zip(&want) {
            assert_eq!((gp, gb.len()), (wp, wb.len()));
            assert!(gb == wb, "{gp}: other bytes");
        }
        for (f, (path, bytes)) in written.files.iter().zip(&want) {
            assert_eq!(
                (&f.path, &f.sha256),
                (path, &hex::encode(Sha256::digest(bytes)))
            );
        }

        // A small file no longer of its scanned size: named in the refusal.
        std::fs::write(m.join("d3/f0301"), b"grown past the scanned size").unwrap();
        let out2 = t.path().join("out2");
        std::fs::create_dir(&out2).unwrap();
        let err = write(&entries, &out2, &opts, &crate::progress::Silent).unwrap_err();
        assert!(
            matches!(&err, Error::SourceChanged { path, .. } if path.ends_with("d3/f0301")),
            "{err}"
        );

        // A small file swapped since the scan for a FIFO (no writer: a blocking open would
        // hang), or for a link to a host file: the read-ahead threads leave both to the reading
        // thread, which refuses each by name without blocking or following the link.
        let bytes = &want.iter().find(|(p, _)| p == "d3/f0301").unwrap().1;
        std::fs::write(m.join("d3/f0301"), bytes).unwrap();
        std::fs::remove_file(m.join("d1/f0150")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            m.join("d1/f0150"),
            rustix::fs::FileType::Fifo,
            0o644.into(),
            0,
        )
        .unwrap();
        let out3 = t.path().join("out3");
        std::fs::create_dir(&out3).unwrap();
        let err = write(&entries, &out3, &opts, &crate::progress::Silent)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("d1/f0150") && err.contains("no longer a regular file"),
            "{err}"
        );
        std::fs::remove_file(m.join("d1/f0150")).unwrap();
        std::fs::write(t.path().join("host-secret"), b"host secret").unwrap();
        std::os::unix::fs::symlink(t.path().join("host-secret"), m.join("d1/f0150")).unwrap();
        let out4 = t.path().join("out4");
        std::fs::create_dir(&out4).unwrap();
        let err = write(&entries, &out4, &opts, &crate::progress::Silent)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("d1/f0150") && err.contains("symbolic link"),
            "{err}"
        );
    }

    #[test]
    fn small_files_travel_many_to_a_message() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        std::fs::create_dir_all(m.join("d")).unwrap();
        let mut want = Vec::new();
        for i in 0..300u32 {
            let bytes: Vec<u8> = (0..512u32).map(|b| (b * 7 + i) as u8).collect();
            std::fs::write(m.join(format!("d/f{i:03}")), &bytes).unwrap();
            want.push((format!("d/f{i:03}"), bytes));
        }
        let big: Vec<u8> = (0..BUFFER_SIZE as u32 + 1000)
            .map(|b| (b % 251) as u8)
            .collect();
        std::fs::write(m.join("d/g"), &big).unwrap();
        want.push(("d/g".into(), big));
        let (tx, rx) = bounded::<Batch>(64);
        let (recycle, pool) = bounded::<Vec<u8>>(4);
        for _ in 0..4 {
            recycle.send(vec![0u8; BUFFER_SIZE]).unwrap();
        }
        let mut out = Outbox::new(&tx, &pool);
        let mut opener = crate::scan::SourceOpener::default();
        for (path, bytes) in &want {
            let size = bytes.len() as u64;
            out.push(Item::Begin {
                path: path.clone(),
                size,
                executable: false,
            })
            .ok()
            .unwrap();
            let got = read_file(
                &m.join(path),
                path,
                size,
                None,
                false,
                &mut opener,
                &mut out,
                &crate::progress::Silent,
            )
            .unwrap()
            .unwrap();
            assert_eq!(got.sha256, hex::encode(Sha256::digest(bytes)));
            out.push(Item::End).ok().unwrap();
        }
        out.send().ok().unwrap();
        drop(tx);
        let batches: Vec<Batch> = rx.iter().collect();
        // 300 x 512 bytes and the first part of the large file fill the first buffer; the
        // rest of the large file is the second.
        assert_eq!(batches.len(), 2, "one message per buffer, not per file");
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for b in &batches {
            let mut at = 0;
            for item in &b.items {
                match item {
                    Item::Begin { path, .. } => files.push((path.clone(), Vec::new())),
                    Item::Data(n) => {
                        files.last_mut().unwrap().1.extend(&b.buf[at..at + n]);
                        at += n;
                    }
                    Item::End | Item::Dir(_) => {}
                }
            }
            assert_eq!(at, b.len);
        }
        assert_eq!(files, want);
    }
}
