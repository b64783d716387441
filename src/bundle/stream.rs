//! The payload of an opened bundle, checked entry by entry: volumes → zstd → [`Capped`] → tar
//! → [`Verifier`] → an [`EntrySink`] (an installer, an upload, or nothing for
//! `verify --deep`).
//!
//! The stream is held to the manifest exactly: entries in order with the declared types, sizes
//! and digests, decompressed output capped at the declared stream size (no decompression
//! bombs), the stream exactly `stream.size` bytes long, and nothing after the end-of-archive
//! marker or the last compressed frame.

use std::io::{self, Read};

use crossbeam_channel::bounded;

use super::open::BundleDir;
use super::volumes::{
    self, DirVolumes, PipeReader, STREAM_BUFFER_SIZE, STREAM_BUFFERS, VolumeCounts, VolumeFailure,
    VolumeIo, VolumeProblem, VolumeReader, VolumeSource, check_volumes, stray_files, volumes_error,
};
use crate::entries::{Blame, EntrySink, Mode, RawEntry, Verifier};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::progress::{Phase, Progress};
use crate::tar::{self, TarError};

/// Stops the decompressed stream at the declared size.
pub struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Capped<R> {
    /// Caps `inner` at `size` bytes; one byte more is an error.
    pub fn new(inner: R, size: u64) -> Self {
        Capped { inner, left: size }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(io::ErrorKind::InvalidData, PastDeclaredSize)),
            };
        }
        let want = (buf.len() as u64).min(self.left) as usize;
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// A decompressed stream longer than the manifest declares (typed inside [`Capped`]'s
/// `io::Error`, kind `InvalidData`; its words are the reason `unpack` and `verify` give).
#[derive(Debug, thiserror::Error)]
#[error(
    "the stream goes on past the size the manifest declares (trailing data after the end-of-archive marker, or a decompression bomb); reading stopped there"
)]
pub(crate) struct PastDeclaredSize;

/// Where a resumed source started reading.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StartedAt {
    /// The first entry fed (a path of the manifest).
    pub entry: String,
    /// The volume read first (for a bundle on disk), and the byte offset in it.
    pub volume: Option<String>,
    /// The byte offset in that volume (a chunk boundary).
    pub offset: u64,
}

/// What a streamed read found (in [`Mode::Collect`]; in strict mode any problem is an error).
#[derive(Debug, Default, serde::Serialize)]
pub struct StreamReport {
    /// Volumes that failed while streaming.
    pub volume_problems: Vec<VolumeProblem>,
    /// Files whose content failed their digest.
    pub bad_files: Vec<String>,
    /// Data volumes with chunks rebuilt from parity as they were read (FORMAT.md section 17).
    pub repaired: Vec<String>,
    /// Where a resumed stream started.
    #[serde(skip)]
    pub started_at: Option<StartedAt>,
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
        return volumes_error(
            &[inner.problem],
            &[],
            VolumeCounts {
                data: inner.total,
                parity: 0,
            },
            false,
        );
    }
    Error::BadStream {
        volume: "data stream".into(),
        reason: format!("cannot be decoded: {e}"),
    }
}

/// Streams the verified bundle through `sink`, checking every entry against the manifest.
///
/// In [`Mode::Strict`] (unpack) a stray volume-like file in the bundle directory is refused
/// before anything is read, and a failure of the stream is followed by a check of every
/// volume, so the error names each damaged volume at once.
pub fn stream(
    opened: &BundleDir,
    mode: Mode,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
) -> Result<StreamReport> {
    stream_from(opened, mode, sink, progress, 0)
}

/// [`stream`] from the `start`-th entry of the manifest (bundle order) on, for an install that
/// already holds every entry before it: the volumes are read from the chunk holding that
/// entry's header, and the entries before it are neither read nor fed. `start` counts the
/// stream's entries ([`Manifest::stream_entries`]: for a delta, its carried files and
/// patches) and above 0 needs a stored (uncompressed) payload.
pub fn stream_from(
    opened: &BundleDir,
    mode: Mode,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
    start: usize,
) -> Result<StreamReport> {
    if mode == Mode::Strict {
        let stray: Vec<_> = stray_files(opened)
            .into_iter()
            .filter(|s| s.kind == volumes::StrayKind::VolumeLike)
            .collect();
        if !stray.is_empty() {
            // Refused before anything is written; the other volumes are checked too, so one
            // message says everything to fix in the bundle directory.
            let listed = check_volumes(opened, progress);
            return Err(volumes_error(
                &listed,
                &stray,
                VolumeCounts::data_of(&opened.manifest),
                true,
            ));
        }
    }
    let source = DirVolumes::of(opened, progress);
    match stream_volumes_from(&opened.manifest, &source, mode, sink, progress, start) {
        Err(e @ (Error::BadFile { .. } | Error::BadStream { .. } | Error::BadVolumes { .. }))
            if mode == Mode::Strict =>
        {
            // Damage in transit shows up first as a bad file or a broken stream, before the
            // volume's own digest is reached, and the stream stops at the first bad volume.
            // Check them all, so the operator re-copies every damaged volume in one trip
            // across the gap instead of distrusting the packer or making several trips.
            let bad = check_volumes(opened, progress);
            if bad.is_empty() {
                Err(e)
            } else {
                let e = volumes_error(&bad, &[], VolumeCounts::data_of(&opened.manifest), true);
                Err(with_parity_assessment(opened, e, &bad, progress))
            }
        }
        other => other,
    }
}

/// For a bundle with parity whose volumes failed beyond what parity rebuilt as they streamed:
/// the damage (`data`, the data volumes' problems already measured) weighed against the parity
/// budget, appended to the message, and the volumes to copy again narrowed to those parity
/// cannot rebuild.
fn with_parity_assessment(
    opened: &BundleDir,
    e: Error,
    data: &[VolumeProblem],
    progress: &dyn Progress,
) -> Error {
    let Error::BadVolumes {
        mut summary,
        mut copy_again,
        remove,
    } = e
    else {
        return e;
    };
    if opened.manifest.parity.is_some() && remove.is_empty() {
        let parity = volumes::check_parity_volumes(opened, progress);
        if let Some(r) = volumes::assess(opened, data, &parity) {
            summary.push_str("; ");
            summary.push_str(&r.describe());
            if !r.repairable {
                copy_again = r.copy_again;
            }
        }
    }
    Error::BadVolumes {
        summary,
        copy_again,
        remove,
    }
}

/// Streams the volumes `source` gives for `manifest` through `sink`: the volume reader on a
/// thread of its own, then decompression capped at `stream.size`, the strict tar reader and
/// the entry checks. The manifest must have passed [`Manifest::validate`] (it has, when it
/// comes from [`Manifest::parse`]).
pub fn stream_volumes(
    manifest: &Manifest,
    source: &dyn VolumeSource,
    mode: Mode,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
) -> Result<StreamReport> {
    stream_volumes_from(manifest, source, mode, sink, progress, 0)
}

/// Where a stream resumed at entry `start` begins: the tar offset of that entry's header
/// (FORMAT.md section 7.4), the volume holding it, the chunk boundary at or before it in that
/// volume (the volume's start when it has a whole-volume digest) and how many bytes from there
/// to the header.
struct Resume {
    offset: u64,
    volume: usize,
    at: u64,
    skip: u64,
    skipped_file_bytes: u64,
}

fn resume_point(m: &Manifest, start: usize) -> Result<Resume> {
    let bad = |reason: &str| Error::BadStream {
        volume: "tar stream".into(),
        reason: reason.to_string(),
    };
    if m.compression.algorithm != "none" {
        return Err(bad("a compressed stream cannot be resumed part way"));
    }
    // The stream's own entries: for a delta, its carried files and patches (FORMAT.md
    // section 16.2), whose sizes are what the tar holds.
    let patches = m.patch_entries();
    let entries = m.stream_entries(&patches);
    let mut offset = 0u64;
    let mut skipped_file_bytes = 0u64;
    for e in entries.iter().take(start) {
        let (path, dir, size) = match e {
            crate::manifest::Expected::Dir(d) => (*d, true, 0),
            crate::manifest::Expected::File(f) => (f.path.as_str(), false, f.size),
        };
        skipped_file_bytes += size;
        offset = tar::entry_stream_size(path, dir, size)
            .and_then(|n| offset.checked_add(n))
            .ok_or_else(|| bad("the stream size overflows"))?;
    }
    let mut before = 0u64;
    for (k, v) in m.volumes.iter().enumerate() {
        if offset < before + v.size {
            let in_volume = offset - before;
            let at = if v.sha256.is_some() {
                0
            } else {
                in_volume / m.chunk_size * m.chunk_size
            };
            return Ok(Resume {
                offset,
                volume: k,
                at,
                skip: in_volume - at,
                skipped_file_bytes,
            });
        }
        before += v.size;
    }
    Err(bad("the resume point lies past the last volume"))
}

/// The volume and the byte offset in it a stream resumed at entry `start` reads first.
pub fn resume_volume(m: &Manifest, start: usize) -> Option<(String, u64)> {
    let r = resume_point(m, start).ok()?;
    Some((m.volumes[r.volume].name.clone(), r.at))
}

/// [`stream_volumes`] from the `start`-th entry on ([`stream_from`]).
pub(crate) fn stream_volumes_from(
    manifest: &Manifest,
    source: &dyn VolumeSource,
    mode: Mode,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
    start: usize,
) -> Result<StreamReport> {
    let m = manifest;
    let resume = if start > 0 {
        Some(resume_point(m, start)?)
    } else {
        None
    };
    // Progress counts the model's bytes as they come out of the stream, not the compressed
    // bytes read: the operator thinks in the size of the model being installed or checked.
    progress.start(
        Phase::Stream,
        m.totals
            .file_bytes
            .saturating_sub(resume.as_ref().map_or(0, |r| r.skipped_file_bytes)),
    );
    let mut volumes = VolumeReader::new(m, source, mode);
    let mut report = StreamReport::default();
    if let Some(r) = &resume {
        volumes = volumes.starting_at(r.volume, r.at);
        let patches = m.patch_entries();
        report.started_at = Some(StartedAt {
            // Every file kept: only the end-of-archive marker is read.
            entry: m
                .stream_entries(&patches)
                .get(start)
                .map_or_else(|| "(end of archive)".to_string(), |e| e.path().to_string()),
            volume: Some(m.volumes[r.volume].name.clone()),
            offset: r.at,
        });
    }
    let skip = resume.as_ref().map_or((0, 0), |r| (r.skip, r.offset));
    let (tx, rx) = bounded(STREAM_BUFFERS);
    let (recycle, pool) = bounded::<Vec<u8>>(STREAM_BUFFERS);
    for _ in 0..STREAM_BUFFERS {
        let _ = recycle.send(vec![0u8; STREAM_BUFFER_SIZE]);
    }
    let raw = PipeReader::new(rx, recycle);
    let (checked, problems) = std::thread::scope(|s| {
        let reader = s.spawn(move || volumes.run(tx, pool));
        // `raw` is consumed here and dropped before the join, so the reader thread cannot
        // wait on a consumer that has gone.
        let checked = check_payload(m, mode, raw, skip, start, sink, &mut report, progress);
        let problems = reader.join().expect("volume reader thread panicked");
        (checked, problems)
    });
    checked?;
    (report.volume_problems, report.repaired) = problems;
    progress.finish();
    Ok(report)
}

/// Decompresses (if needed) and checks the payload read from `raw`, to its very end. A resumed
/// stream (`start` above 0) drops the first `skip.0` bytes of `raw` (from the chunk boundary to
/// the entry's header), then reads the stream from its offset `skip.1` on.
#[allow(clippy::too_many_arguments)]
fn check_payload(
    m: &Manifest,
    mode: Mode,
    raw: PipeReader,
    skip: (u64, u64),
    start: usize,
    sink: &mut dyn EntrySink,
    report: &mut StreamReport,
    progress: &dyn Progress,
) -> Result<()> {
    match m.compression.algorithm.as_str() {
        "zstd" => {
            // One frame only: skippable or extra frames after it are refused as trailing data.
            let mut dec =
                zstd::stream::read::Decoder::with_buffer(crate::zstd_frame::Checked::new(raw))
                    .map_err(io_to_error)?
                    .single_frame();
            // A window larger than 128 MiB would let a hostile bundle make us allocate it.
            dec.window_log_max(27).map_err(io_to_error)?;
            let mut tar = tar::Reader::new(Capped::new(dec, m.stream.size));
            check_entries(m, mode, 0, &mut tar, sink, report, progress)?;
            let capped = tar.into_inner();
            check_exact_length(&capped)?;
            let mut raw = capped.inner.finish();
            drain_trailing(&mut raw)
        }
        _ => {
            let mut raw = raw;
            let (drop_bytes, offset) = skip;
            if drop_bytes > 0 {
                let dropped = io::copy(&mut (&mut raw).take(drop_bytes), &mut io::sink())
                    .map_err(io_to_error)?;
                if dropped != drop_bytes {
                    return Err(Error::BadStream {
                        volume: "data stream".into(),
                        reason: "ends before the entry a resumed install starts at".into(),
                    });
                }
            }
            let mut tar = tar::Reader::new(Capped::new(raw, m.stream.size - offset));
            check_entries(m, mode, start, &mut tar, sink, report, progress)?;
            let capped = tar.into_inner();
            check_exact_length(&capped)?;
            let mut raw = capped.inner;
            drain_trailing(&mut raw)
        }
    }
}

/// The stream is exactly `stream.size` bytes: the tar reader stopped at the end-of-archive
/// marker, and that must be where the declared size ends (the manifest's size is computed from
/// its entries, so a shorter stream would already have failed the entry checks; this states
/// the rule rather than relying on that).
fn check_exact_length<R>(capped: &Capped<R>) -> Result<()> {
    if capped.left != 0 {
        return Err(Error::BadStream {
            volume: "tar stream".into(),
            reason: format!(
                "ends {} bytes before the size the manifest declares",
                capped.left
            ),
        });
    }
    Ok(())
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

/// Reads every entry of the tar stream into a [`Verifier`] of the manifest's stream entries
/// (for a delta: the carried files and the patches), which passes them on to `sink`.
fn check_entries<R: Read>(
    m: &Manifest,
    mode: Mode,
    start: usize,
    tar: &mut tar::Reader<R>,
    sink: &mut dyn EntrySink,
    report: &mut StreamReport,
    progress: &dyn Progress,
) -> Result<()> {
    let patches = m.patch_entries();
    let mut v = Verifier::new(
        m.stream_entries(&patches).split_off(start),
        mode,
        Blame::Stream,
        sink,
        progress,
    );
    let mut buf = vec![0u8; 1 << 20];
    while let Some(entry) = tar.next_entry().map_err(stream_error)? {
        let dir = entry.kind == tar::Kind::Dir;
        v.entry(RawEntry {
            path: &entry.path,
            dir,
            size: entry.size,
            executable: entry.executable,
        })?;
        if dir {
            continue;
        }
        loop {
            let n = tar.read_data(&mut buf).map_err(stream_error)?;
            if n == 0 {
                break;
            }
            v.data(&buf[..n])?;
        }
        v.end()?;
    }
    report.bad_files = v.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar::{BLOCK, raw_header};

    /// The reader error for `bytes` followed by a file `f` and the end-of-archive marker.
    fn refusal(mut bytes: Vec<u8>) -> String {
        bytes.extend(raw_header(b"f", 0o644, 0, b'0'));
        bytes.extend([0u8; 2 * BLOCK]);
        let mut r = tar::Reader::new(&bytes[..]);
        loop {
            match r.next_entry() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("accepted"),
                Err(e) => return e.to_string(),
            }
        }
    }

    fn pax(name: &[u8], mode: u32, records: &[u8], pad: u8) -> Vec<u8> {
        let mut b = raw_header(name, mode, records.len() as u64, b'x').to_vec();
        b.extend(records);
        b.resize(b.len().div_ceil(BLOCK) * BLOCK, 0);
        if !records.len().is_multiple_of(BLOCK) {
            *b.last_mut().unwrap() = pad;
        }
        b
    }

    // FORMAT.md section 3.5, rules 11 and 16 to 18: what the reader refused before the document
    // said so.
    #[test]
    fn format_md_3_5_rules_the_document_now_states() {
        let err = refusal(raw_header(b"x\0y", 0o644, 0, b'0').to_vec());
        assert!(err.contains("bytes after the end of the name"), "{err}");
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(120));
        let rec = format!("{} path={long}\n", tar::pax_record_len("path", long.len()));
        let err = refusal(pax(b"././@Other", 0o644, rec.as_bytes(), 0));
        assert!(err.contains("unexpected name"), "{err}");
        let err = refusal(pax(b"././@PaxHeader", 0o600, rec.as_bytes(), 0));
        assert!(err.contains("unexpected mode"), "{err}");
        let err = refusal(pax(b"././@PaxHeader", 0o644, rec.as_bytes(), 1));
        assert!(err.contains("padding"), "{err}");
    }

    #[test]
    fn stream_shorter_than_declared_is_refused() {
        let capped = Capped::new(&b""[..], 512);
        let err = check_exact_length(&capped).unwrap_err().to_string();
        assert!(
            err.contains("ends 512 bytes before the size the manifest declares"),
            "{err}"
        );
        check_exact_length(&Capped::new(&b""[..], 0)).unwrap();
    }

    #[test]
    fn stream_longer_than_declared_is_refused() {
        let mut c = Capped::new(&b"abcd"[..], 3);
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).unwrap(), 3);
        let e = c.read(&mut buf).unwrap_err();
        assert!(e.to_string().contains("goes on past"), "{e}");
        assert!(e.get_ref().is_some_and(|i| i.is::<PastDeclaredSize>()));
    }
}
