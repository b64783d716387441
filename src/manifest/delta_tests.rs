//! The delta rules of docs/FORMAT.md section 16.1-16.2 as `Manifest::validate` applies them.

use crate::manifest::{
    Base, Compression, DELTA_DIR, Expected, FileEntry, From, Manifest, ManifestError, Stream,
    Totals, Volume, entry_stream_size, patch_path,
};

fn file(path: &str, size: u64, from: Option<From>) -> FileEntry {
    FileEntry {
        path: path.into(),
        size,
        sha256: "a".repeat(64),
        executable: false,
        from: from.map(Box::new),
    }
}

fn copy(path: &str) -> Option<From> {
    Some(From {
        path: path.into(),
        op: "copy".into(),
        map: None,
        patch_size: None,
        patch_sha256: None,
    })
}

fn xor(path: &str, size: u64) -> Option<From> {
    Some(From {
        path: path.into(),
        op: "xor".into(),
        map: Some("safetensors".into()),
        patch_size: Some(size),
        patch_sha256: Some("b".repeat(64)),
    })
}

/// A delta of version 1: `config.json` carried, `a.bin` copied, `sub/w.safetensors` patched.
fn delta() -> Manifest {
    let files = vec![
        file("a.bin", 1000, copy("a.bin")),
        file("config.json", 20, None),
        file("sub/w.safetensors", 5000, xor("sub/w.safetensors", 77)),
    ];
    let stream = 1024
        + entry_stream_size("sub", true, 0).unwrap()
        + entry_stream_size("config.json", false, 20).unwrap()
        + entry_stream_size(DELTA_DIR, true, 0).unwrap()
        + entry_stream_size(&patch_path(2), false, 77).unwrap();
    let mut m = Manifest {
        format: "airlock-bundle".into(),
        format_version: 2,
        name: "m".into(),
        version: 2,
        created: "2026-01-01T00:00:00Z".into(),
        tool: "airlock test".into(),
        compression: Compression {
            algorithm: "none".into(),
            level: None,
        },
        stream: Stream { size: stream },
        chunk_size: 4096,
        volumes: vec![Volume {
            name: "data.000".into(),
            size: stream,
            sha256: None,
            chunks: vec!["c".repeat(64); stream.div_ceil(4096) as usize],
        }],
        directories: vec!["sub".into()],
        files,
        totals: Totals {
            files: 3,
            directories: 1,
            file_bytes: 6020,
            volume_bytes: stream,
        },
        warnings: vec![],
        source: None,
        repos: Vec::new(),
        dir: None,
        parity: None,
        trust_update: None,
        values: None,
        oms: None,
        base: Some(Base {
            name: "m".into(),
            version: 1,
            manifest_sha256: "d".repeat(64),
        }),
    };
    m.validate().unwrap();
    let bytes = m.to_bytes();
    m = Manifest::parse(&bytes).unwrap();
    m
}

#[test]
fn a_delta_manifest_round_trips_and_its_stream_holds_carried_files_and_patches() {
    let m = delta();
    let patches = m.patch_entries();
    let entries = m.stream_entries(&patches);
    let paths: Vec<&str> = entries.iter().map(Expected::path).collect();
    assert_eq!(
        paths,
        [".airlock-delta", ".airlock-delta/2", "config.json", "sub"]
    );
}

#[test]
fn delta_rules_are_enforced() {
    type Mutation = Box<dyn Fn(&mut Manifest)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (Box::new(|m| m.base = None), "names no base"),
        (
            Box::new(|m| m.base.as_mut().unwrap().name = "other".into()),
            "is a delta of",
        ),
        (
            Box::new(|m| m.base.as_mut().unwrap().version = 2),
            "a base must be an earlier version",
        ),
        (
            Box::new(|m| m.base.as_mut().unwrap().manifest_sha256 = "D".repeat(64)),
            "malformed base.manifest_sha256",
        ),
        (
            Box::new(|m| m.files[0].from.as_mut().unwrap().op = "link".into()),
            "unknown op",
        ),
        (
            Box::new(|m| m.files[0].from.as_mut().unwrap().patch_size = Some(1)),
            "also gives it a map or a patch",
        ),
        (
            Box::new(|m| m.files[2].from.as_mut().unwrap().map = Some("gguf".into())),
            "without a map",
        ),
        (
            Box::new(|m| m.files[2].from.as_mut().unwrap().patch_sha256 = None),
            "without a patch_size",
        ),
        (
            Box::new(|m| m.files[0].from.as_mut().unwrap().path = "../etc/passwd".into()),
            "unsafe base path",
        ),
        (
            Box::new(|m| m.files[2].from.as_mut().unwrap().patch_size = Some(600)),
            "declares a tar stream",
        ),
    ];
    for (mutate, want) in cases {
        let mut m = delta();
        mutate(&mut m);
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?}, got {err}");
    }
}

#[test]
fn the_patch_directory_is_reserved_in_every_spelling() {
    for name in [".airlock-delta", ".AIRLOCK-Delta"] {
        let mut m = delta();
        m.directories.insert(0, name.into());
        m.totals.directories += 1;
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains("reserved for the patches"), "{name}: {err}");
    }
}

#[test]
fn null_and_unknown_delta_fields_are_refused() {
    let m = delta();
    let mut v: serde_json::Value = serde_json::from_slice(&m.to_bytes()).unwrap();
    v["files"][0]["from"]["extra"] = serde_json::json!(1);
    let err = Manifest::parse(&serde_json::to_vec(&v).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field"), "{err}");
    let mut v: serde_json::Value = serde_json::from_slice(&m.to_bytes()).unwrap();
    v["files"][1]["from"] = serde_json::Value::Null;
    let err = Manifest::parse(&serde_json::to_vec(&v).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("null"), "{err}");
}

/// FORMAT.md sections 4.1 and 16.1: `from.path` is a model path, so the patch directory is
/// reserved there too (a base manifest can never list it). Before: accepted by `validate`,
/// refused only at install when the base did not list it.
#[test]
fn a_base_path_in_the_patch_directory_is_refused() {
    for path in [".airlock-delta/2", ".Airlock-Delta", ".AIRLOCK-DELTA/x/y"] {
        for i in [0, 2] {
            let mut m = delta();
            m.files[i].from.as_mut().unwrap().path = path.into();
            let err = m.validate().unwrap_err();
            assert!(
                matches!(&err, ManifestError::ReservedBasePath { from, .. } if from == path),
                "{path} ({i}): {err}"
            );
            let err = err.to_string();
            assert!(
                err.contains(&format!("from the base path {path:?}"))
                    && err.contains("reserved for the patches"),
                "{path} ({i}): {err}"
            );
        }
    }
    // A near miss is an ordinary base path.
    let mut m = delta();
    m.files[0].from.as_mut().unwrap().path = ".airlock-deltas".into();
    m.validate().unwrap();
}

/// FORMAT.md section 16.1: a `copy` carries none of the `xor` fields, each on its own; an
/// `xor` needs all three.
#[test]
fn copy_forbids_and_xor_requires_each_patch_field() {
    type Mutation = fn(&mut From);
    let copy_cases: [Mutation; 3] = [
        |f| f.map = Some("bytes".into()),
        |f| f.patch_size = Some(1),
        |f| f.patch_sha256 = Some("b".repeat(64)),
    ];
    for mutate in copy_cases {
        let mut m = delta();
        mutate(m.files[0].from.as_mut().unwrap());
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains("also gives it a map or a patch"), "{err}");
    }
    let xor_cases: [(Mutation, &str); 4] = [
        (|f| f.map = None, "without a map"),
        (|f| f.patch_size = None, "without a patch_size"),
        (|f| f.patch_sha256 = None, "without a patch_size"),
        (
            |f| f.patch_sha256 = Some("B".repeat(64)),
            "well-formed patch_sha256",
        ),
    ];
    for (mutate, want) in xor_cases {
        let mut m = delta();
        mutate(m.files[2].from.as_mut().unwrap());
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
    // Both maps are accepted.
    let mut m = delta();
    m.files[2].from.as_mut().unwrap().map = Some("bytes".into());
    m.validate().unwrap();
}
