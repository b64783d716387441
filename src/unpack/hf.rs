//! Installing a verified bundle into a Hugging Face cache, laid out the way huggingface_hub
//! writes it, so `hf_hub_download`, `snapshot_download` and `scan_cache_dir` find it offline.
//!
//! The guarantees are those of a directory unpack ([`super::dir`]): nothing becomes visible
//! before every byte has matched the signed manifest, and a failed or killed unpack leaves the
//! cache as huggingface_hub sees it unchanged. The work happens in a staging directory
//! `CACHE/.locks/.airlock-staging-<repo folder>-<random>/` (huggingface_hub's own `.locks`
//! folder: on the cache's filesystem, so renames out of it are atomic, and skipped by
//! `scan_cache_dir`, so even a staging directory left by a killed process is never reported
//! as a corrupted repository; the next unpack removes it). There the bundle is streamed into
//! `repo/blobs/<etag>` (each etag checked or computed as the bytes pass) and
//! `repo/snapshots/<commit>/` is built with relative symlinks.
//!
//! On a shared cache every user writes `.locks` (huggingface_hub takes its locks there), so the
//! staged tree is built as the directory target builds its own: through handles. `.locks` is
//! opened without following a link and refused when it is one, or when other users can write
//! it without the sticky bit ([`hfcache::open_locks`]); the work directory is made below its
//! handle, and every directory, file, link and rename of the staged tree is relative to the
//! handles of directories airlock made, never to a path in `.locks`. A blob is in the staged
//! `blobs/` because this unpack streamed and checked it, never because a file of its name is
//! found there; the final renames move entries of the work directory's handle (what airlock
//! made) into the repository's folders, opened without following links. A work directory
//! renamed away while it is in use (by someone who can write `.locks` anyway: its owner, or
//! root) stops the install before anything becomes visible. Then:
//!
//! - a repository not yet in the cache is renamed into place whole, refs included: one atomic
//!   step;
//! - otherwise each new blob is renamed into `blobs/` (an existing blob of the same name is
//!   reused only after it hashes to its name, and replaced when it does not), the snapshot is
//!   renamed into place (or, if the commit already has a snapshot folder, merged with it and
//!   swapped in with `renameat2(RENAME_EXCHANGE)`), and last `refs/<revision>` is replaced by
//!   rename. A blob no snapshot links to is invisible to huggingface_hub, so a process killed
//!   between those steps leaves at most unreferenced blobs; a failure undoes every step.
//!
//! A bundle packed from a Hugging Face cache carries the repository, revision, commit and
//! every file's etag in its manifest `source`. A bundle packed from a plain directory can be
//! installed too, under a repository name given by the caller: its commit id is derived from
//! the manifest (the first 40 hex digits of the SHA-256 of `manifest.json`, so the same bundle
//! always installs as the same commit) and each blob is named by [`EtagKind::for_size`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, RenameFlags};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::notes::{self, InstallNotes};
use super::select::{Part, Select};
use crate::bundle::open::{Opened, Signed};
use crate::durable;
use crate::entries::Base;
use crate::entries::EntrySink;
use crate::error::{Error, Result};
use crate::fsio;
use crate::hfcache::{self, RefState, etag::GitBlobSha1, names::EtagKind};
use crate::manifest::{FileEntry, MAX_MANIFEST_BYTES, Manifest};
use crate::pipeline::{Fed, Kept, Target};
use crate::progress::Progress;
use crate::receipt;
use crate::staging::{self, Cleanup, Staging, SyncThread};
use crate::trust::Policy;

/// Options for an install into a Hugging Face cache.
#[derive(Clone, Debug)]
pub struct HfUnpackOptions {
    /// The cache directory (created if missing, as huggingface_hub does).
    pub cache: PathBuf,
    /// Install as this repository (default: the manifest's `source.repo_id`; required for a
    /// bundle packed from a directory).
    pub repo_id: Option<String>,
    /// Repository type (default: the manifest's, else `model`).
    pub repo_type: Option<String>,
    /// The ref to point at the commit (default: the manifest's revision, else `main`). A
    /// revision equal to the commit writes no ref, as huggingface_hub does.
    pub revision: Option<String>,
    /// Refuse to start when the cache's filesystem reports too little free space.
    pub check_space: bool,
    /// The trust policy the bundle was verified with; a delta's base receipt must verify
    /// against it too.
    pub trust: Policy,
    /// Adopt the work directory an interrupted install of the same bundle into the same
    /// repository and revision of this cache left, keeping the blobs it proves (on by default;
    /// `--no-resume` starts clean, removing it).
    pub resume: bool,
    /// Of a bundle of several repositories, install only these (`--repo`, names as
    /// [`Manifest::choose_repos`] takes them); empty: every one.
    pub repos: Vec<String>,
}

/// What happened to `snapshots/<commit>/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotState {
    /// It did not exist and was created.
    Created,
    /// It existed, lacking some of the bundle's files; they were added (atomically).
    Merged,
    /// It already held every file of the bundle, linked to the same blobs.
    Unchanged,
}

/// What an unpack into a cache did.
#[derive(Debug, Serialize)]
pub struct HfInstalled {
    /// The cache directory.
    #[serde(rename = "hf_cache")]
    pub cache: PathBuf,
    /// Repository id.
    pub repo_id: String,
    /// Repository type.
    pub repo_type: String,
    /// `CACHE/<type>s--org--name`.
    pub repo_folder: PathBuf,
    /// The ref written (or that would be, when it equals the commit: none).
    pub revision: String,
    /// The commit the snapshot is filed under.
    pub commit: String,
    /// Whether the commit was derived from the manifest (a bundle packed from a directory).
    pub commit_derived: bool,
    /// `snapshots/<commit>`.
    pub snapshot: PathBuf,
    /// What happened to the snapshot folder.
    pub snapshot_state: SnapshotState,
    /// The ref file, unless the revision is the commit itself.
    #[serde(rename = "ref")]
    pub ref_path: Option<PathBuf>,
    /// The commit the ref named before, if it existed and differed.
    pub previous_commit: Option<String>,
    /// Blobs added to the cache.
    pub blobs_written: u64,
    /// Blobs already in the cache that hashed to their names and were kept.
    pub blobs_reused: u64,
    /// Blobs already in the cache that did not hash to their names and were replaced.
    pub blobs_repaired: Vec<PathBuf>,
    /// Cleanup and model checks.
    #[serde(flatten)]
    pub notes: InstallNotes,
    /// For a bundle of several repositories: each one installed, in the bundle's order (the
    /// fields above are the first one's, the notes the whole install's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repos: Vec<HfInstalled>,
}

/// The commit id a bundle without a `source` is installed under: the first 40 hex digits of
/// the SHA-256 of its exact `manifest.json` bytes.
pub(crate) fn derived_commit(manifest_bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(manifest_bytes))[..40].to_string()
}

/// The relative symlink target huggingface_hub writes for a snapshot file at `path`.
pub(crate) fn blob_link(path: &str, etag: &str) -> String {
    let depth = path.matches('/').count();
    format!("{}blobs/{etag}", "../".repeat(depth + 2))
}

struct Plan {
    repo_id: String,
    repo_type: String,
    revision: String,
    commit: String,
    commit_derived: bool,
    /// By file path: the etag the manifest gives, or the SHA-256 for a large file of a bundle
    /// without a source; `None` when it is computed while streaming (a small file's git id).
    etags: HashMap<String, Option<String>>,
}

fn plan(opened: &Opened, opts: &HfUnpackOptions) -> Result<Plan> {
    plan_of(&opened.manifest, opened, opts)
}

/// The install plan of `m`: the bundle's manifest, or for a bundle of several repositories the
/// view of one of them ([`Manifest::repo_view`]).
fn plan_of(m: &Manifest, opened: &Opened, opts: &HfUnpackOptions) -> Result<Plan> {
    let src = m.source.as_ref();
    let repo_id = match (&opts.repo_id, src) {
        (Some(id), _) => id.clone(),
        (None, Some(s)) => s.repo_id.clone(),
        (None, None) => {
            return Err(Error::Usage(format!(
                "{} was packed from a directory, not from a Hugging Face cache: pass --hf-repo ORG/NAME to name the repository it is installed as",
                opened.origin
            )));
        }
    };
    hfcache::check_repo_id(&repo_id).map_err(|e| Error::Usage(e.to_string()))?;
    let repo_type = opts
        .repo_type
        .clone()
        .or_else(|| src.map(|s| s.repo_type.clone()))
        .unwrap_or_else(|| "model".into());
    hfcache::check_repo_type(&repo_type).map_err(|e| Error::Usage(e.to_string()))?;
    let (commit, commit_derived) = match src {
        Some(s) => (s.commit.clone(), false),
        None => (derived_commit(&opened.manifest_bytes), true),
    };
    let revision = opts
        .revision
        .clone()
        .or_else(|| src.map(|s| s.revision.clone()))
        .unwrap_or_else(|| hfcache::DEFAULT_REVISION.into());
    if hfcache::is_commit(&revision) {
        if revision != commit {
            return Err(Error::Usage(format!(
                "the revision {revision} is a commit id, and this bundle's commit is {commit}; name a branch or tag instead"
            )));
        }
    } else {
        hfcache::check_revision(&revision).map_err(|e| Error::Usage(e.to_string()))?;
    }
    let etags = match src {
        Some(s) => m
            .files
            .iter()
            .zip(&s.etags)
            .map(|(f, e)| (f.path.clone(), Some(e.clone())))
            .collect(),
        None => m
            .files
            .iter()
            .map(|f| {
                let etag =
                    (EtagKind::for_size(f.size) == EtagKind::Sha256).then(|| f.sha256.clone());
                (f.path.clone(), etag)
            })
            .collect(),
    };
    Ok(Plan {
        repo_id,
        repo_type,
        revision,
        commit,
        commit_derived,
        etags,
    })
}

/// A directory handle shared by the steps that may have to be undone in it.
type Dir = Arc<OwnedFd>;

/// One step to undo if the install fails after it, relative to the handle of the directory it
/// happened in.
enum Undo {
    /// Unlink the file `name`.
    RemoveFile(Dir, String),
    /// Remove the (empty) directory `name`.
    RemoveDir(Dir, String),
    /// Remove the tree `name` (shown as the path), never following a link or crossing a mount.
    RemoveTree(Dir, String, PathBuf),
    /// Exchange these two back.
    Exchange(Dir, String, Dir, String),
}

/// The staging directory and everything to undo; dropping it without `commit` restores the
/// cache.
#[derive(Default)]
struct Txn {
    undo: Vec<Undo>,
    committed: bool,
    staging: Option<Staging>,
    /// Held while the cache changes: a signal waits until every step is done or undone.
    commit: Option<staging::CommitGuard>,
    /// The cache's handle, when this install created its `.locks` folder: removed at the end
    /// (when empty) whatever happened.
    locks_made: Option<OwnedFd>,
    /// Missing ancestors of the cache this install created (the operator's path), removed
    /// (when empty) unless it completed.
    outer: Option<super::parents::Made>,
}

impl Txn {
    /// Creates `dir` and its missing ancestors as `unpack --dest` creates a destination's
    /// missing parents (through the handle of the directory above, the nearest existing
    /// ancestor's mode less write for group and others, whatever the umask; registered for
    /// the signal handler), recording them as outer directories.
    fn create_outer(&mut self, dir: &Path) -> Result<()> {
        if let Some(missing) = super::parents::Missing::find(dir)? {
            let mode = missing.mode(None);
            self.outer = Some(missing.create(mode)?);
        }
        Ok(())
    }

    /// Opens the directory `name` of the repository's directory `parent` (shown as
    /// `parent_path`), creating it (0755) if it is missing, undone on failure. A link there is
    /// refused, naming it.
    fn ensure_inner(&mut self, parent: &Dir, parent_path: &Path, name: &str) -> Result<Dir> {
        let path = parent_path.join(name);
        match rustix::fs::mkdirat(&**parent, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => {
                let fd =
                    fsio::open_dir_at(&**parent, name).map_err(|e| Error::io(&path, e.into()))?;
                self.undo
                    .push(Undo::RemoveDir(parent.clone(), name.to_string()));
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))
                    .map_err(|e| Error::io(&path, e.into()))?;
                Ok(Arc::new(fd))
            }
            Err(rustix::io::Errno::EXIST) => match fsio::open_dir_at(&**parent, name) {
                Ok(fd) => Ok(Arc::new(fd)),
                Err(e)
                    if matches!(
                        e.errno(),
                        Some(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
                    ) =>
                {
                    Err(hfcache::layout::real_dir(&path)
                        .err()
                        .unwrap_or_else(|| Error::HfCache {
                            path,
                            reason: "cannot be opened as a directory".into(),
                        }))
                }
                Err(e) => Err(Error::io(&path, e.into())),
            },
            Err(e) => Err(Error::io(&path, e.into())),
        }
    }

    /// The work directory.
    fn work(&self) -> &Staging {
        self.staging
            .as_ref()
            .expect("begin made the work directory")
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if !self.committed {
            for step in self.undo.drain(..).rev() {
                let _ = match step {
                    Undo::RemoveFile(dir, name) => {
                        rustix::fs::unlinkat(&*dir, name.as_str(), AtFlags::empty())
                            .map_err(io::Error::from)
                    }
                    Undo::RemoveDir(dir, name) => {
                        rustix::fs::unlinkat(&*dir, name.as_str(), AtFlags::REMOVEDIR)
                            .map_err(io::Error::from)
                    }
                    Undo::RemoveTree(dir, name, path) => {
                        staging::remove_tree_at(&*dir, &name, &path)
                    }
                    Undo::Exchange(a, a_name, b, b_name) => {
                        fsio::rename_at(&*a, &a_name, &*b, &b_name, RenameFlags::EXCHANGE)
                            .map_err(io::Error::from)
                    }
                };
            }
        }
        // Then let a pending signal in (it must not wait for the removal below, which takes
        // the same guard), and remove the work directory (releasing its lock).
        self.commit.take();
        self.staging.take();
        if let Some(cache) = self.locks_made.take() {
            let _ = rustix::fs::unlinkat(&cache, hfcache::LOCKS_DIR, AtFlags::REMOVEDIR);
        }
        // Removed (innermost first, each only while empty) unless the install completed.
        if let Some(made) = self.outer.take()
            && self.committed
        {
            made.keep();
        }
    }
}

/// Refuses to go on when the work directory is no longer at its name in `.locks`: someone who
/// can rename entries of `.locks` moved it away (and perhaps put one of their own there). What
/// airlock staged is intact (it works through the directory's handle), but the model checks
/// read the staged tree by path, and someone is working against this install: it stops before
/// anything becomes visible.
fn still_in_place(work: &Staging) -> Result<()> {
    match work.at_its_name() {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::HfCache {
            path: work.path(),
            reason: "was moved or replaced while airlock staged the install in it (someone else who can write the cache's .locks folder did that); nothing was installed".into(),
        }),
        Err(e) => Err(Error::io(work.path(), e)),
    }
}

/// Handles of a staged tree's directories, below its root, one component at a time (no link
/// followed); the last directory used is kept open, since files and directories come
/// directory by directory in bundle order.
struct Below<'a> {
    root: &'a OwnedFd,
    root_path: &'a Path,
    last: Option<(String, OwnedFd)>,
}

impl<'a> Below<'a> {
    fn new(root: &'a OwnedFd, root_path: &'a Path) -> Self {
        Below {
            root,
            root_path,
            last: None,
        }
    }

    /// Runs `f` with the handle of `rel`'s directory and `rel`'s last component; errors name
    /// `rel` below the root.
    fn at<T, E: Into<io::Error>>(
        &mut self,
        rel: &str,
        f: impl FnOnce(&OwnedFd, &str) -> std::result::Result<T, E>,
    ) -> Result<T> {
        let root_path = self.root_path;
        let full = || root_path.join(rel);
        let Some((parent, name)) = rel.rsplit_once('/') else {
            return f(self.root, rel).map_err(|e| Error::io(full(), e.into()));
        };
        let dir = match self.last.take() {
            Some((held, fd)) if held == parent => fd,
            _ => fsio::open_below(self.root, parent)
                .map_err(|e| Error::io(root_path.join(parent), e.into()))?,
        };
        let out = f(&dir, name).map_err(|e| Error::io(full(), e.into()));
        self.last = Some((parent.to_string(), dir));
        out
    }

    /// Creates the directory `rel` (0755, whatever the umask).
    fn mkdir(&mut self, rel: &str) -> Result<()> {
        let fd = self.at(rel, |dir, name| {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))?;
            let fd = fsio::open_dir_at(dir, name)?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))?;
            Ok::<_, io::Error>(fd)
        })?;
        // Its entries come next.
        self.last = Some((rel.to_string(), fd));
        Ok(())
    }
}

/// Streams each file into `blobs/.incoming-<n>` of its staged repository (through its handle),
/// checks or computes its etag, and renames it to `blobs/<etag>`. Files may arrive in any
/// order (a delta sends its copies first). A bundle of several repositories stages one
/// repository folder for each, and each file goes to the one whose directory holds it.
struct BlobSink {
    /// One per staged repository.
    repos: Vec<SinkRepo>,
    etags: HashMap<String, Option<String>>,
    /// The file streaming in, the repository it goes to, its temporary name, and its git blob
    /// id being computed.
    current: Option<(File, usize, String, Option<GitBlobSha1>)>,
    incoming: u64,
    /// The etag of each file streamed so far, by path in the bundle.
    placed: HashMap<String, String>,
    /// Files whose blobs an adopted work directory already holds, proven: their bytes, if the
    /// stream carries them anyway (a compressed bundle), are dropped.
    held: HashSet<String>,
    /// The current file is held.
    skipping: bool,
    syncer: crossbeam_channel::Sender<(File, PathBuf)>,
}

/// The staged `blobs/` of one repository.
struct SinkRepo {
    /// The bundle paths of its files begin with this (`models--ORG--NAME/`; empty for a bundle
    /// of one repository).
    prefix: String,
    blobs: OwnedFd,
    /// Where `blobs` is, for messages.
    blobs_path: PathBuf,
    /// The blobs this sink staged, by etag, with the SHA-256 of their content: a blob is in
    /// the staged `blobs/` because this sink put it there, never because a file of its name
    /// is found there.
    staged: HashMap<String, String>,
}

impl BlobSink {
    /// The repository the bundle file `path` belongs to.
    fn repo_of(&self, path: &str) -> Result<usize> {
        self.repos
            .iter()
            .position(|r| path.starts_with(&r.prefix))
            .ok_or_else(|| Error::BadFile {
                path: path.to_string(),
                reason: "is in none of the bundle's repositories".into(),
            })
    }
}

impl EntrySink for BlobSink {
    fn dir(&mut self, _path: &str) -> Result<()> {
        // Directories are made in the snapshot from the manifest once the stream has passed.
        Ok(())
    }

    fn holds(&mut self, file: &FileEntry) -> Result<bool> {
        // A file whose blob an adopted work directory holds, proven.
        Ok(self.held.contains(&file.path))
    }

    fn holds_dir(&mut self, _path: &str) -> Result<bool> {
        // Made in the snapshot from the manifest once the stream has passed.
        Ok(true)
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.skipping = self.held.contains(&file.path);
        if self.skipping {
            return Ok(());
        }
        let repo = self.repo_of(&file.path)?;
        let r = &self.repos[repo];
        let tmp = format!(".incoming-{}", self.incoming);
        self.incoming += 1;
        let f = fsio::create_at(&r.blobs, &tmp, 0o644, false)
            .map_err(|e| Error::io(r.blobs_path.join(&tmp), e.into()))?;
        let git = match self.etags.get(&file.path) {
            Some(Some(e)) => EtagKind::of(e) == Some(EtagKind::GitSha1),
            _ => true,
        };
        self.current = Some((f, repo, tmp, git.then(|| GitBlobSha1::new(file.size))));
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        if self.skipping {
            return Ok(());
        }
        let (f, repo, tmp, git) = self.current.as_mut().expect("begin_file came first");
        if let Some(g) = git {
            g.update(bytes);
        }
        f.write_all(bytes)
            .map_err(|e| Error::io(self.repos[*repo].blobs_path.join(&*tmp), e))
    }

    fn end_file(&mut self, file: &FileEntry) -> Result<()> {
        if std::mem::take(&mut self.skipping) {
            return Ok(());
        }
        let (f, repo, tmp, git) = self.current.take().expect("begin_file came first");
        let computed = git.map(GitBlobSha1::finish);
        let etag = match (self.etags.get(&file.path).cloned().flatten(), computed) {
            (Some(want), Some(actual)) if want != actual => {
                return Err(Error::BadFile {
                    path: file.path.clone(),
                    reason: format!(
                        "content's git blob id is {actual}, but the manifest gives it the etag {want}"
                    ),
                });
            }
            (Some(want), _) => want,
            (None, Some(actual)) => actual,
            (None, None) => unreachable!("a file without an etag is hashed while streaming"),
        };
        let r = &mut self.repos[repo];
        match r.staged.get(&etag) {
            // The same content twice in the bundle (both matched their signed SHA-256): one blob.
            Some(sha256) if *sha256 == file.sha256 => {
                rustix::fs::unlinkat(&r.blobs, tmp.as_str(), AtFlags::empty())
                    .map_err(|e| Error::io(r.blobs_path.join(&tmp), e.into()))?;
            }
            Some(sha256) => {
                return Err(Error::BadFile {
                    path: file.path.clone(),
                    reason: format!(
                        "has the etag {etag} of another file of the bundle, whose content differs (sha256 {sha256}, this file's is {})",
                        file.sha256
                    ),
                });
            }
            None => {
                let blob = r.blobs_path.join(&etag);
                fsio::rename_at(&r.blobs, &tmp, &r.blobs, &etag, RenameFlags::NOREPLACE)
                    .map_err(|e| Error::io(&blob, e.into()))?;
                r.staged.insert(etag.clone(), file.sha256.clone());
                let _ = self.syncer.send((f, blob));
            }
        }
        self.placed.insert(file.path.clone(), etag);
        Ok(())
    }
}

/// The work directory, by a handle of its own (the [`Staging`] stays in the [`Txn`]).
struct WorkDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The staged repository folder `WORK/repo/` and its folders, by handle.
struct Staged {
    /// Its name in the work directory.
    name: String,
    /// Where it is (for messages, and for the model checks, which read by path).
    path: PathBuf,
    repo: OwnedFd,
    snapshots: Dir,
    snapshot: OwnedFd,
}

/// Builds the staged snapshot as huggingface_hub lays it out, through its handle: directories
/// (0755), then each file as a relative link to its blob; then syncs them.
fn build_snapshot(snapshot: &OwnedFd, path: &Path, m: &Manifest, etags: &[String]) -> Result<()> {
    let mut below = Below::new(snapshot, path);
    for d in &m.directories {
        below.mkdir(d)?;
    }
    for (f, etag) in m.files.iter().zip(etags) {
        let target = blob_link(&f.path, etag);
        below.at(&f.path, |dir, name| {
            fsio::symlink_at(target.as_str(), dir, name)
        })?;
    }
    drop(below);
    for d in m.directories.iter().rev() {
        let fd = fsio::open_below(snapshot, d).map_err(|e| Error::io(path.join(d), e.into()))?;
        durable::sync_dir_fd(&fd, &path.join(d))?;
    }
    durable::sync_dir_fd(snapshot, path)
}

/// What is already at a path of an existing snapshot folder.
enum Existing {
    Dir,
    Link(PathBuf),
    File,
    Other,
}

fn read_existing(snapshot: &Path) -> Result<BTreeMap<String, Existing>> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(snapshot)
        .min_depth(1)
        .follow_links(false)
    {
        let e = e.map_err(|e| {
            let path = e.path().unwrap_or(snapshot).to_path_buf();
            Error::io(
                path,
                e.into_io_error()
                    .unwrap_or_else(|| io::Error::other("loop")),
            )
        })?;
        let rel = e
            .path()
            .strip_prefix(snapshot)
            .expect("under the snapshot")
            .to_string_lossy()
            .into_owned();
        let ft = e.file_type();
        let kind = if ft.is_dir() {
            Existing::Dir
        } else if ft.is_symlink() {
            Existing::Link(fs::read_link(e.path()).map_err(|err| Error::io(e.path(), err))?)
        } else if ft.is_file() {
            Existing::File
        } else {
            Existing::Other
        };
        out.insert(rel, kind);
    }
    Ok(out)
}

/// Compares an existing snapshot with the bundle: `Ok(true)` if it already holds every file
/// linked to the same blob and every directory; an error if the two disagree about a path.
fn compare_existing(
    snapshot: &Path,
    existing: &BTreeMap<String, Existing>,
    m: &Manifest,
    etags: &[String],
) -> Result<bool> {
    let conflict = |rel: &str, what: String| Error::HfCache {
        path: snapshot.join(rel),
        reason: format!(
            "{what}: the cache and the bundle disagree about this commit; move the snapshot folder aside and unpack again"
        ),
    };
    let mut complete = true;
    for d in &m.directories {
        match existing.get(d) {
            None => complete = false,
            Some(Existing::Dir) => {}
            Some(_) => {
                return Err(conflict(
                    d,
                    format!("{d:?} is a file in the cached snapshot, a directory in the bundle"),
                ));
            }
        }
    }
    for (f, etag) in m.files.iter().zip(etags) {
        match existing.get(&f.path) {
            None | Some(Existing::File) => complete = false,
            Some(Existing::Link(target)) => {
                let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if name != etag {
                    return Err(conflict(
                        &f.path,
                        format!(
                            "{:?} links to blob {name} in the cached snapshot, the bundle gives it etag {etag}",
                            f.path
                        ),
                    ));
                }
            }
            Some(Existing::Dir) | Some(Existing::Other) => {
                return Err(conflict(
                    &f.path,
                    format!(
                        "{:?} is a directory or special file in the cached snapshot, a file in the bundle",
                        f.path
                    ),
                ));
            }
        }
    }
    Ok(complete)
}

/// Adds the entries of the existing snapshot (open as `existing_fd`, at `existing_dir`) that
/// the bundle lacks to the staged one, through both handles: directories made, links copied
/// as they are, real files hard-linked.
fn merge_existing(
    existing_fd: &OwnedFd,
    existing_dir: &Path,
    existing: &BTreeMap<String, Existing>,
    staged: &OwnedFd,
    staged_path: &Path,
) -> Result<()> {
    let mut below = Below::new(staged, staged_path);
    // Sorted: a directory comes before its entries.
    for (rel, kind) in existing {
        let staged_already = below.at(rel, |dir, name| match fsio::stat_at(dir, name) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => Ok(false),
            Err(e) => Err(e),
        })?;
        if staged_already {
            continue;
        }
        match kind {
            Existing::Dir => below.mkdir(rel)?,
            Existing::Link(target) => below.at(rel, |dir, name| {
                fsio::symlink_at(target.as_path(), dir, name)
            })?,
            Existing::File => {
                let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
                let from = fsio::open_below(existing_fd, parent)
                    .map_err(|e| Error::io(existing_dir.join(parent), e.into()))?;
                below.at(rel, |dir, to| fsio::hard_link_at(&from, name, dir, to))?
            }
            Existing::Other => {
                return Err(Error::HfCache {
                    path: existing_dir.join(rel),
                    reason: "is a device, socket or FIFO inside a snapshot folder".into(),
                });
            }
        }
    }
    Ok(())
}

/// Renames the fully staged repository folder (blobs, snapshot and ref) from the work
/// directory into the cache (open as `cache`, the folder to be `folder`, at `repo`): what
/// moves is the `repo` folder of the work directory's handle, the tree airlock made.
fn publish_new_repo(
    work: &WorkDir,
    staged: &Staged,
    cache: &Dir,
    folder: &str,
    repo: &Path,
    plan: &Plan,
    txn: &mut Txn,
) -> Result<()> {
    if plan.revision != plan.commit {
        let mut path = staged.path.join("refs");
        let mut dir = durable::mkdir_at(&staged.repo, &staged.path, "refs", 0o755)?;
        let mut made = Vec::new();
        let (parents, name) = plan
            .revision
            .rsplit_once('/')
            .unwrap_or(("", &plan.revision));
        for part in parents.split('/').filter(|p| !p.is_empty()) {
            let next = durable::mkdir_at(&dir, &path, part, 0o755)?;
            made.push((dir, path.clone()));
            path.push(part);
            dir = next;
        }
        durable::write_synced_at(&dir, &path, name, plan.commit.as_bytes(), 0o644)?;
        durable::sync_dir_fd(&dir, &path)?;
        for (dir, path) in made.iter().rev() {
            durable::sync_dir_fd(dir, path)?;
        }
    }
    durable::sync_dir_fd(&staged.repo, &staged.path)?;
    fsio::rename_at(
        &work.fd,
        &staged.name,
        &**cache,
        folder,
        RenameFlags::NOREPLACE,
    )
    .map_err(|e| Error::io(repo, e.into()))?;
    txn.undo.push(Undo::RemoveTree(
        cache.clone(),
        folder.to_string(),
        repo.to_path_buf(),
    ));
    durable::sync_dir_fd(&**cache, repo.parent().expect("inside the cache"))
}

/// What [`place_blobs`] did.
struct BlobTally {
    written: u64,
    reused: u64,
    repaired: Vec<PathBuf>,
}

/// Moves the staged blobs (from the handle `staged_blobs`) into the repository's `blobs/`
/// (open as `blobs`, at `blobs_path`): a new one by rename, an existing one kept only if it
/// hashes to its name, and replaced by the verified copy if it does not.
fn place_blobs(
    blobs: &Dir,
    blobs_path: &Path,
    staged_blobs: &OwnedFd,
    m: &Manifest,
    etags: &[String],
    txn: &mut Txn,
    progress: &dyn Progress,
) -> Result<BlobTally> {
    let mut tally = BlobTally {
        written: 0,
        reused: 0,
        repaired: Vec::new(),
    };
    let mut seen = HashSet::new();
    let unique: Vec<&String> = etags.iter().filter(|e| seen.insert(*e)).collect();
    let check_bytes: u64 = m
        .files
        .iter()
        .zip(etags)
        .filter(|(_, e)| fsio::stat_at(&**blobs, e.as_str()).is_ok())
        .map(|(f, _)| f.size)
        .sum();
    progress.start(crate::progress::Phase::CheckExistingBlobs, check_bytes);
    for etag in unique {
        let dest = blobs_path.join(etag);
        match fsio::stat_at(&**blobs, etag.as_str()) {
            Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => {
                match fsio::rename_at(staged_blobs, etag, &**blobs, etag, RenameFlags::NOREPLACE) {
                    Ok(()) => {
                        txn.undo.push(Undo::RemoveFile(blobs.clone(), etag.clone()));
                        tally.written += 1;
                        continue;
                    }
                    // Another writer got there first: check theirs like any existing blob.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::io(&dest, e.into())),
                }
            }
            Err(e) => return Err(Error::io(&dest, e.into())),
            Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {
                return Err(Error::HfCache {
                    path: dest,
                    reason: "is a directory where a blob belongs".into(),
                });
            }
            Ok(_) => {}
        }
        let kind = EtagKind::of(etag).expect("etags are checked");
        let replace = || {
            fsio::rename_at(staged_blobs, etag, &**blobs, etag, RenameFlags::empty())
                .map_err(|e| Error::io(&dest, e.into()))
        };
        match hfcache::hash_file(&dest, kind, progress) {
            Ok(h) if h == *etag => tally.reused += 1,
            // Damaged, or a link into a shared store whose payload is gone: the verified copy
            // replaces the entry (the link itself, never the shared payload).
            Ok(_) => {
                replace()?;
                tally.repaired.push(dest);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                replace()?;
                tally.repaired.push(dest);
            }
            Err(e) => return Err(Error::io(&dest, e)),
        }
    }
    progress.finish();
    durable::sync_dir_fd(&**blobs, blobs_path)?;
    Ok(tally)
}

/// Points `refs/<revision>` of the repository (open as `repo`, at `repo_path`) at `commit`:
/// written in the work directory, renamed over the old ref through the handle of its folder.
/// Returns the commit it named before, if it differed.
fn write_ref(
    repo: &Dir,
    repo_path: &Path,
    revision: &str,
    commit: &str,
    work: &WorkDir,
    txn: &mut Txn,
) -> Result<Option<String>> {
    let ref_path = repo_path.join("refs").join(revision);
    // Read without following a link, blocking or reading past a commit id.
    let old = match hfcache::read_ref(&ref_path)? {
        RefState::Commit(c) => Some(c),
        RefState::Missing | RefState::Bad(_) => None,
    };
    if old.as_deref() == Some(commit) {
        return Ok(None);
    }
    let mut path = repo_path.join("refs");
    let mut dir = txn.ensure_inner(repo, repo_path, "refs")?;
    let (parents, name) = revision.rsplit_once('/').unwrap_or(("", revision));
    for part in parents.split('/').filter(|p| !p.is_empty()) {
        dir = txn.ensure_inner(&dir, &path, part)?;
        path.push(part);
    }
    durable::Staged::write_via(
        work.fd.as_fd(),
        &work.path,
        dir.as_fd(),
        &path,
        name,
        commit.as_bytes(),
        0o644,
    )?
    .publish(durable::Place::Replace)?;
    Ok(old)
}

/// One repository of an adopted work directory, pruned to the blobs it proves, with a fresh
/// (empty) snapshot folder.
struct Adopted {
    path: PathBuf,
    repo: OwnedFd,
    blobs: OwnedFd,
    snapshots: OwnedFd,
    snapshot: OwnedFd,
    /// Each kept blob's SHA-256, by etag.
    staged: HashMap<String, String>,
}

/// What [`prove_blobs`] kept.
struct Proven {
    kept: Kept,
    /// The etag of each kept file, by path.
    placed: HashMap<String, String>,
    /// Each kept blob's SHA-256, by etag.
    staged: HashMap<String, String>,
}

/// A repository to take over in an adopted work directory: the name of its staged folder
/// there, its plan, the manifest its files are listed in (its view for a bundle of several),
/// and what their bundle paths begin with.
struct ToAdopt<'a> {
    name: String,
    plan: &'a Plan,
    m: &'a Manifest,
    prefix: &'a str,
}

/// The name of repository `i` of `count` in the work directory: `repo` for a bundle of one,
/// `repo<i>` for several.
fn staged_name(i: usize, count: usize) -> String {
    if count > 1 {
        format!("repo{i}")
    } else {
        "repo".to_string()
    }
}

/// Takes over the work directory `work` an interrupted install of the same bundle into the
/// same repositories (and, for one, revision) left ([`Staging::adopt_at`] found it): each
/// repository's staged blobs are proven ([`prove_blobs`]); everything else (a snapshot folder
/// built before the kill, refs, a partial blob, anything planted) is removed, never following a
/// link. Returns each repository's folder, in `repos` order, and what they hold together (the
/// files by bundle path).
fn adopt_tree(
    work: &Staging,
    repos: &[ToAdopt<'_>],
    m: &Manifest,
    progress: &dyn Progress,
) -> Result<(Vec<Adopted>, Kept, HashMap<String, String>)> {
    let wpath = work.path();
    for (name, kind) in fsio::dir_entries(work.fd()).map_err(|e| Error::io(&wpath, e))? {
        let ours = name == staging::LOCK_NAME
            || name == staging::RESUME_NAME
            || (kind == rustix::fs::FileType::Directory
                && repos.iter().any(|r| name.to_str() == Some(r.name.as_str())));
        if !ours {
            super::resume::remove(work.fd(), &name, kind, &wpath)?;
        }
    }
    let mut kept = Kept {
        // The snapshots' directories are made from the manifest at the end.
        dirs: m.directories.iter().cloned().collect(),
        held_in: "staged",
        ..Kept::default()
    };
    let mut placed = HashMap::new();
    let mut adopted = Vec::with_capacity(repos.len());
    for r in repos {
        let path = wpath.join(&r.name);
        let repo = open_or_make(work.fd(), &path, &r.name)?;
        for (name, kind) in fsio::dir_entries(&repo).map_err(|e| Error::io(&path, e))? {
            if name != "blobs" || kind != rustix::fs::FileType::Directory {
                super::resume::remove(&repo, &name, kind, &path)?;
                kept.discarded += u64::from(name != "snapshots");
            }
        }
        let blobs = open_or_make(&repo, &path.join("blobs"), "blobs")?;
        let proven = prove_blobs(&blobs, &path.join("blobs"), r.m, &r.plan.etags, progress)?;
        kept.discarded += proven.kept.discarded;
        kept.bytes += proven.kept.bytes;
        kept.files
            .extend(proven.kept.files.iter().map(|p| format!("{}{p}", r.prefix)));
        placed.extend(
            proven
                .placed
                .into_iter()
                .map(|(p, etag)| (format!("{}{p}", r.prefix), etag)),
        );
        let snapshots = durable::mkdir_at(&repo, &path, "snapshots", 0o755)?;
        let snapshot =
            durable::mkdir_at(&snapshots, &path.join("snapshots"), &r.plan.commit, 0o755)?;
        adopted.push(Adopted {
            path,
            repo,
            blobs,
            snapshots,
            snapshot,
            staged: proven.staged,
        });
    }
    Ok((adopted, kept, placed))
}

/// Opens the directory `name` of `parent` (at `path`), no link followed, making it (0755) when
/// it is missing; its mode is set again.
fn open_or_make(parent: &OwnedFd, path: &Path, name: &str) -> Result<OwnedFd> {
    let parent_path = path.parent().expect("a name in a directory");
    match fsio::open_dir_at(parent, name) {
        Ok(fd) => {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))
                .map_err(|e| Error::io(path, e.into()))?;
            Ok(fd)
        }
        Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => {
            durable::mkdir_at(parent, parent_path, name, 0o755)
        }
        Err(e) => Err(Error::io(path, e.into())),
    }
}

/// Proves the blobs an adopted work directory staged in `blobs` (at `blobs_path`) against the
/// signed manifest `m`, whose files have the etags `etags` (`None`: computed while streaming).
/// A blob is kept only if it is a regular file (no link followed) with one link, this user's,
/// named as an etag, of the signed size of a file of the manifest, whose content hashes to that
/// file's signed SHA-256 and, for a git blob id, to its name; it is then kept for every file of
/// that content (read once, in parallel), its mode set again and synced. Everything else (a
/// partial `.incoming-` file, a link, a blob whose content differs) is removed.
fn prove_blobs(
    blobs: &OwnedFd,
    blobs_path: &Path,
    m: &Manifest,
    etags: &HashMap<String, Option<String>>,
    progress: &dyn Progress,
) -> Result<Proven> {
    use rayon::prelude::*;
    let me = rustix::process::geteuid().as_raw();
    // The files each staged name can be the blob of: those the manifest gives that etag, and,
    // for a git blob id, those of that size whose etag is computed while streaming.
    let mut named: HashMap<&str, Vec<&FileEntry>> = HashMap::new();
    let mut computed: HashMap<u64, Vec<&FileEntry>> = HashMap::new();
    for f in &m.files {
        match etags.get(&f.path) {
            Some(Some(e)) => named.entry(e.as_str()).or_default().push(f),
            _ => computed.entry(f.size).or_default().push(f),
        }
    }
    let mut kept = Kept {
        // The snapshot's directories are made from the manifest at the end.
        dirs: m.directories.iter().cloned().collect(),
        held_in: "staged",
        ..Kept::default()
    };
    let mut candidates: Vec<(String, EtagKind, u64, Vec<&FileEntry>)> = Vec::new();
    for (name, kind) in fsio::dir_entries(blobs).map_err(|e| Error::io(blobs_path, e))? {
        let candidate = name
            .to_str()
            .filter(|_| kind == rustix::fs::FileType::RegularFile)
            .and_then(|n| {
                let etag_kind = EtagKind::of(n)?;
                let (_, len) = fsio::open_file_below(blobs, n).ok()?;
                let mut could: Vec<&FileEntry> = named
                    .get(n)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|f| f.size == len)
                    .collect();
                if etag_kind == EtagKind::GitSha1 {
                    could.extend(computed.get(&len).into_iter().flatten().copied());
                }
                (!could.is_empty()).then(|| (n.to_string(), etag_kind, len, could))
            });
        match candidate {
            Some(c) => candidates.push(c),
            None => {
                super::resume::remove(blobs, &name, kind, blobs_path)?;
                kept.discarded += 1;
            }
        }
    }
    progress.start(
        crate::progress::Phase::Prove,
        candidates.iter().map(|c| c.2).sum(),
    );
    let proven: Vec<(String, Vec<&FileEntry>)> = candidates
        .into_par_iter()
        .map(|(name, etag_kind, len, could)| {
            let files =
                prove_blob(blobs, &name, etag_kind, len, could, me, progress).unwrap_or_default();
            (name, files)
        })
        .collect();
    progress.finish();
    let mut placed = HashMap::new();
    let mut staged = HashMap::new();
    for (name, files) in proven {
        let Some(first) = files.first() else {
            super::resume::remove(
                blobs,
                std::ffi::OsStr::new(&name),
                rustix::fs::FileType::RegularFile,
                blobs_path,
            )?;
            kept.discarded += 1;
            continue;
        };
        staged.insert(name.clone(), first.sha256.clone());
        for f in files {
            if kept.files.insert(f.path.clone()) {
                kept.bytes += f.size;
                placed.insert(f.path.clone(), name.clone());
            }
        }
    }
    durable::sync_dir_fd(blobs, blobs_path)?;
    Ok(Proven {
        kept,
        placed,
        staged,
    })
}

/// The files of `could` (all of size `len`) whose blob the staged file `name` of `blobs` is:
/// empty unless it is a regular file with one link, this user's, of `len` bytes, whose
/// content's git blob id is its name (an etag of that kind); of those, the ones whose signed
/// SHA-256 it hashes to. A kept blob gets its mode again and is synced (it may have been
/// written just before a kill, not yet on disk).
fn prove_blob<'m>(
    blobs: &OwnedFd,
    name: &str,
    kind: EtagKind,
    len: u64,
    could: Vec<&'m FileEntry>,
    me: u32,
    progress: &dyn Progress,
) -> io::Result<Vec<&'m FileEntry>> {
    use std::os::unix::fs::FileExt;
    let Ok((file, size)) = fsio::open_file_below(blobs, name) else {
        return Ok(Vec::new());
    };
    let st = rustix::fs::fstat(&file)?;
    if size != len || st.st_nlink != 1 || st.st_uid != me {
        return Ok(Vec::new());
    }
    let mut sha = Sha256::new();
    let mut git = (kind == EtagKind::GitSha1).then(|| GitBlobSha1::new(len));
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    loop {
        let n = match file.read_at(&mut buf, pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        sha.update(&buf[..n]);
        if let Some(g) = git.as_mut() {
            g.update(&buf[..n]);
        }
        pos += n as u64;
        progress.advance(n as u64);
    }
    if pos != len || git.is_some_and(|g| g.finish() != name) {
        return Ok(Vec::new());
    }
    let digest = hex::encode(sha.finalize());
    let files: Vec<&FileEntry> = could.into_iter().filter(|f| f.sha256 == digest).collect();
    if !files.is_empty() {
        rustix::fs::fchmod(&file, Mode::from_raw_mode(0o644))?;
        file.sync_all()?;
    }
    Ok(files)
}

/// Installs into a Hugging Face cache (module documentation).
pub struct HfTarget {
    opts: HfUnpackOptions,
    begun: Option<HfBegun>,
}

/// What [`Target::begin`] set up. Field order is drop order: the sink before the sync thread,
/// the transaction (which undoes what it did and removes the work directory) last.
struct HfBegun {
    sink: Select<BlobSink>,
    syncer: SyncThread,
    /// One per repository the bundle installs, in the sink's order.
    repos: Vec<RepoBegun>,
    cache: Dir,
    cleanup: Cleanup,
    /// What an adopted work directory held, proven.
    kept: Option<Kept>,
    txn: Txn,
}

/// One repository of an install: its plan, where it goes, and its staged folder.
struct RepoBegun {
    plan: Plan,
    /// The repository folder's name in the cache, and its path.
    folder: String,
    repo: PathBuf,
    staged: Staged,
    /// For a bundle of several repositories, this one's view ([`Manifest::repo_view`]);
    /// `None`: the bundle's manifest.
    view: Option<Manifest>,
    /// What its files' bundle paths begin with (empty for a bundle of one).
    prefix: String,
}

impl HfTarget {
    /// A target installing with `opts`.
    pub fn new(opts: HfUnpackOptions) -> Self {
        HfTarget { opts, begun: None }
    }
}

/// The repositories `opened` installs: itself, or each repository of a bundle of several (the
/// operator's `--hf-repo`, `--repo-type` and `--revision` then refused: they name one), with
/// its view and path prefix.
fn views(opened: &Opened, opts: &HfUnpackOptions) -> Result<Vec<(Option<Manifest>, String)>> {
    let m = &opened.manifest;
    if let Some(d) = &m.dir
        && opts.repos.is_empty()
    {
        // FORMAT.md section 14.4: the directory has no repository id nor commit to install as.
        return Err(Error::Usage(format!(
            "{} carries the model directory {:?} beside its repositories, which has no repository id to install it as in a Hugging Face cache: install the bundle with --dest DIR (the directory lands in DIR/ under that name), or only its repositories with --repo",
            opened.origin, d.path
        )));
    }
    if m.repos.is_empty() {
        return Ok(vec![(None, String::new())]);
    }
    if opts.repo_id.is_some() || opts.repo_type.is_some() || opts.revision.is_some() {
        let ids: Vec<&str> = m.repos.iter().map(|r| r.source.repo_id.as_str()).collect();
        return Err(Error::Usage(format!(
            "{} carries {} repositories ({}), each installed under its own id, type and revision: --hf-repo, --repo-type and --revision name one repository and cannot be used with it",
            opened.origin,
            m.repos.len(),
            ids.join(", ")
        )));
    }
    let chosen: Vec<usize> = if opts.repos.is_empty() {
        (0..m.repos.len()).collect()
    } else {
        m.choose_repos(&opts.repos)
            .map_err(|e| Error::Usage(e.to_string()))?
    };
    Ok(chosen
        .into_iter()
        .map(|i| (m.repo_view(i), format!("{}/", m.repos[i].path)))
        .collect())
}

impl Target for HfTarget {
    type Done = HfInstalled;

    fn begin(&mut self, opened: &Opened, progress: &dyn Progress) -> Result<()> {
        let m = &opened.manifest;
        let opts = &self.opts;
        let views = views(opened, opts)?;
        let mut plans = Vec::with_capacity(views.len());
        for (view, prefix) in views {
            let plan = plan_of(view.as_ref().unwrap_or(m), opened, opts)?;
            let folder = hfcache::repo_folder_name(&plan.repo_type, &plan.repo_id);
            plans.push((plan, folder, view, prefix));
        }
        let cache = &opts.cache;
        let mut txn = Txn::default();
        txn.create_outer(cache)?;
        // The operator's path (a final link followed, as the shell would); everything below it
        // through handles.
        let cache_fd = match fsio::open_dir_path(cache, fsio::Follow::Final) {
            Ok(fd) => fd,
            Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOTDIR)) => {
                return Err(Error::Usage(format!(
                    "{} is not a directory",
                    cache.display()
                )));
            }
            Err(e) => return Err(Error::io(cache, e.into())),
        };
        let locks = cache.join(hfcache::LOCKS_DIR);
        let existing_locks = hfcache::open_locks(&cache_fd, cache)?;
        // Every install can be resumed: its work directory is marked with the signed
        // manifest's digest (a delta's names its base by digest), the (first) repository folder
        // and, for a bundle of one, the revision; for a bundle of several, the folders of the
        // repositories it takes (all, or the part `--repo` chose), so only a rerun choosing
        // the same ones adopts it.
        let marker = staging::Marker {
            manifest_sha256: opened.manifest_sha256.clone(),
            dest: plans[0].1.clone(),
            target: "hf-cache".into(),
            revision: m.repos.is_empty().then(|| plans[0].0.revision.clone()),
            repos: (!m.repos.is_empty()).then(|| {
                plans
                    .iter()
                    .map(|p| p.3.trim_end_matches('/').to_string())
                    .collect()
            }),
        };
        let adopted = match &existing_locks {
            Some(fd) if opts.resume => Staging::adopt_at(fd, &locks, &marker)?,
            _ => None,
        };
        // Work directories of this (first) repository left by another bundle, selection,
        // revision or a `--no-resume` run are removed here (the adopted one is locked); those
        // of other repositories are left for their reruns.
        let cleanup = match &existing_locks {
            Some(fd) => staging::clean_stale_at_for(fd, &locks, Some(&plans[0].1))?,
            None => Cleanup::default(),
        };
        let mut resumed = None;
        if let Some(work) = adopted {
            txn.staging = Some(work);
            let to_adopt: Vec<ToAdopt<'_>> = plans
                .iter()
                .enumerate()
                .map(|(i, (plan, _, view, prefix))| ToAdopt {
                    name: staged_name(i, plans.len()),
                    plan,
                    m: view.as_ref().unwrap_or(m),
                    prefix,
                })
                .collect();
            match adopt_tree(txn.work(), &to_adopt, m, progress) {
                Ok(r) => resumed = Some(r),
                Err(e) => {
                    // What was staged stays for the next rerun (an interrupt while it is
                    // proven keeps it too).
                    if let Some(s) = txn.staging.as_mut() {
                        s.keep_for_rerun();
                    }
                    return Err(e);
                }
            }
        }
        if opts.check_space {
            let held = resumed.as_ref().map_or(0, |(_, kept, _)| kept.bytes);
            // What is installed: the whole bundle, or the repositories chosen.
            let part = (!opts.repos.is_empty())
                .then(|| {
                    let chosen: Vec<usize> = plans
                        .iter()
                        .filter_map(|p| m.repos.iter().position(|r| format!("{}/", r.path) == p.3))
                        .collect();
                    m.select_repos(&chosen)
                })
                .flatten();
            let needed = notes::space_needed(part.as_ref().unwrap_or(m), 0);
            let checked = notes::check_space(cache, needed.saturating_sub(held));
            if let (Err(_), Some(s)) = (&checked, txn.staging.as_mut()) {
                s.keep_for_rerun();
            }
            checked?;
        }
        let syncer = SyncThread::new();
        let mut sink_repos = Vec::with_capacity(plans.len());
        let mut repos = Vec::with_capacity(plans.len());
        let mut etags = HashMap::with_capacity(m.files.len());
        // One staged repository: its etags under its bundle paths, its blobs for the sink, the
        // rest for the commit.
        let mut add_repo =
            |repo: PathBuf,
             (plan, folder, view, prefix): (Plan, String, Option<Manifest>, String),
             staged: Staged,
             sink_repo: SinkRepo| {
                etags.extend(
                    plan.etags
                        .iter()
                        .map(|(p, e)| (format!("{prefix}{p}"), e.clone())),
                );
                sink_repos.push(sink_repo);
                repos.push(RepoBegun {
                    repo,
                    plan,
                    folder,
                    staged,
                    view,
                    prefix,
                });
            };
        let (kept, placed) = match resumed {
            Some((adopted, kept, placed)) => {
                // The work directory adopted: each repository's folder in it, proven.
                for ((plan, folder, view, prefix), a) in plans.into_iter().zip(adopted) {
                    let name = a
                        .path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .expect("named by staged_name")
                        .to_string();
                    let staged = Staged {
                        name,
                        path: a.path,
                        repo: a.repo,
                        snapshots: Arc::new(a.snapshots),
                        snapshot: a.snapshot,
                    };
                    let sink_repo = SinkRepo {
                        prefix: prefix.clone(),
                        blobs_path: staged.path.join("blobs"),
                        blobs: a.blobs,
                        staged: a.staged,
                    };
                    add_repo(
                        cache.join(&folder),
                        (plan, folder, view, prefix),
                        staged,
                        sink_repo,
                    );
                }
                (Some(kept), placed)
            }
            None => {
                let locks_fd = match existing_locks {
                    Some(fd) => fd,
                    None => {
                        let (fd, made) = hfcache::create_locks(&cache_fd, cache)?;
                        if made {
                            txn.locks_made =
                                Some(cache_fd.try_clone().map_err(|e| Error::io(cache, e))?);
                        }
                        fd
                    }
                };
                txn.staging = Some(Staging::create_at(locks_fd, &locks, &plans[0].1)?);
                let work = txn.work();
                work.mark_resumable(&marker)?;
                let count = plans.len();
                for (i, (plan, folder, view, prefix)) in plans.into_iter().enumerate() {
                    // The staged tree, made and kept by handle: whatever another user does to
                    // names in `.locks`, every file goes into the directories made here.
                    let name = staged_name(i, count);
                    let path = work.path().join(&name);
                    let repo_fd = work.mkdir(&name, 0o755)?;
                    let blobs = durable::mkdir_at(&repo_fd, &path, "blobs", 0o755)?;
                    let snapshots = durable::mkdir_at(&repo_fd, &path, "snapshots", 0o755)?;
                    let snapshot = durable::mkdir_at(
                        &snapshots,
                        &path.join("snapshots"),
                        &plan.commit,
                        0o755,
                    )?;
                    let sink_repo = SinkRepo {
                        prefix: prefix.clone(),
                        blobs,
                        blobs_path: path.join("blobs"),
                        staged: HashMap::new(),
                    };
                    let staged = Staged {
                        name,
                        path,
                        repo: repo_fd,
                        snapshots: Arc::new(snapshots),
                        snapshot,
                    };
                    add_repo(
                        cache.join(&folder),
                        (plan, folder, view, prefix),
                        staged,
                        sink_repo,
                    );
                }
                (None, HashMap::with_capacity(m.files.len()))
            }
        };
        // Of a bundle of several, only the repositories staged get their files.
        let part = (!m.repos.is_empty()).then(|| Part {
            folders: sink_repos
                .iter()
                .map(|r: &SinkRepo| r.prefix.trim_end_matches('/').to_string())
                .collect(),
            strip: false,
        });
        let blob_sink = BlobSink {
            repos: sink_repos,
            etags,
            current: None,
            incoming: 0,
            held: kept
                .as_ref()
                .map(|k: &Kept| k.files.clone())
                .unwrap_or_default(),
            skipping: false,
            placed,
            syncer: syncer.sender(),
        };
        self.begun = Some(HfBegun {
            sink: Select::new(blob_sink, part),
            syncer,
            repos,
            cache: Arc::new(cache_fd),
            cleanup,
            kept,
            txn,
        });
        Ok(())
    }

    fn kept(&self) -> Option<&Kept> {
        self.begun.as_ref().and_then(|b| b.kept.as_ref())
    }

    fn keep_for_rerun(&mut self, e: &Error) {
        if let Some(b) = self.begun.as_mut()
            && let Some(s) = b.txn.staging.as_mut()
            && crate::pipeline::keeps_for_rerun(e, &s.path())
        {
            s.keep_for_rerun();
        }
    }

    type Base = CacheBase;

    fn base(&mut self, opened: &Opened) -> Result<CacheBase> {
        if !opened.manifest.repos.is_empty() {
            return CacheBase::open_several(&self.opts.cache, &self.opts.trust, opened);
        }
        let plan = plan(opened, &self.opts)?;
        let repo = self
            .opts
            .cache
            .join(hfcache::repo_folder_name(&plan.repo_type, &plan.repo_id));
        CacheBase::open(&repo, &self.opts.trust, opened)
    }

    fn sink(&mut self) -> &mut dyn EntrySink {
        &mut self.begun.as_mut().expect("begin came first").sink
    }

    fn commit(mut self, opened: &Opened, fed: Fed, progress: &dyn Progress) -> Result<HfInstalled> {
        let HfBegun {
            sink,
            syncer,
            repos,
            cache: cache_fd,
            cleanup,
            kept,
            mut txn,
        } = self.begun.take().expect("begin came first");
        let m = &opened.manifest;
        let cache = &self.opts.cache;
        let BlobSink {
            repos: sink_repos,
            placed,
            syncer: sync_tx,
            current,
            ..
        } = sink.inner;
        drop(current);
        drop(sync_tx);
        syncer.finish()?;
        // 2. Each snapshot, as huggingface_hub lays it out: directories, relative links; and the
        // model-format checks on exactly the bytes about to become visible, read by path: only
        // while the work directory is still where airlock made it.
        let mut cleanup = Some(cleanup);
        let mut staged_all = Vec::with_capacity(repos.len());
        for (rb, sr) in repos.into_iter().zip(sink_repos) {
            let vm = rb.view.as_ref().unwrap_or(m);
            let etags: Vec<String> = vm
                .files
                .iter()
                .map(|f| {
                    placed
                        .get(&format!("{}{}", rb.prefix, f.path))
                        .cloned()
                        .expect("the tally saw every file")
                })
                .collect();
            let staged_snapshots = rb.staged.path.join("snapshots");
            let staged_snapshot = staged_snapshots.join(&rb.plan.commit);
            build_snapshot(&rb.staged.snapshot, &staged_snapshot, vm, &etags)?;
            durable::sync_dir_fd(&*rb.staged.snapshots, &staged_snapshots)?;
            durable::sync_dir_fd(&sr.blobs, &sr.blobs_path)?;
            still_in_place(txn.work())?;
            let prefix = format!("snapshots/{}/", rb.plan.commit);
            let notes = InstallNotes::new(
                cleanup.take().unwrap_or_default(),
                &rb.staged.path,
                &prefix,
                vm,
            )?;
            staged_all.push((rb, sr.blobs, etags, notes));
        }

        // 3. Make it visible. A signal now waits until every step is done (or undone): every
        // repository, or none.
        txn.commit = Some(staging::commit_guard());
        still_in_place(txn.work())?;
        // From here the work directory's content moves into the cache: nothing to resume (a
        // failure undoes every step and removes it).
        txn.work().unmark()?;
        // The work directory's handle, for the steps that move what it holds.
        let work = WorkDir {
            fd: txn
                .work()
                .fd()
                .try_clone()
                .map_err(|e| Error::io(txn.work().path(), e))?,
            path: txn.work().path(),
        };
        let mut done = Vec::with_capacity(staged_all.len());
        for (rb, staged_blobs, etags, notes) in staged_all {
            let RepoBegun {
                plan,
                folder,
                repo,
                staged,
                view,
                prefix,
            } = rb;
            let vm = view.as_ref().unwrap_or(m);
            let snapshot = repo.join("snapshots").join(&plan.commit);
            let ref_path =
                (plan.revision != plan.commit).then(|| repo.join("refs").join(&plan.revision));
            let (tally, snapshot_state, previous_commit) =
                match fsio::stat_at(&*cache_fd, folder.as_str()) {
                    Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => {
                        // A new repository: refs included, it appears in one rename.
                        publish_new_repo(
                            &work, &staged, &cache_fd, &folder, &repo, &plan, &mut txn,
                        )?;
                        let tally = BlobTally {
                            written: etags.iter().collect::<HashSet<_>>().len() as u64,
                            reused: 0,
                            repaired: Vec::new(),
                        };
                        (tally, SnapshotState::Created, None)
                    }
                    Err(e) => return Err(Error::io(&repo, e.into())),
                    Ok(st) if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {
                        return Err(Error::Usage(format!(
                            "{} exists and is not a directory",
                            repo.display()
                        )));
                    }
                    Ok(_) => update_repo(
                        &repo,
                        &plan,
                        &work,
                        &staged,
                        &staged_blobs,
                        vm,
                        &etags,
                        &mut txn,
                        progress,
                    )?,
                };
            done.push((
                prefix,
                HfInstalled {
                    cache: cache.clone(),
                    repo_id: plan.repo_id,
                    repo_type: plan.repo_type,
                    repo_folder: repo,
                    revision: plan.revision,
                    commit: plan.commit,
                    commit_derived: plan.commit_derived,
                    snapshot,
                    snapshot_state,
                    ref_path,
                    previous_commit,
                    blobs_written: tally.written,
                    blobs_reused: tally.reused,
                    blobs_repaired: tally.repaired,
                    notes,
                    repos: Vec::new(),
                },
            ));
        }
        // airlock's trace, so a later `check --hf-cache` knows the fix is another unpack; and
        // the receipt, so a later delta can prove a snapshot is its base. Every repository of a
        // bundle of several gets the bundle's receipt, its `repos` naming which part is whose.
        let receipt = receipt_files(opened);
        for (_, i) in &done {
            let trace =
                serde_json::json!({"bundle": m.name, "version": m.version, "revision": i.revision});
            hfcache::leave_trace(&i.repo_folder, &i.commit, &trace.to_string())?;
            hfcache::leave_receipt(&i.repo_folder, &i.commit, &receipt)?;
        }
        txn.committed = true;
        drop(txn);
        let mut all = gather(done);
        all.notes.repaired_volumes = fed.repaired_volumes;
        all.notes.resumed = super::resume::report(kept.as_ref(), fed.started_at);
        Ok(all)
    }
}

/// What an install of the repositories `done` (each with its bundle path prefix, in bundle
/// order; one for a bundle of one) reports: the first one's fields, and for several each one
/// in `repos` with the install's notes gathered at the top, every finding and unchecked path
/// under its bundle path (its repository's folder before it).
fn gather(done: Vec<(String, HfInstalled)>) -> HfInstalled {
    let several = done.len() > 1;
    let mut done = done.into_iter();
    let (first_prefix, mut first) = done.next().expect("at least one repository");
    if !several {
        return first;
    }
    let mut notes = std::mem::take(&mut first.notes);
    let under = |prefix: &str, notes: &mut InstallNotes| {
        for f in &mut notes.findings {
            f.path = format!("{prefix}{}", f.path);
        }
        for p in &mut notes.unchecked {
            *p = format!("{prefix}{p}");
        }
    };
    under(&first_prefix, &mut notes);
    let mut all = vec![HfInstalled {
        notes: InstallNotes::default(),
        repos: Vec::new(),
        blobs_repaired: first.blobs_repaired.clone(),
        ..first.clone_fields()
    }];
    for (prefix, mut i) in done {
        let mut own = std::mem::take(&mut i.notes);
        under(&prefix, &mut own);
        notes.findings.append(&mut own.findings);
        notes.unchecked.append(&mut own.unchecked);
        all.push(i);
    }
    first.notes = notes;
    first.repos = all;
    first
}

impl HfInstalled {
    /// A copy of the fields that say where the repository went (not the notes, the other
    /// repositories or the repaired blobs).
    fn clone_fields(&self) -> HfInstalled {
        HfInstalled {
            cache: self.cache.clone(),
            repo_id: self.repo_id.clone(),
            repo_type: self.repo_type.clone(),
            repo_folder: self.repo_folder.clone(),
            revision: self.revision.clone(),
            commit: self.commit.clone(),
            commit_derived: self.commit_derived,
            snapshot: self.snapshot.clone(),
            snapshot_state: self.snapshot_state,
            ref_path: self.ref_path.clone(),
            previous_commit: self.previous_commit.clone(),
            blobs_written: self.blobs_written,
            blobs_reused: self.blobs_reused,
            blobs_repaired: Vec::new(),
            notes: InstallNotes::default(),
            repos: Vec::new(),
        }
    }
}

/// The receipt files of `opened`: the signed manifest, its signature, the co-signatures that
/// counted and the trust roots it carried.
fn receipt_files(opened: &Opened) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        (
            crate::manifest::MANIFEST_NAME.to_string(),
            opened.manifest_bytes.clone(),
        ),
        (
            crate::manifest::SIGNATURE_NAME.to_string(),
            opened.signature_text.clone().into_bytes(),
        ),
    ];
    for (name, text) in &opened.trust.cosignatures {
        files.push((name.clone(), text.clone().into_bytes()));
    }
    for r in &opened.trust.roots {
        files.push((crate::trust::update::file_name(r.version), r.bytes.clone()));
    }
    // The OMS signature, beside the receipt rather than in the snapshot, which holds exactly
    // the model's files (FORMAT.md section 19).
    if let Some(c) = &opened.oms {
        files.push((c.name.clone(), c.bytes.clone()));
    }
    files
}

/// The base of a delta in a Hugging Face cache: the snapshot airlock installed from the base
/// bundle, proven by the receipt it left beside its trace (`REPO/.airlock/receipts/<commit>/`): verified against the trust set, and hashing to the delta's
/// `base.manifest_sha256`. Its files are read through the snapshot's links to `blobs/`, by the
/// cache's link rules ([`hfcache`]), and each is checked against the base manifest before use.
///
/// For a delta of several repositories (FORMAT.md section 14.4) the base is one snapshot per
/// repository the delta shares with its base, each proven by its own receipt of the base
/// bundle; a base file `FOLDER/PATH` is file `PATH` of repository `FOLDER`'s snapshot.
pub struct CacheBase {
    /// The snapshots, each with what its base files' paths begin with (empty for a base of
    /// one repository, `FOLDER/` for one of several).
    parts: Vec<CachePart>,
    manifest: Manifest,
    name: String,
    version: u64,
    base_version: u64,
}

impl CacheBase {
    /// Finds, in the cache repository `repo`, the snapshot that is the base of the delta
    /// `opened`.
    pub fn open(repo: &Path, trust: &Policy, opened: &Opened) -> Result<CacheBase> {
        let m = &opened.manifest;
        let base = m.base.as_ref().expect("a delta");
        let refuse = |reason: String| Error::DeltaBase {
            path: repo.to_path_buf(),
            reason,
            todo: cache_needs(&m.name, base.version),
        };
        let Some((commit, signed)) = find_receipt(repo, &base.manifest_sha256, trust)? else {
            return Err(refuse(format!(
                "needs {} version {} installed by airlock in this cache repository: no receipt of airlock's there names the manifest sha256 {}",
                m.name, base.version, base.manifest_sha256
            )));
        };
        if signed.manifest.name != m.name {
            return Err(refuse(format!(
                "the receipt of commit {commit} is of {:?}, not of {:?}",
                signed.manifest.name, m.name
            )));
        }
        Ok(CacheBase {
            parts: vec![CachePart {
                prefix: String::new(),
                repo: repo.to_path_buf(),
                commit,
            }],
            manifest: signed.manifest,
            name: m.name.clone(),
            version: m.version,
            base_version: base.version,
        })
    }
}

impl CacheBase {
    /// Finds, in `cache`, the base of `opened`, a delta of several repositories: for each
    /// repository of the delta that its base has too, the snapshot of that repository proven
    /// by a receipt of the base bundle. A repository the base does not have is new (carried
    /// whole, installed as in a full bundle); one of the base the delta does not have (dropped)
    /// is not read and stays in the cache as it is.
    pub(crate) fn open_several(cache: &Path, trust: &Policy, opened: &Opened) -> Result<CacheBase> {
        let m = &opened.manifest;
        let base = m.base.as_ref().expect("a delta");
        let mut found = Vec::new();
        for r in &m.repos {
            let repo = cache.join(&r.path);
            if let Some((commit, signed)) = find_receipt(&repo, &base.manifest_sha256, trust)? {
                found.push((r.path.clone(), repo, commit, signed.manifest));
            }
        }
        let Some((_, first_repo, _, bm)) = found.first() else {
            let folders: Vec<&str> = m.repos.iter().map(|r| r.path.as_str()).collect();
            return Err(Error::DeltaBase {
                path: cache.to_path_buf(),
                reason: format!(
                    "needs {} version {} installed by airlock in this cache: none of its repositories ({}) has a receipt of airlock's naming the manifest sha256 {}",
                    m.name,
                    base.version,
                    folders.join(", "),
                    base.manifest_sha256
                ),
                todo: cache_needs(&m.name, base.version),
            });
        };
        let refuse = |path: &Path, reason: String| Error::DeltaBase {
            path: path.to_path_buf(),
            reason,
            todo: cache_needs(&m.name, base.version),
        };
        if bm.name != m.name {
            return Err(refuse(
                first_repo,
                format!(
                    "the receipt of the base is of {:?}, not of {:?}",
                    bm.name, m.name
                ),
            ));
        }
        m.check_repos_base(bm)
            .map_err(|why| refuse(first_repo, format!("the delta {why}")))?;
        let mut parts = Vec::new();
        for (i, r) in m.repos.iter().enumerate() {
            let Some(j) = m.base_repo(i, bm) else {
                continue;
            };
            let want = &bm.repos[j].source.commit;
            let repo = cache.join(&r.path);
            match found.iter().find(|(p, ..)| *p == r.path) {
                Some((_, _, commit, _)) if commit == want => parts.push(CachePart {
                    prefix: format!("{}/", r.path),
                    repo,
                    commit: commit.clone(),
                }),
                Some((_, _, commit, _)) => {
                    return Err(refuse(
                        &repo,
                        format!(
                            "the receipt of the base in this repository is for commit {commit}, but the base installs {} as commit {want}",
                            r.source.repo_id
                        ),
                    ));
                }
                None => {
                    return Err(refuse(
                        &repo,
                        format!(
                            "needs {} version {} installed by airlock in this cache repository too ({} is in the base, and this delta installs onto it): no receipt of airlock's there names the manifest sha256 {}",
                            m.name, base.version, r.source.repo_id, base.manifest_sha256
                        ),
                    ));
                }
            }
        }
        let manifest = found.swap_remove(0).3;
        Ok(CacheBase {
            parts,
            manifest,
            name: m.name.clone(),
            version: m.version,
            base_version: base.version,
        })
    }

    /// The snapshot holding base file `path`, and the file's path in that snapshot.
    fn part_of<'p>(&self, path: &'p str) -> Option<(&CachePart, &'p str)> {
        self.parts
            .iter()
            .find_map(|p| Some((p, path.strip_prefix(p.prefix.as_str())?)))
    }
}

/// One snapshot of a [`CacheBase`].
struct CachePart {
    prefix: String,
    repo: PathBuf,
    commit: String,
}

/// The receipt in `repo`'s trace folder whose manifest hashes to `manifest_sha256`, verified
/// against `trust`, with the commit it was installed as; `None` when no receipt has that
/// digest.
fn find_receipt(
    repo: &Path,
    manifest_sha256: &str,
    trust: &Policy,
) -> Result<Option<(String, Signed)>> {
    for (commit, dir) in hfcache::receipts(repo)? {
        let mpath = dir.join(crate::manifest::MANIFEST_NAME);
        let spath = dir.join(crate::manifest::SIGNATURE_NAME);
        let bytes = match fsio::read_capped(&mpath, MAX_MANIFEST_BYTES, fsio::Follow::Never)
            .map_err(fsio::Error::into_cause)
        {
            Ok(b) => b,
            Err(fsio::Cause::NotFound) => continue,
            Err(e) => return Err(Error::io(&mpath, e.into())),
        };
        if hex::encode(Sha256::digest(&bytes)) != manifest_sha256 {
            continue;
        }
        return Ok(Some((
            commit,
            receipt::verify_files(&mpath, &spath, trust)?,
        )));
    }
    Ok(None)
}

fn cache_needs(name: &str, base_version: u64) -> String {
    format!(
        "this delta needs {name} version {base_version} in the cache, installed by airlock (unpack its full bundle with --hf-cache first, or the deltas up to it, in order)"
    )
}

impl Base for CacheBase {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&mut self, b: &FileEntry) -> Result<File> {
        let Some((part, rel)) = self.part_of(&b.path) else {
            return Err(self.refuse(format!(
                "the delta takes the base file {:?}, of a repository this cache's base does not hold",
                b.path
            )));
        };
        hfcache::open_snapshot_file(&part.repo, &part.commit, rel)
            .map_err(|e| self.rotten(b, format!("cannot open it ({e})")))
    }

    fn refuse(&self, reason: String) -> Error {
        Error::DeltaBase {
            path: self
                .parts
                .first()
                .map(|p| p.repo.clone())
                .unwrap_or_default(),
            reason,
            todo: cache_needs(&self.name, self.base_version),
        }
    }

    fn rotten(&self, b: &FileEntry, what: String) -> Error {
        let path = match self.part_of(&b.path) {
            Some((part, rel)) => part.repo.join("snapshots").join(&part.commit).join(rel),
            None => PathBuf::from(&b.path),
        };
        Error::DeltaBase {
            path,
            reason: format!(
                "the base file {:?} no longer matches the receipt airlock left in the cache: {what}",
                b.path
            ),
            todo: format!(
                "restore the base: unpack {} version {} into the cache again, then apply this delta; or unpack the full bundle of version {}",
                self.name, self.base_version, self.version
            ),
        }
    }
}

/// Publishes into a repository that exists (at `repo`): new blobs (existing ones reused only
/// after they hash to their names), the snapshot (renamed in, or merged and swapped in, in one
/// step), and last the ref; each from the staged tree's handles into the repository's, each
/// step recorded in `txn` so a failure undoes them all. Returns the blob tally, what happened
/// to the snapshot, and the commit the ref named before.
#[allow(clippy::too_many_arguments)]
fn update_repo(
    repo: &Path,
    plan: &Plan,
    work: &WorkDir,
    staged: &Staged,
    staged_blobs: &OwnedFd,
    m: &Manifest,
    etags: &[String],
    txn: &mut Txn,
    progress: &dyn Progress,
) -> Result<(BlobTally, SnapshotState, Option<String>)> {
    let has_ref = plan.revision != plan.commit;
    // Nothing below is written through a link planted in the repository.
    let dirs = hfcache::open_repo_dirs_nofollow(repo, has_ref.then_some(plan.revision.as_str()))?;
    let repo_fd: Dir = Arc::new(dirs.repo);
    let snapshot = repo.join("snapshots").join(&plan.commit);
    // Decide about the snapshot before touching anything.
    let existing = match &dirs.snapshots {
        None => None,
        Some(snapshots) => match fsio::stat_at(snapshots, plan.commit.as_str()) {
            Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {
                let fd = fsio::open_dir_at(snapshots, plan.commit.as_str())
                    .map_err(|e| Error::io(&snapshot, e.into()))?;
                Some((fd, read_existing(&snapshot)?))
            }
            Ok(_) => {
                return Err(Error::HfCache {
                    path: snapshot.clone(),
                    reason: "exists and is not a directory".into(),
                });
            }
            Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => None,
            Err(e) => return Err(Error::io(&snapshot, e.into())),
        },
    };
    let complete = match &existing {
        Some((_, ex)) => compare_existing(&snapshot, ex, m, etags)?,
        None => false,
    };

    // Blobs: new ones renamed in, existing ones reused only if they hash to their name.
    let blobs = txn.ensure_inner(&repo_fd, repo, "blobs")?;
    let tally = place_blobs(
        &blobs,
        &repo.join("blobs"),
        staged_blobs,
        m,
        etags,
        txn,
        progress,
    )?;

    // The snapshot: renamed in, or merged and swapped in, in one step.
    let snapshots = txn.ensure_inner(&repo_fd, repo, "snapshots")?;
    let commit = plan.commit.as_str();
    let snapshot_state = match existing {
        None => {
            fsio::rename_at(
                &*staged.snapshots,
                commit,
                &*snapshots,
                commit,
                RenameFlags::NOREPLACE,
            )
            .map_err(|e| Error::io(&snapshot, e.into()))?;
            txn.undo.push(Undo::RemoveTree(
                snapshots.clone(),
                commit.to_string(),
                snapshot.clone(),
            ));
            SnapshotState::Created
        }
        Some(_) if complete => SnapshotState::Unchanged,
        Some((fd, ex)) => {
            let staged_snapshot = staged.path.join("snapshots").join(commit);
            merge_existing(&fd, &snapshot, &ex, &staged.snapshot, &staged_snapshot)?;
            durable::sync_dir_fd(&staged.snapshot, &staged_snapshot)?;
            fsio::rename_at(
                &*staged.snapshots,
                commit,
                &*snapshots,
                commit,
                RenameFlags::EXCHANGE,
            )
            .map_err(|e| Error::io(&snapshot, e.into()))?;
            txn.undo.push(Undo::Exchange(
                staged.snapshots.clone(),
                commit.to_string(),
                snapshots.clone(),
                commit.to_string(),
            ));
            SnapshotState::Merged
        }
    };
    durable::sync_dir_fd(&*snapshots, &repo.join("snapshots"))?;

    // Last, the ref.
    let previous_commit = if has_ref {
        write_ref(&repo_fd, repo, &plan.revision, commit, work, txn)?
    } else {
        None
    };
    Ok((tally, snapshot_state, previous_commit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_climb_to_the_repository() {
        assert_eq!(blob_link("config.json", "e"), "../../blobs/e");
        assert_eq!(blob_link("a/b/c.bin", "e"), "../../../../blobs/e");
        let c = derived_commit(b"{}\n");
        assert!(hfcache::is_commit(&c));
        assert_eq!(c, &hex::encode(Sha256::digest(b"{}\n"))[..40]);
    }

    fn entry(path: &str, bytes: &[u8]) -> FileEntry {
        FileEntry {
            path: path.into(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
            executable: false,
            from: None,
        }
    }

    fn stream(sink: &mut BlobSink, f: &FileEntry, bytes: &[u8]) -> Result<()> {
        sink.begin_file(f)?;
        sink.data(bytes)?;
        sink.end_file(f)
    }

    #[test]
    fn a_blob_is_staged_because_the_sink_streamed_it_never_because_its_name_is_there() {
        let t = tempfile::tempdir().unwrap();
        let blobs = fsio::open_dir_path(t.path(), fsio::Follow::Never).unwrap();
        let a = entry("a.txt", b"same\n");
        let b = entry("b.txt", b"same\n");
        let c = entry("c.txt", b"other\n");
        let mut g = GitBlobSha1::new(a.size);
        g.update(b"same\n");
        let git = g.finish();
        let syncer = SyncThread::new();
        let mut sink = BlobSink {
            repos: vec![SinkRepo {
                prefix: String::new(),
                blobs,
                blobs_path: t.path().to_path_buf(),
                staged: HashMap::new(),
            }],
            etags: HashMap::from([
                ("a.txt".to_string(), None),
                ("b.txt".to_string(), None),
                // Another content under the SHA-256 etag of a: manifest validation refuses
                // that, and the sink does not rely on it.
                ("c.txt".to_string(), Some(a.sha256.clone())),
            ]),
            current: None,
            incoming: 0,
            placed: HashMap::new(),
            held: HashSet::new(),
            skipping: false,
            syncer: syncer.sender(),
        };
        // A file already at a blob's name (planted, whoever could) is not taken for it.
        std::fs::write(t.path().join(&git), b"planted\n").unwrap();
        let err = stream(&mut sink, &a, b"same\n").unwrap_err();
        assert!(err.to_string().contains("File exists"), "{err}");
        std::fs::remove_file(t.path().join(&git)).unwrap();
        // The same content twice: one blob, the first file's.
        stream(&mut sink, &a, b"same\n").unwrap();
        stream(&mut sink, &b, b"same\n").unwrap();
        assert_eq!(std::fs::read(t.path().join(&git)).unwrap(), b"same\n");
        assert_eq!(sink.placed["b.txt"], git);
        // Other content under an etag staged before is refused, not counted as the same.
        sink.etags.insert("a.txt".into(), Some(a.sha256.clone()));
        stream(&mut sink, &a, b"same\n").unwrap();
        let err = stream(&mut sink, &c, b"other\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("of another file of the bundle, whose content differs"),
            "{err}"
        );
        drop(sink);
        syncer.finish().unwrap();
        // (The temporary files of the refused ones go with the work directory.)
        let mut names: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".incoming-"))
            .collect();
        names.sort();
        let mut want = vec![git, a.sha256.clone()];
        want.sort();
        assert_eq!(names, want);
    }

    /// One repository's report with a finding and an unchecked path of its own, each under
    /// its snapshot (no folder).
    fn installed(id: &str) -> HfInstalled {
        let mut notes = InstallNotes::default();
        notes.findings.push(crate::inspect::Finding {
            severity: crate::inspect::Severity::Warning,
            code: "x",
            path: "config.json".into(),
            problem: "p".into(),
            fix: "f".into(),
        });
        notes.unchecked.push("deep/file".into());
        HfInstalled {
            cache: PathBuf::from("c"),
            repo_id: id.into(),
            repo_type: "model".into(),
            repo_folder: PathBuf::from("c").join(id),
            revision: "main".into(),
            commit: "0".repeat(40),
            commit_derived: false,
            snapshot: PathBuf::from("s"),
            snapshot_state: SnapshotState::Created,
            ref_path: None,
            previous_commit: None,
            blobs_written: 1,
            blobs_reused: 0,
            blobs_repaired: Vec::new(),
            notes,
            repos: Vec::new(),
        }
    }

    #[test]
    fn the_gathered_notes_name_every_repository_by_its_folder() {
        let all = gather(vec![
            ("models--o--a/".into(), installed("o/a")),
            ("models--o--b/".into(), installed("o/b")),
        ]);
        let findings: Vec<&str> = all.notes.findings.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            findings,
            ["models--o--a/config.json", "models--o--b/config.json"]
        );
        // The first repository's unchecked paths too (they once lacked their folder).
        assert_eq!(
            all.notes.unchecked,
            ["models--o--a/deep/file", "models--o--b/deep/file"]
        );
        assert_eq!(all.repos.len(), 2);
        assert!(all.repos.iter().all(|r| r.notes.findings.is_empty()));
        assert_eq!(all.repo_id, "o/a");
        // A bundle of one: its report as it is.
        let one = gather(vec![(String::new(), installed("o/a"))]);
        assert_eq!(one.notes.unchecked, ["deep/file"]);
        assert!(one.repos.is_empty());
    }
}
