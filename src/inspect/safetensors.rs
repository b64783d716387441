//! safetensors: the reference reader's validation, from the header alone.
//!
//! A safetensors file is a u64 little-endian header length N, N bytes of UTF-8 JSON, then the
//! data buffer. The reference reader (`SafeTensors::read_metadata` in the safetensors crate,
//! which the Python package calls too) refuses a file for exactly these reasons, checked in
//! this order; each becomes one finding code so the user can match it to the error a loader
//! would print:
//!
//! 1. under 8 bytes: `HeaderTooSmall`;
//! 2. N > 100,000,000: `HeaderTooLarge` (a Git LFS pointer or an HTML page lands here);
//! 3. 8 + N past the end of the file: `InvalidHeaderLength`;
//! 4. the header is not UTF-8: `InvalidHeader`;
//! 5. the header is not the expected JSON: `InvalidHeaderDeserialization` (a zero-filled,
//!    preallocated file reads N = 0 and lands here too);
//! 6. tensors sorted by data offsets must start at 0 and be contiguous: `InvalidOffset`;
//! 7. element count × dtype bits overflows: `ValidationOverflow`; a sub-byte dtype tensor
//!    must fill whole bytes: `MisalignedSlice`; byte length = dtype size × product(shape):
//!    `TensorInvalidInfo`;
//! 8. 8 + N + the end of the last tensor must equal the file length:
//!    `MetadataIncompleteBuffer`, reported as "truncated by X bytes" or "X trailing bytes".
//!
//! Like the reference, the check stops at the first refusal. Only the header is read; the
//! header itself is at most 100 MB by rule 2 and is read only after rule 3 proved it fits in
//! the file.

use std::fs::File;
use std::io;

use serde_json::Value;

use super::read::{self, describe_start, human_size};
use super::{Finding, codes};

/// The reference reader's limit on N.
pub(crate) const MAX_HEADER_SIZE: u64 = 100_000_000;

/// Every dtype the reference reader knows, with its size in bits.
const DTYPES: &[(&str, u64)] = &[
    ("BOOL", 8),
    ("F4", 4),
    ("F6_E2M3", 6),
    ("F6_E3M2", 6),
    ("U8", 8),
    ("I8", 8),
    ("F8_E5M2", 8),
    ("F8_E4M3", 8),
    ("F8_E8M0", 8),
    ("F8_E4M3FNUZ", 8),
    ("F8_E5M2FNUZ", 8),
    ("I16", 16),
    ("U16", 16),
    ("F16", 16),
    ("BF16", 16),
    ("I32", 32),
    ("U32", 32),
    ("F32", 32),
    ("C64", 64),
    ("F64", 64),
    ("I64", 64),
    ("U64", 64),
];

fn dtype_bits(name: &str) -> Option<(&'static str, u64)> {
    DTYPES.iter().find(|(n, _)| *n == name).copied()
}

/// One tensor of a valid header.
#[derive(Debug, Clone)]
pub(crate) struct TensorInfo {
    pub name: String,
    pub begin: u64,
    pub end: u64,
}

/// A header the reference reader accepts.
#[derive(Debug)]
pub(crate) struct Header {
    /// Tensors sorted by data offsets.
    pub tensors: Vec<TensorInfo>,
}

/// Why the reference reader would refuse the file.
#[derive(Debug)]
pub(crate) enum Invalid {
    TooSmall {
        file_len: u64,
    },
    TooLarge {
        n: u64,
        start: Vec<u8>,
    },
    HeaderPastEnd {
        n: u64,
        file_len: u64,
    },
    NotUtf8 {
        at: usize,
    },
    Json {
        detail: String,
    },
    ZeroFilled {
        zeros: u64,
    },
    Offset {
        name: String,
        begin: u64,
        end: u64,
        expected: u64,
    },
    Overflow {
        name: String,
    },
    Misaligned {
        name: String,
        bits: u64,
    },
    SizeMismatch {
        name: String,
        dtype: &'static str,
        shape: Vec<u64>,
        expected: u64,
        actual: u64,
    },
    Incomplete {
        expected: u64,
        file_len: u64,
    },
}

/// Reads and validates the header the way the reference reader does.
pub(crate) fn read_header(file: &File, file_len: u64) -> io::Result<Result<Header, Invalid>> {
    if file_len < 8 {
        return Ok(Err(Invalid::TooSmall { file_len }));
    }
    let mut len_bytes = [0u8; 8];
    if read::read_at(file, 0, &mut len_bytes)? < 8 {
        return Ok(Err(Invalid::TooSmall { file_len }));
    }
    let n = u64::from_le_bytes(len_bytes);
    if n > MAX_HEADER_SIZE {
        let start = read::read_prefix(file, file_len, 64)?;
        return Ok(Err(Invalid::TooLarge { n, start }));
    }
    if 8 + n > file_len {
        return Ok(Err(Invalid::HeaderPastEnd { n, file_len }));
    }
    // n <= 100,000,000 and fits in the file: safe to allocate.
    let mut header = vec![0u8; n as usize];
    if read::read_at(file, 8, &mut header)? < header.len() {
        return Ok(Err(Invalid::HeaderPastEnd { n, file_len }));
    }
    if n == 0 {
        // A preallocated file never written: the reference says InvalidHeaderDeserialization
        // (an empty or NUL-filled string is not JSON); we say why.
        let sample = read::read_prefix(file, file_len, 64 * 1024)?;
        if sample.iter().all(|&b| b == 0) {
            return Ok(Err(Invalid::ZeroFilled {
                zeros: sample.len() as u64,
            }));
        }
    }
    let text = match std::str::from_utf8(&header) {
        Ok(t) => t,
        Err(e) => {
            return Ok(Err(Invalid::NotUtf8 {
                at: e.valid_up_to(),
            }));
        }
    };
    let tensors = match parse_json(text) {
        Ok(t) => t,
        Err(detail) => return Ok(Err(Invalid::Json { detail })),
    };
    Ok(validate(tensors, n, file_len))
}

/// A tensor entry as the header states it.
struct Entry {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
    begin: u64,
    end: u64,
}

/// The header's JSON shape, as the reference's serde types accept it: an object whose
/// `__metadata__` is null or a string→string map, and whose other members are objects with
/// `dtype` (a known dtype name), `shape` (array of non-negative integers) and `data_offsets`
/// (array of exactly two non-negative integers). Other members of a tensor object are ignored,
/// as serde ignores unknown fields.
fn parse_json(text: &str) -> Result<Vec<Entry>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Value::Object(map) = value else {
        return Err("the header is not a JSON object".to_string());
    };
    let mut entries = Vec::new();
    for (name, value) in map {
        if name == "__metadata__" {
            match value {
                Value::Null => {}
                Value::Object(meta) => {
                    if let Some((k, _)) = meta.iter().find(|(_, v)| !v.is_string()) {
                        return Err(format!("`__metadata__` value of `{k}` is not a string"));
                    }
                }
                _ => return Err("`__metadata__` is not an object of strings".to_string()),
            }
            continue;
        }
        let Value::Object(info) = value else {
            return Err(format!("entry `{name}` is not an object"));
        };
        let dtype = match info.get("dtype") {
            Some(Value::String(s)) => match dtype_bits(s) {
                Some((d, _)) => d,
                None => return Err(format!("tensor `{name}` has unknown dtype `{s}`")),
            },
            Some(_) => return Err(format!("tensor `{name}` has a dtype that is not a string")),
            None => return Err(format!("tensor `{name}` has no `dtype`")),
        };
        let shape = match info.get("shape") {
            Some(Value::Array(dims)) => dims
                .iter()
                .map(Value::as_u64)
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| {
                    format!("tensor `{name}` has a shape that is not non-negative integers")
                })?,
            Some(_) => return Err(format!("tensor `{name}` has a shape that is not an array")),
            None => return Err(format!("tensor `{name}` has no `shape`")),
        };
        let (begin, end) = match info.get("data_offsets") {
            Some(Value::Array(offsets)) => match offsets.as_slice() {
                [b, e] => match (b.as_u64(), e.as_u64()) {
                    (Some(b), Some(e)) => (b, e),
                    _ => {
                        return Err(format!(
                            "tensor `{name}` has data_offsets that are not non-negative integers"
                        ));
                    }
                },
                _ => {
                    return Err(format!(
                        "tensor `{name}` has {} data_offsets, not 2",
                        offsets.len()
                    ));
                }
            },
            Some(_) => {
                return Err(format!(
                    "tensor `{name}` has data_offsets that are not an array"
                ));
            }
            None => return Err(format!("tensor `{name}` has no `data_offsets`")),
        };
        entries.push(Entry {
            name,
            dtype,
            shape,
            begin,
            end,
        });
    }
    Ok(entries)
}

/// `Metadata::validate` and the final length comparison of `read_metadata`.
fn validate(mut entries: Vec<Entry>, n: u64, file_len: u64) -> Result<Header, Invalid> {
    // The reference sorts by offsets only (ties in hash order); the name makes it deterministic.
    entries.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    let mut start = 0u64;
    for e in &entries {
        if e.begin != start || e.end < e.begin {
            return Err(Invalid::Offset {
                name: e.name.clone(),
                begin: e.begin,
                end: e.end,
                expected: start,
            });
        }
        start = e.end;
        let bits = dtype_bits(e.dtype).map_or(8, |(_, b)| b);
        let Some(nbits) = e
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|count| count.checked_mul(bits))
        else {
            return Err(Invalid::Overflow {
                name: e.name.clone(),
            });
        };
        if nbits % 8 != 0 {
            return Err(Invalid::Misaligned {
                name: e.name.clone(),
                bits: nbits,
            });
        }
        if e.end - e.begin != nbits / 8 {
            return Err(Invalid::SizeMismatch {
                name: e.name.clone(),
                dtype: e.dtype,
                shape: e.shape.clone(),
                expected: nbits / 8,
                actual: e.end - e.begin,
            });
        }
    }
    let expected = start.saturating_add(8).saturating_add(n);
    if expected != file_len {
        return Err(Invalid::Incomplete { expected, file_len });
    }
    Ok(Header {
        tensors: entries
            .into_iter()
            .map(|e| TensorInfo {
                name: e.name,
                begin: e.begin,
                end: e.end,
            })
            .collect(),
    })
}

const FIX_REDOWNLOAD: &str = "download or copy the file again and compare its size with the source; \
     a loader will refuse it as it is";

/// Turns a refusal into a finding in the reference reader's words.
pub(crate) fn finding(rel: &str, invalid: &Invalid) -> Finding {
    let error = |code, problem: String, fix: &str| Finding::error(code, rel, problem, fix);
    match invalid {
        Invalid::TooSmall { file_len } => error(
            codes::SAFETENSORS_HEADER_TOO_SMALL,
            format!(
                "is {file_len} bytes long, shorter than the 8-byte header length that starts \
                 every safetensors file (safetensors: HeaderTooSmall)"
            ),
            FIX_REDOWNLOAD,
        ),
        Invalid::TooLarge { n, start } => error(
            codes::SAFETENSORS_HEADER_TOO_LARGE,
            format!(
                "declares a {n}-byte JSON header, over the 100,000,000-byte limit, and {} \
                 (safetensors: HeaderTooLarge)",
                describe_start(start)
            ),
            "this is not a safetensors file (often an HTML error page or a Git LFS pointer \
             saved under the weight file's name); download the real file again",
        ),
        Invalid::HeaderPastEnd { n, file_len } => error(
            codes::SAFETENSORS_HEADER_TRUNCATED,
            format!(
                "declares a {n}-byte header but only {} follow the length field: \
                 truncated inside the header, at least {} missing \
                 (safetensors: InvalidHeaderLength)",
                human_size(file_len - 8),
                human_size(8 + n - file_len)
            ),
            FIX_REDOWNLOAD,
        ),
        Invalid::NotUtf8 { at } => error(
            codes::SAFETENSORS_HEADER_NOT_UTF8,
            format!(
                "has a header that is not valid UTF-8 (bad byte at header offset {at}) \
                 (safetensors: InvalidHeader)"
            ),
            FIX_REDOWNLOAD,
        ),
        Invalid::Json { detail } => error(
            codes::SAFETENSORS_HEADER_INVALID,
            format!(
                "has a header that is not a valid safetensors JSON header: {detail} \
                 (safetensors: InvalidHeaderDeserialization)"
            ),
            "the file is damaged or was not written by safetensors; download it again or \
             re-export it with safetensors",
        ),
        Invalid::ZeroFilled { zeros } => error(
            codes::SAFETENSORS_ZERO_FILLED,
            format!(
                "starts with {zeros} zero bytes, header length 0: a preallocated file the \
                 download never filled (safetensors: InvalidHeaderDeserialization)"
            ),
            "download the file again (an interrupted parallel download leaves files like \
             this), then pack again",
        ),
        Invalid::Offset {
            name,
            begin,
            end,
            expected,
        } => error(
            codes::SAFETENSORS_INVALID_OFFSET,
            format!(
                "has tensor `{name}` at data_offsets [{begin}, {end}] where, sorted by offset, \
                 it should start at {expected} (offsets must start at 0 and be contiguous) \
                 (safetensors: InvalidOffset(\"{name}\"))"
            ),
            "the header is damaged; re-export the model with safetensors",
        ),
        Invalid::Overflow { name } => error(
            codes::SAFETENSORS_SIZE_OVERFLOW,
            format!(
                "has tensor `{name}` whose shape × dtype size overflows 64 bits \
                 (safetensors: ValidationOverflow)"
            ),
            "the header is damaged; re-export the model with safetensors",
        ),
        Invalid::Misaligned { name, bits } => error(
            codes::SAFETENSORS_MISALIGNED_SUBBYTE,
            format!(
                "has sub-byte tensor `{name}` of {bits} bits, which does not fill whole bytes \
                 (safetensors: MisalignedSlice)"
            ),
            "the header is damaged; re-export the model with safetensors",
        ),
        Invalid::SizeMismatch {
            name,
            dtype,
            shape,
            expected,
            actual,
        } => error(
            codes::SAFETENSORS_TENSOR_INVALID_INFO,
            format!(
                "has tensor `{name}` of {dtype} {shape:?} = {expected} bytes whose \
                 data_offsets span {actual} bytes (safetensors: TensorInvalidInfo)"
            ),
            "the header is damaged; re-export the model with safetensors",
        ),
        Invalid::Incomplete { expected, file_len } if file_len < expected => error(
            codes::SAFETENSORS_TRUNCATED,
            format!(
                "is {} but its header says {}: truncated by {} \
                 (safetensors: MetadataIncompleteBuffer)",
                human_size(*file_len),
                human_size(*expected),
                human_size(expected - file_len)
            ),
            FIX_REDOWNLOAD,
        ),
        Invalid::Incomplete { expected, file_len } => error(
            codes::SAFETENSORS_TRAILING_BYTES,
            format!(
                "has {} of trailing data after the last tensor, which ends at byte {expected} \
                 (safetensors: MetadataIncompleteBuffer)",
                human_size(file_len - expected)
            ),
            "the file was appended to or overwritten in place; download or copy it again",
        ),
    }
}

/// The check for one `*.safetensors` file.
pub(crate) fn check(rel: &str, file: &File, file_len: u64) -> io::Result<Vec<Finding>> {
    Ok(match read_header(file, file_len)? {
        Ok(_) => Vec::new(),
        Err(invalid) => vec![finding(rel, &invalid)],
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inspect::testutil::*;
    use crate::inspect::{Severity, check_file};

    /// A safetensors file from a JSON header and a data length, the way the writer lays it out
    /// (header padded with spaces to a multiple of 8).
    pub(crate) fn make(header: &str, data_len: usize) -> Vec<u8> {
        let mut h = header.as_bytes().to_vec();
        while !h.len().is_multiple_of(8) {
            h.push(b' ');
        }
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out.extend((0..data_len).map(|i| i as u8));
        out
    }

    const TWO: &str = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}"#;

    fn one(name: &str, bytes: &[u8], code: &str) -> Finding {
        let findings = check_bytes(name, bytes);
        let f = only(&findings, code, name);
        assert_eq!(f.severity, Severity::Error);
        f.clone()
    }

    #[test]
    fn a_valid_file_passes() {
        assert!(check_bytes("m.safetensors", &make(TWO, 22)).is_empty());
        // No tensors at all is valid too.
        assert!(check_bytes("m.safetensors", &make("{}", 0)).is_empty());
        // Null metadata and unknown members of a tensor object are accepted, as by serde.
        let extra =
            r#"{"__metadata__":null,"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":1}}"#;
        assert!(check_bytes("m.safetensors", &make(extra, 1)).is_empty());
    }

    #[test]
    fn every_dtype_has_the_reference_size() {
        for (dtype, bits) in DTYPES {
            // 16 elements fill whole bytes for every bit width, sub-byte ones included.
            let bytes = 16 * bits / 8;
            let header = format!(
                r#"{{"t":{{"dtype":"{dtype}","shape":[4,4],"data_offsets":[0,{bytes}]}}}}"#
            );
            assert!(
                check_bytes("m.safetensors", &make(&header, bytes as usize)).is_empty(),
                "{dtype}"
            );
        }
    }

    #[test]
    fn header_too_small() {
        let f = one(
            "m.safetensors",
            b"\x10\x00\x00",
            codes::SAFETENSORS_HEADER_TOO_SMALL,
        );
        assert!(f.problem.contains("HeaderTooSmall"));
    }

    /// 8 bytes is enough for the length: an 8-byte file is judged by the length it states.
    #[test]
    fn eight_bytes_pass_the_size_rule() {
        one(
            "m.safetensors",
            &[0x10, 0, 0, 0, 0, 0, 0],
            codes::SAFETENSORS_HEADER_TOO_SMALL,
        );
        let f = one(
            "m.safetensors",
            &2u64.to_le_bytes(),
            codes::SAFETENSORS_HEADER_TRUNCATED,
        );
        assert!(f.problem.contains("InvalidHeaderLength"), "{}", f.problem);
    }

    /// A file that is shorter than the length it was measured at (it shrank while being read)
    /// is refused for what is missing, not parsed from zeros.
    #[test]
    fn a_file_that_shrank_is_refused() {
        let full = make(TWO, 22);
        let dir = tree(&[("m.safetensors", &full[..20]), ("tiny", &full[..3])]);
        let open = |name: &str| File::open(dir.path().join(name)).unwrap();
        let got = read_header(&open("tiny"), full.len() as u64).unwrap();
        assert!(matches!(got, Err(Invalid::TooSmall { .. })), "{got:?}");
        let got = read_header(&open("m.safetensors"), full.len() as u64).unwrap();
        assert!(matches!(got, Err(Invalid::HeaderPastEnd { .. })), "{got:?}");
        // The whole file, for contrast, is valid.
        let dir = tree(&[("m.safetensors", &full)]);
        let file = File::open(dir.path().join("m.safetensors")).unwrap();
        assert!(read_header(&file, full.len() as u64).unwrap().is_ok());
    }

    /// A tensor with no elements has equal offsets, and that is valid.
    #[test]
    fn empty_tensors_are_valid() {
        let header = r#"{"e":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"z":{"dtype":"F16","shape":[0],"data_offsets":[1,1]}}"#;
        assert!(check_bytes("m.safetensors", &make(header, 1)).is_empty());
    }

    #[test]
    fn header_too_large_names_what_the_file_starts_with() {
        let f = one(
            "m.safetensors",
            b"<!DOCTYPE html>\n<html><body>rate limited</body></html>\n",
            codes::SAFETENSORS_HEADER_TOO_LARGE,
        );
        assert!(f.problem.contains("HeaderTooLarge"), "{}", f.problem);
        assert!(f.problem.contains("`<!DOCTYPE html>`"), "{}", f.problem);
        // Exactly the limit is allowed past this rule (and then fails the length rule).
        let mut bytes = 100_000_000u64.to_le_bytes().to_vec();
        bytes.extend(b"{}");
        one("m.safetensors", &bytes, codes::SAFETENSORS_HEADER_TRUNCATED);
        let mut bytes = 100_000_001u64.to_le_bytes().to_vec();
        bytes.extend(b"{}");
        one("m.safetensors", &bytes, codes::SAFETENSORS_HEADER_TOO_LARGE);
    }

    #[test]
    fn header_past_the_end_of_the_file() {
        let full = make(TWO, 22);
        let f = one(
            "m.safetensors",
            &full[..20],
            codes::SAFETENSORS_HEADER_TRUNCATED,
        );
        assert!(f.problem.contains("InvalidHeaderLength"), "{}", f.problem);
    }

    #[test]
    fn header_not_utf8() {
        let mut bytes = make(TWO, 22);
        bytes[9] = 0xff;
        let f = one("m.safetensors", &bytes, codes::SAFETENSORS_HEADER_NOT_UTF8);
        assert!(f.problem.contains("offset 1"), "{}", f.problem);
    }

    #[test]
    fn header_json_refusals() {
        let cases = [
            "not json",
            "[]",
            r#"{"a":{"dtype":"F32","shape":[1]}}"#,
            r#"{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}"#,
            r#"{"__metadata__":{"k":1}}"#,
            r#"{"__metadata__":[]}"#,
            r#"{"a":[]}"#,
        ];
        for header in cases {
            let f = one(
                "m.safetensors",
                &make(header, 4),
                codes::SAFETENSORS_HEADER_INVALID,
            );
            assert!(
                f.problem.contains("InvalidHeaderDeserialization"),
                "{header}"
            );
        }
    }

    #[test]
    fn zero_filled_file() {
        let f = one("m.safetensors", &[0; 5000], codes::SAFETENSORS_ZERO_FILLED);
        assert!(f.problem.contains("5000 zero bytes"), "{}", f.problem);
        // Length 0 followed by something else is just an invalid header.
        let mut bytes = vec![0; 8];
        bytes.extend(b"junk");
        one("m.safetensors", &bytes, codes::SAFETENSORS_HEADER_INVALID);
    }

    #[test]
    fn invalid_offsets() {
        let gap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}"#;
        let f = one(
            "m.safetensors",
            &make(gap, 12),
            codes::SAFETENSORS_INVALID_OFFSET,
        );
        assert!(f.problem.contains("InvalidOffset(\"b\")"), "{}", f.problem);
        let not_zero = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#;
        one(
            "m.safetensors",
            &make(not_zero, 8),
            codes::SAFETENSORS_INVALID_OFFSET,
        );
        let backwards = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"c":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}"#;
        one(
            "m.safetensors",
            &make(backwards, 4),
            codes::SAFETENSORS_INVALID_OFFSET,
        );
        // Listed out of order in the JSON is fine: the reader sorts.
        let unsorted = r#"{"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        assert!(check_bytes("m.safetensors", &make(unsorted, 8)).is_empty());
    }

    #[test]
    fn overflow_misaligned_and_invalid_info() {
        let huge = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
        one(
            "m.safetensors",
            &make(huge, 4),
            codes::SAFETENSORS_SIZE_OVERFLOW,
        );
        let odd = r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#;
        one(
            "m.safetensors",
            &make(odd, 2),
            codes::SAFETENSORS_MISALIGNED_SUBBYTE,
        );
        let wrong = r#"{"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,16]}}"#;
        let f = one(
            "m.safetensors",
            &make(wrong, 16),
            codes::SAFETENSORS_TENSOR_INVALID_INFO,
        );
        assert!(f.problem.contains("F16 [2, 3] = 12 bytes"), "{}", f.problem);
        assert!(f.problem.contains("span 16 bytes"), "{}", f.problem);
        // The span of a tensor that does not start at 0 is its length, not its end.
        let second = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,10]}}"#;
        let f = one(
            "m.safetensors",
            &make(second, 10),
            codes::SAFETENSORS_TENSOR_INVALID_INFO,
        );
        assert!(
            f.problem
                .contains("`b` of U8 [2] = 2 bytes whose data_offsets span 6 bytes"),
            "{}",
            f.problem
        );
    }

    #[test]
    fn truncated_and_trailing_data() {
        let full = make(TWO, 22);
        let f = one(
            "m.safetensors",
            &full[..full.len() - 5],
            codes::SAFETENSORS_TRUNCATED,
        );
        assert!(f.problem.contains("truncated by 5 bytes"), "{}", f.problem);
        assert!(
            f.problem.contains("MetadataIncompleteBuffer"),
            "{}",
            f.problem
        );
        let mut longer = full.clone();
        longer.extend([0; 3]);
        let f = one("m.safetensors", &longer, codes::SAFETENSORS_TRAILING_BYTES);
        assert!(
            f.problem.contains("3 bytes of trailing data"),
            "{}",
            f.problem
        );
    }

    fn fixture(name: &str) -> Vec<Finding> {
        check_file(&fixtures().join("corrupt"), name).unwrap()
    }

    #[test]
    fn fixtures_made_by_the_real_writer_pass() {
        let valid = fixtures().join("valid");
        assert!(check_file(&valid, "small.safetensors").unwrap().is_empty());
        for i in 1..=3 {
            let rel = format!("sharded/model-0000{i}-of-00003.safetensors");
            assert!(check_file(&valid, &rel).unwrap().is_empty(), "{rel}");
        }
    }

    #[test]
    fn corrupt_fixtures_get_the_right_code() {
        let cases = [
            (
                "truncated-in-length.safetensors",
                codes::SAFETENSORS_HEADER_TOO_SMALL,
            ),
            (
                "truncated-in-header.safetensors",
                codes::SAFETENSORS_HEADER_TRUNCATED,
            ),
            (
                "truncated-in-data.safetensors",
                codes::SAFETENSORS_TRUNCATED,
            ),
            (
                "truncated-at-data-start.safetensors",
                codes::SAFETENSORS_TRUNCATED,
            ),
            ("zero-filled.safetensors", codes::SAFETENSORS_ZERO_FILLED),
            (
                "trailing-bytes.safetensors",
                codes::SAFETENSORS_TRAILING_BYTES,
            ),
            ("html-page.safetensors", codes::SAFETENSORS_HEADER_TOO_LARGE),
            (
                "invalid-offset.safetensors",
                codes::SAFETENSORS_INVALID_OFFSET,
            ),
            (
                "tensor-invalid-info.safetensors",
                codes::SAFETENSORS_TENSOR_INVALID_INFO,
            ),
        ];
        for (name, code) in cases {
            only(&fixture(name), code, name);
        }
    }
}
