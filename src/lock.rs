//! Work directories that airlock owns: made with a held lock, recognised and removed when stale.
//!
//! `pack` writes `BUNDLE.partial/` and `unpack` stages beside the destination. Each such
//! directory holds a lock file that the working process keeps an exclusive `flock` on. A later
//! run removes the directory only when it has airlock's name pattern, contains the lock file and
//! the lock can be taken (the process that made it is gone); anything else is left alone.

use std::fs::File;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::error::{Error, Result};

/// Name of the lock file inside a work directory.
pub const LOCK_NAME: &str = ".airlock-lock";

/// A held lock on a work directory; released when dropped (or when the process dies).
pub struct DirLock {
    file: File,
    path: PathBuf,
}

impl DirLock {
    /// Creates `dir/.airlock-lock` and takes the exclusive lock.
    pub fn create(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_NAME);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        flock(&file, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| Error::io(&path, e.into()))?;
        Ok(DirLock { file, path })
    }

    /// Removes the lock file (keeping the lock held until drop).
    pub fn remove_file(&self) -> Result<()> {
        std::fs::remove_file(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let _ = &self.file;
        Ok(())
    }
}

/// Whether `dir` is a work directory whose owner is gone: it holds the lock file and the lock
/// is free. A directory without the lock file is not airlock's and is never called stale.
pub fn is_stale(dir: &Path) -> bool {
    let path = dir.join(LOCK_NAME);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    let Ok(file) = File::open(&path) else {
        return false;
    };
    flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// Removes `dir` if it is stale; returns whether it did.
///
/// A process killed between creating the directory and its lock file leaves an empty directory
/// with airlock's name: that one is removed too (`rmdir` only removes it while it is empty, so
/// nothing can be lost; a concurrent airlock caught in that microsecond window fails cleanly
/// when its lock file cannot be created).
pub fn remove_if_stale(dir: &Path) -> Result<bool> {
    if !is_stale(dir) {
        let lockless = std::fs::symlink_metadata(dir.join(LOCK_NAME)).is_err();
        if lockless && std::fs::remove_dir(dir).is_ok() {
            return Ok(true);
        }
        return Ok(false);
    }
    std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_lock_is_not_stale_released_lock_is() {
        let t = tempfile::tempdir().unwrap();
        let work = t.path().join("w");
        std::fs::create_dir(&work).unwrap();
        let lock = DirLock::create(&work).unwrap();
        assert!(!is_stale(&work));
        drop(lock);
        assert!(is_stale(&work));
        assert!(remove_if_stale(&work).unwrap());
        assert!(!work.exists());
        let foreign = t.path().join("f");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("data"), b"x").unwrap();
        assert!(!remove_if_stale(&foreign).unwrap());
        assert!(foreign.join("data").exists());
        // Killed right after mkdir: empty and lockless, removed.
        let empty = t.path().join("e");
        std::fs::create_dir(&empty).unwrap();
        assert!(remove_if_stale(&empty).unwrap());
        assert!(foreign.exists());
    }
}
