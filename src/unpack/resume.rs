//! Resuming an interrupted install (issue 37 item 3): what a work directory left by a killed or
//! interrupted unpack of the same signed manifest holds is proven file by file before any of it
//! counts, and everything else in it is removed.
//!
//! Nothing staged is trusted because it exists. The work directory was found by
//! [`crate::staging::Staging::adopt`] (airlock's name, this user's, mode 0700, its lock taken,
//! its marker naming exactly this manifest and destination); below it, every directory is
//! opened without following a link, and every file of the manifest is opened the same way,
//! must be a regular file with one link, this user's, of its signed size, and hashes to its
//! signed SHA-256 (read once, in parallel); only then is it kept (its mode set again and synced).
//! Anything else in the tree (a partial file, a link, a FIFO, a file the manifest does not list,
//! a receipt of an earlier attempt) is removed through directory handles, never across a mount
//! point.

use std::os::fd::OwnedFd;
use std::path::Path;

use rayon::prelude::*;
use rustix::fs::{AtFlags, FileType, Mode};

use crate::error::{Error, Result};
use crate::fsio;
use crate::manifest::{FileEntry, Manifest};
use crate::pipeline::Kept;
use crate::progress::Progress;

/// What a resumed install reports.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Resumed {
    /// Files kept from the interrupted install, each proven.
    pub files: u64,
    /// Their bytes (each read once to prove it).
    pub bytes: u64,
    /// Staged files that did not prove complete (partial, altered, a link) and were removed.
    pub discarded: u64,
    /// The first entry read from the bundle.
    pub from_entry: Option<String>,
    /// The volume read first, when the stream started part way.
    pub from_volume: Option<String>,
}

/// Proves the staged tree open as `root` (shown as `root_path`) against `m`: keeps each
/// directory of the manifest that is a directory, each file that proves complete (`mode_of`
/// its mode), and removes everything else.
pub fn prove(
    root: &OwnedFd,
    root_path: &Path,
    m: &Manifest,
    mode_of: fn(&FileEntry) -> u32,
    progress: &dyn Progress,
) -> Result<Kept> {
    let me = rustix::process::geteuid().as_raw();
    let mut kept = Kept {
        held_in: "staged",
        ..Kept::default()
    };
    for d in &m.directories {
        let parent_ok = match d.rsplit_once('/') {
            Some((p, _)) => kept.dirs.contains(p),
            None => true,
        };
        if !parent_ok {
            continue;
        }
        let Ok(fd) = fsio::open_below(root, d) else {
            continue;
        };
        match rustix::fs::fstat(&fd) {
            Ok(st) if st.st_uid == me => {}
            _ => continue,
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(crate::receipt::DIR_MODE))
            .map_err(|e| Error::io(root_path.join(d), e.into()))?;
        kept.dirs.insert(d.clone());
    }
    // Files staged at their signed size, in a directory kept: only these are read.
    let candidates: Vec<&FileEntry> = m
        .files
        .par_iter()
        .filter(|f| {
            let in_kept_dir = match f.path.rsplit_once('/') {
                Some((p, _)) => kept.dirs.contains(p),
                None => true,
            };
            in_kept_dir
                && matches!(fsio::open_file_below(root, &f.path), Ok((_, len)) if len == f.size)
        })
        .collect();
    let total: u64 = candidates.iter().map(|f| f.size).sum();
    progress.start(crate::progress::Phase::Prove, total);
    let proven: Vec<(&FileEntry, bool)> = candidates
        .par_iter()
        .map(|f| {
            let ok = prove_file(root, f, me, mode_of(f), progress).unwrap_or(false);
            (*f, ok)
        })
        .collect();
    progress.finish();
    for (f, ok) in proven {
        if ok {
            kept.files.insert(f.path.clone());
            kept.bytes += f.size;
        }
    }
    prune(root, root_path, "", &mut kept)?;
    Ok(kept)
}

/// Whether the staged file `f` below `root` is complete: a regular file with one link, this
/// user's, of its signed size, hashing to its signed SHA-256; then its mode is set and it is
/// synced (it may have been written just before a kill, not yet on disk).
fn prove_file(
    root: &OwnedFd,
    f: &FileEntry,
    me: u32,
    mode: u32,
    progress: &dyn Progress,
) -> std::io::Result<bool> {
    let Ok((file, len)) = fsio::open_file_below(root, &f.path) else {
        return Ok(false);
    };
    let st = rustix::fs::fstat(&file)?;
    if len != f.size || st.st_nlink != 1 || st.st_uid != me {
        return Ok(false);
    }
    let (digest, n) = fsio::hash_file(&file, &|n| progress.advance(n))?;
    if n != f.size || digest != f.sha256 {
        return Ok(false);
    }
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
    file.sync_all()?;
    Ok(true)
}

/// Removes everything below `dir` (at `rel` in the tree) that `kept` does not hold, counting
/// removed files as discarded.
fn prune(dir: &OwnedFd, root_path: &Path, rel: &str, kept: &mut Kept) -> Result<()> {
    let here = root_path.join(rel);
    for (name, kind) in fsio::dir_entries(dir).map_err(|e| Error::io(&here, e))? {
        let Some(name_str) = name.to_str() else {
            // Not a name a manifest can hold.
            remove(dir, &name, kind, &here)?;
            kept.discarded += 1;
            continue;
        };
        let path = if rel.is_empty() {
            name_str.to_string()
        } else {
            format!("{rel}/{name_str}")
        };
        match kind {
            FileType::Directory if kept.dirs.contains(&path) => {
                let sub = fsio::open_dir_at(dir, name_str)
                    .map_err(|e| Error::io(root_path.join(&path), e.into()))?;
                prune(&sub, root_path, &path, kept)?;
            }
            FileType::RegularFile if kept.files.contains(&path) => {}
            _ => {
                remove(dir, &name, kind, &here)?;
                kept.discarded += 1;
            }
        }
    }
    Ok(())
}

/// Removes the entry `name` (of type `kind`) of `dir` (at `here`): a directory as a tree (no link
/// followed, no mount point crossed), anything else by unlink.
pub(super) fn remove(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    kind: FileType,
    here: &Path,
) -> Result<()> {
    let path = here.join(name);
    if kind == FileType::Directory {
        let Some(n) = name.to_str() else {
            return Err(Error::io(&path, std::io::Error::other("not a usable name")));
        };
        crate::staging::remove_tree_at(dir, n, &path).map_err(|e| Error::io(&path, e))
    } else {
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::io(&path, e.into())),
        }
    }
}

/// The report of an install that adopted `kept` and whose source started at `started_at`.
pub fn report(
    kept: Option<&Kept>,
    started_at: Option<crate::pipeline::StartedAt>,
) -> Option<Resumed> {
    let kept = kept?;
    Some(Resumed {
        files: kept.files.len() as u64,
        bytes: kept.bytes,
        discarded: kept.discarded,
        from_entry: started_at.as_ref().map(|s| s.entry.clone()),
        from_volume: started_at.and_then(|s| s.volume),
    })
}
