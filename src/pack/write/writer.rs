//! The writer room of the volume writer: the writer thread frames the entry events it is
//! handed ([`super::batch`]) as tar, compresses, and cuts volumes ([`VolumeWriter`], at the
//! volume size and at chunk boundaries, each fsynced); a thread of its own hashes each chunk
//! ([`ChunkHasher`]). It reads no source file and hashes no file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crossbeam_channel::{Receiver, Sender, bounded};
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

use super::batch::{BUFFER_SIZE, Batch, Item};
use crate::fsio;
use crate::manifest::{self, Volume};
use crate::tar;
use crate::writeback::{FLUSH_EVERY, Flusher};

/// Writes volumes, cutting at `volume_size` and at chunk boundaries for the chunk digests.
///
/// The chunk digests are computed by a [`ChunkHasher`] thread from copies of the same bytes, so
/// the writer thread only writes. Format version 2 has no whole-volume digest (the signed chunk
/// digests are the authority, FORMAT.md section 6): a pack makes two SHA-256 passes over the
/// data (files and chunks), where version 1 made three.
pub(super) struct VolumeWriter {
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
        crate::fault::fault("the chunk-hashing thread stopped")
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
    pub(super) fn new(dir: &Path, volume_size: u64, chunk_size: u64, drop_written: bool) -> Self {
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
    pub(super) fn finish(mut self) -> io::Result<(Vec<Volume>, Vec<Vec<u64>>)> {
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

pub(super) enum Sink {
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
    pub(super) fn finish(self) -> io::Result<VolumeWriter> {
        match self {
            Sink::Plain(w) => w.into_inner().map_err(|e| e.into_error()),
            Sink::Zstd(w) => w.finish(),
        }
    }
}

/// The writer thread: tar framing, compression, volumes. Returns the volumes, their chunks'
/// checksums and the stream size.
pub(super) fn write_stream(
    rx: Receiver<Batch<'_>>,
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
