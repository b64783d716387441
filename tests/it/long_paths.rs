//! A model holding a 4096-byte path (the format's limit, section 4.1) packs, verifies and
//! unpacks, wherever the model directory sits (issue 26, item 13b): `pack` failed with `File
//! name too long (os error 36)` because it walked and read the model by full path.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::support::*;

/// 16 directories of 250 bytes and a file name of 80: exactly 4096 bytes.
fn deep_components() -> (Vec<String>, String) {
    let dirs: Vec<String> = (0..16)
        .map(|i| format!("{i:02}{}", "d".repeat(248)))
        .collect();
    let file = format!("{}.bin", "f".repeat(76));
    let total: usize = dirs.iter().map(|d| d.len() + 1).sum::<usize>() + file.len();
    assert_eq!(total, 4096);
    (dirs, file)
}

fn open_dir(at: &OwnedFd, name: &str) -> OwnedFd {
    rustix::fs::openat(
        at,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .unwrap()
}

/// Creates `dirs/file` holding `bytes` below `root`, through directory handles (a path this
/// long cannot be created by name).
fn write_deep(root: &Path, dirs: &[String], file: &str, bytes: &[u8]) {
    let mut fd = rustix::fs::open(root, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    for d in dirs {
        rustix::fs::mkdirat(&fd, d.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        fd = open_dir(&fd, d);
    }
    let f = rustix::fs::openat(
        &fd,
        file,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    std::fs::File::from(f).write_all(bytes).unwrap();
    // A link beside it to a file of the model: the scan resolves it through its handle.
    rustix::fs::symlinkat(
        format!("{}config.json", "../".repeat(dirs.len())),
        &fd,
        "config-link.json",
    )
    .unwrap();
}

fn read_deep(root: &Path, dirs: &[String], name: &str) -> Vec<u8> {
    let mut fd = rustix::fs::open(root, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    for d in dirs {
        fd = open_dir(&fd, d);
    }
    let f =
        rustix::fs::openat(&fd, name, OFlags::RDONLY | OFlags::NOFOLLOW, Mode::empty()).unwrap();
    let mut out = Vec::new();
    std::fs::File::from(f).read_to_end(&mut out).unwrap();
    out
}

#[test]
fn a_model_with_a_4096_byte_path_packs_verifies_and_unpacks() {
    let env = Env::new();
    let (dirs, file) = deep_components();
    let bytes = pseudo_random(1_500_000, 13);
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    write_deep(&env.path("m"), &dirs, &file, &bytes);
    // The full path of the deep file is over the system's limit from the model directory on.
    assert!(
        env.path("m")
            .join(dirs.join("/"))
            .join(&file)
            .as_os_str()
            .len()
            > 4096
    );
    let (code, v) = env.json(&["pack", "m", "-o", "b", "--key", "k.key"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["warnings"]
            .to_string()
            .contains("not checked, its path is too long"),
        "{v}"
    );
    env.ok(&["verify", "b", "--deep", "--trust", "k.pub"]);
    let m = env.read_json("b/manifest.json");
    let deep = format!("{}/{file}", dirs.join("/"));
    assert!(
        m["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == deep.as_str()),
        "the deep file is not in the manifest"
    );
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    assert_eq!(read_deep(&env.path("out"), &dirs, &file), bytes);
    assert_eq!(
        read_deep(&env.path("out"), &dirs, "config-link.json"),
        b"{\"model_type\": \"test\"}\n"
    );
    env.ok(&["check", "out", "--trust", "k.pub"]);
    // --compress auto samples the large file (over 1 MiB) through the same handles.
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--compress",
        "auto",
    ]);
}
