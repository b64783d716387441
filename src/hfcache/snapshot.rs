//! Reading one snapshot out of the cache: refs, the hub's cached listing of a commit, and the
//! snapshot's files with the blobs they link to, checked against the layout's rules
//! ([`super::layout`]) and the listing before anything is packed.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::layout::{self, Content};
use super::names::{
    EtagKind, is_commit, repo_folder_name, validate_repo_id, validate_repo_type, validate_revision,
};
use crate::error::{Error, Result};
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
    validate_revision(revision).map_err(Error::Usage)?;
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
    /// nothing names it and the packer computes one.
    pub etags: Vec<Option<String>>,
    /// Whether `trees/<commit>.json` was there to compare against.
    pub listed: bool,
    /// Files the hub's listing names that the snapshot lacks (a partial or interrupted
    /// download), sorted.
    pub missing: Vec<String>,
    /// Things worth telling the operator that do not stop the pack.
    pub notes: Vec<String>,
}

/// Reads snapshot `revision` of `repo_type` repository `repo_id` in `cache` for packing.
///
/// Refused, naming the file in the repository: a link to a missing blob, a link that does
/// not point at a blob of this repository, a blob whose size or name disagrees with the hub's
/// cached listing, and any `*.incomplete` download in the repository's `blobs/`. The blobs'
/// contents are checked against their names later, while the packer hashes them.
pub fn open_snapshot(
    cache: &Path,
    repo_type: &str,
    repo_id: &str,
    revision: &str,
) -> Result<Snapshot> {
    let (repo_folder, commit, dir) = locate_snapshot(cache, repo_type, repo_id, revision)?;
    let blobs = repo_folder.join("blobs");
    let has_blobs = layout::real_dir(&blobs)?;
    let (listing, listing_note) = read_listing(&repo_folder, &commit);
    let mut notes: Vec<String> = listing_note.into_iter().collect();

    let Walked {
        mut entries,
        mut etag_of,
        linked,
        missing_blob,
    } = walk_snapshot(&repo_folder, &dir, &commit, has_blobs, listing.as_ref())?;

    // An interrupted download comes first: it explains a missing blob or file.
    if let Some((path, reason)) = incomplete_downloads(&blobs, &linked, listing.as_ref())
        .into_iter()
        .next()
    {
        return Err(Error::HfCache { path, reason });
    }
    if let Some(e) = missing_blob {
        return Err(e);
    }
    entries.sort_by(|a, b| paths::bundle_order(a.path(), b.path()));
    let etags: Vec<Option<String>> = entries
        .iter()
        .filter(|e| matches!(e, ScanEntry::File { .. }))
        .map(|e| etag_of.remove(e.path()).flatten())
        .collect();
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
    Ok(Snapshot {
        repo_folder,
        commit,
        dir,
        entries,
        etags,
        listed: listing.is_some(),
        missing,
        notes,
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
    validate_repo_type(repo_type).map_err(Error::Usage)?;
    validate_repo_id(repo_id).map_err(Error::Usage)?;
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
        validate_revision(r).map_err(Error::Usage)?;
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

/// What [`walk_snapshot`] found.
struct Walked {
    entries: Vec<ScanEntry>,
    etag_of: HashMap<String, Option<String>>,
    /// Every blob a snapshot file links to, with the file.
    linked: HashMap<String, String>,
    /// The first link to a missing blob.
    missing_blob: Option<Error>,
}

/// Walks the snapshot folder `dir`: every entry checked by the packer's name rules and the
/// cache's link rules, each file's content located (its blob), its size and etag held to the
/// hub's listing when there is one.
fn walk_snapshot(
    repo_folder: &Path,
    dir: &Path,
    commit: &str,
    has_blobs: bool,
    listing: Option<&BTreeMap<String, ListedFile>>,
) -> Result<Walked> {
    let mut entries = Vec::new();
    let mut etag_of: HashMap<String, Option<String>> = HashMap::new();
    let mut collisions = CollisionSet::default();
    let mut missing_blob: Option<Error> = None;
    let mut linked: HashMap<String, String> = HashMap::new();
    let walker = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name();
    for item in walker {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            let source = e
                .into_io_error()
                .unwrap_or_else(|| io::Error::other("filesystem loop"));
            Error::io(path, source)
        })?;
        let full = item.path();
        let rel = scan::check_name(dir, full, &mut collisions)?;
        let ft = item.file_type();
        if ft.is_dir() {
            entries.push(ScanEntry::Dir { path: rel });
            continue;
        }
        let listed = listing.as_ref().and_then(|l| l.get(&rel));
        let (source, size, etag) = match layout::snapshot_content(repo_folder, full, &ft)? {
            Content::MissingBlob { etag, blob } => {
                linked.insert(etag.clone(), rel.clone());
                missing_blob.get_or_insert(Error::HfCache {
                    path: if has_blobs { blob } else { full.to_path_buf() },
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
                continue;
            }
            Content::Blob { etag, source, len } => {
                linked.insert(etag.clone(), rel.clone());
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
                (source, len, Some(etag))
            }
            Content::File => {
                let meta = item.metadata().map_err(|e| Error::io(full, e.into()))?;
                (
                    full.to_path_buf(),
                    meta.len(),
                    listed.map(|l| l.etag.clone()),
                )
            }
        };
        if let Some(l) = listed
            && l.size != size
        {
            return Err(Error::HfCache {
                path: source,
                reason: format!(
                    "is {size} bytes, but the hub's listing of commit {commit} gives {rel:?} {} bytes: the file is truncated or not the published one",
                    l.size
                ),
            });
        }
        etag_of.insert(rel.clone(), etag);
        entries.push(ScanEntry::File {
            path: rel,
            link: Some(source),
            size,
            executable: false,
            prefetched: None,
            has_values: None,
            checks_left: false,
        });
    }

    Ok(Walked {
        entries,
        etag_of,
        linked,
        missing_blob,
    })
}

/// The `*.incomplete` files in `blobs`, sorted, each with a sentence naming the repository file
/// it was for when the snapshot's links (`linked`: etag → path) or the hub's listing say.
fn incomplete_downloads(
    blobs: &Path,
    linked: &HashMap<String, String>,
    listing: Option<&BTreeMap<String, ListedFile>>,
) -> Vec<(PathBuf, String)> {
    let Ok(fd) = crate::fsio::open_dir_path(blobs, crate::fsio::Follow::Final) else {
        return Vec::new();
    };
    let Ok(rd) = crate::fsio::dir_entries(&fd) else {
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
            let size = crate::fsio::stat_at(&fd, name.as_str())
                .map(|s| s.st_size as u64)
                .unwrap_or(0);
            let file = linked.get(etag).cloned().or_else(|| {
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
                && validate_repo_id(&repo_id).is_ok()
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
