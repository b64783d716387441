//! Guarding the small files the binary has written (keys, signatures, roots): an output that
//! is one of its inputs under another name is refused. Writing them is the library's
//! ([`airlock::signing`]: a temporary sibling written whole, then moved into place).

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
