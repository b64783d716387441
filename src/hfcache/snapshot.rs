//! Reading one snapshot out of the cache: refs, the hub's cached listing of a commit, and the
//! snapshot's files with the blobs they link to, checked against the layout's rules
//! ([`super::layout`]) and the listing before anything is packed.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use rustix::fs::FileType;

use super::layout::{self, BlobFile};
use super::names::{
    EtagKind, check_repo_id, check_repo_type, check_revision, is_commit, repo_folder_name,
};
use crate::error::{Error, Result};
use crate::fsio;
use crate::inspect::{Finding, TreeChecks};
use crate::paths::{self, CollisionSet};
use crate::scan::{self, ScanEntry};

/// The most a ref file may hold: a commit id is 40 bytes; more than this is reported without
/// reading further.
pub(crate) const REF_MAX_BYTES: u64 = 128;

/// The largest `trees/<commit>.json` read (a listing of about 200 000 files); a larger one is
/// ignored with a note, as an unreadable one is.
pub(crate) const LISTING_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Resolves `revision` in `repo_folder` as huggingface_hub does offline: a 40-hex commit is
/// taken as it is; anything else is read from `refs/<revision>`, which must hold exactly a
/// 40-hex commit.
pub fn resolve_revision(repo_folder: &Path, revision: &str) -> Result<String> {
    if is_commit(revision) {
        return Ok(revision.to_string());
    }
    check_revision(revision).map_err(|e| Error::Usage(e.to_string()))?;
    let ref_path = repo_folder.join("refs").join(revision);
    match read_ref(&ref_path)? {
        RefState::Commit(c) => Ok(c),
        RefState::Missing => {
            let known: Vec<String> = list_refs(repo_folder).into_iter().map(|(n, _)| n).collect();
            Err(Error::NotCached {
                path: ref_path,
                reason: format!(
                    "does not exist: the cache holds no revision {revision:?} of this repository (its refs: {}); pass --revision with a branch, tag or commit it has",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            })
        }
        RefState::Bad(reason) => Err(Error::HfCache {
            path: ref_path,
            reason,
        }),
    }
}

/// What a ref file holds.
#[derive(Debug, PartialEq, Eq)]
pub enum RefState {
    /// Exactly a 40-hex commit id.
    Commit(String),
    /// Nothing is there.
    Missing,
    /// Anything else, with the reason in words: a symlink, a FIFO or device, more than
    /// [`REF_MAX_BYTES`], whitespace around a commit, or no commit id.
    Bad(String),
}

/// Reads the ref file `path` without following a link or blocking, and at most
/// [`REF_MAX_BYTES`] + 1 bytes of it.
pub fn read_ref(path: &Path) -> Result<RefState> {
    let bytes = match layout::read_limited(path, REF_MAX_BYTES) {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            return Ok(RefState::Bad(format!(
                "holds more than a commit id (over {REF_MAX_BYTES} bytes); huggingface_hub writes the 40-hex commit only"
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(RefState::Missing),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            let what = match fs::read_link(path) {
                Ok(target) => format!("is a symlink to {}", target.display()),
                Err(_) => e.to_string(),
            };
            return Ok(RefState::Bad(format!(
                "{what}; a ref is a regular file holding a commit id, and airlock does not follow links in refs/"
            )));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    if is_commit(&text) {
        return Ok(RefState::Commit(text.into_owned()));
    }
    let trimmed = text.trim();
    Ok(RefState::Bad(if is_commit(trimmed) {
        format!(
            "holds the commit {trimmed} with surrounding whitespace ({:?}); huggingface_hub reads the file unstripped, so offline lookups of this ref do not find the snapshot. Rewrite it without the newline: printf %s {trimmed} > {}",
            text,
            path.display()
        )
    } else {
        let shown: String = text.chars().take(80).collect();
        format!("does not hold a 40-hex commit id (it holds {shown:?})")
    }))
}

/// The entries under `repo_folder/refs` that are not directories, sorted by ref name (`main`,
/// `refs/pr/1`, ...), with their paths. Links are listed, never followed (a linked folder is
/// listed as an entry, and its contents are not).
pub fn list_refs(repo_folder: &Path) -> Vec<(String, PathBuf)> {
    let refs = repo_folder.join("refs");
    if !matches!(layout::real_dir(&refs), Ok(true)) {
        return Vec::new();
    }
    let mut out: Vec<(String, PathBuf)> = walkdir::WalkDir::new(&refs)
        .min_depth(1)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_type().is_dir())
        .filter_map(|e| {
            e.path()
                .strip_prefix(&refs)
                .ok()
                .and_then(|p| p.to_str())
                .map(|n| (n.to_string(), e.path().to_path_buf()))
        })
        .collect();
    out.sort();
    out
}

/// One file of the hub's listing of a commit (`trees/<commit>.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedFile {
    /// The etag the hub publishes: `lfs_sha256` for LFS files, else `blob_id`.
    pub etag: String,
    /// The file's size.
    pub size: u64,
}

/// Reads `trees/<commit>.json` if huggingface_hub cached one. Like huggingface_hub, a listing
/// that is unreadable, not JSON or of another format version is ignored (`Ok(None)`, with a
/// note saying why).
pub fn read_listing(
    repo_folder: &Path,
    commit: &str,
) -> (Option<BTreeMap<String, ListedFile>>, Option<String>) {
    let path = repo_folder.join("trees").join(format!("{commit}.json"));
    let bytes = match layout::read_limited(&path, LISTING_MAX_BYTES) {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            return (
                None,
                Some(format!(
                    "{}: ignored, larger than {} MiB",
                    path.display(),
                    LISTING_MAX_BYTES >> 20
                )),
            );
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (None, None),
        Err(e) => {
            return (
                None,
                Some(format!("{}: ignored, cannot be read: {e}", path.display())),
            );
        }
    };
    let ignored = |why: &str| {
        (
            None,
            Some(format!(
                "{}: ignored, as huggingface_hub would: {why}",
                path.display()
            )),
        )
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return ignored("not JSON");
    };
    if v.get("format_version").and_then(|f| f.as_u64()) != Some(1) {
        return ignored("not format_version 1");
    }
    let Some(files) = v.get("files").and_then(|f| f.as_object()) else {
        return ignored("no \"files\" object");
    };
    let mut out = BTreeMap::new();
    for (name, info) in files {
        let text = |k: &str| info.get(k).and_then(|x| x.as_str()).map(str::to_lowercase);
        let number = |k: &str| info.get(k).and_then(|x| x.as_u64());
        let (etag, size) = match text("lfs_sha256") {
            Some(sha) => (sha, number("lfs_size").or(number("size"))),
            None => match text("blob_id") {
                Some(id) => (id, number("size")),
                None => return ignored(&format!("the entry {name:?} has no blob_id")),
            },
        };
        let Some(size) = size else {
            return ignored(&format!("the entry {name:?} has no size"));
        };
        if EtagKind::of(&etag).is_none() {
            return ignored(&format!("the entry {name:?} has a malformed etag"));
        }
        out.insert(name.clone(), ListedFile { etag, size });
    }
    (Some(out), None)
}

/// One snapshot of a cached repository, ready to pack.
#[derive(Debug)]
pub struct Snapshot {
    /// The repository's folder (`CACHE/models--org--name`).
    pub repo_folder: PathBuf,
    /// The commit the revision resolved to.
    pub commit: String,
    /// `snapshots/<commit>`.
    pub dir: PathBuf,
    /// Directories and files in bundle order; a file's `source` is its blob.
    pub entries: Vec<ScanEntry>,
    /// For each file of `entries`, in order: the etag its content must hash to (the name of the
    /// blob its link points at, or the hub listing's etag for a real file), or `None` when
    /// nothing names it and the packer computes one. The packer moves them out, as it does
    /// `entries`.
    pub etags: Vec<Option<Arc<str>>>,
    /// Whether `trees/<commit>.json` was there to compare against.
    pub listed: bool,
    /// Files the hub's listing names that the snapshot lacks (a partial or interrupted
    /// download), sorted.
    pub missing: Vec<String>,
    /// Things worth telling the operator that do not stop the pack.
    pub notes: Vec<String>,
    /// The model checks of the snapshot's files (paths in the snapshot), run as the walk
    /// opened each blob ([`crate::inspect::TreeChecks`]): the findings sorted, and the paths
    /// too long for the path-based checks; or the error that stopped them (its kind and text).
    pub checked: Checked,
}

/// The model checks' findings and the paths too long for them, or the error that stopped them.
pub type Checked = std::result::Result<(Vec<Finding>, Vec<String>), (io::ErrorKind, String)>;

/// Reads snapshot `revision` of `repo_type` repository `repo_id` in `cache` for packing.
///
/// Refused, naming the file in the repository: a link to a missing blob, a link that does
/// not point at a blob of this repository, a blob whose size or name disagrees with the hub's
/// cached listing, and any `*.incomplete` download in the repository's `blobs/`. The blobs'
/// contents are checked against their names later, while the packer hashes them.
///
/// The snapshot is walked through directory handles and each blob opened once, by its name
/// below the repository's `blobs/` folder held open (no path looked up again a file): the
/// model checks run on that handle, and the bytes of a small blob are kept for the writer
/// ([`scan::Prefetched`], within `budget`, the pack's), as the directory scan does.
pub fn open_snapshot(
    cache: &Path,
    repo_type: &str,
    repo_id: &str,
    revision: &str,
    budget: &scan::PrefetchBudget,
) -> Result<Snapshot> {
    let (repo_folder, commit, dir) = locate_snapshot(cache, repo_type, repo_id, revision)?;
    let blobs = repo_folder.join("blobs");
    let has_blobs = layout::real_dir(&blobs)?;
    let blobs_fd = match has_blobs {
        true => Some(
            fsio::open_dir_path(&blobs, fsio::Follow::Never).map_err(|e| {
                layout::real_dir(&blobs)
                    .err()
                    .unwrap_or_else(|| Error::io(&blobs, e.into()))
            })?,
        ),
        false => None,
    };
    let (listing, listing_note) = read_listing(&repo_folder, &commit);
    let mut notes: Vec<String> = listing_note.into_iter().collect();
    let cache_root = repo_folder.parent().unwrap_or(&repo_folder).to_path_buf();
    let folder = repo_folder
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    let root_fd = fsio::open_dir_path(&dir, fsio::Follow::Never).map_err(|e| {
        layout::real_dir(&dir)
            .err()
            .unwrap_or_else(|| Error::io(&dir, e.into()))
    })?;
    let mut walk = Walk {
        repo_folder: &repo_folder,
        dir: &dir,
        root_fd: &root_fd,
        blobs: blobs_fd.as_ref(),
        blobs_path: &blobs,
        blobs_shared: Arc::from(blobs.as_path()),
        commit: &commit,
        has_blobs,
        listing: listing.as_ref(),
        check_prefix: format!("{folder}/snapshots/{commit}/"),
        budget,
        collisions: CollisionSet::default(),
        found: Vec::new(),
        missing_links: Vec::new(),
        missing_blob: None,
        checks: TreeChecks::default(),
    };
    walk.dir("")?;
    let Walk {
        found: mut files,
        missing_links,
        missing_blob,
        checks,
        check_prefix,
        collisions,
        ..
    } = walk;
    drop(root_fd);
    // The collision table's memory goes now, before the lists below are made.
    drop(collisions);

    // An interrupted download comes first: it explains a missing blob or file.
    if let Some(blobs_fd) = &blobs_fd {
        // The file that links to blob `etag`: the last one the walk met, as a map would keep.
        let linked = |etag: &str| {
            missing_links
                .iter()
                .rev()
                .find(|(e, _)| e == etag)
                .map(|(_, rel)| rel.clone())
                .or_else(|| {
                    files
                        .iter()
                        .rev()
                        .find(|(_, e, from_link)| *from_link && e.as_deref() == Some(etag))
                        .map(|(entry, _, _)| entry.path().to_string())
                })
        };
        if let Some((path, reason)) =
            incomplete_downloads(blobs_fd, &blobs, linked, listing.as_ref())
                .into_iter()
                .next()
        {
            return Err(Error::HfCache { path, reason });
        }
    }
    if let Some(e) = missing_blob {
        return Err(e);
    }
    // No two paths are equal, so an unstable sort gives the one order, and needs no scratch
    // list beside a million entries.
    files.sort_unstable_by(|a, b| paths::bundle_order(a.0.path(), b.0.path()));
    let mut etags: Vec<Option<Arc<str>>> = Vec::with_capacity(files.len());
    let mut entries: Vec<ScanEntry> = files
        .into_iter()
        .map(|(entry, etag, _)| {
            if matches!(entry, ScanEntry::File { .. }) {
                etags.push(etag);
            }
            entry
        })
        .collect();
    // Collected in place, in the walk's wider buffer: its tail is given back (no second list
    // of a million entries beside the first).
    entries.shrink_to_fit();
    let missing: Vec<String> = match &listing {
        Some(l) => {
            let have: std::collections::HashSet<&str> = entries
                .iter()
                .filter(|e| matches!(e, ScanEntry::File { .. }))
                .map(|e| e.path())
                .collect();
            l.keys()
                .filter(|k| !have.contains(k.as_str()))
                .cloned()
                .collect()
        }
        None => Vec::new(),
    };
    if listing.is_none() && notes.is_empty() {
        notes.push(format!(
            "no hub listing (trees/{commit}.json) is cached for this commit, so the snapshot's completeness cannot be checked; its files are checked against their blob names"
        ));
    }
    // The checks left for the end (a shard index, a config: they read other files) resolve
    // from the cache root: a blob may be a link into the cache-wide shared store.
    let checked = checks
        .finish(&cache_root)
        .map(|(findings, unchecked)| {
            let strip = |p: String| match p.strip_prefix(&check_prefix) {
                Some(rel) => rel.to_string(),
                None => p,
            };
            let findings = findings
                .into_iter()
                .map(|mut f| {
                    f.path = strip(std::mem::take(&mut f.path));
                    f
                })
                .collect();
            (findings, unchecked.into_iter().map(strip).collect())
        })
        .map_err(|e| (e.kind(), e.to_string()));
    Ok(Snapshot {
        repo_folder,
        commit,
        dir,
        entries,
        etags,
        listed: listing.is_some(),
        missing,
        notes,
        checked,
    })
}

/// The repository folder, the commit `revision` resolves to and its snapshot folder, every
/// folder on the way checked to be a real directory.
pub(super) fn locate_snapshot(
    cache: &Path,
    repo_type: &str,
    repo_id: &str,
    revision: &str,
) -> Result<(PathBuf, String, PathBuf)> {
    check_repo_type(repo_type).map_err(|e| Error::Usage(e.to_string()))?;
    check_repo_id(repo_id).map_err(|e| Error::Usage(e.to_string()))?;
    let repo_folder = cache.join(repo_folder_name(repo_type, repo_id));
    match fs::symlink_metadata(&repo_folder) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            layout::real_dir(&repo_folder)?;
            return Err(Error::HfCache {
                path: repo_folder,
                reason: "is not a directory".into(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::NotCached {
                path: repo_folder,
                reason: format!("does not exist: {repo_type} {repo_id} is not in this cache"),
            });
        }
        Err(e) => return Err(Error::io(&repo_folder, e)),
    }
    // refs/, snapshots/, blobs/ and the folders on the way to the ref: real directories.
    let ref_name = (!is_commit(revision)).then_some(revision);
    if let Some(r) = ref_name {
        check_revision(r).map_err(|e| Error::Usage(e.to_string()))?;
    }
    layout::open_repo_dirs_nofollow(&repo_folder, ref_name)?;
    let commit = resolve_revision(&repo_folder, revision)?;
    let dir = repo_folder.join("snapshots").join(&commit);
    if !layout::real_dir(&dir)? {
        let reason = if commit == revision {
            format!("does not exist: commit {commit} of {repo_id} is not in this cache")
        } else {
            format!(
                "does not exist, but refs/{revision} names commit {commit}: the cache is damaged (scan_cache_dir reports it too); download the revision again"
            )
        };
        return Err(if commit == revision {
            Error::NotCached { path: dir, reason }
        } else {
            Error::HfCache { path: dir, reason }
        });
    }
    Ok((repo_folder, commit, dir))
}

/// Entries of one snapshot directory examined together by one thread.
const RUN: usize = 64;

/// A file of the snapshot as the walk found it, with its etag (from its link, or the hub's
/// listing for a real file) and whether that etag is its link's blob name.
type WalkedFile = (ScanEntry, Option<Arc<str>>, bool);

/// The walk of a snapshot folder through directory handles: every entry checked by the
/// packer's name rules and the cache's link rules, each file's content located (its blob)
/// and opened once, its size and etag held to the hub's listing when there is one.
struct Walk<'a> {
    repo_folder: &'a Path,
    /// The snapshot folder.
    dir: &'a Path,
    root_fd: &'a OwnedFd,
    /// The repository's `blobs/`, opened without following a link; `None` when it has none.
    blobs: Option<&'a OwnedFd>,
    blobs_path: &'a Path,
    /// `blobs_path`, held once for every file's [`scan::Link::Blob`].
    blobs_shared: Arc<Path>,
    commit: &'a str,
    has_blobs: bool,
    listing: Option<&'a BTreeMap<String, ListedFile>>,
    /// `models--ORG--NAME/snapshots/COMMIT/`: a file's name for the model checks, which run
    /// from the cache root.
    check_prefix: String,
    /// Room left for the bytes of small blobs ([`scan::Prefetched`]).
    budget: &'a scan::PrefetchBudget,
    collisions: CollisionSet,
    /// Directories and files in walk order.
    found: Vec<WalkedFile>,
    /// Each link to a missing blob: (etag, file), in walk order.
    missing_links: Vec<(String, String)>,
    /// The first link to a missing blob.
    missing_blob: Option<Error>,
    checks: TreeChecks,
}

/// What one snapshot entry is, found while its directory was open.
enum Found {
    Dir,
    /// A file: where its bytes are, or why it is refused.
    File(Result<FoundFile>),
    /// A link to a blob that is not there.
    MissingBlob {
        etag: String,
    },
}

/// A file of the snapshot, found and (when it could be) opened once.
struct FoundFile {
    /// For a link: its blob's etag, and the path of the file holding the blob's bytes when
    /// that is not the blob itself (an entry of the cache's shared store).
    blob: Option<(String, Option<PathBuf>)>,
    size: u64,
    prefetched: Option<scan::Prefetched>,
    has_values: Option<bool>,
    /// Its model checks are left to the pack's read pass ([`ScanEntry::File::checks_left`]).
    checks_left: bool,
    /// What the walk's `fstatat` saw of the blob when it did not open it
    /// ([`ScanEntry::File::seen`]).
    seen: Option<scan::Seen>,
}

impl Walk<'_> {
    /// Visits the directory `rel` ("" for the snapshot folder) and everything below it, in
    /// name order, each directory before its contents (the order errors are reported in).
    fn dir(&mut self, rel: &str) -> Result<()> {
        let (dir_path, fd, entries) = scan::sorted_dir_below(self.root_fd, self.dir, rel)?;
        // The opens and reads of the blobs are most of the time: runs of a directory's
        // entries are examined in parallel, each feeding checks of its own, merged in order.
        let this = &*self;
        let parts: Vec<(Vec<(PathBuf, Found)>, TreeChecks)> = entries
            .par_chunks(RUN)
            .map(|run| {
                let mut checks = TreeChecks::default();
                let found = run
                    .iter()
                    .map(|(name, kind)| this.examine(&fd, rel, &dir_path, name, *kind, &mut checks))
                    .collect();
                (found, checks)
            })
            .collect();
        drop(fd);
        let mut found = Vec::with_capacity(entries.len());
        for (part, part_checks) in parts {
            found.extend(part);
            self.checks.merge(part_checks);
        }
        drop(entries);
        for (full, what) in found {
            // Its name below the snapshot folder, made as the directory scan makes it (the
            // directory's name and the entry's; parsing the full path into components was a
            // percent of a million-file pack).
            let child = full
                .file_name()
                .and_then(|name| scan::child_name(rel, name));
            let rel = scan::check_relative_name(child, &full, &mut self.collisions)?;
            match what {
                Found::Dir => {
                    self.found
                        .push((ScanEntry::Dir { path: rel.clone() }, None, false));
                    self.dir(&rel)?;
                }
                Found::MissingBlob { etag } => {
                    let has_blobs = self.has_blobs;
                    let commit = self.commit;
                    let blob = self.blobs_path.join(&etag);
                    self.missing_blob.get_or_insert(Error::HfCache {
                        path: if has_blobs { blob } else { full.clone() },
                        reason: if has_blobs {
                            format!(
                                "is missing: {rel:?} in snapshot {commit} links to it, so the file is not in the cache (deleted, or never downloaded completely)"
                            )
                        } else {
                            format!(
                                "{rel:?} links to blob {etag}, but the repository has no blobs/ folder: the file was never downloaded completely"
                            )
                        },
                    });
                    self.missing_links.push((etag, rel));
                }
                Found::File(f) => {
                    let f = f?;
                    let entry = self.file(rel, &full, f)?;
                    self.found.push(entry);
                }
            }
        }
        Ok(())
    }

    /// The file `rel` (at `full`) as found, held to the hub's listing.
    fn file(&self, rel: String, full: &Path, f: FoundFile) -> Result<WalkedFile> {
        let commit = self.commit;
        let listed = self.listing.and_then(|l| l.get(&rel));
        let (source, etag, from_link) = match f.blob {
            Some((etag, shared)) => {
                if let Some(l) = listed
                    && l.etag != etag
                {
                    return Err(Error::HfCache {
                        path: full.to_path_buf(),
                        reason: format!(
                            "{rel:?} links to blob {etag}, but the hub's listing of commit {commit} (trees/{commit}.json) gives it etag {}",
                            l.etag
                        ),
                    });
                }
                // Made here, on the walk's own thread, not where the blob was examined: the
                // etag lives until the manifest is written, which this thread builds from the
                // memory it frees (a million of them).
                let etag: Arc<str> = etag.into();
                let source = match shared {
                    Some(path) => scan::Link::Path(path),
                    None => scan::Link::Blob {
                        blobs: Arc::clone(&self.blobs_shared),
                        etag: Arc::clone(&etag),
                    },
                };
                (source, Some(etag), true)
            }
            None => (
                scan::Link::Path(full.to_path_buf()),
                listed.map(|l| Arc::from(l.etag.as_str())),
                false,
            ),
        };
        if let Some(l) = listed
            && l.size != f.size
        {
            return Err(Error::HfCache {
                path: source.path().into_owned(),
                reason: format!(
                    "is {} bytes, but the hub's listing of commit {commit} gives {rel:?} {} bytes: the file is truncated or not the published one",
                    f.size, l.size
                ),
            });
        }
        Ok((
            ScanEntry::File {
                path: rel,
                link: Some(source),
                size: f.size,
                executable: false,
                prefetched: f.prefetched,
                has_values: f.has_values,
                checks_left: f.checks_left,
                seen: f.seen,
            },
            etag,
            from_link,
        ))
    }

    /// What the entry `name` (of type `kind`) of the directory `dir` (`rel` in the snapshot, at
    /// `dir_path`) is: a link is read and its blob opened below `blobs/`, a real file opened
    /// below its directory, and either checked on its handle (`checks`).
    fn examine(
        &self,
        dir: &OwnedFd,
        rel: &str,
        dir_path: &Path,
        name: &OsStr,
        kind: FileType,
        checks: &mut TreeChecks,
    ) -> (PathBuf, Found) {
        let full = dir_path.join(name);
        // The file's name in the snapshot (one that is not UTF-8 is refused before anything
        // is packed or checked).
        let file_rel = scan::child_name(rel, name);
        let found = match kind {
            FileType::Directory => Found::Dir,
            FileType::Symlink => self.link(dir, name, &full, file_rel.as_deref(), checks),
            FileType::RegularFile => {
                Found::File(self.real_file(dir, name, &full, file_rel.as_deref(), checks))
            }
            other => Found::File(Err(Error::HfCache {
                path: full.clone(),
                reason: format!(
                    "is {} inside a snapshot folder; a snapshot holds files and links to blobs only",
                    type_words(other)
                ),
            })),
        };
        (full, found)
    }

    /// The snapshot link `name` in `dir` (at `full`): its text read through the handle and
    /// held to the link rule, its blob opened below `blobs/`.
    fn link(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        full: &Path,
        rel: Option<&str>,
        checks: &mut TreeChecks,
    ) -> Found {
        let target = match layout::read_link_at(dir, name) {
            Ok(t) => t,
            Err(e) => return Found::File(Err(Error::io(full, e))),
        };
        let etag = match layout::link_etag(self.repo_folder, full, &target) {
            Ok(etag) => etag,
            Err(e) => return Found::File(Err(e)),
        };
        let Some(blobs) = self.blobs else {
            return Found::MissingBlob { etag };
        };
        // The blob's path, for the checks and messages; the entry holds the folder and etag.
        let source = scan::joined_exactly(self.blobs_path, &etag);
        // Past the kept bytes, a small blob whose checks need only the open file is found by
        // its `fstatat` below `blobs/` and not opened: the pack's read pass, which opens it
        // anyway, checks it (its one open, as for a directory's file).
        if let Some(rel) = rel
            && let Some(st) =
                scan::left_to_read_pass(blobs, OsStr::new(&etag), rel, &source, self.budget)
        {
            return Found::File(Ok(FoundFile {
                blob: Some((etag, None)),
                size: st.st_size as u64,
                prefetched: None,
                has_values: None,
                checks_left: true,
                seen: Some(scan::Seen::of(&st)),
            }));
        }
        match layout::open_blob(self.repo_folder, blobs, &etag) {
            Err(e) => Found::File(Err(e)),
            Ok(BlobFile::Missing) => Found::MissingBlob { etag },
            Ok(BlobFile::Shared(source, size)) => {
                // Read by path, as a link's target is: the checks resolve it at the end.
                if let Some(rel) = rel {
                    checks.by_path(&format!("{}{rel}", self.check_prefix), false);
                }
                Found::File(Ok(FoundFile {
                    blob: Some((etag, Some(source))),
                    size,
                    prefetched: None,
                    has_values: None,
                    checks_left: false,
                    seen: None,
                }))
            }
            Ok(BlobFile::Open(file, st)) => {
                let (prefetched, has_values) = self.opened(&file, &st, rel, &source, true, checks);
                Found::File(Ok(FoundFile {
                    blob: Some((etag, None)),
                    size: st.st_size as u64,
                    prefetched,
                    has_values,
                    checks_left: false,
                    seen: None,
                }))
            }
        }
    }

    /// A real file of the snapshot (symlinks were off when it was downloaded), opened below its
    /// directory; one that cannot be opened now is left to the checks' by-path end.
    fn real_file(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        full: &Path,
        rel: Option<&str>,
        checks: &mut TreeChecks,
    ) -> Result<FoundFile> {
        match fsio::open_file_at(dir, name) {
            Ok((file, st)) => {
                let (prefetched, has_values) = self.opened(&file, &st, rel, full, false, checks);
                Ok(FoundFile {
                    blob: None,
                    size: st.st_size as u64,
                    prefetched,
                    has_values,
                    checks_left: false,
                    seen: None,
                })
            }
            Err(_) => {
                if let Some(rel) = rel {
                    checks.by_path(&format!("{}{rel}", self.check_prefix), true);
                }
                let st = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::io(full, e.into()))?;
                Ok(FoundFile {
                    blob: None,
                    size: st.st_size as u64,
                    prefetched: None,
                    has_values: None,
                    checks_left: false,
                    seen: None,
                })
            }
        }
    }

    /// The open file `rel` (its bytes at `path`, reached through its link when `through_link`)
    /// checked on its handle: a small one read whole once, for the checks and the value scan's
    /// sniff, and kept within the budget when it did not change meanwhile; and whether the
    /// value scan reads it.
    fn opened(
        &self,
        file: &std::fs::File,
        st: &rustix::fs::Stat,
        rel: Option<&str>,
        path: &Path,
        through_link: bool,
        checks: &mut TreeChecks,
    ) -> (Option<scan::Prefetched>, Option<bool>) {
        // A name that is not UTF-8 is refused before anything is packed or checked.
        let Some(rel) = rel else {
            return (None, None);
        };
        let checked = format!("{}{rel}", self.check_prefix);
        let as_ = scan::CheckedAs::Cache {
            name: &checked,
            through_link,
        };
        scan::check_open(rel, as_, path, file, st, checks, self.budget)
    }
}

/// A file type in the cache's words ([`layout::describe`]).
fn type_words(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Socket => "a socket",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        _ => "a regular file",
    }
}

/// The `*.incomplete` files in `blobs` (open as `blobs_fd`), sorted, each with a sentence
/// naming the repository file it was for when the snapshot's links (`linked`: the file that
/// links to an etag) or the hub's listing say. The folder is listed without keeping the
/// names of the blobs (a million of them in a dataset).
fn incomplete_downloads(
    blobs_fd: &OwnedFd,
    blobs: &Path,
    linked: impl Fn(&str) -> Option<String>,
    listing: Option<&BTreeMap<String, ListedFile>>,
) -> Vec<(PathBuf, String)> {
    let Ok(rd) = fsio::dir_entries_named(blobs_fd, |name| {
        name.as_encoded_bytes().ends_with(b".incomplete")
    }) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, String)> = rd
        .into_iter()
        .filter_map(|(name, _)| {
            let name = name.into_string().ok()?;
            if !name.ends_with(".incomplete") {
                return None;
            }
            // `<etag>.incomplete` (older huggingface_hub) or `<etag>.<8 hex>.incomplete`.
            let etag = name.split('.').next().unwrap_or("");
            let size = fsio::stat_at(blobs_fd, name.as_str())
                .map(|s| s.st_size as u64)
                .unwrap_or(0);
            let file = linked(etag).or_else(|| {
                listing.and_then(|l| {
                    l.iter()
                        .find(|(_, f)| f.etag == etag)
                        .map(|(p, _)| p.clone())
                })
            });
            let reason = match file {
                Some(file) => format!(
                    "is an interrupted download of {file:?} ({size} bytes so far); run the download again with huggingface_hub (it resumes), or delete this file, then pack again"
                ),
                None => format!(
                    "is an interrupted download ({size} bytes so far) of a file the snapshot does not link to, so the snapshot probably lacks a file; run the download again with huggingface_hub, or delete this file if it belongs to another revision, then pack again"
                ),
            };
            Some((blobs.join(&name), reason))
        })
        .collect();
    out.sort();
    out
}

/// A path inside a snapshot folder of a cache, as someone might pass it to `pack DIR` or
/// `check DIR`, and the cache flags that name the same snapshot.
#[derive(Debug, PartialEq, Eq)]
pub struct SnapshotPath {
    /// The cache directory.
    pub cache: PathBuf,
    /// `model`, `dataset`, ...
    pub repo_type: String,
    /// `org/name`.
    pub repo_id: String,
    /// The snapshot's commit.
    pub commit: String,
    /// The ref naming the commit (`main` first), if one does.
    pub revision: Option<String>,
}

impl SnapshotPath {
    /// The flags that select this snapshot from the cache: `--hf-repo ORG/NAME --hf-cache DIR`,
    /// with `--repo-type` when it is not a model and `--revision` when `main` does not name
    /// the commit.
    pub fn flags(&self) -> String {
        let mut out = format!(
            "--hf-repo {} --hf-cache {}",
            self.repo_id,
            self.cache.display()
        );
        if self.repo_type != "model" {
            out.push_str(&format!(" --repo-type {}", self.repo_type));
        }
        match self.revision.as_deref() {
            Some(super::names::DEFAULT_REVISION) => {}
            Some(r) => out.push_str(&format!(" --revision {r}")),
            None => out.push_str(&format!(" --revision {}", self.commit)),
        }
        out
    }
}

/// Whether `dir` is (inside) `CACHE/<type>s--org--name/snapshots/<commit>` of a cache.
pub fn snapshot_from_path(dir: &Path) -> Option<SnapshotPath> {
    let dir = std::path::absolute(dir).ok()?;
    let mut at = dir.as_path();
    loop {
        let parent = at.parent()?;
        if parent.file_name() == Some(std::ffi::OsStr::new("snapshots")) {
            let repo = parent.parent()?;
            let name = repo.file_name()?.to_str()?;
            if let Some((repo_type, repo_id)) = super::names::parse_repo_folder(name)
                && check_repo_id(&repo_id).is_ok()
                && let Some(commit) = at.file_name().and_then(|c| c.to_str())
                && is_commit(commit)
            {
                let mut refs: Vec<String> = list_refs(repo)
                    .into_iter()
                    .filter(|(_, p)| read_ref(p).ok() == Some(RefState::Commit(commit.to_string())))
                    .map(|(n, _)| n)
                    .collect();
                refs.sort_by_key(|r| (r != super::names::DEFAULT_REVISION, r.clone()));
                return Some(SnapshotPath {
                    cache: repo.parent()?.to_path_buf(),
                    repo_type,
                    repo_id,
                    commit: commit.to_string(),
                    revision: refs.into_iter().next(),
                });
            }
        }
        at = parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// The blob `blob` of the model `repo_id` of the cache `cache` made a FIFO: the snapshot's
    /// walk refuses it by its name, without blocking.
    fn assert_fifo_refused(cache: &Path, repo_id: &str, blob: &Path) {
        fs::remove_file(blob).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(blob)
            .status()
            .unwrap();
        assert!(made.success());
        let err = open_snapshot(cache, "model", repo_id, "main", &for_pack()).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{}: is a FIFO, not a regular file",
                blob.display()
            )),
            "{err}"
        );
    }

    fn for_pack() -> scan::PrefetchBudget {
        scan::PrefetchBudget::for_pack()
    }

    /// A repository `models--acme--NAME` in the cache `cache` as huggingface_hub lays one out:
    /// `refs/main` naming commit [`COMMIT`], its snapshot folder, and `blobs/`.
    struct Repo {
        repo: PathBuf,
        snap: PathBuf,
    }

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    impl Repo {
        fn new(cache: &Path, name: &str) -> Repo {
            let repo = cache.join(format!("models--acme--{name}"));
            let snap = repo.join("snapshots").join(COMMIT);
            fs::create_dir_all(&snap).unwrap();
            fs::create_dir_all(repo.join("blobs")).unwrap();
            fs::create_dir_all(repo.join("refs")).unwrap();
            fs::write(repo.join("refs/main"), COMMIT).unwrap();
            Repo { repo, snap }
        }

        /// The file `rel` of the snapshot: `bytes` as a blob named by its git blob id, and a
        /// link to it in the hub's form. Returns the etag.
        fn add(&self, rel: &str, bytes: &[u8]) -> String {
            let mut h = super::super::GitBlobSha1::new(bytes.len() as u64);
            h.update(bytes);
            let etag = h.finish();
            fs::write(self.repo.join("blobs").join(&etag), bytes).unwrap();
            let link = self.snap.join(rel);
            fs::create_dir_all(link.parent().unwrap()).unwrap();
            let ups = "../".repeat(2 + rel.matches('/').count());
            symlink(format!("{ups}blobs/{etag}"), link).unwrap();
            etag
        }
    }

    #[test]
    fn refs_are_read_exactly() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path();
        fs::create_dir_all(repo.join("refs/refs/pr")).unwrap();
        let c = "0123456789abcdef0123456789abcdef01234567";
        fs::write(repo.join("refs/main"), c).unwrap();
        fs::write(repo.join("refs/nl"), format!("{c}\n")).unwrap();
        fs::write(repo.join("refs/refs/pr/1"), c).unwrap();
        assert_eq!(resolve_revision(repo, "main").unwrap(), c);
        assert_eq!(resolve_revision(repo, "refs/pr/1").unwrap(), c);
        assert_eq!(resolve_revision(repo, c).unwrap(), c);
        let err = resolve_revision(repo, "nl").unwrap_err();
        assert!(matches!(err, Error::HfCache { .. }), "{err}");
        assert!(err.to_string().contains("unstripped"), "{err}");
        let err = resolve_revision(repo, "v2").unwrap_err().to_string();
        assert!(err.contains("main, nl, refs/pr/1"), "{err}");
    }

    #[test]
    fn a_ref_that_is_dev_zero_a_link_or_too_long_is_refused_unread() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path();
        fs::create_dir_all(repo.join("refs")).unwrap();
        symlink("/dev/zero", repo.join("refs/zero")).unwrap();
        let c = "0123456789abcdef0123456789abcdef01234567";
        fs::write(repo.join("target"), c).unwrap();
        symlink(repo.join("target"), repo.join("refs/link")).unwrap();
        fs::write(repo.join("refs/long"), c.repeat(100)).unwrap();
        for (name, want) in [
            ("zero", "is a symlink to /dev/zero"),
            ("link", "is a symlink to"),
            ("long", "holds more than a commit id"),
        ] {
            let err = resolve_revision(repo, name).unwrap_err();
            assert!(matches!(err, Error::HfCache { .. }), "{err}");
            assert!(err.to_string().contains(want), "{name}: {err}");
        }
        let names: Vec<String> = list_refs(repo).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["link", "long", "zero"]);
    }

    /// Issue 37 item 2: a snapshot's blobs are opened once, below the held `blobs/` handle;
    /// the model checks run on that handle (an LFS pointer standing for a file is found), a
    /// small blob's bytes are kept for the writer, and a blob that is not a regular file is
    /// still refused by name.
    #[test]
    fn blobs_are_opened_once_checked_on_their_handle_and_small_ones_kept() {
        let t = tempfile::tempdir().unwrap();
        let r = Repo::new(t.path(), "tiny");
        let repo = &r.repo;
        let text = b"hello, cache\n";
        let pointer = b"version https://git-lfs.github.com/spec/v1\n\
            oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
            size 4943852032\n";
        let a = r.add("a.txt", text);
        let p = r.add("sub/model.bin", pointer);

        let s = open_snapshot(t.path(), "model", "acme/tiny", "main", &for_pack()).unwrap();
        let paths: Vec<&str> = s.entries.iter().map(ScanEntry::path).collect();
        assert_eq!(paths, ["a.txt", "sub", "sub/model.bin"]);
        let etags: Vec<Option<&str>> = s.etags.iter().map(|e| e.as_deref()).collect();
        assert_eq!(etags, [Some(a.as_str()), Some(p.as_str())]);
        let ScanEntry::File {
            link,
            size,
            prefetched,
            has_values,
            ..
        } = &s.entries[0]
        else {
            panic!("a file: {:?}", s.entries[0]);
        };
        // The blob, by the repository's `blobs/` and its etag (no path held for each file).
        assert_eq!(
            link.as_ref().map(|l| l.path().into_owned()),
            Some(repo.join("blobs").join(&a))
        );
        assert!(matches!(link, Some(scan::Link::Blob { .. })), "{link:?}");
        assert_eq!(*size, text.len() as u64);
        assert_eq!(prefetched.as_ref().map(|p| p.bytes()), Some(&text[..]));
        assert_eq!(*has_values, Some(false));
        let (findings, unchecked) = s.checked.as_ref().unwrap();
        assert!(unchecked.is_empty());
        let found: Vec<(&str, &str)> = findings.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert_eq!(
            found,
            [("sub/model.bin", crate::inspect::codes::LFS_POINTER)]
        );

        // A FIFO where the blob was: refused by its name, not opened for reading forever.
        assert_fifo_refused(t.path(), "acme/tiny", &repo.join("blobs").join(&a));
        // A missing blob: named, with the file that links to it.
        fs::remove_file(repo.join("blobs").join(&a)).unwrap();
        let err = open_snapshot(t.path(), "model", "acme/tiny", "main", &for_pack()).unwrap_err();
        assert!(err.to_string().contains("is missing: \"a.txt\""), "{err}");
    }

    /// Issue 37 item 2: past the kept bytes, a small blob whose checks need only the open file
    /// is found by its `fstatat` below `blobs/` and not opened: its checks are left to the
    /// pack's read pass. A shard index or config is still opened (its checks read other
    /// files), and a blob that is not a regular file is still refused by name.
    #[test]
    fn past_the_kept_bytes_small_blobs_are_left_to_the_read_pass() {
        let t = tempfile::tempdir().unwrap();
        let r = Repo::new(t.path(), "many");
        let repo = &r.repo;
        let add = |rel: &str, bytes: &[u8]| r.add(rel, bytes);
        // More 64 KiB blobs than the kept bytes hold, walked first.
        let per = scan::PREFETCH_FILE_MAX as usize;
        for i in 0..(scan::PREFETCH_TOTAL_MAX as usize / per + 8) {
            let mut bytes = vec![b'a'; per];
            bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
            add(&format!("a/f{i:04}"), &bytes);
        }
        add("z/config.json", br#"{"model_type":"x"}"#);
        add("z/notes.txt", b"plain notes\n");
        let fifo = add("z/queue.bin", b"will be a FIFO");

        let budget = for_pack();
        let s = open_snapshot(t.path(), "model", "acme/many", "main", &budget).unwrap();
        let left = |rel: &str| {
            s.entries
                .iter()
                .find_map(|e| match e {
                    ScanEntry::File {
                        path,
                        checks_left,
                        prefetched,
                        has_values,
                        ..
                    } if path == rel => Some((*checks_left, prefetched.is_some(), *has_values)),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(left("a/f0000"), (false, true, Some(false)));
        assert_eq!(left("z/notes.txt"), (true, false, None));
        assert_eq!(left("z/queue.bin"), (true, false, None));
        assert!(!left("z/config.json").0);
        let (findings, _) = s.checked.as_ref().unwrap();
        assert!(findings.is_empty(), "{findings:?}");
        // The budget is the pack's, not the walk's: a second repository of the same bundle
        // walked after it finds none left, so its first small blob is left as well.
        let again = open_snapshot(t.path(), "model", "acme/many", "main", &budget).unwrap();
        assert!(again.entries.iter().any(|e| matches!(
            e,
            ScanEntry::File { path, checks_left: true, prefetched: None, seen: Some(_), .. }
                if path == "a/f0000"
        )));

        // A FIFO past the kept bytes: refused by its name, not left to a read that would block.
        assert_fifo_refused(t.path(), "acme/many", &repo.join("blobs").join(&fifo));
    }

    #[test]
    fn a_snapshot_folder_names_its_cache_flags() {
        let t = tempfile::tempdir().unwrap();
        let c = "0123456789abcdef0123456789abcdef01234567";
        let repo = t.path().join("models--acme--tiny");
        fs::create_dir_all(repo.join("snapshots").join(c).join("sub")).unwrap();
        fs::create_dir_all(repo.join("refs")).unwrap();
        let found = snapshot_from_path(&repo.join("snapshots").join(c).join("sub")).unwrap();
        assert_eq!(found.repo_id, "acme/tiny");
        assert_eq!(
            found.flags(),
            format!(
                "--hf-repo acme/tiny --hf-cache {} --revision {c}",
                t.path().display()
            )
        );
        fs::write(repo.join("refs/main"), c).unwrap();
        let found = snapshot_from_path(&repo.join("snapshots").join(c)).unwrap();
        assert_eq!(
            found.flags(),
            format!("--hf-repo acme/tiny --hf-cache {}", t.path().display())
        );
        assert_eq!(snapshot_from_path(&repo), None);
        assert_eq!(snapshot_from_path(t.path()), None);
    }
}
