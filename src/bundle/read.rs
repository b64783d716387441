//! Reading a bundle: the signature first, then volumes → zstd → tar, checked against the
//! manifest entry by entry.
//!
//! Nothing in a volume is read before the manifest's signature has been verified against the
//! trust set and the manifest has passed [`Manifest::validate`]. The stream is then held to the
//! manifest exactly: entries in order with the declared types, sizes and digests, decompressed
//! output capped at the declared stream size (no decompression bombs), and nothing after the
//! end-of-archive marker or the last compressed frame.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crossbeam_channel::{Receiver, Sender, bounded};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::keys::{self, PublicKey, Signature};
use crate::manifest::{self, Expected, FileEntry, Manifest};
use crate::progress::Progress;
use crate::tar::{self, TarError};

/// A bundle whose manifest signature has been verified.
#[derive(Debug)]
pub struct Opened {
    /// The bundle directory.
    pub dir: PathBuf,
    /// The parsed, validated manifest.
    pub manifest: Manifest,
    /// The exact signed bytes.
    pub manifest_bytes: Vec<u8>,
    /// SHA-256 of the manifest bytes.
    pub manifest_sha256: String,
    /// The signature file's text.
    pub signature_text: String,
    /// The key that signed it.
    pub signer: PublicKey,
    /// Non-fatal observations (trusted comment disagreements).
    pub warnings: Vec<String>,
}

fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Err(not_a_bundle(path));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > cap {
        return Err(Error::BadManifest {
            path: path.to_path_buf(),
            reason: format!("is {len} bytes, more than the {cap}-byte limit"),
        });
    }
    let mut out = Vec::with_capacity(len as usize);
    f.take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::io(path, e))?;
    Ok(out)
}

/// The error for a manifest that is not there: says whether the directory itself is missing.
fn not_a_bundle(manifest_path: &Path) -> Error {
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let name = manifest_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let reason = match std::fs::metadata(dir) {
        Err(_) => "no such directory".to_string(),
        Ok(m) if !m.is_dir() => "is not a directory".to_string(),
        Ok(_) => format!("has no {name}: it is not a bundle, or an incomplete copy of one"),
    };
    Error::NotABundle {
        path: dir.to_path_buf(),
        reason,
    }
}

/// Reads the manifest and signature of `dir` without checking the signature (for `inspect`).
pub fn read_unverified(dir: &Path) -> Result<(Manifest, Vec<u8>, Option<Signature>)> {
    let mpath = dir.join(manifest::MANIFEST_NAME);
    let bytes = read_capped(&mpath, manifest::MAX_MANIFEST_BYTES)?;
    let m = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: mpath.clone(),
        reason,
    })?;
    let spath = dir.join(manifest::SIGNATURE_NAME);
    let sig = match std::fs::read_to_string(&spath) {
        Ok(text) => Some(Signature::parse(&text).map_err(|e| Error::Key {
            path: spath,
            source: e,
        })?),
        Err(_) => None,
    };
    Ok((m, bytes, sig))
}

/// A manifest whose signature verified.
pub struct Signed {
    /// The parsed, validated manifest.
    pub manifest: Manifest,
    /// Its exact bytes.
    pub bytes: Vec<u8>,
    /// The signature file's text.
    pub signature_text: String,
    /// The trusted key that signed it.
    pub signer: PublicKey,
    /// Trusted-comment disagreements.
    pub warnings: Vec<String>,
}

/// Verifies the signature of a manifest against `trust` and parses it. Used for bundles and
/// for receipts alike: `manifest_path` and `sig_path` name the two files.
pub fn verify_signed(manifest_path: &Path, sig_path: &Path, trust: &[PublicKey]) -> Result<Signed> {
    let bytes = read_capped(manifest_path, manifest::MAX_MANIFEST_BYTES)?;
    let text = match std::fs::read(sig_path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::MissingSignature {
                path: sig_path.to_path_buf(),
            });
        }
        Err(e) => return Err(Error::io(sig_path, e)),
    };
    if text.len() > 64 * 1024 {
        return Err(Error::BadSignature {
            path: sig_path.to_path_buf(),
            reason: "is too large to be a signature".into(),
        });
    }
    let text = String::from_utf8(text).map_err(|_| Error::BadSignature {
        path: sig_path.to_path_buf(),
        reason: "is not UTF-8 text".into(),
    })?;
    let sig = Signature::parse(&text).map_err(|e| Error::BadSignature {
        path: sig_path.to_path_buf(),
        reason: format!("is not a valid minisign signature: {e}"),
    })?;
    let Some(signer) = trust.iter().find(|k| k.key_id == sig.key_id) else {
        let trusted: Vec<String> = trust.iter().map(|k| k.key_id_hex()).collect();
        return Err(Error::UntrustedKey {
            path: sig_path.to_path_buf(),
            key_id: sig.key_id_hex(),
            trusted: trusted.join(", "),
        });
    };
    keys::verify(signer, &sig, &bytes).map_err(|e| Error::BadSignature {
        path: manifest_path.to_path_buf(),
        reason: format!(
            "does not match its signature from key {}: {e}",
            signer.key_id_hex()
        ),
    })?;
    let manifest = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: manifest_path.to_path_buf(),
        reason,
    })?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let mut warnings = Vec::new();
    match manifest::parse_trusted_comment(&sig.trusted_comment) {
        Some(tc) => {
            if tc.manifest_sha256 != sha {
                warnings.push(format!(
                    "the signature's trusted comment names manifest sha256 {}, the manifest is {sha}",
                    tc.manifest_sha256
                ));
            }
            if tc.name != manifest.name || tc.version != manifest.version {
                warnings.push(format!(
                    "the signature's trusted comment says {:?} version {}, the manifest says {:?} version {}",
                    tc.name, tc.version, manifest.name, manifest.version
                ));
            }
        }
        None => warnings.push(format!(
            "the signature's trusted comment {:?} is not in airlock's form",
            sig.trusted_comment
        )),
    }
    Ok(Signed {
        manifest,
        bytes,
        signature_text: text,
        signer: signer.clone(),
        warnings,
    })
}

/// Opens `dir` and verifies its manifest signature against `trust`. No volume is read.
pub fn open(dir: &Path, trust: &[PublicKey]) -> Result<Opened> {
    let Signed {
        manifest,
        bytes: manifest_bytes,
        signature_text,
        signer,
        warnings,
    } = verify_signed(
        &dir.join(manifest::MANIFEST_NAME),
        &dir.join(manifest::SIGNATURE_NAME),
        trust,
    )?;
    let manifest_sha256 = hex::encode(Sha256::digest(&manifest_bytes));
    Ok(Opened {
        dir: dir.to_path_buf(),
        manifest,
        manifest_bytes,
        manifest_sha256,
        signature_text,
        signer,
        warnings,
    })
}

/// What is wrong with one volume.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VolumeProblem {
    /// Volume file name.
    pub volume: String,
    /// Position, 1-based, and count, for messages ("3 of 7").
    pub index: usize,
    /// What is wrong.
    pub problem: String,
    /// Byte ranges `[start, end)` whose chunk digests fail.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bad_ranges: Vec<(u64, u64)>,
}

/// The error for bad volumes: each listed volume named with its position ("volume data.003
/// of 7 fails its sha256"), then how many others are good when every volume was checked.
/// Problems with index 0 are unlisted files that look like volumes.
pub fn volumes_error(problems: &[VolumeProblem], total: usize, checked_all: bool) -> Error {
    let (listed, unlisted): (Vec<&VolumeProblem>, Vec<&VolumeProblem>) =
        problems.iter().partition(|p| p.index > 0);
    let mut parts: Vec<String> = listed
        .iter()
        .map(|p| format!("volume {} of {total} {}", p.volume, p.problem))
        .chain(
            unlisted
                .iter()
                .map(|p| format!("{} {}", p.volume, p.problem)),
        )
        .collect();
    let good = total.saturating_sub(listed.len());
    if checked_all && !listed.is_empty() && total > 1 {
        parts.push(match good {
            0 => format!("none of the {total} volumes is good"),
            1 => "the other 1 is good".to_string(),
            n => format!("the other {n} are good"),
        });
    }
    Error::BadVolumes {
        summary: parts.join("; "),
        copy_again: listed.iter().map(|p| p.volume.clone()).collect(),
        remove: unlisted.iter().map(|p| p.volume.clone()).collect(),
    }
}

/// Checks every volume's size and chunk digests, all chunks in parallel. The chunk digests are
/// signed, so all of them matching proves the volume's content as well as the whole-volume
/// digest would. Reads only.
pub fn check_volumes(opened: &Opened, progress: &dyn Progress) -> Vec<VolumeProblem> {
    let m = &opened.manifest;
    progress.start("verify volumes", m.totals.volume_bytes);
    let (mut problems, jobs) = stat_volumes(opened);
    let results: Vec<(usize, usize, std::result::Result<bool, String>)> = jobs
        .par_iter()
        .map(|&(i, c)| {
            let v = &m.volumes[i];
            let start = c as u64 * m.chunk_size;
            let end = (start + m.chunk_size).min(v.size);
            progress.item(&v.name);
            let r = hash_range(&opened.dir.join(&v.name), start, end, progress)
                .map(|h| h == v.chunks[c])
                .map_err(|e| e.to_string());
            (i, c, r)
        })
        .collect();
    type BadChunks = (Vec<(u64, u64)>, Option<String>);
    let mut per_volume: std::collections::BTreeMap<usize, BadChunks> = Default::default();
    for (i, c, r) in results {
        let v = &m.volumes[i];
        let start = c as u64 * m.chunk_size;
        let end = (start + m.chunk_size).min(v.size);
        match r {
            Ok(true) => {}
            Ok(false) => per_volume.entry(i).or_default().0.push((start, end)),
            Err(e) => per_volume.entry(i).or_default().1 = Some(e),
        }
    }
    for (i, (mut ranges, err)) in per_volume {
        ranges.sort();
        let v = &m.volumes[i];
        let problem = match err {
            Some(e) => format!("cannot be read: {e}"),
            None => format!(
                "fails its sha256 (bad byte ranges: {})",
                ranges
                    .iter()
                    .map(|(a, b)| format!("{a}-{b}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        problems.push(VolumeProblem {
            volume: v.name.clone(),
            index: i + 1,
            problem,
            bad_ranges: ranges,
        });
    }
    problems.sort_by_key(|p| p.index);
    problems.extend(extra_problems(opened));
    progress.finish();
    problems
}

/// The checks of [`check_volumes`] that need no reading: every listed volume exists, is a
/// regular file and has its manifest size. Returns the problems found and the (volume, chunk)
/// pairs of the volumes that passed, to hash.
fn stat_volumes(opened: &Opened) -> (Vec<VolumeProblem>, Vec<(usize, usize)>) {
    let m = &opened.manifest;
    let mut problems = Vec::new();
    let mut jobs = Vec::new();
    for (i, v) in m.volumes.iter().enumerate() {
        let path = opened.dir.join(&v.name);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => problems.push(VolumeProblem {
                volume: v.name.clone(),
                index: i + 1,
                problem: "is missing".into(),
                bad_ranges: vec![],
            }),
            Err(e) => problems.push(VolumeProblem {
                volume: v.name.clone(),
                index: i + 1,
                problem: format!("cannot be read: {e}"),
                bad_ranges: vec![],
            }),
            Ok(meta) if !meta.is_file() => problems.push(VolumeProblem {
                volume: v.name.clone(),
                index: i + 1,
                problem: "is not a regular file".into(),
                bad_ranges: vec![],
            }),
            Ok(meta) if meta.len() != v.size => problems.push(VolumeProblem {
                volume: v.name.clone(),
                index: i + 1,
                problem: format!(
                    "is {} bytes, the manifest says {} ({})",
                    meta.len(),
                    v.size,
                    if meta.len() < v.size {
                        "truncated"
                    } else {
                        "extended"
                    }
                ),
                bad_ranges: vec![],
            }),
            Ok(_) => {
                for c in 0..v.chunks.len() {
                    jobs.push((i, c));
                }
            }
        }
    }
    (problems, jobs)
}

/// Whether every listed volume exists, is a regular file and has its manifest size (the
/// checks of [`check_volumes`] that need no reading).
pub fn volumes_look_complete(opened: &Opened) -> bool {
    stat_volumes(opened).0.is_empty()
}

/// The files of the bundle directory that the manifest does not list, as the problems
/// [`check_volumes`] reports for them (index 0).
pub fn extra_problems(opened: &Opened) -> Vec<VolumeProblem> {
    extra_files(opened)
        .into_iter()
        .map(|name| VolumeProblem {
            volume: name,
            index: 0,
            problem: "is not listed in the manifest (an extra or duplicated volume?)".into(),
            bad_ranges: vec![],
        })
        .collect()
}

/// Files in the bundle directory that the manifest does not account for.
pub fn extra_files(opened: &Opened) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(&opened.dir) else {
        return vec![];
    };
    let mut out: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n != manifest::MANIFEST_NAME
                && n != manifest::SIGNATURE_NAME
                && !opened.manifest.volumes.iter().any(|v| &v.name == n)
        })
        .collect();
    out.sort();
    out
}

fn hash_range(path: &Path, start: u64, end: u64, progress: &dyn Progress) -> io::Result<String> {
    let f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = start;
    while pos < end {
        let want = ((end - pos) as usize).min(buf.len());
        let n = f.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "volume ended early",
            ));
        }
        h.update(&buf[..n]);
        pos += n as u64;
        progress.advance(n as u64);
    }
    Ok(hex::encode(h.finalize()))
}

/// How the stream reader treats content mismatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The first problem of any kind is an error (unpack).
    Strict,
    /// Volume and file digest mismatches are collected and reading goes on (verify --deep);
    /// structural problems still stop it.
    Collect,
}

/// Receives the entries of a verified stream (the installer; nothing for verify --deep).
pub trait EntrySink {
    /// A directory entry.
    fn dir(&mut self, path: &str) -> Result<()>;
    /// A file entry begins.
    fn begin_file(&mut self, file: &FileEntry) -> Result<()>;
    /// File content.
    fn data(&mut self, bytes: &[u8]) -> Result<()>;
    /// The file's content ended and matched its size and digest.
    fn end_file(&mut self, file: &FileEntry) -> Result<()>;
}

/// Discards everything.
pub struct NullSink;

impl EntrySink for NullSink {
    fn dir(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
    fn begin_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
    fn data(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn end_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
}

/// A read error on a volume (a failing medium), carried up the io::Error chain so the
/// message names the volume and the exit code says "operational", not "bad bundle".
#[derive(Debug)]
struct VolumeIo {
    path: PathBuf,
    source: io::Error,
}

impl std::fmt::Display for VolumeIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}
impl std::error::Error for VolumeIo {}

/// The typed failure a volume reader raises inside the io::Error chain.
#[derive(Debug)]
struct VolumeFailure {
    problem: VolumeProblem,
    /// How many volumes the bundle has.
    total: usize,
}

impl std::fmt::Display for VolumeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.problem.volume, self.problem.problem)
    }
}
impl std::error::Error for VolumeFailure {}

/// Buffers in flight between the volume-reading thread and the stream's consumer.
const STREAM_BUFFERS: usize = 8;
/// Size of each of them.
const STREAM_BUFFER_SIZE: usize = 1 << 20;

/// Reads the volumes in order as one stream, checking each volume's size and chunk digests.
///
/// It runs on a thread of its own ([`VolumeReader::run`]) and hands its buffers to a
/// [`PipeReader`] on the consuming thread, so reading and hashing the volumes overlaps with
/// decompressing, parsing and hashing the files (and, for unpack, writing them): the two SHA-256
/// passes of a stream run on two cores. The signed chunk digests prove a volume's content as
/// well as the whole-volume digest does (FORMAT.md, section 6), and hashing chunks costs the
/// same single pass.
struct VolumeReader<'a> {
    opened: &'a Opened,
    mode: Mode,
    index: usize,
    file: Option<File>,
    read_in_volume: u64,
    chunk_hasher: Sha256,
    in_chunk: u64,
    chunk_index: usize,
    /// Byte ranges of the open volume whose chunk digest failed.
    bad_ranges: Vec<(u64, u64)>,
    problems: Vec<VolumeProblem>,
}

/// What the volume-reading thread hands on, in stream order.
enum Piece {
    /// A buffer and how many of its bytes are stream bytes.
    Data(Vec<u8>, usize),
    /// The error the stream's reader must see at this point.
    Err(io::Error),
}

impl VolumeReader<'_> {
    fn fail(&mut self, problem: String) -> io::Result<()> {
        let count = self.opened.manifest.volumes.len();
        let v = &self.opened.manifest.volumes[self.index];
        let p = VolumeProblem {
            volume: v.name.clone(),
            index: self.index + 1,
            problem,
            bad_ranges: std::mem::take(&mut self.bad_ranges),
        };
        match self.mode {
            Mode::Strict => Err(io::Error::other(VolumeFailure {
                problem: p,
                total: count,
            })),
            Mode::Collect => {
                self.problems.push(p);
                Ok(())
            }
        }
    }

    /// Ends the current chunk and compares its digest with the manifest's.
    fn end_chunk(&mut self) {
        let v = &self.opened.manifest.volumes[self.index];
        let digest = hex::encode(std::mem::take(&mut self.chunk_hasher).finalize());
        if v.chunks.get(self.chunk_index) != Some(&digest) {
            let start = self.chunk_index as u64 * self.opened.manifest.chunk_size;
            self.bad_ranges.push((start, start + self.in_chunk));
        }
        self.chunk_index += 1;
        self.in_chunk = 0;
    }

    /// The thread's body: fills buffers from the pool and sends them until the last volume
    /// ends, an error is sent, or the consumer goes away. Returns the problems collected in
    /// [`Mode::Collect`].
    fn run(mut self, tx: Sender<Piece>, pool: Receiver<Vec<u8>>) -> Vec<VolumeProblem> {
        while let Ok(mut buf) = pool.recv() {
            match self.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send(Piece::Data(buf, n)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Piece::Err(e));
                    break;
                }
            }
        }
        self.problems
    }
}

impl Read for VolumeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let volumes = &self.opened.manifest.volumes;
            if self.index >= volumes.len() {
                return Ok(0);
            }
            let v = &volumes[self.index];
            if self.file.is_none() {
                let path = self.opened.dir.join(&v.name);
                // O_NONBLOCK: a FIFO planted as a volume must not hang the open; the type is
                // checked right after.
                use std::os::unix::fs::OpenOptionsExt;
                let opened_file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                    .open(&path)
                    .and_then(|f| {
                        if f.metadata()?.is_file() {
                            Ok(f)
                        } else {
                            Err(io::Error::other("is not a regular file"))
                        }
                    });
                let f = match opened_file {
                    Ok(f) => f,
                    Err(e) => {
                        let msg = if e.kind() == io::ErrorKind::NotFound {
                            "is missing".to_string()
                        } else {
                            format!("cannot be opened: {e}")
                        };
                        self.fail(msg)?;
                        // Collect mode: the stream cannot go on without the volume's bytes.
                        return Err(io::Error::other(format!("{} is missing", v.name)));
                    }
                };
                self.file = Some(f);
                self.read_in_volume = 0;
                self.chunk_hasher = Sha256::new();
                self.in_chunk = 0;
                self.chunk_index = 0;
                self.bad_ranges.clear();
            }
            let remaining = v.size - self.read_in_volume;
            let chunk_room = self.opened.manifest.chunk_size - self.in_chunk;
            let want = (buf.len() as u64).min(remaining).min(chunk_room) as usize;
            let file = self.file.as_mut().expect("opened above");
            let n = if want == 0 {
                // At the declared end: anything more means the volume was extended.
                let mut probe = [0u8; 1];
                if file.read(&mut probe)? != 0 {
                    let msg = format!(
                        "is longer than the {} bytes the manifest says (extended)",
                        v.size
                    );
                    self.fail(msg)?;
                }
                0
            } else {
                match file.read(&mut buf[..want]) {
                    Ok(n) => n,
                    Err(e) => {
                        return Err(io::Error::other(VolumeIo {
                            path: self.opened.dir.join(&v.name),
                            source: e,
                        }));
                    }
                }
            };
            if n == 0 {
                if self.read_in_volume < v.size {
                    let msg = format!(
                        "ends after {} of its {} bytes (truncated)",
                        self.read_in_volume, v.size
                    );
                    self.bad_ranges.clear();
                    self.fail(msg)?;
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{} is truncated", v.name),
                    ));
                }
                if self.in_chunk > 0 {
                    self.end_chunk();
                }
                if !self.bad_ranges.is_empty() {
                    self.fail("fails its sha256".to_string())?;
                }
                self.file = None;
                self.index += 1;
                continue;
            }
            self.chunk_hasher.update(&buf[..n]);
            self.in_chunk += n as u64;
            self.read_in_volume += n as u64;
            if self.in_chunk == self.opened.manifest.chunk_size {
                self.end_chunk();
            }
            return Ok(n);
        }
    }
}

/// The consuming end of the volume-reading thread: a `BufRead` over the buffers it sends,
/// which go back to its pool once read.
struct PipeReader {
    rx: Receiver<Piece>,
    recycle: Sender<Vec<u8>>,
    current: Option<(Vec<u8>, usize)>,
    pos: usize,
    failed: bool,
}

impl io::BufRead for PipeReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.current.as_ref().is_none_or(|(_, n)| self.pos >= *n) {
            if let Some((buf, _)) = self.current.take() {
                let _ = self.recycle.send(buf);
            }
            self.pos = 0;
            if self.failed {
                return Err(io::Error::other(
                    "the volumes could not be read past an earlier error",
                ));
            }
            match self.rx.recv() {
                Ok(Piece::Data(buf, n)) => self.current = Some((buf, n)),
                Ok(Piece::Err(e)) => {
                    self.failed = true;
                    return Err(e);
                }
                Err(_) => return Ok(&[]),
            }
        }
        let (buf, n) = self.current.as_ref().expect("filled above");
        Ok(&buf[self.pos..*n])
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt;
    }
}

impl Read for PipeReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        use io::BufRead;
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// Stops the decompressed stream at the declared size.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(
                    "the stream goes on past the size the manifest declares (trailing data after the end-of-archive marker, or a decompression bomb); reading stopped there",
                )),
            };
        }
        let want = (buf.len() as u64).min(self.left) as usize;
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// What a streamed read found (in [`Mode::Collect`]; in strict mode any problem is an error).
#[derive(Debug, Default, serde::Serialize)]
pub struct StreamReport {
    /// Volumes that failed while streaming.
    pub volume_problems: Vec<VolumeProblem>,
    /// Files whose content failed their digest.
    pub bad_files: Vec<String>,
}

fn stream_error(e: TarError) -> Error {
    match e {
        TarError::Io(io) => io_to_error(io),
        TarError::Malformed { .. } => Error::BadStream {
            volume: "tar stream".into(),
            reason: e.to_string(),
        },
    }
}

fn io_to_error(e: io::Error) -> Error {
    if e.get_ref().is_some_and(|inner| inner.is::<VolumeIo>()) {
        let inner = e
            .into_inner()
            .expect("checked")
            .downcast::<VolumeIo>()
            .expect("checked");
        return Error::Io {
            path: inner.path,
            source: inner.source,
        };
    }
    if e.get_ref().is_some_and(|inner| inner.is::<VolumeFailure>()) {
        let inner = e
            .into_inner()
            .expect("checked")
            .downcast::<VolumeFailure>()
            .expect("checked");
        return volumes_error(&[inner.problem], inner.total, false);
    }
    Error::BadStream {
        volume: "data stream".into(),
        reason: format!("cannot be decoded: {e}"),
    }
}

/// Streams the verified bundle through `sink`, checking every entry against the manifest.
pub fn stream(
    opened: &Opened,
    mode: Mode,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
) -> Result<StreamReport> {
    if mode == Mode::Strict {
        let extra: Vec<String> = extra_files(opened)
            .into_iter()
            .filter(|n| is_volume_like(n))
            .collect();
        if !extra.is_empty() {
            // Refused before anything is written; the other volumes are checked too, so one
            // message says everything to fix in the bundle directory.
            let problems: Vec<VolumeProblem> = check_volumes(opened, progress)
                .into_iter()
                .filter(|p| p.index > 0 || is_volume_like(&p.volume))
                .collect();
            return Err(volumes_error(
                &problems,
                opened.manifest.volumes.len(),
                true,
            ));
        }
    }
    match stream_inner(opened, mode, sink, progress) {
        Err(e @ (Error::BadFile { .. } | Error::BadStream { .. } | Error::BadVolumes { .. }))
            if mode == Mode::Strict =>
        {
            // Damage in transit shows up first as a bad file or a broken stream, before the
            // volume's own digest is reached, and the stream stops at the first bad volume.
            // Check them all, so the operator re-copies every damaged volume in one trip
            // across the gap instead of distrusting the packer or making several trips.
            let bad: Vec<VolumeProblem> = check_volumes(opened, progress)
                .into_iter()
                .filter(|p| p.index > 0)
                .collect();
            if bad.is_empty() {
                Err(e)
            } else {
                Err(volumes_error(&bad, opened.manifest.volumes.len(), true))
            }
        }
        other => other,
    }
}

/// Whether a stray file in a bundle directory looks like a volume (`data.` followed by digits).
pub fn is_volume_like(name: &str) -> bool {
    name.strip_prefix("data.")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
}

fn stream_inner(
    opened: &Opened,
    mode: Mode,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
) -> Result<StreamReport> {
    let m = &opened.manifest;
    // Progress counts the model's bytes as they come out of the stream, not the compressed
    // bytes read: the operator thinks in the size of the model being installed or checked.
    progress.start("stream", m.totals.file_bytes);
    let volumes = VolumeReader {
        opened,
        mode,
        index: 0,
        file: None,
        read_in_volume: 0,
        chunk_hasher: Sha256::new(),
        in_chunk: 0,
        chunk_index: 0,
        bad_ranges: Vec::new(),
        problems: Vec::new(),
    };
    let mut report = StreamReport::default();
    let (tx, rx) = bounded::<Piece>(STREAM_BUFFERS);
    let (recycle, pool) = bounded::<Vec<u8>>(STREAM_BUFFERS);
    for _ in 0..STREAM_BUFFERS {
        let _ = recycle.send(vec![0u8; STREAM_BUFFER_SIZE]);
    }
    let raw = PipeReader {
        rx,
        recycle,
        current: None,
        pos: 0,
        failed: false,
    };
    let (checked, problems) = std::thread::scope(|s| {
        let reader = s.spawn(move || volumes.run(tx, pool));
        // `raw` is consumed here and dropped before the join, so the reader thread cannot
        // wait on a consumer that has gone.
        let checked = check_stream(m, mode, raw, sink, &mut report, progress);
        let problems = reader.join().expect("volume reader thread panicked");
        (checked, problems)
    });
    checked?;
    report.volume_problems = problems;
    progress.finish();
    Ok(report)
}

/// Decompresses (if needed) and checks the stream read from `raw`, to its very end.
fn check_stream(
    m: &Manifest,
    mode: Mode,
    raw: PipeReader,
    sink: &mut dyn EntrySink,
    report: &mut StreamReport,
    progress: &dyn Progress,
) -> Result<()> {
    match m.compression.algorithm.as_str() {
        "zstd" => {
            // One frame only: skippable or extra frames after it are refused as trailing data.
            let mut dec = zstd::stream::read::Decoder::with_buffer(raw)
                .map_err(io_to_error)?
                .single_frame();
            // A window larger than 128 MiB would let a hostile bundle make us allocate it.
            dec.window_log_max(27).map_err(io_to_error)?;
            let capped = Capped {
                inner: dec,
                left: m.stream.size,
            };
            let mut tar = tar::Reader::new(capped);
            check_entries(m, mode, &mut tar, sink, report, progress)?;
            let capped = tar.into_inner();
            let mut raw = capped.inner.finish();
            drain_trailing(&mut raw)
        }
        _ => {
            let capped = Capped {
                inner: raw,
                left: m.stream.size,
            };
            let mut tar = tar::Reader::new(capped);
            check_entries(m, mode, &mut tar, sink, report, progress)?;
            let mut raw = tar.into_inner().inner;
            drain_trailing(&mut raw)
        }
    }
}

fn drain_trailing(raw: &mut impl Read) -> Result<()> {
    let mut probe = [0u8; 1];
    match raw.read(&mut probe) {
        Ok(0) => Ok(()),
        Ok(_) => Err(Error::BadStream {
            volume: "data stream".into(),
            reason: "trailing data after the end of the compressed stream".into(),
        }),
        Err(e) => Err(io_to_error(e)),
    }
}

fn check_entries<R: Read>(
    m: &Manifest,
    mode: Mode,
    tar: &mut tar::Reader<R>,
    sink: &mut dyn EntrySink,
    report: &mut StreamReport,
    progress: &dyn Progress,
) -> Result<()> {
    let expected = m.expected_entries();
    let mut seen = std::collections::HashSet::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut i = 0;
    while let Some(entry) = tar.next_entry().map_err(stream_error)? {
        let bad = |reason: String| Error::BadStream {
            volume: "tar stream".into(),
            reason,
        };
        let Some(want) = expected.get(i) else {
            return Err(bad(format!(
                "entry {:?} is not in the manifest (extra entry after the last one)",
                entry.path
            )));
        };
        if entry.path != want.path() {
            let reason = if seen.contains(entry.path.as_str()) {
                format!("entry {:?} appears twice", entry.path)
            } else if expected.iter().any(|e| e.path() == entry.path) {
                format!(
                    "entry {:?} is out of manifest order (expected {:?})",
                    entry.path,
                    want.path()
                )
            } else {
                format!(
                    "entry {:?} is not in the manifest (expected {:?})",
                    entry.path,
                    want.path()
                )
            };
            return Err(bad(reason));
        }
        seen.insert(want.path());
        match (*want, entry.kind) {
            (Expected::Dir(p), tar::Kind::Dir) => sink.dir(p)?,
            (Expected::File(f), tar::Kind::File) => {
                if entry.size != f.size {
                    return Err(bad(format!(
                        "entry {:?} is {} bytes in the stream, the manifest says {}",
                        f.path, entry.size, f.size
                    )));
                }
                if entry.executable != f.executable {
                    return Err(bad(format!(
                        "entry {:?} has a mode that disagrees with the manifest",
                        f.path
                    )));
                }
                progress.item(&f.path);
                sink.begin_file(f)?;
                let mut h = Sha256::new();
                loop {
                    let n = tar.read_data(&mut buf).map_err(stream_error)?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                    sink.data(&buf[..n])?;
                    progress.advance(n as u64);
                }
                let digest = hex::encode(h.finalize());
                if digest != f.sha256 {
                    match mode {
                        Mode::Strict => {
                            return Err(Error::BadFile {
                                path: f.path.clone(),
                                reason: format!(
                                    "content fails its sha256 (got {digest}, manifest says {})",
                                    f.sha256
                                ),
                            });
                        }
                        Mode::Collect => report.bad_files.push(f.path.clone()),
                    }
                } else {
                    sink.end_file(f)?;
                }
            }
            (want, _) => {
                return Err(bad(format!(
                    "entry {:?} is a {}, the manifest says it is a {}",
                    entry.path,
                    if entry.kind == tar::Kind::Dir {
                        "directory"
                    } else {
                        "file"
                    },
                    if matches!(want, Expected::Dir(_)) {
                        "directory"
                    } else {
                        "file"
                    }
                )));
            }
        }
        i += 1;
    }
    if let Some(missing) = expected.get(i) {
        return Err(Error::BadStream {
            volume: "tar stream".into(),
            reason: format!(
                "ends before {:?} and {} more manifest entries (missing from the stream)",
                missing.path(),
                expected.len() - i - 1
            ),
        });
    }
    Ok(())
}
