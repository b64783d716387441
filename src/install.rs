//! Installing a verified bundle: staging beside the destination, fsync, atomic rename, receipt.
//!
//! The destination never holds a partial model. Entries are written into
//! `PARENT/.airlock-staging-<name>-<random>/tree`, a directory on the destination's own
//! filesystem, with `openat`-style calls relative to directory handles that airlock created
//! itself (`O_EXCL | O_NOFOLLOW`), so no entry can redirect a later write. Only after every entry
//! and volume has matched the manifest, every file and directory is synced and the receipt is
//! written does one `rename` (or `renameat2(RENAME_EXCHANGE)` for `--replace`) make the new tree
//! visible. A killed process leaves a staging directory whose lock is free; the next run removes
//! it.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, RenameFlags};

use crate::bundle::read::{self, EntrySink, Mode as ReadMode, Opened};
use crate::bundle::write::parent_dir;
use crate::error::{Error, Result};
use crate::inspect::Finding;
use crate::lock::{self, DirLock};
use crate::manifest::{self, FileEntry, Manifest};
use crate::paths::RECEIPT_DIR;
use crate::progress::Progress;
use crate::writeback::{FLUSH_EVERY, Flusher};

/// Prefix of the staging directories unpack creates beside the destination.
pub const STAGING_PREFIX: &str = ".airlock-staging-";

/// Options for [`unpack`].
pub struct UnpackOptions {
    /// The directory to create or replace.
    pub dest: PathBuf,
    /// Replace an existing destination atomically.
    pub replace: bool,
    /// Allow installing a lower version over a higher one.
    pub allow_downgrade: bool,
    /// Check free space before writing (on by default; off for filesystems whose free-space
    /// figure is meaningless, such as compressing or network filesystems).
    pub check_space: bool,
}

/// What an unpack did.
#[derive(Debug, serde::Serialize)]
pub struct Installed {
    /// Where the model is now.
    pub dest: PathBuf,
    /// Whether an existing tree was replaced.
    pub replaced: bool,
    /// The version replaced, if the old tree had a receipt.
    pub previous_version: Option<u64>,
    /// Stale staging directories removed first.
    pub cleaned_stale: Vec<PathBuf>,
    /// Model-check findings on the installed files (reported, not fatal: the bundle is signed
    /// and `pack` already refused errors unless told otherwise).
    pub findings: Vec<Finding>,
}

/// Reads the receipt manifest of an installed tree without checking its signature.
pub fn read_receipt(dir: &Path) -> Option<Manifest> {
    let bytes = std::fs::read(dir.join(RECEIPT_DIR).join(manifest::MANIFEST_NAME)).ok()?;
    Manifest::parse(&bytes).ok()
}

/// Removes staging directories beside `dest` that airlock made and whose process is gone.
pub fn clean_stale(parent: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let rd = match std::fs::read_dir(parent) {
        Ok(rd) => rd,
        Err(e) => return Err(Error::io(parent, e)),
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(STAGING_PREFIX) {
            continue;
        }
        let path = e.path();
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) && lock::remove_if_stale(&path)? {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Bytes to reserve for a manifest's files on disk: contents plus a block per entry.
pub fn space_needed(m: &Manifest, receipt_bytes: u64) -> u64 {
    let entries = m
        .totals
        .files
        .saturating_add(m.totals.directories)
        .saturating_add(4);
    m.totals
        .file_bytes
        .saturating_add(entries.saturating_mul(4096))
        .saturating_add(receipt_bytes)
}

/// Bytes available to an unprivileged writer on the filesystem holding `dir`.
pub fn space_available(dir: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(dir).map_err(|e| Error::io(dir, e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

struct Staging {
    dir: PathBuf,
    lock: Option<DirLock>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        self.lock.take();
    }
}

fn random_hex() -> String {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the OS random source works");
    hex::encode(b)
}

/// Writes entries under the staging tree through directory handles.
struct StagingSink<'a> {
    root: OwnedFd,
    root_path: PathBuf,
    /// A few open directory handles; a model with thousands of directories must not need
    /// thousands of file descriptors.
    dirs: HashMap<String, OwnedFd>,
    /// Every directory created so far.
    known: Vec<String>,
    known_set: std::collections::HashSet<String>,
    current: Option<(File, String)>,
    syncer: crossbeam_channel::Sender<(File, String)>,
    flusher: &'a Flusher,
    since_flush: u64,
}

fn err_at(root: &Path, path: &str, e: rustix::io::Errno) -> Error {
    Error::io(root.join(path), e.into())
}

/// Directory handles kept open at once.
const DIR_CACHE: usize = 64;

/// Opens `path` below `root` one component at a time, never following a symlink.
fn open_below(root: &OwnedFd, path: &str) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(root, ".", flags, Mode::empty())?;
    for component in path.split('/') {
        fd = rustix::fs::openat(&fd, component, flags, Mode::empty())?;
    }
    Ok(fd)
}

impl StagingSink<'_> {
    fn parent_and_name<'p>(&mut self, path: &'p str) -> Result<(&OwnedFd, &'p str)> {
        let Some((parent, name)) = path.rsplit_once('/') else {
            return Ok((&self.root, path));
        };
        if !self.known_set.contains(parent) {
            return Err(Error::BadStream {
                volume: "tar stream".into(),
                reason: format!("entry {path:?} comes before its directory"),
            });
        }
        if !self.dirs.contains_key(parent) {
            if self.dirs.len() >= DIR_CACHE {
                self.dirs.clear();
            }
            let fd = open_below(&self.root, parent).map_err(|e| self.err(parent, e))?;
            self.dirs.insert(parent.to_string(), fd);
        }
        Ok((&self.dirs[parent], name))
    }

    fn err(&self, path: &str, e: rustix::io::Errno) -> Error {
        Error::io(self.root_path.join(path), e.into())
    }
}

impl EntrySink for StagingSink<'_> {
    fn dir(&mut self, path: &str) -> Result<()> {
        let root_path = self.root_path.clone();
        let (parent, name) = self.parent_and_name(path)?;
        rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755))
            .map_err(|e| err_at(&root_path, path, e))?;
        let fd = rustix::fs::openat(
            parent,
            name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err_at(&root_path, path, e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))
            .map_err(|e| err_at(&root_path, path, e))?;
        if self.dirs.len() >= DIR_CACHE {
            self.dirs.clear();
        }
        self.dirs.insert(path.to_string(), fd);
        self.known.push(path.to_string());
        self.known_set.insert(path.to_string());
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        let root_path = self.root_path.clone();
        let (parent, name) = self.parent_and_name(&file.path)?;
        let mode = if file.executable { 0o755 } else { 0o644 };
        let fd = rustix::fs::openat(
            parent,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| err_at(&root_path, &file.path, e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| err_at(&root_path, &file.path, e))?;
        self.current = Some((File::from(fd), file.path.clone()));
        self.since_flush = 0;
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        let (f, path) = self.current.as_mut().expect("begin_file came first");
        f.write_all(bytes)
            .map_err(|e| Error::io(self.root_path.join(&*path), e))?;
        self.since_flush += bytes.len() as u64;
        if self.since_flush >= FLUSH_EVERY {
            self.flusher.flush(f, self.root_path.join(&*path));
            self.since_flush = 0;
        }
        Ok(())
    }

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
        if let Some(done) = self.current.take() {
            // Synced on another thread while the next file streams in.
            let _ = self.syncer.send(done);
        }
        Ok(())
    }
}

fn sync_dir(fd: &impl AsFd, path: &Path) -> Result<()> {
    rustix::fs::fsync(fd).map_err(|e| Error::io(path, e.into()))
}

/// Unpacks the verified bundle into `opts.dest`.
pub fn unpack(opened: &Opened, opts: &UnpackOptions, progress: &dyn Progress) -> Result<Installed> {
    let m = &opened.manifest;
    let dest = &opts.dest;
    let parent = parent_dir(dest);
    let Some(dest_name) = dest.file_name().and_then(|n| n.to_str()) else {
        return Err(Error::Usage(format!(
            "{}: not a usable destination name",
            dest.display()
        )));
    };
    let parent_meta = std::fs::metadata(&parent).map_err(|e| Error::io(&parent, e))?;
    if !parent_meta.is_dir() {
        return Err(Error::Usage(format!(
            "{} is not a directory",
            parent.display()
        )));
    }
    let existing = std::fs::symlink_metadata(dest).ok();
    let mut previous_version = None;
    if let Some(meta) = &existing {
        if !opts.replace {
            return Err(Error::Usage(format!(
                "{} already exists; pass --replace to swap it for this bundle atomically",
                dest.display()
            )));
        }
        if !meta.is_dir() {
            return Err(Error::Usage(format!(
                "{} exists and is not a directory; refusing to replace it",
                dest.display()
            )));
        }
        if let Some(old) = read_receipt(dest) {
            previous_version = Some(old.version);
            // Versions order releases of one model; a bundle of another name replacing it is
            // the operator's explicit --replace, not a rollback.
            if old.name == m.name && old.version > m.version && !opts.allow_downgrade {
                return Err(Error::Downgrade {
                    path: dest.clone(),
                    name: old.name,
                    installed: old.version,
                    offered: m.version,
                });
            }
        }
    }
    let cleaned_stale = clean_stale(&parent)?;

    let receipt_bytes = (opened.manifest_bytes.len() + opened.signature_text.len()) as u64;
    let needed = space_needed(m, receipt_bytes);
    let available = space_available(&parent)?;
    if opts.check_space && needed > available {
        return Err(Error::NoSpace {
            path: parent.clone(),
            needed,
            available,
            filesystem: crate::fsinfo::mount_of(&parent),
        });
    }

    let staging_dir = parent.join(format!("{STAGING_PREFIX}{dest_name}-{}", random_hex()));
    std::fs::create_dir(&staging_dir).map_err(|e| Error::io(&staging_dir, e))?;
    let mut staging = Staging {
        dir: staging_dir.clone(),
        lock: None,
    };
    staging.lock = Some(DirLock::create(&staging_dir)?);
    let tree = staging_dir.join("tree");
    std::fs::create_dir(&tree).map_err(|e| Error::io(&tree, e))?;
    let root = rustix::fs::open(
        &tree,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| Error::io(&tree, e.into()))?;
    rustix::fs::fchmod(&root, Mode::from_raw_mode(0o755))
        .map_err(|e| Error::io(&tree, e.into()))?;

    let (sync_tx, sync_rx) = crossbeam_channel::bounded::<(File, String)>(64);
    let tree_for_sync = tree.clone();
    let syncer = std::thread::spawn(move || -> Result<()> {
        let mut first_error = None;
        for (f, path) in sync_rx {
            if let Err(e) = f.sync_all() {
                first_error.get_or_insert(Error::io(tree_for_sync.join(path), e));
            }
        }
        first_error.map_or(Ok(()), Err)
    });
    let flusher = Flusher::new();
    let mut sink = StagingSink {
        root,
        root_path: tree.clone(),
        dirs: HashMap::new(),
        known: Vec::new(),
        known_set: Default::default(),
        current: None,
        syncer: sync_tx,
        flusher: &flusher,
        since_flush: 0,
    };
    let streamed = read::stream(opened, ReadMode::Strict, &mut sink, progress);
    let StagingSink {
        root,
        dirs,
        known,
        syncer: sync_tx,
        current,
        ..
    } = sink;
    drop(dirs);
    drop(current);
    drop(sync_tx);
    let synced = syncer.join().expect("sync thread panicked");
    let flushed = flusher.finish();
    streamed?;
    synced?;
    if let Some((path, e)) = flushed {
        return Err(Error::io(path, e));
    }

    // Receipt: the signed manifest and its signature, so `check` can re-verify later.
    rustix::fs::mkdirat(&root, RECEIPT_DIR, Mode::from_raw_mode(0o755))
        .map_err(|e| Error::io(tree.join(RECEIPT_DIR), e.into()))?;
    let receipt = tree.join(RECEIPT_DIR);
    crate::bundle::write::write_synced(
        &receipt.join(manifest::MANIFEST_NAME),
        &opened.manifest_bytes,
    )?;
    crate::bundle::write::write_synced(
        &receipt.join(manifest::SIGNATURE_NAME),
        opened.signature_text.as_bytes(),
    )?;
    let receipt_fd = File::open(&receipt).map_err(|e| Error::io(&receipt, e))?;
    sync_dir(&receipt_fd, &receipt)?;
    for path in &known {
        let fd = open_below(&root, path).map_err(|e| Error::io(tree.join(path), e.into()))?;
        sync_dir(&fd, &tree.join(path))?;
    }
    sync_dir(&root, &tree)?;
    drop(root);

    // The model-format checks on exactly the bytes about to become visible.
    let findings: Vec<Finding> = crate::inspect::check_tree(&tree)
        .map_err(|e| Error::io(&tree, e))?
        .into_iter()
        .filter(|f| f.path != RECEIPT_DIR && !f.path.starts_with(".airlock/"))
        .collect();

    let replaced = existing.is_some();
    if replaced {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &tree,
            rustix::fs::CWD,
            dest,
            RenameFlags::EXCHANGE,
        )
        .map_err(|e| Error::io(dest, e.into()))?;
    } else {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &tree,
            rustix::fs::CWD,
            dest,
            RenameFlags::NOREPLACE,
        )
        .map_err(|e| Error::io(dest, e.into()))?;
    }
    let parent_fd = File::open(&parent).map_err(|e| Error::io(&parent, e))?;
    sync_dir(&parent_fd, &parent)?;
    // The old tree (after an exchange) sits in the staging directory; removing it is cleanup,
    // and a crash here leaves a stale staging directory the next run removes.
    drop(staging);
    Ok(Installed {
        dest: dest.clone(),
        replaced,
        previous_version,
        cleaned_stale,
        findings,
    })
}
