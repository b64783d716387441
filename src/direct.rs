//! Volume files written around the page cache (`O_DIRECT`) where the filesystem allows it.
//!
//! A pack writes every byte of the model once. Through the page cache that costs a kernel copy
//! of every byte (a third of pack's CPU on 2 cores, measured with `perf`: as much as one of its
//! two SHA-256 passes), fills memory with gigabytes of dirty pages nobody reads again, and
//! leaves the disk work to writeback. With `O_DIRECT` the device reads the bytes from our own
//! buffer: no copy, no dirty pages, and the final fsync has only metadata left to do.
//!
//! `O_DIRECT` wants the buffer, the file offset and the length aligned to the device's logical
//! block size. A [`VolumeFile`] collects bytes in a buffer aligned to [`ALIGN`] and writes it
//! whole; only the tail of the file, shorter than a block, is written through the page cache
//! (the flag is cleared first). Where the filesystem refuses `O_DIRECT` (tmpfs, some FUSE and
//! network filesystems), setting the flag fails, or a later write fails with `EINVAL`: the file
//! then continues through the page cache, byte for byte the same. No `unsafe`: the aligned
//! buffer is an aligned window into an ordinary `Vec`.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::OFlags;

/// Alignment of offsets, lengths and the buffer: a multiple of every logical block size in use
/// (512 and 4096 bytes).
pub const ALIGN: usize = 4096;

/// Bytes collected before a write: large enough that the device streams, small enough to stay
/// a few megabytes.
pub const DIRECT_BUFFER: usize = 4 << 20;

/// A new file written sequentially, around the page cache when the filesystem allows it.
pub struct VolumeFile {
    file: File,
    direct: bool,
    /// Backing storage; `start..start + DIRECT_BUFFER` is the aligned window.
    storage: Vec<u8>,
    start: usize,
    filled: usize,
}

impl VolumeFile {
    /// Creates `path` (it must not exist) with `mode`, whatever the umask.
    pub fn create_new(path: &Path, mode: u32) -> io::Result<Self> {
        let file = File::create_new(path)?;
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        // Set after the open, not in it: an open with O_CREAT | O_DIRECT on a filesystem that
        // refuses the flag may create the file and then fail, and a retry would find it there.
        let direct = set_direct(&file, true).is_ok();
        let storage = vec![0u8; DIRECT_BUFFER + ALIGN];
        let start = (ALIGN - storage.as_ptr() as usize % ALIGN) % ALIGN;
        Ok(VolumeFile {
            file,
            direct,
            storage,
            start,
            filled: 0,
        })
    }

    /// Whether writes go around the page cache (false after a fallback).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The open file (for early writeback when it goes through the page cache).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Appends `bytes`.
    pub fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        if !self.direct && self.filled == 0 {
            return self.file.write_all(bytes);
        }
        while !bytes.is_empty() {
            let n = bytes.len().min(DIRECT_BUFFER - self.filled);
            let at = self.start + self.filled;
            self.storage[at..at + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled == DIRECT_BUFFER {
                self.write_out(DIRECT_BUFFER)?;
            }
        }
        Ok(())
    }

    /// Writes the first `len` buffered bytes (a multiple of [`ALIGN`] unless the file has left
    /// direct mode) and keeps the rest at the start of the buffer.
    fn write_out(&mut self, len: usize) -> io::Result<()> {
        let mut done = 0;
        while done < len {
            let from = self.start + done;
            match self.file.write(&self.storage[from..self.start + len]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The filesystem took the flag but not this write (or a short write left the
                // offset unaligned): go on through the page cache from exactly here.
                Err(e)
                    if self.direct
                        && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) =>
                {
                    set_direct(&self.file, false)?;
                    self.direct = false;
                }
                Err(e) => return Err(e),
            }
        }
        let rest = self.filled - len;
        self.storage
            .copy_within(self.start + len..self.start + self.filled, self.start);
        self.filled = rest;
        Ok(())
    }

    /// Writes what is buffered (the last partial block through the page cache) and syncs the
    /// file, data and metadata.
    pub fn finish(mut self) -> io::Result<()> {
        let aligned = self.filled / ALIGN * ALIGN;
        if aligned > 0 {
            self.write_out(aligned)?;
        }
        if self.filled > 0 {
            if self.direct {
                set_direct(&self.file, false)?;
                self.direct = false;
            }
            let len = self.filled;
            self.write_out(len)?;
        }
        self.file.sync_all()
    }
}

/// Turns `O_DIRECT` on or off for an open file.
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    let fd = file.as_fd();
    let flags = rustix::fs::fcntl_getfl(fd)?;
    let flags = if on {
        flags | OFlags::DIRECT
    } else {
        flags - OFlags::DIRECT
    };
    rustix::fs::fcntl_setfl(fd, flags)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| {
                (i as u8)
                    .wrapping_mul(31)
                    .wrapping_add(seed ^ (i >> 12) as u8)
            })
            .collect()
    }

    /// Writes `pieces` and reads the file back.
    fn round_trip(dir: &Path, name: usize, pieces: &[usize]) -> (bool, Vec<u8>, Vec<u8>) {
        let path = dir.join(format!("v{name}"));
        let mut f = VolumeFile::create_new(&path, 0o644).unwrap();
        let direct = f.is_direct();
        let mut expected = Vec::new();
        for (i, &len) in pieces.iter().enumerate() {
            let p = pattern(len, i as u8);
            f.write_all(&p).unwrap();
            expected.extend_from_slice(&p);
        }
        f.finish().unwrap();
        (direct, expected, std::fs::read(&path).unwrap())
    }

    const SHAPES: &[&[usize]] = &[
        &[],
        &[1],
        &[ALIGN - 1],
        &[ALIGN],
        &[ALIGN + 1],
        &[512, 512, 3072],
        &[DIRECT_BUFFER],
        &[DIRECT_BUFFER - 1, 2],
        &[1 << 20, 3 << 20, 1 << 20, 7],
        &[2 * DIRECT_BUFFER + 4097],
    ];

    #[test]
    fn every_length_and_split_reads_back_exactly() {
        // On the disk the tests run on: direct I/O where the filesystem has it.
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let mut direct_seen = false;
        for (i, shape) in SHAPES.iter().enumerate() {
            let (direct, expected, got) = round_trip(dir.path(), i, shape);
            direct_seen |= direct;
            assert_eq!(got.len(), expected.len(), "{shape:?}");
            assert!(got == expected, "{shape:?}: content differs");
        }
        eprintln!("direct I/O in {}: {direct_seen}", dir.path().display());
    }

    #[test]
    fn a_filesystem_without_direct_io_gets_the_same_bytes() {
        // tmpfs refuses O_DIRECT on older kernels and accepts it on newer ones; either way the
        // file must read back the same.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            panic!("/dev/shm is needed for this test (a tmpfs)");
        };
        for (i, shape) in SHAPES.iter().enumerate() {
            let (_, expected, got) = round_trip(dir.path(), i, shape);
            assert!(got == expected, "{shape:?}: content differs");
        }
    }

    #[test]
    fn falls_back_mid_file_when_a_direct_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v");
        let mut f = VolumeFile::create_new(&path, 0o600).unwrap();
        let a = pattern(DIRECT_BUFFER + 100, 1);
        f.write_all(&a).unwrap();
        // Misalign the buffer window: the next direct write is refused with EINVAL (when the
        // filesystem does direct I/O at all) and the file must continue through the cache.
        f.start += 1;
        let b = pattern(DIRECT_BUFFER, 2);
        f.storage
            .copy_within(f.start - 1..f.start - 1 + f.filled, f.start);
        f.write_all(&b).unwrap();
        f.finish().unwrap();
        let mut expected = a;
        expected.extend_from_slice(&b);
        let got = std::fs::read(&path).unwrap();
        assert!(got == expected, "content differs after the fallback");
        let mode = std::fs::metadata(&path).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
    }
}
