//! The validation rules of FORMAT.md section 7.3, one by one: each case breaks exactly one rule
//! and checks the reason given, so deleting or weakening any single rule fails a test (found by
//! mutation testing, docs/TESTING.md). The manifests are built from JSON so that fields added by
//! later format extensions (optional, absent here) need no change in this file.

use super::*;
use serde_json::json;

const H0: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A valid version 1 manifest: directories `a` and `z` (the last entry in stream order is a
/// directory), files `a/x.bin` and `config.json`, uncompressed, 4096-byte chunks.
fn sample() -> Manifest {
    let stream = 1024
        + entry_stream_size("a", true, 0).unwrap()
        + entry_stream_size("a/x.bin", false, 5).unwrap()
        + entry_stream_size("config.json", false, 600).unwrap()
        + entry_stream_size("z", true, 0).unwrap();
    let m: Manifest = serde_json::from_value(json!({
        "format": FORMAT_ID,
        "format_version": 1,
        "name": "m",
        "version": 3,
        "created": rfc3339(0),
        "tool": "airlock test",
        "compression": {"algorithm": "none"},
        "stream": {"size": stream},
        "chunk_size": 4096,
        "volumes": [{
            "name": "data.000",
            "size": stream,
            "sha256": "2".repeat(64),
            "chunks": vec!["3".repeat(64); stream.div_ceil(4096) as usize],
        }],
        "directories": ["a", "z"],
        "files": [
            {"path": "a/x.bin", "size": 5, "sha256": H0, "executable": false},
            {"path": "config.json", "size": 600, "sha256": "1".repeat(64), "executable": true},
        ],
        "totals": {"files": 2, "directories": 2, "file_bytes": 605, "volume_bytes": stream},
    }))
    .unwrap();
    m.validate().unwrap();
    m
}

/// The same manifest compressed with zstd: its one volume is smaller than the stream.
fn zstd_sample() -> Manifest {
    let mut m = sample();
    m.compression.algorithm = "zstd".into();
    m.compression.level = Some(3);
    set_volume_size(&mut m, 700);
    m
}

fn set_volume_size(m: &mut Manifest, size: u64) {
    m.volumes[0].size = size;
    m.volumes[0].chunks = vec!["3".repeat(64); size.div_ceil(m.chunk_size) as usize];
    m.totals.volume_bytes = size;
}

/// Applies `mutate` to a valid manifest and returns the reason it is refused.
fn refusal(base: fn() -> Manifest, mutate: impl FnOnce(&mut Manifest)) -> String {
    let mut m = base();
    mutate(&mut m);
    match m.validate() {
        Ok(()) => panic!("accepted: {m:?}"),
        Err(why) => why.to_string(),
    }
}

fn accepted(base: fn() -> Manifest, mutate: impl FnOnce(&mut Manifest)) {
    let mut m = base();
    mutate(&mut m);
    if let Err(why) = m.validate() {
        panic!("refused ({why}): {m:?}");
    }
}

fn entry_order(m: &Manifest) -> Vec<String> {
    m.expected_entries()
        .iter()
        .map(|e| e.path().to_string())
        .collect()
}

#[test]
fn expected_entries_end_with_a_directory_when_it_sorts_last() {
    let m = sample();
    let order = entry_order(&m);
    assert_eq!(order, ["a", "a/x.bin", "config.json", "z"]);
    assert!(matches!(m.expected_entries()[3], Expected::Dir("z")));
    // Directories only, and files only.
    let mut m = sample();
    m.files.clear();
    let order = entry_order(&m);
    assert_eq!(order, ["a", "z"]);
    let mut m = sample();
    m.directories.clear();
    m.files.remove(0);
    let order = entry_order(&m);
    assert_eq!(order, ["config.json"]);
}

#[test]
fn rule_1_format_and_version() {
    let why = refusal(sample, |m| m.format = "airlock-bundle2".into());
    assert!(why.contains("has format \"airlock-bundle2\""), "{why}");
    for v in [0, 3] {
        let why = refusal(sample, |m| m.format_version = v);
        assert!(why.contains(&format!("format version {v},")), "{why}");
    }
}

#[test]
fn rule_2_bundle_name_is_1_to_200_bytes_without_control_characters() {
    for bad in [
        String::new(),
        "n".repeat(201),
        "a\u{7f}b".into(),
        "a\nb".into(),
    ] {
        let why = refusal(sample, |m| m.name = bad.clone());
        assert!(why.contains("has the bundle name"), "{bad:?}: {why}");
        assert!(check_name(&bad).is_err(), "{bad:?}");
    }
    // 200 bytes of UTF-8 (100 two-byte characters) is the longest name.
    for good in ["n".repeat(200), "é".repeat(100), "x".into()] {
        accepted(sample, |m| m.name = good.clone());
        check_name(&good).unwrap();
    }
    assert!(check_name(&"é".repeat(101)).is_err());
}

#[test]
fn rule_3_compression() {
    let why = refusal(sample, |m| m.compression.algorithm = "gzip".into());
    assert!(why.contains("unknown compression \"gzip\""), "{why}");
    let why = refusal(sample, |m| m.compression.level = Some(3));
    assert!(why.contains("unknown compression \"none\""), "{why}");
    accepted(zstd_sample, |m| m.compression.level = None);
}

#[test]
fn rule_4_chunk_size_is_a_power_of_two_in_range() {
    // In range but not a power of two; a power of two on each side of the range.
    for bad in [6144u64, 8192 + 4096, 2048, 1 << 31] {
        let why = refusal(sample, |m| {
            m.chunk_size = bad;
            let size = m.volumes[0].size;
            m.volumes[0].chunks = vec!["3".repeat(64); size.div_ceil(bad) as usize];
        });
        assert!(why.contains(&format!("invalid chunk_size {bad}")), "{why}");
    }
    for good in [4096u64, 1 << 30, DEFAULT_CHUNK_SIZE] {
        accepted(sample, |m| {
            m.chunk_size = good;
            let size = m.volumes[0].size;
            m.volumes[0].chunks = vec!["3".repeat(64); size.div_ceil(good) as usize];
        });
    }
    // FORMAT.md section 6: airlock writes 64 MiB chunks.
    assert_eq!(DEFAULT_CHUNK_SIZE, 67_108_864);
}

#[test]
fn rule_5_volumes() {
    let why = refusal(sample, |m| m.volumes.clear());
    assert!(why.contains("lists no volumes"), "{why}");
    let why = refusal(zstd_sample, |m| set_volume_size(m, 0));
    assert!(why.contains("volume data.000 with size 0"), "{why}");
    // One malformed chunk digest, the volume digest well formed; and the reverse.
    for bad in [
        "3".repeat(63),
        "3".repeat(65),
        format!("{}g", "3".repeat(63)),
    ] {
        let why = refusal(sample, |m| m.volumes[0].chunks[0] = bad.clone());
        assert!(
            why.contains("malformed sha256 for volume data.000"),
            "{bad}: {why}"
        );
        let why = refusal(sample, |m| m.volumes[0].sha256 = Some(bad.clone()));
        assert!(
            why.contains("malformed sha256 for volume data.000"),
            "{bad}: {why}"
        );
    }
    // Every hex digit is accepted, in both kinds of digest.
    accepted(sample, |m| {
        m.volumes[0].sha256 = Some("0123456789abcdef".repeat(4));
        m.volumes[0].chunks[0] = "fedcba9876543210".repeat(4);
    });
    let why = refusal(sample, |m| m.volumes[0].chunks.push("3".repeat(64)));
    assert!(why.contains("chunk digests for volume data.000"), "{why}");
}

#[test]
fn rule_5_volume_names_follow_the_count() {
    // Eleven volumes are named data.000 to data.010; a manifest naming them otherwise is refused.
    let mut m = zstd_sample();
    m.volumes = (0..11)
        .map(|i| Volume {
            name: volume_name(i, 11),
            size: 10,
            sha256: Some("2".repeat(64)),
            chunks: vec!["3".repeat(64)],
        })
        .collect();
    m.totals.volume_bytes = 110;
    m.validate().unwrap();
    assert_eq!(m.volumes[10].name, "data.010");
    m.volumes[3].name = "data.004".into();
    let why = m.validate().unwrap_err().to_string();
    assert!(why.contains("names volume 4 \"data.004\""), "{why}");
    assert_eq!(volume_name(1000, 1001), "data.1000");
    assert_eq!(volume_name(7, 1000), "data.007");
}

#[test]
fn rule_7_directories_strictly_increase() {
    let why = refusal(sample, |m| m.directories.swap(0, 1));
    assert!(
        why.contains("directory \"a\" out of order or twice"),
        "{why}"
    );
    let why = refusal(sample, |m| {
        m.directories.insert(1, "a".into());
        m.totals.directories = 3;
    });
    assert!(
        why.contains("directory \"a\" out of order or twice"),
        "{why}"
    );
    let why = refusal(sample, |m| m.directories[1] = "../z".into());
    assert!(why.contains("unsafe path \"../z\""), "{why}");
}

#[test]
fn rule_8_files() {
    let why = refusal(sample, |m| {
        m.files.insert(1, m.files[0].clone());
        m.totals.files = 3;
        m.totals.file_bytes = 610;
    });
    assert!(
        why.contains("file \"a/x.bin\" out of order or twice"),
        "{why}"
    );
    let why = refusal(sample, |m| {
        m.files[1].path = "z".into();
        m.files[1].size = 0;
        m.totals.file_bytes = 5;
    });
    assert!(
        why.contains("\"z\" as both a file and a directory"),
        "{why}"
    );
    for bad in [
        "1".repeat(63),
        "1".repeat(65),
        "1".repeat(63) + "G",
        String::new(),
    ] {
        let why = refusal(sample, |m| m.files[1].sha256 = bad.clone());
        assert!(
            why.contains("malformed sha256 for \"config.json\""),
            "{bad}: {why}"
        );
    }
}

#[test]
fn rule_10_each_total_on_its_own() {
    let cases: [fn(&mut Manifest); 3] = [
        |m| m.totals.files = 3,
        |m| m.totals.directories = 1,
        |m| m.totals.file_bytes = 604,
    ];
    for mutate in cases {
        let why = refusal(sample, mutate);
        assert!(why.contains("totals that disagree with its lists"), "{why}");
    }
}

#[test]
fn rule_12_only_an_uncompressed_stream_must_equal_its_volumes() {
    // zstd: the volumes hold fewer bytes than the stream, and that is fine.
    zstd_sample().validate().unwrap();
    let why = refusal(sample, |m| {
        let size = m.volumes[0].size - 1;
        set_volume_size(m, size);
    });
    assert!(
        why.contains("is uncompressed but its volumes hold"),
        "{why}"
    );
}

#[test]
fn manifest_size_cap_is_exact() {
    // A manifest of exactly the cap is read (and here fails as JSON: parsing 256 MiB would make
    // the test slow); one byte more is refused before it is parsed.
    let cap = MAX_MANIFEST_BYTES as usize;
    let bytes = vec![b'x'; cap + 1];
    let why = Manifest::parse(&bytes[..cap]).unwrap_err();
    assert!(matches!(why, ManifestError::Json(_)), "{why}");
    assert!(
        why.to_string().starts_with("is not a valid manifest"),
        "{why}"
    );
    let why = Manifest::parse(&bytes).unwrap_err();
    assert!(matches!(why, ManifestError::TooLarge), "{why}");
    assert_eq!(why.to_string(), "is larger than 268435456 bytes");
}

/// Days since 1970-01-01 to a civil date, counted day by day: slow and plainly right.
#[test]
fn rfc3339_matches_a_day_by_day_calendar() {
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_len = |y: i64, m: i64| match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    // From 1600-01-01 (days before the epoch, two 400-year era boundaries) to 2401-12-31.
    let (mut y, mut mo, mut d) = (1600i64, 1i64, 1i64);
    let mut day: i64 = -135_140; // 1600-01-01
    while y <= 2401 {
        let secs = day * 86_400 + (day * 7919).rem_euclid(86_400);
        let tod = (day * 7919).rem_euclid(86_400);
        let want = format!(
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
            tod / 3600,
            tod / 60 % 60,
            tod % 60
        );
        assert_eq!(rfc3339(secs), want, "day {day}");
        day += 1;
        d += 1;
        if d > month_len(y, mo) {
            d = 1;
            mo += 1;
            if mo > 12 {
                mo = 1;
                y += 1;
            }
        }
    }
    assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    assert_eq!(rfc3339(86_399), "1970-01-01T23:59:59Z");
}

/// The sample as format version 2 with parity: 2 data units (chunks), one data unit and one
/// recovery unit per stripe, so 2 stripes and 2 recovery units, in two parity volumes of one
/// chunk each (FORMAT.md section 17).
fn parity_sample() -> Manifest {
    let mut m = sample();
    m.format_version = 2;
    m.volumes[0].sha256 = None;
    assert_eq!(m.data_units(), 2);
    m.parity = Some(
        serde_json::from_value(json!({
            "algorithm": PARITY_ALGORITHM,
            "data_units": 1,
            "recovery_units": 1,
            "stripes": 2,
            "volumes": [
                {"name": "parity.000", "size": 4096, "chunks": ["4".repeat(64)]},
                {"name": "parity.001", "size": 4096, "chunks": ["5".repeat(64)]},
            ],
        }))
        .unwrap(),
    );
    m.validate().unwrap();
    m
}

fn parity(m: &mut Manifest) -> &mut Parity {
    m.parity.as_mut().unwrap()
}

#[test]
fn parity_rules_one_by_one() {
    accepted(parity_sample, |_| {});
    // One volume of two chunks holds the same two recovery units.
    accepted(parity_sample, |m| {
        let p = parity(m);
        p.volumes.pop();
        p.volumes[0].size = 8192;
        p.volumes[0].chunks.push("5".repeat(64));
    });
    type Case = (&'static str, fn(&mut Manifest));
    let cases: [Case; 11] = [
        ("has parity, which needs format version 2", |m| {
            m.format_version = 1;
            m.volumes[0].sha256 = Some("2".repeat(64));
        }),
        ("unknown parity algorithm \"rs\"", |m| {
            parity(m).algorithm = "rs".into()
        }),
        ("says parity has 3 stripes, its geometry makes 2", |m| {
            parity(m).stripes = 3
        }),
        ("has parity without parity volumes", |m| {
            parity(m).volumes.clear()
        }),
        (
            "names parity volume 2 \"parity.002\", expected \"parity.001\"",
            |m| parity(m).volumes[1].name = "parity.002".into(),
        ),
        (
            "parity volume parity.001 with size 0, not a positive multiple",
            |m| {
                let v = &mut parity(m).volumes[1];
                v.size = 0;
                v.chunks.clear();
            },
        ),
        (
            "parity volume parity.001 with size 4097, not a positive multiple",
            |m| parity(m).volumes[1].size = 4097,
        ),
        ("lists parity volume parity.001 with a sha256", |m| {
            parity(m).volumes[1].sha256 = Some("6".repeat(64))
        }),
        ("malformed sha256 for volume parity.001", |m| {
            parity(m).volumes[1].chunks[0] = "G".repeat(64)
        }),
        (
            "lists 2 chunk digests for parity volume parity.001, its size needs 1",
            |m| parity(m).volumes[1].chunks.push("7".repeat(64)),
        ),
        (
            "lists 3 recovery units in its parity volumes, its geometry makes 2",
            |m| {
                let v = &mut parity(m).volumes[1];
                v.size = 8192;
                v.chunks.push("7".repeat(64));
            },
        ),
    ];
    for (want, mutate) in cases {
        let why = refusal(parity_sample, mutate);
        assert!(why.contains(want), "{want}: {why}");
    }
    assert_eq!(parity_volume_name(7, 1000), "parity.007");
    assert_eq!(parity_volume_name(1000, 1001), "parity.1000");
}

/// FORMAT.md, "Versions": `base` (and with it every `files[].from`) exists only in format
/// version 2, like `parity`. airlock never wrote a version 1 delta, so refusing one loses no
/// bundle. Before: a version 1 manifest with a `base` validated.
#[test]
fn a_version_1_manifest_cannot_be_a_delta() {
    let base = || Base {
        name: "m".into(),
        version: 2,
        manifest_sha256: H0.into(),
    };
    let why = refusal(sample, |m| m.base = Some(base()));
    assert!(
        why.contains("has a base, which needs format version 2"),
        "{why}"
    );
    // The same delta (every file carried) in version 2 is valid.
    accepted(sample, |m| {
        m.format_version = 2;
        m.volumes[0].sha256 = None;
        m.base = Some(base());
    });
}

/// FORMAT.md, "Versions" (issue 36 item 9): `trust_update` exists only in format version 2, like
/// `oms` and `values`. Before: a version 1 manifest carrying it validated (and installed with
/// a warning), though the same bundle with `oms` or `values` was refused.
#[test]
fn a_version_1_manifest_cannot_carry_a_trust_update() {
    let update = || TrustUpdate {
        roots: vec![CarriedRoot {
            version: 2,
            size: 500,
            sha256: "4".repeat(64),
        }],
    };
    let why = refusal(sample, |m| m.trust_update = Some(update()));
    assert!(
        why.contains("has trust_update, which needs format version 2"),
        "{why}"
    );
    accepted(sample, |m| {
        m.format_version = 2;
        m.volumes[0].sha256 = None;
        m.trust_update = Some(update());
    });
}

/// Applies `mutate` to a valid manifest, writes it and parses it back: the refusal a reader
/// gets for that hostile manifest, as the value it matches on.
fn parsed_refusal(mutate: impl FnOnce(&mut Manifest)) -> ManifestError {
    let mut m = sample();
    mutate(&mut m);
    match Manifest::parse(&m.to_bytes()) {
        Ok(_) => panic!("accepted: {m:?}"),
        Err(why) => why,
    }
}

/// Issue 34 item 6: each rule a hostile manifest breaks is a variant a caller or a test
/// matches (which a `String` reason could not offer), and its text is still the one the user
/// has always read after the manifest's path.
#[test]
fn a_hostile_manifest_is_refused_with_a_matchable_reason() {
    use crate::hfcache::names::{CacheNameError, RepoIdRule};
    use crate::paths::PathError;

    let why = parsed_refusal(|m| m.files[0].path = "a/../../etc/passwd".into());
    assert!(
        matches!(&why, ManifestError::UnsafePath { path, why: PathError::DotDot } if path == "a/../../etc/passwd"),
        "{why:?}"
    );
    assert_eq!(
        why.to_string(),
        "lists the unsafe path \"a/../../etc/passwd\": it has a '..' component"
    );

    let why = parsed_refusal(|m| m.directories[0] = ".airlock".into());
    assert!(
        matches!(
            &why,
            ManifestError::UnsafePath {
                why: PathError::ReceiptDir,
                ..
            }
        ),
        "{why:?}"
    );

    let why = parsed_refusal(|m| m.files[1].path = "A/X.BIN".into());
    assert!(
        matches!(&why, ManifestError::FileOrder(p) if p == "A/X.BIN"),
        "{why:?}"
    );

    let why = parsed_refusal(|m| {
        m.directories = vec!["A".into(), "a".into()];
    });
    assert!(
        matches!(&why, ManifestError::Collision { path, earlier } if path == "a" && earlier == "A"),
        "{why:?}"
    );

    let why = parsed_refusal(|m| m.files[1].size = u64::MAX);
    assert!(matches!(why, ManifestError::FileSizesOverflow), "{why:?}");

    let why = parsed_refusal(|m| m.totals.volume_bytes += 1);
    assert!(
        matches!(why, ManifestError::VolumeTotal { declared, listed } if declared == listed + 1),
        "{why:?}"
    );

    let why = parsed_refusal(|m| m.name = "\u{1b}]0;owned\u{7}".into());
    assert!(
        matches!(&why, ManifestError::Name(n) if n.starts_with('\u{1b}')),
        "{why:?}"
    );

    let why = parsed_refusal(|m| m.tool = "x\u{9b}2J".into());
    assert!(matches!(why, ManifestError::Text("tool")), "{why:?}");

    let why = parsed_refusal(|m| m.format_version = 7);
    assert!(matches!(why, ManifestError::FormatVersion(7)), "{why:?}");

    let why = parsed_refusal(|m| {
        m.source = Some(HfSource {
            repo_id: "org/name/../x".into(),
            repo_type: "model".into(),
            revision: "main".into(),
            commit: "0".repeat(40),
            etags: vec![H0.into(), "1".repeat(64)],
        })
    });
    assert!(
        matches!(
            &why,
            ManifestError::SourceName {
                part: Part::Source,
                field: "repo_id",
                why: CacheNameError::RepoId {
                    rule: RepoIdRule::Parts,
                    ..
                },
            }
        ),
        "{why:?}"
    );
    assert_eq!(
        why.to_string(),
        "has a source.repo_id: \"org/name/../x\" is not a Hugging Face repository id: use ORG/NAME or NAME"
    );

    // A shape serde refuses is the JSON variant, its reason serde's.
    let mut v: serde_json::Value = serde_json::from_slice(&sample().to_bytes()).unwrap();
    v["volumes"][0]["size"] = json!(-1);
    let why = Manifest::parse(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(matches!(why, ManifestError::Json(_)), "{why:?}");
    assert!(std::error::Error::source(&why).is_some());
}
