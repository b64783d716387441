//! Property test: `check_file` never panics and never allocates much, whatever the bytes.
//!
//! The checks read hostile files, so "never trust a length" is a property, not a habit. The
//! inputs are random bytes, random bytes behind each format's magic, and the real fixtures
//! with bytes overwritten, 64-bit length fields replaced by huge values, and truncations.
//!
//! "Never allocates much" is enforced, not hoped for: the property runs in a child copy of this
//! test binary whose address space is capped with `setrlimit(RLIMIT_AS)`, so an allocation
//! sized from a hostile length fails (and the child with it) instead of passing unnoticed on a
//! machine with memory to spare.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::check_file;
use super::testutil::{fixtures, tree};
use crate::capped_child::{cap_address_space, run_capped_child};

/// Address space for the child: the test binary and its threads fit easily; a header
/// allocated from a hostile length (safetensors allows up to 100 MB, gguf strings 1 GiB) does
/// not, once it exceeds what a small input can justify.
const ADDRESS_SPACE: u64 = 1 << 30;
const CASES: u32 = 1500;

const NAMES: &[&str] = &[
    "model.safetensors",
    "model.gguf",
    "pytorch_model.bin",
    "model.pt",
    "model.safetensors.index.json",
    "config.json",
    "blob",
];

const PREFIXES: &[&[u8]] = &[
    b"GGUF\x03\x00\x00\x00",
    b"GGUF\x00\x00\x00\x03",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"\x80\x02",
    b"version https://git-lfs.github.com/spec/v1\noid sha256:",
    b"{\"weight_map\":{",
    b"\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":\"F32\",",
];

/// (file name, real bytes) of the valid fixtures.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let valid = fixtures().join("valid");
    [
        ("model.safetensors", "small.safetensors"),
        ("model.gguf", "model.gguf"),
        ("model.gguf", "model-big-endian.gguf"),
        ("pytorch_model.bin", "pytorch_model.bin"),
        ("pytorch_model.bin", "pickle-only.bin"),
    ]
    .into_iter()
    .map(|(name, file)| (name, std::fs::read(valid.join(file)).unwrap()))
    .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Byte(usize, u8),
    /// A 64-bit little- or big-endian length field replaced by a large value.
    Length(usize, u64, bool),
    Truncate(usize),
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if bytes.is_empty() {
            break;
        }
        match *m {
            Mutation::Byte(at, v) => {
                let at = at % bytes.len();
                bytes[at] = v;
            }
            Mutation::Length(at, v, big) => {
                let at = at % bytes.len();
                let v = if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                };
                for (i, b) in v.iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            Mutation::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
        }
    }
    bytes
}

/// Lengths that probe every boundary: small, the formats' caps and just under them, huge.
fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..64,
        1 => Just(u64::MAX),
        1 => Just(i64::MAX as u64),
        1 => Just(1u64 << 30),
        1 => Just((1u64 << 30) - 1),
        1 => Just(100_000_000),
        1 => Just(99_999_999),
        2 => 1u64 << 20..1u64 << 40,
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    // Half the positions in the first KiB, where the headers are.
    let position = prop_oneof![0usize..1024, any::<usize>()];
    prop_oneof![
        4 => (position.clone(), any::<u8>()).prop_map(|(a, v)| Mutation::Byte(a, v)),
        3 => (position, length(), any::<bool>()).prop_map(|(a, v, b)| Mutation::Length(a, v, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// A sequence of plausible header fields: lengths, small u32 type tags, keys, raw bytes.
fn fields() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        3 => length().prop_map(|v| v.to_le_bytes().to_vec()),
        3 => (0u32..16).prop_map(|v| v.to_le_bytes().to_vec()),
        1 => Just(b"general.alignment".to_vec()),
        2 => prop::collection::vec(any::<u8>(), 0..40),
    ];
    prop::collection::vec(field, 0..24).prop_map(|fs| fs.concat())
}

/// Inputs that get past each format's first checks, so the deep paths see hostile numbers.
fn structured() -> impl Strategy<Value = (&'static str, Vec<u8>)> {
    let gguf = (0u64..4, 0u64..4, any::<bool>(), fields()).prop_map(|(t, k, big, rest)| {
        let mut out = b"GGUF".to_vec();
        if big {
            out.extend(3u32.to_be_bytes());
            out.extend(t.to_be_bytes());
            out.extend(k.to_be_bytes());
        } else {
            out.extend(3u32.to_le_bytes());
            out.extend(t.to_le_bytes());
            out.extend(k.to_le_bytes());
        }
        ("model.gguf", [out, rest].concat())
    });
    let templates: &[&str] = &[
        "{}",
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F4","shape":[3,1],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}"#,
        r#"{"__metadata__":{"format":"pt"},"x":{"dtype":"BF16","shape":[18446744073709551615,2],"data_offsets":[0,4]}}"#,
    ];
    let safetensors = (
        length(),
        prop::sample::select(templates),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(n, header, data)| {
            let n = if n < 64 { header.len() as u64 } else { n };
            let bytes = [&n.to_le_bytes()[..], header.as_bytes(), &data].concat();
            ("model.safetensors", bytes)
        });
    let zip = (
        prop::collection::vec(any::<u8>(), 0..600),
        prop::collection::vec(length(), 6),
        any::<bool>(),
    )
        .prop_map(|(body, v, zip64)| {
            let mut out = b"PK\x03\x04".to_vec();
            out.extend(body);
            if zip64 {
                out.extend(0x0606_4b50u32.to_le_bytes());
                out.extend(44u64.to_le_bytes());
                out.extend([45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                out.extend(v[0].to_le_bytes());
                out.extend(v[1].to_le_bytes());
                out.extend(v[2].to_le_bytes());
                out.extend(v[3].to_le_bytes());
                out.extend(0x0706_4b50u32.to_le_bytes());
                out.extend(0u32.to_le_bytes());
                out.extend(v[4].to_le_bytes());
                out.extend(1u32.to_le_bytes());
            }
            out.extend(0x0605_4b50u32.to_le_bytes());
            out.extend([0u8; 4]);
            out.extend((v[5] as u16).to_le_bytes());
            out.extend((v[5] as u16).to_le_bytes());
            out.extend((v[2] as u32).to_le_bytes());
            out.extend((v[3] as u32).to_le_bytes());
            out.extend([0u8; 2]);
            ("pytorch_model.bin", out)
        });
    prop_oneof![gguf, safetensors, zip]
}

fn input() -> impl Strategy<Value = (&'static str, Vec<u8>)> {
    let seeds = seeds();
    let noise = (
        prop::sample::select(NAMES),
        prop::collection::vec(any::<u8>(), 0..3000),
    );
    let behind_magic = (
        prop::sample::select(NAMES),
        prop::sample::select(PREFIXES),
        prop::collection::vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(name, prefix, rest)| (name, [prefix, &rest[..]].concat()));
    let mutated = (
        prop::sample::select(seeds),
        prop::collection::vec(mutation(), 1..6),
    )
        .prop_map(|((name, bytes), ms)| (name, apply(bytes, &ms)));
    prop_oneof![1 => noise, 1 => behind_magic, 3 => mutated, 3 => structured()]
}

#[cfg(target_os = "linux")]
#[test]
fn check_file_survives_arbitrary_bytes_in_a_memory_capped_process() {
    run_capped_child("inspect::fuzz::arbitrary_bytes_child", ADDRESS_SPACE);
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the body of check_file_survives_arbitrary_bytes_in_a_memory_capped_process, which \
            runs it in a child process with capped memory"]
fn arbitrary_bytes_child() {
    cap_address_space();
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&input(), |(name, bytes)| {
            let dir = tree(&[(name, &bytes)]);
            let findings = check_file(dir.path(), name)
                .map_err(|e| TestCaseError::fail(format!("I/O error: {e}")))?;
            for f in &findings {
                prop_assert_eq!(&f.path, name);
                prop_assert!(!f.problem.is_empty() && !f.fix.is_empty());
            }
            Ok(())
        })
        .unwrap();
}

/// (dtype, shape, bytes) of the tensors the huge headers are made of.
const SMALL_TENSORS: &[(&str, &str, usize)] = &[
    ("U8", "[1]", 1),
    ("BF16", "[1,1]", 2),
    ("F32", "[2]", 8),
    ("F4", "[2,1]", 1),
    ("I64", "[]", 8),
];

/// A valid safetensors file of `count` small tensors (kinds rotated by `kind`), listed in
/// offset order or reversed, with or without metadata: what the reference reader accepts,
/// at any count.
fn valid_file(count: usize, kind: usize, reversed: bool, metadata: bool) -> Vec<u8> {
    let mut entries = Vec::with_capacity(count);
    let mut at = 0usize;
    for i in 0..count {
        let (dtype, shape, len) = SMALL_TENSORS[(i + kind) % SMALL_TENSORS.len()];
        entries.push(format!(
            r#""w.{i}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{at},{}]}}"#,
            at + len
        ));
        at += len;
    }
    if reversed {
        entries.reverse();
    }
    if metadata {
        entries.insert(0, r#""__metadata__":{"format":"pt"}"#.to_string());
    }
    let header = format!("{{{}}}", entries.join(","));
    drop(entries);
    super::safetensors::tests::make(&header, at)
}

/// Tensor counts around the limit and far past it (the 1.3 million of issue 26).
fn huge_count() -> impl Strategy<Value = usize> {
    use super::safetensors::MAX_TENSORS;
    prop_oneof![
        Just(MAX_TENSORS),
        Just(MAX_TENSORS + 1),
        Just(1_300_000),
        MAX_TENSORS - 1000..MAX_TENSORS + 1000,
        0usize..5000,
    ]
}

/// Issue 26 item 4: valid headers with huge tensor counts, checked in a child whose address
/// space is capped at 1 GiB (1.3 million tensors took 1.7 GB before the limits): up to the
/// limit the file passes, past it it is refused with its own code, and memory holds.
#[cfg(target_os = "linux")]
#[test]
fn huge_valid_headers_are_checked_in_a_memory_capped_process() {
    run_capped_child("inspect::fuzz::huge_headers_child", ADDRESS_SPACE);
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the body of huge_valid_headers_are_checked_in_a_memory_capped_process, which runs \
            it in a child process with capped memory"]
fn huge_headers_child() {
    use super::codes;
    use super::safetensors::MAX_TENSORS;

    cap_address_space();
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (huge_count(), 0usize..5, any::<bool>(), any::<bool>());
    runner
        .run(&strategy, |(count, kind, reversed, metadata)| {
            let bytes = valid_file(count, kind, reversed, metadata);
            let dir = tree(&[("model.safetensors", &bytes)]);
            drop(bytes);
            let findings = check_file(dir.path(), "model.safetensors")
                .map_err(|e| TestCaseError::fail(format!("I/O error: {e}")))?;
            let codes: Vec<&str> = findings.iter().map(|f| f.code).collect();
            if count <= MAX_TENSORS {
                prop_assert!(codes.is_empty(), "{} tensors: {:?}", count, findings);
            } else {
                prop_assert_eq!(codes, vec![codes::SAFETENSORS_TOO_MANY_TENSORS]);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn mutations_apply_within_bounds() {
    let bytes = apply(
        vec![0; 10],
        &[
            Mutation::Length(7, u64::MAX, false),
            Mutation::Byte(23, 9),
            Mutation::Truncate(9),
        ],
    );
    assert_eq!(bytes, [0, 0, 0, 9, 0, 0, 0, 255, 255]);
    assert!(Path::new(&fixtures()).is_dir());
}
