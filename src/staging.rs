//! Work directories: where pack builds `BUNDLE.partial/` and where both installers build a tree
//! before one rename makes it visible.
//!
//! One type, [`Staging`], so that every writer gets the same guarantees:
//!
//! - **Private from birth.** The directory is made `0700` (set explicitly, whatever the umask),
//!   so no other local user can swap anything inside it; the work inside goes through the
//!   directory handle kept open from creation to the final rename.
//! - **Locked before it is visible.** Stale-work cleanup looks only at names starting with
//!   [`STAGING_PREFIX`] (and a pack's `BUNDLE.partial`). A new work directory is made under a
//!   birth name ([`BIRTH_PREFIX`]), its lock file is created and `flock`ed through the
//!   directory handle, and only then is it renamed (`RENAME_NOREPLACE`) to the name cleanup
//!   knows. Cleanup therefore never sees one of these names without a held lock while its
//!   process lives: there is no window in which a concurrent run can take a live directory for
//!   a stale one. A birth directory left by a process killed in the microseconds before that
//!   rename is removed once it is older than [`BIRTH_GRACE`].
//! - **Removed on every exit but the final rename.** Dropping a `Staging` removes it; so does
//!   [`interrupt`], which the binary calls on SIGINT/SIGTERM before exiting. Renames out of a
//!   work directory happen under [`CommitGuard`], which `interrupt` also takes, so an interrupt
//!   can never remove a tree while it moves into its destination.
//! - **Never across a mount point, never through a link.** Removal walks directory handles
//!   opened with `O_NOFOLLOW`, and refuses to descend into a directory that is the root of a
//!   mount (bind mounts included, via `statx`'s `STATX_ATTR_MOUNT_ROOT`) or on another device.
//!
//! A later run removes a work directory only when it has airlock's name, belongs to this user,
//! holds the lock file and the lock can be taken (the process that made it is gone). Anything
//! else is left alone; one that looks stale but cannot be removed (another user's) is reported
//! and skipped, never an error.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, FlockOperation, RenameFlags};

use crate::error::{Error, Result};
use crate::fsio;

/// Name of the lock file inside a work directory.
pub const LOCK_NAME: &str = ".airlock-lock";
/// Name of the resume marker inside an install's work directory (FORMAT.md section 22): the
/// signed manifest's digest, the destination and the kind of target, written when the work
/// directory is made. A work directory holding it is kept on SIGINT/SIGTERM and after an
/// operational failure, so a rerun of the same bundle into the same destination resumes.
pub const RESUME_NAME: &str = ".airlock-resume";
/// Largest resume marker read.
const RESUME_MAX: u64 = 4096;
/// Prefix of the staging directories the installers create.
pub const STAGING_PREFIX: &str = ".airlock-staging-";
/// Prefix of a work directory before it is locked and renamed to its working name.
pub const BIRTH_PREFIX: &str = ".airlock-birth-";
/// Age after which an abandoned birth directory is removed.
pub(crate) const BIRTH_GRACE: Duration = Duration::from_secs(600);

/// Work directories of this process that still exist, for [`interrupt`].
static LIVE: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);
/// Tokens of the work directories [`interrupt`] keeps (they hold a resume marker).
static RESUMABLE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn resumable() -> MutexGuard<'static, Vec<u64>> {
    RESUMABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn live() -> MutexGuard<'static, Vec<(u64, PathBuf)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while work moves out of a work directory into its destination; [`interrupt`] waits
/// for it, so a destination is never half-moved by a signal.
pub struct CommitGuard(#[allow(dead_code)] MutexGuard<'static, Vec<(u64, PathBuf)>>);

/// Takes the [`CommitGuard`].
pub fn commit_guard() -> CommitGuard {
    CommitGuard(live())
}

/// Returned by [`interrupt`]: while it is held no work can be published. The caller exits.
pub struct Interrupted {
    _guard: MutexGuard<'static, Vec<(u64, PathBuf)>>,
    /// What was removed: the work directories, then the directories created for the work
    /// that were left empty, in that order.
    pub removed: Vec<PathBuf>,
    /// Work directories kept for a rerun to resume (they hold a resume marker).
    pub kept: Vec<PathBuf>,
}

/// Directories this process created for its work (the missing parents of a destination):
/// removed by [`interrupt`] after the work directories, each only if it is empty then.
static CREATED: Mutex<Vec<CreatedEntry>> = Mutex::new(Vec::new());

/// A registered directory: its token, the handle of the directory it was made in, its name
/// there and its path (for the report).
type CreatedEntry = (u64, std::sync::Arc<OwnedFd>, String, PathBuf);

/// A directory registered with [`register_created`]; unregistered when dropped.
#[derive(Debug)]
pub struct CreatedDir(u64);

/// Registers `name` in the directory `parent` (at `path`), a directory this process just
/// created for its work, for removal by [`interrupt`] through `parent` while it is still
/// empty (a published result inside it keeps it).
pub fn register_created(parent: std::sync::Arc<OwnedFd>, name: &str, path: PathBuf) -> CreatedDir {
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    CREATED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((token, parent, name.to_string(), path));
    CreatedDir(token)
}

impl Drop for CreatedDir {
    fn drop(&mut self) {
        CREATED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(t, ..)| *t != self.0);
    }
}

/// Removes every work directory of this process (after any rename in progress has finished),
/// then the directories it created for them that are empty, and blocks further publishing.
/// For the binary's SIGINT/SIGTERM handler, which reports what was removed and exits next.
pub fn interrupt() -> Interrupted {
    let mut guard = live();
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    let keep = resumable().clone();
    for (token, path) in guard.drain(..) {
        if keep.contains(&token) {
            kept.push(path);
            continue;
        }
        // The main thread may still be writing into it: a few passes empty it.
        for _ in 0..5 {
            match remove_tree(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => continue,
                Err(_) => break,
                Ok(()) => {
                    removed.push(path);
                    break;
                }
            }
        }
    }
    let created = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, parent, name, path) in created.into_iter().rev() {
        // A kept work directory is inside: `rmdir` fails on it, as it should.
        // `rmdir` removes only an empty directory and never follows a link.
        if rustix::fs::unlinkat(&*parent, name.as_str(), AtFlags::REMOVEDIR).is_ok() {
            removed.push(path);
        }
    }
    Interrupted {
        _guard: guard,
        removed,
        kept,
    }
}

fn unregister(guard: &mut Vec<(u64, PathBuf)>, token: u64) {
    guard.retain(|(t, _)| *t != token);
    resumable().retain(|t| *t != token);
}

/// The resume marker of an install's work directory (FORMAT.md section 22).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// SHA-256 (hex) of the exact bytes of the signed `manifest.json` being installed.
    pub manifest_sha256: String,
    /// The destination's name in the work directory's parent (a cache's repository folder, a
    /// layout's directory name).
    pub dest: String,
    /// The kind of target: `dir`, `hf-cache` or `oci-layout`.
    pub target: String,
    /// The ref an install into a Hugging Face cache points at the commit (`hf-cache` only;
    /// absent for the other targets, so their markers are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Of a bundle of several repositories (FORMAT.md section 14.4), the folders of the
    /// repositories the install takes, in bundle order (`unpack --repo`, or every one into a
    /// cache); absent for a bundle of one and for a whole bundle into a directory, so those
    /// markers are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repos: Option<Vec<String>>,
}

impl Marker {
    fn bytes(&self) -> Vec<u8> {
        let mut b = serde_json::to_vec(self).expect("serializable");
        b.push(b'\n');
        b
    }
}

/// Reads the resume marker of the work directory open as `dir`: `None` when it has none or
/// one airlock cannot read as its own (a link, too large, not this shape).
pub(crate) fn read_marker(dir: &impl AsFd) -> Option<Marker> {
    let bytes = fsio::read_below_capped(dir, RESUME_NAME, RESUME_MAX).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Eight random bytes in hex, for unique names.
pub fn random_hex() -> String {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the OS random source works");
    hex::encode(b)
}

/// How [`Staging::publish`] moves an entry into place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// Rename; fail if the destination exists.
    NoReplace,
    /// Swap atomically with the existing destination (which then sits in the work directory
    /// and is removed with it).
    Exchange,
}

/// A private, locked work directory; removed when dropped unless moved into place.
pub struct Staging {
    parent: PathBuf,
    parent_fd: OwnedFd,
    name: String,
    dir: OwnedFd,
    lock: Option<File>,
    token: u64,
    keep: bool,
}

impl Staging {
    /// Creates `PARENT/.airlock-staging-<hint>-<random>`.
    pub fn create(parent: &Path, hint: &str) -> Result<Staging> {
        Self::create_named(parent, &format!("{STAGING_PREFIX}{hint}-{}", random_hex()))
    }

    /// [`Staging::create`] in the directory already open as `parent_fd` (shown as `parent` in
    /// errors): for a parent another user may rename or replace, which must not be looked up by
    /// path again (a Hugging Face cache's shared `.locks`).
    pub fn create_at(parent_fd: OwnedFd, parent: &Path, hint: &str) -> Result<Staging> {
        Self::create_named_at(
            parent_fd,
            parent,
            &format!("{STAGING_PREFIX}{hint}-{}", random_hex()),
        )
    }

    /// Creates `PARENT/NAME`, private and locked before the name appears. Fails with an
    /// `AlreadyExists` I/O error if the name is taken.
    pub fn create_named(parent: &Path, name: &str) -> Result<Staging> {
        let parent_fd = fsio::open_dir_path(parent, fsio::Follow::Final)
            .map_err(|e| Error::io(parent, e.into()))?;
        Self::create_named_at(parent_fd, parent, name)
    }

    /// [`Staging::create_named`] in the directory already open as `parent_fd` (shown as
    /// `parent` in errors): for a parent that must not be looked up by path again, such as a
    /// bundle directory on untrusted media.
    pub fn create_named_at(parent_fd: OwnedFd, parent: &Path, name: &str) -> Result<Staging> {
        let birth = format!("{BIRTH_PREFIX}{}", random_hex());
        let birth_path = parent.join(&birth);
        // Registered under the guard before it exists: a signal either comes first (and this
        // thread then waits for ever) or finds it registered and removes it.
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let mut guard = live();
        guard.push((token, birth_path.clone()));
        let made = crate::durable::mkdir_at(&parent_fd, parent, &birth, 0o700).and_then(|dir| {
            match new_lock(&dir, &birth_path) {
                Ok(lock) => Ok((dir, lock)),
                Err(e) => {
                    let _ = rustix::fs::unlinkat(&parent_fd, &birth, AtFlags::REMOVEDIR);
                    Err(e)
                }
            }
        });
        let (dir, lock) = match made {
            Ok(m) => m,
            Err(e) => {
                unregister(&mut guard, token);
                return Err(e);
            }
        };
        let renamed = fsio::rename_at(&parent_fd, &birth, &parent_fd, name, RenameFlags::NOREPLACE);
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(&dir, LOCK_NAME, AtFlags::empty());
            let _ = rustix::fs::unlinkat(&parent_fd, &birth, AtFlags::REMOVEDIR);
            unregister(&mut guard, token);
            return Err(Error::io(parent.join(name), e.into()));
        }
        if let Some(entry) = guard.iter_mut().find(|(t, _)| *t == token) {
            entry.1 = parent.join(name);
        }
        drop(guard);
        Ok(Staging {
            parent: parent.to_path_buf(),
            parent_fd,
            name: name.to_string(),
            dir,
            lock: Some(lock),
            token,
            keep: false,
        })
    }

    /// Writes the resume marker (synced, mode 0600) and keeps the work directory on
    /// [`interrupt`] from now on: a rerun of the same bundle into the same destination adopts
    /// it ([`Staging::adopt`]).
    pub fn mark_resumable(&self, marker: &Marker) -> Result<()> {
        crate::durable::write_synced_at(
            &self.dir,
            &self.path(),
            RESUME_NAME,
            &marker.bytes(),
            0o600,
        )?;
        self.sync()?;
        let mut r = resumable();
        if !r.contains(&self.token) {
            r.push(self.token);
        }
        Ok(())
    }

    /// Removes the resume marker (before the work is published: a work directory left after
    /// the rename holds an old tree, not one to resume) and removes the work directory on
    /// [`interrupt`] again.
    pub fn unmark(&self) -> Result<()> {
        resumable().retain(|t| *t != self.token);
        match rustix::fs::unlinkat(&self.dir, RESUME_NAME, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::io(self.path().join(RESUME_NAME), e.into())),
        }
    }

    /// Whether the work directory holds a resume marker this process wrote or adopted.
    pub(crate) fn is_resumable(&self) -> bool {
        resumable().contains(&self.token)
    }

    /// Leaves the work directory in place when dropped (its lock is released): an install that
    /// failed for an operational reason keeps what it staged for a rerun.
    pub fn keep_for_rerun(&mut self) {
        if self.is_resumable() {
            self.keep = true;
        }
    }

    /// Finds and takes over the work directory an interrupted install of the same bundle into
    /// the same destination left in `parent` (its name `.airlock-staging-<dest>-<16 hex>`): a
    /// directory (no link followed) owned by this user, mode 0700, whose lock can be taken and
    /// whose resume marker is exactly `marker`. `None` when there is none; any other work
    /// directory is left to [`clean_stale_for`]. What it holds is not trusted: the caller
    /// proves every file it keeps.
    pub fn adopt(parent: &Path, marker: &Marker) -> Result<Option<Staging>> {
        let parent_fd = fsio::open_dir_path(parent, fsio::Follow::Final)
            .map_err(|e| Error::io(parent, e.into()))?;
        Self::adopt_in(parent_fd, parent, marker)
    }

    /// [`Staging::adopt`] in the directory already open as `parent_fd` (shown as `parent`): for
    /// a parent that must not be looked up by path again (a Hugging Face cache's shared
    /// `.locks`).
    pub fn adopt_at(
        parent_fd: &OwnedFd,
        parent: &Path,
        marker: &Marker,
    ) -> Result<Option<Staging>> {
        let parent_fd = parent_fd.try_clone().map_err(|e| Error::io(parent, e))?;
        Self::adopt_in(parent_fd, parent, marker)
    }

    fn adopt_in(parent_fd: OwnedFd, parent: &Path, marker: &Marker) -> Result<Option<Staging>> {
        let prefix = format!("{STAGING_PREFIX}{}-", marker.dest);
        let entries = fsio::dir_entries(&parent_fd).map_err(|e| Error::io(parent, e))?;
        let me = rustix::process::geteuid().as_raw();
        for (name, kind) in entries {
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            if kind != FileType::Directory
                || rest.len() != 16
                || !rest.bytes().all(|b| b.is_ascii_hexdigit())
            {
                continue;
            }
            let Ok(dir) = fsio::open_dir_at(&parent_fd, name) else {
                continue;
            };
            let Ok(st) = rustix::fs::fstat(&dir) else {
                continue;
            };
            if st.st_uid != me || st.st_mode & 0o7777 != 0o700 {
                continue;
            }
            let Ok((lock, _)) = fsio::open_file_below(&dir, LOCK_NAME) else {
                continue;
            };
            if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
                continue;
            }
            if read_marker(&dir).as_ref() != Some(marker) {
                continue;
            }
            // Still at its name after the lock was taken (not renamed away meanwhile).
            if !fsio::is_entry_of(&parent_fd, name, &dir).unwrap_or(false) {
                continue;
            }
            let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
            live().push((token, parent.join(name)));
            resumable().push(token);
            return Ok(Some(Staging {
                parent: parent.to_path_buf(),
                parent_fd,
                name: name.to_string(),
                dir,
                lock: Some(lock),
                token,
                keep: false,
            }));
        }
        Ok(None)
    }

    /// Where the work directory is.
    pub fn path(&self) -> PathBuf {
        self.parent.join(&self.name)
    }

    /// The handle of the work directory.
    pub fn fd(&self) -> &OwnedFd {
        &self.dir
    }

    /// Creates the directory `name` in the work directory with exactly `mode`.
    pub fn mkdir(&self, name: &str, mode: u32) -> Result<OwnedFd> {
        crate::durable::mkdir_at(&self.dir, &self.path(), name, mode)
    }

    /// Creates the file `name` in the work directory with exactly `mode`, written and synced.
    pub fn write_file(&self, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
        crate::durable::write_synced_at(&self.dir, &self.path(), name, bytes, mode)
    }

    /// Whether the work directory is still at its name in its parent (the same device and
    /// inode): another user who can write the parent may have renamed it away and put a
    /// directory of their own there. The work inside goes on through the handle either way;
    /// this tells whether anything read by [`Staging::path`] is airlock's.
    pub fn at_its_name(&self) -> io::Result<bool> {
        fsio::is_entry_of(&self.parent_fd, &self.name, &self.dir).map_err(io::Error::from)
    }

    /// Syncs the work directory itself.
    pub fn sync(&self) -> Result<()> {
        crate::durable::sync_dir_fd(&self.dir, &self.path())
    }

    /// Moves the entry `from` of the work directory to `to` (an absolute or working-directory
    /// relative path), under the [`CommitGuard`], and syncs `to`'s directory.
    pub fn publish(&self, from: &str, to: &Path, how: Publish) -> Result<()> {
        let flags = match how {
            Publish::NoReplace => RenameFlags::NOREPLACE,
            Publish::Exchange => RenameFlags::EXCHANGE,
        };
        let to_parent = fsio::parent_dir(to);
        let to_name = to
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::Usage(format!("{}: not a usable name", to.display())))?;
        let to_dir = fsio::open_dir_path(&to_parent, fsio::Follow::Final)
            .map_err(|e| Error::io(&to_parent, e.into()))?;
        {
            let _commit = commit_guard();
            fsio::rename_at(&self.dir, from, &to_dir, to_name, flags)
                .map_err(|e| Error::io(to, e.into()))?;
        }
        crate::durable::sync_dir_fd(&to_dir, &to_parent)
    }

    /// Renames the whole work directory to `to` (in the same parent), without its lock file:
    /// what pack does with `BUNDLE.partial`. The lock stays held until the rename is done.
    pub fn into_place(mut self, to: &Path) -> Result<()> {
        let to_name = to
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::Usage(format!("{}: not a usable name", to.display())))?
            .to_string();
        let lock_path = self.path().join(LOCK_NAME);
        rustix::fs::unlinkat(&self.dir, LOCK_NAME, AtFlags::empty())
            .map_err(|e| Error::io(&lock_path, e.into()))?;
        self.sync()?;
        {
            let mut guard = live();
            fsio::rename_at(
                &self.parent_fd,
                &self.name,
                &self.parent_fd,
                &to_name,
                RenameFlags::NOREPLACE,
            )
            .map_err(|e| Error::io(to, e.into()))?;
            unregister(&mut guard, self.token);
            self.keep = true;
        }
        crate::durable::sync_dir_fd(&self.parent_fd, &self.parent)
    }
}

impl Staging {
    /// Removes the work directory: its content through its own handle (whatever name it has
    /// now), then its name, only if the name still leads to it. A directory another user put
    /// at that name is left alone, and the work directory, moved away, is left empty.
    fn remove(&self) -> io::Result<()> {
        let path = self.path();
        let dev = rustix::fs::fstat(&self.dir)?.st_dev;
        empty_dir(&self.dir, dev, &path)?;
        if self.at_its_name()? {
            // An empty directory only: if another one took the name since, a non-empty one
            // stays, and an empty one is no loss.
            match rustix::fs::unlinkat(&self.parent_fd, self.name.as_str(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.keep {
            let _ = self.remove();
        }
        unregister(&mut live(), self.token);
        // The lock goes last: no cleaner can take the directory while it is being removed.
        self.lock.take();
    }
}

/// Syncs finished files on a thread of its own while the next file streams in; the first
/// failure is the result of [`SyncThread::finish`].
pub struct SyncThread {
    tx: crossbeam_channel::Sender<(File, PathBuf)>,
    handle: std::thread::JoinHandle<Result<()>>,
}

impl Default for SyncThread {
    fn default() -> Self {
        Self::new()
    }
}

impl SyncThread {
    /// Starts the thread.
    pub fn new() -> SyncThread {
        let (tx, rx) = crossbeam_channel::bounded::<(File, PathBuf)>(64);
        let handle = std::thread::spawn(move || -> Result<()> {
            let mut first_error = None;
            for (f, path) in rx {
                if let Err(e) = f.sync_all() {
                    first_error.get_or_insert(Error::io(path, e));
                }
            }
            first_error.map_or(Ok(()), Err)
        });
        SyncThread { tx, handle }
    }

    /// Where to send a finished file (and its path, for the error).
    pub fn sender(&self) -> crossbeam_channel::Sender<(File, PathBuf)> {
        self.tx.clone()
    }

    /// Waits for every file sent (once all senders are dropped) to be synced.
    pub fn finish(self) -> Result<()> {
        drop(self.tx);
        self.handle.join().expect("sync thread panicked")
    }
}

/// Creates the lock file in the new directory `dir` and takes the exclusive lock.
fn new_lock(dir: &OwnedFd, dir_path: &Path) -> Result<File> {
    let path = dir_path.join(LOCK_NAME);
    let file =
        fsio::create_at(dir, LOCK_NAME, 0o600, true).map_err(|e| Error::io(&path, e.into()))?;
    rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)
        .map_err(|e| Error::io(&path, e.into()))?;
    Ok(file)
}

/// What [`clean_stale`] did.
#[derive(Debug, Default)]
pub struct Cleanup {
    /// Stale work directories removed.
    pub removed: Vec<PathBuf>,
    /// Work directories that look abandoned but were left alone, and why (a [`LeftAlone`]'s
    /// words: the reports that carry them are rendered, and matched by nobody).
    pub skipped: Vec<(PathBuf, String)>,
}

/// Removes the abandoned work directories in `parent` (see the module documentation). One
/// holding a resume marker is left for the install it belongs to ([`clean_stale_for`]).
pub fn clean_stale(parent: &Path) -> Result<Cleanup> {
    clean_stale_for(parent, None)
}

/// [`clean_stale`] for an install into `dest` (a name in `parent`): an abandoned work
/// directory whose resume marker names `dest` is removed too (it is another bundle's, or the
/// install starts clean: one of the same bundle was adopted first and is locked); one whose
/// marker names another destination is left for that destination's rerun.
pub fn clean_stale_for(parent: &Path, dest: Option<&str>) -> Result<Cleanup> {
    let parent_fd = fsio::open_dir_path(parent, fsio::Follow::Final)
        .map_err(|e| Error::io(parent, e.into()))?;
    clean_stale_at_for(&parent_fd, parent, dest)
}

/// [`clean_stale_for`] in the directory open as `parent_fd` (shown as `parent`).
pub fn clean_stale_at_for(
    parent_fd: &OwnedFd,
    parent: &Path,
    dest: Option<&str>,
) -> Result<Cleanup> {
    sweep_for(parent_fd, parent, STAGING_PREFIX, dest)
}

/// The one sweep of abandoned work directories: every directory in `parent_fd` (shown as
/// `parent`) named `prefix`… or `.airlock-birth-…` goes through [`remove_if_stale`].
/// [`clean_stale`] sweeps every airlock work directory; `repair` sweeps only its own in a
/// bundle directory.
pub fn sweep(parent_fd: &OwnedFd, parent: &Path, prefix: &str) -> Result<Cleanup> {
    sweep_for(parent_fd, parent, prefix, None)
}

/// [`sweep`] for an install into `dest`: a work directory kept for a rerun into another
/// destination (its resume marker names it) is left for that install.
fn sweep_for(
    parent_fd: &OwnedFd,
    parent: &Path,
    prefix: &str,
    dest: Option<&str>,
) -> Result<Cleanup> {
    let mut out = Cleanup::default();
    let entries = fsio::dir_entries(parent_fd).map_err(|e| Error::io(parent, e))?;
    for (name, _) in entries {
        let Some(name) = name.to_str() else { continue };
        let birth = name.starts_with(BIRTH_PREFIX);
        if !birth && !name.starts_with(prefix) {
            continue;
        }
        let path = parent.join(name);
        if !birth
            && let Ok(dir) = fsio::open_dir_at(parent_fd, name)
            && let Some(m) = read_marker(&dir)
            && Some(m.dest.as_str()) != dest
        {
            // Kept for a rerun into another destination: that install's to adopt or remove.
            continue;
        }
        match remove_if_stale(parent_fd, name, &path, birth) {
            Ok(true) => out.removed.push(path),
            Ok(false) => {}
            Err(why) => out.skipped.push((path, why.to_string())),
        }
    }
    Ok(out)
}

/// Why a work directory that looks abandoned was left alone by [`remove_if_stale`] (issue 34
/// item 6: typed; its words are what `unpack` and `repair` report for it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeftAlone {
    /// It cannot be opened (and is not simply gone, a link or not a directory).
    #[error("cannot be opened ({0})")]
    CannotOpen(io::Error),
    /// Its status cannot be read.
    #[error("{0}")]
    CannotStat(io::Error),
    /// Another user's, whose lock this user may not open.
    #[error(
        "belongs to user {uid}: its lock cannot be checked; left alone (its owner or an administrator can remove it)"
    )]
    LockNotReadable {
        /// Its owner.
        uid: u32,
    },
    /// Another user's, its lock free: not this user's to remove.
    #[error(
        "belongs to user {uid}, not to this user: left alone (its owner or an administrator can remove it)"
    )]
    NotOurs {
        /// Its owner.
        uid: u32,
    },
    /// Removing it failed (a mount point inside, or the system's error).
    #[error("cannot be removed: {0}")]
    CannotRemove(io::Error),
}

/// Removes the work directory `name` in `parent` if its process is gone: `Ok(true)` when it
/// did, `Ok(false)` when the directory is live or not airlock's, `Err(why)` when it looks
/// abandoned but cannot or must not be removed by this user.
pub(crate) fn remove_if_stale(
    parent: &impl AsFd,
    name: &str,
    path: &Path,
    birth: bool,
) -> std::result::Result<bool, LeftAlone> {
    let dir = match fsio::open_dir_at(parent, name) {
        Ok(d) => d,
        Err(e)
            if matches!(
                e.errno(),
                Some(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR)
            ) =>
        {
            return Ok(false);
        }
        // A link or something else with our name: not ours.
        Err(e) if matches!(e.errno(), Some(rustix::io::Errno::LOOP)) => return Ok(false),
        Err(e) => return Err(LeftAlone::CannotOpen(e.into())),
    };
    let st = rustix::fs::fstat(&dir).map_err(|e| LeftAlone::CannotStat(e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    let old_enough = || {
        let age = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
            .saturating_sub(st.st_mtime as i64);
        age >= BIRTH_GRACE.as_secs() as i64
    };
    let lock = match fsio::open_file_below(&dir, LOCK_NAME).map_err(fsio::Error::into_cause) {
        Ok((l, _)) => l,
        Err(fsio::Cause::NotFound) => {
            // Killed before its lock existed: only an empty birth directory can be that.
            if birth && st.st_uid == me && old_enough() {
                return Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).is_ok());
            }
            return Ok(false);
        }
        Err(fsio::Cause::Io(e))
            if e.kind() == io::ErrorKind::PermissionDenied && st.st_uid != me =>
        {
            return Err(LeftAlone::LockNotReadable { uid: st.st_uid });
        }
        Err(_) => return Ok(false),
    };
    if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Ok(false);
    }
    if birth && !old_enough() {
        return Ok(false);
    }
    if st.st_uid != me {
        return Err(LeftAlone::NotOurs { uid: st.st_uid });
    }
    drop(dir);
    match remove_tree_at(parent, name, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(LeftAlone::CannotRemove(e)),
    }
}

/// Why airlock will not remove (or walk) a tree, carried inside the `io::Error` of
/// [`remove_tree`], [`remove_tree_at`] and [`find_mount_inside`] (issue 34 item 6: typed, found
/// again with [`TreeRefusal::of`]; its words are the message).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TreeRefusal {
    /// The path ends in no name (or one that is not UTF-8).
    #[error("not a usable name")]
    UnusableName,
    /// A mount point (or another device) at or inside the tree.
    #[error("{} is a mount point: airlock never removes anything across one", .0.display())]
    MountPoint(PathBuf),
    /// The tree's top cannot be opened as a directory (why is the source).
    #[error("cannot open")]
    CannotOpen(#[source] fsio::Error),
}

impl TreeRefusal {
    /// The refusal `e` carries, if it is one.
    pub(crate) fn of(e: &io::Error) -> Option<&TreeRefusal> {
        e.get_ref().and_then(|inner| inner.downcast_ref())
    }
}

/// A refusal as an `io::Error` whose kind draws no hint a system error would (a name is
/// invalid input, a mount point is busy as `rmdir` says, an unopened top is other).
impl From<TreeRefusal> for io::Error {
    fn from(r: TreeRefusal) -> io::Error {
        let kind = match r {
            TreeRefusal::UnusableName => io::ErrorKind::InvalidInput,
            TreeRefusal::MountPoint(_) => io::ErrorKind::ResourceBusy,
            TreeRefusal::CannotOpen(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, r)
    }
}

/// Removes the directory tree at `path` without following links or crossing mount points.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let parent = fsio::parent_dir(path);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or(TreeRefusal::UnusableName)?;
    let parent_fd = fsio::open_dir_path(&parent, fsio::Follow::Final)?;
    remove_tree_at(&parent_fd, name, path)
}

/// Removes the directory `name` in `parent` and everything below it, through directory
/// handles; refuses (leaving what remains) at a mount point or a change of device.
pub fn remove_tree_at(parent: &impl AsFd, name: &str, path: &Path) -> io::Result<()> {
    if fsio::is_mount_root_at(parent, name) == Some(true) {
        return Err(mount_error(path));
    }
    let dir = fsio::open_dir_at(parent, name)?;
    let dev = rustix::fs::fstat(&dir)?.st_dev;
    empty_dir(&dir, dev, path)?;
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        r => r.map_err(io::Error::from),
    }
}

fn mount_error(path: &Path) -> io::Error {
    TreeRefusal::MountPoint(path.to_path_buf()).into()
}

fn empty_dir(dir: &OwnedFd, dev: u64, path: &Path) -> io::Result<()> {
    for (name, kind) in fsio::dir_entries(dir)? {
        let sub_path = path.join(&name);
        if kind == FileType::Directory {
            let sub = match enter(dir, &name, dev, &sub_path)? {
                Some(s) => s,
                None => continue,
            };
            empty_dir(&sub, dev, &sub_path)?;
            drop(sub);
            match rustix::fs::unlinkat(dir, &name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        } else {
            match rustix::fs::unlinkat(dir, &name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Opens the subdirectory `name` of `dir` to descend into it; a mount point (or another
/// device) is an error naming `path`, a directory that vanished is `None`.
fn enter(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    dev: u64,
    path: &Path,
) -> io::Result<Option<OwnedFd>> {
    if fsio::is_mount_root_at(dir, name) == Some(true) {
        return Err(mount_error(path));
    }
    let sub = match fsio::open_dir_at(dir, name) {
        Ok(s) => s,
        Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::fstat(&sub)?.st_dev != dev {
        return Err(mount_error(path));
    }
    Ok(Some(sub))
}

/// The first mount point inside the directory `dir` (not `dir` itself), if any: from the
/// mount table, and from a walk of the tree that checks each directory (so it is found even
/// without `/proc`).
pub fn find_mount_inside(dir: &Path) -> io::Result<Option<PathBuf>> {
    if let Some(m) = crate::fsinfo::mounts_below(dir).into_iter().next() {
        return Ok(Some(m));
    }
    let fd = fsio::open_dir_path(dir, fsio::Follow::Never).map_err(TreeRefusal::CannotOpen)?;
    let dev = rustix::fs::fstat(&fd)?.st_dev;
    walk_for_mount(&fd, dev, dir)
}

fn walk_for_mount(dir: &OwnedFd, dev: u64, path: &Path) -> io::Result<Option<PathBuf>> {
    for (name, kind) in fsio::dir_entries(dir)? {
        if kind != FileType::Directory {
            continue;
        }
        let sub_path = path.join(&name);
        match enter(dir, &name, dev, &sub_path) {
            Ok(Some(sub)) => {
                if let Some(m) = walk_for_mount(&sub, dev, &sub_path)? {
                    return Ok(Some(m));
                }
            }
            Ok(None) => {}
            Err(e) if matches!(TreeRefusal::of(&e), Some(TreeRefusal::MountPoint(_))) => {
                return Ok(Some(sub_path));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_marker_is_the_line_format_md_section_22_gives() {
        let mut m = Marker {
            manifest_sha256: "ab".into(),
            dest: "out".into(),
            target: "dir".into(),
            revision: None,
            repos: None,
        };
        // Unchanged for a bundle of one (and a whole bundle into a directory).
        assert_eq!(
            m.bytes(),
            b"{\"manifest_sha256\":\"ab\",\"dest\":\"out\",\"target\":\"dir\"}\n"
        );
        m.repos = Some(vec!["models--o--a".into(), "models--o--b".into()]);
        assert_eq!(
            m.bytes(),
            b"{\"manifest_sha256\":\"ab\",\"dest\":\"out\",\"target\":\"dir\",\"repos\":[\"models--o--a\",\"models--o--b\"]}\n"
        );
        let back: Marker = serde_json::from_slice(&m.bytes()).unwrap();
        assert_eq!(back, m);
        // Another selection is another marker: never adopted for this one.
        let mut other = m.clone();
        other.repos = Some(vec!["models--o--a".into()]);
        assert_ne!(other, m);
        // An unknown key makes it not airlock's.
        assert!(
            serde_json::from_slice::<Marker>(
                b"{\"manifest_sha256\":\"ab\",\"dest\":\"out\",\"target\":\"dir\",\"x\":1}"
            )
            .is_err()
        );
    }

    #[test]
    fn a_work_directory_is_private_and_locked_before_it_has_its_name() {
        let t = tempfile::tempdir().unwrap();
        let s = Staging::create(t.path(), "m").unwrap();
        let path = s.path();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert!(path.join(LOCK_NAME).is_file());
        // Live: cleanup leaves it alone.
        let c = clean_stale(t.path()).unwrap();
        assert!(c.removed.is_empty() && c.skipped.is_empty());
        assert!(path.exists());
        // No birth directory is left behind.
        let names: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        drop(s);
        assert!(!path.exists());
    }

    #[test]
    fn stale_directories_are_removed_foreign_ones_are_not() {
        let t = tempfile::tempdir().unwrap();
        let stale = t.path().join(format!("{STAGING_PREFIX}x-1"));
        std::fs::create_dir_all(stale.join("tree/sub")).unwrap();
        std::fs::write(stale.join(LOCK_NAME), b"").unwrap();
        std::fs::write(stale.join("tree/sub/f"), b"x").unwrap();
        let foreign = t.path().join(format!("{STAGING_PREFIX}foreign"));
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("data"), b"x").unwrap();
        // Lockless and empty with a staging name: not provably ours, left alone.
        let empty = t.path().join(format!("{STAGING_PREFIX}empty"));
        std::fs::create_dir(&empty).unwrap();
        let c = clean_stale(t.path()).unwrap();
        assert_eq!(c.removed, vec![stale.clone()]);
        assert!(!stale.exists());
        assert!(foreign.join("data").exists());
        assert!(empty.exists());
    }

    #[test]
    fn a_work_directory_moved_away_is_emptied_through_its_handle_and_its_name_left_alone() {
        let t = tempfile::tempdir().unwrap();
        let parent = fsio::open_dir_path(t.path(), fsio::Follow::Never).unwrap();
        let s = Staging::create_at(parent, t.path(), "m").unwrap();
        s.write_file("mine", b"staged", 0o644).unwrap();
        assert!(s.at_its_name().unwrap());
        // Another user renames it away and puts a directory of their own at its name.
        let moved = t.path().join("moved");
        std::fs::rename(s.path(), &moved).unwrap();
        std::fs::create_dir(s.path()).unwrap();
        std::fs::write(s.path().join("theirs"), b"planted").unwrap();
        assert!(!s.at_its_name().unwrap());
        // The work goes on through the handle, into the moved directory.
        s.write_file("more", b"x", 0o644).unwrap();
        assert!(moved.join("more").is_file());
        let name = s.path();
        drop(s);
        assert!(
            name.join("theirs").is_file(),
            "the other user's directory was touched"
        );
        assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 0);
    }

    #[test]
    fn removal_never_follows_links() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        let w = t.path().join("w");
        std::fs::create_dir(&w).unwrap();
        std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
        remove_tree(&w).unwrap();
        assert!(!w.exists());
        assert!(outside.join("keep").exists());
    }
}
