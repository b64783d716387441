//! Installing a verified bundle into a directory: staging beside the destination, fsync, one
//! atomic rename, receipt.
//!
//! The destination never holds a partial model. Entries are written into a private, locked
//! work directory ([`crate::staging::Staging`]) beside the destination, on its own filesystem,
//! with `openat`-style calls relative to directory handles that airlock created itself
//! (`O_EXCL | O_NOFOLLOW`), so no entry can redirect a later write and no path ever grows past
//! one component per call (entries near the 4096-byte path limit install too). Every mode is
//! set explicitly (0644/0755 files, 0755 directories, the receipt per docs/FORMAT.md
//! section 10), whatever the umask. Only after every entry and volume has matched the
//! manifest, every file and directory is synced and the receipt is written does one `rename`
//! (or `renameat2(RENAME_EXCHANGE)` for `--replace`) make the new tree visible.
//!
//! `--replace` replaces only what airlock installed: a directory whose receipt verifies
//! against the trust set and names the same bundle, holding no mount point, owned by this
//! user. It keeps the old directory's mode and owner. Anything else is refused before a byte
//! is written, saying what is there and what to do.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::bundle::read::{self, EntrySink, Mode as ReadMode, Opened};
use crate::error::{Error, Result};
use crate::fsio::{self, parent_dir};
use crate::inspect::Finding;
use crate::manifest::{FileEntry, Manifest};
use crate::paths::RECEIPT_DIR;
use crate::progress::Progress;
use crate::receipt;
use crate::staging::{self, Publish, Staging, SyncThread};
use crate::writeback::{FLUSH_EVERY, Flusher};

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
    /// The trust set the bundle was verified with; with `replace`, the old tree's receipt must
    /// verify against it too.
    pub trust: crate::trust::Policy,
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
    /// Cleanup and model checks.
    #[serde(flatten)]
    pub notes: InstallNotes,
}

/// What both installers report besides their result.
#[derive(Debug, Default, serde::Serialize)]
pub struct InstallNotes {
    /// Stale staging directories removed first.
    pub cleaned_stale: Vec<PathBuf>,
    /// Staging directories that look abandoned but could not be removed, and why.
    pub stale_skipped: Vec<(PathBuf, String)>,
    /// Model-check findings on the installed files (reported, not fatal: the bundle is signed
    /// and `pack` already refused errors unless told otherwise).
    pub findings: Vec<Finding>,
    /// Files the model checks could not reach (a path too long for path-based reads); their
    /// bytes were verified against the manifest all the same.
    pub unchecked: Vec<String>,
    /// Data volumes that were damaged and rebuilt from parity as they were read (FORMAT.md
    /// section 17); the installed bytes match the signed digests all the same.
    pub repaired_volumes: Vec<String>,
}

impl InstallNotes {
    /// The notes of an install that cleaned up `cleanup` and checked the staged files under
    /// `root` (at `prefix` + each manifest path).
    pub fn new(cleanup: staging::Cleanup, root: &Path, prefix: &str, m: &Manifest) -> Result<Self> {
        let (findings, unchecked) = check_staged(root, prefix, m)?;
        Ok(InstallNotes {
            cleaned_stale: cleanup.removed,
            stale_skipped: cleanup.skipped,
            findings,
            unchecked,
            repaired_volumes: Vec::new(),
        })
    }
}

/// The model-format checks on the staged files under `root` (each at `PREFIX` + its manifest
/// path): exactly the bytes about to become visible. Returns the findings (paths without the
/// prefix) and the files too deep for the path-based checks to open.
fn check_staged(root: &Path, prefix: &str, m: &Manifest) -> Result<(Vec<Finding>, Vec<String>)> {
    let mut findings = Vec::new();
    let mut unchecked = Vec::new();
    for f in &m.files {
        let rel = format!("{prefix}{}", f.path);
        match crate::inspect::check_file(root, &rel) {
            Ok(found) => findings.extend(found.into_iter().map(|mut finding| {
                if let Some(p) = finding.path.strip_prefix(prefix) {
                    finding.path = p.to_string();
                }
                finding
            })),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidFilename => {
                unchecked.push(f.path.clone())
            }
            Err(e) => return Err(Error::io(root, e)),
        }
    }
    Ok((findings, unchecked))
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
    /// Every file created so far (a `fill` that skipped one is caught before publishing).
    files: std::collections::HashSet<String>,
    syncer: crossbeam_channel::Sender<(File, PathBuf)>,
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
        let fd = rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(receipt::DIR_MODE))
            .and_then(|()| fsio::open_dir_at(parent, name))
            .and_then(|fd| {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(receipt::DIR_MODE)).map(|()| fd)
            })
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
        self.files.insert(file.path.clone());
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

    fn clone_file(&mut self, file: &FileEntry, src: &File) -> Result<Option<String>> {
        let root_path = self.root_path.clone();
        let (parent, name) = self.parent_and_name(&file.path)?;
        let mode = if file.executable { 0o755 } else { 0o644 };
        let fd = rustix::fs::openat(
            parent,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| err_at(&root_path, &file.path, e))?;
        if rustix::fs::ioctl_ficlone(&fd, src).is_err() {
            // No reflinks here (another filesystem, or none at all): the caller copies.
            rustix::fs::unlinkat(parent, name, rustix::fs::AtFlags::empty())
                .map_err(|e| err_at(&root_path, &file.path, e))?;
            return Ok(None);
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| err_at(&root_path, &file.path, e))?;
        let f = File::from(fd);
        let digest =
            crate::delta::hash_file(&f).map_err(|e| Error::io(root_path.join(&file.path), e))?;
        self.current = Some((f, file.path.clone()));
        self.files.insert(file.path.clone());
        Ok(Some(digest))
    }

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
        if let Some(done) = self.current.take() {
            // Synced on another thread while the next file streams in.
            let _ = self.syncer.send((done.0, self.root_path.join(done.1)));
        }
        Ok(())
    }
}

/// What `--replace` keeps of the directory it replaces.
struct Keep {
    mode: u32,
    uid: u32,
    gid: u32,
}

fn refuse(dest: &Path, what: impl Into<String>, todo: impl Into<String>) -> Error {
    Error::NotReplaceable {
        path: dest.to_path_buf(),
        what: what.into(),
        todo: todo.into(),
    }
}

/// Decides whether `dest` may be replaced by `opened`: only an airlock install of the same
/// bundle name, proven by a receipt that verifies against `trust`, holding no mount point and
/// owned by this user. Returns the old manifest and what to keep.
fn replaceable(
    dest: &Path,
    meta: &std::fs::Metadata,
    opened: &Opened,
    trust: &crate::trust::Policy,
) -> Result<(Manifest, Keep)> {
    let move_aside =
        "if that directory really is to go, move or remove it yourself, then unpack again";
    if meta.file_type().is_symlink() {
        return Err(refuse(
            dest,
            "is a symbolic link",
            "give the real directory as --dest, or remove the link yourself",
        ));
    }
    if !meta.is_dir() {
        return Err(refuse(
            dest,
            "exists and is not a directory",
            format!("check --dest; {move_aside}"),
        ));
    }
    let canon_dest = std::fs::canonicalize(dest).map_err(|e| Error::io(dest, e))?;
    if let Ok(bundle) = std::fs::canonicalize(&opened.dir)
        && bundle.starts_with(&canon_dest)
    {
        return Err(refuse(
            dest,
            if bundle == canon_dest {
                "is the bundle being unpacked".to_string()
            } else {
                format!("holds the bundle being unpacked ({})", opened.dir.display())
            },
            "give the model's own install directory as --dest, outside the bundle",
        ));
    }
    if !receipt::exists(dest) {
        return Err(refuse(
            dest,
            format!(
                "holds no airlock receipt ({RECEIPT_DIR}/manifest.json), so it is not a model airlock installed: it may be a home directory, a folder holding other models, or files put there by hand"
            ),
            format!("check --dest (did it lose the model's name?); {move_aside}"),
        ));
    }
    let old = receipt::open(dest, Some(trust)).map_err(|e| {
        refuse(
            dest,
            format!("its receipt does not prove an airlock install ({e})"),
            format!(
                "see `airlock check {}` with your trust set; {move_aside}",
                dest.display()
            ),
        )
    })?;
    let m = &opened.manifest;
    if old.manifest.name != m.name {
        return Err(refuse(
            dest,
            format!(
                "holds the airlock install of {:?} version {}, not of {:?}",
                old.manifest.name, old.manifest.version, m.name
            ),
            format!(
                "give {:?} its own directory as --dest (each model gets one); {move_aside}",
                m.name
            ),
        ));
    }
    match staging::find_mount_inside(dest) {
        Ok(None) => {}
        Ok(Some(mount)) => {
            return Err(refuse(
                dest,
                format!("contains the mount point {}", mount.display()),
                "unmount it first (airlock never removes anything across a mount point), then unpack again",
            ));
        }
        Err(e) => return Err(Error::io(dest, e)),
    }
    let me = rustix::process::geteuid().as_raw();
    if me != 0 && meta.uid() != me {
        return Err(refuse(
            dest,
            format!("belongs to user {}, not to this user", meta.uid()),
            "run the unpack as the directory's owner",
        ));
    }
    Ok((
        old.manifest,
        Keep {
            // Setuid means nothing on a directory; the rest is the operator's choice.
            mode: meta.permissions().mode() & 0o3777,
            uid: meta.uid(),
            gid: meta.gid(),
        },
    ))
}

/// Unpacks the verified bundle into `opts.dest`.
pub fn unpack(opened: &Opened, opts: &UnpackOptions, progress: &dyn Progress) -> Result<Installed> {
    if opened.manifest.base.is_some() {
        // A delta's stream holds patches, not the tree (docs/FORMAT.md section 16).
        return crate::delta::apply::unpack(opened, opts, progress);
    }
    let mut repaired = Vec::new();
    let mut installed = unpack_with(opened, opts, &mut |sink| {
        read::stream(opened, ReadMode::Strict, sink, progress).map(|r| repaired = r.repaired)
    })?;
    installed.notes.repaired_volumes = repaired;
    Ok(installed)
}

/// Installs `opened.manifest`'s tree into `opts.dest` with every rule of [`unpack`] (the
/// `--replace` checks, free space, private staging, explicit modes, fsync, receipt, one atomic
/// rename), taking the content from `fill` instead of the bundle's stream.
///
/// `fill` feeds the staging tree through the [`EntrySink`] it is given, in bundle order
/// (a directory before its entries). The sink writes what it is told and checks nothing about
/// content: `fill` MUST check every file's size and SHA-256 against the signed manifest before
/// returning `Ok` (as `bundle::stream` does), and return an error at the first mismatch; then
/// nothing is installed. After `fill`, the staged tree is checked against the manifest's list
/// of files and directories and the model checks run, as for a bundle.
pub fn unpack_with(
    opened: &Opened,
    opts: &UnpackOptions,
    fill: &mut dyn FnMut(&mut dyn EntrySink) -> Result<()>,
) -> Result<Installed> {
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
    let mut keep = None;
    if let Some(meta) = &existing {
        if !opts.replace {
            return Err(Error::Usage(format!(
                "{} already exists; pass --replace to swap it for this bundle atomically",
                dest.display()
            )));
        }
        let (old, kept) = replaceable(dest, meta, opened, &opts.trust)?;
        previous_version = Some(old.version);
        if old.version > m.version && !opts.allow_downgrade {
            return Err(Error::Downgrade {
                path: dest.clone(),
                name: old.name,
                installed: old.version,
                offered: m.version,
            });
        }
        keep = Some(kept);
    }
    let cleanup = staging::clean_stale(&parent)?;

    let receipt_bytes = receipt::size(
        &opened.manifest_bytes,
        &opened.signature_text,
        &opened.trust,
    );
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

    let staging = Staging::create(&parent, dest_name)?;
    let root = staging.mkdir("tree", receipt::DIR_MODE)?;
    let tree = staging.path().join("tree");

    let syncer = SyncThread::new();
    let flusher = Flusher::new();
    let mut sink = StagingSink {
        root,
        root_path: tree.clone(),
        dirs: HashMap::new(),
        known: Vec::new(),
        known_set: Default::default(),
        current: None,
        files: Default::default(),
        syncer: syncer.sender(),
        flusher: &flusher,
        since_flush: 0,
    };
    let streamed = fill(&mut sink);
    let StagingSink {
        root,
        dirs,
        known,
        known_set,
        files,
        syncer: sync_tx,
        current,
        ..
    } = sink;
    drop(dirs);
    drop(current);
    drop(sync_tx);
    let synced = syncer.finish();
    let flushed = flusher.finish();
    streamed?;
    synced?;
    // Whatever filled the tree, it holds exactly the signed list of files and directories.
    let missing = m
        .files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| !files.contains(*p))
        .chain(
            m.directories
                .iter()
                .map(String::as_str)
                .filter(|d| !known_set.contains(*d)),
        )
        .next();
    if let Some(path) = missing {
        return Err(Error::BadStream {
            volume: "source".into(),
            reason: format!("{path:?} is listed in the manifest but was not installed"),
        });
    }
    if files.len() != m.files.len() || known_set.len() != m.directories.len() {
        return Err(Error::BadStream {
            volume: "source".into(),
            reason: "the installed tree holds entries the manifest does not list".into(),
        });
    }
    if let Some((path, e)) = flushed {
        return Err(Error::io(path, e));
    }

    // Receipt: the signed manifest and its signature, so `check` can re-verify later.
    receipt::write(
        &root,
        &tree,
        &opened.manifest_bytes,
        &opened.signature_text,
        &opened.trust,
    )?;
    for path in &known {
        let fd = open_below(&root, path).map_err(|e| Error::io(tree.join(path), e.into()))?;
        fsio::sync_dir_fd(&fd, &tree.join(path))?;
    }
    if let Some(k) = &keep {
        rustix::fs::fchmod(&root, Mode::from_raw_mode(k.mode))
            .map_err(|e| Error::io(&tree, e.into()))?;
        let st = rustix::fs::fstat(&root).map_err(|e| Error::io(&tree, e.into()))?;
        if st.st_uid != k.uid || st.st_gid != k.gid {
            rustix::fs::fchown(
                &root,
                Some(rustix::fs::Uid::from_raw(k.uid)),
                Some(rustix::fs::Gid::from_raw(k.gid)),
            )
            .map_err(|e| Error::io(&tree, e.into()))?;
        }
    }
    fsio::sync_dir_fd(&root, &tree)?;
    drop(root);

    let notes = InstallNotes::new(cleanup, &tree, "", m)?;

    let replaced = existing.is_some();
    staging.publish(
        "tree",
        dest,
        if replaced {
            Publish::Exchange
        } else {
            Publish::NoReplace
        },
    )?;
    // The old tree (after an exchange) sits in the work directory; removing it is cleanup,
    // and a crash here leaves a stale work directory the next run removes.
    drop(staging);
    Ok(Installed {
        dest: dest.clone(),
        replaced,
        previous_version,
        notes,
    })
}
