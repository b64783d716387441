//! Reading what a medium holds, not what the page cache remembers of it (issue 32).
//!
//! A bundle just written to a USB stick is still in the kernel's page cache: reading it back
//! the ordinary way proves only that the cache is right. Here a volume is opened as
//! [`super::open_regular`] opens it (no blocking, regular files only) and then switched to
//! direct I/O (`O_DIRECT` through `fcntl(F_SETFL)`), which reads from the device whatever the
//! cache holds (the kernel writes dirty pages of the range back first). Where the file system
//! takes no direct reads (the switch or a read fails with `EINVAL`), the file's dirty pages are
//! written back with `fdatasync` and its cached pages dropped with
//! `posix_fadvise(POSIX_FADV_DONTNEED)` before it is read the ordinary way: the kernel keeps
//! only pages another process has mapped or locked. A file on tmpfs or ramfs has no medium
//! below its cache; a network file system's direct reads come from the server, whose own cache
//! may answer. [`ReadFrom`] says which of these held, so a report can say it.
//!
//! Direct reads need a buffer, an offset and a length aligned to the device's logical block
//! size: [`AlignedBuf`] aligns to [`DIRECT_ALIGN`] (4096, a multiple of every common logical
//! block size) without `unsafe`, and [`MediumFile::read_range`] reads whole aligned blocks and
//! hands on only the bytes asked for.

use std::fs::File;
use std::io;
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{Advice, OFlags};

use super::{Follow, Result, open_regular};

/// The alignment of direct reads: buffer address, file offset and length.
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// The largest single read [`MediumFile::read_range`] makes.
pub const MEDIUM_READ_SIZE: usize = 4 << 20;

/// How a volume's bytes were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadFrom {
    /// Direct I/O: the bytes came from the device, not the page cache.
    Medium,
    /// Direct I/O on a network file system: from the server, which may answer from its cache.
    Server,
    /// Without direct I/O (not asked for, or the file system takes none): dirty pages were
    /// written back and the file's cached pages dropped before an ordinary read (pages another
    /// process maps stay).
    CacheDropped,
    /// A memory file system (tmpfs, ramfs): the page cache is all there is.
    Memory,
    /// Through the page cache, on purpose (`--cached`).
    Cached,
}

impl ReadFrom {
    /// Whether the bytes certainly came from below the page cache.
    pub fn from_medium(self) -> bool {
        self == ReadFrom::Medium
    }

    /// Whether the bytes came from below the page cache as far as the kernel promises without
    /// direct I/O (the medium, or the cache dropped first).
    pub fn past_cache(self) -> bool {
        matches!(self, ReadFrom::Medium | ReadFrom::CacheDropped)
    }

    /// Why the bytes may not have come from the medium, for a report; `None` for
    /// [`ReadFrom::Medium`].
    pub fn why(self, fstype: &str) -> Option<String> {
        match self {
            ReadFrom::Medium => None,
            ReadFrom::Server => Some(format!(
                "read directly from a network file system ({fstype}): the server may answer from its own cache"
            )),
            ReadFrom::CacheDropped => Some(format!(
                "read without direct I/O on {fstype}: its cached pages were written back and dropped before reading, which the kernel does not promise for pages another process maps"
            )),
            ReadFrom::Memory => Some(format!(
                "{fstype} keeps its files in memory: there is no medium below the page cache"
            )),
            ReadFrom::Cached => Some("read through the page cache on purpose (--cached)".into()),
        }
    }
}

/// Whether to read from the medium or accept the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MediumRead {
    /// From the medium with direct I/O, as far as the file system allows ([`ReadFrom`] says
    /// how far): what `verify` and `copy`'s read-back use.
    Device,
    /// From the medium at no cost: the file's cached pages are written back and dropped when
    /// it is opened, then it is read the ordinary way, with the kernel's read-ahead (what the
    /// stream of `unpack` uses: a volume nobody maps is read from the medium, as fast as ever).
    #[default]
    DropCache,
    /// Through the page cache (`--cached`: fast, proves only the cache).
    Cached,
}

/// A buffer whose usable part starts at a [`DIRECT_ALIGN`] boundary (found with
/// `align_offset`: no `unsafe`, a few KiB more than asked for).
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` bytes rounded up to [`DIRECT_ALIGN`].
    pub fn new(len: usize) -> Self {
        let len = len.max(1).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN);
        assert!(start < DIRECT_ALIGN, "a byte pointer can always be aligned");
        AlignedBuf { raw, start, len }
    }

    /// The aligned bytes.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    /// Its length (a multiple of [`DIRECT_ALIGN`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty; for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A regular file opened to read what the medium holds.
pub struct MediumFile {
    file: File,
    direct: bool,
    from: ReadFrom,
    fstype: &'static str,
}

/// File system magic numbers (`statfs(2)`) that change how a medium can be read.
const TMPFS_MAGIC: u64 = 0x0102_1994;
const RAMFS_MAGIC: u64 = 0x8584_58f6;
const NFS_SUPER_MAGIC: u64 = 0x6969;
const SMB2_MAGIC: u64 = 0xfe53_4d42;
const CIFS_MAGIC: u64 = 0xff53_4d42;
const SMB_SUPER_MAGIC: u64 = 0x517b;
const V9FS_MAGIC: u64 = 0x0102_1997;
const CEPH_SUPER_MAGIC: u64 = 0x00c3_6400;
const FUSE_SUPER_MAGIC: u64 = 0x6573_5546;

/// What kind of file system `f_type` names, for [`ReadFrom`]: memory, network or other.
fn classify(f_type: u64) -> (&'static str, Option<ReadFrom>) {
    match f_type {
        TMPFS_MAGIC => ("tmpfs", Some(ReadFrom::Memory)),
        RAMFS_MAGIC => ("ramfs", Some(ReadFrom::Memory)),
        NFS_SUPER_MAGIC => ("nfs", Some(ReadFrom::Server)),
        SMB2_MAGIC | CIFS_MAGIC | SMB_SUPER_MAGIC => ("cifs", Some(ReadFrom::Server)),
        V9FS_MAGIC => ("9p", Some(ReadFrom::Server)),
        CEPH_SUPER_MAGIC => ("ceph", Some(ReadFrom::Server)),
        FUSE_SUPER_MAGIC => ("fuse", None),
        0xef53 => ("ext4", None),
        0x5846_5342 => ("xfs", None),
        0x9123_683e => ("btrfs", None),
        0x4d44 => ("vfat", None),
        0x2011_bab0 => ("exfat", None),
        0x5346_544e => ("ntfs", None),
        0x9660 => ("iso9660", None),
        0x1501_3346 => ("udf", None),
        0xf2f5_2010 => ("f2fs", None),
        _ => ("", None),
    }
}

/// Opens `path` as [`open_regular`] does and prepares it to be read from the medium under
/// `how`. Returns the file and its size.
pub fn open_medium(path: &Path, follow: Follow, how: MediumRead) -> Result<(MediumFile, u64)> {
    let (file, len) = open_regular(path, follow)?;
    Ok((MediumFile::new(file, how), len))
}

impl MediumFile {
    /// Prepares an open regular file to be read under `how`.
    pub fn new(file: File, how: MediumRead) -> Self {
        let (fstype, kind) = match rustix::fs::fstatfs(&file) {
            Ok(s) => classify(s.f_type as u64),
            Err(_) => ("", None),
        };
        let mut m = MediumFile {
            file,
            direct: false,
            from: ReadFrom::Cached,
            fstype,
        };
        if how == MediumRead::Cached {
            return m;
        }
        if kind == Some(ReadFrom::Memory) {
            m.from = ReadFrom::Memory;
            return m;
        }
        let direct = how == MediumRead::Device
            && rustix::fs::fcntl_getfl(&m.file)
                .and_then(|fl| rustix::fs::fcntl_setfl(&m.file, fl | OFlags::DIRECT))
                .is_ok();
        if direct {
            m.direct = true;
            m.from = kind.unwrap_or(ReadFrom::Medium);
        } else {
            m.drop_cache();
            if kind == Some(ReadFrom::Server) && m.from == ReadFrom::CacheDropped {
                m.from = ReadFrom::Server;
            }
        }
        m
    }

    /// Writes back the file's dirty pages and drops its cached ones (the fallback for a file
    /// system without direct reads), and reads through the cache from then on.
    fn drop_cache(&mut self) {
        if self.direct {
            let _ = rustix::fs::fcntl_getfl(&self.file)
                .and_then(|fl| rustix::fs::fcntl_setfl(&self.file, fl - OFlags::DIRECT));
            self.direct = false;
        }
        let _ = rustix::fs::fdatasync(&self.file);
        let dropped = rustix::fs::fadvise(&self.file, 0, None, Advice::DontNeed).is_ok();
        self.from = if dropped {
            ReadFrom::CacheDropped
        } else {
            ReadFrom::Cached
        };
    }

    /// How the bytes read so far came (it may change once, from direct to cache-dropped, when
    /// the file system refuses a direct read).
    pub fn read_from(&self) -> ReadFrom {
        self.from
    }

    /// The file system's name where it matters for [`ReadFrom::why`] (`tmpfs`, `nfs`, ...), or
    /// "this file system".
    pub fn fstype(&self) -> &'static str {
        if self.fstype.is_empty() {
            "this file system"
        } else {
            self.fstype
        }
    }

    /// Why the bytes may not have come from the medium; `None` when they did.
    pub fn why(&self) -> Option<String> {
        self.from.why(self.fstype())
    }

    /// The open file (for `fstat` and the like; read through [`MediumFile::read_range`]).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Reads `[start, end)` in order, handing each piece to `take`; a file shorter than `end`
    /// is an `UnexpectedEof` error. Direct reads cover whole aligned blocks around the range;
    /// only the asked-for bytes are handed on. `buf` sets the largest read.
    pub fn read_range(
        &mut self,
        buf: &mut AlignedBuf,
        start: u64,
        end: u64,
        mut take: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut pos = start;
        while pos < end {
            let (skip, bytes) = self.read_some(buf, pos, end)?;
            if bytes == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ended early",
                ));
            }
            let piece = &buf.bytes_mut()[skip..skip + bytes];
            take(piece)?;
            pos += bytes as u64;
        }
        Ok(())
    }

    /// One read at `pos` (at most up to `end` and the buffer's size): returns where the wanted
    /// bytes start in the buffer and how many there are, 0 at the end of the file.
    fn read_some(
        &mut self,
        buf: &mut AlignedBuf,
        pos: u64,
        end: u64,
    ) -> io::Result<(usize, usize)> {
        let align = DIRECT_ALIGN as u64;
        if self.direct {
            let from = pos / align * align;
            let skip = (pos - from) as usize;
            // Whole blocks covering [from, end), at most the buffer (whose length is a multiple
            // of the block).
            let len = match usize::try_from(end - from) {
                Ok(n) if n < buf.len() => n.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN,
                _ => buf.len(),
            };
            match self.file.read_at(&mut buf.bytes_mut()[..len], from) {
                Ok(n) => {
                    let bytes = n.saturating_sub(skip).min((end - pos) as usize);
                    return Ok((skip, bytes));
                }
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    // The file system opened for direct I/O but refuses this read (an
                    // alignment it does not take): fall back for the rest of the file.
                    self.drop_cache();
                }
                Err(e) => return Err(e),
            }
        }
        let len = ((end - pos) as usize).min(buf.len());
        loop {
            match self.file.read_at(&mut buf.bytes_mut()[..len], pos) {
                Ok(n) => return Ok((0, n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The file, for random reads through the page cache: for a volume read unit by unit
    /// (small reads at random), after [`MediumFile::new`] dropped its cached pages (direct
    /// I/O is switched off; what was cached before is not used).
    pub fn into_cached(mut self) -> MediumFile {
        if self.direct {
            self.drop_cache();
        }
        self
    }

    /// The open file.
    pub fn into_file(self) -> File {
        self.file
    }

    /// A sequential reader over the file from offset 0 to its end (wherever reads end, not its
    /// size at the open: a file that says 0 bytes and reads more, or fails half way, is read as
    /// it reads), reading as [`MediumFile::read_range`] does, in pieces of at most `chunk`
    /// bytes.
    pub fn into_reader(self, chunk: usize) -> MediumReader {
        self.into_reader_at(chunk, 0)
    }

    /// [`MediumFile::into_reader`] from byte `pos` on (a resumed stream starting at a chunk of
    /// a volume).
    pub fn into_reader_at(self, chunk: usize, pos: u64) -> MediumReader {
        MediumReader {
            file: self,
            buf: AlignedBuf::new(chunk),
            pos,
            filled: (0, 0),
            ended: false,
            dropped_to: pos,
        }
    }
}

/// Bytes this process read from bundle volumes (the stream's sequential reads and the reads of
/// parity units), for the install's report: what a resumed install saved is bytes it did not
/// read from the medium.
static VOLUME_BYTES_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`VOLUME_BYTES_READ`] so far.
pub fn volume_bytes_read() -> u64 {
    VOLUME_BYTES_READ.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts `n` bytes read from a volume. Tests only (debug builds): with
/// `AIRLOCK_TEST_VOLUME_READ_LOG=FILE` the count so far is written into FILE after each read,
/// so a test that kills the process knows how much it had read; release builds only count.
pub fn count_volume_read(n: u64) {
    let total = VOLUME_BYTES_READ.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
    #[cfg(debug_assertions)]
    if let Some(log) = std::env::var_os("AIRLOCK_TEST_VOLUME_READ_LOG") {
        // Written beside it and renamed over it: a process killed in the middle of the write
        // leaves the previous count, never an empty file (which a test would read as 0).
        let mut tmp = log.clone();
        tmp.push(format!(".{:?}", std::thread::current().id()));
        if std::fs::write(&tmp, format!("{total}\n")).is_ok() {
            let _ = std::fs::rename(&tmp, &log);
        }
    }
    let _ = total;
}

/// Tests only (debug builds): with `AIRLOCK_TEST_VOLUME_READ_DELAY_MS=N`, every read of a
/// volume waits N milliseconds first, so a test's kill lands in the middle of the stream of a
/// small bundle. Release builds never wait.
pub fn test_volume_read_delay() {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var_os("AIRLOCK_TEST_VOLUME_READ_DELAY_MS")
        .and_then(|v| v.to_str().and_then(|v| v.parse::<u64>().ok()))
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// A [`std::io::Read`] over a [`MediumFile`], for the volume stream.
///
/// Read through the page cache after its cached pages were dropped ([`ReadFrom::CacheDropped`]),
/// a volume is read once, front to back: every [`DROP_BEHIND`] bytes the pages already read
/// are dropped again (`POSIX_FADV_DONTNEED` over what lies behind the read position; the
/// read-ahead in front of it stays). The page cache then recycles a few dozen MiB instead of
/// taking fresh memory for every gigabyte of the bundle, and other files' cache is not evicted
/// for bytes nobody reads twice. Measured on the benchmark machine: a cold read of a 4 GiB
/// volume in 1 MiB pieces took 2.8-3.0 s of wall time and 0.3-0.4 s of system time this way,
/// against 5.3 s and 1.2-1.4 s keeping the pages (docs/PERFORMANCE.md).
pub struct MediumReader {
    file: MediumFile,
    buf: AlignedBuf,
    pos: u64,
    /// The unread part of `buf`: start and end.
    filled: (usize, usize),
    /// A read returned nothing: the end of the file.
    ended: bool,
    /// Where the pages behind the read position were last dropped.
    dropped_to: u64,
}

/// Bytes read from a volume between two drops of the pages behind the read position
/// ([`MediumReader`]).
pub const DROP_BEHIND: u64 = 32 << 20;

impl MediumReader {
    /// How the bytes read so far came.
    pub fn read_from(&self) -> ReadFrom {
        self.file.read_from()
    }

    /// The [`MediumFile`] (its [`MediumFile::why`]).
    pub fn medium(&self) -> &MediumFile {
        &self.file
    }
}

impl MediumReader {
    /// Drops the cached pages behind the read position once [`DROP_BEHIND`] bytes were read
    /// since the last drop, when the volume is read through a cache that was dropped at the
    /// open (direct reads use no cache; `--cached` and memory file systems keep theirs).
    fn drop_behind(&mut self) {
        if self.file.direct
            || self.file.from != ReadFrom::CacheDropped
            || self.pos - self.dropped_to < DROP_BEHIND
        {
            return;
        }
        // Advice only: a failure leaves the pages to the kernel's reclaim, as before.
        let _ = rustix::fs::fadvise(
            &self.file.file,
            self.dropped_to,
            advice_len(self.pos - self.dropped_to),
            Advice::DontNeed,
        );
        self.dropped_to = self.pos;
    }
}

impl io::Read for MediumReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.filled.0 == self.filled.1 {
            if self.ended || out.is_empty() {
                return Ok(0);
            }
            test_volume_read_delay();
            let (skip, n) = self.file.read_some(&mut self.buf, self.pos, u64::MAX)?;
            count_volume_read(n as u64);
            if n == 0 {
                self.ended = true;
                return Ok(0);
            }
            self.filled = (skip, skip + n);
            self.pos += n as u64;
            self.drop_behind();
        }
        let (a, b) = self.filled;
        let n = (b - a).min(out.len());
        out[..n].copy_from_slice(&self.buf.bytes_mut()[a..a + n]);
        self.filled.0 += n;
        Ok(n)
    }
}

/// `len` of the file as a non-zero length for `fadvise`, `None` for the rest of the file.
pub(crate) fn advice_len(len: u64) -> Option<NonZeroU64> {
    NonZeroU64::new(len)
}

/// Writes back and drops the cached pages of `[offset, offset + len)` of `f` (the rest of the
/// file for `len` 0): after a volume is written, so that reading it back reads the medium and a
/// long copy does not fill the page cache.
pub fn write_back_and_drop(f: &File, offset: u64, len: u64) -> io::Result<()> {
    rustix::fs::fdatasync(f)?;
    rustix::fs::fadvise(f, offset, advice_len(len), Advice::DontNeed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writeback::tests::cached_at;
    use std::io::{Read, Write};

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v");
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        (dir, p)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4099) as u8).collect()
    }

    #[test]
    fn aligned_buffers_are_aligned_and_rounded_up() {
        for n in [1, 4095, 4096, 4097, 1 << 20] {
            let mut b = AlignedBuf::new(n);
            assert_eq!(b.bytes_mut().as_ptr() as usize % DIRECT_ALIGN, 0);
            assert!(b.len() >= n && b.len().is_multiple_of(DIRECT_ALIGN));
        }
    }

    #[test]
    fn ranges_read_exactly_the_bytes_asked_for_at_any_offset() {
        let data = pattern(3 * DIRECT_ALIGN * 5 + 123);
        let (_d, p) = file_with(&data);
        for how in [MediumRead::Device, MediumRead::Cached] {
            let (mut f, len) = open_medium(&p, Follow::Never, how).unwrap();
            assert_eq!(len, data.len() as u64);
            // A small buffer forces many reads, unaligned starts and ends.
            let mut buf = AlignedBuf::new(DIRECT_ALIGN * 2);
            for (a, b) in [
                (0, data.len()),
                (1, 5000),
                (4095, 4097),
                (8192, data.len()),
                (100, 101),
            ] {
                let mut got = Vec::new();
                f.read_range(&mut buf, a as u64, b as u64, |piece| {
                    got.extend_from_slice(piece);
                    Ok(())
                })
                .unwrap();
                assert_eq!(got, &data[a..b], "{how:?} {a}..{b}");
            }
            let e = f
                .read_range(&mut buf, 0, data.len() as u64 + 1, |_| Ok(()))
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[test]
    fn the_reader_yields_the_whole_file() {
        let data = pattern(DIRECT_ALIGN * 9 + 77);
        let (_d, p) = file_with(&data);
        let (f, _) = open_medium(&p, Follow::Never, MediumRead::Device).unwrap();
        let mut r = f.into_reader(DIRECT_ALIGN * 2);
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, data);
    }

    #[test]
    fn a_volume_read_past_a_dropped_cache_drops_what_it_read_and_only_that() {
        // Larger than two drop intervals, with a tail that is not a whole piece.
        let data = pattern(2 * DROP_BEHIND as usize + 3 * DIRECT_ALIGN + 5);
        let (_d, p) = file_with(&data);
        for how in [MediumRead::DropCache, MediumRead::Cached] {
            let (f, _) = open_medium(&p, Follow::Never, how).unwrap();
            let probe = f.file().try_clone().unwrap();
            let from = f.read_from();
            let mut r = f.into_reader(1 << 20);
            // Read a little over one interval: the pages behind are dropped, those read last
            // since the drop (and the read-ahead) are not.
            let mut got = vec![0u8; DROP_BEHIND as usize + (2 << 20)];
            r.read_exact(&mut got).unwrap();
            assert_eq!(got, &data[..got.len()], "{how:?}");
            match (how, from) {
                (MediumRead::DropCache, ReadFrom::CacheDropped) => {
                    assert!(!cached_at(&probe, 0), "the first page was not dropped");
                    assert!(!cached_at(&probe, DROP_BEHIND / 2));
                    assert!(
                        cached_at(&probe, DROP_BEHIND + (1 << 20)),
                        "the last read page"
                    );
                }
                // A memory file system has nothing below its cache: nothing is dropped.
                (MediumRead::DropCache, ReadFrom::Memory) => assert!(cached_at(&probe, 0)),
                // --cached leaves the cache alone.
                (MediumRead::Cached, ReadFrom::Cached) => assert!(cached_at(&probe, 0)),
                other => panic!("unexpected {other:?}"),
            }
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).unwrap();
            got.extend_from_slice(&rest);
            assert_eq!(got, data, "{how:?}: the whole file, in order");
        }
    }

    #[test]
    fn cached_reads_say_so_and_memory_file_systems_are_named() {
        let (_d, p) = file_with(b"x");
        let (f, _) = open_medium(&p, Follow::Never, MediumRead::Cached).unwrap();
        assert_eq!(f.read_from(), ReadFrom::Cached);
        assert!(f.why().unwrap().contains("--cached"));
        // /dev/shm is a tmpfs on Linux.
        let shm = tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a tmpfs");
        let p = shm.path().join("v");
        std::fs::write(&p, b"abc").unwrap();
        let (f, _) = open_medium(&p, Follow::Never, MediumRead::Device).unwrap();
        assert_eq!(f.read_from(), ReadFrom::Memory);
        assert!(f.why().unwrap().contains("tmpfs"), "{:?}", f.why());
    }
}
