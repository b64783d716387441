//! Writing small files (keys, signatures) so that a failure never leaves a half-written file
//! or loses the old one: write a temporary sibling, then rename it into place.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use airlock::error::{Error, Result};

/// Refuses to write `dest` when it is one of the `protected` files (`(path, what it is)`), also
/// under another name: a link to it or a hard link. Compared by device and inode after
/// resolving links, not by spelling. A `dest` that does not exist is fine.
pub fn refuse_overwriting(dest: &Path, protected: &[(&Path, &str)]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(d) = std::fs::metadata(dest) else {
        return Ok(());
    };
    for (path, what) in protected {
        if let Ok(p) = std::fs::metadata(path)
            && p.dev() == d.dev()
            && p.ino() == d.ino()
        {
            return Err(Error::Usage(format!(
                "{} is {what} {}{}: refusing to overwrite it; choose another output",
                dest.display(),
                path.display(),
                if std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_symlink()) {
                    " (through a symbolic link)"
                } else if dest != *path {
                    " (another name for it)"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(())
}

/// A complete file under a temporary name next to its final path, removed on drop unless
/// [`Staged::publish`] renamed it into place.
pub struct Staged {
    tmp: Option<PathBuf>,
    dest: PathBuf,
}

impl Staged {
    /// Writes `bytes` with exactly `mode` (whatever the umask) to a new temporary sibling of
    /// `dest` and syncs it. Nothing is touched at `dest` yet.
    pub fn write(dest: &Path, bytes: &[u8], mode: u32) -> Result<Staged> {
        let mut name = dest.as_os_str().to_owned();
        name.push(format!(".airlock-tmp{}", std::process::id()));
        let tmp = PathBuf::from(name);
        // create_new: a name already taken is someone else's file, never overwritten or removed.
        let mut f = airlock::fsio::create_new(&tmp, 0o600).map_err(|e| Error::io(&tmp, e))?;
        let staged = Staged {
            tmp: Some(tmp.clone()),
            dest: dest.to_path_buf(),
        };
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|()| f.write_all(bytes))
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(&tmp, e))?;
        Ok(staged)
    }

    /// Moves the file into place. With `replace`, a rename over what is there (a directory in
    /// the way fails); without, a hard link that fails if the name was taken meanwhile.
    pub fn publish(mut self, replace: bool) -> Result<()> {
        let tmp = self.tmp.take().expect("not yet published");
        let placed = if replace {
            std::fs::rename(&tmp, &self.dest)
        } else {
            std::fs::hard_link(&tmp, &self.dest)
        };
        let _ = std::fs::remove_file(&tmp);
        placed.map_err(|e| Error::io(&self.dest, e))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Writes the new file `name` (a co-signature) into the directory `dir_fd` (`dir`): created
/// under a temporary name, exclusively and without following links, through the directory's
/// handle, synced, then renamed into place without replacing anything, and the directory
/// synced.
pub(super) fn write_new_at(
    dir_fd: &std::os::fd::OwnedFd,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<()> {
    let path = dir.join(name);
    let tmp = format!(".{name}.airlock-tmp{}", std::process::id());
    airlock::durable::write_synced_at(dir_fd, dir, &tmp, bytes, 0o644)?;
    if let Err(e) = airlock::fsio::rename_at(
        dir_fd,
        tmp.as_str(),
        dir_fd,
        name,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        let _ = rustix::fs::unlinkat(dir_fd, tmp.as_str(), rustix::fs::AtFlags::empty());
        return Err(Error::io(&path, e));
    }
    airlock::durable::sync_dir_fd(dir_fd, dir)
}
