//! A second reader: the `tar` crate (tar-rs) must read every stream airlock writes to the same
//! entries and bytes that airlock's own strict reader and the source tree have.
//!
//! Two levels: bundles packed by the real binary (stored and zstd payloads, several volumes,
//! concatenated by hand and decompressed with the `zstd` crate, as a recovery by hand would), and
//! a property test of the library's tar writer over generated entry lists.

use crate::support::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// What a reader saw for one entry: directory or file content, and the executable bit.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Dir,
    File { data: Vec<u8>, executable: bool },
}

/// Reads a whole uncompressed tar stream with tar-rs, checking the header fields the format
/// fixes; returns the entries in stream order.
fn read_with_tar_crate(stream: &[u8]) -> Vec<(String, Seen)> {
    let mut archive = tar::Archive::new(stream);
    let mut out = Vec::new();
    for entry in archive.entries().expect("tar-rs opens the stream") {
        let mut entry = entry.expect("tar-rs reads every header");
        let path = String::from_utf8(entry.path_bytes().into_owned()).expect("UTF-8 path");
        let h = entry.header();
        assert_eq!(h.uid().unwrap(), 0, "{path}");
        assert_eq!(h.gid().unwrap(), 0, "{path}");
        assert_eq!(h.mtime().unwrap(), 0, "{path}");
        assert!(h.link_name_bytes().is_none(), "{path}");
        assert!(h.as_ustar().is_some(), "{path}: not a ustar header");
        let mode = h.mode().unwrap();
        let kind = h.entry_type();
        let seen = if kind.is_dir() {
            assert_eq!(mode, 0o755, "{path}");
            assert_eq!(entry.size(), 0, "{path}");
            Seen::Dir
        } else {
            assert!(kind.is_file(), "{path}: entry type {kind:?}");
            assert!(mode == 0o644 || mode == 0o755, "{path}: mode {mode:o}");
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            assert_eq!(data.len() as u64, entry.size(), "{path}");
            Seen::File {
                data,
                executable: mode == 0o755,
            }
        };
        out.push((path.trim_end_matches('/').to_string(), seen));
    }
    out
}

/// The same stream through airlock's own reader.
fn read_with_airlock(stream: &[u8]) -> Vec<(String, Seen)> {
    let mut r = airlock::tar::Reader::new(stream);
    let mut out = Vec::new();
    while let Some(e) = r.next_entry().expect("airlock reads its own stream") {
        let seen = match e.kind {
            airlock::tar::Kind::Dir => Seen::Dir,
            airlock::tar::Kind::File => {
                let mut data = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = r.read_data(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                Seen::File {
                    data,
                    executable: e.executable,
                }
            }
        };
        out.push((e.path, seen));
    }
    out
}

/// The source tree as a reader should see it, keyed by relative path.
fn source_tree(root: &Path) -> BTreeMap<String, Seen> {
    tree(root)
        .into_iter()
        .map(|(path, mode, content)| {
            let seen = match content {
                None => Seen::Dir,
                Some(data) => Seen::File {
                    data,
                    executable: mode & 0o111 != 0,
                },
            };
            (path, seen)
        })
        .collect()
}

/// The payload of a packed bundle: its volumes in manifest order, concatenated, and the
/// decompressed stream (with the `zstd` crate) when the manifest says zstd.
fn bundle_stream(bundle: &Path) -> Vec<u8> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    let mut payload = Vec::new();
    for v in manifest["volumes"].as_array().unwrap() {
        let bytes = std::fs::read(bundle.join(v["name"].as_str().unwrap())).unwrap();
        assert_eq!(bytes.len() as u64, v["size"].as_u64().unwrap());
        payload.extend(bytes);
    }
    let stream = match manifest["compression"]["algorithm"].as_str().unwrap() {
        "none" => payload,
        "zstd" => zstd::stream::decode_all(&payload[..]).unwrap(),
        other => panic!("unknown compression {other}"),
    };
    assert_eq!(
        stream.len() as u64,
        manifest["stream"]["size"].as_u64().unwrap(),
        "stream.size"
    );
    stream
}

/// A model that needs every part of the dialect: ustar prefix/name splits, PAX paths (one
/// component too long to split, a directory whose only usable '/' is its own, multi-byte names
/// with no usable '/'), empty files, executables, nested and empty directories, and sizes at
/// block edges.
fn awkward_model(env: &Env, rel: &str) -> std::path::PathBuf {
    let model = env.model(rel);
    let long_dir = "d".repeat(120);
    let files: Vec<(String, Vec<u8>)> = vec![
        (format!("{long_dir}/{}", "f".repeat(99)), b"split".to_vec()),
        (format!("x/{}", "y".repeat(150)), pseudo_random(1000, 3)),
        (
            format!("{}/{}", "p".repeat(150), "q".repeat(100)),
            b"prefix 150".to_vec(),
        ),
        ("é".repeat(120), b"two-byte".to_vec()),
        (
            format!("a{}", "😀".repeat(60)),
            b"four-byte, odd start".to_vec(),
        ),
        (
            format!("{0}/{0}", "€".repeat(70)),
            b"three-byte, no usable slash".to_vec(),
        ),
        ("blocks/exactly-512".into(), pseudo_random(512, 4)),
        ("blocks/513".into(), pseudo_random(513, 5)),
        ("blocks/511".into(), pseudo_random(511, 6)),
        ("blocks/empty".into(), vec![]),
        ("a/b/c/d/e/f/g/h/deep.txt".into(), b"deep".to_vec()),
    ];
    for (path, data) in &files {
        env.write(&format!("{rel}/{path}"), data);
    }
    std::fs::create_dir_all(model.join("z".repeat(100))).unwrap();
    std::fs::create_dir_all(model.join(format!("{long_dir}/empty"))).unwrap();
    std::fs::create_dir_all(model.join("ü".repeat(60))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        model.join("blocks/513"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    model
}

/// Packs `model` with the given flags and checks that tar-rs, airlock's reader and the source
/// tree agree on every entry and byte, and that airlock's order is the stream order tar-rs saw.
fn pack_and_compare(env: &Env, model: &Path, out: &str, flags: &[&str]) {
    let mut args = vec!["pack", model.to_str().unwrap(), "-o", out, "--key", "k.key"];
    args.extend(flags);
    args.push("--no-model-checks");
    env.ok(&args);
    let stream = bundle_stream(&env.path(out));
    let theirs = read_with_tar_crate(&stream);
    let ours = read_with_airlock(&stream);
    assert_eq!(theirs, ours, "{flags:?}: tar-rs and airlock disagree");
    let paths: Vec<&str> = theirs.iter().map(|(p, _)| p.as_str()).collect();
    let mut unique = paths.clone();
    unique.dedup();
    assert_eq!(unique, paths, "duplicate entries");
    let theirs: BTreeMap<String, Seen> = theirs.into_iter().collect();
    assert_eq!(theirs, source_tree(model), "{flags:?}: tar-rs vs source");
    // And airlock itself installs it (long multi-byte names included) to the same tree.
    env.ok(&["verify", out, "--trust", "k.pub", "--deep"]);
    let dest = format!("{out}-installed");
    env.ok(&["unpack", out, "--trust", "k.pub", "--dest", &dest]);
    assert_eq!(
        tree_without_receipt(&env.path(&dest)),
        tree(model),
        "{flags:?}"
    );
}

#[test]
fn tar_crate_reads_stored_bundles_like_airlock() {
    let env = Env::new();
    let model = awkward_model(&env, "m");
    pack_and_compare(&env, &model, "b1", &["--compress", "none"]);
    // Volumes cut at sizes that are not multiples of a tar block.
    pack_and_compare(
        &env,
        &model,
        "b2",
        &["--compress", "none", "--volume-size", "100001"],
    );
}

#[test]
fn tar_crate_reads_zstd_bundles_like_airlock() {
    let env = Env::new();
    let model = awkward_model(&env, "m");
    pack_and_compare(&env, &model, "b1", &["--compress", "zstd"]);
    pack_and_compare(
        &env,
        &model,
        "b2",
        &["--compress", "zstd", "--volume-size", "4K"],
    );
}

/// An empty model and a model of one empty file are streams too.
#[test]
fn tar_crate_reads_minimal_bundles_like_airlock() {
    let env = Env::new();
    env.write("one/empty.bin", b"");
    pack_and_compare(&env, &env.path("one"), "b1", &["--compress", "none"]);
    pack_and_compare(&env, &env.path("one"), "b2", &["--compress", "zstd"]);
}

mod writer {
    use super::*;
    use proptest::prelude::*;

    /// One generated entry: a path made of components of repeated units (ASCII and multi-byte,
    /// short and long), a kind, content and the executable bit.
    fn entries() -> impl Strategy<Value = Vec<(String, Option<Vec<u8>>, bool)>> {
        let unit = prop::sample::select(vec!["a", "b.c", "é", "€", "😀", "-_"]);
        let component = (unit, 1usize..70).prop_map(|(u, n)| u.repeat(n));
        let path = prop::collection::vec(component, 1..6).prop_map(|c| c.join("/"));
        let content = prop::option::of(prop::collection::vec(any::<u8>(), 0..1300));
        prop::collection::vec((path, content, any::<bool>()), 1..8)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever airlock's writer emits, tar-rs reads to the same entries and bytes as
        /// airlock's reader.
        #[test]
        fn tar_crate_reads_what_the_writer_writes(entries in entries()) {
            let mut seen = std::collections::HashSet::new();
            let mut w = airlock::tar::Writer::new(Vec::new());
            let mut expected = Vec::new();
            for (path, content, exec) in entries {
                if airlock::paths::check_relative(&path).is_err() || !seen.insert(path.clone()) {
                    continue;
                }
                match content {
                    None => {
                        w.append_dir(&path).unwrap();
                        expected.push((path, Seen::Dir));
                    }
                    Some(data) => {
                        w.begin_file(&path, data.len() as u64, exec).unwrap();
                        w.write_data(&data).unwrap();
                        w.end_file().unwrap();
                        expected.push((path, Seen::File { data, executable: exec }));
                    }
                }
            }
            let stream = w.finish().unwrap();
            prop_assert_eq!(&read_with_tar_crate(&stream), &expected);
            prop_assert_eq!(&read_with_airlock(&stream), &expected);
        }
    }
}
