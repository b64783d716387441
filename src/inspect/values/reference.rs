//! The value scan done the slow, obvious way, as the oracle of the unit tests and the fuzz
//! target: the whole file in memory, every value decoded to an `f64` and asked `is_nan()`,
//! every run of zero bytes measured and held to the definition. It shares no code with the
//! streaming scanner but the layout and the note formats.

use super::{
    FileScan, Float, Kind, Layout, NOTES_PER_CODE, Note, Region, Scale, Summary, ZERO_REGION_EDGE,
    ZERO_REGION_MIN, minifloat,
};

fn load(bytes: &[u8], be: bool) -> u64 {
    let mut v = 0u64;
    if be {
        for &b in bytes {
            v = v << 8 | u64::from(b);
        }
    } else {
        for &b in bytes.iter().rev() {
            v = v << 8 | u64::from(b);
        }
    }
    v
}

fn scale_value(scale: Scale, block: &[u8], be: bool) -> (f64, usize) {
    match scale {
        Scale::F16(at) => (minifloat(load(&block[at..at + 2], be), 5, 10, true), at),
        Scale::F32(at) => (
            f64::from(f32::from_bits(load(&block[at..at + 4], be) as u32)),
            at,
        ),
        Scale::E8m0(at) => (
            if block[at] == 0xff {
                f64::NAN
            } else {
                2f64.powi(i32::from(block[at]) - 127)
            },
            at,
        ),
    }
}

/// Scans `file`, all of it in memory, laid out as `layout`.
pub fn scan(layout: &Layout, file: &[u8]) -> FileScan {
    let be = layout.big_endian;
    let mut out = FileScan {
        summary: Summary {
            format: layout.format,
            ..Summary::default()
        },
        ..FileScan::default()
    };
    for t in &layout.tensors {
        out.summary.tensors += 1;
        let bytes = &file[t.begin as usize..t.end as usize];
        let (unit, per_unit) = match t.kind {
            Kind::Bytes => continue,
            Kind::Float(f) => (f.size(), 1),
            Kind::Blocks(b) => (b.bytes, b.elements),
        };
        out.summary.checked += 1;
        let (mut nan, mut first_nan, mut pos, mut neg, mut first_inf) = (0u64, 0, 0, 0, 0);
        for (i, u) in bytes.chunks(unit).enumerate() {
            let values: Vec<f64> = match t.kind {
                Kind::Float(f) => vec![f.value(load(u, be))],
                Kind::Blocks(b) => b
                    .scales
                    .iter()
                    .map(|&(s, _)| scale_value(s, u, be).0)
                    .collect(),
                Kind::Bytes => unreachable!(),
            };
            for v in values {
                if v.is_nan() {
                    if nan == 0 {
                        first_nan = i as u64;
                    }
                    nan += 1;
                } else if v.is_infinite() {
                    if pos + neg == 0 {
                        first_inf = i as u64;
                    }
                    if v < 0.0 {
                        neg += 1;
                    } else {
                        pos += 1;
                    }
                }
            }
        }
        let note = |count: u64, first: u64, detail: Option<String>| Note {
            tensor: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            count,
            first: first * per_unit,
            scales: match t.kind {
                Kind::Blocks(b) => Some(
                    b.scales
                        .iter()
                        .map(|(_, n)| *n)
                        .collect::<Vec<_>>()
                        .join("/"),
                ),
                _ => None,
            },
            detail,
        };
        if nan > 0 {
            out.summary.nan += nan;
            out.nan_tensors += 1;
            if out.nan_notes.len() < NOTES_PER_CODE {
                out.nan_notes.push(note(nan, first_nan, None));
            }
        }
        if pos + neg > 0 {
            out.summary.inf += pos + neg;
            out.inf_tensors += 1;
            if out.inf_notes.len() < NOTES_PER_CODE {
                out.inf_notes.push(note(
                    pos + neg,
                    first_inf,
                    Some(format!("{pos} +Inf, {neg} -Inf")),
                ));
            }
        }
        let elements = (bytes.len() / unit) as u64 * per_unit;
        if elements < 2 {
            continue;
        }
        if bytes.iter().all(|&b| b == 0) {
            out.summary.zero_tensors += 1;
            if super::benign_zero(&t.name) {
                out.benign_zero_tensors += 1;
            } else if out.zero_notes.len() < NOTES_PER_CODE {
                out.zero_notes.push(note(elements, 0, None));
            }
        } else if let Kind::Float(f) = t.kind
            && bytes.chunks(unit).all(|u| u == &bytes[..unit])
        {
            out.summary.constant_tensors += 1;
            let value: f64 = Float::value(f, load(&bytes[..unit], be));
            if super::benign_constant(&t.name, value) {
                out.benign_constant_tensors += 1;
            } else if out.constant_notes.len() < NOTES_PER_CODE {
                out.constant_notes
                    .push(note(elements, 0, Some(format!("{value:?}"))));
            }
        }
    }
    // Every maximal run of zero bytes in the tensor data, held to the definition.
    let (start, end) = (layout.data_start as usize, layout.data_end as usize);
    let boundaries: Vec<u64> = layout
        .tensors
        .iter()
        .filter(|t| t.end > t.begin)
        .map(|t| t.begin)
        .collect();
    let mut i = start;
    while i < end {
        if file[i] != 0 {
            i += 1;
            continue;
        }
        let s = i;
        while i < end && file[i] == 0 {
            i += 1;
        }
        let (s, e) = (s as u64, i as u64);
        let inside: Vec<u64> = boundaries
            .iter()
            .copied()
            .filter(|&b| b > s && b < e)
            .collect();
        let region = e - s >= ZERO_REGION_MIN
            && (inside
                .iter()
                .any(|&b| b - s >= ZERO_REGION_EDGE && e - b >= ZERO_REGION_EDGE)
                || (e == layout.data_end && !inside.is_empty()));
        if region {
            out.summary.zero_regions += 1;
            if out.regions.len() < NOTES_PER_CODE {
                out.regions
                    .push(describe(layout, s, e, inside.len() as u64));
            }
        }
    }
    out
}

fn describe(layout: &Layout, start: u64, end: u64, boundaries: u64) -> Region {
    let tensors = &layout.tensors;
    let first = tensors.iter().position(|t| t.end > start);
    let last = tensors.iter().rposition(|t| t.begin < end);
    let name = |i: Option<usize>| i.map(|i| tensors[i].name.clone()).unwrap_or_default();
    let first_element = first.map_or(0, |i| {
        let t = &tensors[i];
        let (unit, per_unit) = match t.kind {
            Kind::Blocks(b) => (b.bytes as u64, b.elements),
            Kind::Float(f) => (f.size() as u64, 1),
            Kind::Bytes => (1, 1),
        };
        start.saturating_sub(t.begin) / unit * per_unit
    });
    Region {
        start,
        end,
        first_tensor: name(first),
        first_element,
        last_tensor: name(last),
        boundaries,
    }
}
