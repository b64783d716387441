//! Early writeback for the large files pack and unpack write.
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

    /// [`Flusher::new`], and each file's pages that a flush made clean are dropped from the page
    /// cache (`POSIX_FADV_DONTNEED`): for output nobody reads back soon (the volumes of a pack
    /// without parity), so that writing gigabytes does not make the kernel reclaim the page
    /// cache in the writer's time.
    pub fn dropping() -> Self {
        Self::start(true)
    }

    fn start(drop_clean: bool) -> Self {
        let (tx, rx) = bounded::<(File, PathBuf)>(1);
        let thread = std::thread::spawn(move || {
            let mut first_error = None;
            for (file, path) in rx {
                match file.sync_data() {
                    Err(e) => {
                        first_error.get_or_insert((path, e));
                    }
                    // Advice only: pages still dirty are left alone, and a failure costs
                    // nothing but the cache.
                    Ok(()) if drop_clean => {
                        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
                    }
                    Ok(()) => {}
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

#[cfg(test)]
mod tests {
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
}
