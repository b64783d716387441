//! The Hugging Face hub cache: finding it, reading one snapshot out of it, and checking every
//! blob in it against its own name.
//!
//! huggingface_hub (`file_download.py`, `_snapshot_download.py`, `utils/_cache_manager.py`)
//! keeps each repository in `CACHE/<type>s--<org>--<name>/`:
//!
//! ```text
//! blobs/<etag>                      file contents, named by the hub's etag
//! snapshots/<commit>/<path>         relative symlinks ../../blobs/<etag> (one more ../ per
//!                                   directory level), or real files where symlinks are off
//! refs/<revision>                   the 40-hex commit, no trailing newline
//! trees/<commit>.json               the hub's listing of every file of the commit (optional)
//! blobs/<etag>[.<8 hex>].incomplete an interrupted download
//! ```
//!
//! The etag of a Git LFS file is the SHA-256 of its content; that of a small file stored in
//! git is its git blob id, `sha1("blob <len>\0" + content)`. So every blob can be checked
//! against its own name, which is exactly the "compare with the hash the hub published" step:
//! a flipped bit, a truncated blob or a file swapped for another all fail it. The packer does
//! that check while it hashes each file anyway (see `bundle::write`), and [`check_cache`] does
//! it for a whole cache at rest.
//!
//! Offline, huggingface_hub trusts the layout completely: `hf_hub_download` reads
//! `refs/<revision>` unstripped and returns `snapshots/<commit>/<path>` if it exists, and
//! `snapshot_download` returns the snapshot folder (checking it against `trees/<commit>.json`
//! when that listing is cached). Nothing re-checks a blob. That is why a damaged cache must be
//! refused here, with the file in the repository named, instead of being carried across.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::paths::{self, CollisionSet};
use crate::progress::Progress;
use crate::scan::{self, ScanEntry};

/// The repository types huggingface_hub accepts (`constants.REPO_TYPES_WITH_KERNEL`).
pub const REPO_TYPES: &[&str] = &["model", "dataset", "space", "kernel"];

/// The revision used when none is given (`constants.DEFAULT_REVISION`).
pub const DEFAULT_REVISION: &str = "main";

/// Files from this size up get a SHA-256 etag when airlock has to name a blob itself, smaller
/// ones a git blob id: the hub refuses files over 10 MiB that are not stored in LFS, and an LFS
/// file's etag is its SHA-256. See [`EtagKind::for_size`].
pub const LFS_THRESHOLD: u64 = 10 * 1024 * 1024;

/// Names in the cache directory that are not repositories (`scan_cache_dir` skips them).
const NOT_REPOSITORIES: &[&str] = &[
    ".locks",
    "CACHEDIR.TAG",
    "blobs",
    ".DS_Store",
    "Thumbs.db",
    "desktop.ini",
];

/// Whether `s` is `len` lowercase hex digits.
pub fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` is a full commit id (40 lowercase hex), as `REGEX_COMMIT_HASH` matches it.
pub fn is_commit(s: &str) -> bool {
    is_hex(s, 40)
}

/// Checks a repository id the way huggingface_hub's `validate_repo_id` does: `name` or
/// `namespace/name`, each 1 to 96 ASCII letters, digits, `-`, `_` or `.`, starting and ending
/// with a letter, digit or `_`; no `--` or `..`; not ending in `.git`.
pub fn validate_repo_id(id: &str) -> std::result::Result<(), String> {
    let bad = |why: &str| Err(format!("{id:?} is not a Hugging Face repository id: {why}"));
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 {
        return bad("use ORG/NAME or NAME");
    }
    for part in &parts {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let ok = (1..=96).contains(&part.len())
            && part.bytes().all(|b| word(b) || b == b'-' || b == b'.')
            && word(part.as_bytes()[0])
            && word(part.as_bytes()[part.len() - 1]);
        if !ok {
            return bad(
                "each part is 1 to 96 letters, digits, '-', '_' or '.', and cannot start or end with '-' or '.'",
            );
        }
    }
    if id.contains("--") || id.contains("..") {
        return bad("it cannot contain '--' or '..'");
    }
    if id.ends_with(".git") {
        return bad("it cannot end in '.git'");
    }
    Ok(())
}

/// Checks a repository type: one of [`REPO_TYPES`].
pub fn validate_repo_type(repo_type: &str) -> std::result::Result<(), String> {
    if REPO_TYPES.contains(&repo_type) {
        Ok(())
    } else {
        Err(format!(
            "{repo_type:?} is not a Hugging Face repository type (one of {})",
            REPO_TYPES.join(", ")
        ))
    }
}

/// Checks a revision name, which becomes a path under `refs/`: a safe relative path
/// (`refs/pr/1` is fine, `../x` is not).
pub fn validate_revision(revision: &str) -> std::result::Result<(), String> {
    paths::check_relative(revision)
        .map_err(|why| format!("the revision {revision:?} cannot name a ref file: it {why}"))
}

/// The repository's folder name in the cache (`repo_folder_name`): `models--org--name`,
/// `datasets--org--name`, `spaces--...`, `kernels--...`.
pub fn repo_folder_name(repo_type: &str, repo_id: &str) -> String {
    let mut parts = vec![format!("{repo_type}s")];
    parts.extend(repo_id.split('/').map(str::to_string));
    parts.join("--")
}

/// Splits a folder name back into `(repo_type, repo_id)` as `scan_cache_dir` does; `None` if
/// it is not a repository folder.
pub fn parse_repo_folder(name: &str) -> Option<(String, String)> {
    let (prefix, rest) = name.split_once("--")?;
    let repo_type = prefix.strip_suffix('s')?;
    if !REPO_TYPES.contains(&repo_type) {
        return None;
    }
    Some((repo_type.to_string(), rest.replace("--", "/")))
}

// ---------------------------------------------------------------------------------------------
// Where the cache is

/// The cache directory huggingface_hub would use, from the process environment.
pub fn cache_dir_from_env() -> Result<PathBuf> {
    resolve_cache_dir(&|name| std::env::var_os(name))
}

/// The cache directory huggingface_hub would use (`constants.HF_HUB_CACHE`), with `var`
/// reading the environment:
///
/// 1. `HF_HUB_CACHE`;
/// 2. else `HUGGINGFACE_HUB_CACHE` (the legacy name);
/// 3. else `HF_HOME/hub`;
/// 4. else `XDG_CACHE_HOME/huggingface/hub`;
/// 5. else `~/.cache/huggingface/hub`.
///
/// Each value goes through `~` expansion then `$VAR`/`${VAR}` expansion, as
/// `os.path.expandvars(os.path.expanduser(...))` does. Two deliberate differences: a variable
/// that is set but empty is an error (huggingface_hub would quietly use a directory relative
/// to the current one), and `~user` is not expanded (only `~` and `~/...`, from `HOME`).
pub fn resolve_cache_dir(var: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf> {
    let get = |name: &str| -> Result<Option<String>> {
        match var(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Err(Error::Usage(format!(
                "{name} is set but empty, so huggingface_hub would use a cache relative to the current directory; unset it or pass --hf-cache DIR"
            ))),
            Some(v) => v.into_string().map(Some).map_err(|_| {
                Error::Usage(format!("{name} is not valid UTF-8; pass --hf-cache DIR"))
            }),
        }
    };
    let expand = |s: &str| -> Result<String> { Ok(expandvars(&expanduser(s, var)?, var)) };
    let hub = match get("HF_HUB_CACHE")? {
        Some(v) => expand(&v)?,
        None => match get("HUGGINGFACE_HUB_CACHE")? {
            Some(v) => expand(&v)?,
            None => {
                let hf_home = match get("HF_HOME")? {
                    Some(v) => v,
                    None => {
                        let base = match get("XDG_CACHE_HOME")? {
                            Some(v) => v,
                            None => join(&expanduser("~", var)?, ".cache"),
                        };
                        join(&base, "huggingface")
                    }
                };
                // HF_HOME is expanded, joined with "hub", and the result expanded again.
                expand(&join(&expand(&hf_home)?, "hub"))?
            }
        },
    };
    let path = PathBuf::from(hub);
    if path.is_absolute() {
        Ok(path)
    } else {
        let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
        Ok(cwd.join(path))
    }
}

/// `os.path.join(a, b)` for a relative `b`.
fn join(a: &str, b: &str) -> String {
    if a.is_empty() || a.ends_with('/') {
        format!("{a}{b}")
    } else {
        format!("{a}/{b}")
    }
}

/// `os.path.expanduser` for `~` and `~/...` (from `HOME`); `~user` is left as it is.
fn expanduser(path: &str, var: &dyn Fn(&str) -> Option<OsString>) -> Result<String> {
    if path != "~" && !path.starts_with("~/") {
        return Ok(path.to_string());
    }
    let home = var("HOME")
        .and_then(|h| h.into_string().ok())
        .ok_or_else(|| {
            Error::Usage(
                "HOME is not set, so the default Hugging Face cache cannot be found; pass --hf-cache DIR".into(),
            )
        })?;
    let home = home.trim_end_matches('/');
    let joined = format!("{home}{}", &path[1..]);
    Ok(if joined.is_empty() {
        "/".into()
    } else {
        joined
    })
}

/// `posixpath.expandvars`: `$name` and `${name}` (name: ASCII letters, digits, `_`) are
/// replaced by the variable's value; unknown variables are left as they are.
fn expandvars(path: &str, var: &dyn Fn(&str) -> Option<OsString>) -> String {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let (name, end) = if bytes.get(i + 1) == Some(&b'{') {
                match path[i + 2..].find('}') {
                    Some(close) => (&path[i + 2..i + 2 + close], i + 3 + close),
                    None => ("", i + 1),
                }
            } else {
                let len = bytes[i + 1..].iter().take_while(|&&b| word(b)).count();
                (&path[i + 1..i + 1 + len], i + 1 + len)
            };
            if end > i + 1 {
                if let Some(value) = (!name.is_empty())
                    .then(|| var(name))
                    .flatten()
                    .and_then(|v| v.into_string().ok())
                {
                    out.push_str(&value);
                } else {
                    out.push_str(&path[i..end]);
                }
                i = end;
                continue;
            }
        }
        let ch = path[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Etags

/// Which hash names a blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtagKind {
    /// 40 hex: the git blob id, `sha1("blob <len>\0" + content)` (files stored in git).
    GitSha1,
    /// 64 hex: the SHA-256 of the content (Git LFS files).
    Sha256,
}

impl EtagKind {
    /// The kind of a well-formed etag; `None` for anything else (which is not a blob name).
    pub fn of(etag: &str) -> Option<EtagKind> {
        if is_hex(etag, 40) {
            Some(EtagKind::GitSha1)
        } else if is_hex(etag, 64) {
            Some(EtagKind::Sha256)
        } else {
            None
        }
    }

    /// The kind airlock gives a file whose etag it has to choose: SHA-256 from
    /// [`LFS_THRESHOLD`] up, the git blob id below. huggingface_hub never re-checks a blob
    /// name offline, so either is accepted; this rule matches the hub for every file it forces
    /// into LFS and for small files in git.
    pub fn for_size(size: u64) -> EtagKind {
        if size >= LFS_THRESHOLD {
            EtagKind::Sha256
        } else {
            EtagKind::GitSha1
        }
    }

    /// `git-sha1` or `sha256`, for messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            EtagKind::GitSha1 => "git-sha1",
            EtagKind::Sha256 => "sha256",
        }
    }
}

/// The git blob id of a stream of known length, computed as the bytes go by.
#[derive(Clone)]
pub struct GitBlobSha1(Sha1);

impl GitBlobSha1 {
    /// Starts the hash of a `len`-byte blob (the `blob <len>\0` header).
    pub fn new(len: u64) -> GitBlobSha1 {
        let mut h = Sha1::new();
        h.update(format!("blob {len}\0").as_bytes());
        GitBlobSha1(h)
    }

    /// More content.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The 40-hex id.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// Hashes the file at `path` (following symlinks) the way an etag of `kind` names it.
pub fn hash_file(path: &Path, kind: EtagKind, progress: &dyn Progress) -> io::Result<String> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut sha256 = Sha256::new();
    let mut git = GitBlobSha1::new(len);
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        match kind {
            EtagKind::GitSha1 => git.update(&buf[..n]),
            EtagKind::Sha256 => sha256.update(&buf[..n]),
        }
        total += n as u64;
        progress.advance(n as u64);
    }
    if total != len {
        return Err(io::Error::other(format!(
            "changed size while being read ({len} then {total} bytes)"
        )));
    }
    Ok(match kind {
        EtagKind::GitSha1 => git.finish(),
        EtagKind::Sha256 => hex::encode(sha256.finalize()),
    })
}

// ---------------------------------------------------------------------------------------------
// Refs, listings, snapshots

/// Resolves `revision` in `repo_folder` as huggingface_hub does offline: a 40-hex commit is
/// taken as it is; anything else is read from `refs/<revision>`, which must hold exactly a
/// 40-hex commit.
pub fn resolve_revision(repo_folder: &Path, revision: &str) -> Result<String> {
    if is_commit(revision) {
        return Ok(revision.to_string());
    }
    validate_revision(revision).map_err(Error::Usage)?;
    let ref_path = repo_folder.join("refs").join(revision);
    let bytes = match fs::read(&ref_path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let known = list_refs(repo_folder);
            return Err(Error::NotCached {
                path: ref_path,
                reason: format!(
                    "does not exist: the cache holds no revision {revision:?} of this repository (its refs: {}); pass --revision with a branch, tag or commit it has",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            });
        }
        Err(e) => return Err(Error::io(&ref_path, e)),
    };
    let text = String::from_utf8_lossy(&bytes);
    if is_commit(&text) {
        return Ok(text.into_owned());
    }
    let trimmed = text.trim();
    let reason = if is_commit(trimmed) {
        format!(
            "holds the commit {trimmed} with surrounding whitespace ({:?}); huggingface_hub reads the file unstripped, so offline lookups of {revision:?} do not find the snapshot. Rewrite it without the newline: printf %s {trimmed} > {}",
            text,
            ref_path.display()
        )
    } else {
        let shown: String = text.chars().take(80).collect();
        format!("does not hold a 40-hex commit id (it holds {shown:?})")
    };
    Err(Error::HfCache {
        path: ref_path,
        reason,
    })
}

/// The ref names under `repo_folder/refs`, sorted (`main`, `refs/pr/1`, ...).
pub fn list_refs(repo_folder: &Path) -> Vec<String> {
    let refs = repo_folder.join("refs");
    let mut out: Vec<String> = walkdir::WalkDir::new(&refs)
        .min_depth(1)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| {
            e.path()
                .strip_prefix(&refs)
                .ok()
                .and_then(|p| p.to_str())
                .map(str::to_string)
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
    let bytes = match fs::read(&path) {
        Ok(b) => b,
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
    validate_repo_type(repo_type).map_err(Error::Usage)?;
    validate_repo_id(repo_id).map_err(Error::Usage)?;
    let repo_folder = cache.join(repo_folder_name(repo_type, repo_id));
    match fs::metadata(&repo_folder) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
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
    let commit = resolve_revision(&repo_folder, revision)?;
    let dir = repo_folder.join("snapshots").join(&commit);
    if !dir.is_dir() {
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
    let blobs = repo_folder.join("blobs");
    let canonical_blobs = fs::canonicalize(&blobs).ok();
    let (listing, listing_note) = read_listing(&repo_folder, &commit);
    let mut notes: Vec<String> = listing_note.into_iter().collect();

    let mut entries = Vec::new();
    let mut etag_of: HashMap<String, Option<String>> = HashMap::new();
    let mut collisions = CollisionSet::default();
    let mut missing_blob: Option<Error> = None;
    let mut linked: HashMap<String, String> = HashMap::new();
    let walker = walkdir::WalkDir::new(&dir)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name();
    for item in walker {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(&dir).to_path_buf();
            let source = e
                .into_io_error()
                .unwrap_or_else(|| io::Error::other("filesystem loop"));
            Error::io(path, source)
        })?;
        let full = item.path();
        let rel = scan::check_name(&dir, full, &mut collisions)?;
        let ft = item.file_type();
        if ft.is_dir() {
            entries.push(ScanEntry::Dir { path: rel });
            continue;
        }
        let listed = listing.as_ref().and_then(|l| l.get(&rel));
        let (source, size, etag) = if ft.is_symlink() {
            let target = fs::read_link(full).map_err(|e| Error::io(full, e))?;
            let resolved = full.parent().expect("under dir").join(&target);
            let name = resolved
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let in_blobs = match (resolved.parent(), &canonical_blobs) {
                (Some(parent), Some(blobs)) => fs::canonicalize(parent).is_ok_and(|p| &p == blobs),
                _ => false,
            };
            if EtagKind::of(&name).is_none() || !in_blobs {
                if canonical_blobs.is_none() && EtagKind::of(&name).is_some() {
                    missing_blob.get_or_insert(Error::HfCache {
                        path: full.to_path_buf(),
                        reason: format!(
                            "{rel:?} links to blob {name}, but the repository has no blobs/ folder: the file was never downloaded completely"
                        ),
                    });
                    continue;
                }
                return Err(Error::HfCache {
                    path: full.to_path_buf(),
                    reason: format!(
                        "{rel:?} is a symlink to {}, which is not a blob of this repository (blobs/<etag>)",
                        target.display()
                    ),
                });
            }
            linked.insert(name.clone(), rel.clone());
            let blob = blobs.join(&name);
            let meta = match fs::metadata(&blob) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing_blob.get_or_insert(Error::HfCache {
                        path: blob.clone(),
                        reason: format!(
                            "is missing: {rel:?} in snapshot {commit} links to it, so the file is not in the cache (deleted, or never downloaded completely)"
                        ),
                    });
                    continue;
                }
                Err(e) => return Err(Error::io(&blob, e)),
            };
            if !meta.is_file() {
                return Err(Error::HfCache {
                    path: blob,
                    reason: format!("is not a regular file ({rel:?} links to it)"),
                });
            }
            let source = fs::canonicalize(&blob).map_err(|e| Error::io(&blob, e))?;
            if let Some(l) = listed
                && l.etag != name
            {
                return Err(Error::HfCache {
                    path: full.to_path_buf(),
                    reason: format!(
                        "{rel:?} links to blob {name}, but the hub's listing of commit {commit} (trees/{commit}.json) gives it etag {}",
                        l.etag
                    ),
                });
            }
            (source, meta.len(), Some(name))
        } else if ft.is_file() {
            let meta = item.metadata().map_err(|e| Error::io(full, e.into()))?;
            (
                full.to_path_buf(),
                meta.len(),
                listed.map(|l| l.etag.clone()),
            )
        } else {
            return Err(Error::Source {
                path: full.to_path_buf(),
                reason: "is a device, socket or FIFO; a bundle carries regular files and directories only".into(),
            });
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
            source,
            size,
            executable: false,
        });
    }

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

/// The `*.incomplete` files in `blobs`, sorted, each with a sentence naming the repository file
/// it was for when the snapshot's links (`linked`: etag → path) or the hub's listing say.
fn incomplete_downloads(
    blobs: &Path,
    linked: &HashMap<String, String>,
    listing: Option<&BTreeMap<String, ListedFile>>,
) -> Vec<(PathBuf, String)> {
    let Ok(rd) = fs::read_dir(blobs) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, String)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !name.ends_with(".incomplete") {
                return None;
            }
            // `<etag>.incomplete` (older huggingface_hub) or `<etag>.<8 hex>.incomplete`.
            let etag = name.split('.').next().unwrap_or("");
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
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
            Some((e.path(), reason))
        })
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Checking a whole cache

/// One problem found in a cache.
#[derive(Clone, Debug, Serialize)]
pub struct CacheProblem {
    /// The cache entry (blob, link or ref file).
    pub path: PathBuf,
    /// `blob-mismatch`, `missing-blob`, `bad-ref` or `ref-without-snapshot`.
    pub kind: &'static str,
    /// What is wrong, naming the repository files concerned.
    pub problem: String,
}

/// What a check found about one repository.
#[derive(Clone, Debug, Serialize)]
pub struct CachedRepo {
    /// `model`, `dataset`, `space` or `kernel`.
    pub repo_type: String,
    /// `org/name`.
    pub repo_id: String,
    /// Its folder.
    pub folder: PathBuf,
    /// Blobs checked against their names.
    pub blobs_checked: u64,
    /// Bytes hashed.
    pub bytes_checked: u64,
    /// Commits with a snapshot folder.
    pub snapshots: Vec<String>,
    /// Ref name → the ref file's content (as read, lossily).
    pub refs: BTreeMap<String, String>,
}

/// The result of [`check_cache`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct CacheReport {
    /// Repositories checked.
    pub repos: Vec<CachedRepo>,
    /// Blobs checked against their names, all repositories.
    pub blobs_checked: u64,
    /// Bytes hashed.
    pub bytes_checked: u64,
    /// What is damaged, sorted by path.
    pub problems: Vec<CacheProblem>,
    /// Things that are not damage: interrupted downloads, entries that are not repositories,
    /// blobs not named by an etag.
    pub notes: Vec<String>,
}

struct BlobJob {
    repo: usize,
    path: PathBuf,
    etag: String,
    kind: EtagKind,
    size: u64,
}

/// Re-checks every blob of every repository in `cache` (or only `only = (repo_type, repo_id)`)
/// against its name, every snapshot link against its blob and every ref against the
/// snapshots. Blobs are hashed in parallel. Reads only.
pub fn check_cache(
    cache: &Path,
    only: Option<(&str, &str)>,
    progress: &dyn Progress,
) -> Result<CacheReport> {
    let meta = fs::metadata(cache).map_err(|e| Error::io(cache, e))?;
    if !meta.is_dir() {
        return Err(Error::Usage(format!(
            "{} is not a directory",
            cache.display()
        )));
    }
    let mut report = CacheReport::default();
    let mut folders: Vec<(String, String, PathBuf)> = Vec::new();
    match only {
        Some((repo_type, repo_id)) => {
            validate_repo_type(repo_type).map_err(Error::Usage)?;
            validate_repo_id(repo_id).map_err(Error::Usage)?;
            let folder = cache.join(repo_folder_name(repo_type, repo_id));
            if !folder.is_dir() {
                return Err(Error::NotCached {
                    path: folder,
                    reason: format!("does not exist: {repo_type} {repo_id} is not in this cache"),
                });
            }
            folders.push((repo_type.to_string(), repo_id.to_string(), folder));
        }
        None => {
            let rd = fs::read_dir(cache).map_err(|e| Error::io(cache, e))?;
            let mut names: Vec<(String, PathBuf)> = rd
                .filter_map(|e| e.ok())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect();
            names.sort();
            for (name, path) in names {
                if NOT_REPOSITORIES.contains(&name.as_str()) {
                    continue;
                }
                match parse_repo_folder(&name) {
                    Some((t, id)) if path.is_dir() => folders.push((t, id, path)),
                    _ => report.notes.push(format!(
                        "{}: not a repository folder (huggingface_hub's scan_cache_dir warns about it too)",
                        path.display()
                    )),
                }
            }
        }
    }

    let mut jobs = Vec::new();
    for (index, (repo_type, repo_id, folder)) in folders.into_iter().enumerate() {
        let (repo, mut repo_jobs) = survey_repo(index, repo_type, repo_id, folder, &mut report)?;
        report.repos.push(repo);
        jobs.append(&mut repo_jobs);
    }

    let total: u64 = jobs.iter().map(|j| j.size).sum();
    progress.start("check blobs", total);
    let results: Vec<(usize, u64, Option<CacheProblem>)> = jobs
        .par_iter()
        .map(|job| {
            progress.item(&job.etag);
            match hash_file(&job.path, job.kind, progress) {
                Ok(actual) if actual == job.etag => (job.repo, job.size, None),
                Ok(actual) => (
                    job.repo,
                    job.size,
                    Some(CacheProblem {
                        path: job.path.clone(),
                        kind: "blob-mismatch",
                        problem: format!(
                            "does not hash to its name: its {} is {actual}",
                            job.kind.name()
                        ),
                    }),
                ),
                Err(e) if e.kind() == io::ErrorKind::NotFound => (
                    job.repo,
                    0,
                    Some(CacheProblem {
                        path: job.path.clone(),
                        kind: "missing-blob",
                        problem: "is a link whose target (in the shared blob store) is missing"
                            .into(),
                    }),
                ),
                Err(e) => (
                    job.repo,
                    0,
                    Some(CacheProblem {
                        path: job.path.clone(),
                        kind: "blob-mismatch",
                        problem: format!("cannot be read: {e}"),
                    }),
                ),
            }
        })
        .collect();
    progress.finish();
    let users = snapshot_users(&report.repos);
    for (repo, bytes, problem) in results {
        report.repos[repo].blobs_checked += 1;
        report.repos[repo].bytes_checked += bytes;
        report.blobs_checked += 1;
        report.bytes_checked += bytes;
        if let Some(mut p) = problem {
            if let Some(files) = users.get(&p.path) {
                p.problem
                    .push_str(&format!("; used by {}", files.join(", ")));
            }
            report.problems.push(p);
        }
    }
    report.problems.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(report)
}

/// Blob path → the snapshot files (`<commit>/<path>`) that link to it, for messages.
fn snapshot_users(repos: &[CachedRepo]) -> HashMap<PathBuf, Vec<String>> {
    let mut out: HashMap<PathBuf, Vec<String>> = HashMap::new();
    for repo in repos {
        let snapshots = repo.folder.join("snapshots");
        for commit in &repo.snapshots {
            let dir = snapshots.join(commit);
            for e in walkdir::WalkDir::new(&dir)
                .min_depth(1)
                .sort_by_file_name()
                .into_iter()
                .filter_map(|e| e.ok())
                .filter(|e| e.path_is_symlink())
            {
                let Ok(target) = fs::read_link(e.path()) else {
                    continue;
                };
                let Some(name) = target.file_name() else {
                    continue;
                };
                let rel = e.path().strip_prefix(&dir).unwrap_or(e.path());
                out.entry(repo.folder.join("blobs").join(name))
                    .or_default()
                    .push(format!("{:?}", format!("{commit}/{}", rel.display())));
            }
        }
    }
    out
}

/// Reads one repository's refs, snapshots and blob list; returns the blobs to hash.
fn survey_repo(
    index: usize,
    repo_type: String,
    repo_id: String,
    folder: PathBuf,
    report: &mut CacheReport,
) -> Result<(CachedRepo, Vec<BlobJob>)> {
    let snapshots_dir = folder.join("snapshots");
    let mut snapshots = Vec::new();
    if let Ok(rd) = fs::read_dir(&snapshots_dir) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                snapshots.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    snapshots.sort();
    let mut refs = BTreeMap::new();
    for name in list_refs(&folder) {
        let path = folder.join("refs").join(&name);
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !is_commit(&text) {
            report.problems.push(CacheProblem {
                path: path.clone(),
                kind: "bad-ref",
                problem: if is_commit(text.trim()) {
                    format!(
                        "holds the commit with surrounding whitespace ({text:?}); huggingface_hub reads it unstripped, so offline lookups of {name:?} fail"
                    )
                } else {
                    format!(
                        "does not hold a 40-hex commit id (it holds {:?})",
                        text.chars().take(80).collect::<String>()
                    )
                },
            });
        } else if !snapshots.contains(&text) {
            report.problems.push(CacheProblem {
                path: path.clone(),
                kind: "ref-without-snapshot",
                problem: format!(
                    "names commit {text}, which has no snapshot folder (scan_cache_dir reports this repository as corrupted)"
                ),
            });
        }
        refs.insert(name, text);
    }
    for commit in &snapshots {
        let dir = snapshots_dir.join(commit);
        for e in walkdir::WalkDir::new(&dir)
            .min_depth(1)
            .sort_by_file_name()
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.path_is_symlink())
        {
            if fs::metadata(e.path()).is_err() {
                let target = fs::read_link(e.path()).unwrap_or_default();
                let rel = e.path().strip_prefix(&dir).unwrap_or(e.path());
                report.problems.push(CacheProblem {
                    path: e.path().to_path_buf(),
                    kind: "missing-blob",
                    problem: format!(
                        "{:?} in snapshot {commit} links to {}, which is missing",
                        rel.display().to_string(),
                        target.display()
                    ),
                });
            }
        }
    }
    let mut jobs = Vec::new();
    let blobs = folder.join("blobs");
    if let Ok(rd) = fs::read_dir(&blobs) {
        let mut names: Vec<(String, PathBuf)> = rd
            .filter_map(|e| e.ok())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        names.sort();
        for (name, path) in names {
            if let Some(kind) = EtagKind::of(&name) {
                let size = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                jobs.push(BlobJob {
                    repo: index,
                    path,
                    etag: name,
                    kind,
                    size,
                });
            } else if name.ends_with(".incomplete") {
                report.notes.push(format!(
                    "{}: an interrupted download; huggingface_hub ignores it (delete it, or run the download again)",
                    path.display()
                ));
            } else {
                report.notes.push(format!(
                    "{}: not named by an etag, so it cannot be checked",
                    path.display()
                ));
            }
        }
    }
    Ok((
        CachedRepo {
            repo_type,
            repo_id,
            folder,
            blobs_checked: 0,
            bytes_checked: 0,
            snapshots,
            refs,
        },
        jobs,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn cache_dir_resolves_like_huggingface_hub() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("HOME", "/home/u")], "/home/u/.cache/huggingface/hub"),
            (&[("HOME", "/home/u/")], "/home/u/.cache/huggingface/hub"),
            (
                &[("HOME", "/h"), ("XDG_CACHE_HOME", "/xdg")],
                "/xdg/huggingface/hub",
            ),
            (
                &[
                    ("HOME", "/h"),
                    ("XDG_CACHE_HOME", "/xdg"),
                    ("HF_HOME", "~/hf"),
                ],
                "/h/hf/hub",
            ),
            (
                &[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/legacy")],
                "/legacy",
            ),
            (
                &[
                    ("HF_HOME", "/hf"),
                    ("HUGGINGFACE_HUB_CACHE", "/legacy"),
                    ("HF_HUB_CACHE", "/new"),
                ],
                "/new",
            ),
            (
                &[
                    ("HF_HUB_CACHE", "$BASE/x/${SUB}/$NOPE/${}"),
                    ("BASE", "/b"),
                    ("SUB", "s"),
                ],
                "/b/x/s/$NOPE/${}",
            ),
            (&[("HF_HUB_CACHE", "~other/c")], "~other/c"),
        ];
        for (vars, want) in cases {
            let got = resolve_cache_dir(&env(vars)).unwrap();
            if want.starts_with('/') {
                assert_eq!(got, PathBuf::from(want), "{vars:?}");
            } else {
                assert!(got.ends_with(want), "{vars:?}: {}", got.display());
            }
        }
        let err = resolve_cache_dir(&env(&[("HF_HOME", "")])).unwrap_err();
        assert!(
            err.to_string().contains("HF_HOME is set but empty"),
            "{err}"
        );
        let err = resolve_cache_dir(&env(&[])).unwrap_err();
        assert!(err.to_string().contains("HOME is not set"), "{err}");
    }

    #[test]
    fn repo_ids_and_folders() {
        for ok in ["gpt2", "org/name", "Org-1/na_me.v2", "a/b"] {
            validate_repo_id(ok).unwrap();
        }
        for bad in [
            "", "a/b/c", "-a", "a-", "a/.b", "a--b", "a..b", "x.git", "café", "a b", "/a", "a/",
        ] {
            assert!(validate_repo_id(bad).is_err(), "{bad}");
        }
        assert_eq!(
            repo_folder_name("model", "julien-c/EsperBERTo-small"),
            "models--julien-c--EsperBERTo-small"
        );
        assert_eq!(repo_folder_name("dataset", "gpt2"), "datasets--gpt2");
        assert_eq!(
            parse_repo_folder("spaces--a--b"),
            Some(("space".into(), "a/b".into()))
        );
        assert_eq!(parse_repo_folder("other--a"), None);
        assert!(validate_revision("refs/pr/1").is_ok());
        assert!(validate_revision("../main").is_err());
    }

    #[test]
    fn etags_known_answers() {
        // `git hash-object` of "Hello, World!" (huggingface_hub's git_hash docstring).
        let mut g = GitBlobSha1::new(13);
        g.update(b"Hello, ");
        g.update(b"World!");
        assert_eq!(g.finish(), "b45ef6fec89518d314f546fd6c3025367b721684");
        // The empty blob.
        assert_eq!(
            GitBlobSha1::new(0).finish(),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(EtagKind::of(&"a".repeat(40)), Some(EtagKind::GitSha1));
        assert_eq!(EtagKind::of(&"a".repeat(64)), Some(EtagKind::Sha256));
        assert_eq!(EtagKind::of(&"A".repeat(40)), None);
        assert_eq!(EtagKind::of("../x"), None);
        assert_eq!(EtagKind::for_size(LFS_THRESHOLD - 1), EtagKind::GitSha1);
        assert_eq!(EtagKind::for_size(LFS_THRESHOLD), EtagKind::Sha256);
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
}
