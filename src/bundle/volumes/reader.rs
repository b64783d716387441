//! The volume-reading thread: [`VolumeReader`] reads the volumes in order as one payload and
//! checks them as it goes, handing its buffers to a [`PipeReader`] on the consuming thread.

use std::io::{self, Read};
use std::path::PathBuf;

use crossbeam_channel::{Receiver, Sender};
use sha2::{Digest, Sha256};

use super::at_rest::*;
use super::source::*;
use super::units::*;
use crate::manifest::Manifest;
use crate::parity::{ParityError, Shard};

use crate::entries::Mode;

/// A read error on a volume (a failing medium), carried up the io::Error chain so the
/// message names the volume and the exit code says "operational", not "bad bundle".
#[derive(Debug)]
pub(in crate::bundle) struct VolumeIo {
    pub(in crate::bundle) path: PathBuf,
    pub(in crate::bundle) source: io::Error,
}

impl std::fmt::Display for VolumeIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}
impl std::error::Error for VolumeIo {}

/// The typed failure a volume reader raises inside the io::Error chain.
#[derive(Debug)]
pub(in crate::bundle) struct VolumeFailure {
    pub(in crate::bundle) problem: VolumeProblem,
    /// How many data volumes the bundle has.
    pub(in crate::bundle) total: usize,
}

impl std::fmt::Display for VolumeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.problem.volume, self.problem.problem)
    }
}
impl std::error::Error for VolumeFailure {}

/// Why the volume reader stops the stream (issue 34 item 6: typed, not a string): it travels
/// through the zstd decoder, which passes only `io::Error`, made one by [`carried`] (its only
/// conversion) and taken apart by `io_to_error` in `bundle/stream.rs` ([`VolumeIo`] and
/// [`VolumeFailure`] by type, the others by their text, which is the message).
#[derive(Debug, thiserror::Error)]
pub(in crate::bundle) enum ReadStop {
    /// A read error on a volume (a failing medium).
    #[error(transparent)]
    Io(VolumeIo),
    /// A volume that fails its size or a digest (strict mode).
    #[error(transparent)]
    Failure(VolumeFailure),
    /// A damaged volume whose parity stripe lost more units than it can rebuild (collect mode:
    /// the problem is recorded, the stream cannot go on).
    #[error("{0} cannot be rebuilt from parity")]
    Unrebuildable(String),
    /// A volume that is missing or cannot be opened (collect mode: recorded likewise).
    #[error("{0} is missing")]
    Missing(String),
    /// Rebuilding a chunk from parity failed (the source of a [`VolumeIo`]).
    #[error("rebuilding chunk {chunk} from parity: {why}")]
    Rebuild { chunk: u64, why: ParityError },
    /// Too little memory for a parity unit (the source of a [`VolumeIo`]).
    #[error(transparent)]
    Parity(ParityError),
    /// A read after the reader stopped on an earlier error.
    #[error("the volumes could not be read past an earlier error")]
    PastEarlierError,
}

impl From<ReadStop> for io::Error {
    fn from(s: ReadStop) -> io::Error {
        match s {
            // By their own types, for `io_to_error`'s downcasts.
            ReadStop::Io(e) => carried(e),
            ReadStop::Failure(e) => carried(e),
            s => carried(s),
        }
    }
}

/// A typed error of the reader as an `io::Error` (kind `Other`), the one place the reader makes
/// one.
fn carried(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// Reads the volumes in order as one payload, checking each volume's size and chunk digests
/// (and its whole-volume digest where the manifest has one).
///
/// It runs on a thread of its own ([`VolumeReader::run`]) and hands its buffers to a
/// [`PipeReader`] on the consuming thread, so reading and hashing the volumes overlaps with
/// decompressing, parsing and hashing the files (and, for unpack, writing them): the two SHA-256
/// passes of a stream run on two cores.
pub(in crate::bundle) struct VolumeReader<'a> {
    manifest: &'a Manifest,
    source: &'a dyn VolumeSource,
    mode: Mode,
    index: usize,
    file: Option<Box<dyn Read + Send + 'a>>,
    read_in_volume: u64,
    chunk_hasher: Sha256,
    /// The whole-volume hasher, for a volume whose manifest entry has a `sha256`.
    whole_hasher: Option<Sha256>,
    in_chunk: u64,
    chunk_index: usize,
    /// Byte ranges of the open volume whose chunk digest failed.
    bad_ranges: Vec<(u64, u64)>,
    problems: Vec<VolumeProblem>,
    /// With parity: unit-by-unit reading, rebuilding erased units (FORMAT.md section 17.3).
    units: Option<UnitReader<'a>>,
    /// The erased shards of the stripe of the data unit being rebuilt, while one is.
    rebuilding: Option<Vec<Shard>>,
    /// Rebuilt bytes `[slice_start, slice_start + slice.len())` of that unit.
    slice: Vec<u8>,
    slice_start: u64,
    /// Names of the data volumes with units rebuilt from parity, in order.
    repaired: Vec<String>,
    /// With parity and units of at most [`VolumeReader::max_held`] bytes: the data unit being
    /// handed on, read once and checked (or rebuilt and checked) before any of it is.
    unit: Vec<u8>,
    /// Whether `unit` holds the current unit.
    unit_held: bool,
    /// Largest unit read whole into memory; larger ones are read twice (hashed, then streamed).
    max_held: u64,
    /// A resumed stream: the volume and the chunk-aligned offset in it to start at.
    start: Option<(usize, u64)>,
}

/// What the volume-reading thread hands on, in stream order.
pub(in crate::bundle) enum Piece {
    /// A buffer and how many of its bytes are stream bytes.
    Data(Vec<u8>, usize),
    /// The error the stream's reader must see at this point.
    Err(io::Error),
}

impl<'a> VolumeReader<'a> {
    pub(in crate::bundle) fn new(
        manifest: &'a Manifest,
        source: &'a dyn VolumeSource,
        mode: Mode,
    ) -> Self {
        VolumeReader {
            manifest,
            source,
            mode,
            index: 0,
            file: None,
            read_in_volume: 0,
            chunk_hasher: Sha256::new(),
            whole_hasher: None,
            in_chunk: 0,
            chunk_index: 0,
            bad_ranges: Vec::new(),
            problems: Vec::new(),
            units: UnitReader::new(manifest, source),
            rebuilding: None,
            slice: Vec::new(),
            slice_start: 0,
            repaired: Vec::new(),
            unit: Vec::new(),
            unit_held: false,
            max_held: source.unit_memory(),
            start: None,
        }
    }

    /// Starts at byte `pos` of volume `index` instead of the payload's start: `pos` a multiple
    /// of the chunk size (0 for a volume with a whole-volume digest), so every chunk read is
    /// read whole and checked against its signed digest before the stream ends.
    pub(in crate::bundle) fn starting_at(mut self, index: usize, pos: u64) -> Self {
        self.index = index;
        if self.units.is_some() {
            self.read_in_volume = pos;
            self.chunk_index = (pos / self.manifest.chunk_size) as usize;
            self.in_chunk = 0;
        } else {
            self.start = Some((index, pos));
        }
        self
    }

    fn fail(&mut self, problem: String) -> io::Result<()> {
        self.fail_with(problem, None)
    }

    /// [`VolumeReader::fail`] for a volume that is not there: `elsewhere` is the medium that
    /// holds it, when the media say.
    fn fail_with(&mut self, problem: String, missing: Option<Option<String>>) -> io::Result<()> {
        let count = self.manifest.volumes.len();
        let v = &self.manifest.volumes[self.index];
        let p = VolumeProblem {
            volume: v.name.clone(),
            index: self.index,
            problem,
            bad_ranges: merge_ranges(std::mem::take(&mut self.bad_ranges)),
            missing: missing.is_some(),
            elsewhere: missing.flatten(),
        };
        match self.mode {
            Mode::Strict => Err(ReadStop::Failure(VolumeFailure {
                problem: p,
                total: count,
            })
            .into()),
            Mode::Collect => {
                self.problems.push(p);
                Ok(())
            }
        }
    }

    /// Ends the current chunk and compares its digest with the manifest's.
    fn end_chunk(&mut self) {
        let v = &self.manifest.volumes[self.index];
        let digest = hex::encode(std::mem::take(&mut self.chunk_hasher).finalize());
        if v.chunks.get(self.chunk_index) != Some(&digest) {
            let start = self.chunk_index as u64 * self.manifest.chunk_size;
            self.bad_ranges.push((start, start + self.in_chunk));
        }
        self.chunk_index += 1;
        self.in_chunk = 0;
    }

    /// The thread's body: fills buffers from the pool and sends them until the last volume
    /// ends, an error is sent, or the consumer goes away. Returns the problems collected in
    /// [`Mode::Collect`], and the data volumes rebuilt in part from parity.
    pub(in crate::bundle) fn run(
        mut self,
        tx: Sender<Piece>,
        pool: Receiver<Vec<u8>>,
    ) -> (Vec<VolumeProblem>, Vec<String>) {
        while let Ok(mut buf) = pool.recv() {
            // A buffer is filled before it is sent: with parity a read ends at the end of its
            // unit (tens of KiB), and a message per unit cost more than the units' digests.
            // Bytes are still handed on only after their unit checked, and in order; an error
            // follows the checked bytes before it.
            let mut filled = 0;
            let mut error = None;
            let mut ended = false;
            while filled < buf.len() {
                match self.read(&mut buf[filled..]) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => filled += n,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            if filled > 0 && tx.send(Piece::Data(buf, filled)).is_err() {
                break;
            }
            if let Some(e) = error {
                let _ = tx.send(Piece::Err(e));
                break;
            }
            if ended {
                break;
            }
        }
        (self.problems, self.repaired)
    }

    /// The part of [`VolumeReader::read_parity`] for units held in memory: data unit `u` of
    /// `len` real bytes, the current one, handed on from memory, loaded first at its start.
    fn read_held(&mut self, u: u64, len: u64, buf: &mut [u8]) -> io::Result<usize> {
        if !self.unit_held {
            self.load_unit(u, len)?;
        }
        let from = self.in_chunk as usize;
        let n = buf.len().min(len as usize - from);
        buf[..n].copy_from_slice(&self.unit[from..from + n]);
        self.in_chunk += n as u64;
        self.read_in_volume += n as u64;
        if self.in_chunk == len {
            self.unit_held = false;
            self.chunk_index += 1;
            self.in_chunk = 0;
        }
        Ok(n)
    }

    /// Reads data unit `u` (`len` real bytes) into memory and checks it against its signed
    /// digest; an erased unit (unreadable, missing, or failing its digest) is rebuilt from its
    /// stripe into memory and checked again.
    fn load_unit(&mut self, u: u64, len: u64) -> io::Result<()> {
        let ur = self.units.as_ref().expect("parity mode");
        let g = ur.g;
        let name = self.manifest.volumes[self.index].name.clone();
        let io_error = |path: PathBuf, e: ReadStop| {
            io::Error::from(ReadStop::Io(VolumeIo {
                path,
                source: e.into(),
            }))
        };
        let len_us = len as usize;
        if self.unit.len() < len_us {
            self.unit
                .try_reserve_exact(len_us - self.unit.len())
                .map_err(|_| {
                    io_error(
                        self.source.path(&name),
                        ReadStop::Parity(ParityError::Memory(len)),
                    )
                })?;
        }
        self.unit.resize(len_us, 0);
        let (want, _) = ur.digest(false, u);
        let read = ur.read_data(u, 0, &mut self.unit);
        if read.is_ok() && hex::encode(Sha256::digest(&self.unit)) == want {
            ur.set_known(false, u, true);
            self.unit_held = true;
            return Ok(());
        }
        ur.set_known(false, u, false);
        let (k, d) = g.locate(u);
        let erased = ur.erased(k);
        let chunk = self.chunk_index;
        if erased.len() > g.recovery as usize {
            let msg = format!(
                "is damaged (chunk {chunk}) and its parity stripe {k} lost {} units, more than its {} recovery units: beyond what parity can rebuild",
                erased.len(),
                g.recovery
            );
            self.fail(msg)?;
            return Err(ReadStop::Unrebuildable(name).into());
        }
        if self.repaired.last() != Some(&name) {
            self.repaired.push(name.clone());
            if self.mode == Mode::Collect {
                self.problems.push(VolumeProblem {
                    volume: name.clone(),
                    index: self.index,
                    problem: "is damaged (rebuilt from parity to read on)".into(),
                    bad_ranges: vec![],
                    elsewhere: None,
                    missing: false,
                });
            }
        }
        let unit = &mut self.unit;
        let r = ur.rebuild(k, &erased, 0, g.unit_size, &mut |shard, off, bytes| {
            if shard == Shard::Data(d) && off < len {
                let n = (len - off).min(bytes.len() as u64) as usize;
                unit[off as usize..off as usize + n].copy_from_slice(&bytes[..n]);
            }
            Ok(())
        });
        if let Err(e) = r {
            return Err(io_error(
                self.source.path(&name),
                ReadStop::Rebuild {
                    chunk: chunk as u64,
                    why: e,
                },
            ));
        }
        self.unit_held = true;
        if hex::encode(Sha256::digest(&self.unit)) != want {
            let start = chunk as u64 * self.manifest.chunk_size;
            self.bad_ranges.push((start, start + len));
            self.fail(format!(
                "chunk {chunk} rebuilt from parity does not match its signed digest (the parity volumes are damaged or not this bundle's)"
            ))?;
        }
        Ok(())
    }

    /// [`Read::read`] for a bundle with parity: each data unit is checked against its signed
    /// digest before any of its bytes are handed on. A unit of at most [`parity::MAX_UNIT_SIZE`]
    /// (every unit `pack` makes, but for payloads of terabytes) is read once into memory,
    /// hashed there and handed on from there ([`VolumeReader::read_held`]). A larger one (the
    /// 64 MiB units of bundles packed before issue 24) is hashed, then read again and hashed
    /// again as it goes (media that change between the two reads are caught); an erased one
    /// is rebuilt from its stripe slice by slice and checked at its end. Memory stays at one
    /// unit, or `(D + R)` slices.
    fn read_parity(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let volumes = &self.manifest.volumes;
            if self.index >= volumes.len() {
                return Ok(0);
            }
            let v = &volumes[self.index];
            if self.read_in_volume == v.size {
                if !self.bad_ranges.is_empty() {
                    self.fail("fails its sha256".to_string())?;
                }
                self.index += 1;
                self.read_in_volume = 0;
                self.chunk_index = 0;
                self.in_chunk = 0;
                self.bad_ranges.clear();
                continue;
            }
            let ur = self.units.as_ref().expect("parity mode");
            let g = ur.g;
            let u = ur.layout.unit_of_chunk(self.index, self.chunk_index);
            let (_, _, len) = ur.layout.data_unit(u);
            if g.unit_size <= self.max_held {
                return self.read_held(u, len, buf);
            }
            if self.in_chunk == 0 && self.rebuilding.is_none() && !ur.intact(false, u) {
                let (k, _) = g.locate(u);
                let erased = ur.erased(k);
                if erased.len() > g.recovery as usize {
                    let msg = format!(
                        "is damaged (chunk {}) and its parity stripe {k} lost {} units, more than its {} recovery units: beyond what parity can rebuild",
                        self.chunk_index,
                        erased.len(),
                        g.recovery
                    );
                    self.fail(msg)?;
                    return Err(ReadStop::Unrebuildable(v.name.clone()).into());
                }
                if self.repaired.last() != Some(&v.name) {
                    self.repaired.push(v.name.clone());
                    if self.mode == Mode::Collect {
                        self.problems.push(VolumeProblem {
                            volume: v.name.clone(),
                            index: self.index,
                            problem: "is damaged (rebuilt from parity to read on)".into(),
                            bad_ranges: vec![],
                            elsewhere: None,
                            missing: false,
                        });
                    }
                }
                self.rebuilding = Some(erased);
                self.slice.clear();
                self.slice_start = 0;
            }
            let want = (buf.len() as u64).min(len - self.in_chunk) as usize;
            let n = match &self.rebuilding {
                None => {
                    let ur = self.units.as_ref().expect("parity mode");
                    if let Err(e) = ur.read_data(u, self.in_chunk, &mut buf[..want]) {
                        return Err(ReadStop::Io(VolumeIo {
                            path: self.source.path(&v.name),
                            source: e,
                        })
                        .into());
                    }
                    want
                }
                Some(erased) => {
                    let held = self.slice_start..self.slice_start + self.slice.len() as u64;
                    if !held.contains(&self.in_chunk) {
                        let size = g.slice_size() as u64;
                        let start = self.in_chunk / size * size;
                        let end = (start + size).min(g.unit_size);
                        let (k, d) = g.locate(u);
                        let ur = self.units.as_ref().expect("parity mode");
                        let mut slice = std::mem::take(&mut self.slice);
                        let len = (end - start) as usize;
                        let r = slice
                            .try_reserve_exact(len.saturating_sub(slice.len()))
                            .map_err(|_| ParityError::Memory(len as u64))
                            .and_then(|()| {
                                slice.resize(len, 0);
                                ur.rebuild(k, erased, start, end, &mut |shard, off, bytes| {
                                    if shard == Shard::Data(d) {
                                        let o = (off - start) as usize;
                                        slice[o..o + bytes.len()].copy_from_slice(bytes);
                                    }
                                    Ok(())
                                })
                            });
                        if let Err(e) = r {
                            return Err(ReadStop::Io(VolumeIo {
                                path: self.source.path(&v.name),
                                source: ReadStop::Rebuild {
                                    chunk: self.chunk_index as u64,
                                    why: e,
                                }
                                .into(),
                            })
                            .into());
                        }
                        self.slice = slice;
                        self.slice_start = start;
                    }
                    let from = (self.in_chunk - self.slice_start) as usize;
                    let n = want.min(self.slice.len() - from);
                    buf[..n].copy_from_slice(&self.slice[from..from + n]);
                    n
                }
            };
            self.chunk_hasher.update(&buf[..n]);
            self.in_chunk += n as u64;
            self.read_in_volume += n as u64;
            if self.in_chunk == len {
                let before = self.bad_ranges.len();
                let chunk = self.chunk_index;
                self.end_chunk();
                if self.rebuilding.take().is_some() && self.bad_ranges.len() > before {
                    self.fail(format!(
                        "chunk {chunk} rebuilt from parity does not match its signed digest (the parity volumes are damaged or not this bundle's)"
                    ))?;
                }
            }
            return Ok(n);
        }
    }
}

impl Read for VolumeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.units.is_some() {
            return self.read_parity(buf);
        }
        loop {
            let volumes = &self.manifest.volumes;
            if self.index >= volumes.len() {
                return Ok(0);
            }
            let v = &volumes[self.index];
            if self.file.is_none() {
                let at = match self.start {
                    Some((k, pos)) if k == self.index => pos,
                    _ => 0,
                };
                self.start = None;
                let f = match self.source.open_at(self.index, &v.name, at) {
                    Ok(f) => f,
                    Err(e) => {
                        if e.kind() == io::ErrorKind::NotFound {
                            let (msg, elsewhere) = self.source.missing(&v.name);
                            self.fail_with(msg, Some(elsewhere))?;
                        } else {
                            self.fail(format!("cannot be opened: {e}"))?;
                        }
                        // Collect mode: the stream cannot go on without the volume's bytes.
                        return Err(ReadStop::Missing(v.name.clone()).into());
                    }
                };
                self.file = Some(f);
                self.read_in_volume = at;
                self.chunk_hasher = Sha256::new();
                self.whole_hasher = v.sha256.as_ref().map(|_| Sha256::new());
                self.in_chunk = 0;
                self.chunk_index = (at / self.manifest.chunk_size) as usize;
                self.bad_ranges.clear();
            }
            let remaining = v.size - self.read_in_volume;
            let chunk_room = self.manifest.chunk_size - self.in_chunk;
            let want = (buf.len() as u64).min(remaining).min(chunk_room) as usize;
            let file = self.file.as_mut().expect("opened above");
            let n = if want == 0 {
                // At the declared end: anything more means the volume was extended.
                let mut probe = [0u8; 1];
                if read_retrying(file, &mut probe)? != 0 {
                    let msg = format!(
                        "is longer than the {} bytes the manifest says (extended)",
                        v.size
                    );
                    self.fail(msg)?;
                }
                0
            } else {
                match read_retrying(file, &mut buf[..want]) {
                    Ok(n) => n,
                    Err(e) => {
                        return Err(ReadStop::Io(VolumeIo {
                            path: self.source.path(&v.name),
                            source: e,
                        })
                        .into());
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
                let whole_ok = match (self.whole_hasher.take(), &v.sha256) {
                    (Some(h), Some(want)) => hex::encode(h.finalize()) == *want,
                    _ => true,
                };
                if !self.bad_ranges.is_empty() {
                    self.fail("fails its sha256".to_string())?;
                } else if !whole_ok {
                    self.fail(WHOLE_DIGEST_DISAGREES.to_string())?;
                }
                self.file = None;
                self.index += 1;
                continue;
            }
            self.chunk_hasher.update(&buf[..n]);
            if let Some(h) = &mut self.whole_hasher {
                h.update(&buf[..n]);
            }
            self.in_chunk += n as u64;
            self.read_in_volume += n as u64;
            if self.in_chunk == self.manifest.chunk_size {
                self.end_chunk();
            }
            return Ok(n);
        }
    }
}

/// One `read`, retried when a signal interrupts it.
pub(super) fn read_retrying(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The consuming end of the volume-reading thread: a `BufRead` over the buffers it sends,
/// which go back to its pool once read.
pub(in crate::bundle) struct PipeReader {
    rx: Receiver<Piece>,
    recycle: Sender<Vec<u8>>,
    current: Option<(Vec<u8>, usize)>,
    pos: usize,
    failed: bool,
}

impl PipeReader {
    pub(in crate::bundle) fn new(rx: Receiver<Piece>, recycle: Sender<Vec<u8>>) -> Self {
        PipeReader {
            rx,
            recycle,
            current: None,
            pos: 0,
            failed: false,
        }
    }
}

impl io::BufRead for PipeReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.current.as_ref().is_none_or(|(_, n)| self.pos >= *n) {
            if let Some((buf, _)) = self.current.take() {
                let _ = self.recycle.send(buf);
            }
            self.pos = 0;
            if self.failed {
                return Err(ReadStop::PastEarlierError.into());
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
