//! The directory target: installing into `--dest` with staging beside it, fsync, one atomic
//! rename, and a receipt; and the installed base a delta applies onto.
//!
//! The destination never holds a partial model. Entries are written into a private, locked
//! work directory ([`crate::staging::Staging`]) beside the destination, on its own filesystem,
//! with `openat`-style calls relative to directory handles that airlock created itself
//! (`O_EXCL | O_NOFOLLOW`, through [`crate::fsio`]), so no entry can redirect a later write and
//! no path ever grows past one component per call (entries near the 4096-byte path limit
//! install too). Every mode is set explicitly (0644/0755 files, 0755 directories, the receipt
//! per docs/FORMAT.md section 10), whatever the umask. Only after every entry has matched the
//! manifest, every file and directory is synced and the receipt is written does one `rename`
//! (or `renameat2(RENAME_EXCHANGE)` for `--replace`) make the new tree visible.
//!
//! `--replace` replaces only what airlock installed: a directory whose receipt verifies
//! against the trust set and names the same bundle, holding no mount point, owned by this
//! user. It keeps the old directory's mode and owner. Anything else is refused before a byte
//! is written, saying what is there and what to do.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::Mode;
use sha2::{Digest, Sha256};

use super::notes::{self, InstallNotes};
use super::select::{Part, Select};
use crate::bundle::open::{Opened, Origin};
use crate::entries::Base;
use crate::entries::EntrySink;
use crate::error::{Error, Result};
use crate::fsio::{self, parent_dir};
use crate::manifest::{FileEntry, Manifest};
use crate::paths::RECEIPT_DIR;
use crate::pipeline::{Fed, Target};
use crate::progress::Progress;
use crate::receipt;
use crate::staging::{self, Cleanup, Publish, Staging, SyncThread};
use crate::trust::Policy;
use crate::writeback::{FLUSH_EVERY, Flusher};

/// Options for an install into a directory.
#[derive(Clone, Debug)]
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
    /// The trust policy the bundle was verified with; with `replace`, the old tree's receipt
    /// must verify against it too (and a delta's base receipt).
    pub trust: Policy,
    /// The mode of missing parents of `dest` that are created (`--parent-mode`, checked with
    /// [`super::parents::check_mode`]); `None`: the nearest existing ancestor's, without write
    /// for group and others.
    pub parent_mode: Option<u32>,
    /// Adopt the work directory an interrupted install of the same bundle into the same
    /// destination left, keeping the files it proves (on by default; `--no-resume` starts
    /// clean, removing it).
    pub resume: bool,
    /// Of a bundle of several repositories, install only these (`--repo`, names as
    /// [`Manifest::choose_repos`] takes them): one goes into `dest` itself, several each
    /// into `dest/FOLDER/`. Empty: the whole bundle.
    pub repos: Vec<String>,
}

/// What an install into a directory did.
#[derive(Debug, serde::Serialize)]
pub struct Installed {
    /// Where the model is now.
    pub dest: PathBuf,
    /// Whether an existing tree was replaced.
    pub replaced: bool,
    /// The version replaced, if the old tree had a receipt.
    pub previous_version: Option<u64>,
    /// Of a bundle of several repositories, the ones installed (`--repo`), by folder, as
    /// `.airlock/part.json` names them; empty: the whole bundle.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub part: Vec<String>,
    /// Cleanup and model checks.
    #[serde(flatten)]
    pub notes: InstallNotes,
}

/// Installs into a directory (module documentation).
pub struct DirTarget {
    opts: UnpackOptions,
    begun: Option<Begun>,
}

/// What [`Target::begin`] set up. Field order is drop order: the sink (and its senders) goes
/// before the sync thread, the staging directory (removed on drop) last.
struct Begun {
    sink: Select<StagingSink>,
    /// The part of a bundle of several installed (`--repo`): its folders and its manifest.
    part: Option<(Vec<String>, Manifest)>,
    syncer: SyncThread,
    tree: PathBuf,
    cleanup: Cleanup,
    replaced: bool,
    previous_version: Option<u64>,
    keep: Option<Keep>,
    /// What an adopted work directory held, proven.
    kept: Option<crate::pipeline::Kept>,
    staging: Staging,
    /// Missing parents of the destination that `begin` created (removed after the staging
    /// directory unless the install completes).
    made: Option<super::parents::Made>,
}

impl DirTarget {
    /// A target installing with `opts`.
    pub fn new(opts: UnpackOptions) -> Self {
        DirTarget { opts, begun: None }
    }
}

impl Target for DirTarget {
    type Done = Installed;

    fn begin(&mut self, opened: &Opened, progress: &dyn Progress) -> Result<()> {
        let opts = &self.opts;
        let dest = &opts.dest;
        // Part of a bundle of several repositories: what is installed is that part's manifest.
        let part = if opts.repos.is_empty() {
            None
        } else {
            let m = &opened.manifest;
            let chosen = m
                .choose_repos(&opts.repos)
                .map_err(|e| Error::Usage(e.to_string()))?;
            let folders: Vec<String> = chosen.iter().map(|&i| m.repos[i].path.clone()).collect();
            let view = m.select_repos(&chosen).expect("chosen from the manifest");
            Some((folders, view))
        };
        let m = part.as_ref().map_or(&opened.manifest, |(_, v)| v);
        let parent = parent_dir(dest);
        let Some(dest_name) = dest.file_name().and_then(|n| n.to_str()) else {
            return Err(Error::Usage(format!(
                "{}: not a usable destination name",
                dest.display()
            )));
        };
        // A parent that does not exist yet is created once every check has passed.
        let missing = super::parents::Missing::find(&parent)?;
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
        // Every install can be resumed. A delta's marker names the delta's manifest, which
        // names its base by digest: the files kept are the target's, proven the same way, and
        // the delta stage skips the copies and patches of the files held. Part of a bundle of
        // several (`--repo`) is resumed only by a rerun that chooses the same repositories: the
        // marker names them, and the files kept are proven against that part's manifest (its
        // paths as the part lays them down).
        let marker = staging::Marker {
            manifest_sha256: opened.manifest_sha256.clone(),
            dest: dest_name.to_string(),
            target: "dir".into(),
            revision: None,
            repos: part.as_ref().map(|(folders, _)| folders.clone()),
        };
        let adopted = match &missing {
            None if opts.resume => Staging::adopt(&parent, &marker)?,
            _ => None,
        };
        let cleanup = match &missing {
            None => staging::clean_stale_for(&parent, Some(dest_name))?,
            Some(_) => Cleanup::default(),
        };
        let (mut staging, root, kept) = match adopted {
            Some(mut staging) => {
                let proven = (|| {
                    let root = match fsio::open_dir_at(staging.fd(), "tree") {
                        Ok(fd) => fd,
                        Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => {
                            staging.mkdir("tree", receipt::DIR_MODE)?
                        }
                        Err(e) => return Err(Error::io(staging.path().join("tree"), e.into())),
                    };
                    let tree = staging.path().join("tree");
                    let kept = super::resume::prove(&root, &tree, m, file_mode, progress)?;
                    Ok((root, kept))
                })();
                match proven {
                    Ok((root, kept)) => (Some(staging), Some(root), Some(kept)),
                    Err(e) => {
                        // What was staged stays for the next rerun (an interrupt while it is
                        // proven keeps it too).
                        staging.keep_for_rerun();
                        return Err(e);
                    }
                }
            }
            None => (None, None, None),
        };
        let receipt_bytes = receipt::size(
            &opened.manifest_bytes,
            &opened.signature_text,
            &opened.trust,
        );
        if opts.check_space {
            let on = missing.as_ref().map_or(&parent, |mi| &mi.existing);
            let held = kept.as_ref().map_or(0, |k| k.bytes);
            let checked = notes::check_space(
                on,
                notes::space_needed(m, receipt_bytes).saturating_sub(held),
            );
            if let (Err(_), Some(s)) = (&checked, staging.as_mut()) {
                s.keep_for_rerun();
            }
            checked?;
        }
        let made = missing
            .map(|mi| mi.create(mi.mode(opts.parent_mode)))
            .transpose()?;
        let (staging, root) = match (staging, root) {
            (Some(s), Some(r)) => (s, r),
            _ => {
                let staging = Staging::create(&parent, dest_name)?;
                staging.mark_resumable(&marker)?;
                let root = staging.mkdir("tree", receipt::DIR_MODE)?;
                (staging, root)
            }
        };
        let tree = staging.path().join("tree");
        let held = kept.as_ref();
        let syncer = SyncThread::new();
        let staging_sink = StagingSink {
            root,
            root_path: tree.clone(),
            dirs: HashMap::new(),
            known: held.map(|k| k.dirs.clone()).unwrap_or_default(),
            held_dirs: held.map(|k| k.dirs.clone()).unwrap_or_default(),
            held_files: held.map(|k| k.files.clone()).unwrap_or_default(),
            skipping: false,
            current: None,
            syncer: syncer.sender(),
            // Nothing reads the installed files back but the model checks' few headers: their
            // pages leave the page cache once written (`Flusher::dropping`).
            flusher: Flusher::dropping(),
            since_flush: 0,
        };
        let sink = Select::new(
            staging_sink,
            part.as_ref().map(|(folders, _)| Part {
                folders: folders.clone(),
                strip: folders.len() == 1,
            }),
        );
        self.begun = Some(Begun {
            sink,
            part,
            syncer,
            tree,
            cleanup,
            replaced: existing.is_some(),
            previous_version,
            keep,
            kept,
            staging,
            made,
        });
        Ok(())
    }

    fn kept(&self) -> Option<&crate::pipeline::Kept> {
        self.begun.as_ref().and_then(|b| b.kept.as_ref())
    }

    fn keep_for_rerun(&mut self, e: &Error) {
        if let Some(b) = self.begun.as_mut()
            && crate::pipeline::keeps_for_rerun(e, &b.staging.path())
        {
            b.staging.keep_for_rerun();
        }
    }

    type Base = InstalledBase;

    fn base(&mut self, opened: &Opened) -> Result<InstalledBase> {
        InstalledBase::open(&self.opts.dest, &self.opts.trust, opened)
    }

    fn sink(&mut self) -> &mut dyn EntrySink {
        &mut self.begun.as_mut().expect("begin came first").sink
    }

    fn commit(mut self, opened: &Opened, fed: Fed, _progress: &dyn Progress) -> Result<Installed> {
        let Begun {
            sink,
            part,
            syncer,
            tree,
            cleanup,
            replaced,
            previous_version,
            keep,
            kept,
            staging,
            made,
        } = self.begun.take().expect("begin came first");
        let m = part.as_ref().map_or(&opened.manifest, |(_, v)| v);
        let StagingSink {
            root,
            dirs,
            current,
            syncer: sync_tx,
            flusher,
            ..
        } = sink.inner;
        drop((dirs, current, sync_tx));
        syncer.finish()?;
        if let Some((path, e)) = flusher.finish() {
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
        if let Some((folders, _)) = &part {
            receipt::write_part(&root, &tree, folders)?;
        }
        // The OMS signature the bundle carries, where model_signing looks for it (not beside
        // part of a bundle of several: it signs the whole tree).
        if part.is_none() {
            crate::oms::place(&root, &tree, opened.oms.as_ref())?;
        }
        for d in &m.directories {
            let fd = fsio::open_below(&root, d).map_err(|e| Error::io(tree.join(d), e.into()))?;
            crate::durable::sync_dir_fd(&fd, &tree.join(d))?;
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
        crate::durable::sync_dir_fd(&root, &tree)?;
        drop(root);

        let mut notes = InstallNotes::new(cleanup, &tree, "", m)?;
        notes.repaired_volumes = fed.repaired_volumes;
        notes.resumed = super::resume::report(kept.as_ref(), fed.started_at);
        // From here the work directory holds a tree about to move (and, after an exchange,
        // the old one): nothing to resume.
        staging.unmark()?;
        let dest = &self.opts.dest;
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
        if let Some((created, mode)) = made.map(super::parents::Made::keep) {
            notes.created_parents = created;
            notes.created_parents_mode = Some(mode);
        }
        Ok(Installed {
            dest: dest.clone(),
            replaced,
            previous_version,
            part: part.map(|(folders, _)| folders).unwrap_or_default(),
            notes,
        })
    }
}

/// Writes entries under the staging tree through directory handles.
struct StagingSink {
    root: OwnedFd,
    root_path: PathBuf,
    /// A few open directory handles; a model with thousands of directories must not need
    /// thousands of file descriptors.
    dirs: HashMap<String, OwnedFd>,
    /// Every directory created so far.
    known: HashSet<String>,
    /// Directories and files an adopted work directory already holds, proven: a directory is
    /// opened rather than made, a file's bytes (if the stream carries them anyway) dropped.
    held_dirs: HashSet<String>,
    held_files: HashSet<String>,
    /// The current file is held: its bytes are dropped.
    skipping: bool,
    current: Option<(File, String)>,
    syncer: crossbeam_channel::Sender<(File, PathBuf)>,
    flusher: Flusher,
    since_flush: u64,
}

/// The mode an installed file gets.
fn file_mode(file: &FileEntry) -> u32 {
    if file.executable { 0o755 } else { 0o644 }
}

fn err_at(root: &Path, path: &str, e: impl Into<std::io::Error>) -> Error {
    Error::io(root.join(path), e.into())
}

/// Directory handles kept open at once.
const DIR_CACHE: usize = 64;

impl StagingSink {
    fn parent_and_name<'p>(&mut self, path: &'p str) -> Result<(&OwnedFd, &'p str)> {
        let Some((parent, name)) = path.rsplit_once('/') else {
            return Ok((&self.root, path));
        };
        if !self.known.contains(parent) {
            return Err(Error::BadStream {
                volume: "tar stream".into(),
                reason: format!("entry {path:?} comes before its directory"),
            });
        }
        if !self.dirs.contains_key(parent) {
            if self.dirs.len() >= DIR_CACHE {
                self.dirs.clear();
            }
            let fd = fsio::open_below(&self.root, parent)
                .map_err(|e| err_at(&self.root_path, parent, e))?;
            self.dirs.insert(parent.to_string(), fd);
        }
        Ok((&self.dirs[parent], name))
    }

    fn create(&mut self, file: &FileEntry, read: bool) -> Result<File> {
        let root_path = self.root_path.clone();
        let (parent, name) = self.parent_and_name(&file.path)?;
        fsio::create_at(parent, name, file_mode(file), read)
            .map_err(|e| err_at(&root_path, &file.path, e))
    }
}

impl EntrySink for StagingSink {
    fn dir(&mut self, path: &str) -> Result<()> {
        if self.held_dirs.contains(path) {
            self.known.insert(path.to_string());
            return Ok(());
        }
        let root_path = self.root_path.clone();
        let (parent, name) = self.parent_and_name(path)?;
        let fd = rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(receipt::DIR_MODE))
            .map_err(std::io::Error::from)
            .and_then(|()| fsio::open_dir_at(parent, name).map_err(std::io::Error::from))
            .and_then(|fd| {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(receipt::DIR_MODE))
                    .map(|()| fd)
                    .map_err(std::io::Error::from)
            })
            .map_err(|e| err_at(&root_path, path, e))?;
        if self.dirs.len() >= DIR_CACHE {
            self.dirs.clear();
        }
        self.dirs.insert(path.to_string(), fd);
        self.known.insert(path.to_string());
        Ok(())
    }

    fn holds(&mut self, file: &FileEntry) -> Result<bool> {
        // A file an adopted work directory holds, proven: not read, fetched, copied or patched.
        Ok(self.held_files.contains(&file.path))
    }

    fn holds_dir(&mut self, path: &str) -> Result<bool> {
        Ok(self.held_dirs.contains(path))
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        if self.held_files.contains(&file.path) {
            self.skipping = true;
            return Ok(());
        }
        let f = self.create(file, false)?;
        self.current = Some((f, file.path.clone()));
        self.since_flush = 0;
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        if self.skipping {
            return Ok(());
        }
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

    fn clone_from(&mut self, file: &FileEntry, src: &File) -> Result<Option<File>> {
        let f = self.create(file, true)?;
        if rustix::fs::ioctl_ficlone(&f, src).is_err() {
            // No reflinks here (another filesystem, or none at all): the caller copies.
            let root_path = self.root_path.clone();
            let (parent, name) = self.parent_and_name(&file.path)?;
            rustix::fs::unlinkat(parent, name, rustix::fs::AtFlags::empty())
                .map_err(|e| err_at(&root_path, &file.path, e))?;
            return Ok(None);
        }
        let readback = f
            .try_clone()
            .map_err(|e| Error::io(self.root_path.join(&file.path), e))?;
        self.current = Some((f, file.path.clone()));
        Ok(Some(readback))
    }

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
        self.skipping = false;
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

/// The refusal of a `--replace` (or a delta base) that is not airlock's install to replace.
pub fn refuse(dest: &Path, what: impl Into<String>, todo: impl Into<String>) -> Error {
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
    trust: &Policy,
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
    if let Origin::Dir(dir) = &opened.origin
        && let Ok(bundle) = std::fs::canonicalize(dir)
        && bundle.starts_with(&canon_dest)
    {
        return Err(refuse(
            dest,
            if bundle == canon_dest {
                "is the bundle being unpacked".to_string()
            } else {
                format!("holds the bundle being unpacked ({})", dir.display())
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

/// The base of a delta installed at `dest`: an airlock install whose receipt verifies against
/// the trust set and whose manifest bytes hash to the delta's `base.manifest_sha256`. Its
/// files are opened below `dest` through directory handles, following no link.
pub struct InstalledBase {
    dest: PathBuf,
    root: OwnedFd,
    manifest: Manifest,
    /// The target's name, version and base version, for messages.
    name: String,
    version: u64,
    base_version: u64,
}

impl InstalledBase {
    /// Checks that `dest` holds exactly the base of the delta `opened`.
    pub fn open(dest: &Path, trust: &Policy, opened: &Opened) -> Result<InstalledBase> {
        let m = &opened.manifest;
        let base = m.base.as_ref().expect("a delta");
        let refuse = |reason: String| Error::DeltaBase {
            path: dest.to_path_buf(),
            reason,
            todo: needs(m, dest),
        };
        let short = format!(
            "needs {} version {} installed at {}",
            m.name,
            base.version,
            dest.display()
        );
        match std::fs::symlink_metadata(dest) {
            Err(_) => return Err(refuse(format!("{short}: nothing is there"))),
            Ok(meta) if !meta.is_dir() => {
                return Err(refuse(format!("{short}: it is not a directory")));
            }
            Ok(_) => {}
        }
        if !receipt::exists(dest) {
            return Err(refuse(format!(
                "{short}: the directory holds no airlock receipt"
            )));
        }
        let signed = receipt::verify(dest, trust).map_err(|e| {
            refuse(format!(
                "{short}: the receipt there does not verify with the trust set ({e})"
            ))
        })?;
        if receipt::part_of(dest, &signed.manifest)?.is_some() {
            return Err(refuse(format!(
                "{short}: it holds part of a bundle of several repositories (unpack --repo), not the whole install a delta applies onto"
            )));
        }
        let old = signed.manifest;
        if old.name != m.name {
            return Err(refuse(format!(
                "{short}: it holds {:?} version {}",
                old.name, old.version
            )));
        }
        let sha = hex::encode(Sha256::digest(&signed.bytes));
        if sha != base.manifest_sha256 {
            let reason = if sha == opened.manifest_sha256 {
                format!(
                    "{short}: it already holds version {} from this very bundle",
                    m.version
                )
            } else if old.version != base.version {
                format!(
                    "{short}: it holds version {} (deltas apply in order: this one builds on version {})",
                    old.version, base.version
                )
            } else {
                format!(
                    "{short}: it holds another build of version {} (its manifest sha256 is {sha}, the delta was made against {})",
                    old.version, base.manifest_sha256
                )
            };
            return Err(refuse(reason));
        }
        let root = fsio::open_dir_path(dest, fsio::Follow::Never)
            .map_err(|e| refuse(format!("{short}: it cannot be opened ({})", e.cause())))?;
        Ok(InstalledBase {
            dest: dest.to_path_buf(),
            root,
            manifest: old,
            name: m.name.clone(),
            version: m.version,
            base_version: base.version,
        })
    }
}

/// What a delta needs at `dest`, for messages.
fn needs(m: &Manifest, dest: &Path) -> String {
    let base = m.base.as_ref().expect("a delta");
    format!(
        "this delta needs {} version {} installed at {} (by its full bundle, or by the deltas up to it, in order)",
        m.name,
        base.version,
        dest.display()
    )
}

impl Base for InstalledBase {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&mut self, b: &FileEntry) -> Result<File> {
        fsio::open_file_below(&self.root, &b.path)
            .map(|(f, _)| f)
            .map_err(|e| self.rotten(b, format!("cannot open it ({})", e.cause())))
    }

    fn refuse(&self, reason: String) -> Error {
        Error::DeltaBase {
            path: self.dest.clone(),
            reason,
            todo: format!(
                "this delta needs {} version {} installed at {} (by its full bundle, or by the deltas up to it, in order)",
                self.name,
                self.base_version,
                self.dest.display()
            ),
        }
    }

    fn rotten(&self, b: &FileEntry, what: String) -> Error {
        Error::DeltaBase {
            path: self.dest.clone(),
            reason: format!(
                "the base file {:?} no longer matches its receipt: {what}",
                b.path
            ),
            todo: format!(
                "restore the base: unpack {} version {} again (its full bundle, or the deltas up to it), then apply this delta; or unpack the full bundle of version {}",
                self.name, self.base_version, self.version
            ),
        }
    }
}
