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
//!
//! What the check holds is bounded by two limits of airlock's own, not by the header: a legal
//! 90 MB header can list 1.3 million one-byte tensors, which a JSON tree of the header held
//! whole costs 1.7 GB. So the header is streamed from the file twice (a UTF-8 pass, then the
//! JSON parser) and each tensor is kept as a compact record (name, dtype, offsets, its shape in
//! one shared array); a header listing more than [`MAX_TENSORS`] tensors or
//! [`MAX_SHAPE_DIMS`] shape dimensions in all is refused (`safetensors-too-many-tensors`)
//! when the limit is reached, before anything more is kept. The delta patch's safetensors map
//! reads headers through the same [`list_tensors`].

use std::fmt;
use std::fs::File;
use std::io::{self, Read};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::read::{self, describe_start, human_size};
use super::{Finding, codes};

/// The reference reader's limit on N.
pub(crate) const MAX_HEADER_SIZE: u64 = 100_000_000;

/// Most tensors airlock reads from one header. The reference has no limit but the header's
/// 100 MB; real files stay far below this: the largest public checkpoints list tens of
/// thousands of tensors per shard, and a whole trillion-parameter mixture-of-experts model
/// with its quantization scales about 150,000 in all. At the limit the records take about
/// 30 MB.
pub(crate) const MAX_TENSORS: usize = 1 << 18;

/// Most shape dimensions airlock reads from one header, all tensors together: eight per
/// tensor at [`MAX_TENSORS`] (real tensors have one to five), 16 MiB of `u64`.
pub(crate) const MAX_SHAPE_DIMS: usize = 1 << 21;

/// Bytes of the header validated as UTF-8 at a time.
const UTF8_PIECE: usize = 1 << 20;

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
    /// One of the names of [`DTYPES`].
    pub dtype: &'static str,
    pub shape: Box<[u64]>,
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
    /// Over [`MAX_TENSORS`] or [`MAX_SHAPE_DIMS`]: what was exceeded.
    TooMany {
        what: String,
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
    // The header is streamed, never held: first checked as UTF-8, then parsed.
    match check_utf8(file, 8, n)? {
        Utf8::Valid => {}
        Utf8::Invalid { at } => return Ok(Err(Invalid::NotUtf8 { at })),
        Utf8::Short => return Ok(Err(Invalid::HeaderPastEnd { n, file_len })),
    }
    let listing = match list_tensors(read::Section::new(file, 8, n)) {
        Ok(l) => l,
        Err(ListError::Io(e)) => return Err(e),
        Err(ListError::Json(detail)) => return Ok(Err(Invalid::Json { detail })),
        Err(ListError::Limit(what)) => return Ok(Err(Invalid::TooMany { what })),
    };
    if let Some(detail) = listing.metadata_problem.clone() {
        return Ok(Err(Invalid::Json { detail }));
    }
    if let Some(t) = listing.tensors.iter().find(|t| t.dtype.bits().is_none()) {
        return Ok(Err(Invalid::Json {
            detail: format!("tensor `{}` has unknown dtype `{}`", t.name, t.dtype.name()),
        }));
    }
    Ok(validate(listing, n, file_len))
}

/// The outcome of [`check_utf8`].
enum Utf8 {
    Valid,
    /// The first bad byte, as an offset into the header.
    Invalid {
        at: usize,
    },
    /// The file ended first (it shrank since it was measured).
    Short,
}

/// Checks `[start, start + n)` of `file` as UTF-8 in pieces of [`UTF8_PIECE`] bytes (a
/// character cut by a piece boundary is carried into the next), as the reference checks the
/// whole header with `from_utf8` before parsing it.
fn check_utf8(file: &File, start: u64, n: u64) -> io::Result<Utf8> {
    let mut buf = vec![0u8; (n as usize).min(UTF8_PIECE) + 4];
    // `buf[..carry]` holds the start of a character cut by the last piece, at header offset
    // `base`.
    let mut base = 0u64;
    let mut carry = 0usize;
    loop {
        let remaining = n - base - carry as u64;
        if remaining == 0 {
            return Ok(if carry == 0 {
                Utf8::Valid
            } else {
                Utf8::Invalid { at: base as usize }
            });
        }
        let want = (buf.len() - carry).min(UTF8_PIECE).min(remaining as usize);
        let got = read::read_at(
            file,
            start + base + carry as u64,
            &mut buf[carry..carry + want],
        )?;
        if got < want {
            return Ok(Utf8::Short);
        }
        let filled = carry + got;
        match std::str::from_utf8(&buf[..filled]) {
            Ok(_) => {
                base += filled as u64;
                carry = 0;
            }
            Err(e) if e.error_len().is_none() => {
                let valid = e.valid_up_to();
                buf.copy_within(valid..filled, 0);
                carry = filled - valid;
                base += valid as u64;
            }
            Err(e) => {
                return Ok(Utf8::Invalid {
                    at: (base as usize) + e.valid_up_to(),
                });
            }
        }
    }
}

/// A tensor's dtype as the header names it: one the reference knows, or another string (kept
/// for the delta map, which compares names; the model check refuses it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dtype {
    /// A name of [`DTYPES`].
    Known(&'static str),
    /// Any other string.
    Other(Box<str>),
}

impl Dtype {
    pub(crate) fn name(&self) -> &str {
        match self {
            Dtype::Known(n) => n,
            Dtype::Other(n) => n,
        }
    }

    fn bits(&self) -> Option<u64> {
        match self {
            Dtype::Known(n) => dtype_bits(n).map(|(_, b)| b),
            Dtype::Other(_) => None,
        }
    }
}

/// One tensor entry as the header lists it.
#[derive(Debug)]
pub(crate) struct Listed {
    pub name: String,
    pub dtype: Dtype,
    /// Its shape: `dims[start..start + len]` of the [`Listing`].
    shape: (u32, u32),
    pub begin: u64,
    pub end: u64,
}

/// The tensors of a header in the order listed (a name listed twice keeps its last entry, as
/// the reference's map does), with their shapes in one array.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub tensors: Vec<Listed>,
    dims: Vec<u64>,
    /// Why `__metadata__` is not null or an object of strings, if it is not (the reference
    /// refuses it; the delta map ignores it).
    pub metadata_problem: Option<String>,
}

impl Listing {
    /// The shape of `t`.
    pub(crate) fn shape(&self, t: &Listed) -> &[u64] {
        let (start, len) = (t.shape.0 as usize, t.shape.1 as usize);
        &self.dims[start..start + len]
    }
}

/// Why a header could not be listed.
#[derive(Debug)]
pub(crate) enum ListError {
    /// Reading the header failed.
    Io(io::Error),
    /// Not the JSON shape the reference reads (serde's message, with line and column).
    Json(String),
    /// Over [`MAX_TENSORS`] or [`MAX_SHAPE_DIMS`]: what was exceeded.
    Limit(String),
}

/// Lists the tensors of a safetensors JSON header read from `json` (streamed: only the
/// records are kept): an object whose `__metadata__` is anything (see
/// [`Listing::metadata_problem`]) and whose other members are objects with `dtype` (a
/// string), `shape` (an array of non-negative integers) and `data_offsets` (exactly two
/// non-negative integers); other members of a tensor object are ignored, as serde ignores
/// unknown fields, and a field given twice is refused, as serde refuses it. Stops at
/// [`MAX_TENSORS`] tensors or [`MAX_SHAPE_DIMS`] dimensions.
pub(crate) fn list_tensors(json: impl Read) -> Result<Listing, ListError> {
    let mut listing = Listing::default();
    let mut limit = None;
    // serde_json reads a reader byte by byte: buffered, so a file section is not a read per byte.
    let mut de = serde_json::Deserializer::from_reader(io::BufReader::with_capacity(1 << 16, json));
    let walked = Walk {
        out: &mut listing,
        limit: &mut limit,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    if let Err(e) = walked {
        return Err(match limit {
            Some(what) => ListError::Limit(what),
            None if e.is_io() => ListError::Io(e.into()),
            None => ListError::Json(e.to_string()),
        });
    }
    keep_last_of_each_name(&mut listing.tensors);
    Ok(listing)
}

/// [`list_tensors`] over `[start, start + len)` of `file`, streamed through positioned reads.
pub(crate) fn list_tensors_at(file: &File, start: u64, len: u64) -> Result<Listing, ListError> {
    list_tensors(read::Section::new(file, start, len))
}

/// Drops every entry whose name is listed again later.
fn keep_last_of_each_name(tensors: &mut Vec<Listed>) {
    let mut order: Vec<u32> = (0..tensors.len() as u32).collect();
    order.sort_by(|&a, &b| tensors[a as usize].name.cmp(&tensors[b as usize].name));
    let mut drop = vec![false; tensors.len()];
    for w in order.windows(2) {
        if tensors[w[0] as usize].name == tensors[w[1] as usize].name {
            // A stable sort keeps listing order among equal names: all but the last go.
            drop[w[0] as usize] = true;
        }
    }
    if drop.iter().any(|d| *d) {
        let mut i = 0;
        tensors.retain(|_| {
            i += 1;
            !drop[i - 1]
        });
    }
}

/// The header object: each member is `__metadata__` or a tensor.
struct Walk<'a> {
    out: &'a mut Listing,
    limit: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the header as a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            if name == "__metadata__" {
                let problem = map.next_value_seed(Metadata)?;
                if self.out.metadata_problem.is_none() {
                    self.out.metadata_problem = problem;
                }
                continue;
            }
            if self.out.tensors.len() == MAX_TENSORS {
                *self.limit = Some(format!("lists more than {MAX_TENSORS} tensors"));
                return Err(de::Error::custom("too many tensors"));
            }
            let info = map.next_value_seed(Info {
                name: &name,
                dims: &mut self.out.dims,
                limit: self.limit,
            })?;
            self.out.tensors.push(Listed {
                name,
                dtype: info.0,
                shape: info.1,
                begin: info.2.0,
                end: info.2.1,
            });
        }
        Ok(())
    }
}

/// `__metadata__`: `None` when it is null or an object of strings, else why not.
struct Metadata;

impl<'de> DeserializeSeed<'de> for Metadata {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

const NOT_STRINGS: &str = "`__metadata__` is not an object of strings";

impl<'de> Visitor<'de> for Metadata {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or an object of strings")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut problem = None;
        while let Some(key) = map.next_key::<String>()? {
            let is_string = map.next_value_seed(IsString)?;
            if !is_string && problem.is_none() {
                problem = Some(format!("`__metadata__` value of `{key}` is not a string"));
            }
        }
        Ok(problem)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Some(NOT_STRINGS.into()))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Some(NOT_STRINGS.into()))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Some(NOT_STRINGS.into()))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Some(NOT_STRINGS.into()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Some(NOT_STRINGS.into()))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Some(NOT_STRINGS.into()))
    }
}

/// Whether a JSON value is a string (any other value is skipped over).
struct IsString;

impl<'de> DeserializeSeed<'de> for IsString {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IsString {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

/// A tensor object: its dtype, shape (start and length in the shared array) and offsets.
struct Info<'a> {
    name: &'a str,
    dims: &'a mut Vec<u64>,
    limit: &'a mut Option<String>,
}

/// The members of a tensor object airlock reads.
enum Field {
    Dtype,
    Shape,
    Offsets,
    Other,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "dtype" => Field::Dtype,
                    "shape" => Field::Shape,
                    "data_offsets" => Field::Offsets,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

type InfoValue = (Dtype, (u32, u32), (u64, u64));

impl<'de> DeserializeSeed<'de> for Info<'_> {
    type Value = InfoValue;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<InfoValue, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Info<'_> {
    type Value = InfoValue;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object for tensor `{}`", self.name)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InfoValue, A::Error> {
        let name = self.name;
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Dtype if dtype.is_some() => return Err(de::Error::duplicate_field("dtype")),
                Field::Shape if shape.is_some() => return Err(de::Error::duplicate_field("shape")),
                Field::Offsets if offsets.is_some() => {
                    return Err(de::Error::duplicate_field("data_offsets"));
                }
                Field::Dtype => dtype = Some(map.next_value_seed(DtypeName { name })?),
                Field::Shape => {
                    shape = Some(map.next_value_seed(Shape {
                        name,
                        dims: &mut *self.dims,
                        limit: &mut *self.limit,
                    })?)
                }
                Field::Offsets => offsets = Some(map.next_value_seed(Offsets { name })?),
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let missing = |what: &str| de::Error::custom(format!("tensor `{name}` has no `{what}`"));
        Ok((
            dtype.ok_or_else(|| missing("dtype"))?,
            shape.ok_or_else(|| missing("shape"))?,
            offsets.ok_or_else(|| missing("data_offsets"))?,
        ))
    }
}

/// A dtype string.
struct DtypeName<'a> {
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for DtypeName<'_> {
    type Value = Dtype;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Dtype, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for DtypeName<'_> {
    type Value = Dtype;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a dtype string for tensor `{}`", self.name)
    }
    fn visit_str<E>(self, v: &str) -> Result<Dtype, E> {
        Ok(match dtype_bits(v) {
            Some((known, _)) => Dtype::Known(known),
            None => Dtype::Other(v.into()),
        })
    }
}

/// A shape: non-negative integers, appended to the shared array.
struct Shape<'a> {
    name: &'a str,
    dims: &'a mut Vec<u64>,
    limit: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Shape<'_> {
    type Value = (u32, u32);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u32, u32), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Shape<'_> {
    type Value = (u32, u32);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a shape of non-negative integers for tensor `{}`",
            self.name
        )
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(u32, u32), A::Error> {
        let start = self.dims.len();
        while let Some(d) = seq.next_element::<u64>()? {
            if self.dims.len() == MAX_SHAPE_DIMS {
                *self.limit = Some(format!(
                    "lists more than {MAX_SHAPE_DIMS} shape dimensions in all"
                ));
                return Err(de::Error::custom("too many dimensions"));
            }
            self.dims.push(d);
        }
        // Both fit: the array never holds more than MAX_SHAPE_DIMS.
        Ok((start as u32, (self.dims.len() - start) as u32))
    }
}

/// `data_offsets`: exactly two non-negative integers.
struct Offsets<'a> {
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for Offsets<'_> {
    type Value = (u64, u64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u64, u64), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Offsets<'_> {
    type Value = (u64, u64);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "data_offsets of two non-negative integers for tensor `{}`",
            self.name
        )
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(u64, u64), A::Error> {
        let begin = seq.next_element::<u64>()?;
        let end = match begin {
            Some(_) => seq.next_element::<u64>()?,
            None => None,
        };
        let mut count = usize::from(begin.is_some()) + usize::from(end.is_some());
        while seq.next_element::<IgnoredAny>()?.is_some() {
            count += 1;
        }
        match (begin, end, count) {
            (Some(b), Some(e), 2) => Ok((b, e)),
            _ => Err(de::Error::custom(format!(
                "tensor `{}` has {count} data_offsets, not 2",
                self.name
            ))),
        }
    }
}

/// `Metadata::validate` and the final length comparison of `read_metadata`.
fn validate(listing: Listing, n: u64, file_len: u64) -> Result<Header, Invalid> {
    let Listing {
        mut tensors, dims, ..
    } = listing;
    let shape = |t: &Listed| &dims[t.shape.0 as usize..(t.shape.0 + t.shape.1) as usize];
    // The reference sorts by offsets only (ties in hash order); the name makes it deterministic.
    tensors.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    let mut start = 0u64;
    for e in &tensors {
        if e.begin != start || e.end < e.begin {
            return Err(Invalid::Offset {
                name: e.name.clone(),
                begin: e.begin,
                end: e.end,
                expected: start,
            });
        }
        start = e.end;
        let bits = e.dtype.bits().unwrap_or(8);
        let Some(nbits) = shape(e)
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
            let dtype = match e.dtype {
                Dtype::Known(d) => d,
                Dtype::Other(_) => "?",
            };
            return Err(Invalid::SizeMismatch {
                name: e.name.clone(),
                dtype,
                shape: shape(e).to_vec(),
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
        tensors: tensors
            .into_iter()
            .map(|e| TensorInfo {
                dtype: match e.dtype {
                    Dtype::Known(d) => d,
                    // read_header refuses unknown dtypes before validating.
                    Dtype::Other(_) => "?",
                },
                shape: shape(&e).into(),
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
        Invalid::TooMany { what } => error(
            codes::SAFETENSORS_TOO_MANY_TENSORS,
            format!(
                "has a header that {what}, over what airlock checks in one file ({MAX_TENSORS} \
                 tensors, {MAX_SHAPE_DIMS} shape dimensions; the largest real checkpoints list \
                 tens of thousands of tensors per file), so it was not checked further"
            ),
            "a file like this is damaged or made to exhaust memory; if it is genuine, pack \
             with --no-model-checks",
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

    /// A valid header of `count` one-byte U8 tensors, and its data length.
    pub(crate) fn many_tensors(count: usize) -> String {
        let mut h = String::with_capacity(count * 64 + 2);
        h.push('{');
        for i in 0..count {
            if i > 0 {
                h.push(',');
            }
            h.push_str(&format!(
                r#""t{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
                i + 1
            ));
        }
        h.push('}');
        h
    }

    /// Issue 26 item 4: a legal header may list millions of tensors; the check reads up to
    /// MAX_TENSORS of them and refuses the file at the next one, without going on.
    #[test]
    fn a_header_over_the_tensor_limit_is_refused() {
        let at = make(&many_tensors(MAX_TENSORS), MAX_TENSORS);
        assert!(check_bytes("m.safetensors", &at).is_empty());
        let over = make(&many_tensors(MAX_TENSORS + 1), MAX_TENSORS + 1);
        let f = one("m.safetensors", &over, codes::SAFETENSORS_TOO_MANY_TENSORS);
        assert!(
            f.problem
                .contains(&format!("more than {MAX_TENSORS} tensors")),
            "{}",
            f.problem
        );
        assert!(f.fix.contains("--no-model-checks"), "{}", f.fix);
        // The listing stops at the limit: the parser never holds more records.
        let header = many_tensors(MAX_TENSORS + 1);
        assert!(matches!(
            list_tensors(header.as_bytes()),
            Err(ListError::Limit(_))
        ));
    }

    #[test]
    fn shapes_over_the_dimension_limit_are_refused() {
        let dims = vec!["1"; MAX_SHAPE_DIMS].join(",");
        let header = format!(r#"{{"a":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,1]}}}}"#);
        assert!(check_bytes("m.safetensors", &make(&header, 1)).is_empty());
        let header = format!(
            r#"{{"a":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,1]}},"b":{{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}}}"#
        );
        let f = one(
            "m.safetensors",
            &make(&header, 2),
            codes::SAFETENSORS_TOO_MANY_TENSORS,
        );
        assert!(f.problem.contains("shape dimensions"), "{}", f.problem);
    }

    /// As the reference's map: a name listed twice keeps its last entry; a field given twice
    /// in one tensor object is refused.
    #[test]
    fn duplicate_names_keep_the_last_entry_and_duplicate_fields_are_refused() {
        let twice = r#"{"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
        assert!(check_bytes("m.safetensors", &make(twice, 2)).is_empty());
        let listing = list_tensors(twice.as_bytes()).unwrap();
        assert_eq!(listing.tensors.len(), 1);
        assert_eq!(listing.shape(&listing.tensors[0]), [2]);
        let field_twice = r#"{"a":{"dtype":"U8","shape":[2],"shape":[2],"data_offsets":[0,2]}}"#;
        let f = one(
            "m.safetensors",
            &make(field_twice, 2),
            codes::SAFETENSORS_HEADER_INVALID,
        );
        assert!(
            f.problem.contains("duplicate field `shape`"),
            "{}",
            f.problem
        );
    }

    /// The header is checked as UTF-8 in pieces: a character cut by a piece boundary is
    /// valid, and a bad byte past the first piece is reported at its header offset.
    #[test]
    fn utf8_is_checked_across_pieces() {
        // "é" (2 bytes) straddles the first piece boundary inside the metadata value.
        let pad = "x".repeat(UTF8_PIECE - r#"{"__metadata__":{"k":""#.len() - 1);
        let header = format!(r#"{{"__metadata__":{{"k":"{pad}é"}}}}"#);
        let bytes = make(&header, 0);
        assert!(check_bytes("m.safetensors", &bytes).is_empty());
        let mut bad = bytes.clone();
        let at = 8 + UTF8_PIECE + 5;
        bad[at] = 0xff;
        let f = one("m.safetensors", &bad, codes::SAFETENSORS_HEADER_NOT_UTF8);
        assert!(
            f.problem.contains(&format!("offset {}", at - 8)),
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
