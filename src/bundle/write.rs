//! Packing: source files → tar → zstd → volumes, with every byte hashed once on the way.
//!
//! Two threads share the work. The calling thread reads each source file once, hashes it and
//! hands the buffers over; the writer thread frames them as tar, compresses, cuts volumes and
//! hashes each volume and each chunk of it. Buffers travel back for reuse, so memory stays at a
//! few megabytes whatever the model size. Everything is written under `BUNDLE.partial/` and
//! renamed to `BUNDLE` only once the signature is on disk.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crossbeam_channel::{Receiver, Sender, bounded};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsio;
use crate::hfcache::{EtagKind, GitBlobSha1};
use crate::keys::{self, SecretKey};
use crate::manifest::{
    self, Compression, FileEntry, HfSource, Manifest, Stream, Totals, Volume, Warning,
};
use crate::progress::Progress;
use crate::scan::ScanEntry;
use crate::staging::{self, Staging};
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
    let large: Vec<(&Path, u64)> = entries
        .iter()
        .filter_map(|e| match e {
            ScanEntry::File { source, size, .. } if *size >= AUTO_SAMPLE_MIN_FILE => {
                Some((source.as_path(), *size))
            }
            _ => None,
        })
        .collect();
    if large.is_empty() {
        return Ok(None);
    }
    let step = large.len().div_ceil(AUTO_SAMPLE_FILES);
    let (mut saved, mut total) = (0.0f64, 0.0f64);
    let mut buf = Vec::new();
    for &(path, size) in large.iter().step_by(step) {
        let n = size.min(AUTO_SAMPLE_BYTES);
        let offset = (size - n) / 2 / 4096 * 4096;
        buf.resize(n as usize, 0);
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        f.read_exact_at(&mut buf, offset)
            .map_err(|e| Error::io(path, e))?;
        let packed = zstd::bulk::compress(&buf, 1).map_err(|e| Error::io(path, e))?;
        let saving = 1.0 - packed.len() as f64 / n as f64;
        saved += saving * size as f64;
        total += size as f64;
    }
    Ok(Some(saved / total))
}

/// Everything `pack` needs, resolved.
pub struct PackOptions<'a> {
    /// Entries from [`crate::scan::scan`].
    pub entries: Vec<ScanEntry>,
    /// The bundle directory to create.
    pub out: PathBuf,
    /// Signing key.
    pub key: &'a SecretKey,
    /// Bundle name.
    pub name: String,
    /// Bundle version.
    pub version: u64,
    /// Compression.
    pub compress: Compress,
    /// Largest volume, bytes.
    pub volume_size: u64,
    /// Chunk size for per-chunk digests.
    pub chunk_size: u64,
    /// Creation time, seconds since the epoch.
    pub created_unix: i64,
    /// Model-check warnings to record.
    pub warnings: Vec<Warning>,
    /// Hugging Face provenance. Its `etags` are filled in by the pack, one per file, from
    /// `etags`.
    pub source: Option<HfSource>,
    /// With `source`: one per file, in `entries` order, what to do about the file's etag.
    pub etags: Vec<EtagCheck>,
    /// Parity to add, in percent of the data (`pack --parity`; FORMAT.md section 17).
    pub parity: Option<f64>,
    /// Pack a delta against this base (docs/FORMAT.md section 16).
    pub base: Option<crate::delta::pack::BaseSource>,
    /// TUF root versions to carry (`pack --trust-update`; FORMAT.md section 18), checked by
    /// the caller.
    pub trust_update: Vec<crate::trust::update::RootFile>,
}

/// What the packer does about one file's Hugging Face etag (its blob name) while it hashes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtagCheck {
    /// The content must hash to this etag (SHA-256 for 64 hex digits, the git blob id for 40);
    /// otherwise the pack fails with [`Error::BlobMismatch`].
    Expect(String),
    /// Nothing names the file: compute its etag by [`EtagKind::for_size`].
    Compute,
}

enum Msg {
    Dir(String),
    Begin {
        path: String,
        size: u64,
        executable: bool,
    },
    Data(Vec<u8>, usize),
    End,
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

enum ChunkMsg {
    /// Bytes of the current chunk.
    Data(Vec<u8>),
    /// The current chunk ends here.
    Cut,
}

/// SHA-256 of each chunk of the volume stream, on a thread of its own. Bytes are copied into
/// pooled buffers (a copy costs far less than a hash pass) and digests come back in order when
/// the stream is finished.
struct ChunkHasher {
    tx: Option<Sender<ChunkMsg>>,
    pool: Receiver<Vec<u8>>,
    current: Vec<u8>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
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
            for msg in rx {
                match msg {
                    ChunkMsg::Data(mut buf) => {
                        h.update(&buf);
                        buf.clear();
                        let _ = recycle.send(buf);
                    }
                    ChunkMsg::Cut => digests.push(hex::encode(std::mem::take(&mut h).finalize())),
                }
            }
            digests
        });
        ChunkHasher {
            tx: Some(tx),
            pool,
            current: Vec::with_capacity(BUFFER_SIZE),
            thread: Some(thread),
        }
    }

    fn gone() -> io::Error {
        io::Error::other("internal error: the chunk-hashing thread stopped")
    }

    fn send(&mut self, msg: ChunkMsg) -> io::Result<()> {
        let tx = self.tx.as_ref().ok_or_else(Self::gone)?;
        tx.send(msg).map_err(|_| Self::gone())
    }

    fn send_current(&mut self) -> io::Result<()> {
        if self.current.is_empty() {
            return Ok(());
        }
        let next = self.pool.recv().map_err(|_| Self::gone())?;
        let full = std::mem::replace(&mut self.current, next);
        self.send(ChunkMsg::Data(full))
    }

    fn update(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.current.len() == BUFFER_SIZE {
                self.send_current()?;
            }
            let n = bytes.len().min(BUFFER_SIZE - self.current.len());
            self.current.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        Ok(())
    }

    fn cut(&mut self) -> io::Result<()> {
        self.send_current()?;
        self.send(ChunkMsg::Cut)
    }

    /// Every chunk digest, in stream order.
    fn finish(mut self) -> io::Result<Vec<String>> {
        self.tx = None;
        let thread = self.thread.take().expect("joined once");
        thread.join().map_err(|_| Self::gone())
    }
}

fn temp_volume_name(index: usize) -> String {
    format!("volume-{index}.tmp")
}

impl VolumeWriter {
    fn close_volume(&mut self) -> io::Result<()> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        if self.in_chunk > 0 {
            self.chunk_hasher.cut()?;
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

    fn finish(mut self) -> io::Result<Vec<Volume>> {
        self.close_volume()?;
        if let Some((path, e)) = self.flusher.finish() {
            return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
        }
        let mut digests = self.chunk_hasher.finish()?.into_iter();
        let count = self.done.len();
        let mut volumes = Vec::with_capacity(count);
        for (i, (mut v, chunks)) in self.done.into_iter().enumerate() {
            v.chunks = digests.by_ref().take(chunks).collect();
            if v.chunks.len() != chunks {
                return Err(ChunkHasher::gone());
            }
            let name = manifest::volume_name(i, count);
            std::fs::rename(self.dir.join(&v.name), self.dir.join(&name))?;
            v.name = name;
            volumes.push(v);
        }
        Ok(volumes)
    }
}

impl Write for VolumeWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.file.is_none() {
            let path = self.dir.join(temp_volume_name(self.done.len()));
            let file = File::create_new(&path)?;
            file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
            self.file = Some(file);
        }
        let room_volume = self.volume_size - self.in_volume;
        let room_chunk = self.chunk_size - self.in_chunk;
        let n = (buf.len() as u64).min(room_volume).min(room_chunk) as usize;
        let part = &buf[..n];
        let file = self.file.as_mut().expect("opened above");
        file.write_all(part)?;
        self.since_flush += n as u64;
        if self.since_flush >= FLUSH_EVERY {
            let path = self.dir.join(temp_volume_name(self.done.len()));
            self.flusher.flush(file, path);
            self.since_flush = 0;
        }
        self.chunk_hasher.update(part)?;
        self.in_volume += n as u64;
        self.in_chunk += n as u64;
        if self.in_chunk == self.chunk_size {
            self.chunk_hasher.cut()?;
            self.chunks += 1;
            self.in_chunk = 0;
        }
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

/// The writer thread: tar framing, compression, volumes. Returns the volumes and stream size.
fn write_stream(
    rx: Receiver<Msg>,
    recycle: Sender<Vec<u8>>,
    sink: Sink,
) -> io::Result<(Vec<Volume>, u64)> {
    let mut tar = tar::Writer::new(sink);
    for msg in rx {
        match msg {
            Msg::Dir(path) => tar.append_dir(&path)?,
            Msg::Begin {
                path,
                size,
                executable,
            } => tar.begin_file(&path, size, executable)?,
            Msg::Data(buf, n) => {
                tar.write_data(&buf[..n])?;
                let _ = recycle.send(buf);
            }
            Msg::End => tar.end_file()?,
        }
    }
    let size = tar.offset() + 2 * tar::BLOCK as u64;
    let sink = tar.finish()?;
    let volumes = sink.finish()?.finish()?;
    Ok((volumes, size))
}

/// What [`read_file`] computed.
struct FileDigests {
    sha256: String,
    /// The verified or computed etag, when one was asked for.
    etag: Option<String>,
}

/// Reads one source file once: hashes it, sends its buffers, and checks it did not change. With
/// `etag`, also checks the content against the etag (or computes one), in the same pass.
fn read_file(
    source: &Path,
    path: &str,
    size: u64,
    etag: Option<&EtagCheck>,
    tx: &Sender<Msg>,
    pool: &Receiver<Vec<u8>>,
    progress: &dyn Progress,
) -> Result<Option<FileDigests>> {
    let mut file = File::open(source).map_err(|e| Error::io(source, e))?;
    let before = file.metadata().map_err(|e| Error::io(source, e))?;
    if before.len() != size {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: format!(
                "size went from {size} to {} bytes since the scan",
                before.len()
            ),
        });
    }
    let mut hasher = Sha256::new();
    let wants_git_sha1 = match etag {
        Some(EtagCheck::Expect(e)) => EtagKind::of(e) == Some(EtagKind::GitSha1),
        Some(EtagCheck::Compute) => EtagKind::for_size(size) == EtagKind::GitSha1,
        None => false,
    };
    let mut git = wants_git_sha1.then(|| GitBlobSha1::new(size));
    let mut total: u64 = 0;
    while total < size {
        // Take a buffer only when it will be sent: every buffer must travel back to the pool.
        let mut buf = pool.recv().unwrap_or_else(|_| vec![0u8; BUFFER_SIZE]);
        let want = (BUFFER_SIZE as u64).min(size - total) as usize;
        let n = file
            .read(&mut buf[..want])
            .map_err(|e| Error::io(source, e))?;
        if n == 0 {
            return Err(Error::SourceChanged {
                path: source.to_path_buf(),
                what: format!("ended after {total} of {size} bytes"),
            });
        }
        hasher.update(&buf[..n]);
        if let Some(g) = &mut git {
            g.update(&buf[..n]);
        }
        total += n as u64;
        progress.advance(n as u64);
        if tx.send(Msg::Data(buf, n)).is_err() {
            // The writer thread failed; its error is reported by the caller.
            return Ok(None);
        }
    }
    // Probe for growth past the declared size.
    let mut probe = [0u8; 1];
    if file.read(&mut probe).map_err(|e| Error::io(source, e))? != 0 {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: format!("grew past {size} bytes while being read"),
        });
    }
    let after = file.metadata().map_err(|e| Error::io(source, e))?;
    if after.len() != before.len()
        || after.mtime() != before.mtime()
        || after.mtime_nsec() != before.mtime_nsec()
        || after.ino() != before.ino()
    {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: "its size or modification time changed while it was read".into(),
        });
    }
    let sha256 = hex::encode(hasher.finalize());
    let computed = git.map(GitBlobSha1::finish);
    let etag = match etag {
        None => None,
        Some(EtagCheck::Compute) => Some(computed.unwrap_or_else(|| sha256.clone())),
        Some(EtagCheck::Expect(want)) => {
            let actual = computed.unwrap_or_else(|| sha256.clone());
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
    };
    Ok(Some(FileDigests { sha256, etag }))
}

/// Result of a pack.
pub struct Packed {
    /// The manifest written.
    pub manifest: Manifest,
    /// SHA-256 of manifest.json.
    pub manifest_sha256: String,
    /// For a delta: how the files travel.
    pub delta: Option<crate::delta::pack::Counts>,
}

/// Packs `opts.entries` into the bundle directory `opts.out`.
///
/// The work happens in `BUNDLE.partial/`, a [`Staging`] directory (private, locked from
/// birth, removed on failure and on SIGINT/SIGTERM); once the signature is on disk it becomes
/// `BUNDLE` in one rename.
pub fn pack(opts: PackOptions<'_>, progress: &dyn Progress) -> Result<Packed> {
    let out = &opts.out;
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(Error::Usage(format!(
            "{} already exists; choose a new bundle directory",
            out.display()
        )));
    }
    let parent = fsio::parent_dir(out);
    let Some(out_name) = out.file_name().and_then(|n| n.to_str()) else {
        return Err(Error::Usage(format!(
            "{}: not a usable bundle name",
            out.display()
        )));
    };
    check_manifest_fits(&opts)?;
    if let Some(e) = opts
        .entries
        .iter()
        .find(|e| manifest::uses_delta_dir(e.path()))
    {
        return Err(Error::Source {
            path: PathBuf::from(e.path()),
            reason: format!(
                "uses the name {:?}, reserved for the patches of delta bundles",
                manifest::DELTA_DIR
            ),
        });
    }
    let partial_name = format!("{out_name}.partial");
    let partial = parent.join(&partial_name);
    let staging = match Staging::create_named(&parent, &partial_name) {
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
            if !remove_abandoned_partial(&parent, &partial_name) {
                return Err(Error::Usage(format!(
                    "{} exists and is not a stale airlock pack (another pack may be running); remove it or choose another name",
                    partial.display()
                )));
            }
            Staging::create_named(&parent, &partial_name)?
        }
        other => other?,
    };

    let result = pack_into(&opts, &staging.path(), progress)?;

    rustix::fs::fchmod(staging.fd(), rustix::fs::Mode::from_raw_mode(0o755))
        .map_err(|e| Error::io(&partial, e.into()))?;
    staging.into_place(out)?;
    Ok(result)
}

/// Counts the bytes written to it.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The size `manifest.json` would have for `opts`, from the scan alone: every field but the
/// digests is known before packing, the digests have fixed lengths, and the volume list is
/// sized for the largest payload the stream can compress to. An upper bound within a few
/// bytes per volume.
pub fn manifest_size_estimate(opts: &PackOptions<'_>) -> u64 {
    let digest = "0".repeat(64);
    let mut files = Vec::new();
    let mut directories = Vec::new();
    let mut stream: u64 = 2 * tar::BLOCK as u64;
    for e in &opts.entries {
        match e {
            ScanEntry::Dir { path } => {
                stream = stream
                    .saturating_add(manifest::entry_stream_size(path, true, 0).unwrap_or(u64::MAX));
                directories.push(path.clone());
            }
            ScanEntry::File {
                path,
                size,
                executable,
                ..
            } => {
                stream = stream.saturating_add(
                    manifest::entry_stream_size(path, false, *size).unwrap_or(u64::MAX),
                );
                files.push(FileEntry {
                    path: path.clone(),
                    size: *size,
                    sha256: digest.clone(),
                    executable: *executable,
                    from: None,
                });
            }
        }
    }
    // zstd's worst case for one frame (ZSTD_COMPRESSBOUND: size + size/256 + at most 64
    // bytes below 128 KiB), plus the frame header.
    let payload = match opts.compress {
        Compress::None => stream,
        Compress::Zstd { .. } => stream.saturating_add(stream >> 8).saturating_add(128),
    };
    let count = payload.div_ceil(opts.volume_size.max(1)).max(1);
    let volumes: Vec<Volume> = (0..count)
        .map(|i| {
            let size = opts.volume_size.min(payload - i * opts.volume_size);
            Volume {
                name: manifest::volume_name(i as usize, count as usize),
                size,
                sha256: None,
                chunks: vec![digest.clone(); size.div_ceil(opts.chunk_size.max(1)) as usize],
            }
        })
        .collect();
    let parity = opts.parity.and_then(|p| {
        super::parity_write::estimate(&volumes, opts.chunk_size, opts.volume_size, p)
    });
    let m = Manifest {
        format: manifest::FORMAT_ID.into(),
        format_version: manifest::FORMAT_VERSION,
        name: opts.name.clone(),
        version: opts.version,
        created: manifest::rfc3339(opts.created_unix),
        tool: format!("airlock {}", env!("CARGO_PKG_VERSION")),
        compression: Compression {
            algorithm: "zstd".into(),
            level: Some(19),
        },
        stream: Stream { size: stream },
        chunk_size: opts.chunk_size,
        volumes,
        totals: Totals {
            files: u64::MAX,
            directories: u64::MAX,
            file_bytes: u64::MAX,
            volume_bytes: u64::MAX,
        },
        warnings: opts.warnings.clone(),
        source: opts.source.clone().map(|s| HfSource {
            etags: vec![digest.clone(); files.len()],
            ..s
        }),
        parity,
        base: None,
        trust_update: crate::trust::update::manifest_entry(&opts.trust_update),
        directories,
        files,
    };
    let mut counter = Counter(0);
    serde_json::to_writer_pretty(&mut counter, &m).expect("counting never fails");
    // A delta adds `base` (under 200 bytes) and at most one `from` object per file: the path
    // again (JSON-escaped, at most 6 bytes per byte) and about 250 bytes of fields and digest.
    let delta = match &opts.base {
        None => 0,
        Some(_) => opts
            .entries
            .iter()
            .map(|e| match e {
                ScanEntry::File { path, .. } => 250 + 6 * path.len() as u64,
                ScanEntry::Dir { .. } => 0,
            })
            .sum::<u64>()
            .saturating_add(200),
    };
    (counter.0 + 1).saturating_add(delta)
}

/// Refuses, before anything is written, a model whose manifest would be larger than readers
/// accept (FORMAT.md, section 2): airlock never writes a bundle it would refuse to read.
fn check_manifest_fits(opts: &PackOptions<'_>) -> Result<()> {
    let estimate = manifest_size_estimate(opts);
    if estimate > manifest::MAX_MANIFEST_BYTES {
        return Err(manifest_too_large(opts, estimate));
    }
    Ok(())
}

fn manifest_too_large(opts: &PackOptions<'_>, size: u64) -> Error {
    let files = opts
        .entries
        .iter()
        .filter(|e| matches!(e, ScanEntry::File { .. }))
        .count();
    Error::ManifestTooLarge {
        path: opts.out.clone(),
        reason: format!(
            "cannot pack this model: its manifest would be {size} bytes ({files} files, {} entries in all), more than the {}-byte limit every reader enforces",
            opts.entries.len(),
            manifest::MAX_MANIFEST_BYTES
        ),
    }
}

/// Removes `PARENT/NAME.partial` if a pack of this user left it: either its lock is free (the
/// pack died while writing), or it has no lock and is complete (the pack died between removing
/// its lock and the final rename, leaving a signed bundle under the work name).
fn remove_abandoned_partial(parent: &Path, name: &str) -> bool {
    let partial = parent.join(name);
    let Ok(parent_fd) = rustix::fs::open(
        parent,
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    match staging::remove_if_stale(&parent_fd, name, &partial, false) {
        Ok(true) => return true,
        Ok(false) => {}
        Err(_) => return false,
    }
    is_complete_bundle(&partial) && staging::remove_tree(&partial).is_ok()
}

/// Whether `dir` is a directory of this user holding exactly a manifest that parses, its
/// signature, and the volumes the manifest lists at their listed sizes: a finished pack.
fn is_complete_bundle(dir: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return false;
    }
    let Ok(bytes) = fsio::read_regular_capped(
        &dir.join(manifest::MANIFEST_NAME),
        manifest::MAX_MANIFEST_BYTES,
        false,
    ) else {
        return false;
    };
    let Ok(m) = Manifest::parse(&bytes) else {
        return false;
    };
    let Ok(sig) = fsio::read_regular_capped(&dir.join(manifest::SIGNATURE_NAME), 64 << 10, false)
    else {
        return false;
    };
    if std::str::from_utf8(&sig)
        .ok()
        .and_then(|t| keys::Signature::parse(t).ok())
        .is_none()
    {
        return false;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut seen = 0;
    for e in rd {
        let Ok(e) = e else { return false };
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            return false;
        };
        if name == manifest::MANIFEST_NAME
            || name == manifest::SIGNATURE_NAME
            || crate::trust::update::is_listed_root(&m, name)
        {
            continue;
        }
        let Some(v) = m.volumes.iter().find(|v| v.name == name) else {
            return false;
        };
        match std::fs::symlink_metadata(e.path()) {
            Ok(vm) if vm.is_file() && vm.len() == v.size => seen += 1,
            _ => return false,
        }
    }
    seen == m.volumes.len()
}

fn pack_into(opts: &PackOptions<'_>, dir: &Path, progress: &dyn Progress) -> Result<Packed> {
    let volumes_writer = VolumeWriter {
        dir: dir.to_path_buf(),
        volume_size: opts.volume_size,
        chunk_size: opts.chunk_size,
        file: None,
        in_volume: 0,
        in_chunk: 0,
        chunk_hasher: ChunkHasher::new(),
        chunks: 0,
        flusher: Flusher::new(),
        since_flush: 0,
        done: Vec::new(),
    };
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
    let total: u64 = opts
        .entries
        .iter()
        .map(|e| match e {
            ScanEntry::File { size, .. } => *size,
            ScanEntry::Dir { .. } => 0,
        })
        .sum();
    let plan = match &opts.base {
        Some(base) => Some(crate::delta::pack::plan(
            &opts.entries,
            &opts.name,
            opts.version,
            base,
            dir,
            match opts.compress {
                Compress::Zstd { level, .. } => level,
                Compress::None => 3,
            },
            progress,
        )?),
        None => None,
    };
    let stream_entries = plan.as_ref().map_or(&opts.entries, |p| &p.stream);
    progress.start("pack", total);

    let (tx, rx) = bounded::<Msg>(BUFFERS);
    let (recycle_tx, pool) = bounded::<Vec<u8>>(BUFFERS + 2);
    for _ in 0..BUFFERS {
        let _ = recycle_tx.send(vec![0u8; BUFFER_SIZE]);
    }
    let file_count = opts
        .entries
        .iter()
        .filter(|e| matches!(e, ScanEntry::File { .. }))
        .count();
    if opts.source.is_some() && opts.etags.len() != file_count {
        return Err(Error::Usage(format!(
            "internal error: {} etag checks for {file_count} files",
            opts.etags.len()
        )));
    }
    let mut files = Vec::new();
    let mut etags = Vec::new();
    let mut directories = Vec::new();
    let (read_result, write_result) = std::thread::scope(|s| {
        let writer = s.spawn(move || write_stream(rx, recycle_tx, sink));
        let read_result = (|| -> Result<()> {
            for entry in stream_entries {
                match entry {
                    ScanEntry::Dir { path } => {
                        directories.push(path.clone());
                        if tx.send(Msg::Dir(path.clone())).is_err() {
                            return Ok(());
                        }
                    }
                    ScanEntry::File {
                        path,
                        source,
                        size,
                        executable,
                    } => {
                        progress.item(path);
                        let begin = Msg::Begin {
                            path: path.clone(),
                            size: *size,
                            executable: *executable,
                        };
                        if tx.send(begin).is_err() {
                            return Ok(());
                        }
                        let check = opts.source.as_ref().map(|_| &opts.etags[files.len()]);
                        let Some(digests) =
                            read_file(source, path, *size, check, &tx, &pool, progress)?
                        else {
                            return Ok(());
                        };
                        etags.extend(digests.etag);
                        let sha256 = digests.sha256;
                        if tx.send(Msg::End).is_err() {
                            return Ok(());
                        }
                        files.push(FileEntry {
                            path: path.clone(),
                            size: *size,
                            sha256,
                            executable: *executable,
                            from: None,
                        });
                    }
                }
            }
            Ok(())
        })();
        drop(tx);
        let write_result = writer.join().expect("writer thread panicked");
        (read_result, write_result)
    });
    read_result?;
    let (volumes, stream_size) = write_result.map_err(|e| Error::io(dir, e))?;
    progress.finish();
    if let Some(plan) = &plan {
        files = plan.finish(&opts.entries, files)?;
        directories.retain(|d| d != manifest::DELTA_DIR);
    }
    let parity = match opts.parity {
        Some(percent) => Some(super::parity_write::write_parity(
            dir,
            &volumes,
            opts.chunk_size,
            opts.volume_size,
            percent,
            progress,
        )?),
        None => None,
    };

    let totals = Totals {
        files: files.len() as u64,
        directories: directories.len() as u64,
        file_bytes: files.iter().map(|f| f.size).sum(),
        volume_bytes: volumes.iter().map(|v| v.size).sum(),
    };
    let compression = match opts.compress {
        Compress::None => Compression {
            algorithm: "none".into(),
            level: None,
        },
        Compress::Zstd { level, .. } => Compression {
            algorithm: "zstd".into(),
            level: Some(level),
        },
    };
    let manifest = Manifest {
        format: manifest::FORMAT_ID.into(),
        format_version: manifest::FORMAT_VERSION,
        name: opts.name.clone(),
        version: opts.version,
        created: manifest::rfc3339(opts.created_unix),
        tool: format!("airlock {}", env!("CARGO_PKG_VERSION")),
        compression,
        stream: Stream { size: stream_size },
        chunk_size: opts.chunk_size,
        volumes,
        directories,
        files,
        totals,
        warnings: opts.warnings.clone(),
        source: opts.source.clone().map(|s| HfSource { etags, ..s }),
        parity,
        base: plan.as_ref().map(|p| p.base.clone()),
        trust_update: crate::trust::update::carry(dir, &opts.trust_update)?,
    };
    // The packer holds itself to the same rules as the reader.
    manifest.validate().map_err(|why| {
        Error::io(
            dir,
            io::Error::other(format!("internal error: the new manifest {why}")),
        )
    })?;
    let bytes = manifest.to_bytes();
    if bytes.len() as u64 > manifest::MAX_MANIFEST_BYTES {
        // The estimate is an upper bound, so this is not reached; kept so the rule never
        // depends on the estimate being right.
        return Err(manifest_too_large(opts, bytes.len() as u64));
    }
    let manifest_sha256 = hex::encode(Sha256::digest(&bytes));
    let sig = keys::sign(
        opts.key,
        &bytes,
        "signature from airlock secret key",
        &manifest::trusted_comment(&manifest.name, manifest.version, &manifest_sha256),
    )
    .map_err(|e| Error::Key {
        path: dir.join(manifest::SIGNATURE_NAME),
        source: e,
    })?;
    fsio::write_synced(&dir.join(manifest::MANIFEST_NAME), &bytes, 0o644)?;
    fsio::write_synced(
        &dir.join(manifest::SIGNATURE_NAME),
        sig.to_file_text().as_bytes(),
        0o644,
    )?;
    Ok(Packed {
        manifest,
        manifest_sha256,
        delta: plan.map(|p| p.counts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options<'a>(
        root: &Path,
        out: PathBuf,
        key: &'a SecretKey,
        compress: Compress,
    ) -> PackOptions<'a> {
        PackOptions {
            entries: crate::scan::scan(root, root).unwrap(),
            out,
            key,
            name: "m".into(),
            version: 1,
            compress,
            volume_size: 4096,
            chunk_size: 4096,
            created_unix: 0,
            warnings: vec![],
            source: None,
            etags: vec![],
            parity: None,
            base: None,
            trust_update: vec![],
        }
    }

    #[test]
    fn manifest_size_estimate_is_an_upper_bound_close_to_the_real_size() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("m");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        for i in 0..40u32 {
            let bytes: Vec<u8> = (0..i * 997)
                .map(|b| (b.wrapping_mul(2654435761) >> 7) as u8)
                .collect();
            std::fs::write(root.join(format!("sub/f{i}.bin")), bytes).unwrap();
        }
        std::fs::write(root.join("sub/deeper/\u{e9}t\u{e9} \"quoted\".txt"), b"x").unwrap();
        let key = SecretKey::generate().unwrap();
        for (i, compress) in [
            Compress::None,
            Compress::Zstd {
                level: 3,
                workers: 0,
            },
        ]
        .into_iter()
        .enumerate()
        {
            let opts = options(&root, dir.path().join(format!("b{i}")), &key, compress);
            let estimate = manifest_size_estimate(&opts);
            let packed = pack(opts, &crate::progress::Silent).unwrap();
            let actual = packed.manifest.to_bytes().len() as u64;
            assert!(estimate >= actual, "estimate {estimate} < actual {actual}");
            // Uncompressed, the payload is known exactly: only the digits of the totals and
            // the level differ. Compressed, the bound is for incompressible data.
            if i == 0 {
                assert!(
                    estimate - actual < 256,
                    "estimate {estimate}, actual {actual}"
                );
            }
        }
    }
}
