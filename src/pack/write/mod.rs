//! The volume writer: the entries a plan gives → tar → zstd → volumes, with every byte hashed
//! once on the way. It writes what it is given and knows nothing of deltas or manifests.
//!
//! Two threads share the work. The calling thread reads each source file once, hashes it (and
//! checks or computes its Hugging Face etag) and hands the buffers over; the writer thread
//! frames them as tar, compresses and cuts volumes; a third hashes each chunk of the volumes.
//! Buffers travel back for reuse, so memory stays at a few megabytes whatever the model size.
//!
//! Three rooms: [`reader`] (the calling thread and the read-ahead threads: source files read
//! once, hashed, checked unchanged), [`writer`] (the writer thread: tar, zstd, volumes, and the
//! chunk-hashing thread) and [`batch`], the hand-over between them. This file wires them.

mod batch;
mod reader;
mod writer;

use std::io::BufWriter;
use std::path::Path;

use crossbeam_channel::bounded;

use self::batch::{Batch, Outbox};
use self::reader::{LOAD_BATCHES, LOADERS, Loaded, load_ahead};
use self::writer::{Sink, VolumeWriter, write_stream};
use crate::error::{Error, Result};
use crate::manifest::Volume;
use crate::progress::Progress;
use crate::scan::ScanEntry;

pub use self::batch::BUFFER_SIZE;
pub use self::reader::{
    Source, Stream, StreamEntry, WrittenFile, WrittenFiles, digest_and_scan, digest_file,
    model_entries,
};

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
pub(crate) const AUTO_SAMPLE_BYTES: u64 = 4 << 20;
/// Files smaller than this are not sampled.
pub(crate) const AUTO_SAMPLE_MIN_FILE: u64 = 1 << 20;
/// At most this many files are sampled (spread over the file list).
pub(crate) const AUTO_SAMPLE_FILES: usize = 32;
/// The estimated saving below which `--compress auto` stores instead of compressing.
pub const AUTO_MIN_SAVING: f64 = 0.03;

/// Estimates the fraction of the file bytes zstd would save, for `--compress auto`: up to
/// [`AUTO_SAMPLE_BYTES`] from the middle of each file of at least [`AUTO_SAMPLE_MIN_FILE`]
/// bytes (at most [`AUTO_SAMPLE_FILES`] of them) are compressed at level 1, and the savings
/// are weighted by file size. Weights (quantized, or already compressed) gain next to nothing
/// and cost a compression pass; bf16 weights gain about a fifth, and level 1 gains as much as
/// higher levels on them. `None` when no file is large enough to sample.
pub fn estimate_saving(entries: &[ScanEntry], root: &Path) -> Result<Option<f64>> {
    use std::os::unix::fs::FileExt;
    let large: Vec<(&ScanEntry, &str, u64)> = entries
        .iter()
        .filter_map(|e| match e {
            ScanEntry::File { size, path, .. } if *size >= AUTO_SAMPLE_MIN_FILE => {
                Some((e, path.as_str(), *size))
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
    for &(e, rel, size) in large.iter().step_by(step) {
        let path = &*e.source(root).expect("a file");
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
    pub files: WrittenFiles,
    /// Every directory, in stream order.
    pub directories: Vec<String>,
}

/// Writes `stream` as the bundle's stream into volumes in `dir` (a work directory).
pub fn write(
    stream: &Stream<'_>,
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
    let total: u64 = stream
        .iter()
        .map(|e| match e {
            StreamEntry::File { size, .. } => size,
            StreamEntry::Dir(_) => 0,
        })
        .sum();
    progress.start(crate::progress::Phase::Pack, total);
    let (tx, rx) = bounded::<Batch>(BUFFERS);
    let (recycle_tx, pool) = bounded::<Vec<u8>>(BUFFERS + 2);
    for _ in 0..BUFFERS {
        let _ = recycle_tx.send(vec![0u8; BUFFER_SIZE]);
    }
    // One digest a file: the list is made to size, not grown by doubling (a million files).
    let mut files = WrittenFiles::default();
    files.sha256.reserve_exact(
        stream
            .iter()
            .filter(|e| matches!(e, StreamEntry::File { .. }))
            .count(),
    );
    let mut directories = Vec::new();
    let (read_result, write_result) = std::thread::scope(|s| {
        let writer = s.spawn(move || write_stream(rx, recycle_tx, sink));
        let scan_values = opts.scan_values;
        let (loaders, load_rx): (Vec<_>, Vec<_>) = (0..LOADERS)
            .map(|part| {
                let (load_tx, load_rx) = bounded(LOAD_BATCHES);
                let loader = s.spawn(move || load_ahead(stream, scan_values, part, load_tx));
                (loader, load_rx)
            })
            .unzip();
        let mut loaded = Loaded::new(load_rx);
        let read_result = {
            let mut out = Outbox::new(&tx, &pool);
            reader::read_entries(
                stream,
                scan_values,
                &mut out,
                &mut loaded,
                &mut files,
                &mut directories,
                progress,
            )
        };
        drop(tx);
        // A read-ahead thread waiting to hand over a batch stops once nothing takes them.
        drop(loaded);
        for loader in loaders {
            files
                .checks
                .merge(loader.join().expect("read-ahead thread panicked"));
        }
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
    use super::batch::Item;
    use super::reader::{LOAD_BATCH, read_file};
    use super::*;
    use sha2::{Digest, Sha256};
    use std::io::Write;

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
        read_ahead(false);
    }

    /// [`files_read_ahead_travel_in_order_with_their_bytes`] for files the scan found by their
    /// `fstatat` ([`crate::scan::Seen`]): opened and read without an `fstat` first, the same
    /// bytes travel, and a FIFO, link or directory swapped in since the scan is refused as
    /// before, without blocking.
    #[test]
    fn files_found_by_their_status_are_read_ahead_alike() {
        read_ahead(true);
    }

    fn read_ahead(found_by_stat: bool) {
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
                source: Source::Below(&m),
                size: bytes.len() as u64,
                executable: false,
                etag: None,
                // One file the scan kept: its kept bytes travel, not the file's.
                prefetched: (path == "d2/f0200").then(|| crate::scan::Prefetched::for_test(bytes)),
                checks_left: false,
                seen: found_by_stat
                    .then(|| crate::scan::Seen::of(&rustix::fs::stat(m.join(path)).unwrap())),
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
        let entries = Stream::Listed(entries);
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
        for (f, (path, bytes)) in written.files.sha256.iter().zip(&want) {
            assert_eq!(hex::encode(f), hex::encode(Sha256::digest(bytes)), "{path}");
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
        // The refusal of a write into a new directory `name`, as text.
        let refusal = |name: &str| {
            let out = t.path().join(name);
            std::fs::create_dir(&out).unwrap();
            write(&entries, &out, &opts, &crate::progress::Silent)
                .unwrap_err()
                .to_string()
        };
        let err = refusal("out3");
        assert!(
            err.contains("d1/f0150") && err.contains("no longer a regular file"),
            "{err}"
        );
        std::fs::remove_file(m.join("d1/f0150")).unwrap();
        std::fs::write(t.path().join("host-secret"), b"host secret").unwrap();
        std::os::unix::fs::symlink(t.path().join("host-secret"), m.join("d1/f0150")).unwrap();
        let err = refusal("out4");
        assert!(
            err.contains("d1/f0150") && err.contains("symbolic link"),
            "{err}"
        );
        // A directory in its place: opened (found by its status, without a look first), its
        // read fails, and the reading thread refuses it by name.
        std::fs::remove_file(m.join("d1/f0150")).unwrap();
        std::fs::create_dir(m.join("d1/f0150")).unwrap();
        let err = refusal("out5");
        assert!(
            err.contains("d1/f0150") && err.contains("no longer a regular file"),
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
                path: path.into(),
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
            assert_eq!(got.sha256, <[u8; 32]>::from(Sha256::digest(bytes)));
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
                    Item::Begin { path, .. } => files.push((path.to_string(), Vec::new())),
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
