//! The cache's layout on disk, read without trusting it: which links are followed, and how
//! much of a file is read.
//!
//! huggingface_hub's cache is made of links (`snapshots/<commit>/<path>` → `../../blobs/<etag>`,
//! and with the Xet shared store `blobs/<etag>` → `CACHE/blobs/<xx>/<hash>`). A cache that
//! crossed a USB stick or that another user can write may hold other links too: `refs/`,
//! `snapshots/` or `blobs/` pointing elsewhere, a snapshot file linked to `/etc/shadow`, a blob
//! that is `/dev/zero`. So, everywhere in `hfcache`:
//!
//! - the repository folder, `refs/`, `snapshots/`, `snapshots/<commit>/` and `blobs/` must be
//!   real directories (not links), and a snapshot's subdirectories too;
//! - a snapshot file may be a link only to `blobs/<etag>` of the same repository (checked on
//!   the link's text, resolved lexically: no directory on the way is a link, so that is where
//!   it leads), and a blob may be a link only to the cache's own shared store
//!   `CACHE/blobs/<xx>/<name>`, whose folders are real directories and whose entry is a file;
//! - a file is opened without blocking (a FIFO), checked to be a regular file on the open
//!   handle, and read up to a limit the caller knows (a ref: a commit id; a blob: its size).
//!
//! Anything else is refused with the path named.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::Mode;

use super::names::EtagKind;
use crate::error::{Error, Result};
use crate::fsio::{self, Cause};
use crate::hexdigest::is_lower_hex as is_hex;

/// The sentence every refusal of a link ends with.
pub(crate) const LINK_RULE: &str = "airlock follows only a snapshot file's link to ../../blobs/<etag> in the same repository (and a blob's link into the cache's shared blobs/ store)";

/// Opens `path` for reading without blocking and returns it with its size, if it is a regular
/// file. With `follow` false a final symlink is refused. Errors in the cache's words.
pub(crate) fn open_regular(path: &Path, follow: bool) -> io::Result<(File, u64)> {
    let follow = if follow {
        fsio::Follow::Final
    } else {
        fsio::Follow::Never
    };
    fsio::open_regular(path, follow).map_err(|e| match e.into_cause() {
        Cause::Link => NotAFile::Symlink.into(),
        Cause::NotRegular(what) => NotAFile::Other(cache_words(what)).into(),
        e => e.into(),
    })
}

/// A cache entry that is not a regular file where one is read (typed inside the `io::Error`
/// of [`open_regular`], kind `InvalidInput` as fsio's refusals have; in the cache's words).
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotAFile {
    /// A symbolic link, not followed.
    #[error("is a symlink")]
    Symlink,
    /// Something else: the words say what ("a FIFO", "a device").
    #[error("is {0}, not a regular file")]
    Other(&'static str),
}

impl From<NotAFile> for io::Error {
    fn from(e: NotAFile) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// [`fsio::describe_type`]'s words as the cache's messages say them.
fn cache_words(what: &'static str) -> &'static str {
    match what {
        "a character device" | "a block device" => "a device",
        "a symbolic link" => "a symlink",
        other => other,
    }
}

/// Reads the regular file at `path` (not following a final link) if it holds at most `limit`
/// bytes; `Ok(Err(n))` when it holds more (`n` is at least `limit + 1`; no more is read).
pub(crate) fn read_limited(
    path: &Path,
    limit: u64,
) -> io::Result<std::result::Result<Vec<u8>, u64>> {
    let (f, len) = open_regular(path, false)?;
    if len > limit {
        return Ok(Err(len));
    }
    let mut out = Vec::with_capacity(len as usize);
    f.take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Ok(Err(out.len() as u64));
    }
    Ok(Ok(out))
}

/// What a file type is, in words.
pub(crate) fn describe(ft: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_symlink() {
        "a symlink"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a regular file"
    }
}

/// `Ok(true)` if `path` is a real directory, `Ok(false)` if nothing is there; a link or any
/// other file is refused, naming the path.
pub(crate) fn real_dir(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) if m.file_type().is_symlink() => Err(Error::HfCache {
            path: path.to_path_buf(),
            reason: format!(
                "is a symlink to {}, not a directory of the cache: {LINK_RULE}",
                fs::read_link(path).unwrap_or_default().display()
            ),
        }),
        Ok(m) => Err(Error::HfCache {
            path: path.to_path_buf(),
            reason: format!(
                "is {} where the cache has a directory",
                describe(&m.file_type())
            ),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// `base.join(target)` with `.` and `..` applied to the text; `None` if it climbs above `/`.
fn lexical_join(base: &Path, target: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in base.join(target).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// Where a snapshot file's content is, once its link (if any) is checked.
#[derive(Debug)]
pub(crate) enum Content {
    /// A real file in the snapshot (symlinks were off when it was downloaded).
    File,
    /// A link to `repo/blobs/<etag>`, whose content is at `source` (the blob, or its entry in
    /// the shared store), a regular file.
    Blob { source: PathBuf },
    /// A link to `repo/blobs/<etag>` (`blob`), which does not exist (or whose shared-store
    /// entry does not).
    MissingBlob { blob: PathBuf },
}

/// Checks the snapshot entry `full` (of type `ft`, not followed) in `repo`: a real file, or a
/// link that airlock follows. Anything else is an error naming `full` (or the blob).
pub(crate) fn snapshot_content(repo: &Path, full: &Path, ft: &fs::FileType) -> Result<Content> {
    if ft.is_file() {
        return Ok(Content::File);
    }
    if !ft.is_symlink() {
        return Err(Error::HfCache {
            path: full.to_path_buf(),
            reason: format!(
                "is {} inside a snapshot folder; a snapshot holds files and links to blobs only",
                describe(ft)
            ),
        });
    }
    let target = fs::read_link(full).map_err(|e| Error::io(full, e))?;
    let etag = link_etag(repo, full, &target)?;
    let blobs = repo.join("blobs");
    let blob = blobs.join(&etag);
    // `blobs/` itself must not be a link (one lstat per file: no cache of a check's result
    // that a swap could outdate).
    if !real_dir(&blobs)? {
        return Ok(Content::MissingBlob { blob });
    }
    match blob_source(repo, &blob)? {
        Some((source, _)) => Ok(Content::Blob { source }),
        None => Ok(Content::MissingBlob { blob }),
    }
}

/// The etag of the blob the snapshot entry `full` of `repo`, a link whose text is `target`,
/// points at: the text resolved lexically must be `repo/blobs/<etag>` (no directory on the
/// way is a link, so that is where it leads). Anything else is refused, naming `full`.
pub(crate) fn link_etag(repo: &Path, full: &Path, target: &Path) -> Result<String> {
    match hub_link_etag(repo, full, target) {
        Some(etag) => Ok(etag.to_string()),
        None => resolved_link_etag(repo, full, target),
    }
}

/// [`link_etag`] by resolving the link's text lexically.
fn resolved_link_etag(repo: &Path, full: &Path, target: &Path) -> Result<String> {
    let blobs = repo.join("blobs");
    let resolved = lexical_join(full.parent().expect("inside the snapshot"), target);
    let etag = match &resolved {
        Some(r) if r.parent() == Some(blobs.as_path()) => r
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| EtagKind::of(n).is_some())
            .map(str::to_string),
        _ => None,
    };
    etag.ok_or_else(|| Error::HfCache {
        path: full.to_path_buf(),
        reason: format!(
            "is a symlink to {}, which is not a blob of this repository: {LINK_RULE}",
            target.display()
        ),
    })
}

/// The etag of the link `full` of `repo` whose text is `target` when that text has the form
/// huggingface_hub writes, compared as bytes: one `../` for each folder between the link and
/// the repository, then `blobs/<etag>`. The same answer [`link_etag`]'s lexical resolution
/// gives for it, without parsing both paths into components (a dataset of a million links).
/// `None`: any other form, which that resolution decides.
fn hub_link_etag<'t>(repo: &Path, full: &Path, target: &'t Path) -> Option<&'t str> {
    use std::os::unix::ffi::OsStrExt;
    let below = full
        .as_os_str()
        .as_bytes()
        .strip_prefix(repo.as_os_str().as_bytes())?
        .strip_prefix(b"/")?;
    // The walk joins plain names: a `.`, `..` or empty part leaves it to the resolution.
    if below
        .split(|&b| b == b'/')
        .any(|part| part.is_empty() || part == b"." || part == b"..")
    {
        return None;
    }
    let ups = below.iter().filter(|&&b| b == b'/').count();
    let mut rest = target.as_os_str().as_bytes();
    for _ in 0..ups {
        rest = rest.strip_prefix(b"../")?;
    }
    let etag = std::str::from_utf8(rest.strip_prefix(b"blobs/")?).ok()?;
    EtagKind::of(etag).is_some().then_some(etag)
}

/// A blob of a repository, found through the repository's `blobs/` handle.
#[derive(Debug)]
pub(crate) enum BlobFile {
    /// The blob itself, a regular file, open (no link followed, no blocking) with the `fstat`
    /// that checked it.
    Open(File, rustix::fs::Stat),
    /// A link into the cache's shared store, checked by [`blob_source`]: the entry it leads to
    /// and its size (read by path, as a link's target is).
    Shared(PathBuf, u64),
    /// Not there (nor its shared-store entry).
    Missing,
}

/// Opens blob `etag` of `repo` below `blobs`, the repository's `blobs/` folder opened without
/// following a link: one `openat` and one `fstat` a blob, nothing looked up again by path. A
/// blob that is a link goes through [`blob_source`]'s rule (only into the shared store); one
/// that is not a regular file is refused, naming it.
pub(crate) fn open_blob(repo: &Path, blobs: &OwnedFd, etag: &str) -> Result<BlobFile> {
    let blob = || repo.join("blobs").join(etag);
    match fsio::open_file_at(blobs, std::ffi::OsStr::new(etag)).map_err(fsio::Error::into_cause) {
        Ok((file, st)) => Ok(BlobFile::Open(file, st)),
        Err(Cause::NotFound) => Ok(BlobFile::Missing),
        Err(Cause::Link) => Ok(match blob_source(repo, &blob())? {
            Some((source, len)) => BlobFile::Shared(source, len),
            None => BlobFile::Missing,
        }),
        Err(Cause::NotRegular(what)) => Err(Error::HfCache {
            path: blob(),
            reason: format!("is {}, not a regular file", cache_words(what)),
        }),
        Err(e) => Err(Error::io(blob(), e.into())),
    }
}

/// The target text of the link `name` in the directory `dir`, read through the handle.
pub(crate) fn read_link_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    Ok(PathBuf::from(std::ffi::OsString::from_vec(
        target.into_bytes(),
    )))
}

/// The regular file holding blob `blob` of `repo` and its size: the blob itself, or the entry
/// of the cache's shared store it links to. `None` when either is missing.
pub(crate) fn blob_source(repo: &Path, blob: &Path) -> Result<Option<(PathBuf, u64)>> {
    let meta = match fs::symlink_metadata(blob) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(blob, e)),
    };
    if meta.is_file() {
        return Ok(Some((blob.to_path_buf(), meta.len())));
    }
    if !meta.file_type().is_symlink() {
        return Err(Error::HfCache {
            path: blob.to_path_buf(),
            reason: format!("is {}, not a regular file", describe(&meta.file_type())),
        });
    }
    // A blob published to the shared store: `CACHE/blobs/<xx>/<hash>`, a real file below
    // real directories.
    let target = fs::read_link(blob).map_err(|e| Error::io(blob, e))?;
    let cache = repo.parent().unwrap_or(repo);
    let store = cache.join("blobs");
    let resolved = lexical_join(blob.parent().expect("in blobs/"), &target);
    let entry = resolved.filter(|r| {
        let prefix = r.parent();
        prefix.and_then(Path::parent) == Some(store.as_path())
            && prefix
                .and_then(Path::file_name)
                .and_then(|n| n.to_str())
                .is_some_and(|n| is_hex(n, 2))
            && r.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    let refuse = || Error::HfCache {
        path: blob.to_path_buf(),
        reason: format!(
            "is a symlink to {}, which is not an entry of the cache's shared blob store: {LINK_RULE}",
            target.display()
        ),
    };
    let Some(entry) = entry else {
        return Err(refuse());
    };
    let prefix = entry.parent().expect("checked above");
    if !real_dir(&store).map_err(|_| refuse())? || !real_dir(prefix).map_err(|_| refuse())? {
        return Ok(None);
    }
    match fs::symlink_metadata(&entry) {
        Ok(m) if m.is_file() => Ok(Some((entry, m.len()))),
        Ok(m) => Err(Error::HfCache {
            path: entry,
            reason: format!(
                "is {}, not a regular file ({} links to it)",
                describe(&m.file_type()),
                blob.display()
            ),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&entry, e)),
    }
}

/// The repository folder and its `refs/`, `snapshots/` and `blobs/` folders, opened without
/// following a link: each is a real directory or absent (`None`).
#[derive(Debug)]
pub struct RepoDirs {
    /// The repository folder.
    pub repo: OwnedFd,
    /// `refs/`.
    pub refs: Option<OwnedFd>,
    /// `snapshots/`.
    pub snapshots: Option<OwnedFd>,
    /// `blobs/`.
    pub blobs: Option<OwnedFd>,
}

/// Opens `repo` and its `refs/`, `snapshots/` and `blobs/` folders, and checks the folders on
/// the way to `refs/<revision>` (for `refs/pr/1`: `refs/pr/`), refusing any that is a symlink
/// or not a directory. For an installer about to write into an existing repository: writes
/// through the returned handles, or by path right after this check, cannot land at a link's
/// target outside the repository.
pub fn open_repo_dirs_nofollow(repo: &Path, revision: Option<&str>) -> Result<RepoDirs> {
    let refuse = |path: PathBuf| -> Error {
        match real_dir(&path) {
            Err(e) => e,
            Ok(_) => Error::HfCache {
                path,
                reason: "cannot be opened as a directory".into(),
            },
        }
    };
    let open = |dir: &OwnedFd, path: &Path, name: &str| -> Result<Option<OwnedFd>> {
        match fsio::open_dir_at(dir, name) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => Ok(None),
            Err(e)
                if matches!(
                    e.errno(),
                    Some(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
                ) =>
            {
                Err(refuse(path.join(name)))
            }
            Err(e) => Err(Error::io(path.join(name), e.into())),
        }
    };
    let repo_fd = match fsio::open_dir_path(repo, fsio::Follow::Never) {
        Ok(fd) => fd,
        Err(e)
            if matches!(
                e.errno(),
                Some(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
            ) =>
        {
            return Err(refuse(repo.to_path_buf()));
        }
        Err(e) => return Err(Error::io(repo, e.into())),
    };
    let refs = open(&repo_fd, repo, "refs")?;
    let snapshots = open(&repo_fd, repo, "snapshots")?;
    let blobs = open(&repo_fd, repo, "blobs")?;
    if let (Some(refs_fd), Some(revision)) = (&refs, revision) {
        let mut dir = refs_fd
            .try_clone()
            .map_err(|e| Error::io(repo.join("refs"), e))?;
        let mut path = repo.join("refs");
        let parts: Vec<&str> = revision.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            match open(&dir, &path, part)? {
                Some(next) => dir = next,
                None => break,
            }
            path.push(part);
        }
    }
    Ok(RepoDirs {
        repo: repo_fd,
        refs,
        snapshots,
        blobs,
    })
}

/// The cache's own folder where huggingface_hub takes its download locks, and where airlock
/// stages an install (`CACHE/.locks/.airlock-staging-*`): on the cache's filesystem, and
/// ignored by `scan_cache_dir`.
pub const LOCKS_DIR: &str = ".locks";

/// Opens the cache's `.locks` folder in the cache open as `cache_fd` (at `cache`), to stage an
/// install in it: `None` when there is none. On a shared cache `.locks` is a folder every user
/// writes (huggingface_hub takes its locks there), so what airlock stages there must be out of
/// their reach: a link is refused (the staged tree would be built wherever it leads, outside
/// the cache), and so is a folder other users can write without the sticky bit (any of them
/// could rename airlock's staging directory away and put one of their own in its place);
/// [`locks_mode_problem`] says which. Each refusal names the path and the problem.
pub fn open_locks(cache_fd: &OwnedFd, cache: &Path) -> Result<Option<OwnedFd>> {
    let path = cache.join(LOCKS_DIR);
    let fd = match fsio::open_dir_at(cache_fd, LOCKS_DIR) {
        Ok(fd) => fd,
        Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => return Ok(None),
        Err(e)
            if matches!(
                e.errno(),
                Some(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
            ) =>
        {
            return Err(not_a_locks_dir(cache_fd, &path));
        }
        Err(e) => return Err(Error::io(&path, e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(&path, e.into()))?;
    let egid = rustix::process::getegid().as_raw();
    if let Some(problem) = locks_mode_problem(st.st_mode, st.st_gid, egid) {
        return Err(Error::HfCache {
            path,
            reason: format!(
                "{problem}: any of them could rename the staging directory airlock makes there and put their own in its place"
            ),
        });
    }
    Ok(Some(fd))
}

/// Creates the cache's `.locks` folder (0755, whatever the umask) in the cache open as
/// `cache_fd`, or opens the one that appeared meanwhile, under [`open_locks`]'s rules; returns
/// its handle and whether airlock created it.
pub fn create_locks(cache_fd: &OwnedFd, cache: &Path) -> Result<(OwnedFd, bool)> {
    let path = cache.join(LOCKS_DIR);
    match rustix::fs::mkdirat(cache_fd, LOCKS_DIR, Mode::from_raw_mode(0o755)) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => {
            return match open_locks(cache_fd, cache)? {
                Some(fd) => Ok((fd, false)),
                None => Err(Error::io(&path, io::ErrorKind::NotFound.into())),
            };
        }
        Err(e) => return Err(Error::io(&path, e.into())),
    }
    let fd = match fsio::open_dir_at(cache_fd, LOCKS_DIR) {
        Ok(fd) => fd,
        Err(e)
            if matches!(
                e.errno(),
                Some(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
            ) =>
        {
            return Err(not_a_locks_dir(cache_fd, &path));
        }
        Err(e) => return Err(Error::io(&path, e.into())),
    };
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755)).map_err(|e| Error::io(&path, e.into()))?;
    Ok((fd, true))
}

/// The refusal of a `.locks` that is a link or not a directory.
fn not_a_locks_dir(cache_fd: &OwnedFd, path: &Path) -> Error {
    let reason = match fsio::stat_at(cache_fd, LOCKS_DIR) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink() => format!(
            "is a symlink to {}, not a directory: airlock stages an install in the cache's own .locks folder and follows no link there (the staged tree would be built outside the cache)",
            fs::read_link(path).unwrap_or_default().display()
        ),
        _ => "is not a directory where the cache has its .locks folder".to_string(),
    };
    Error::HfCache {
        path: path.to_path_buf(),
        reason,
    }
}

/// What makes a `.locks` folder of mode `mode` and group `gid` unsafe to stage in for a
/// process of effective group `egid`, if anything: being writable by all users, or by a group
/// other than the process's own, without the sticky bit (which lets only an entry's owner
/// rename or remove it). A folder writable by the process's own group passes: under the user
/// private groups most systems give their users (umask 002), that group is the user alone, and
/// huggingface_hub makes `.locks` with the umask's mode.
pub(crate) fn locks_mode_problem(mode: u32, gid: u32, egid: u32) -> Option<String> {
    if mode & 0o1000 != 0 {
        return None;
    }
    let by = if mode & 0o002 != 0 {
        "all users".to_string()
    } else if mode & 0o020 != 0 && gid != egid {
        format!("the users of its group {gid}")
    } else {
        return None;
    };
    Some(format!(
        "is a directory writable by {by} (mode {:04o}, no sticky bit)",
        mode & 0o7777
    ))
}

/// The folder in a repository folder where airlock notes the commits it installed
/// (`REPO/.airlock/<commit>`). huggingface_hub's readers and `scan_cache_dir` look only at
/// `blobs/`, `refs/` and `snapshots/`, so it is invisible to them. It is a trace for messages
/// (a damaged blob there is repaired by unpacking the bundle again, not by downloading), not a
/// security record: anyone who can write the cache can plant or remove it.
pub const TRACE_DIR: &str = ".airlock";

/// Notes in `repo` that airlock installed `commit` (`text`: what was installed, one line). The
/// folder and file are created through handles that refuse links, mode 0755 and 0644.
pub fn leave_trace(repo: &Path, commit: &str, text: &str) -> Result<()> {
    let dirs = open_repo_dirs_nofollow(repo, None)?;
    let trace = repo.join(TRACE_DIR);
    match rustix::fs::mkdirat(&dirs.repo, TRACE_DIR, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(Error::io(&trace, e.into())),
    }
    let dir = fsio::open_dir_at(&dirs.repo, TRACE_DIR).map_err(|e| {
        real_dir(&trace)
            .err()
            .unwrap_or_else(|| NotADirectory(e).at(&trace))
    })?;
    crate::durable::replace_at(&dir, &trace, commit, format!("{text}\n").as_bytes(), 0o644)
}

/// The folder of the trace holding a receipt per installed commit:
/// `REPO/.airlock/receipts/<commit>/`, each holding the bundle's signed `manifest.json`, its
/// `.minisig`, the co-signatures that counted and the trust roots it carried, exactly as an
/// installed directory's receipt does (FORMAT.md sections 10, 14.2 and 18).
pub const RECEIPTS_DIR: &str = "receipts";

/// Leaves the receipt (`files`: name and bytes) of the bundle that installed `commit` in
/// `repo`'s trace folder: written into a new folder through handles (no link followed), synced,
/// and renamed into place in one step (an earlier receipt of the same commit is swapped out and
/// removed).
pub fn leave_receipt(repo: &Path, commit: &str, files: &[(String, Vec<u8>)]) -> Result<()> {
    use rustix::fs::RenameFlags;
    let dirs = open_repo_dirs_nofollow(repo, None)?;
    let trace = repo.join(TRACE_DIR);
    let trace_fd = ensure_dir(&dirs.repo, &trace, TRACE_DIR)?;
    let receipts = trace.join(RECEIPTS_DIR);
    let receipts_fd = ensure_dir(&trace_fd, &receipts, RECEIPTS_DIR)?;
    let tmp = format!(".{commit}.airlock-tmp-{}", std::process::id());
    let tmp_fd = crate::durable::mkdir_at(&receipts_fd, &receipts, &tmp, 0o755)?;
    let tmp_path = receipts.join(&tmp);
    for (name, bytes) in files {
        crate::durable::write_synced_at(&tmp_fd, &tmp_path, name, bytes, 0o644)?;
    }
    crate::durable::sync_dir_fd(&tmp_fd, &tmp_path)?;
    let placed = match fsio::rename_at(
        &receipts_fd,
        &tmp,
        &receipts_fd,
        commit,
        RenameFlags::NOREPLACE,
    ) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fsio::rename_at(
            &receipts_fd,
            &tmp,
            &receipts_fd,
            commit,
            RenameFlags::EXCHANGE,
        ),
        Err(e) => Err(e),
    };
    placed.map_err(|e| Error::io(receipts.join(commit), e.into()))?;
    // After an exchange the old receipt sits at the temporary name: remove its files.
    if let Ok(old) = fsio::open_dir_at(&receipts_fd, tmp.as_str()) {
        for (name, _) in fsio::dir_entries(&old).unwrap_or_default() {
            let _ = rustix::fs::unlinkat(&old, &name, rustix::fs::AtFlags::empty());
        }
        let _ = rustix::fs::unlinkat(&receipts_fd, tmp.as_str(), rustix::fs::AtFlags::REMOVEDIR);
    }
    crate::durable::sync_dir_fd(&receipts_fd, &receipts)
}

/// Opens the folder `name` in `dir` (shown as `path`), creating it (0755) if missing; a link
/// or a file there is refused.
fn ensure_dir(dir: &OwnedFd, path: &Path, name: &str) -> Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(Error::io(path, e.into())),
    }
    fsio::open_dir_at(dir, name).map_err(|e| {
        real_dir(path)
            .err()
            .unwrap_or_else(|| NotADirectory(e).at(path))
    })
}

/// A folder of the trace that `real_dir` finds a real directory but that cannot be opened as
/// one (typed inside the `io::Error` of the error naming it; why is its source).
#[derive(Debug, thiserror::Error)]
#[error("cannot be opened as a directory")]
struct NotADirectory(#[source] fsio::Error);

impl NotADirectory {
    /// The error naming `path` (kind `Other`: it is a directory, and why it cannot be opened
    /// is the source's, so it draws no hint of its own). The module's one such conversion.
    fn at(self, path: &Path) -> Error {
        Error::io(path, io::Error::other(self))
    }
}

/// The receipts airlock left in `repo`'s trace folder: each installed commit and its receipt
/// folder (not read here; its files may be absent or hostile).
pub fn receipts(repo: &Path) -> Result<Vec<(String, PathBuf)>> {
    let dir = repo.join(TRACE_DIR).join(RECEIPTS_DIR);
    if !real_dir(&repo.join(TRACE_DIR))? || !real_dir(&dir)? {
        return Ok(Vec::new());
    }
    let mut out: Vec<(String, PathBuf)> = fsio::list_dir(&dir, fsio::Follow::Never)
        .map_err(|e| Error::io(&dir, e.into()))?
        .into_iter()
        .filter_map(|(n, _)| n.into_string().ok())
        .filter(|n| super::names::is_commit(n))
        .filter(|n| matches!(real_dir(&dir.join(n)), Ok(true)))
        .map(|n| {
            let p = dir.join(&n);
            (n, p)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Opens the file `rel` of `snapshots/<commit>/` in `repo` for reading: every folder on the way
/// a real directory, the entry a real file or a link airlock follows ([`snapshot_content`]),
/// the content a regular file opened without blocking.
pub fn open_snapshot_file(repo: &Path, commit: &str, rel: &str) -> Result<File> {
    let snapshot = repo.join("snapshots").join(commit);
    let mut at = snapshot.clone();
    let (parents, _) = rel.rsplit_once('/').unwrap_or(("", rel));
    for dir in std::iter::once(repo.join("snapshots"))
        .chain(std::iter::once(snapshot.clone()))
        .chain(parents.split('/').filter(|c| !c.is_empty()).map(|c| {
            at.push(c);
            at.clone()
        }))
    {
        if !real_dir(&dir)? {
            return Err(Error::io(&dir, io::ErrorKind::NotFound.into()));
        }
    }
    let full = snapshot.join(rel);
    let meta = fs::symlink_metadata(&full).map_err(|e| Error::io(&full, e))?;
    let source = match snapshot_content(repo, &full, &meta.file_type())? {
        Content::File => full,
        Content::Blob { source, .. } => source,
        Content::MissingBlob { blob, .. } => {
            return Err(Error::io(&blob, io::ErrorKind::NotFound.into()));
        }
    };
    fsio::open_regular(&source, fsio::Follow::Never)
        .map(|(f, _)| f)
        .map_err(|e| Error::io(&source, e.into()))
}

/// The commits airlock's trace in `repo` names, sorted; empty when there is none (or it is
/// not a real directory).
pub fn traces(repo: &Path) -> Vec<String> {
    let trace = repo.join(TRACE_DIR);
    if !matches!(real_dir(&trace), Ok(true)) {
        return Vec::new();
    }
    let mut out: Vec<String> = fsio::list_dir(&trace, fsio::Follow::Never)
        .map(|rd| {
            rd.into_iter()
                .filter_map(|(n, _)| n.into_string().ok())
                .filter(|n| super::names::is_commit(n))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_resolve_on_their_text() {
        assert_eq!(
            lexical_join(
                Path::new("/c/r/snapshots/x/a"),
                Path::new("../../../blobs/e")
            ),
            Some(PathBuf::from("/c/r/blobs/e"))
        );
        assert_eq!(lexical_join(Path::new("/a"), Path::new("../../x")), None);
    }

    #[test]
    fn the_hub_form_of_a_link_reads_as_its_resolution_does() {
        let repo = Path::new("/c/models--a--b");
        let e40 = "0123456789abcdef0123456789abcdef01234567";
        let e64 = "ab".repeat(32);
        let deep = repo.join("snapshots/c1/d/e/f.bin");
        let top = repo.join("snapshots/c1/f.bin");
        let cases: Vec<(&Path, String, bool)> = vec![
            // The hub's own form, at two depths and for both kinds of etag.
            (&top, format!("../../blobs/{e40}"), true),
            (&deep, format!("../../../../blobs/{e64}"), true),
            // One `../` short or too many, a detour, an absolute text, a bad etag: all left
            // to the resolution, which refuses or accepts them itself.
            (&top, format!("../blobs/{e40}"), false),
            (&top, format!("../../../blobs/{e40}"), false),
            (&top, format!("../../snapshots/../blobs/{e40}"), false),
            (&top, format!("/c/models--a--b/blobs/{e40}"), false),
            (&top, "../../blobs/xyz".into(), false),
            (&top, format!("../../blobs/{e40}/x"), false),
        ];
        for (full, target, fast) in cases {
            let target = Path::new(&target);
            let quick = hub_link_etag(repo, full, target);
            assert_eq!(quick.is_some(), fast, "{target:?}");
            let resolved = resolved_link_etag(repo, full, target).ok();
            if let Some(etag) = quick {
                assert_eq!(resolved.as_deref(), Some(etag), "{target:?}");
            }
            assert_eq!(link_etag(repo, full, target).ok(), resolved, "{target:?}");
        }
        // A path the walk would not make (a `.` in it) is left to the resolution.
        let dotted = repo.join("snapshots/./c1/f.bin");
        assert_eq!(
            hub_link_etag(repo, &dotted, Path::new(&format!("../../../blobs/{e40}"))),
            None
        );
    }

    #[test]
    fn a_locks_folder_others_can_write_is_refused_unless_sticky() {
        let me = 1000;
        // Nobody else can write it.
        assert_eq!(locks_mode_problem(0o040755, 5, me), None);
        assert_eq!(locks_mode_problem(0o040700, 5, me), None);
        // Sticky: only an entry's owner renames it.
        assert_eq!(locks_mode_problem(0o041777, 5, me), None);
        assert_eq!(locks_mode_problem(0o041775, 5, me), None);
        // Writable by the process's own (private) group.
        assert_eq!(locks_mode_problem(0o040775, me, me), None);
        assert_eq!(
            locks_mode_problem(0o040777, me, me).unwrap(),
            "is a directory writable by all users (mode 0777, no sticky bit)"
        );
        assert_eq!(
            locks_mode_problem(0o042775, 5, me).unwrap(),
            "is a directory writable by the users of its group 5 (mode 2775, no sticky bit)"
        );
        assert!(locks_mode_problem(0o040757, 5, me).is_some());
    }

    #[test]
    fn locks_as_a_link_or_open_to_all_is_refused_and_a_sticky_one_is_used() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let cache = t.path().join("cache");
        fs::create_dir(&cache).unwrap();
        let cache_fd = fsio::open_dir_path(&cache, fsio::Follow::Never).unwrap();
        let locks = cache.join(LOCKS_DIR);
        assert!(open_locks(&cache_fd, &cache).unwrap().is_none());
        let (_, made) = create_locks(&cache_fd, &cache).unwrap();
        assert!(made);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&locks), 0o755);
        let (_, made) = create_locks(&cache_fd, &cache).unwrap();
        assert!(!made);
        fs::set_permissions(&locks, fs::Permissions::from_mode(0o777)).unwrap();
        let err = open_locks(&cache_fd, &cache).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{}: is a directory writable by all users (mode 0777, no sticky bit)",
                locks.display()
            )),
            "{err}"
        );
        assert!(create_locks(&cache_fd, &cache).is_err());
        fs::set_permissions(&locks, fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(open_locks(&cache_fd, &cache).unwrap().is_some());
        fs::remove_dir(&locks).unwrap();
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, &locks).unwrap();
        for err in [
            open_locks(&cache_fd, &cache).unwrap_err(),
            create_locks(&cache_fd, &cache).unwrap_err(),
        ] {
            assert!(
                err.to_string().starts_with(&format!(
                    "{}: is a symlink to {}",
                    locks.display(),
                    elsewhere.display()
                )),
                "{err}"
            );
        }
        fs::remove_file(&locks).unwrap();
        fs::write(&locks, b"").unwrap();
        let err = open_locks(&cache_fd, &cache).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
    }

    #[test]
    fn symlinked_repo_folders_are_refused_for_writing() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("models--a--b");
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        fs::create_dir_all(repo.join("snapshots")).unwrap();
        open_repo_dirs_nofollow(&repo, Some("main")).unwrap();
        symlink(&elsewhere, repo.join("blobs")).unwrap();
        let err = open_repo_dirs_nofollow(&repo, Some("main")).unwrap_err();
        assert!(err.to_string().contains("blobs: is a symlink"), "{err}");
        fs::remove_file(repo.join("blobs")).unwrap();
        fs::create_dir_all(repo.join("refs")).unwrap();
        symlink(&elsewhere, repo.join("refs/pr")).unwrap();
        open_repo_dirs_nofollow(&repo, Some("main")).unwrap();
        let err = open_repo_dirs_nofollow(&repo, Some("pr/1")).unwrap_err();
        assert!(err.to_string().contains("refs/pr: is a symlink"), "{err}");
        let link = t.path().join("models--a--c");
        symlink(&repo, &link).unwrap();
        let err = open_repo_dirs_nofollow(&link, None).unwrap_err();
        assert!(err.to_string().contains("is a symlink"), "{err}");
    }
}
