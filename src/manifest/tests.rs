//! Manifest parsing, serialisation and the stream-size arithmetic, case by case.

use super::*;

fn sample() -> Manifest {
    let files = vec![
        FileEntry {
            path: "a/x.bin".into(),
            size: 5,
            sha256: "0".repeat(64),
            executable: false,
            from: None,
        },
        FileEntry {
            path: "config.json".into(),
            size: 600,
            sha256: "1".repeat(64),
            executable: true,
            from: None,
        },
    ];
    let directories = vec!["a".to_string()];
    let stream = 1024
        + entry_stream_size("a", true, 0).unwrap()
        + entry_stream_size("a/x.bin", false, 5).unwrap()
        + entry_stream_size("config.json", false, 600).unwrap();
    Manifest {
        format: FORMAT_ID.into(),
        format_version: 1,
        name: "m".into(),
        version: 3,
        created: rfc3339(0),
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
            sha256: Some("2".repeat(64)),
            chunks: vec!["3".repeat(64); stream.div_ceil(4096) as usize],
        }],
        directories,
        files,
        totals: Totals {
            files: 2,
            directories: 1,
            file_bytes: 605,
            volume_bytes: stream,
        },
        warnings: vec![],
        source: None,
        repos: Vec::new(),
        dir: None,
        parity: None,
        base: None,
        trust_update: None,
        values: None,
        oms: None,
    }
}

#[test]
fn round_trips_and_validates() {
    let m = sample();
    let bytes = m.to_bytes();
    assert_eq!(Manifest::parse(&bytes).unwrap(), m);
}

#[test]
fn refuses_unknown_fields_and_inconsistency() {
    let bytes = sample().to_bytes();
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["extra"] = serde_json::json!(1);
    assert!(Manifest::parse(&serde_json::to_vec(&v).unwrap()).is_err());

    type Mutation = Box<dyn Fn(&mut Manifest)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("unsafe path", Box::new(|m| m.files[0].path = "../x".into())),
        ("out of order", Box::new(|m| m.files.swap(0, 1))),
        ("without its directory", Box::new(|m| m.directories.clear())),
        ("totals", Box::new(|m| m.totals.file_bytes += 1)),
        ("volumes total", Box::new(|m| m.totals.volume_bytes += 1)),
        (
            "expected",
            Box::new(|m| m.volumes[0].name = "../data.000".into()),
        ),
        ("tar stream", Box::new(|m| m.stream.size += 512)),
        (
            "chunk",
            Box::new(|m| m.volumes[0].chunks.pop().map(drop).unwrap_or(())),
        ),
        (
            "case-insensitive",
            Box::new(|m| {
                m.files[1].path = "A".into();
                m.directories[0] = "a".into();
                m.files.swap(0, 1);
                m.files[0].path = "A".into();
                m.files[1].path = "a/x.bin".into();
            }),
        ),
        ("format version", Box::new(|m| m.format_version = 3)),
        ("format version", Box::new(|m| m.format_version = 0)),
        (
            "format version 2 does not have",
            Box::new(|m| m.format_version = 2),
        ),
        (
            "without the sha256 format version 1 requires",
            Box::new(|m| m.volumes[0].sha256 = None),
        ),
        (
            "malformed sha256",
            Box::new(|m| m.volumes[0].sha256 = Some("A".repeat(64))),
        ),
    ];
    for (want, mutate) in cases {
        let mut m = sample();
        mutate(&mut m);
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn version_2_has_no_volume_digest_and_version_1_still_reads() {
    let mut m = sample();
    m.validate().unwrap();
    m.format_version = 2;
    m.volumes[0].sha256 = None;
    let bytes = m.to_bytes();
    assert!(!String::from_utf8_lossy(&bytes).contains("\"sha256\": \"2222"));
    assert_eq!(Manifest::parse(&bytes).unwrap(), m);
}

#[test]
fn null_is_refused_for_every_optional_field() {
    let mut m = sample();
    m.compression.algorithm = "zstd".into();
    m.compression.level = Some(3);
    let good: serde_json::Value = serde_json::from_slice(&m.to_bytes()).unwrap();
    Manifest::parse(&serde_json::to_vec(&good).unwrap()).unwrap();
    for pointer in [
        "/compression/level",
        "/volumes/0/sha256",
        "/warnings",
        "/source",
    ] {
        let mut v = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        v.pointer_mut(if parent.is_empty() { "" } else { parent })
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(key.to_string(), serde_json::Value::Null);
        let err = Manifest::parse(&serde_json::to_vec(&v).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("null"), "{pointer}: {err}");
    }
}

#[test]
fn the_parity_object_is_validated_as_documented() {
    let mut m = sample();
    m.format_version = 2;
    m.volumes[0].sha256 = None;
    let units = m.volumes[0].chunks.len() as u64;
    m.parity = Some(Parity {
        algorithm: PARITY_ALGORITHM.into(),
        data_units: 1,
        recovery_units: 1,
        stripes: units,
        volumes: vec![Volume {
            name: "parity.000".into(),
            size: units * 4096,
            sha256: None,
            chunks: vec!["4".repeat(64); units as usize],
        }],
    });
    m.validate().unwrap();
    let back = Manifest::parse(&m.to_bytes()).unwrap();
    assert_eq!(back, m);
    type Mutation = Box<dyn Fn(&mut Manifest)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|m| {
                m.format_version = 1;
                m.volumes[0].sha256 = Some("2".repeat(64));
            }),
            "needs format version 2",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().algorithm = "rs".into()),
            "unknown parity algorithm",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().stripes += 1),
            "stripes",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().data_units = 0),
            "data units",
        ),
        (
            // A stripe wider than the bundle (issue 26 item 3), stripes kept consistent.
            Box::new(|m| {
                let units = m.data_units();
                let p = m.parity.as_mut().unwrap();
                p.data_units = units as u32 + 1;
                p.stripes = 1;
            }),
            "more than the bundle's",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().volumes[0].name = "parity.0".into()),
            "expected \"parity.000\"",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().volumes[0].size -= 1),
            "multiple of the chunk size",
        ),
        (
            Box::new(|m| {
                let v = &mut m.parity.as_mut().unwrap().volumes[0];
                v.size += 4096;
                v.chunks.push("4".repeat(64));
            }),
            "recovery units",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().volumes[0].sha256 = Some("5".repeat(64))),
            "with a sha256",
        ),
        (
            Box::new(|m| m.parity.as_mut().unwrap().volumes.clear()),
            "without parity volumes",
        ),
    ];
    for (mutate, want) in cases {
        let mut bad = m.clone();
        mutate(&mut bad);
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn reserved_extension_names_are_refused_until_a_reader_knows_them() {
    // Both extensions are read now (sections 16 and 17): an empty object lacks its
    // required fields.
    for (key, first) in [("base", "name"), ("parity", "algorithm")] {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_bytes()).unwrap();
        v[key] = serde_json::json!({});
        let err = Manifest::parse(&serde_json::to_vec(&v).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("missing field `{first}`")),
            "{key}: {err}"
        );
    }
}

#[test]
fn free_text_fields_are_validated_as_documented() {
    type Mutation = Box<dyn Fn(&mut Manifest)>;
    let cases: Vec<Mutation> = vec![
        Box::new(|m| m.tool = "x".repeat(4097)),
        Box::new(|m| m.created = "2026\u{7}".into()),
        Box::new(|m| {
            m.warnings = vec![Warning {
                path: "a/x.bin".into(),
                code: "lfs-pointer".into(),
                problem: "\u{1b}]0;owned\u{7}".into(),
            }]
        }),
    ];
    for mutate in cases {
        let mut m = sample();
        mutate(&mut m);
        assert!(
            m.validate()
                .unwrap_err()
                .to_string()
                .contains("control characters or over 4096")
        );
    }
    let mut m = sample();
    m.tool = "x".repeat(4096);
    m.validate().unwrap();
}

#[test]
fn source_fields_must_be_names_a_cache_can_hold() {
    let with_source = || {
        let mut m = sample();
        m.source = Some(HfSource {
            repo_id: "org/name".into(),
            repo_type: "model".into(),
            revision: "refs/pr/1".into(),
            commit: "c".repeat(40),
            etags: vec!["0".repeat(64), "e".repeat(40)],
        });
        m
    };
    with_source().validate().unwrap();
    type Mutation = Box<dyn Fn(&mut HfSource)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("repo_id", Box::new(|s| s.repo_id = "../x".into())),
        ("repo_type", Box::new(|s| s.repo_type = "models".into())),
        ("source.commit", Box::new(|s| s.commit = "C".repeat(40))),
        (
            "source.revision",
            Box::new(|s| s.revision = "../../x".into()),
        ),
        (
            "number of etags",
            Box::new(|s| s.etags.pop().map(drop).unwrap_or(())),
        ),
        (
            "malformed etag",
            Box::new(|s| s.etags[1] = "../../x".into()),
        ),
        ("not its sha256", Box::new(|s| s.etags[0] = "1".repeat(64))),
    ];
    for (want, mutate) in cases {
        let mut m = with_source();
        mutate(m.source.as_mut().unwrap());
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
    let mut m = with_source();
    m.source.as_mut().unwrap().revision = "c".repeat(40);
    m.validate().unwrap();
}

#[test]
fn expected_entries_merge_in_stream_order() {
    let m = sample();
    let order: Vec<_> = m
        .expected_entries()
        .iter()
        .map(|e| e.path().to_string())
        .collect();
    assert_eq!(order, ["a", "a/x.bin", "config.json"]);
}

#[test]
fn stream_size_matches_writer() {
    for (path, is_dir, size) in [
        ("a", true, 0u64),
        ("f", false, 0),
        ("f", false, 513),
        (&*"x/".repeat(80), true, 0),
        (&*format!("x/{}", "y".repeat(150)), false, 10),
        (&*"é".repeat(60), false, 1),
    ] {
        let path = path.trim_end_matches('/');
        let mut w = tar::Writer::new(Vec::new());
        if is_dir {
            w.append_dir(path).unwrap();
        } else {
            w.begin_file(path, size, false).unwrap();
            w.write_data(&vec![0; size as usize]).unwrap();
            w.end_file().unwrap();
        }
        assert_eq!(
            w.offset(),
            entry_stream_size(path, is_dir, size).unwrap(),
            "{path}"
        );
    }
    assert_eq!(
        entry_stream_size("big", false, tar::USTAR_MAX_SIZE + 1).unwrap(),
        3 * 512 + (tar::USTAR_MAX_SIZE + 1).div_ceil(512) * 512
    );
}

#[test]
fn huge_sizes_are_refused_not_wrapped() {
    assert_eq!(entry_stream_size("f", false, u64::MAX), None);
    let mut m = sample();
    m.files[0].size = u64::MAX;
    let err = m.validate().unwrap_err();
    assert!(matches!(err, ManifestError::FileSizesOverflow), "{err}");
    assert_eq!(err.to_string(), "has file sizes that overflow");
    let mut m = sample();
    m.created = "\u{1b}[2J".into();
    let err = m.validate().unwrap_err();
    assert!(matches!(err, ManifestError::Text("created")), "{err}");
    assert!(err.to_string().contains("control"));
}

#[test]
fn trusted_comment_round_trip_and_dates() {
    let c = trusted_comment("org/model name", 7, &"a".repeat(64));
    let p = parse_trusted_comment(&c).unwrap();
    assert_eq!(p.version, 7);
    assert_eq!(p.name, "org/model name");
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_796_204_780), "2026-12-02T09:46:20Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
}
