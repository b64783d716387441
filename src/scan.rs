//! Walks a model directory into the sorted list of entries a bundle will hold.
//!
//! Only regular files and directories are packed. A symlink to a regular file inside
//! `link_root` is stored as the file it points to (that is how a Hugging Face snapshot holds its
//! files); everything else that is not a plain file or directory is refused with its path, as is
//! any name that [`paths::check_relative`] would refuse on the other side.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use rustix::fs::{AtFlags, FileType};

use crate::error::{Error, Result};
use crate::fsio;
use crate::inspect::TreeChecks;
use crate::paths::{self, CollisionSet, RECEIPT_DIR};

/// One entry to pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEntry {
    /// A directory at this relative path.
    Dir {
        /// Relative path.
        path: String,
    },
    /// A regular file.
    File {
        /// Relative path in the bundle.
        path: String,
        /// Where to read it when that is not the scanned directory joined with `path` (a
        /// link's target, a blob of a Hugging Face cache); `None` for a file found in the tree
        /// itself, whose place follows from the root and its path ([`ScanEntry::source`]): a
        /// million-file model does not hold a million full paths beside its relative ones.
        link: Option<Link>,
        /// Size seen when scanning.
        size: u64,
        /// Whether any executable bit is set.
        executable: bool,
        /// The file's bytes, when the scan read them whole ([`Prefetched`]).
        prefetched: Option<Prefetched>,
        /// Whether the value scan reads it, by its name and first bytes
        /// ([`crate::inspect::format::identify`]), when the scan opened it (`None`: not
        /// opened). What `pack` bounds the manifest by before it reads a byte.
        has_values: Option<bool>,
        /// The checking scan left this file's model checks to the pack's read pass
        /// ([`scan_checking`]): a small file past the kept bytes whose checks need only the
        /// open file (no shard index, config, safetensors or GGUF name), found by its
        /// `fstatat` and not opened, so the read pass that reads its bytes anyway is its one
        /// open (`has_values` is `None`).
        checks_left: bool,
        /// What the scan's `fstatat` saw of the file when it found it without opening it
        /// ([`Seen`]): the read pass proves by it that the file it reads is that one,
        /// unchanged.
        seen: Option<Seen>,
    },
}

/// What a scan's `fstatat` saw of a file it did not open: a keyed 32-bit digest of its type,
/// size, inode and modification time (the status [`same_state`] compares). The pack's
/// read-ahead opens such a file and reads it without an `fstat` first: one `fstat` after the
/// read, whose digest must be this one, shows the handle is the regular file scanned, unchanged
/// from the scan to the end of the read (a file found so changes no more than one found open:
/// past the kept bytes of a million small files, a system call a file fewer). A file that does
/// not match is read again by the reading thread, which checks it as any other and reports what
/// changed. The key is drawn once a process: no file's status is made to match another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen(std::num::NonZeroU32);

impl Seen {
    /// What `st` is seen as.
    pub(crate) fn of(st: &rustix::fs::Stat) -> Seen {
        static KEY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let key = *KEY.get_or_init(paths::hash_seed);
        let mut status = [0u8; 36];
        // The fields' types differ between targets (`st_mtime_nsec` is signed on some).
        #[allow(clippy::unnecessary_cast)]
        let fields = [
            st.st_ino,
            st.st_size as u64,
            st.st_mtime as u64,
            st.st_mtime_nsec as u64,
        ];
        for (at, field) in fields.into_iter().enumerate() {
            status[at * 8..at * 8 + 8].copy_from_slice(&field.to_le_bytes());
        }
        status[32..].copy_from_slice(&st.st_mode.to_le_bytes());
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(&status, key);
        let folded = (h as u32) ^ ((h >> 32) as u32);
        Seen(std::num::NonZeroU32::new(folded).unwrap_or(std::num::NonZeroU32::MIN))
    }

    /// Whether the open `file` is a regular file of `len` bytes seen as this now.
    pub(crate) fn still(self, file: &File, len: u64) -> bool {
        rustix::fs::fstat(file).is_ok_and(|st| {
            FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                && st.st_size as u64 == len
                && Seen::of(&st) == self
        })
    }
}

/// Where a file's bytes are when that is not below the scanned directory at its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// At this path: a link's target, a blob in a Hugging Face cache's shared store.
    Path(PathBuf),
    /// The blob `etag` in a Hugging Face repository's `blobs/` folder, `blobs` (one path for
    /// all the snapshot's files; the etag shared with the file's etag check): the blob's path
    /// is made when it is opened, not held for each of a dataset's million files.
    Blob {
        /// The repository's `blobs/` folder.
        blobs: std::sync::Arc<Path>,
        /// The blob's name, the etag its content must hash to.
        etag: std::sync::Arc<str>,
    },
}

impl Link {
    /// The path of the file the link leads to.
    pub fn path(&self) -> Cow<'_, Path> {
        match self {
            Link::Path(p) => Cow::Borrowed(p),
            Link::Blob { blobs, etag } => Cow::Owned(joined_exactly(blobs, etag)),
        }
    }
}

/// `dir` joined with `name` in a path of exactly that length (`Path::join` grows its buffer by
/// doubling; a dataset's files are a million such paths).
pub(crate) fn joined_exactly(dir: &Path, name: &str) -> PathBuf {
    let mut path = PathBuf::with_capacity(dir.as_os_str().len() + 1 + name.len());
    path.push(dir);
    path.push(name);
    path
}

/// The path in the tree of the entry `name` of the directory `rel` (`""`: the top), or `None`
/// for a name that is not UTF-8 (refused before anything is packed or checked). The directory
/// scan and a snapshot's walk name entries alike.
pub(crate) fn child_name(rel: &str, name: &OsStr) -> Option<String> {
    name.to_str().map(|n| match rel.is_empty() {
        true => n.to_string(),
        false => format!("{rel}/{n}"),
    })
}

/// The whole content of a small file, read by the scan on the handle it opened the file with
/// for the model checks, so that the pack's read pass takes these bytes instead of opening the
/// file a second time (with 100,000 files of 512 bytes the second `openat` and `close` were a
/// fifth of the pack). Kept only when the file's `fstat` after the read and the checks (size,
/// modification time, inode) is the one it was opened with, so the bytes that travel are the
/// bytes the model checks saw; a file that changed is left to the read pass, which reports it.
///
/// At most [`PREFETCH_FILE_MAX`] bytes a file and [`PREFETCH_TOTAL_MAX`] for the whole scan
/// (the rest is read as before): the memory stays bounded whatever the number of files.
#[derive(Clone, PartialEq, Eq)]
pub struct Prefetched(std::sync::Arc<[u8]>);

impl Prefetched {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Bytes kept as if a scan had read them.
    #[cfg(test)]
    pub(crate) fn for_test(bytes: &[u8]) -> Self {
        Prefetched(bytes.into())
    }
}

impl std::fmt::Debug for Prefetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prefetched({} bytes)", self.0.len())
    }
}

/// The largest file whose content the scan keeps ([`Prefetched`]): past a few pages, the
/// second open costs little beside the read itself.
pub const PREFETCH_FILE_MAX: u64 = 64 << 10;

/// The largest file the scan reads whole for the model checks when it does not keep its bytes
/// (past [`PREFETCH_TOTAL_MAX`]): one read of a page instead of two of its first bytes.
const SNIFF_WHOLE_MAX: u64 = 4096;

/// The most file content one scan keeps ([`Prefetched`]), each file counted with a cache line
/// of allocator overhead: the files past it are read in the read pass.
pub(crate) const PREFETCH_TOTAL_MAX: u64 = 64 << 20;

/// What is left of the file content the walks of one pack may keep ([`Prefetched`]), shared by
/// their threads and by the walks of every repository and directory of a bundle.
pub struct PrefetchBudget(std::sync::atomic::AtomicU64);

impl PrefetchBudget {
    /// Room for `total` bytes (0: a walk that keeps nothing, and leaves the checks of small
    /// files to the read pass from its start).
    pub fn new(total: u64) -> Self {
        PrefetchBudget(std::sync::atomic::AtomicU64::new(total))
    }

    /// A pack's: [`PREFETCH_TOTAL_MAX`] for the whole bundle.
    pub fn for_pack() -> Self {
        PrefetchBudget::new(PREFETCH_TOTAL_MAX)
    }

    /// What keeping a file of `len` bytes costs: its bytes and a cache line of allocator
    /// overhead.
    fn cost(len: u64) -> u64 {
        len + 64
    }

    /// Takes room for a file of `len` bytes; false when too little is left.
    fn take(&self, len: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.0
            .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(Self::cost(len)))
            .is_ok()
    }

    /// Whether a file of `len` bytes would fit in what is left.
    fn has_room(&self, len: u64) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) >= Self::cost(len)
    }

    /// Gives back the room taken for a file whose content was not kept.
    fn give_back(&self, len: u64) {
        self.0
            .fetch_add(Self::cost(len), std::sync::atomic::Ordering::Relaxed);
    }
}

impl ScanEntry {
    /// The entry's relative path.
    pub fn path(&self) -> &str {
        match self {
            ScanEntry::Dir { path } | ScanEntry::File { path, .. } => path,
        }
    }

    /// Where a file's bytes are, for a model scanned from `root`: its link's target, or `root`
    /// joined with its path; `None` for a directory.
    pub fn source(&self, root: &Path) -> Option<Cow<'_, Path>> {
        match self {
            ScanEntry::File { link: Some(l), .. } => Some(l.path()),
            ScanEntry::File { path, .. } => Some(Cow::Owned(root.join(path))),
            ScanEntry::Dir { .. } => None,
        }
    }
}

fn refuse(path: &Path, reason: impl Into<String>) -> Error {
    Error::Source {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks the relative path `rel` of the entry at `full` (made by the caller from its
/// directory's and its own name, [`child_name`]: `None` for a name that is not UTF-8) the way a
/// bundle needs it: UTF-8, a safe relative path ([`paths::check_relative`]) and no case or
/// normalisation collision with an earlier name. Returns the `/`-separated relative path.
pub(crate) fn check_relative_name(
    rel: Option<String>,
    full: &Path,
    collisions: &mut CollisionSet,
) -> Result<String> {
    let Some(rel) = rel else {
        return Err(refuse(
            full,
            "has a name that is not valid UTF-8; rename it before packing",
        ));
    };
    if let Err(why) = paths::check_relative(&rel) {
        return Err(refuse(
            full,
            format!("cannot be carried in a bundle: its name {why}"),
        ));
    }
    if let Some(earlier) = collisions.insert(&rel) {
        return Err(refuse(
            full,
            format!(
                "has the same name as {earlier:?} on case-insensitive or normalising filesystems; rename one of them"
            ),
        ));
    }
    Ok(rel)
}

/// Scans `root`. Symlinks must resolve to regular files under `link_root` (usually `root`
/// itself; the repository folder for a Hugging Face snapshot). A top-level `.airlock` receipt
/// directory is skipped, so an installed model can be packed again.
///
/// The walk goes through directory handles, one component at a time from `root`, never
/// following a link, so a model may hold any path the format allows (4096 bytes below the
/// model directory), whatever the length of the directory it sits in: nothing is looked up by
/// a full path that could exceed the system's path limit. Each directory is listed and its
/// entries examined while it is open, then closed before its subdirectories are visited, so
/// two descriptors are open at most whatever the depth.
pub fn scan(root: &Path, link_root: &Path) -> Result<Vec<ScanEntry>> {
    scan_inner(root, link_root, None, &PrefetchBudget::new(0))
}

/// [`scan`], feeding the model checks ([`TreeChecks`]) in the same pass: each regular file is
/// opened once below its directory's handle while the directory is listed (its `fstat` takes
/// the place of the scan's `fstatat`) and checked on that handle; links, the receipt directory
/// and files that cannot be opened are left to the checks' by-path end. The files are opened
/// as the packer opens them (no link followed, no blocking, regular files only). The bytes of
/// small files are kept within `budget`, the pack's ([`PrefetchBudget::for_pack`]: one for all
/// the walks of a bundle).
pub fn scan_checking(
    root: &Path,
    link_root: &Path,
    checks: &mut TreeChecks,
    budget: &PrefetchBudget,
) -> Result<Vec<ScanEntry>> {
    scan_inner(root, link_root, Some(checks), budget)
}

/// The walk, keeping small files' content ([`Prefetched`]) within `budget` when it runs the
/// checks.
fn scan_inner(
    root: &Path,
    link_root: &Path,
    checks: Option<&mut TreeChecks>,
    budget: &PrefetchBudget,
) -> Result<Vec<ScanEntry>> {
    let meta = std::fs::metadata(root).map_err(|e| Error::io(root, e))?;
    if !meta.is_dir() {
        return Err(refuse(root, "is not a directory"));
    }
    let link_root = std::fs::canonicalize(link_root).map_err(|e| Error::io(link_root, e))?;
    let root_fd =
        fsio::open_dir_path(root, fsio::Follow::Final).map_err(|e| Error::io(root, e.into()))?;
    let mut walk = Walk {
        root,
        root_fd: &root_fd,
        link_root: &link_root,
        collisions: CollisionSet::default(),
        out: Vec::new(),
        checks,
        budget,
    };
    walk.dir("")?;
    let Walk {
        mut out,
        collisions,
        ..
    } = walk;
    // The collision table's memory goes before the sort, not at the end of the function.
    drop(collisions);
    // No two paths are equal (a name is one directory entry), so an unstable sort gives the
    // one order, and needs no scratch list beside a million entries (the walk gives them
    // nearly in order).
    out.sort_unstable_by(|a, b| paths::bundle_order(a.path(), b.path()));
    Ok(out)
}

/// A regular file (or a link to one) as the scan found it: its [`ScanEntry::File`] but for its
/// path, with its mode.
struct Regular {
    link: Option<Link>,
    size: u64,
    mode: u32,
    prefetched: Option<Prefetched>,
    has_values: Option<bool>,
    checks_left: bool,
    seen: Option<Seen>,
}

impl Regular {
    /// A file the scan found by its status `st` (link or `fstatat`), not opened.
    fn by_status(link: Option<Link>, size: u64, mode: u32, seen: Option<Seen>) -> Regular {
        Regular {
            link,
            size,
            mode,
            prefetched: None,
            has_values: None,
            checks_left: false,
            seen,
        }
    }

    /// A file found by its `fstatat` alone: its status seen ([`Seen`]).
    fn by_fstatat(st: &rustix::fs::Stat) -> Regular {
        Regular::by_status(None, st.st_size as u64, st.st_mode, Some(Seen::of(st)))
    }

    /// The scan's entry for the file at `path`.
    fn entry(self, path: String) -> ScanEntry {
        ScanEntry::File {
            path,
            link: self.link,
            size: self.size,
            executable: self.mode & 0o111 != 0,
            prefetched: self.prefetched,
            has_values: self.has_values,
            checks_left: self.checks_left,
            seen: self.seen,
        }
    }
}

/// A directory entry examined: its path, its relative path (`None`: not UTF-8) and what it is.
type Examined = (PathBuf, Option<String>, Found);

/// What one directory entry is, found while its directory was open.
enum Found {
    Dir,
    /// A regular file, or a link to one: where to read it, its size and mode, and its bytes
    /// when the scan kept them.
    File(Result<Regular>),
    Other,
}

struct Walk<'a> {
    root: &'a Path,
    root_fd: &'a OwnedFd,
    link_root: &'a Path,
    collisions: CollisionSet,
    out: Vec<ScanEntry>,
    /// The model checks fed by the walk ([`scan_checking`]).
    checks: Option<&'a mut TreeChecks>,
    /// Room left for the content of small files the checks open ([`Prefetched`]).
    budget: &'a PrefetchBudget,
}

impl Walk<'_> {
    /// Visits the directory `rel` ("" for the root) and everything below it, in name order,
    /// each directory before its contents.
    fn dir(&mut self, rel: &str) -> Result<()> {
        let (dir_path, fd, entries) = sorted_dir_below(self.root_fd, self.root, rel)?;
        let found: Vec<Examined> = match self.checks.is_some() {
            // With the model checks, each file is opened, read and checked here: the runs of a
            // directory's entries are examined in parallel (the opens and reads of small files
            // are most of a pack's time), each feeding checks of its own, merged in order.
            true => {
                let this = &*self;
                let parts: Vec<(Vec<Examined>, TreeChecks)> = entries
                    .par_chunks(CHECKED_RUN)
                    .map(|run| {
                        let mut checks = TreeChecks::default();
                        let found = run
                            .iter()
                            .filter_map(|(name, kind)| {
                                this.examine(&fd, rel, &dir_path, name, *kind, Some(&mut checks))
                            })
                            .collect();
                        (found, checks)
                    })
                    .collect();
                let checks = self.checks.as_deref_mut().expect("checked above");
                let mut found = Vec::with_capacity(entries.len());
                for (part, part_checks) in parts {
                    found.extend(part);
                    checks.merge(part_checks);
                }
                found
            }
            false => entries
                .iter()
                .filter_map(|(name, kind)| self.examine(&fd, rel, &dir_path, name, *kind, None))
                .collect(),
        };
        drop(fd);
        for (full, rel, what) in found {
            let rel = check_relative_name(rel, &full, &mut self.collisions)?;
            match what {
                Found::Dir => {
                    self.out.push(ScanEntry::Dir { path: rel.clone() });
                    self.dir(&rel)?;
                }
                Found::File(f) => self.out.push(f?.entry(rel)),
                Found::Other => {
                    return Err(refuse(
                        &full,
                        "is a device, socket or FIFO; a bundle carries regular files and directories only",
                    ));
                }
            }
        }
        Ok(())
    }

    /// What the entry `name` (of type `kind`) of the directory `dir` (`rel` in the tree, at
    /// `dir_path`) is, with its path and its relative path (`None`: not UTF-8), feeding
    /// `checks` when given; `None` for the receipt directory at the top, which is not packed.
    fn examine(
        &self,
        dir: &OwnedFd,
        rel: &str,
        dir_path: &Path,
        name: &OsStr,
        kind: FileType,
        checks: Option<&mut TreeChecks>,
    ) -> Option<Examined> {
        // The name the entry has in the tree (a name that is not UTF-8 is refused later,
        // before anything is checked).
        let rel_name = child_name(rel, name);
        let checked_name = rel_name.as_deref().filter(|_| checks.is_some());
        if rel.is_empty() && name == RECEIPT_DIR {
            if let (Some(checks), Some(n)) = (checks, checked_name) {
                checks.subtree(n);
            }
            return None;
        }
        let full = dir_path.join(name);
        let what = match kind {
            FileType::Directory => Found::Dir,
            FileType::RegularFile => Found::File(regular(
                dir,
                name,
                &full,
                checks.zip(checked_name),
                self.budget,
            )),
            FileType::Symlink => {
                if let (Some(checks), Some(n)) = (checks, checked_name) {
                    checks.by_path(n, false);
                }
                Found::File(self.link(dir, name, &full).map(|(target, size, mode)| {
                    Regular::by_status(Some(Link::Path(target)), size, mode, None)
                }))
            }
            _ => Found::Other,
        };
        Some((full, rel_name, what))
    }

    /// The regular file the link `name` in `dir` (at `full`) stands for: it must resolve to a
    /// regular file under `link_root`.
    fn link(&self, dir: &OwnedFd, name: &OsStr, full: &Path) -> Result<(PathBuf, u64, u32)> {
        let target = resolve_link(dir, name, full)?;
        if !target.starts_with(self.link_root) {
            return Err(refuse(
                full,
                format!(
                    "is a symlink to {}, outside {}",
                    target.display(),
                    self.link_root.display()
                ),
            ));
        }
        let m = std::fs::metadata(&target).map_err(|e| Error::io(&target, e))?;
        if !m.is_file() {
            return Err(refuse(
                full,
                "is a symlink to something other than a regular file (only file links are followed)",
            ));
        }
        Ok((target, m.len(), m.permissions().mode()))
    }
}

/// Entries of one directory examined together by one thread when the scan runs the model
/// checks.
const CHECKED_RUN: usize = 64;

/// Where the regular file `name` in `dir` (at `full`) is read from, its size and mode. With
/// model checks (and its name `rel` in the tree), the file is opened and checked on its
/// handle, its `fstat` giving the size and mode, and a small one is read whole while it is
/// open ([`Prefetched`], within `budget`); one that cannot be opened as a regular file now is
/// looked at as without checks and left to the checks' by-path end, which reports what the
/// path-based checks would. Past the budget, a small file whose checks need only the open file
/// ([`leaves_checks_of`]) is not opened: its `fstatat` gives its size and mode, and its checks
/// are left to the pack's read pass, which opens it anyway ([`ScanEntry::File::checks_left`]).
fn regular(
    dir: &OwnedFd,
    name: &OsStr,
    full: &Path,
    checks: Option<(&mut TreeChecks, &str)>,
    budget: &PrefetchBudget,
) -> Result<Regular> {
    if let Some((checks, rel)) = checks {
        if let Some(st) = left_to_read_pass(dir, name, rel, full, budget) {
            return Ok(Regular {
                checks_left: true,
                ..Regular::by_fstatat(&st)
            });
        }
        match fsio::open_file_at(dir, name) {
            Ok((file, st)) => {
                let (prefetched, has_values) =
                    check_open(rel, CheckedAs::Tree, full, &file, &st, checks, budget);
                return Ok(Regular {
                    prefetched,
                    has_values,
                    ..Regular::by_status(None, st.st_size as u64, st.st_mode, None)
                });
            }
            Err(_) => checks.by_path(rel, true),
        }
    }
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| Regular::by_fstatat(&st))
        .map_err(|e| Error::io(full, e.into()))
}

/// The status of the file `name` in `dir` (`rel` in the tree, at `full`) when a checking walk
/// leaves its model checks to the pack's read pass instead of opening it
/// ([`ScanEntry::File::checks_left`]): past the budget, a small regular file (by its `fstatat`,
/// no link followed) whose checks need only the open file ([`may_leave_checks`]). `None`: the
/// walk opens it. The directory scan and a Hugging Face snapshot's walk (for a blob, below
/// `blobs/`) decide alike.
pub(crate) fn left_to_read_pass(
    dir: &OwnedFd,
    name: &OsStr,
    rel: &str,
    full: &Path,
    budget: &PrefetchBudget,
) -> Option<rustix::fs::Stat> {
    if !may_leave_checks(rel, full, budget) {
        return None;
    }
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        && st.st_size as u64 <= PREFETCH_FILE_MAX
        && !budget.has_room(st.st_size as u64))
    .then_some(st)
}

/// Whether the checking scan may leave the model checks of the regular file `rel` (at `full`)
/// to the read pass: its budget has no room left for a small file of any size, and the file's
/// checks need nothing but the open file ([`leaves_checks_of`]) and a path short enough for the
/// path-based checks.
fn may_leave_checks(rel: &str, full: &Path, budget: &PrefetchBudget) -> bool {
    !budget.has_room(PREFETCH_FILE_MAX)
        && leaves_checks_of(rel)
        && full.as_os_str().len() < crate::inspect::PATH_MAX
}

/// Whether the model checks of the file `rel` need nothing but the open file, by its name: no
/// shard index or config (checked by path, with the files they name), no safetensors or GGUF
/// name (the value scan reads those on the reading thread, not the read-ahead threads). A
/// PyTorch name (`.bin`, `.pt`, ...) or none at all.
fn leaves_checks_of(rel: &str) -> bool {
    use crate::inspect::Format;
    matches!(
        crate::inspect::format::by_name(rel),
        None | Some(Format::Torch)
    )
}

/// The name the model checks know a file by, and how it was reached ([`check_open`]).
#[derive(Clone, Copy)]
pub(crate) enum CheckedAs<'a> {
    /// A regular file of the tree, by its path in the tree.
    Tree,
    /// A Hugging Face snapshot's file, by `name` from the cache root; `through_link` when it is
    /// open as the blob its link names (a check that needs the tree resolves the link).
    Cache { name: &'a str, through_link: bool },
}

/// The model checks of the file `rel` (at `full`) open as `file` with the status `st`, fed to
/// `checks` under the name `as_` gives: a file of a page or less is read whole for them, and
/// its bytes are kept when `budget` has room ([`Prefetched`]). Returns the kept bytes and
/// whether the value scan reads the file. The directory scan and a Hugging Face snapshot's
/// walk both check what they open this way.
pub(crate) fn check_open(
    rel: &str,
    as_: CheckedAs<'_>,
    full: &Path,
    file: &File,
    st: &rustix::fs::Stat,
    checks: &mut TreeChecks,
    budget: &PrefetchBudget,
) -> (Option<Prefetched>, Option<bool>) {
    let len = st.st_size as u64;
    let taken = len <= PREFETCH_FILE_MAX && budget.take(len);
    // A file of a page or less is read whole even past the budget: one read feeds the model
    // checks and the value scan's sniff (two reads of its first bytes otherwise), and the
    // bytes are let go of after.
    let content = if taken || len <= SNIFF_WHOLE_MAX {
        read_whole(file, len)
    } else {
        None
    };
    match as_ {
        CheckedAs::Tree => checks.opened_read(rel, full, file, len, content.as_deref()),
        CheckedAs::Cache {
            name,
            through_link: false,
        } => checks.opened_read(name, full, file, len, content.as_deref()),
        CheckedAs::Cache {
            name,
            through_link: true,
        } => checks.opened_through_link(name, full, file, len, content.as_deref()),
    }
    // What the value scan will read is known now, from the bytes at hand or the first few read
    // on this handle: pack bounds its manifest by it.
    let has_values = match &content {
        Some(bytes) => Some(crate::inspect::format::has_values_in(rel, bytes, len)),
        None => crate::inspect::format::has_values(rel, file, len).ok(),
    };
    let prefetched = content
        .filter(|_| taken && unchanged(file, st))
        .map(Prefetched);
    if taken && prefetched.is_none() {
        budget.give_back(len);
    }
    (prefetched, has_values)
}

/// Runs now the model checks [`scan_checking`] left to the read pass
/// ([`ScanEntry::File::checks_left`]) of `entries` (scanned below `root`), feeding `checks`: each
/// such file opened below `root` (a Hugging Face snapshot's file: its blob) as the packer opens
/// it and checked as the scan checks what it opens. For a pack that will not read those files itself (a delta takes files from its base)
/// or that refuses the model (its refusal counts every error). Afterwards no entry has its
/// checks left.
pub fn check_left(root: &Path, entries: &mut [ScanEntry], checks: &mut TreeChecks) {
    let parts: Vec<TreeChecks> = entries
        .par_chunks_mut(CHECKED_RUN)
        .map(|run| {
            let mut part = TreeChecks::default();
            let mut opener = SourceOpener::default();
            let no_room = PrefetchBudget::new(0);
            for e in run {
                let ScanEntry::File {
                    path,
                    link,
                    has_values,
                    checks_left,
                    ..
                } = e
                else {
                    continue;
                };
                if !std::mem::take(checks_left) {
                    continue;
                }
                // A Hugging Face snapshot's file is read as its blob, and checked as the walk
                // checks a file it opened through its link.
                let (full, as_) = match link {
                    Some(blob) => (
                        blob.path(),
                        CheckedAs::Cache {
                            name: path,
                            through_link: true,
                        },
                    ),
                    None => (Cow::Owned(root.join(path.as_str())), CheckedAs::Tree),
                };
                match opener.open_stat(&full, path) {
                    Ok((file, st)) => {
                        *has_values =
                            check_open(path, as_, &full, &file, &st, &mut part, &no_room).1;
                    }
                    Err(_) => part.by_path(path, link.is_none()),
                }
            }
            part
        })
        .collect();
    for part in parts {
        checks.merge(part);
    }
}

/// The `len` bytes of the open regular `file`, read from its start by positioned reads (its
/// offset stays where the checks expect it); `None` when the file does not hold exactly `len`
/// bytes now (the read pass reports the change).
pub(crate) fn read_whole(file: &File, len: u64) -> Option<std::sync::Arc<[u8]>> {
    use std::os::unix::fs::FileExt;
    thread_local! {
        /// The thread's read buffer: one allocation a file (the kept bytes), not two.
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let len = len as usize;
    BUF.with_borrow_mut(|buf| {
        // One byte more than the size: the read that takes the last bytes also tells whether
        // the file goes on.
        buf.resize(len + 1, 0);
        let mut got = 0;
        while got <= len {
            let want = buf.len() - got;
            match file.read_at(&mut buf[got..], got as u64) {
                Ok(0) => break,
                // A regular file's read is short only at its end: no read to find the end.
                Ok(n) if n < want => {
                    got += n;
                    break;
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        (got == len).then(|| std::sync::Arc::from(&buf[..len]))
    })
}

/// Whether the open `file` still has the size, modification time and inode of `before`.
pub(crate) fn unchanged(file: &File, before: &rustix::fs::Stat) -> bool {
    rustix::fs::fstat(file).is_ok_and(|after| same_state(before, &after))
}

/// Whether two `fstat`s of one open file give the same size, modification time and inode:
/// what the packer holds a file to between the start and the end of a read.
pub(crate) fn same_state(before: &rustix::fs::Stat, after: &rustix::fs::Stat) -> bool {
    after.st_size == before.st_size
        && after.st_mtime == before.st_mtime
        && after.st_mtime_nsec == before.st_mtime_nsec
        && after.st_ino == before.st_ino
}

/// The canonical path of what the link `name` in `dir` (at `full`) points to. A link whose own
/// path is too long for `realpath` is resolved through its handle (`/proc/self/fd`).
fn resolve_link(dir: &OwnedFd, name: &OsStr, full: &Path) -> Result<PathBuf> {
    let dangling = || refuse(full, "is a dangling symlink: its target does not exist");
    match std::fs::canonicalize(full) {
        Ok(t) => Ok(t),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NAMETOOLONG.raw_os_error()) => {
            let fd = fsio::open_path_at(dir, name).map_err(|_| dangling())?;
            std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| {
                refuse(
                    full,
                    format!("is a symlink whose target cannot be resolved ({e})"),
                )
            })
        }
        Err(_) => Err(dangling()),
    }
}

/// A directory entry as [`fsio::dir_entries`] lists it: its name and type.
pub(crate) type DirEntry = (std::ffi::OsString, FileType);

/// One directory of a walk through handles: the directory `rel` ("" for the walk's top `top`,
/// open as `top_fd`) opened below the top one component at a time without following a link,
/// and its entries sorted by name. Returns its path (for messages), its handle and its entries.
/// The directory scan and a Hugging Face snapshot's walk both visit a directory this way.
pub(crate) fn sorted_dir_below(
    top_fd: &OwnedFd,
    top: &Path,
    rel: &str,
) -> Result<(PathBuf, OwnedFd, Vec<DirEntry>)> {
    let dir_path = if rel.is_empty() {
        top.to_path_buf()
    } else {
        top.join(rel)
    };
    let fd = open_dir_below(top_fd, rel).map_err(|e| Error::io(&dir_path, e.into()))?;
    let mut entries = fsio::dir_entries(&fd).map_err(|e| Error::io(&dir_path, e))?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((dir_path, fd, entries))
}

/// Opens the directory `rel` ("" for `root` itself) below `root`, one component at a time,
/// never following a link.
fn open_dir_below(root: &OwnedFd, rel: &str) -> fsio::Result<OwnedFd> {
    let mut fd = fsio::open_dir_at(root, ".")?;
    if !rel.is_empty() {
        for c in rel.split('/') {
            fd = fsio::open_dir_at(&fd, c)?;
        }
    }
    Ok(fd)
}

/// Opens the source file of a scanned entry for reading, one component at a time through
/// directory handles, so a path longer than the system's limit (a model directory deep in a
/// tree holding a 4096-byte path) opens too.
///
/// `rel` is the entry's path in the bundle. When `source` is the model directory joined with
/// `rel` (a file [`scan`] found), the model directory is opened as named and every component
/// of `rel` below it without following a link, as the scan saw them. Otherwise (a link's
/// target, a blob of a Hugging Face cache: canonical paths) the directories are resolved as
/// `open(2)` would. The file itself is never a link, is opened without blocking (a FIFO swapped
/// in cannot hang the pack) and must be a regular file.
pub fn open_source(source: &Path, rel: &str) -> io::Result<File> {
    let (dir, last) = open_source_dir(source, rel)?;
    open_in(&dir, last)
}

/// Opens the source files of a scan one after the other, as [`open_source`] does, keeping the
/// handle of the directory the last file was opened in: the next file of the same directory
/// (the usual case, files come in bundle order) is opened with one `openat` below it instead of
/// a walk from the model directory down. The handle was reached by the same rules (no link
/// followed below the model directory), and nothing is ever looked up through a link.
#[derive(Default)]
pub struct SourceOpener {
    /// The source path of the last file's directory, whether it was reached below the model
    /// directory (no link followed) or as a resolved path, and its handle.
    last: Option<(PathBuf, bool, OwnedFd)>,
}

impl SourceOpener {
    /// Opens the source file of a scanned entry, as [`open_source`].
    pub fn open(&mut self, source: &Path, rel: &str) -> io::Result<File> {
        self.open_stat(source, rel).map(|(file, _)| file)
    }

    /// [`SourceOpener::open`], with the file's status from the `fstat` that checked it is a
    /// regular file (so the reader needs no second one).
    pub fn open_stat(&mut self, source: &Path, rel: &str) -> io::Result<(File, rustix::fs::Stat)> {
        self.open_with(source, rel, open_in_stat)
    }

    /// [`SourceOpener::open`] without the `fstat` that checks what was opened
    /// ([`fsio::open_at_unchecked`]): for a file the scan found by its `fstatat`, whose read
    /// is trusted only once [`Seen::still`] holds after it.
    pub(crate) fn open_unchecked(&mut self, source: &Path, rel: &str) -> io::Result<File> {
        self.open_with(source, rel, |fd, name| {
            utf8_name(name)?;
            fsio::open_at_unchecked(fd, name).map_err(|e| e.into_cause().into())
        })
    }

    /// Opens the file `rel` at `source` with `open`, in the directory handle held when it is
    /// the file's, else in the file's directory opened by the packer's rules (and held).
    fn open_with<T>(
        &mut self,
        source: &Path,
        rel: &str,
        open: impl Fn(&OwnedFd, &OsStr) -> io::Result<T>,
    ) -> io::Result<T> {
        if let Some((dir, below, fd)) = &self.last
            && let Some(name) = in_held_dir(source, dir, rel, *below)
        {
            return open(fd, name);
        }
        let parent = source.parent().unwrap_or(Path::new(""));
        let below = below_model_dir(source, rel);
        if let Some((dir, b, fd)) = &self.last
            && *b == below
            && dir == parent
        {
            return open(fd, last_name(source)?);
        }
        self.last = None;
        let (fd, last) = open_source_dir(source, rel)?;
        let opened = open(&fd, last)?;
        self.last = Some((parent.to_path_buf(), below, fd));
        Ok(opened)
    }
}

/// The name of `source` (the entry `rel`) in the directory `dir` an opener holds, reached below
/// the model directory or not (`below`): when `source` is `dir` joined with one name, and ends
/// with `rel` exactly when `dir` was reached below the model directory, as the checks of
/// [`SourceOpener::open_stat`] that parse both paths into components would find. Compared as
/// bytes (the files of a million-file model come one after the other from a few directories):
/// a path these bytes do not match (a `.` or a doubled `/` in it) takes those checks instead.
fn in_held_dir<'s>(source: &'s Path, dir: &Path, rel: &str, below: bool) -> Option<&'s OsStr> {
    use std::os::unix::ffi::OsStrExt;
    let (s, d) = (source.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let name = s.strip_prefix(d)?.strip_prefix(b"/")?;
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return None;
    }
    let ends_with_rel = !rel.is_empty()
        && s.len() > rel.len()
        && s.ends_with(rel.as_bytes())
        && s[s.len() - rel.len() - 1] == b'/';
    (ends_with_rel == below).then(|| OsStr::from_bytes(name))
}

/// Whether `source` is the model directory joined with `rel` (a file the scan found), rather
/// than a link's resolved target.
fn below_model_dir(source: &Path, rel: &str) -> bool {
    !rel.is_empty() && source.ends_with(Path::new(rel))
}

fn last_name(source: &Path) -> io::Result<&OsStr> {
    source
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))
}

/// The directory holding the source file of a scanned entry ([`open_source`]), opened, and
/// the file's name in it.
fn open_source_dir<'s>(source: &'s Path, rel: &str) -> io::Result<(OwnedFd, &'s OsStr)> {
    let rel_path = Path::new(rel);
    let (dir, names): (OwnedFd, Vec<&OsStr>) = if below_model_dir(source, rel) {
        let mut root = source;
        for _ in rel.split('/') {
            root = root.parent().unwrap_or(Path::new(""));
        }
        let names = rel_path.iter().collect();
        (fsio::open_dir_following(root)?, names)
    } else {
        let parent = source.parent().unwrap_or(Path::new(""));
        let name = source
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        (fsio::open_dir_following(parent)?, vec![name])
    };
    let (_, parents) = names.split_last().expect("at least one component");
    let mut fd = dir;
    for c in parents {
        fd = fsio::open_dir_at(&fd, *c)?;
    }
    Ok((fd, last_name(source)?))
}

/// Refuses a name that is not UTF-8 (no scanned file has one).
fn utf8_name(name: &OsStr) -> io::Result<()> {
    match name.to_str() {
        Some(_) => Ok(()),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a UTF-8 name",
        )),
    }
}

/// Opens the regular file `last` in the directory `fd` for reading, never through a link,
/// without blocking.
fn open_in(fd: &OwnedFd, last: &OsStr) -> io::Result<File> {
    open_in_stat(fd, last).map(|(file, _)| file)
}

/// [`open_in`], with the file's status.
fn open_in_stat(fd: &OwnedFd, last: &OsStr) -> io::Result<(File, rustix::fs::Stat)> {
    utf8_name(last)?;
    let opened = match fsio::open_file_at(fd, last).map_err(fsio::Error::into_cause) {
        Ok(opened) => opened,
        Err(fsio::Cause::Link) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is now a symbolic link",
            ));
        }
        Err(fsio::Cause::NotRegular(_)) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is no longer a regular file (a FIFO, device or directory is there now)",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn scans_in_bundle_order_and_follows_file_links() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        std::fs::write(r.join("a/b/w.bin"), b"1234").unwrap();
        std::fs::write(r.join("a.txt"), b"x").unwrap();
        std::fs::create_dir(r.join(".airlock")).unwrap();
        std::fs::write(r.join(".airlock/manifest.json"), b"{}").unwrap();
        symlink("a/b/w.bin", r.join("link.bin")).unwrap();
        let got = scan(r, r).unwrap();
        let names: Vec<_> = got.iter().map(|e| e.path()).collect();
        assert_eq!(names, ["a", "a/b", "a/b/w.bin", "a.txt", "link.bin"]);
        match &got[4] {
            ScanEntry::File { size, link, .. } => {
                assert_eq!(*size, 4);
                assert!(link.as_ref().unwrap().path().ends_with("a/b/w.bin"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_dangling_and_escaping_links_and_fifos() {
        let t = tempfile::tempdir().unwrap();
        let inner = t.path().join("m");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(t.path().join("outside"), b"x").unwrap();
        symlink("../outside", inner.join("esc")).unwrap();
        let err = scan(&inner, &inner).unwrap_err().to_string();
        assert!(err.contains("esc") && err.contains("outside"), "{err}");
        std::fs::remove_file(inner.join("esc")).unwrap();
        symlink("nowhere", inner.join("dangling")).unwrap();
        let err = scan(&inner, &inner).unwrap_err().to_string();
        assert!(err.contains("dangling"), "{err}");
        std::fs::remove_file(inner.join("dangling")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            inner.join("fifo"),
            rustix::fs::FileType::Fifo,
            0o644.into(),
            0,
        )
        .unwrap();
        let err = scan(&inner, &inner).unwrap_err().to_string();
        assert!(err.contains("FIFO") && err.contains("fifo"), "{err}");
    }

    #[test]
    fn sources_open_below_the_model_directory_without_following_links() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        std::fs::create_dir_all(m.join("a")).unwrap();
        std::fs::write(m.join("a/f"), b"model").unwrap();
        let entries = scan(&m, &m).unwrap();
        let source = entries[1].source(&m).unwrap();
        let source = &*source;
        let ScanEntry::File {
            path, link: None, ..
        } = &entries[1]
        else {
            panic!("{entries:?}")
        };
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut open_source(source, path).unwrap(), &mut got).unwrap();
        assert_eq!(got, b"model");
        // The directory swapped for a link after the scan: not followed.
        std::fs::create_dir(t.path().join("elsewhere")).unwrap();
        std::fs::write(t.path().join("elsewhere/f"), b"host secret").unwrap();
        std::fs::rename(m.join("a"), t.path().join("a-moved")).unwrap();
        symlink(t.path().join("elsewhere"), m.join("a")).unwrap();
        assert!(open_source(source, path).is_err(), "read through a link");
        // The file swapped for a link, or for a FIFO: refused (the FIFO without blocking).
        std::fs::remove_file(m.join("a")).unwrap();
        std::fs::rename(t.path().join("a-moved"), m.join("a")).unwrap();
        std::fs::remove_file(m.join("a/f")).unwrap();
        symlink(t.path().join("elsewhere/f"), m.join("a/f")).unwrap();
        assert!(open_source(source, path).is_err(), "read through a link");
        std::fs::remove_file(m.join("a/f")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            m.join("a/f"),
            rustix::fs::FileType::Fifo,
            0o644.into(),
            0,
        )
        .unwrap();
        let e = open_source(source, path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }

    #[test]
    fn the_opener_reuses_a_directory_handle_and_follows_no_link() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        std::fs::create_dir_all(m.join("a")).unwrap();
        for name in ["f", "g", "h"] {
            std::fs::write(m.join("a").join(name), name).unwrap();
        }
        std::fs::write(m.join("top"), b"top").unwrap();
        let mut opener = SourceOpener::default();
        let read = |opener: &mut SourceOpener, rel: &str| {
            let mut got = String::new();
            std::io::Read::read_to_string(&mut opener.open(&m.join(rel), rel)?, &mut got)?;
            io::Result::Ok(got)
        };
        assert_eq!(read(&mut opener, "a/f").unwrap(), "f");
        // The directory swapped for a link to a host directory after the first file: the next
        // file of it is read from the directory the handle holds, never through the link.
        std::fs::create_dir(t.path().join("elsewhere")).unwrap();
        std::fs::write(t.path().join("elsewhere/g"), b"host secret").unwrap();
        std::fs::rename(m.join("a"), t.path().join("a-moved")).unwrap();
        symlink(t.path().join("elsewhere"), m.join("a")).unwrap();
        assert_eq!(read(&mut opener, "a/g").unwrap(), "g");
        // Another directory: opened afresh, below the model directory.
        assert_eq!(read(&mut opener, "top").unwrap(), "top");
        assert!(read(&mut opener, "a/h").is_err(), "read through a link");
        // A file of the held directory swapped for a link: refused.
        std::fs::remove_file(m.join("a")).unwrap();
        std::fs::rename(t.path().join("a-moved"), m.join("a")).unwrap();
        assert_eq!(read(&mut opener, "a/f").unwrap(), "f");
        std::fs::remove_file(m.join("a/g")).unwrap();
        symlink(t.path().join("elsewhere/g"), m.join("a/g")).unwrap();
        assert!(read(&mut opener, "a/g").is_err(), "read through a link");
    }

    /// Copies the directory `from` into `to`, files and directories only.
    fn copy_tree(from: &Path, to: &Path) {
        for e in walkdir::WalkDir::new(from) {
            let e = e.unwrap();
            let dest = to.join(e.path().strip_prefix(from).unwrap());
            if e.file_type().is_dir() {
                std::fs::create_dir_all(&dest).unwrap();
            } else {
                std::fs::copy(e.path(), &dest).unwrap();
            }
        }
    }

    /// The model checks fed by the scan find exactly what their own path-based walk finds:
    /// every corrupt fixture, shard indexes and configs (checked by path at the end), a link
    /// in the tree, a receipt directory the scan leaves out, `.no_exist` markers, empty and
    /// interrupted files, bookkeeping the pack leaves out.
    #[test]
    fn the_model_checks_fed_by_the_scan_find_what_their_own_walk_finds() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures");
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        copy_tree(&fixtures.join("valid"), &m.join("valid"));
        copy_tree(&fixtures.join("corrupt"), &m.join("corrupt"));
        let pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 4943852032\n";
        std::fs::create_dir_all(m.join(".airlock")).unwrap();
        std::fs::write(m.join(".airlock/model.safetensors"), pointer).unwrap();
        std::fs::create_dir_all(m.join(".no_exist/c1")).unwrap();
        std::fs::write(m.join(".no_exist/c1/model.safetensors"), b"").unwrap();
        std::fs::create_dir_all(m.join(".cache/huggingface")).unwrap();
        std::fs::write(m.join(".cache/huggingface/tokenizer.json"), pointer).unwrap();
        std::fs::write(m.join("empty.bin"), b"").unwrap();
        std::fs::write(m.join("README.md"), b"").unwrap();
        std::fs::write(m.join("weights.safetensors.incomplete"), [1u8; 100]).unwrap();
        std::fs::write(
            m.join("config.json"),
            b"{\"auto_map\": {\"AutoModel\": \"modeling_x.Model\"}}",
        )
        .unwrap();
        symlink(
            "corrupt/lfs-pointer.safetensors",
            m.join("linked.safetensors"),
        )
        .unwrap();

        let mut checks = TreeChecks::default();
        let entries = scan_checking(&m, &m, &mut checks, &PrefetchBudget::for_pack()).unwrap();
        // The same entries, but that the checking scan keeps the content of the small files.
        let unread: Vec<ScanEntry> = entries.iter().cloned().map(without_content).collect();
        let plain = scan(&m, &m).unwrap();
        // The plain scan finds every regular file by its `fstatat` (its status seen).
        assert!(plain.iter().all(|e| match e {
            ScanEntry::File { link, seen, .. } => seen.is_some() == link.is_none(),
            ScanEntry::Dir { .. } => true,
        }));
        assert_eq!(
            unread,
            plain.into_iter().map(without_content).collect::<Vec<_>>()
        );
        assert!(entries.iter().any(|e| matches!(
            e,
            ScanEntry::File {
                prefetched: Some(_),
                ..
            }
        )));
        let (fed, fed_unchecked) = checks.finish(&m).unwrap();
        let (walked, walked_unchecked) = crate::inspect::check_tree_reaching(&m).unwrap();
        let json = |f: &[crate::inspect::Finding]| serde_json::to_value(f).unwrap();
        assert_eq!(json(&fed), json(&walked));
        assert_eq!(fed_unchecked, walked_unchecked);
        // The tree exercises what it should: findings from the handles, from the by-path end
        // (the link, the shard indexes, the config) and from the receipt directory.
        let paths: Vec<&str> = fed.iter().map(|f| f.path.as_str()).collect();
        for p in [
            "corrupt/html-page.bin",
            "corrupt/missing-shard/model.safetensors.index.json",
            "linked.safetensors",
            ".airlock/model.safetensors",
            ".cache/huggingface/tokenizer.json",
            "empty.bin",
            "weights.safetensors.incomplete",
            "config.json",
        ] {
            assert!(paths.contains(&p), "{p} not in {paths:?}");
        }
        assert!(
            !paths.iter().any(|p| p.starts_with(".no_exist")),
            "{paths:?}"
        );
    }

    /// Past its budget the checking scan does not open a small file whose name is no model
    /// format's: it finds its size by `fstatat` and leaves its model checks to the read pass.
    /// [`check_left`] runs them as the scan would have: the scan's checks and those find what
    /// the tree's own walk finds, and tell the same files the value scan reads.
    #[test]
    fn past_its_budget_the_scan_leaves_the_checks_of_small_plain_files() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures");
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        copy_tree(&fixtures.join("valid"), &m.join("valid"));
        copy_tree(&fixtures.join("corrupt"), &m.join("corrupt"));
        let pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 4943852032\n";
        std::fs::write(m.join("notes.txt"), pointer).unwrap();
        std::fs::create_dir_all(m.join("d")).unwrap();
        std::fs::write(m.join("d/pointer"), pointer).unwrap();
        std::fs::write(
            m.join("d/big.dat"),
            vec![1u8; PREFETCH_FILE_MAX as usize + 1],
        )
        .unwrap();
        std::fs::write(m.join("d/page.bin"), b"<html>not found</html>").unwrap();
        let values = fixtures.join("values");
        std::fs::copy(values.join("nan-f16.safetensors"), m.join("d/weights")).unwrap();

        let mut checks = TreeChecks::default();
        let mut entries = scan_inner(&m, &m, Some(&mut checks), &PrefetchBudget::new(0)).unwrap();
        let mut left = 0;
        for e in &entries {
            if let ScanEntry::File {
                path,
                size,
                checks_left,
                has_values,
                prefetched,
                seen,
                ..
            } = e
            {
                let plain = leaves_checks_of(path);
                assert_eq!(*checks_left, plain && *size <= PREFETCH_FILE_MAX, "{path}");
                // Found by its `fstatat` exactly when not opened.
                assert_eq!(seen.is_some(), *checks_left, "{path}");
                assert!(prefetched.is_none(), "{path}");
                if *checks_left {
                    assert_eq!(*has_values, None, "{path}");
                    left += 1;
                }
            }
        }
        assert!(left >= 3, "{entries:?}");
        let plain: Vec<ScanEntry> = entries.iter().cloned().map(without_content).collect();
        let unchecked: Vec<ScanEntry> = scan(&m, &m)
            .unwrap()
            .into_iter()
            .map(without_content)
            .collect();
        assert_eq!(plain, unchecked);

        let mut more = TreeChecks::default();
        check_left(&m, &mut entries, &mut more);
        checks.merge(more);
        let (fed, fed_unchecked) = checks.finish(&m).unwrap();
        let (walked, walked_unchecked) = crate::inspect::check_tree_reaching(&m).unwrap();
        let json = |f: &[crate::inspect::Finding]| serde_json::to_value(f).unwrap();
        assert_eq!(json(&fed), json(&walked));
        assert_eq!(fed_unchecked, walked_unchecked);
        let paths: Vec<&str> = fed.iter().map(|f| f.path.as_str()).collect();
        for p in ["notes.txt", "d/pointer", "d/page.bin"] {
            assert!(paths.contains(&p), "{p} not in {paths:?}");
        }
        // Every check done, and the value scan's files told as a scan within budget tells them.
        let sniffed = |entries: &[ScanEntry]| -> Vec<(String, bool, Option<bool>)> {
            entries
                .iter()
                .filter_map(|e| match e {
                    ScanEntry::File {
                        path,
                        checks_left,
                        has_values,
                        ..
                    } => Some((path.clone(), *checks_left, *has_values)),
                    ScanEntry::Dir { .. } => None,
                })
                .collect()
        };
        let mut checks = TreeChecks::default();
        let within = scan_inner(&m, &m, Some(&mut checks), &PrefetchBudget::for_pack()).unwrap();
        assert_eq!(sniffed(&entries), sniffed(&within));
        assert!(sniffed(&entries).contains(&("d/weights".into(), false, Some(true))));
    }

    /// `e` without what a scan found of its content and status (kept bytes, checks, seen).
    fn without_content(e: ScanEntry) -> ScanEntry {
        match e {
            ScanEntry::File {
                path,
                link,
                size,
                executable,
                ..
            } => ScanEntry::File {
                path,
                link,
                size,
                executable,
                prefetched: None,
                has_values: None,
                checks_left: false,
                seen: None,
            },
            dir => dir,
        }
    }

    /// The content each file of `entries` was given, by path.
    fn contents(entries: &[ScanEntry]) -> Vec<(&str, Option<&[u8]>)> {
        entries
            .iter()
            .filter_map(|e| match e {
                ScanEntry::File {
                    path, prefetched, ..
                } => Some((path.as_str(), prefetched.as_ref().map(Prefetched::bytes))),
                ScanEntry::Dir { .. } => None,
            })
            .collect()
    }

    /// The checking scan keeps the exact bytes of the files it opens that are at most
    /// [`PREFETCH_FILE_MAX`] bytes, empty ones included, within its budget; not those of larger
    /// files, of links (read through their target later) or of a scan without checks.
    #[test]
    fn the_checking_scan_keeps_small_files_within_its_budget() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("m");
        std::fs::create_dir_all(m.join("d")).unwrap();
        let edge = vec![7u8; PREFETCH_FILE_MAX as usize];
        let big = vec![8u8; PREFETCH_FILE_MAX as usize + 1];
        std::fs::write(m.join("d/a.txt"), b"alpha").unwrap();
        std::fs::write(m.join("d/b.txt"), b"").unwrap();
        std::fs::write(m.join("edge.bin"), &edge).unwrap();
        std::fs::write(m.join("big.bin"), &big).unwrap();
        symlink("d/a.txt", m.join("link.txt")).unwrap();
        let scanned = |budget: u64| {
            let mut checks = TreeChecks::default();
            scan_inner(&m, &m, Some(&mut checks), &PrefetchBudget::new(budget)).unwrap()
        };
        let all = scanned(PREFETCH_TOTAL_MAX);
        assert_eq!(
            contents(&all),
            [
                ("big.bin", None),
                ("d/a.txt", Some(&b"alpha"[..])),
                ("d/b.txt", Some(&b""[..])),
                ("edge.bin", Some(&edge[..])),
                ("link.txt", None),
            ]
        );
        // A budget that holds the small files but not the 64 KiB one: each file counts its
        // size and 64 bytes of overhead.
        let some = scanned(5 + 64 + 64);
        assert_eq!(
            contents(&some),
            [
                ("big.bin", None),
                ("d/a.txt", Some(&b"alpha"[..])),
                ("d/b.txt", Some(&b""[..])),
                ("edge.bin", None),
                ("link.txt", None),
            ]
        );
        assert!(
            contents(&scan(&m, &m).unwrap())
                .iter()
                .all(|(_, c)| c.is_none())
        );
    }

    /// Content is kept only when the file read whole is exactly its `fstat` size and is
    /// unchanged after the read; otherwise the read pass opens it again and reports the change.
    #[test]
    fn content_is_kept_only_from_a_file_that_did_not_change() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        let before = rustix::fs::fstat(&file).unwrap();
        assert_eq!(read_whole(&file, 10).as_deref(), Some(&b"0123456789"[..]));
        assert!(unchanged(&file, &before));
        // Shorter or longer than the size the open saw: not kept.
        assert_eq!(read_whole(&file, 11), None);
        assert_eq!(read_whole(&file, 9), None);
        // Written to after the open (the same size, a new modification time): changed.
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&path, b"9876543210").unwrap();
        assert!(!unchanged(&file, &before));
    }

    /// A file seen by its `fstatat` is still seen so, through a handle, only when it is the same
    /// regular file (inode), of the size asked, with the same modification time: not after a
    /// write that keeps the size, not as a copy with the same size and time, not as a FIFO.
    #[test]
    fn a_file_is_still_seen_only_as_the_same_unchanged_regular_file() {
        use rustix::fs::{Timespec, Timestamps, UTIME_OMIT};
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::write(&a, b"0123456789").unwrap();
        let at = |path: &Path, sec: i64| {
            let when = Timespec {
                tv_sec: sec,
                tv_nsec: 5,
            };
            let times = Timestamps {
                last_access: Timespec {
                    tv_sec: 0,
                    tv_nsec: UTIME_OMIT,
                },
                last_modification: when,
            };
            rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::empty()).unwrap();
        };
        at(&a, 1_700_000_000);
        let seen = Seen::of(&rustix::fs::stat(&a).unwrap());
        let open = || File::open(&a).unwrap();
        assert!(seen.still(&open(), 10));
        assert!(!seen.still(&open(), 9), "another size asked");
        // Rewritten in place, same size: its time moved.
        std::fs::write(&a, b"9876543210").unwrap();
        assert!(!seen.still(&open(), 10));
        // Its time set back: seen as before (what the check is: status, not content).
        at(&a, 1_700_000_000);
        assert!(seen.still(&open(), 10));
        // A copy of the same size and time is another inode.
        std::fs::copy(&a, &b).unwrap();
        at(&b, 1_700_000_000);
        let copy = rustix::fs::stat(&b).unwrap();
        assert_eq!(copy.st_mtime, rustix::fs::stat(&a).unwrap().st_mtime);
        assert!(!seen.still(&File::open(&b).unwrap(), 10));
        // A FIFO in its place (opened without blocking) is not a regular file.
        std::fs::remove_file(&a).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, &a, FileType::Fifo, 0o644.into(), 0).unwrap();
        let dir = fsio::open_dir_path(t.path(), fsio::Follow::Never).unwrap();
        let fifo = fsio::open_at_unchecked(&dir, OsStr::new("a")).unwrap();
        assert!(read_whole(&fifo, 10).is_none());
        assert!(!Seen::of(&rustix::fs::fstat(&fifo).unwrap()).still(&fifo, 0));
        assert!(!seen.still(&fifo, 10));
    }

    /// A million-file model holds a million entries: what the scan adds to one (`Seen`) fits in
    /// the padding it had, and an entry stays 96 bytes on a 64-bit target.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn an_entry_stays_96_bytes() {
        assert_eq!(std::mem::size_of::<ScanEntry>(), 96);
        assert_eq!(std::mem::size_of::<Option<Seen>>(), 4);
    }

    #[test]
    fn refuses_case_collisions() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("Model.bin"), b"x").unwrap();
        std::fs::write(t.path().join("model.bin"), b"y").unwrap();
        let err = scan(t.path(), t.path()).unwrap_err().to_string();
        assert!(err.contains("case-insensitive"), "{err}");
    }
}
