//! Which filesystem a path lives on, for messages about space: "the filesystem /dev/sdb1
//! (ext4) mounted at /data has 1.2 GiB available" tells an operator where to free space or
//! where else to go.
//!
//! The answer comes from `/proc/self/mountinfo`: the mount whose mount point is the longest
//! prefix of the path's canonical form. It is a courtesy for a message, so any failure yields
//! `None` rather than an error.

use std::path::{Path, PathBuf};

/// One mount, as a message shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The device or source (`/dev/sdb1`, `tmpfs`, `server:/export`).
    pub source: String,
    /// The filesystem type (`ext4`, `xfs`, `nfs4`).
    pub fstype: String,
}

impl std::fmt::Display for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) mounted at {}",
            self.source,
            self.fstype,
            self.mount_point.display()
        )
    }
}

/// The mount holding `path` (which must exist), or `None` if that cannot be told.
pub fn mount_of(path: &Path) -> Option<Mount> {
    let canonical = std::fs::canonicalize(path).ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_in(&table, &canonical)
}

/// Mount points strictly below the directory `dir` (which must exist), from
/// `/proc/self/mountinfo`; empty when that cannot be read.
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let (Ok(canonical), Ok(table)) = (
        std::fs::canonicalize(dir),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return Vec::new();
    };
    mounts_below_in(&table, &canonical)
}

fn mounts_below_in(table: &str, dir: &Path) -> Vec<PathBuf> {
    table
        .lines()
        .filter_map(parse_line)
        .map(|m| m.mount_point)
        .filter(|p| p != dir && p.starts_with(dir))
        .collect()
}

/// The longest mount point in a mountinfo `table` that contains `path`.
fn mount_in(table: &str, path: &Path) -> Option<Mount> {
    table
        .lines()
        .filter_map(parse_line)
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.components().count())
}

/// Parses one mountinfo line: field 5 is the mount point; after the ` - ` separator come the
/// filesystem type and the source (proc(5)).
fn parse_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let mount_point = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let source = right.next()?;
    Some(Mount {
        mount_point: PathBuf::from(unescape(mount_point)),
        source: unescape(source),
        fstype: unescape(fstype),
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw
31 22 8:17 / /data rw,relatime shared:6 - xfs /dev/sdb1 rw
32 31 8:33 / /data/model\\040store rw - ext4 /dev/sdc1 rw
";

    #[test]
    fn the_longest_containing_mount_point_wins() {
        let m = mount_in(TABLE, Path::new("/data/models/llama")).unwrap();
        assert_eq!(m.to_string(), "/dev/sdb1 (xfs) mounted at /data");
        let m = mount_in(TABLE, Path::new("/data/model store/x")).unwrap();
        assert_eq!(m.mount_point, Path::new("/data/model store"));
        let m = mount_in(TABLE, Path::new("/database")).unwrap();
        assert_eq!(
            m.mount_point,
            Path::new("/"),
            "a prefix must be whole components"
        );
    }

    #[test]
    fn mounts_below_a_directory_are_whole_components() {
        assert_eq!(
            mounts_below_in(TABLE, Path::new("/data")),
            vec![PathBuf::from("/data/model store")]
        );
        assert!(mounts_below_in(TABLE, Path::new("/data/model")).is_empty());
        assert!(mounts_below_in(TABLE, Path::new("/data/model store")).is_empty());
    }

    #[test]
    fn this_process_has_a_root_mount() {
        assert!(mount_of(Path::new("/")).is_some());
    }
}
