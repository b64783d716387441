//! GGUF: ggml's header rules and llama.cpp's bounds check, from the metadata alone.
//!
//! A GGUF file is `GGUF`, a u32 version, u64 tensor and key/value counts, the key/values
//! (u64-length strings; arrays as element type + u64 count), the tensor infos (name, u32
//! n_dims ≤ 4, i64 dims, i32 ggml type, u64 offset), then the tensor data from the end of the
//! infos padded to `general.alignment` (u32 power of two, default 32).
//!
//! This follows `gguf_init_from_reader` in ggml's `gguf.cpp`: the same caps on strings and
//! arrays, the same refusals (empty or duplicate keys, invalid types, a non-u32 or
//! non-power-of-two alignment, names of 64 bytes or more, more than 4 dims, negative dims, rows
//! not a multiple of the type's block size, offsets that are not the running sum of padded
//! tensor sizes) and then llama.cpp's loader check that each tensor's data lies within the
//! file, whose message people search for: "tensor '…' data is not within the file bounds,
//! model is corrupted or incomplete". Sizes come from ggml's type traits (block size and
//! bytes per block for every type, quantized ones included).
//!
//! Key/value contents are skipped, not read: a tokenizer vocabulary of 150k strings costs one
//! length read per string. Keys are compared by digest, so a hostile key length allocates
//! nothing; every count and length is compared with the bytes left in the file before use.
//!
//! Both byte orders parse. A big-endian file (its version reads with the low 16 bits zero) is
//! valid GGUF, but llama.cpp refuses it on little-endian hosts, so it is a warning.

use std::collections::HashSet;
use std::fs::File;
use std::io;

use sha2::{Digest, Sha256};

use super::read::{PosReader, Short, describe_start, human_size};
use super::{Finding, codes};

pub(crate) const MAGIC: &[u8] = b"GGUF";
const GGUF_VERSION: u32 = 3;
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGUF_MAX_STRING_LENGTH` and `GGUF_MAX_ARRAY_ELEMENTS`.
const MAX_STRING_LENGTH: u64 = 1 << 30;
const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;
/// `GGML_MAX_NAME`: names must be shorter.
const MAX_NAME: u64 = 64;
const MAX_DIMS: u32 = 4;
/// airlock's own limits, far above any real model (which has hundreds to tens of thousands of
/// tensors and tens of key/values), so that memory stays bounded on hostile input.
const MAX_TENSORS: u64 = 1 << 20;
const MAX_KVS: u64 = 1 << 20;
/// The smallest possible tensor info (empty name, 0 dims) and key/value (1-byte key, u8).
const MIN_TENSOR_INFO: u64 = 8 + 4 + 4 + 8;
const MIN_KV: u64 = 8 + 1 + 4 + 1;

const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;
const TYPE_UINT32: u32 = 4;
const GGUF_TYPE_NAMES: [&str; 13] = [
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
];

/// Size of a scalar GGUF value type, or None for string, array and unknown types.
fn scalar_size(t: u32) -> Option<u64> {
    match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn gguf_type_name(t: u32) -> String {
    GGUF_TYPE_NAMES
        .get(t as usize)
        .map_or_else(|| format!("type {t}"), |n| (*n).to_string())
}

/// `GGML_TYPE_COUNT`: ggml types are numbered below this.
pub(crate) const GGML_TYPE_COUNT: i32 = 43;

/// ggml's type traits (`type_traits` in `ggml.c`, block structs in `ggml-common.h`):
/// `(name, elements per block, bytes per block)`. Types removed from GGUF have a block size of
/// 0 in ggml and are `Err(name)` here.
pub(crate) fn ggml_type(t: i32) -> Result<(&'static str, u64, u64), &'static str> {
    Ok(match t {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        4 => return Err("Q4_2"),
        5 => return Err("Q4_3"),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        // ggml's block_q8_1 is 2 halves + 32 quants; gguf-py's table still says 40.
        9 => ("Q8_1", 32, 36),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        20 => ("IQ4_NL", 32, 18),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        23 => ("IQ4_XS", 256, 136),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        30 => ("BF16", 1, 2),
        31 => return Err("Q4_0_4_4"),
        32 => return Err("Q4_0_4_8"),
        33 => return Err("Q4_0_8_8"),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        36 => return Err("IQ4_NL_4_4"),
        37 => return Err("IQ4_NL_4_8"),
        38 => return Err("IQ4_NL_8_8"),
        39 => ("MXFP4", 32, 17),
        40 => ("NVFP4", 64, 36),
        41 => ("Q1_0", 128, 18),
        42 => ("Q2_0", 64, 18),
        _ => return Err("unknown"),
    })
}

fn pad(x: u64, alignment: u64) -> Option<u64> {
    x.checked_add(alignment - 1)
        .map(|v| v / alignment * alignment)
}

/// Why parsing stopped.
enum Stop {
    Io(io::Error),
    Found(Finding),
}

pub(crate) struct TensorInfo {
    pub name: String,
    /// Offset from the start of the tensor data.
    pub offset: u64,
    pub nbytes: u64,
    /// The ggml type id, valid (ggml's `type_traits` has it with a block size).
    pub type_id: i32,
    /// ggml's `ne`, innermost dimension first; `n_dims` of them are meaningful.
    pub ne: [i64; 4],
    pub n_dims: u32,
}

struct Parser<'a> {
    r: PosReader<'a>,
    rel: &'a str,
    file_len: u64,
    big_endian: bool,
    /// What is being read, for the truncation message.
    what: String,
    /// ggml's name for the section, as in its "failed to read …" message.
    section: &'static str,
}

impl Parser<'_> {
    fn stop(&self, short: Short) -> Stop {
        match short {
            Short::Io(e) => Stop::Io(e),
            Short::End { needed, available } => Stop::Found(Finding::error(
                codes::GGUF_TRUNCATED,
                self.rel,
                format!(
                    "ends at byte {} while reading {}, which needs {} where {} are left: \
                     truncated (ggml: \"failed to read {}\")",
                    self.file_len,
                    self.what,
                    human_size(needed),
                    human_size(available),
                    self.section
                ),
                "download or copy the file again and compare its size with the source",
            )),
        }
    }

    fn bad(&self, code: &'static str, problem: String) -> Stop {
        Stop::Found(Finding::error(
            code,
            self.rel,
            problem,
            "the file is damaged or was not written by a GGUF writer; download it again or \
             re-convert the model",
        ))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Stop> {
        self.r.array::<N>().map_err(|s| self.stop(s))
    }

    fn u32(&mut self) -> Result<u32, Stop> {
        let b = self.array::<4>()?;
        Ok(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        let b = self.array::<8>()?;
        Ok(if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn skip(&mut self, n: u64) -> Result<(), Stop> {
        self.r.skip(n).map_err(|s| self.stop(s))
    }

    /// A string length, refused above ggml's cap before anything is read.
    fn string_len(&mut self) -> Result<u64, Stop> {
        let len = self.u64()?;
        if len > MAX_STRING_LENGTH {
            return Err(self.bad(
                codes::GGUF_INVALID_KV,
                format!(
                    "has a string of {len} bytes in {}, over ggml's 1 GiB limit \
                     (ggml: \"string length exceeds maximum\")",
                    self.what
                ),
            ));
        }
        Ok(len)
    }

    /// Reads a key: its length, the first bytes for messages, and a digest of the whole.
    fn key(&mut self) -> Result<(String, [u8; 32], u64), Stop> {
        let len = self.string_len()?;
        if len > self.r.remaining() {
            return Err(self.stop(Short::End {
                needed: len,
                available: self.r.remaining(),
            }));
        }
        let mut hasher = Sha256::new();
        let mut shown = Vec::new();
        let mut left = len;
        while left > 0 {
            let chunk = left.min(4096);
            let bytes = self.r.bytes(chunk).map_err(|s| self.stop(s))?;
            if shown.len() < 80 {
                shown.extend_from_slice(&bytes[..bytes.len().min(80 - shown.len())]);
            }
            hasher.update(&bytes);
            left -= chunk;
        }
        Ok((
            String::from_utf8_lossy(&shown).into_owned(),
            hasher.finalize().into(),
            len,
        ))
    }
}

/// The check for one GGUF file (by extension or by magic).
pub(crate) fn check(
    rel: &str,
    file: &File,
    file_len: u64,
    prefix: &[u8],
) -> io::Result<Vec<Finding>> {
    if !prefix.starts_with(MAGIC) {
        return Ok(vec![Finding::error(
            codes::GGUF_BAD_MAGIC,
            rel,
            format!(
                "is a .gguf file that does not start with `GGUF`: it {} (ggml: \"invalid magic \
                 characters\")",
                describe_start(&prefix[..prefix.len().min(64)])
            ),
            "this is not a GGUF file (often an HTML error page, a Git LFS pointer or a \
             preallocated file saved under its name); download it again",
        )]);
    }
    let mut parser = Parser {
        r: PosReader::new(file, file_len, MAGIC.len() as u64),
        rel,
        file_len,
        big_endian: false,
        what: "the header".to_string(),
        section: "header",
    };
    let mut findings = Vec::new();
    match parse(&mut parser) {
        Ok(tensors_and_start) => findings.extend(bounds(rel, file_len, tensors_and_start)),
        Err(Stop::Io(e)) => return Err(e),
        Err(Stop::Found(f)) => findings.push(f),
    }
    if parser.big_endian {
        findings.push(Finding::warning(
            codes::GGUF_BIG_ENDIAN,
            rel,
            "is a big-endian GGUF, which llama.cpp on a little-endian host (x86-64, ARM) \
             refuses (ggml: \"is there a mismatch between the host and model endianness?\")",
            "convert it with gguf-py's `gguf-convert-endian <file> little`, unless the target \
             is a big-endian host such as s390x",
        ));
    }
    Ok(findings)
}

/// A GGUF file ggml and llama.cpp accept, as the value scan needs it.
pub(crate) struct Parsed {
    pub tensors: Vec<TensorInfo>,
    /// Where the tensor data starts (offsets are relative to it).
    pub data_start: u64,
    pub big_endian: bool,
}

/// The tensors of a GGUF file that passes every check of [`check`] (no finding but the
/// big-endian warning); `None` otherwise (the model checks say why).
pub(crate) fn parsed(file: &File, file_len: u64) -> io::Result<Option<Parsed>> {
    let mut magic = [0u8; 4];
    if super::read::read_at(file, 0, &mut magic)? < 4 || magic != MAGIC {
        return Ok(None);
    }
    let mut parser = Parser {
        r: PosReader::new(file, file_len, MAGIC.len() as u64),
        rel: "",
        file_len,
        big_endian: false,
        what: String::new(),
        section: "header",
    };
    match parse(&mut parser) {
        Ok((tensors, data_start)) => {
            let inside = tensors.iter().all(|t| {
                data_start
                    .checked_add(t.offset)
                    .and_then(|b| b.checked_add(t.nbytes))
                    .is_some_and(|end| end <= file_len)
            });
            Ok(inside.then_some(Parsed {
                tensors,
                data_start,
                big_endian: parser.big_endian,
            }))
        }
        Err(Stop::Io(e)) => Err(e),
        Err(Stop::Found(_)) => Ok(None),
    }
}

/// ggml's name of a valid type id.
pub(crate) fn type_name(type_id: i32) -> &'static str {
    match ggml_type(type_id) {
        Ok((name, _, _)) => name,
        Err(name) => name,
    }
}

/// Parses the header, key/values and tensor infos; returns the tensors and the data start.
fn parse(p: &mut Parser) -> Result<(Vec<TensorInfo>, u64), Stop> {
    let (n_tensors, n_kv) = header(p)?;
    let alignment = key_values(p, n_kv)?;
    let tensors = tensor_infos(p, n_tensors)?;
    let data_start = data_start(p, n_tensors, alignment)?;
    check_offsets(p, &tensors, alignment)?;
    Ok((tensors, data_start))
}

/// The version (which also tells the byte order) and the two counts, each refused over its cap.
fn header(p: &mut Parser) -> Result<(u64, u64), Stop> {
    let raw_version = p.u32()?;
    let mut version = raw_version;
    if version != 0 && version & 0xFFFF == 0 {
        p.big_endian = true;
        version = version.swap_bytes();
    }
    let unsupported = match version {
        0 => Some("bad GGUF version: 0".to_string()),
        1 => Some("GGUFv1 is no longer supported".to_string()),
        v if v > GGUF_VERSION => Some(format!(
            "this GGUF file is version {v} but this software only supports up to version \
             {GGUF_VERSION}"
        )),
        _ => None,
    };
    if let Some(message) = unsupported {
        return Err(Stop::Found(Finding::error(
            codes::GGUF_UNSUPPORTED_VERSION,
            p.rel,
            format!("has GGUF version {version}, which ggml does not read (ggml: \"{message}\")"),
            "re-convert the model with a current llama.cpp `convert_hf_to_gguf.py`, or use a \
             llama.cpp that reads this version",
        )));
    }
    let n_tensors = p.u64()?;
    let n_kv = p.u64()?;
    for (count, what, cap, min) in [
        (n_tensors, "tensors", MAX_TENSORS, MIN_TENSOR_INFO),
        (n_kv, "key/values", MAX_KVS, MIN_KV),
    ] {
        if count > cap {
            let room = p.r.remaining() / min;
            return Err(p.bad(
                codes::GGUF_INVALID_HEADER,
                if count > room {
                    format!(
                        "declares {count} {what}, more than the {} left after the header could \
                         hold (at most {room})",
                        human_size(p.r.remaining())
                    )
                } else {
                    format!("declares {count} {what}, over airlock's limit of {cap}")
                },
            ));
        }
    }
    Ok((n_tensors, n_kv))
}

/// The `n_kv` key/values: each key non-empty and unique, each value of a valid type and skipped;
/// returns `general.alignment` (a power of 2; the default without it).
fn key_values(p: &mut Parser, n_kv: u64) -> Result<u64, Stop> {
    let mut alignment = DEFAULT_ALIGNMENT;
    let mut keys: HashSet<[u8; 32]> = HashSet::new();
    p.section = "key-value pairs";
    for i in 0..n_kv {
        if let Some(a) = key_value(p, i, n_kv, &mut keys)? {
            alignment = a;
        }
    }
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(p.bad(
            codes::GGUF_INVALID_KV,
            format!(
                "has general.alignment {alignment}, not a power of 2 (ggml: \"alignment \
                 {alignment} is not a power of 2\")"
            ),
        ));
    }
    Ok(alignment)
}

/// Key/value `i` (0-based) of `n_kv`, its key's digest added to `keys`; returns the value when
/// it is `general.alignment`.
fn key_value(
    p: &mut Parser,
    i: u64,
    n_kv: u64,
    keys: &mut HashSet<[u8; 32]>,
) -> Result<Option<u64>, Stop> {
    p.what = format!("key/value {} of {n_kv}", i + 1);
    let (key, digest, key_len) = p.key()?;
    if key_len == 0 {
        return Err(p.bad(
            codes::GGUF_INVALID_KV,
            format!(
                "has an empty key at key/value {} (ggml: \"key {i} is empty\")",
                i + 1
            ),
        ));
    }
    if !keys.insert(digest) {
        return Err(p.bad(
            codes::GGUF_INVALID_KV,
            format!("has the key `{key}` twice (ggml: \"duplicate key '{key}'\")"),
        ));
    }
    p.what = format!("key/value {} of {n_kv} (`{key}`)", i + 1);
    let mut value_type = p.u32()?;
    let mut count = None;
    if value_type == TYPE_ARRAY {
        value_type = p.u32()?;
        count = Some(p.u64()?);
    }
    let scalar = scalar_size(value_type);
    if scalar.is_none() && value_type != TYPE_STRING {
        return Err(p.bad(
            codes::GGUF_INVALID_KV,
            format!(
                "has key `{key}` with invalid GGUF type {value_type} (ggml: \"key '{key}' \
                 has invalid GGUF type {value_type}\")"
            ),
        ));
    }
    let is_alignment = key_len == 17 && key == "general.alignment";
    if is_alignment && (count.is_some() || value_type != TYPE_UINT32) {
        let shown = match count {
            Some(_) => "array".to_string(),
            None => gguf_type_name(value_type),
        };
        return Err(p.bad(
            codes::GGUF_INVALID_KV,
            format!(
                "has general.alignment of type {shown} (ggml: \"key 'general.alignment' \
                 must be of type u32 but is {shown}\")"
            ),
        ));
    }
    if is_alignment {
        debug_assert_eq!(scalar, Some(4));
        return Ok(Some(u64::from(p.u32()?)));
    }
    skip_value(p, &key, count, scalar)?;
    Ok(None)
}

/// Skips the value of `key`: a scalar of `scalar` bytes or a string (`scalar` `None`), or an
/// array of `count` of them (at most ggml's 2^30 elements).
fn skip_value(
    p: &mut Parser,
    key: &str,
    count: Option<u64>,
    scalar: Option<u64>,
) -> Result<(), Stop> {
    match (count, scalar) {
        (None, Some(size)) => p.skip(size),
        (None, None) => {
            let len = p.string_len()?;
            p.skip(len)
        }
        (Some(n), _) if n > MAX_ARRAY_ELEMENTS => Err(p.bad(
            codes::GGUF_INVALID_KV,
            format!("has key `{key}` with an array of {n} elements, over ggml's 2^30"),
        )),
        (Some(n), Some(size)) => p.skip(n * size),
        (Some(n), None) => {
            // Each string needs at least its 8-byte length.
            if n * 8 > p.r.remaining() {
                return Err(p.stop(Short::End {
                    needed: n * 8,
                    available: p.r.remaining(),
                }));
            }
            for _ in 0..n {
                let len = p.string_len()?;
                p.skip(len)?;
            }
            Ok(())
        }
    }
}

/// The `n_tensors` tensor infos, each name unique.
fn tensor_infos(p: &mut Parser, n_tensors: u64) -> Result<Vec<TensorInfo>, Stop> {
    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut names: HashSet<Vec<u8>> = HashSet::new();
    p.section = "tensor info";
    for i in 0..n_tensors {
        p.what = format!("tensor info {} of {n_tensors}", i + 1);
        let name = tensor_name(p, i, &mut names)?;
        p.what = format!("tensor info {} of {n_tensors} (`{name}`)", i + 1);
        let (ne, n_dims, elements) = tensor_shape(p, &name)?;
        let (type_id, nbytes) = tensor_type(p, &name, ne[0], elements)?;
        let offset = p.u64()?;
        tensors.push(TensorInfo {
            name,
            offset,
            nbytes,
            type_id,
            ne,
            n_dims,
        });
    }
    Ok(tensors)
}

/// The name of tensor info `i` (0-based): shorter than ggml's 64 bytes, not in `names` yet.
fn tensor_name(p: &mut Parser, i: u64, names: &mut HashSet<Vec<u8>>) -> Result<String, Stop> {
    let name_len = p.string_len()?;
    if name_len >= MAX_NAME {
        // ggml reads the string before checking its length.
        p.skip(name_len)?;
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!(
                "has a tensor name of {name_len} bytes at tensor info {} (ggml: \"tensor \
                 name {i} is too long: {name_len} >= {MAX_NAME}\")",
                i + 1
            ),
        ));
    }
    let name_bytes = p.r.bytes(name_len).map_err(|s| p.stop(s))?;
    let name = String::from_utf8_lossy(&name_bytes).into_owned();
    if !names.insert(name_bytes) {
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!("has the tensor name `{name}` twice (ggml: \"duplicate tensor name\")"),
        ));
    }
    Ok(name)
}

/// Tensor `name`'s dimensions (`ne`, the count, and the element count, which must not
/// overflow).
fn tensor_shape(p: &mut Parser, name: &str) -> Result<([i64; 4], u32, i64), Stop> {
    let n_dims = p.u32()?;
    if n_dims > MAX_DIMS {
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!(
                "has tensor `{name}` with {n_dims} dimensions (ggml: \"invalid number of \
                 dimensions: {n_dims} > {MAX_DIMS}\")"
            ),
        ));
    }
    let mut ne = [1i64; 4];
    for d in ne.iter_mut().take(n_dims as usize) {
        *d = p.u64()? as i64;
        if *d < 0 {
            return Err(p.bad(
                codes::GGUF_INVALID_TENSOR_INFO,
                format!("has tensor `{name}` with a negative dimension {}", *d),
            ));
        }
    }
    let elements = ne.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
    let Some(elements) = elements.filter(|&e| e < i64::MAX) else {
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!("has tensor `{name}` with shape {ne:?}, whose element count overflows"),
        ));
    };
    Ok((ne, n_dims, elements))
}

/// Tensor `name`'s ggml type id (valid, not removed, its block dividing a row of `row`
/// elements) and its size in bytes for `elements` elements.
fn tensor_type(p: &mut Parser, name: &str, row: i64, elements: i64) -> Result<(i32, u64), Stop> {
    let type_id = p.u32()? as i32;
    if !(0..GGML_TYPE_COUNT).contains(&type_id) {
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!(
                "has tensor `{name}` of invalid ggml type {type_id} (ggml: \"should be in \
                 [0, {GGML_TYPE_COUNT})\")"
            ),
        ));
    }
    let (type_name, block, type_size) = match ggml_type(type_id) {
        Ok(t) => t,
        Err(removed) => {
            return Err(p.bad(
                codes::GGUF_INVALID_TENSOR_INFO,
                format!(
                    "has tensor `{name}` of ggml type {type_id} ({removed}), which was \
                     removed from GGUF (block size 0)"
                ),
            ));
        }
    };
    if !(row as u64).is_multiple_of(block) {
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!(
                "has tensor `{name}` of type {type_name} with {row} elements per row, not a \
                 multiple of the block size {block}"
            ),
        ));
    }
    let Some(nbytes) = (elements as u64 / block).checked_mul(type_size) else {
        return Err(p.bad(
            codes::GGUF_INVALID_TENSOR_INFO,
            format!("has tensor `{name}` whose size in bytes overflows"),
        ));
    };
    Ok((type_id, nbytes))
}

/// Where the tensor data starts: after the infos, padded to `alignment` when there are
/// tensors; refused when the padding runs past the end of the file.
fn data_start(p: &mut Parser, n_tensors: u64, alignment: u64) -> Result<u64, Stop> {
    let end_of_infos = p.r.pos();
    let data_start = if n_tensors > 0 {
        pad(end_of_infos, alignment).unwrap_or(u64::MAX)
    } else {
        end_of_infos
    };
    if data_start > p.file_len {
        p.what = "the padding before the tensor data".to_string();
        return Err(p.stop(Short::End {
            needed: data_start - end_of_infos,
            available: p.file_len - end_of_infos,
        }));
    }
    Ok(data_start)
}

/// Each tensor's offset must be the running sum of the padded sizes before it, as ggml checks.
fn check_offsets(p: &Parser, tensors: &[TensorInfo], alignment: u64) -> Result<(), Stop> {
    let mut expected = 0u64;
    for t in tensors {
        if t.offset != expected {
            return Err(p.bad(
                codes::GGUF_INVALID_TENSOR_INFO,
                format!(
                    "has tensor `{}` at offset {}, where ggml expects {expected} (the running \
                     sum of padded tensor sizes) (ggml: \"tensor '{}' has offset {}, expected \
                     {expected}\")",
                    t.name, t.offset, t.name, t.offset
                ),
            ));
        }
        expected = pad(t.nbytes, alignment)
            .and_then(|padded| expected.checked_add(padded))
            .ok_or_else(|| {
                p.bad(
                    codes::GGUF_INVALID_TENSOR_INFO,
                    format!("has tensor `{}` whose padded size overflows", t.name),
                )
            })?;
    }
    Ok(())
}

/// llama.cpp's check: every tensor's data within the file.
fn bounds(rel: &str, file_len: u64, (tensors, data_start): (Vec<TensorInfo>, u64)) -> Vec<Finding> {
    let end = |t: &TensorInfo| data_start.saturating_add(t.offset).saturating_add(t.nbytes);
    let outside: Vec<&TensorInfo> = tensors.iter().filter(|t| end(t) > file_len).collect();
    let Some(first) = outside.first() else {
        return Vec::new();
    };
    let needed = outside.iter().map(|t| end(t)).max().unwrap_or(0);
    let others = match outside.len() {
        1 => String::new(),
        2 => ", and so is 1 more tensor".to_string(),
        n => format!(", and so are {} more tensors", n - 1),
    };
    vec![Finding::error(
        codes::GGUF_TENSOR_OUT_OF_BOUNDS,
        rel,
        format!(
            "is {} but its tensors need {}: truncated by {}; tensor '{}' data is not within \
             the file bounds{others} (llama.cpp: \"model is corrupted or incomplete\")",
            human_size(file_len),
            human_size(needed),
            human_size(needed - file_len),
            first.name
        ),
        "download or copy the file again and compare its size with the source",
    )]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inspect::testutil::*;
    use crate::inspect::{Severity, check_file};

    /// A GGUF writer for tests, in either byte order.
    pub(crate) struct Writer {
        pub big: bool,
        pub kvs: Vec<u8>,
        pub n_kv: u64,
        pub infos: Vec<u8>,
        pub n_tensors: u64,
        pub data: Vec<u8>,
        pub alignment: u64,
    }

    impl Writer {
        pub(crate) fn new(big: bool) -> Self {
            Writer {
                big,
                kvs: Vec::new(),
                n_kv: 0,
                infos: Vec::new(),
                n_tensors: 0,
                data: Vec::new(),
                alignment: 32,
            }
        }
        fn u32(&self, out: &mut Vec<u8>, v: u32) {
            out.extend(if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            });
        }
        fn u64(&self, out: &mut Vec<u8>, v: u64) {
            out.extend(if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            });
        }
        fn string(&self, out: &mut Vec<u8>, s: &[u8]) {
            self.u64(out, s.len() as u64);
            out.extend(s);
        }
        pub(crate) fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
            let mut out = Vec::new();
            self.string(&mut out, key.as_bytes());
            self.u32(&mut out, TYPE_UINT32);
            self.u32(&mut out, v);
            self.kvs.extend(out);
            self.n_kv += 1;
            self
        }
        pub(crate) fn kv_strings(&mut self, key: &str, items: &[&str]) -> &mut Self {
            let mut out = Vec::new();
            self.string(&mut out, key.as_bytes());
            self.u32(&mut out, TYPE_ARRAY);
            self.u32(&mut out, TYPE_STRING);
            self.u64(&mut out, items.len() as u64);
            for item in items {
                self.string(&mut out, item.as_bytes());
            }
            self.kvs.extend(out);
            self.n_kv += 1;
            self
        }
        /// Adds a tensor with `nbytes` of data at the next aligned offset.
        pub(crate) fn tensor(
            &mut self,
            name: &str,
            dims: &[u64],
            ggml: u32,
            nbytes: usize,
        ) -> &mut Self {
            let offset = self.data.len() as u64;
            let mut out = Vec::new();
            self.string(&mut out, name.as_bytes());
            self.u32(&mut out, dims.len() as u32);
            for &d in dims {
                self.u64(&mut out, d);
            }
            self.u32(&mut out, ggml);
            self.u64(&mut out, offset);
            self.infos.extend(out);
            self.n_tensors += 1;
            self.data.extend((0..nbytes).map(|i| i as u8));
            while !(self.data.len() as u64).is_multiple_of(self.alignment) {
                self.data.push(0);
            }
            self
        }
        pub(crate) fn bytes(&self) -> Vec<u8> {
            let mut out = b"GGUF".to_vec();
            self.u32(&mut out, 3);
            self.u64(&mut out, self.n_tensors);
            self.u64(&mut out, self.n_kv);
            out.extend(&self.kvs);
            out.extend(&self.infos);
            if self.n_tensors > 0 {
                while !(out.len() as u64).is_multiple_of(self.alignment) {
                    out.push(0);
                }
            }
            out.extend(&self.data);
            out
        }
    }

    fn sample(big: bool) -> Writer {
        let mut w = Writer::new(big);
        w.kv_strings("tokenizer.ggml.tokens", &["<s>", "</s>", "hello"])
            .kv_u32("general.alignment", 32)
            .tensor("token_embd.weight", &[64, 2], 8, 2 * 2 * 34) // Q8_0
            .tensor("output_norm.weight", &[64], 0, 256) // F32
            .tensor("blk.0.ffn_down.weight", &[256, 1], 12, 144); // Q4_K
        w
    }

    fn one(bytes: &[u8], code: &str) -> Finding {
        let findings = check_bytes("model.gguf", bytes);
        only(&findings, code, "model.gguf").clone()
    }

    #[test]
    fn a_valid_file_passes_in_both_byte_orders() {
        assert!(check_bytes("model.gguf", &sample(false).bytes()).is_empty());
        let findings = check_bytes("model.gguf", &sample(true).bytes());
        let f = only(&findings, codes::GGUF_BIG_ENDIAN, "model.gguf");
        assert_eq!(f.severity, Severity::Warning);
        // Found by magic whatever the name.
        assert!(check_bytes("blob", &sample(false).bytes()).is_empty());
        let mut truncated = sample(false).bytes();
        truncated.truncate(truncated.len() - 100);
        only(
            &check_bytes("blob", &truncated),
            codes::GGUF_TENSOR_OUT_OF_BOUNDS,
            "blob",
        );
    }

    #[test]
    fn truncated_data_names_the_first_tensor_outside() {
        let bytes = sample(false).bytes();
        for cut in [17, 150, 260] {
            let f = one(
                &bytes[..bytes.len() - cut],
                codes::GGUF_TENSOR_OUT_OF_BOUNDS,
            );
            assert!(
                f.problem.contains("data is not within the file bounds"),
                "{}",
                f.problem
            );
        }
        let f = one(
            &bytes[..bytes.len() - 150],
            codes::GGUF_TENSOR_OUT_OF_BOUNDS,
        );
        assert!(
            f.problem.contains("'blk.0.ffn_down.weight'"),
            "{}",
            f.problem
        );
        // The last tensor is 144 bytes of Q4_K data plus 16 of padding: losing only
        // padding is fine for llama.cpp.
        assert!(check_bytes("model.gguf", &bytes[..bytes.len() - 16]).is_empty());
        let f = one(&bytes[..bytes.len() - 17], codes::GGUF_TENSOR_OUT_OF_BOUNDS);
        assert!(f.problem.contains("truncated by 1 byte;"), "{}", f.problem);
    }

    #[test]
    fn truncated_metadata_says_where() {
        let bytes = sample(false).bytes();
        let f = one(&bytes[..10], codes::GGUF_TRUNCATED);
        assert!(f.problem.contains("failed to read header"), "{}", f.problem);
        let f = one(&bytes[..75], codes::GGUF_TRUNCATED);
        assert!(
            f.problem.contains("`tokenizer.ggml.tokens`"),
            "{}",
            f.problem
        );
        assert!(
            f.problem.contains("failed to read key-value pairs"),
            "{}",
            f.problem
        );
        let infos_at = 4 + 4 + 16 + sample(false).kvs.len();
        let f = one(&bytes[..infos_at + 30], codes::GGUF_TRUNCATED);
        assert!(f.problem.contains("`token_embd.weight`"), "{}", f.problem);
        assert!(
            f.problem.contains("failed to read tensor info"),
            "{}",
            f.problem
        );
    }

    #[test]
    fn bad_magic_and_versions() {
        let f = one(b"<html>not found</html>", codes::GGUF_BAD_MAGIC);
        assert!(
            f.problem.contains("`<html>not found</html>`"),
            "{}",
            f.problem
        );
        let mut bytes = sample(false).bytes();
        for (version, needle) in [(0u32, "bad GGUF version"), (1, "GGUFv1"), (4, "version 4")] {
            bytes[4..8].copy_from_slice(&version.to_le_bytes());
            let f = one(&bytes, codes::GGUF_UNSUPPORTED_VERSION);
            assert!(f.problem.contains(needle), "{}", f.problem);
        }
    }

    #[test]
    fn hostile_counts_and_lengths_allocate_nothing() {
        let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
        bytes.extend(u64::MAX.to_le_bytes());
        bytes.extend(1u64.to_le_bytes());
        one(&bytes, codes::GGUF_INVALID_HEADER);

        // A key length just under ggml's cap but past the end of the file.
        let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
        bytes.extend(0u64.to_le_bytes());
        bytes.extend(1u64.to_le_bytes());
        bytes.extend((MAX_STRING_LENGTH - 1).to_le_bytes());
        one(&bytes, codes::GGUF_TRUNCATED);
        // And over it.
        let len = bytes.len();
        bytes[len - 8..].copy_from_slice(&u64::MAX.to_le_bytes());
        one(&bytes, codes::GGUF_INVALID_KV);

        // An array of 2^30 strings in a tiny file.
        let mut w = Writer::new(false);
        w.kv_strings("a", &[]);
        let mut bytes = w.bytes();
        let count_at = bytes.len() - 8;
        bytes[count_at..].copy_from_slice(&(1u64 << 30).to_le_bytes());
        one(&bytes, codes::GGUF_TRUNCATED);
    }

    #[test]
    fn key_value_refusals() {
        let mut w = Writer::new(false);
        w.kv_u32("a", 1).kv_u32("a", 2);
        let f = one(&w.bytes(), codes::GGUF_INVALID_KV);
        assert!(f.problem.contains("duplicate key 'a'"), "{}", f.problem);

        let mut w = Writer::new(false);
        w.kv_u32("", 1);
        one(&w.bytes(), codes::GGUF_INVALID_KV);

        let mut w = Writer::new(false);
        w.kv_u32("general.alignment", 48);
        let f = one(&w.bytes(), codes::GGUF_INVALID_KV);
        assert!(f.problem.contains("not a power of 2"), "{}", f.problem);

        let mut w = Writer::new(false);
        w.kv_strings("general.alignment", &["32"]);
        let f = one(&w.bytes(), codes::GGUF_INVALID_KV);
        assert!(f.problem.contains("must be of type u32"), "{}", f.problem);

        let mut w = Writer::new(false);
        w.kv_u32("k", 1);
        let mut bytes = w.bytes();
        // The value type sits after the 8-byte length and 1-byte key.
        bytes[24 + 9..24 + 13].copy_from_slice(&13u32.to_le_bytes());
        let f = one(&bytes, codes::GGUF_INVALID_KV);
        assert!(f.problem.contains("invalid GGUF type 13"), "{}", f.problem);
    }

    #[test]
    fn tensor_info_refusals() {
        type Build = fn(&mut Writer);
        let cases: [(Build, &str); 7] = [
            (
                |w| {
                    w.tensor(&"x".repeat(64), &[4], 0, 16);
                },
                "too long",
            ),
            (
                |w| {
                    w.tensor("a", &[4], 0, 16).tensor("a", &[4], 0, 16);
                },
                "twice",
            ),
            (
                |w| {
                    w.tensor("a", &[1, 1, 1, 1, 1], 0, 4);
                },
                "5 dimensions",
            ),
            (
                |w| {
                    w.tensor("a", &[u64::MAX], 0, 4);
                },
                "negative dimension",
            ),
            (
                |w| {
                    w.tensor("a", &[4], 43, 4);
                },
                "invalid ggml type 43",
            ),
            (
                |w| {
                    w.tensor("a", &[32], 31, 18);
                },
                "Q4_0_4_4",
            ),
            (
                |w| {
                    w.tensor("a", &[33], 2, 18);
                },
                "not a multiple of the block size 32",
            ),
        ];
        for (build, needle) in cases {
            let mut w = Writer::new(false);
            build(&mut w);
            let f = one(&w.bytes(), codes::GGUF_INVALID_TENSOR_INFO);
            assert!(f.problem.contains(needle), "{needle}: {}", f.problem);
        }
    }

    #[test]
    fn offsets_must_be_the_running_sum_of_padded_sizes() {
        let mut w = Writer::new(false);
        w.tensor("a", &[4], 0, 16).tensor("b", &[4], 0, 16);
        let mut bytes = w.bytes();
        // Move b's offset from 32 to 64.
        let infos_at = 24;
        let b_offset_at = infos_at + (8 + 1 + 4 + 8 + 4 + 8) + (8 + 1 + 4 + 8 + 4);
        assert_eq!(bytes[b_offset_at], 32);
        bytes[b_offset_at] = 64;
        let f = one(&bytes, codes::GGUF_INVALID_TENSOR_INFO);
        assert!(
            f.problem.contains("has offset 64, expected 32"),
            "{}",
            f.problem
        );
    }

    #[test]
    fn type_table_matches_the_block_layouts() {
        // Quantized blocks: one or two f16 scales plus packed quants, per ggml-common.h.
        assert_eq!(ggml_type(2), Ok(("Q4_0", 32, 2 + 16)));
        assert_eq!(ggml_type(8), Ok(("Q8_0", 32, 2 + 32)));
        assert_eq!(ggml_type(12), Ok(("Q4_K", 256, 2 + 2 + 12 + 128)));
        assert_eq!(ggml_type(14), Ok(("Q6_K", 256, 128 + 64 + 16 + 2)));
        assert_eq!(ggml_type(39), Ok(("MXFP4", 32, 1 + 16)));
        for t in 0..GGML_TYPE_COUNT {
            if let Ok((_, block, size)) = ggml_type(t) {
                assert!(block > 0 && size > 0, "{t}");
            }
        }
        assert!(ggml_type(GGML_TYPE_COUNT).is_err());
    }

    /// The whole ggml type table, entry by entry. Checked against gguf-py 0.19's
    /// `GGML_QUANT_SIZES` (2026-12-03): equal for every type it lists except Q8_1, where ggml's
    /// `block_q8_1` (two halves and 32 quants) is 36 bytes and gguf-py says 40; Q2_0 is newer
    /// than gguf-py 0.19 and is as ggml-common.h has it.
    #[test]
    fn the_whole_type_table() {
        let table: [Result<(&str, u64, u64), &str>; 43] = [
            Ok(("F32", 1, 4)),
            Ok(("F16", 1, 2)),
            Ok(("Q4_0", 32, 18)),
            Ok(("Q4_1", 32, 20)),
            Err("Q4_2"),
            Err("Q4_3"),
            Ok(("Q5_0", 32, 22)),
            Ok(("Q5_1", 32, 24)),
            Ok(("Q8_0", 32, 34)),
            Ok(("Q8_1", 32, 36)),
            Ok(("Q2_K", 256, 84)),
            Ok(("Q3_K", 256, 110)),
            Ok(("Q4_K", 256, 144)),
            Ok(("Q5_K", 256, 176)),
            Ok(("Q6_K", 256, 210)),
            Ok(("Q8_K", 256, 292)),
            Ok(("IQ2_XXS", 256, 66)),
            Ok(("IQ2_XS", 256, 74)),
            Ok(("IQ3_XXS", 256, 98)),
            Ok(("IQ1_S", 256, 50)),
            Ok(("IQ4_NL", 32, 18)),
            Ok(("IQ3_S", 256, 110)),
            Ok(("IQ2_S", 256, 82)),
            Ok(("IQ4_XS", 256, 136)),
            Ok(("I8", 1, 1)),
            Ok(("I16", 1, 2)),
            Ok(("I32", 1, 4)),
            Ok(("I64", 1, 8)),
            Ok(("F64", 1, 8)),
            Ok(("IQ1_M", 256, 56)),
            Ok(("BF16", 1, 2)),
            Err("Q4_0_4_4"),
            Err("Q4_0_4_8"),
            Err("Q4_0_8_8"),
            Ok(("TQ1_0", 256, 54)),
            Ok(("TQ2_0", 256, 66)),
            Err("IQ4_NL_4_4"),
            Err("IQ4_NL_4_8"),
            Err("IQ4_NL_8_8"),
            Ok(("MXFP4", 32, 17)),
            Ok(("NVFP4", 64, 36)),
            Ok(("Q1_0", 128, 18)),
            Ok(("Q2_0", 64, 18)),
        ];
        for (t, want) in table.iter().enumerate() {
            assert_eq!(ggml_type(t as i32), *want, "type {t}");
        }
        assert_eq!(ggml_type(-1), Err("unknown"));
        assert_eq!(GGML_TYPE_COUNT as usize, table.len());
    }

    /// A key/value of every scalar type is skipped by its own size (a wrong size would misread
    /// the key that follows), alone and in an array.
    #[test]
    fn every_scalar_value_type_has_its_size() {
        let sizes = [
            (0u32, 1usize),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 4),
            (5, 4),
            (6, 4),
            (7, 1),
            (10, 8),
            (11, 8),
            (12, 8),
        ];
        for (t, size) in sizes {
            for array in [false, true] {
                let mut w = Writer::new(false);
                let mut kv = Vec::new();
                w.string(&mut kv, b"k");
                if array {
                    w.u32(&mut kv, TYPE_ARRAY);
                    w.u32(&mut kv, t);
                    w.u64(&mut kv, 3);
                    kv.extend(vec![0xAB; 3 * size]);
                } else {
                    w.u32(&mut kv, t);
                    kv.extend(vec![0xAB; size]);
                }
                w.kvs.extend(kv);
                w.n_kv += 1;
                w.kv_u32("next", 7).tensor("a", &[4], 0, 16);
                let findings = check_bytes("model.gguf", &w.bytes());
                assert!(findings.is_empty(), "type {t} array {array}: {findings:#?}");
            }
        }
    }

    /// general.alignment of another type is named by its GGUF type name.
    #[test]
    fn a_mistyped_alignment_names_its_type() {
        // An array of u32 is not a u32.
        let mut w = Writer::new(false);
        let mut kv = Vec::new();
        w.string(&mut kv, b"general.alignment");
        w.u32(&mut kv, TYPE_ARRAY);
        w.u32(&mut kv, TYPE_UINT32);
        w.u64(&mut kv, 1);
        w.u32(&mut kv, 32);
        w.kvs.extend(kv);
        w.n_kv += 1;
        let f = one(&w.bytes(), codes::GGUF_INVALID_KV);
        assert!(f.problem.contains("but is array"), "{}", f.problem);
        for (t, size, name) in [(0u32, 1usize, "u8"), (12, 8, "f64"), (8, 0, "string")] {
            let mut w = Writer::new(false);
            let mut kv = Vec::new();
            w.string(&mut kv, b"general.alignment");
            w.u32(&mut kv, t);
            if t == TYPE_STRING {
                w.string(&mut kv, b"32");
            } else {
                kv.extend(vec![0; size]);
            }
            w.kvs.extend(kv);
            w.n_kv += 1;
            let f = one(&w.bytes(), codes::GGUF_INVALID_KV);
            assert!(
                f.problem
                    .contains(&format!("must be of type u32 but is {name}\"")),
                "{}",
                f.problem
            );
        }
    }

    /// airlock's caps on the counts are inclusive: exactly the cap is parsed (and here runs out
    /// of file).
    #[test]
    fn count_caps_are_inclusive() {
        for (n_tensors, n_kv) in [(MAX_TENSORS, 0), (0, MAX_KVS)] {
            let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
            bytes.extend(n_tensors.to_le_bytes());
            bytes.extend(n_kv.to_le_bytes());
            bytes.extend([0; 4]);
            one(&bytes, codes::GGUF_TRUNCATED);
        }
    }

    /// A count over the cap in a file big enough to hold that many records is refused for the
    /// cap (the file here is sparse: only its length matters).
    #[test]
    fn counts_over_the_cap_in_a_big_enough_file() {
        for extra in [0, 1] {
            let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
            bytes.extend(0u64.to_le_bytes());
            bytes.extend((MAX_KVS + 1).to_le_bytes());
            let dir = tree(&[("model.gguf", &bytes)]);
            let file = File::options()
                .append(true)
                .open(dir.path().join("model.gguf"))
                .unwrap();
            file.set_len(bytes.len() as u64 + (MAX_KVS + 1 + extra) * MIN_KV)
                .unwrap();
            let findings = check_file(dir.path(), "model.gguf").unwrap();
            let f = only(&findings, codes::GGUF_INVALID_HEADER, "model.gguf");
            assert!(
                f.problem
                    .contains("declares 1048577 key/values, over airlock's limit of 1048576"),
                "{extra}: {}",
                f.problem
            );
        }
    }

    /// ggml's array cap is 2^30 elements inclusive, for scalars and strings alike.
    #[test]
    fn array_cap_is_inclusive() {
        for elem in [0u32, TYPE_STRING] {
            for (n, code) in [
                (MAX_ARRAY_ELEMENTS, codes::GGUF_TRUNCATED),
                (MAX_ARRAY_ELEMENTS + 1, codes::GGUF_INVALID_KV),
            ] {
                let mut w = Writer::new(false);
                let mut kv = Vec::new();
                w.string(&mut kv, b"k");
                w.u32(&mut kv, TYPE_ARRAY);
                w.u32(&mut kv, elem);
                w.u64(&mut kv, n);
                w.kvs.extend(kv);
                w.n_kv += 1;
                let f = one(&w.bytes(), code);
                if code == codes::GGUF_INVALID_KV {
                    assert!(f.problem.contains("over ggml's 2^30"), "{}", f.problem);
                }
            }
        }
    }

    /// An array of strings is compared with the room for its lengths before any is read:
    /// exactly enough room passes, less is reported for the whole array.
    #[test]
    fn string_arrays_need_room_for_their_lengths() {
        let array = |n: u64, rest: usize| {
            let mut w = Writer::new(false);
            let mut kv = Vec::new();
            w.string(&mut kv, b"k");
            w.u32(&mut kv, TYPE_ARRAY);
            w.u32(&mut kv, TYPE_STRING);
            w.u64(&mut kv, n);
            kv.extend(vec![0; rest]);
            w.kvs.extend(kv);
            w.n_kv += 1;
            w.bytes()
        };
        // Two empty strings end the file exactly.
        assert!(check_bytes("model.gguf", &array(2, 16)).is_empty());
        let f = one(&array(10, 50), codes::GGUF_TRUNCATED);
        assert!(
            f.problem.contains("needs 80 bytes where 50 bytes are left"),
            "{}",
            f.problem
        );
    }

    /// Four dimensions, a dimension of 0 and large element counts are all valid; a count of
    /// i64::MAX is where ggml's overflow check refuses.
    #[test]
    fn tensor_shape_edges() {
        let mut w = Writer::new(false);
        w.tensor("four", &[2, 2, 2, 2], 0, 64)
            .tensor("empty", &[4, 0], 0, 0)
            .tensor("zero", &[0], 0, 0);
        let findings = check_bytes("model.gguf", &w.bytes());
        assert!(findings.is_empty(), "{findings:#?}");
        let mut w = Writer::new(false);
        w.tensor("a", &[i64::MAX as u64], 24, 0);
        let f = one(&w.bytes(), codes::GGUF_INVALID_TENSOR_INFO);
        assert!(
            f.problem.contains("element count overflows"),
            "{}",
            f.problem
        );
        let mut w = Writer::new(false);
        w.tensor("a", &[i64::MAX as u64 - 1], 24, 0);
        let f = one(&w.bytes(), codes::GGUF_TENSOR_OUT_OF_BOUNDS);
        assert!(f.problem.contains("'a'"), "{}", f.problem);
    }

    /// The tensor data starts at the end of the infos padded to the alignment: a file of empty
    /// tensors may end exactly there; a file cut inside the padding says how much is missing.
    #[test]
    fn padding_before_the_data() {
        let mut w = Writer::new(false);
        w.tensor("z", &[0], 0, 0);
        let bytes = w.bytes();
        let end_of_infos = 24 + w.kvs.len() + w.infos.len();
        assert_eq!(bytes.len(), end_of_infos.next_multiple_of(32));
        assert!(bytes.len() - end_of_infos >= 5);
        assert!(check_bytes("model.gguf", &bytes).is_empty());
        let f = one(&bytes[..end_of_infos + 3], codes::GGUF_TRUNCATED);
        let want = format!(
            "the padding before the tensor data, which needs {} bytes where 3 bytes are left",
            bytes.len() - end_of_infos
        );
        assert!(f.problem.contains(&want), "{}", f.problem);
    }

    /// ggml's string cap is 2^30 bytes inclusive: a key of exactly that length is only too long
    /// for this file, one byte more is refused as over the cap.
    #[test]
    fn string_cap_is_inclusive() {
        for (len, code) in [
            (MAX_STRING_LENGTH, codes::GGUF_TRUNCATED),
            (MAX_STRING_LENGTH + 1, codes::GGUF_INVALID_KV),
        ] {
            let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
            bytes.extend(0u64.to_le_bytes());
            bytes.extend(1u64.to_le_bytes());
            bytes.extend(len.to_le_bytes());
            one(&bytes, code);
        }
    }

    /// A key that ends exactly at the end of the file is read; what is missing is its value.
    #[test]
    fn a_key_at_the_very_end_is_read_then_its_value_is_missing() {
        let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
        bytes.extend(0u64.to_le_bytes());
        bytes.extend(1u64.to_le_bytes());
        bytes.extend(3u64.to_le_bytes());
        bytes.extend(b"abc");
        let f = one(&bytes, codes::GGUF_TRUNCATED);
        assert!(
            f.problem
                .contains("key/value 1 of 1 (`abc`), which needs 4 bytes where 0 bytes are left"),
            "{}",
            f.problem
        );
    }

    /// A count over airlock's cap is compared with the records the rest of the file could
    /// hold: at least 24 bytes a tensor info and 14 a key/value.
    #[test]
    fn counts_over_the_cap_say_how_many_could_fit() {
        for (n_tensors, n_kv, rest, want) in [
            (
                MAX_TENSORS + 1,
                0,
                48,
                "more than the 48 bytes left after the header could hold (at most 2)",
            ),
            (
                0,
                MAX_KVS + 1,
                13,
                "more than the 13 bytes left after the header could hold (at most 0)",
            ),
            (
                0,
                MAX_KVS + 1,
                14,
                "more than the 14 bytes left after the header could hold (at most 1)",
            ),
        ] {
            let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
            bytes.extend(n_tensors.to_le_bytes());
            bytes.extend(n_kv.to_le_bytes());
            bytes.extend(vec![0; rest]);
            let f = one(&bytes, codes::GGUF_INVALID_HEADER);
            assert!(f.problem.contains(want), "{}", f.problem);
        }
    }

    #[test]
    fn the_fixtures() {
        let valid = fixtures().join("valid");
        assert!(check_file(&valid, "model.gguf").unwrap().is_empty());
        let findings = check_file(&valid, "model-big-endian.gguf").unwrap();
        only(&findings, codes::GGUF_BIG_ENDIAN, "model-big-endian.gguf");

        let corrupt = fixtures().join("corrupt");
        let cases = [
            ("truncated-in-data.gguf", codes::GGUF_TENSOR_OUT_OF_BOUNDS),
            ("truncated-in-metadata.gguf", codes::GGUF_TRUNCATED),
        ];
        for (name, code) in cases {
            only(&check_file(&corrupt, name).unwrap(), code, name);
        }
    }
}
