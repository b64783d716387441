//! Guarding the small files the binary writes (keys, signatures, roots): an output that is
//! one of its inputs under another name is refused. Writing them is
//! [`airlock::durable::Staged`] (a temporary sibling written whole, then moved into place).

use std::path::Path;

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

/// Writes the new file `name` (a co-signature) into the directory `dir_fd` (`dir`), mode 0644:
/// created under a temporary name, exclusively and without following links, through the
/// directory's handle, synced, then renamed into place without replacing anything, and the
/// directory synced ([`airlock::durable::write_new_at`]).
pub(super) fn write_new_at(
    dir_fd: &std::os::fd::OwnedFd,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<()> {
    airlock::durable::write_new_at(dir_fd, dir, name, bytes, 0o644)
}
