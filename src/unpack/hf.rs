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
//! `repo/snapshots/<commit>/` is built with relative symlinks. Then:
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
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::notes::{self, InstallNotes};
use crate::bundle::open::{Opened, Signed};
use crate::delta::apply::Base;
use crate::durable::sync_dir;
use crate::entries::EntrySink;
use crate::error::{Error, Result};
use crate::fsio::{self, exchange, rename_noreplace};
use crate::hfcache::{self, RefState, etag::GitBlobSha1, names::EtagKind};
use crate::manifest::{FileEntry, MAX_MANIFEST_BYTES, Manifest};
use crate::pipeline::{Fed, Target};
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
}

/// The commit id a bundle without a `source` is installed under: the first 40 hex digits of
/// the SHA-256 of its exact `manifest.json` bytes.
pub fn derived_commit(manifest_bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(manifest_bytes))[..40].to_string()
}

/// The relative symlink target huggingface_hub writes for a snapshot file at `path`.
pub fn blob_link(path: &str, etag: &str) -> String {
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
    let m = &opened.manifest;
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
    hfcache::validate_repo_id(&repo_id).map_err(Error::Usage)?;
    let repo_type = opts
        .repo_type
        .clone()
        .or_else(|| src.map(|s| s.repo_type.clone()))
        .unwrap_or_else(|| "model".into());
    hfcache::validate_repo_type(&repo_type).map_err(Error::Usage)?;
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
        hfcache::validate_revision(&revision).map_err(Error::Usage)?;
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

/// One step to undo if the install fails after it.
enum Undo {
    RemoveFile(PathBuf),
    RemoveDir(PathBuf),
    RemoveTree(PathBuf),
    /// Exchange these two back.
    Exchange(PathBuf, PathBuf),
}

/// The staging directory and everything to undo; dropping it without `commit` restores the
/// cache.
struct Txn {
    undo: Vec<Undo>,
    committed: bool,
    staging: Option<Staging>,
    /// Held while the cache changes: a signal waits until every step is done or undone.
    commit: Option<staging::CommitGuard>,
    /// Directories created outside the repository folder (the cache itself, `.locks`), with
    /// whether to remove them (when empty) even after success.
    outer: Vec<(PathBuf, bool)>,
}

impl Txn {
    /// Creates `dir` and its missing ancestors, recording each as an outer directory.
    fn create_outer(&mut self, dir: &Path, always: bool) -> Result<()> {
        for d in missing_ancestors(dir) {
            fs::create_dir(&d).map_err(|e| Error::io(&d, e))?;
            self.outer.push((d, always));
        }
        Ok(())
    }

    /// Creates `dir` and its missing ancestors inside the repository folder, undone on failure.
    fn create_inner(&mut self, dir: &Path) -> Result<()> {
        for d in missing_ancestors(dir) {
            fs::create_dir(&d).map_err(|e| Error::io(&d, e))?;
            set_mode(&d, 0o755)?;
            self.undo.push(Undo::RemoveDir(d));
        }
        Ok(())
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if !self.committed {
            for step in self.undo.drain(..).rev() {
                let _ = match step {
                    Undo::RemoveFile(p) => fs::remove_file(p),
                    Undo::RemoveDir(p) => fs::remove_dir(p),
                    Undo::RemoveTree(p) => fs::remove_dir_all(p),
                    Undo::Exchange(a, b) => exchange(&a, &b),
                };
            }
        }
        // Then let a pending signal in (it must not wait for the removal below, which takes
        // the same guard), and remove the work directory (releasing its lock).
        self.commit.take();
        self.staging.take();
        for (dir, always) in self.outer.drain(..).rev() {
            if always || !self.committed {
                let _ = fs::remove_dir(dir);
            }
        }
    }
}

fn missing_ancestors(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.as_os_str().is_empty() || fs::symlink_metadata(p).is_ok() {
            break;
        }
        out.push(p.to_path_buf());
        d = p.parent();
    }
    out.reverse();
    out
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| Error::io(path, e))
}

/// Streams each file into `blobs/.incoming-<n>`, checks or computes its etag, and renames it
/// to `blobs/<etag>`. Files may arrive in any order (a delta sends its copies first).
struct BlobSink {
    blobs: PathBuf,
    etags: HashMap<String, Option<String>>,
    current: Option<(File, PathBuf, Option<GitBlobSha1>)>,
    /// The etag of each file streamed so far, by path.
    placed: HashMap<String, String>,
    syncer: crossbeam_channel::Sender<(File, PathBuf)>,
}

impl EntrySink for BlobSink {
    fn dir(&mut self, _path: &str) -> Result<()> {
        // Directories are made in the snapshot from the manifest once the stream has passed.
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        let tmp = self.blobs.join(format!(".incoming-{}", self.placed.len()));
        let f = fsio::create_new(&tmp, 0o644).map_err(|e| Error::io(&tmp, e))?;
        let git = match self.etags.get(&file.path) {
            Some(Some(e)) => EtagKind::of(e) == Some(EtagKind::GitSha1),
            _ => true,
        };
        self.current = Some((f, tmp, git.then(|| GitBlobSha1::new(file.size))));
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        let (f, tmp, git) = self.current.as_mut().expect("begin_file came first");
        if let Some(g) = git {
            g.update(bytes);
        }
        f.write_all(bytes).map_err(|e| Error::io(&*tmp, e))
    }

    fn end_file(&mut self, file: &FileEntry) -> Result<()> {
        let (f, tmp, git) = self.current.take().expect("begin_file came first");
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
        let blob = self.blobs.join(&etag);
        if blob.exists() {
            // The same content twice in the bundle: one blob.
            fs::remove_file(&tmp).map_err(|e| Error::io(&tmp, e))?;
        } else {
            fs::rename(&tmp, &blob).map_err(|e| Error::io(&blob, e))?;
            let _ = self.syncer.send((f, blob));
        }
        self.placed.insert(file.path.clone(), etag);
        Ok(())
    }
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

/// Adds the entries of the existing snapshot that the bundle lacks to the staged one.
fn merge_existing(
    existing_dir: &Path,
    existing: &BTreeMap<String, Existing>,
    staged: &Path,
) -> Result<()> {
    for (rel, kind) in existing {
        let to = staged.join(rel);
        if fs::symlink_metadata(&to).is_ok() {
            continue;
        }
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        match kind {
            Existing::Dir => fs::create_dir_all(&to).map_err(|e| Error::io(&to, e))?,
            Existing::Link(target) => {
                std::os::unix::fs::symlink(target, &to).map_err(|e| Error::io(&to, e))?
            }
            Existing::File => {
                fs::hard_link(existing_dir.join(rel), &to).map_err(|e| Error::io(&to, e))?
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

/// Renames a fully staged repository folder (blobs, snapshot and ref) into place.
fn publish_new_repo(staged_repo: &Path, repo: &Path, plan: &Plan, txn: &mut Txn) -> Result<()> {
    if plan.revision != plan.commit {
        let staged_ref = staged_repo.join("refs").join(&plan.revision);
        let parent = staged_ref.parent().expect("under refs");
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        crate::durable::write_synced(&staged_ref, plan.commit.as_bytes(), 0o644)?;
        let mut d = parent.to_path_buf();
        while d != staged_repo {
            sync_dir(&d)?;
            d = d.parent().expect("under the staged repo").to_path_buf();
        }
    }
    sync_dir(staged_repo)?;
    rename_noreplace(staged_repo, repo).map_err(|e| Error::io(repo, e))?;
    txn.undo.push(Undo::RemoveTree(repo.to_path_buf()));
    sync_dir(repo.parent().expect("inside the cache"))
}

/// What [`place_blobs`] did.
struct BlobTally {
    written: u64,
    reused: u64,
    repaired: Vec<PathBuf>,
}

/// Moves the staged blobs into the repository's `blobs/`: a new one by rename, an existing one
/// kept only if it hashes to its name, and replaced by the verified copy if it does not.
fn place_blobs(
    blobs: &Path,
    staged_blobs: &Path,
    m: &Manifest,
    etags: &[String],
    txn: &mut Txn,
    progress: &dyn Progress,
) -> Result<BlobTally> {
    txn.create_inner(blobs)?;
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
        .filter(|(_, e)| blobs.join(e).exists())
        .map(|(f, _)| f.size)
        .sum();
    progress.start("check existing blobs", check_bytes);
    for etag in unique {
        let staged = staged_blobs.join(etag);
        let dest = blobs.join(etag);
        match fs::symlink_metadata(&dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match rename_noreplace(&staged, &dest) {
                    Ok(()) => {
                        txn.undo.push(Undo::RemoveFile(dest));
                        tally.written += 1;
                        continue;
                    }
                    // Another writer got there first: check theirs like any existing blob.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::io(&dest, e)),
                }
            }
            Err(e) => return Err(Error::io(&dest, e)),
            Ok(meta) if meta.is_dir() => {
                return Err(Error::HfCache {
                    path: dest,
                    reason: "is a directory where a blob belongs".into(),
                });
            }
            Ok(_) => {}
        }
        let kind = EtagKind::of(etag).expect("etags are checked");
        match hfcache::hash_file(&dest, kind, progress) {
            Ok(h) if h == *etag => tally.reused += 1,
            // Damaged, or a link into a shared store whose payload is gone: the verified copy
            // replaces the entry (the link itself, never the shared payload).
            Ok(_) => {
                fs::rename(&staged, &dest).map_err(|e| Error::io(&dest, e))?;
                tally.repaired.push(dest);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::rename(&staged, &dest).map_err(|e| Error::io(&dest, e))?;
                tally.repaired.push(dest);
            }
            Err(e) => return Err(Error::io(&dest, e)),
        }
    }
    progress.finish();
    sync_dir(blobs)?;
    Ok(tally)
}

/// Points `ref_path` at `commit` (written in `staging`, renamed over the old ref); returns the
/// commit it named before, if it differed.
fn write_ref(
    ref_path: &Path,
    commit: &str,
    staging: &Path,
    txn: &mut Txn,
) -> Result<Option<String>> {
    // Read without following a link, blocking or reading past a commit id.
    let old = match hfcache::read_ref(ref_path)? {
        RefState::Commit(c) => Some(c),
        RefState::Missing | RefState::Bad(_) => None,
    };
    if old.as_deref() == Some(commit) {
        return Ok(None);
    }
    let parent = ref_path.parent().expect("under refs");
    txn.create_inner(parent)?;
    let tmp = staging.join("ref.tmp");
    crate::durable::write_synced(&tmp, commit.as_bytes(), 0o644)?;
    fs::rename(&tmp, ref_path).map_err(|e| Error::io(ref_path, e))?;
    sync_dir(parent)?;
    Ok(old)
}

/// Installs into a Hugging Face cache (module documentation).
pub struct HfTarget {
    opts: HfUnpackOptions,
    begun: Option<HfBegun>,
}

/// What [`Target::begin`] set up. Field order is drop order: the sink before the sync thread,
/// the transaction (which undoes what it did and removes the work directory) last.
struct HfBegun {
    sink: BlobSink,
    syncer: SyncThread,
    plan: Plan,
    repo: PathBuf,
    staging: PathBuf,
    cleanup: Cleanup,
    txn: Txn,
}

impl HfTarget {
    /// A target installing with `opts`.
    pub fn new(opts: HfUnpackOptions) -> Self {
        HfTarget { opts, begun: None }
    }
}

impl Target for HfTarget {
    type Done = HfInstalled;

    fn begin(&mut self, opened: &Opened, _progress: &dyn Progress) -> Result<()> {
        let m = &opened.manifest;
        let opts = &self.opts;
        let plan = plan(opened, opts)?;
        let cache = &opts.cache;
        let folder_name = hfcache::repo_folder_name(&plan.repo_type, &plan.repo_id);
        let repo = cache.join(&folder_name);
        let mut txn = Txn {
            undo: Vec::new(),
            committed: false,
            staging: None,
            commit: None,
            outer: Vec::new(),
        };
        txn.create_outer(cache, false)?;
        if !fs::metadata(cache)
            .map_err(|e| Error::io(cache, e))?
            .is_dir()
        {
            return Err(Error::Usage(format!(
                "{} is not a directory",
                cache.display()
            )));
        }
        let locks = cache.join(".locks");
        let cleanup = if locks.is_dir() {
            staging::clean_stale(&locks)?
        } else {
            staging::Cleanup::default()
        };
        if opts.check_space {
            notes::check_space(cache, notes::space_needed(m, 0))?;
        }
        txn.create_outer(&locks, true)?;
        let work = Staging::create(&locks, &folder_name)?;
        let staging = work.path();
        txn.staging = Some(work);
        let staged_repo = staging.join("repo");
        let staged_blobs = staged_repo.join("blobs");
        let staged_snapshots = staged_repo.join("snapshots");
        let staged_snapshot = staged_snapshots.join(&plan.commit);
        for d in [
            &staged_repo,
            &staged_blobs,
            &staged_snapshots,
            &staged_snapshot,
        ] {
            fs::create_dir(d).map_err(|e| Error::io(d, e))?;
            set_mode(d, 0o755)?;
        }
        let syncer = SyncThread::new();
        let sink = BlobSink {
            blobs: staged_blobs,
            etags: plan.etags.clone(),
            current: None,
            placed: HashMap::with_capacity(m.files.len()),
            syncer: syncer.sender(),
        };
        self.begun = Some(HfBegun {
            sink,
            syncer,
            plan,
            repo,
            staging,
            cleanup,
            txn,
        });
        Ok(())
    }

    type Base = CacheBase;

    fn base(&mut self, opened: &Opened) -> Result<CacheBase> {
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
            plan,
            repo,
            staging,
            cleanup,
            mut txn,
        } = self.begun.take().expect("begin came first");
        let m = &opened.manifest;
        let cache = &self.opts.cache;
        let BlobSink {
            blobs: staged_blobs,
            placed,
            syncer: sync_tx,
            current,
            ..
        } = sink;
        drop(current);
        drop(sync_tx);
        syncer.finish()?;
        let etags: Vec<String> = m
            .files
            .iter()
            .map(|f| {
                placed
                    .get(&f.path)
                    .cloned()
                    .expect("the tally saw every file")
            })
            .collect();
        let staged_repo = staging.join("repo");
        let staged_snapshots = staged_repo.join("snapshots");
        let staged_snapshot = staged_snapshots.join(&plan.commit);
        // 2. The snapshot, as huggingface_hub lays it out: directories, relative links.
        for d in &m.directories {
            let p = staged_snapshot.join(d);
            fs::create_dir(&p).map_err(|e| Error::io(&p, e))?;
            set_mode(&p, 0o755)?;
        }
        for (f, etag) in m.files.iter().zip(&etags) {
            let p = staged_snapshot.join(&f.path);
            std::os::unix::fs::symlink(blob_link(&f.path, etag), &p)
                .map_err(|e| Error::io(&p, e))?;
        }
        for d in m.directories.iter().rev() {
            sync_dir(&staged_snapshot.join(d))?;
        }
        for d in [&staged_snapshot, &staged_snapshots, &staged_blobs] {
            sync_dir(d)?;
        }

        // The model-format checks on exactly the bytes about to become visible.
        let prefix = format!("snapshots/{}/", plan.commit);
        let mut notes = InstallNotes::new(cleanup, &staged_repo, &prefix, m)?;
        notes.repaired_volumes = fed.repaired_volumes;

        // 3. Make it visible. A signal now waits until every step is done (or undone).
        txn.commit = Some(staging::commit_guard());
        let snapshot = repo.join("snapshots").join(&plan.commit);
        let ref_path =
            (plan.revision != plan.commit).then(|| repo.join("refs").join(&plan.revision));
        let (tally, snapshot_state, previous_commit) = match fs::symlink_metadata(&repo) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A new repository: refs included, it appears in one rename.
                publish_new_repo(&staged_repo, &repo, &plan, &mut txn)?;
                let tally = BlobTally {
                    written: etags.iter().collect::<HashSet<_>>().len() as u64,
                    reused: 0,
                    repaired: Vec::new(),
                };
                (tally, SnapshotState::Created, None)
            }
            Err(e) => return Err(Error::io(&repo, e)),
            Ok(meta) if !meta.is_dir() => {
                return Err(Error::Usage(format!(
                    "{} exists and is not a directory",
                    repo.display()
                )));
            }
            Ok(_) => update_repo(
                &repo,
                &plan,
                ref_path.as_deref(),
                &staged_blobs,
                &staged_snapshot,
                &staging,
                m,
                &etags,
                &mut txn,
                progress,
            )?,
        };
        // airlock's trace, so a later `check --hf-cache` knows the fix is another unpack.
        let trace =
            serde_json::json!({"bundle": m.name, "version": m.version, "revision": plan.revision});
        hfcache::leave_trace(&repo, &plan.commit, &trace.to_string())?;
        // The receipt, so a later delta can prove this snapshot is its base.
        hfcache::leave_receipt(&repo, &plan.commit, &receipt_files(opened))?;
        txn.committed = true;
        drop(txn);
        Ok(HfInstalled {
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
        })
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
pub struct CacheBase {
    repo: PathBuf,
    commit: String,
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
            repo: repo.to_path_buf(),
            commit,
            manifest: signed.manifest,
            name: m.name.clone(),
            version: m.version,
            base_version: base.version,
        })
    }
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
        let bytes = match fsio::read_capped(&mpath, MAX_MANIFEST_BYTES, fsio::Follow::Never) {
            Ok(b) => b,
            Err(fsio::OpenError::NotFound) => continue,
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
        hfcache::open_snapshot_file(&self.repo, &self.commit, &b.path)
            .map_err(|e| self.rotten(b, format!("cannot open it ({e})")))
    }

    fn refuse(&self, reason: String) -> Error {
        Error::DeltaBase {
            path: self.repo.clone(),
            reason,
            todo: cache_needs(&self.name, self.base_version),
        }
    }

    fn rotten(&self, b: &FileEntry, what: String) -> Error {
        Error::DeltaBase {
            path: self.repo.join("snapshots").join(&self.commit).join(&b.path),
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

/// Publishes into a repository that exists: new blobs (existing ones reused only after they
/// hash to their names), the snapshot (renamed in, or merged and swapped in, in one step), and
/// last the ref; each step recorded in `txn` so a failure undoes them all. Returns the blob
/// tally, what happened to the snapshot, and the commit the ref named before.
#[allow(clippy::too_many_arguments)]
fn update_repo(
    repo: &Path,
    plan: &Plan,
    ref_path: Option<&Path>,
    staged_blobs: &Path,
    staged_snapshot: &Path,
    staging: &Path,
    m: &Manifest,
    etags: &[String],
    txn: &mut Txn,
    progress: &dyn Progress,
) -> Result<(BlobTally, SnapshotState, Option<String>)> {
    let snapshot = repo.join("snapshots").join(&plan.commit);
    // Nothing below is written through a link planted in the repository.
    hfcache::open_repo_dirs_nofollow(repo, ref_path.is_some().then_some(&*plan.revision))?;
    // Decide about the snapshot before touching anything.
    let existing = match fs::symlink_metadata(&snapshot) {
        Ok(meta) if meta.is_dir() => Some(read_existing(&snapshot)?),
        Ok(_) => {
            return Err(Error::HfCache {
                path: snapshot.clone(),
                reason: "exists and is not a directory".into(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(&snapshot, e)),
    };
    let complete = match &existing {
        Some(ex) => compare_existing(&snapshot, ex, m, etags)?,
        None => false,
    };

    // Blobs: new ones renamed in, existing ones reused only if they hash to their name.
    let tally = place_blobs(&repo.join("blobs"), staged_blobs, m, etags, txn, progress)?;

    // The snapshot: renamed in, or merged and swapped in, in one step.
    let snapshots = repo.join("snapshots");
    txn.create_inner(&snapshots)?;
    let snapshot_state = match existing {
        None => {
            rename_noreplace(staged_snapshot, &snapshot).map_err(|e| Error::io(&snapshot, e))?;
            txn.undo.push(Undo::RemoveTree(snapshot.clone()));
            SnapshotState::Created
        }
        Some(_) if complete => SnapshotState::Unchanged,
        Some(ex) => {
            merge_existing(&snapshot, &ex, staged_snapshot)?;
            sync_dir(staged_snapshot)?;
            exchange(staged_snapshot, &snapshot).map_err(|e| Error::io(&snapshot, e))?;
            txn.undo.push(Undo::Exchange(
                staged_snapshot.to_path_buf(),
                snapshot.clone(),
            ));
            SnapshotState::Merged
        }
    };
    sync_dir(&snapshots)?;

    // Last, the ref.
    let previous_commit = match &ref_path {
        Some(r) => write_ref(r, &plan.commit, staging, txn)?,
        None => None,
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
}
