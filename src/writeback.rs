//! Early writeback for the large files pack and unpack write, and reads that leave the page
//! cache as they found it ([`ReadBehind`]).
//!
//! Both make their output durable with an fsync once a file (a volume, an installed file) is
//! complete. With memory to spare the kernel keeps gigabytes dirty until then, so the disk sat
//! idle while the stream was produced and the whole file was written out at the end, in series
//! with everything else. A [`Flusher`] `fdatasync`s the file on a helper thread every
//! [`FLUSH_EVERY`] bytes instead: the disk writes while the stream goes on, and the final fsync
//! finds little left to do. The writing thread never waits for it (a flush still running when
//! the next is due is simply skipped).
//!
//! An error of an early flush is kept and reported by [`Flusher::finish`]: the file handles
//! share one open file description, and Linux reports a writeback error to each description
//! once, so the final fsync might not see it again.
//!
//! [`Flusher::dropping`] starts the writeback with `POSIX_FADV_DONTNEED` instead and drops the
//! pages once written: measured on the benchmark machine, writing 4 GiB took 3.0-4.4 s this
//! way against 11.6-11.9 s with an `fdatasync` every 32 MiB and 4.9-5.6 s with an `fdatasync`
//! followed by the drop (docs/PERFORMANCE.md).

use std::fs::File;
use std::io;
use std::path::PathBuf;

use crossbeam_channel::{Sender, bounded};

/// Bytes written to one file between two early flushes.
pub const FLUSH_EVERY: u64 = 32 << 20;

/// Flushes files on a helper thread; see the module documentation.
pub struct Flusher {
    tx: Option<Sender<(File, PathBuf)>>,
    thread: Option<std::thread::JoinHandle<Option<(PathBuf, io::Error)>>>,
}

impl Default for Flusher {
    fn default() -> Self {
        Self::new()
    }
}

impl Flusher {
    /// Starts the helper thread.
    pub fn new() -> Self {
        Self::start(false)
    }

    /// For output nobody reads back soon (the volumes of a pack without parity, the files an
    /// unpack installs): instead of an `fdatasync`, each flush is a `POSIX_FADV_DONTNEED` on the
    /// whole file, which starts the writeback of its dirty pages (without waiting, and without
    /// the device cache flush an `fdatasync` sends) and drops the pages earlier flushes left
    /// clean. The page cache then recycles the same pages instead of taking fresh memory for
    /// every gigabyte written, and the disk still writes while the stream goes on. Durability
    /// is the final fsync's, as always; a writeback error is left for it to report (nothing
    /// here collects it first).
    pub fn dropping() -> Self {
        Self::start(true)
    }

    fn start(drop_clean: bool) -> Self {
        let (tx, rx) = bounded::<(File, PathBuf)>(1);
        let thread = std::thread::spawn(move || {
            let mut first_error = None;
            for (file, path) in rx {
                if drop_clean {
                    // Advice only: it starts writeback of the dirty pages and drops the clean
                    // ones; pages under writeback stay until the next call. A failure costs
                    // nothing but the cache, and a writeback error stays with the file for the
                    // final fsync.
                    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
                } else if let Err(e) = file.sync_data() {
                    first_error.get_or_insert((path, e));
                }
            }
            first_error
        });
        Flusher {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Asks for `file`'s dirty pages to be written out soon. Never blocks; a request made while
    /// the helper is busy with an earlier one is dropped (the final fsync covers everything).
    pub fn flush(&self, file: &File, path: impl Into<PathBuf>) {
        let Some(tx) = &self.tx else { return };
        if tx.is_full() {
            return;
        }
        // A handle that cannot be duplicated just misses its early flush.
        if let Ok(clone) = file.try_clone() {
            let _ = tx.try_send((clone, path.into()));
        }
    }

    /// Waits for the flushes in progress; returns the first error one of them met.
    pub fn finish(mut self) -> Option<(PathBuf, io::Error)> {
        self.stop()
    }

    fn stop(&mut self) -> Option<(PathBuf, io::Error)> {
        self.tx = None;
        let thread = self.thread.take()?;
        match thread.join() {
            Ok(first_error) => first_error,
            Err(_) => Some((
                PathBuf::new(),
                crate::fault::fault("the writeback thread panicked"),
            )),
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Bytes a [`ReadBehind`] reads between two drops of the pages behind it.
pub const DROP_BEHIND: u64 = 32 << 20;

/// Reads a file front to back and leaves the page cache as it found it: the pages this read
/// brought in from the device are dropped behind it (every [`DROP_BEHIND`] bytes, and at
/// [`ReadBehind::finish`]); pages that were cached before are kept.
///
/// Each read first asks only for what is cached (`preadv2` with `RWF_NOWAIT`). Once a read
/// has to wait for the device, the rest of the file counts as this read's own (the kernel's
/// read-ahead brings the next pages in before they are asked for, so a later cached page is
/// this read's doing, not an earlier reader's): it is read the ordinary way and dropped behind
/// the read position. A warm file is read as before and stays cached; a cold one recycles a
/// few dozen MiB of page cache instead of taking fresh memory for every gigabyte, which this
/// benchmark machine pays dearly for (docs/PERFORMANCE.md).
#[derive(Debug, Default)]
pub struct ReadBehind {
    /// Where the first read that had to wait for the device started.
    cold_from: Option<u64>,
    /// Where the pages behind were last dropped.
    dropped_to: u64,
    /// The file system refused `RWF_NOWAIT`: read the ordinary way, drop nothing.
    no_probe: bool,
}

impl ReadBehind {
    /// A reader that has read nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads into `buf` at `pos`, as `read_at` does (short only at the end of the file).
    pub fn read_at(&mut self, file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut got = 0;
        if self.cold_from.is_none() && !self.no_probe && !buf.is_empty() {
            match rustix::io::preadv2(
                file,
                &mut [io::IoSliceMut::new(buf)],
                pos,
                rustix::io::ReadWriteFlags::NOWAIT,
            ) {
                // All of it cached, or the end of the file.
                Ok(n) if n == buf.len() || n == 0 => return Ok(n),
                Ok(n) => got = n,
                Err(rustix::io::Errno::AGAIN) => {}
                Err(rustix::io::Errno::INTR) => return self.read_at(file, buf, pos),
                // No `RWF_NOWAIT` here (an old kernel, a file system without it).
                Err(_) => self.no_probe = true,
            }
            if !self.no_probe {
                self.cold_from = Some(pos + got as u64);
                self.dropped_to = pos + got as u64;
            }
        }
        let n = loop {
            match file.read_at(&mut buf[got..], pos + got as u64) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        let end = pos + (got + n) as u64;
        if self.cold_from.is_some() && end.saturating_sub(self.dropped_to) >= DROP_BEHIND {
            self.drop_to(file, end);
        }
        Ok(got + n)
    }

    /// Drops what this read brought in and has not dropped yet, up to `end` (where the file
    /// was read to).
    pub fn finish(mut self, file: &File, end: u64) {
        if self.cold_from.is_some() && end > self.dropped_to {
            self.drop_to(file, end);
        }
    }

    fn drop_to(&mut self, file: &File, end: u64) {
        // Advice only: a failure leaves the pages to the kernel's reclaim.
        let _ = rustix::fs::fadvise(
            file,
            self.dropped_to,
            std::num::NonZeroU64::new(end - self.dropped_to),
            rustix::fs::Advice::DontNeed,
        );
        self.dropped_to = end;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn flushes_and_finishes_without_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        let flusher = Flusher::new();
        for _ in 0..4 {
            f.write_all(&[7u8; 4096]).unwrap();
            flusher.flush(&f, &path);
        }
        assert!(flusher.finish().is_none());
        f.sync_all().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * 4096);
    }

    /// Whether the page of `f` at `offset` is in the page cache: a read that may not wait for
    /// the device (`RWF_NOWAIT`) fails with `EAGAIN` when it is not. The one copy (the volume
    /// reader's tests in `fsio/medium.rs` use it too).
    pub(crate) fn cached_at(f: &File, offset: u64) -> bool {
        let mut b = [0u8; 1];
        match rustix::io::preadv2(
            f,
            &mut [io::IoSliceMut::new(&mut b)],
            offset,
            rustix::io::ReadWriteFlags::NOWAIT,
        ) {
            Ok(n) => n == 1,
            Err(rustix::io::Errno::AGAIN) => false,
            Err(e) => panic!("preadv2: {e}"),
        }
    }

    fn read_all(f: &File) -> Vec<u8> {
        let mut behind = ReadBehind::new();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = behind.read_at(f, &mut buf, got.len() as u64).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        behind.finish(f, got.len() as u64);
        got
    }

    #[test]
    fn a_read_behind_drops_what_it_brought_in_and_keeps_what_was_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // More than two drop intervals, and a tail that is not a whole buffer.
        let data: Vec<u8> = (0..2 * DROP_BEHIND as usize + 12345)
            .map(|i| (i * 31 + i / 4093) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        // Just written: every page is cached, and a warm file stays so.
        assert!(cached_at(&f, 0));
        assert_eq!(read_all(&f), data);
        assert!(cached_at(&f, 0) && cached_at(&f, DROP_BEHIND + 1));
        // Cold (written back and dropped): read in full, then gone from the cache again,
        // except on a memory file system, where the cache is all there is.
        f.sync_all().unwrap();
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        // (No probe before the read: a probe of a page not cached starts the read-ahead.)
        let memory = rustix::fs::fstatfs(&f).unwrap().f_type as u64 == 0x0102_1994;
        assert_eq!(read_all(&f), data);
        for at in [0, DROP_BEHIND / 2, DROP_BEHIND + 1, data.len() as u64 - 1] {
            assert_eq!(cached_at(&f, at), memory, "page at {at}");
        }
    }

    #[test]
    fn a_dropping_flusher_loses_no_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        let flusher = Flusher::dropping();
        let mut want = Vec::new();
        for i in 0..64u8 {
            let piece = vec![i; 64 << 10];
            f.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
            flusher.flush(&f, &path);
        }
        assert!(flusher.finish().is_none());
        f.sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }
}
