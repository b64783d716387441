use std::io::Write;

use proptest::prelude::*;

use super::*;
use crate::inspect::Severity;
use crate::inspect::gguf::tests::Writer;
use crate::inspect::testutil::fixtures;

/// A safetensors file holding `tensors` (name, dtype, shape, bytes) in this order.
pub(crate) fn st(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{");
    let mut offset = 0;
    for (i, (name, dtype, shape, data)) in tensors.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        header.push_str(&format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{offset},{}]}}"#,
            dims.join(","),
            offset + data.len()
        ));
        offset += data.len();
    }
    header.push('}');
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    for (_, _, _, data) in tensors {
        out.extend(data);
    }
    out
}

fn temp_file(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    let file = File::open(f.path()).unwrap();
    (f, file)
}

fn layout_of(bytes: &[u8]) -> Option<Layout> {
    let (_keep, file) = temp_file(bytes);
    Layout::read(&file, bytes.len() as u64).unwrap()
}

/// Scans `bytes` fed in pieces of the given sizes (cycled), and checks the result against
/// the reference and against the whole file in one piece.
fn scan_in_pieces(bytes: &[u8], pieces: &[usize]) -> FileScan {
    let layout = layout_of(bytes).expect("a valid header");
    let mut scanner = Scanner::new(layout.clone());
    let mut at = 0;
    for &p in pieces.iter().cycle() {
        if at == bytes.len() {
            break;
        }
        let n = p.max(1).min(bytes.len() - at);
        scanner.update(&bytes[at..at + n]);
        at += n;
    }
    let got = scanner.finish().expect("every byte was fed");
    assert_eq!(
        got,
        reference::scan(&layout, bytes),
        "against the reference"
    );
    let mut whole = Scanner::new(layout);
    whole.update(bytes);
    assert_eq!(got, whole.finish().unwrap(), "against one piece");
    got
}

fn scan(bytes: &[u8]) -> FileScan {
    scan_in_pieces(bytes, &[1 << 20])
}

fn le16(values: &[u16]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn le32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `n` bf16 values that vary and are finite: small weights.
fn bf16_weights(n: usize, seed: u16) -> Vec<u16> {
    (0..n)
        .map(|i| 0x3c00 | ((i as u16).wrapping_mul(7919).wrapping_add(seed) & 0x3ff))
        .collect()
}

#[test]
fn named_for_scan_by_name() {
    for yes in [
        "model.safetensors",
        "a/b/Model-00001.SafeTensors",
        "x.gguf",
        "q/X.GGUF",
    ] {
        assert!(named_for_scan(yes), "{yes}");
    }
    for no in [
        "model.bin",
        "safetensors",
        "a.gguf/readme",
        "x.safetensors.json",
    ] {
        assert!(!named_for_scan(no), "{no}");
    }
}

/// The scan reads a file by what its name or first bytes say, as the model checks do (issue
/// 36 item 6): a GGUF or safetensors file under another name (`model.bin`, a bare blob name)
/// is scanned; a file named `.safetensors` holding GGUF is not read as GGUF (its check refuses
/// it), and a file that is neither gives no layout.
#[test]
fn the_layout_follows_the_format_dispatch_not_the_name_alone() {
    let nan_gguf = std::fs::read(fixtures().join("values/nan-f32.gguf")).unwrap();
    let nan_st = std::fs::read(fixtures().join("values/nan-f32.safetensors")).unwrap();
    let layout = |rel: &str, bytes: &[u8]| {
        let (_kept, file) = temp_file(bytes);
        Layout::of(rel, &file, bytes.len() as u64)
            .unwrap()
            .map(|l| l.format)
    };
    for rel in ["model.bin", "blobs/4d7a2146", "weights", "model.gguf"] {
        assert_eq!(layout(rel, &nan_gguf), Some("gguf"), "{rel}");
    }
    for rel in [
        "model.bin",
        "consolidated.pt",
        "weights",
        "model.safetensors",
    ] {
        assert_eq!(layout(rel, &nan_st), Some("safetensors"), "{rel}");
    }
    assert_eq!(layout("model.safetensors", &nan_gguf), None);
    assert_eq!(layout("model.gguf", &nan_st), None);
    assert_eq!(layout("model.bin", b"not a model at all, just text"), None);
}

#[test]
fn a_healthy_file_has_no_finding() {
    let bytes = st(&[
        ("a", "BF16", vec![4, 8], le16(&bf16_weights(32, 1))),
        ("b", "F32", vec![5], le32(&[0.5, -1.0, 2.0, 1e-3, 7.0])),
        ("ids", "I64", vec![3], vec![0; 24]),
    ]);
    let s = scan_in_pieces(&bytes, &[3, 1, 7]);
    assert_eq!(
        s.summary,
        Summary {
            format: "safetensors",
            tensors: 3,
            checked: 2,
            ..Summary::default()
        }
    );
    assert!(s.findings("m.safetensors").is_empty());
}

#[test]
fn nan_and_inf_in_every_float_dtype_are_counted_and_placed() {
    // (dtype, element size, a finite value, a NaN, +Inf, -Inf) as little-endian bit patterns.
    type Case<'a> = (&'a str, usize, u64, u64, Option<(u64, u64)>);
    let cases: &[Case] = &[
        (
            "F64",
            8,
            1.5f64.to_bits(),
            0x7ff8_0000_0000_0001,
            Some((0x7ff0_0000_0000_0000, 0xfff0_0000_0000_0000)),
        ),
        (
            "F32",
            4,
            u64::from(1.5f32.to_bits()),
            0xffc0_0000,
            Some((0x7f80_0000, 0xff80_0000)),
        ),
        ("F16", 2, 0x3e00, 0x7e00, Some((0x7c00, 0xfc00))),
        ("BF16", 2, 0x3fc0, 0xffc1, Some((0x7f80, 0xff80))),
        ("F8_E4M3", 1, 0x38, 0xff, None),
        ("F8_E5M2", 1, 0x3c, 0x7e, Some((0x7c, 0xfc))),
    ];
    for &(dtype, size, finite, nan, inf) in cases {
        let mut values = vec![finite; 40];
        for i in (0..40).step_by(3) {
            values[i] = finite ^ (i as u64 & 1); // vary, stay finite
        }
        values[5] = nan;
        values[17] = nan;
        if let Some((pos, neg)) = inf {
            values[9] = pos;
            values[30] = neg;
            values[31] = neg;
        }
        let data: Vec<u8> = values
            .iter()
            .flat_map(|v| v.to_le_bytes()[..size].to_vec())
            .collect();
        let bytes = st(&[("w", dtype, vec![40], data)]);
        let s = scan_in_pieces(&bytes, &[size + 1, 3]);
        assert_eq!(s.summary.nan, 2, "{dtype}");
        assert_eq!(s.nan_notes[0].first, 5, "{dtype}");
        let findings = s.findings("m.safetensors");
        let nan_finding = findings
            .iter()
            .find(|f| f.code == codes::TENSOR_NAN)
            .unwrap();
        assert_eq!(nan_finding.severity, Severity::Error);
        assert!(
            nan_finding.problem.contains(&format!(
                "2 NaN values in tensor `w` ({dtype} [40]), the first at element 5"
            )),
            "{}",
            nan_finding.problem
        );
        match inf {
            Some(_) => {
                assert_eq!(s.summary.inf, 3, "{dtype}");
                assert_eq!(s.inf_notes[0].first, 9, "{dtype}");
                let f = findings
                    .iter()
                    .find(|f| f.code == codes::TENSOR_INF)
                    .unwrap();
                assert!(f.problem.contains("(1 +Inf, 2 -Inf)"), "{}", f.problem);
            }
            None => assert_eq!(s.summary.inf, 0, "{dtype} has no infinity"),
        }
    }
}

#[test]
fn f8_e4m3_has_no_infinity_and_448_is_finite() {
    // 0x7e is 448, the largest E4M3 value; 0x7f and 0xff are its only NaNs.
    let bytes = st(&[("w", "F8_E4M3", vec![4], vec![0x7e, 0xfe, 0x7f, 0x01])]);
    let s = scan(&bytes);
    assert_eq!((s.summary.nan, s.summary.inf), (1, 0));
    assert_eq!(Float::E4m3.value(0x7e), 448.0);
}

#[test]
fn all_zero_and_constant_tensors_are_warnings() {
    let bytes = st(&[
        ("lm_head", "F32", vec![16], vec![0; 64]),
        ("proj", "BF16", vec![8], le16(&[0x3f80; 8])),
        ("neg_zero", "F16", vec![4], le16(&[0x8000; 4])),
        ("scalar", "F32", vec![], vec![0; 4]),
        ("w", "BF16", vec![64], le16(&bf16_weights(64, 3))),
        ("ids", "I32", vec![4], vec![0; 16]),
    ]);
    let s = scan(&bytes);
    assert_eq!(s.summary.zero_tensors, 1);
    assert_eq!(s.summary.constant_tensors, 2, "proj and the -0.0 tensor");
    let findings = s.findings("m.safetensors");
    let codes: Vec<&str> = findings.iter().map(|f| f.code).collect();
    assert_eq!(codes, [codes::TENSOR_ALL_ZERO, codes::TENSOR_CONSTANT]);
    assert!(findings.iter().all(|f| f.severity == Severity::Warning));
    assert!(
        findings[0]
            .problem
            .contains("tensor `lm_head` (F32 [16]) whose 16 values are all zero"),
        "{}",
        findings[0].problem
    );
    assert!(
        findings[1].problem.contains(
            "tensor `proj` (BF16 [8]) whose 8 values all equal 1.0, and 1 more constant tensor"
        ),
        "{}",
        findings[1].problem
    );
}

/// Issue 33 item 6. Before: zero biases and norm weights of one, which every initialised
/// model has (the demo's too), were `tensor-all-zero` and `tensor-constant` warnings on every
/// pack and check. Now they are counted and not findings; the same values under other names,
/// a norm at another value, and a zero norm weight still are.
#[test]
fn zero_biases_and_norm_weights_of_one_are_counted_not_warned() {
    let bytes = st(&[
        (
            "model.layers.0.self_attn.q_proj.bias",
            "F32",
            vec![4],
            vec![0; 16],
        ),
        (
            "model.layers.0.input_layernorm.weight",
            "BF16",
            vec![8],
            le16(&[0x3f80; 8]),
        ),
        ("model.norm.weight", "F16", vec![4], le16(&[0x3c00; 4])),
        (
            "blk.0.attn_norm.weight",
            "F32",
            vec![2],
            1f32.to_le_bytes().repeat(2),
        ),
        (
            "transformer.h.0.ln_1.weight",
            "F32",
            vec![2],
            1f32.to_le_bytes().repeat(2),
        ),
        ("ln_f.bias", "F32", vec![2], vec![0; 8]),
        (
            "bert.embeddings.LayerNorm.gamma",
            "F32",
            vec![2],
            1f32.to_le_bytes().repeat(2),
        ),
        ("bert.embeddings.LayerNorm.beta", "F32", vec![2], vec![0; 8]),
        ("w", "BF16", vec![64], le16(&bf16_weights(64, 3))),
    ]);
    let s = scan(&bytes);
    assert_eq!((s.summary.zero_tensors, s.benign_zero_tensors), (3, 3));
    assert_eq!(
        (s.summary.constant_tensors, s.benign_constant_tensors),
        (5, 5)
    );
    assert!(
        s.findings("m.safetensors").is_empty(),
        "{:#?}",
        s.findings("m.safetensors")
    );

    let bytes = st(&[
        (
            "model.layers.0.input_layernorm.weight",
            "F32",
            vec![2],
            2f32.to_le_bytes().repeat(2),
        ),
        ("model.norm.weight", "F32", vec![2], vec![0; 8]),
        (
            "model.layers.0.mlp.up_proj.weight",
            "F32",
            vec![2],
            1f32.to_le_bytes().repeat(2),
        ),
        ("lm_head.weight", "F32", vec![2], vec![0; 8]),
        ("model.bias.weight", "F32", vec![2], vec![0; 8]),
    ]);
    let s = scan(&bytes);
    let findings = s.findings("m.safetensors");
    let codes: Vec<&str> = findings.iter().map(|f| f.code).collect();
    assert_eq!(codes, [codes::TENSOR_ALL_ZERO, codes::TENSOR_CONSTANT]);
    assert!(
        findings[0].problem.contains("and 2 more all-zero tensors"),
        "{}",
        findings[0].problem
    );
    assert!(
        findings[1].problem.contains("and 1 more constant tensor"),
        "{}",
        findings[1].problem
    );
}

/// FORMAT.md section 20.1 (issue 36 item 9): "zero" and "one value" are bit patterns, not
/// float comparisons, so a reader that compares values and one that compares bits cannot
/// disagree on an honest record. -0.0 is not zero; 0.0 beside -0.0 is neither all zero nor
/// constant; an all-NaN tensor of one NaN pattern is constant (and each value counts as NaN),
/// of two patterns it is not constant.
#[test]
fn zero_and_constant_compare_bit_patterns_not_values() {
    let count = |dtype: &str, data: Vec<u8>, n: u64| {
        let s = scan(&st(&[("t", dtype, vec![n], data)])).summary;
        (s.nan, s.zero_tensors, s.constant_tensors)
    };
    // All -0.0: not zero (a bit is set), constant.
    assert_eq!(count("F32", le32(&[-0.0; 4]), 4), (0, 0, 1));
    // 0.0 and -0.0: equal as values, neither all zero nor constant.
    assert_eq!(count("F32", le32(&[0.0, -0.0, 0.0, 0.0]), 4), (0, 0, 0));
    assert_eq!(count("BF16", le16(&[0x0000, 0x8000]), 2), (0, 0, 0));
    // All NaN of one pattern: every value NaN, and one constant tensor.
    assert_eq!(count("F32", le32(&[f32::NAN; 3]), 3), (3, 0, 1));
    assert_eq!(count("F16", le16(&[0x7e00; 5]), 5), (5, 0, 1));
    // All NaN of two patterns (quiet, and with a payload): NaN, not constant.
    let payload = f32::from_bits(0x7fc0_0001);
    assert_eq!(count("F32", le32(&[f32::NAN, payload]), 2), (2, 0, 0));
    // One value is neither all zero nor constant, however it reads.
    assert_eq!(count("F32", le32(&[f32::NAN]), 1), (1, 0, 0));
    assert_eq!(count("F32", le32(&[0.0]), 1), (0, 0, 0));
}

#[test]
fn values_are_displayed_from_every_format() {
    assert_eq!(Float::F16.value(0x3c00), 1.0);
    assert_eq!(Float::F16.value(0xc000), -2.0);
    assert_eq!(Float::F16.value(0x0001), 2f64.powi(-24));
    assert!(Float::F16.value(0x7c00).is_infinite());
    assert!(Float::F16.value(0x7c01).is_nan());
    assert_eq!(Float::Bf16.value(0x3f80), 1.0);
    assert_eq!(Float::E5m2.value(0x3c), 1.0);
    assert_eq!(Float::E4m3.value(0x38), 1.0);
    assert_eq!(Float::E4m3.value(0x01), 2f64.powi(-9));
}

/// A run of zeros `len` bytes long starting `at` bytes into a layout of bf16 tensors of the
/// given byte sizes (every other byte nonzero).
fn zeroed(sizes: &[usize], at: usize, len: usize) -> Vec<u8> {
    let mut tensors = Vec::new();
    let mut data = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let mut d = le16(&bf16_weights(size / 2, i as u16 * 31));
        d.resize(size, 0x11);
        data.push(d);
    }
    let mut flat: Vec<u8> = data.concat();
    flat[at..at + len].fill(0);
    let mut at = 0;
    for (i, &size) in sizes.iter().enumerate() {
        tensors.push((
            format!("t{i}"),
            "BF16",
            vec![(size / 2) as u64],
            flat[at..at + size].to_vec(),
        ));
        at += size;
    }
    let borrowed: Vec<(&str, &str, Vec<u64>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.clone(), b.clone()))
        .collect();
    st(&borrowed)
}

const MIB: usize = 1 << 20;

#[test]
fn a_zero_region_across_a_boundary_is_an_error() {
    // Zeros from the middle of t0 through t1 into t2: a preallocated file never written.
    let bytes = zeroed(&[MIB, MIB, MIB], MIB / 2, 2 * MIB);
    let s = scan_in_pieces(&bytes, &[65536, 4095]);
    assert_eq!(s.summary.zero_regions, 1);
    assert_eq!(s.summary.zero_tensors, 1, "t1 is all zero too");
    let r = &s.regions[0];
    assert_eq!(
        (
            r.first_tensor.as_str(),
            r.last_tensor.as_str(),
            r.boundaries
        ),
        ("t0", "t2", 2)
    );
    assert_eq!(r.first_element, (MIB / 2 / 2) as u64);
    assert_eq!(r.end - r.start, 2 * MIB as u64);
    let f = s
        .findings("m.safetensors")
        .into_iter()
        .find(|f| f.code == codes::TENSOR_ZERO_REGION)
        .unwrap();
    assert_eq!(f.severity, Severity::Error);
    assert!(
        f.problem
            .contains("across 2 tensor boundaries from tensor `t0`"),
        "{}",
        f.problem
    );
}

#[test]
fn zeros_that_end_at_a_boundary_or_barely_cross_it_are_not_a_region() {
    // 2 MiB of zeros at the end of t0 (untrained embedding rows), t1 starts with data.
    let bytes = zeroed(&[3 * MIB, MIB], MIB, 2 * MIB);
    assert_eq!(scan(&bytes).summary.zero_regions, 0);
    // The same, with t1's first 4 KiB - 1 byte zero too (under the edge on that side).
    let bytes = zeroed(&[3 * MIB, MIB], MIB, 2 * MIB + 4095);
    assert_eq!(scan(&bytes).summary.zero_regions, 0);
    // 4 KiB on t1's side: a region.
    let bytes = zeroed(&[3 * MIB, MIB], MIB, 2 * MIB + 4096);
    assert_eq!(scan(&bytes).summary.zero_regions, 1);
    // Under 1 MiB across a boundary (two zero biases side by side): no region.
    let bytes = zeroed(&[MIB, 256 << 10, 256 << 10, MIB], MIB, 512 << 10);
    let s = scan(&bytes);
    assert_eq!(s.summary.zero_regions, 0);
    assert_eq!(s.summary.zero_tensors, 2);
}

#[test]
fn zeros_to_the_end_of_the_data_across_a_small_last_tensor_are_a_region() {
    // t1 is 2 KiB, under the edge, but the zeros run from t0 to the end of the data.
    let bytes = zeroed(&[2 * MIB, 2048], MIB, MIB + 2048);
    let s = scan(&bytes);
    assert_eq!(s.summary.zero_regions, 1);
    // Zeros to the end inside the last tensor only: no boundary, no region.
    let bytes = zeroed(&[MIB, 2 * MIB], MIB + 1000, MIB);
    assert_eq!(scan(&bytes).summary.zero_regions, 0);
}

#[test]
fn a_header_that_fails_the_model_checks_has_no_layout() {
    assert!(layout_of(b"not a model at all").is_none());
    let mut bytes = st(&[("a", "F32", vec![2], vec![0; 8])]);
    bytes.push(0);
    assert!(layout_of(&bytes).is_none(), "trailing bytes");
    let mut gguf = Writer::new(false);
    gguf.tensor("a", &[8], 0, 32);
    let mut b = gguf.bytes();
    b.truncate(b.len() - 1);
    assert!(layout_of(&b).is_none(), "truncated GGUF");
}

#[test]
fn gguf_floats_and_block_scales_in_both_byte_orders() {
    for big in [false, true] {
        let half = |v: u16| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut w = Writer::new(big);
        w.tensor("norm", &[8], 1, 16) // F16
            .tensor("q", &[64, 2], 2, 4 * 18) // Q4_0: 4 blocks
            .tensor("k", &[256], 12, 144) // Q4_K: 1 block, d and dmin
            .tensor("ids", &[4], 26, 16); // I32
        // F16 tensor: 1.0 everywhere but a NaN at element 3.
        for i in 0..8 {
            w.data[i * 2..i * 2 + 2].copy_from_slice(&half(if i == 3 { 0x7e00 } else { 0x3c00 }));
        }
        // Q4_0 at offset 32: block 2's d is -Inf.
        for b in 0..4 {
            let d = if b == 2 { 0xfc00 } else { 0x2000 + b as u16 };
            w.data[32 + b * 18..32 + b * 18 + 2].copy_from_slice(&half(d));
        }
        // Q4_K at offset 32 + 96 = 128: dmin is NaN.
        w.data[128..130].copy_from_slice(&half(0x3000));
        w.data[130..132].copy_from_slice(&half(0x7d00));
        let bytes = w.bytes();
        let s = scan_in_pieces(&bytes, &[5, 64]);
        assert_eq!(s.summary.format, "gguf");
        assert_eq!((s.summary.tensors, s.summary.checked), (4, 3));
        assert_eq!(s.nan_notes[0].tensor, "norm");
        assert_eq!(s.nan_notes[0].first, 3);
        if big {
            // Block scales are not checked in a big-endian file (their order is unknown).
            assert_eq!((s.summary.nan, s.summary.inf), (1, 0));
            continue;
        }
        assert_eq!((s.summary.nan, s.summary.inf), (2, 1));
        assert_eq!(s.nan_notes[1].tensor, "k");
        assert_eq!(s.nan_notes[1].scales.as_deref(), Some("d/dmin"));
        assert_eq!(s.inf_notes[0].first, 64, "block 2 starts at element 64");
        let findings = s.findings("m.gguf");
        let inf = findings
            .iter()
            .find(|f| f.code == codes::TENSOR_INF)
            .unwrap();
        assert!(
            inf.problem
                .contains("1 block whose scale (d) is infinite (0 +Inf, 1 -Inf) in tensor `q` (Q4_0 [64, 2]), the first at element 64"),
            "{}",
            inf.problem
        );
    }
}

#[test]
fn the_block_table_agrees_with_the_gguf_type_table() {
    for id in 0..gguf::GGML_TYPE_COUNT {
        let Ok((name, block, size)) = gguf::ggml_type(id) else {
            continue;
        };
        match gguf_kind(id) {
            Kind::Blocks(b) => {
                assert_eq!((b.bytes as u64, b.elements), (size, block), "{name}");
                for &(scale, _) in b.scales {
                    let end = match scale {
                        Scale::F16(at) => at + 2,
                        Scale::F32(at) => at + 4,
                        Scale::E8m0(at) => at + 1,
                    };
                    assert!(end <= b.bytes, "{name}");
                }
            }
            Kind::Float(f) => assert_eq!((f.size() as u64, block), (size, 1), "{name}"),
            Kind::Bytes => {}
        }
    }
}

#[test]
fn the_valid_fixtures_scan_clean_but_for_the_norms() {
    let valid = fixtures().join("valid");
    for name in ["small.safetensors", "model.gguf", "model-big-endian.gguf"] {
        let bytes = std::fs::read(valid.join(name)).unwrap();
        let s = scan_in_pieces(&bytes, &[4096, 17]);
        assert_eq!(
            (s.summary.nan, s.summary.inf, s.summary.zero_regions),
            (0, 0, 0),
            "{name}: {s:#?}"
        );
        // Each has a norm of ones.
        assert_eq!(s.summary.constant_tensors, 1, "{name}");
    }
}

#[test]
fn an_early_end_is_no_result() {
    let bytes = st(&[("a", "F32", vec![4], le32(&[1.0, 2.0, 3.0, 4.0]))]);
    let mut scanner = Scanner::new(layout_of(&bytes).unwrap());
    scanner.update(&bytes[..bytes.len() - 1]);
    assert!(scanner.finish().is_none());
}

#[test]
fn notes_are_capped_and_counts_are_not() {
    let tensors: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("t{i:02}"), le32(&[f32::NAN, 1.0])))
        .collect();
    let spec: Vec<(&str, &str, Vec<u64>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d)| (n.as_str(), "F32", vec![2], d.clone()))
        .collect();
    let s = scan(&st(&spec));
    assert_eq!((s.summary.nan, s.nan_tensors), (20, 20));
    assert_eq!(s.nan_notes.len(), NOTES_PER_CODE);
    let f = &s.findings("m.safetensors")[0];
    assert!(
        f.problem
            .contains(", and 19 more tensors with NaN (20 NaN in all)"),
        "{}",
        f.problem
    );
}

const DTYPES: &[&str] = &[
    "F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I32", "U8", "BOOL",
];

fn dtype_size(d: &str) -> usize {
    match d {
        "F64" => 8,
        "F32" | "I32" => 4,
        "F16" | "BF16" => 2,
        _ => 1,
    }
}

/// A tensor for the property test: a dtype, an element count and how its bytes are made.
fn tensor_strategy() -> impl Strategy<Value = (usize, usize, u8, Vec<(usize, u8)>)> {
    (
        0..DTYPES.len(),
        0usize..200,
        0u8..4,
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any file, any pieces: the streaming scan equals the reference.
    #[test]
    fn the_scanner_agrees_with_the_reference_in_any_pieces(
        specs in prop::collection::vec(tensor_strategy(), 1..6),
        pieces in prop::collection::vec(1usize..300, 1..5),
        seed in any::<u64>(),
    ) {
        let mut state = seed | 1;
        let mut rand = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let names: Vec<String> = (0..specs.len()).map(|i| format!("t{i}")).collect();
        let mut tensors = Vec::new();
        for (i, (d, count, fill, pokes)) in specs.iter().enumerate() {
            let dtype = DTYPES[*d];
            let size = dtype_size(dtype);
            let mut data: Vec<u8> = match fill {
                0 => vec![0; count * size],
                1 => { let v = rand() as u8; vec![v | 1; count * size] }
                _ => (0..count * size).map(|_| rand() as u8).collect(),
            };
            // Special bytes poked in: high bytes of all ones make NaN and Inf in most formats.
            for (at, b) in pokes {
                if !data.is_empty() {
                    let at = at % data.len();
                    data[at] = if b % 2 == 0 { 0xff } else { *b };
                }
            }
            tensors.push((names[i].as_str(), dtype, vec![*count as u64], data));
        }
        scan_in_pieces(&st(&tensors), &pieces);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Large zero runs placed anywhere, in any pieces: regions agree with the reference.
    #[test]
    fn zero_regions_agree_with_the_reference(
        sizes in prop::collection::vec(1usize..(3 * MIB / 2), 2..5),
        at in any::<usize>(),
        len in (MIB - 8192)..(3 * MIB),
        piece in 1000usize..300_000,
    ) {
        let sizes: Vec<usize> = sizes.iter().map(|s| s / 2 * 2 + 2).collect();
        let total: usize = sizes.iter().sum();
        let len = len.min(total);
        let at = at % (total - len + 1);
        scan_in_pieces(&zeroed(&sizes, at, len), &[piece]);
    }
}

/// Every value fixture gets exactly its findings, from files the real writers made.
#[test]
fn the_value_fixtures_get_their_findings() {
    use codes::*;
    let dir = fixtures().join("values");
    let cases: &[(&str, &[&str])] = &[
        // Zero biases and norms of one only: counted, not findings.
        ("healthy/model.safetensors", &[]),
        ("healthy/model.gguf", &[]),
        // Its norm of one is benign; its all-zero lm_head is not.
        ("untrained.safetensors", &[TENSOR_ALL_ZERO]),
        ("nan-f64.safetensors", &[TENSOR_NAN]),
        ("nan-f32.safetensors", &[TENSOR_NAN]),
        ("nan-f16.safetensors", &[TENSOR_NAN]),
        ("nan-bf16.safetensors", &[TENSOR_NAN]),
        ("nan-f8_e4m3.safetensors", &[TENSOR_NAN]),
        ("nan-f8_e5m2.safetensors", &[TENSOR_NAN]),
        ("inf-f64.safetensors", &[TENSOR_INF]),
        ("inf-f32.safetensors", &[TENSOR_INF]),
        ("inf-f16.safetensors", &[TENSOR_INF]),
        ("inf-bf16.safetensors", &[TENSOR_INF]),
        ("inf-f8_e5m2.safetensors", &[TENSOR_INF]),
        ("nan-f32.gguf", &[TENSOR_NAN]),
        ("nan-f16.gguf", &[TENSOR_NAN]),
        ("nan-bf16.gguf", &[TENSOR_NAN]),
        ("inf-f32.gguf", &[TENSOR_INF]),
        ("nan-scale-q8_0.gguf", &[TENSOR_NAN]),
        ("inf-scale-q4_k.gguf", &[TENSOR_INF]),
        (
            "zero-region.safetensors",
            &[TENSOR_ZERO_REGION, TENSOR_ALL_ZERO],
        ),
        ("zero-region-i32.safetensors", &[TENSOR_ZERO_REGION]),
        ("zero-region.gguf", &[TENSOR_ZERO_REGION, TENSOR_ALL_ZERO]),
    ];
    let mut seen = Vec::new();
    for (name, want) in cases {
        let path = dir.join(name);
        let file = File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        let s = scan_file(name, &file, len, &|_| {}).unwrap().expect(name);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            s,
            reference::scan(&Layout::read(&file, len).unwrap().unwrap(), &bytes),
            "{name}"
        );
        let findings = s.findings(name);
        let got: Vec<&str> = findings.iter().map(|f| f.code).collect();
        assert_eq!(&got, want, "{name}: {findings:#?}");
        for f in &findings {
            let expected = if f.code == TENSOR_ALL_ZERO || f.code == TENSOR_CONSTANT {
                Severity::Warning
            } else {
                Severity::Error
            };
            assert_eq!(f.severity, expected, "{name}");
        }
        if name.starts_with("nan-") && !name.contains("scale") {
            assert_eq!((s.summary.nan, s.nan_notes[0].first), (2, 37), "{name}");
        }
        if name.starts_with("inf-") && !name.contains("scale") {
            assert_eq!(
                s.inf_notes[0].detail.as_deref(),
                Some("1 +Inf, 1 -Inf"),
                "{name}"
            );
            assert_eq!(s.inf_notes[0].first, 11, "{name}");
        }
        seen.push(*name);
    }
    assert_eq!(
        s_first(&dir, "nan-scale-q8_0.gguf"),
        (1, 96),
        "block 3 of Q8_0 starts at element 96"
    );
    assert_eq!(s_first(&dir, "inf-scale-q4_k.gguf"), (0, 256));
    // Every file of the folder is in the table.
    let mut all: Vec<String> = walkdir::WalkDir::new(&dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    all.sort();
    let mut listed: Vec<String> = seen.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(all, listed);
}

/// (NaN count, first element of the first bad tensor) of a fixture's scan, NaN or else Inf.
fn s_first(dir: &std::path::Path, name: &str) -> (u64, u64) {
    let file = File::open(dir.join(name)).unwrap();
    let len = file.metadata().unwrap().len();
    let s = scan_file("", &file, len, &|_| {}).unwrap().unwrap();
    match s.nan_notes.first() {
        Some(n) => (s.summary.nan, n.first),
        None => (s.summary.nan, s.inf_notes[0].first),
    }
}
