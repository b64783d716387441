//! The value scan: weights that are right, not just bytes that match.
//!
//! The rest of [`crate::inspect`] reads headers; this reads every value, because the damage it
//! looks for leaves the headers intact. A checkpoint saved from a run that diverged holds NaN
//! or Inf; a save (or a parallel download) that died after preallocating its file leaves zeros
//! where weights should be, in a region that runs across tensors; a shard written from a
//! half-initialised model holds all-zero tensors. Such files load without an error and produce
//! garbage, and the signed digests of a bundle faithfully carry them. So the scan runs inside
//! the passes that already read every byte (the pack's read pass, the receipt comparison of
//! `check`, the blob hashing of `check --hf-cache`): a [`Scanner`] is fed the file's bytes in
//! whatever pieces the pass reads, knowing the tensors from the header ([`Layout::read`]), and
//! keeps a few words per tensor, never a tensor. The hot loops are in `kernels`.
//!
//! What is scanned (a file named `*.safetensors` or `*.gguf` whose header passes the model
//! checks): safetensors F64, F32, F16, BF16, F8_E4M3 and F8_E5M2 tensors, value by value; GGUF
//! F64, F32, F16 and BF16 tensors, and the scales of the quantized block types (the fp16 `d`,
//! `dmin`, `m` and `s` of Q4_0 … Q6_K, the IQ and TQ types, Q1_0, Q2_0; the f32 `d` of Q8_K;
//! the E8M0 exponent of MXFP4): a NaN or Inf scale makes its whole block NaN or Inf (not in a
//! big-endian GGUF, whose writers disagree on the byte order of a block's scales). Integer
//! tensors and the formats without a checkable float (BOOL, F4, F6, F8_E8M0, the FNUZ F8
//! types, IQ1_M, NVFP4) take part in the zero-region check only.
//!
//! The findings ([`codes`]): NaN and ±Inf are errors (`tensor-nan`, `tensor-inf`), and so is a
//! zero-filled region (`tensor-zero-region`): a run of zero bytes of at least
//! [`ZERO_REGION_MIN`] that runs across a tensor boundary with at least [`ZERO_REGION_EDGE`] of
//! zeros on both sides of it, or that reaches the end of the tensor data after crossing one.
//! Legitimately zero data in real checkpoints stays below that: a zero bias is at most a few
//! hundred KiB (one value per output row) and is surrounded by trained weights; the untrained
//! rows of an embedding (Llama 3's reserved tokens, about 2 MB of zeros at the end of
//! `embed_tokens`) end at a boundary the next tensor does not continue; GGUF pads between
//! tensors with fewer than `general.alignment` zero bytes. A file preallocated and never
//! written is zeros for megabytes to gigabytes, through whole tensors. Tensors of at least two
//! values that are all zero (`tensor-all-zero`) or all one value (`tensor-constant`) are
//! warnings, except the known-benign ones ([`benign_zero`], [`benign_constant`]): a bias that
//! is all zero (`*.bias`), a norm's weight that is all 1.0 (`*norm*.weight`, `ln_f.weight`,
//! `LayerNorm.gamma`). Those are what initialisation leaves and training often keeps (the
//! demo model has them), so they are counted in the summary but are not findings (issue 33
//! item 6: every pack, verify, unpack and check of the demo warned about its norms). An
//! untrained checkpoint still shows, by its weight matrices. The constant check compares bits,
//! so it applies to float tensors, not to quantized blocks.
//!
//! One finding per file and code names the first tensor (its dtype, shape, count and the index
//! of the first bad value) and how many more are affected; [`Summary`] counts everything, and is
//! what `pack` records in the signed manifest (its `values`, FORMAT.md section 20) and `check`
//! compares against.

use std::fs::File;
use std::io;

use serde::Serialize;

use super::format::{self, Format};
use super::read::human_size;
use super::{Finding, codes, gguf, safetensors};
use crate::display::{count_grouped, grouped};

mod kernels;
mod tree;

pub use tree::{hash_and_scan, scan_tree, scanner_for};

/// The version of these rules, recorded with each summary: a later airlock that changes them
/// compares only summaries made by the same rules.
pub const RULES: u32 = 1;
/// Shortest run of zero bytes that is a zero-filled region.
pub const ZERO_REGION_MIN: u64 = 1 << 20;
/// Zero bytes needed on both sides of a tensor boundary inside the run.
pub const ZERO_REGION_EDGE: u64 = 4 << 10;
/// Tensors (or regions) kept by name per finding code and file; the rest are counted.
const NOTES_PER_CODE: usize = 8;
/// Most findings per file (one per code).
pub const MAX_FINDINGS_PER_FILE: usize = 5;
/// Longest `problem` of a finding, in bytes (tensor names are shortened to fit), so a pack
/// can bound the manifest before it reads a byte.
pub const MAX_PROBLEM_BYTES: usize = 1024;
/// Characters of a tensor name a finding shows.
const NAME_SHOWN: usize = 120;

/// Whether the name of the file at `path` (`/`-separated) alone says the value scan reads it:
/// a `*.safetensors` or `*.gguf` name, in any ASCII case. Other files are read when their
/// first bytes say safetensors or GGUF ([`format::identify`]).
pub fn named_for_scan(path: &str) -> bool {
    format::by_name(path).is_some_and(Format::has_values)
}

/// The two last dot-separated parts of a tensor name, lowercased: the parameter (`weight`,
/// `bias`) and the module that owns it (`input_layernorm`, `attn_norm`, `ln_f`).
fn param_and_module(name: &str) -> (String, String) {
    let lower = name.to_ascii_lowercase();
    let mut parts = lower.rsplit('.');
    let param = parts.next().unwrap_or_default().to_string();
    let module = parts.next().unwrap_or_default().to_string();
    (param, module)
}

/// Whether a module name is a normalisation layer's: `*norm*` (`input_layernorm`,
/// `attn_norm`, `LayerNorm`, `final_layer_norm`), or GPT-2's and Falcon's `ln`, `ln_1`,
/// `ln_f`, `ln_attn`, `ln1`.
fn is_norm_module(module: &str) -> bool {
    module.contains("norm")
        || module == "ln"
        || module.starts_with("ln_")
        || module
            .strip_prefix("ln")
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether an all-zero tensor named `name` is known to be benign: a bias (`*.bias`, or a
/// norm's `beta`), which initialisation sets to zero.
pub(crate) fn benign_zero(name: &str) -> bool {
    let (param, module) = param_and_module(name);
    param == "bias" || (param == "beta" && is_norm_module(&module))
}

/// Whether a tensor named `name` whose values all equal `value` is known to be benign: a
/// norm's weight (`weight`, `gamma`, `scale` of a norm module) at exactly 1.0, as
/// initialisation sets it.
pub(crate) fn benign_constant(name: &str, value: f64) -> bool {
    let (param, module) = param_and_module(name);
    value == 1.0
        && matches!(param.as_str(), "weight" | "gamma" | "scale")
        && is_norm_module(&module)
}

/// A float format whose values are checked one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Float {
    F64,
    F32,
    F16,
    Bf16,
    E4m3,
    E5m2,
}

impl Float {
    fn size(self) -> usize {
        match self {
            Float::F64 => 8,
            Float::F32 => 4,
            Float::F16 | Float::Bf16 => 2,
            Float::E4m3 | Float::E5m2 => 1,
        }
    }

    /// The value of the bits `x` (the low `size` bytes), for messages.
    fn value(self, x: u64) -> f64 {
        match self {
            Float::F64 => f64::from_bits(x),
            Float::F32 => f64::from(f32::from_bits(x as u32)),
            Float::Bf16 => f64::from(f32::from_bits((x as u32) << 16)),
            Float::F16 => minifloat(x, 5, 10, true),
            Float::E4m3 => minifloat(x, 4, 3, false),
            Float::E5m2 => minifloat(x, 5, 2, true),
        }
    }
}

/// A sign, `e` exponent bits and `m` mantissa bits, IEEE-style (`ieee`: the top exponent is
/// Inf/NaN; otherwise only all ones is NaN, as in FP8 E4M3).
fn minifloat(x: u64, e: u32, m: u32, ieee: bool) -> f64 {
    let sign = if x >> (e + m) & 1 == 1 { -1.0 } else { 1.0 };
    let exp = (x >> m) & ((1 << e) - 1);
    let man = x & ((1 << m) - 1);
    let bias = (1i32 << (e - 1)) - 1;
    let top = (1 << e) - 1;
    if exp == top && (ieee || man == (1 << m) - 1) {
        return if ieee && man == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    let frac = man as f64 / f64::from(1u32 << m);
    if exp == 0 {
        sign * frac * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + frac) * 2f64.powi(exp as i32 - bias)
    }
}

/// Where a scale sits in a quantized block.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scale {
    /// An IEEE half at this byte offset.
    F16(usize),
    /// An IEEE single at this byte offset.
    F32(usize),
    /// An E8M0 exponent byte at this offset (0xFF is NaN).
    E8m0(usize),
}

/// A quantized block type: its size, the values it holds, and its scales with their names in
/// ggml's structs (`ggml-common.h`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocks {
    bytes: usize,
    elements: u64,
    scales: &'static [(Scale, &'static str)],
}

/// How a tensor's values are checked.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// Value by value.
    Float(Float),
    /// The scales of each block, and the all-zero check on the bytes.
    Blocks(Blocks),
    /// The zero-region check only (integers, formats without a checkable float).
    Bytes,
}

impl Kind {
    /// Bytes of one element or block.
    fn unit(self) -> usize {
        match self {
            Kind::Float(f) => f.size(),
            Kind::Blocks(b) => b.bytes,
            Kind::Bytes => 1,
        }
    }
}

const D0: &[(Scale, &str)] = &[(Scale::F16(0), "d")];
const DM: &[(Scale, &str)] = &[(Scale::F16(0), "d"), (Scale::F16(2), "m")];
const DMIN: &[(Scale, &str)] = &[(Scale::F16(0), "d"), (Scale::F16(2), "dmin")];

fn blocks(bytes: usize, elements: u64, scales: &'static [(Scale, &'static str)]) -> Kind {
    Kind::Blocks(Blocks {
        bytes,
        elements,
        scales,
    })
}

/// The check for a ggml type (ids and layouts as in `ggml-common.h`; sizes as in
/// [`gguf`]'s type table, which a unit test holds them to).
fn gguf_kind(type_id: i32) -> Kind {
    match type_id {
        0 => Kind::Float(Float::F32),
        1 => Kind::Float(Float::F16),
        28 => Kind::Float(Float::F64),
        30 => Kind::Float(Float::Bf16),
        2 => blocks(18, 32, D0),
        3 => blocks(20, 32, DM),
        6 => blocks(22, 32, D0),
        7 => blocks(24, 32, DM),
        8 => blocks(34, 32, D0),
        9 => blocks(36, 32, &[(Scale::F16(0), "d"), (Scale::F16(2), "s")]),
        10 => blocks(84, 256, &[(Scale::F16(80), "d"), (Scale::F16(82), "dmin")]),
        11 => blocks(110, 256, &[(Scale::F16(108), "d")]),
        12 => blocks(144, 256, DMIN),
        13 => blocks(176, 256, DMIN),
        14 => blocks(210, 256, &[(Scale::F16(208), "d")]),
        15 => blocks(292, 256, &[(Scale::F32(0), "d")]),
        16 => blocks(66, 256, D0),
        17 => blocks(74, 256, D0),
        18 => blocks(98, 256, D0),
        19 => blocks(50, 256, D0),
        20 => blocks(18, 32, D0),
        21 => blocks(110, 256, D0),
        22 => blocks(82, 256, D0),
        23 => blocks(136, 256, D0),
        34 => blocks(54, 256, &[(Scale::F16(52), "d")]),
        35 => blocks(66, 256, &[(Scale::F16(64), "d")]),
        39 => blocks(17, 32, &[(Scale::E8m0(0), "e")]),
        41 => blocks(18, 128, D0),
        42 => blocks(18, 64, D0),
        _ => Kind::Bytes,
    }
}

fn safetensors_kind(dtype: &str) -> Kind {
    match dtype {
        "F64" => Kind::Float(Float::F64),
        "F32" => Kind::Float(Float::F32),
        "F16" => Kind::Float(Float::F16),
        "BF16" => Kind::Float(Float::Bf16),
        "F8_E4M3" => Kind::Float(Float::E4m3),
        "F8_E5M2" => Kind::Float(Float::E5m2),
        _ => Kind::Bytes,
    }
}

/// One tensor, with its bytes' place in the file.
#[derive(Clone, Debug)]
struct Tensor {
    name: String,
    dtype: &'static str,
    /// As the format lists it (GGUF: innermost dimension first).
    shape: Box<[u64]>,
    begin: u64,
    end: u64,
    kind: Kind,
}

/// The tensors of one file, from its header: what the scanner needs to know where each value
/// is.
#[derive(Clone, Debug)]
pub struct Layout {
    format: &'static str,
    big_endian: bool,
    /// Sorted by `begin`; they do not overlap.
    tensors: Vec<Tensor>,
    data_start: u64,
    data_end: u64,
}

impl Layout {
    /// The layout of `file` (`len` bytes), a file whose first bytes are a safetensors or GGUF
    /// header ([`format::by_content`]) that passes the model checks; `None` for anything else
    /// (the model checks report what is wrong with it). Reads the header only, through
    /// positioned reads, so it can be called on the handle a pass is about to read
    /// sequentially. For a file with a name, [`Layout::of`].
    ///
    /// # Errors
    ///
    /// Reading the header failed.
    pub fn read(file: &File, len: u64) -> io::Result<Option<Layout>> {
        Layout::of("", file, len)
    }

    /// The layout of the file `rel` (`/`-separated) open as `file` (`len` bytes): read as the
    /// safetensors or GGUF file [`format::identify`] says it is (the model checks' dispatch,
    /// by a safetensors or GGUF name, else by the first bytes, so a GGUF named `model.bin` is
    /// scanned), when its header passes the model checks; `None` otherwise.
    ///
    /// # Errors
    ///
    /// Reading the header failed.
    pub fn of(rel: &str, file: &File, len: u64) -> io::Result<Option<Layout>> {
        match format::identify_file(rel, file, len)? {
            Some(Format::Gguf) => Ok(gguf::parsed(file, len)?.map(Layout::gguf)),
            Some(Format::Safetensors) => Layout::safetensors(file, len),
            _ => Ok(None),
        }
    }

    fn safetensors(file: &File, len: u64) -> io::Result<Option<Layout>> {
        let header = match safetensors::read_header(file, len)? {
            Ok(h) => h,
            Err(_) => return Ok(None),
        };
        let mut n = [0u8; 8];
        super::read::read_at(file, 0, &mut n)?;
        let data_start = 8 + u64::from_le_bytes(n);
        let tensors = header
            .tensors
            .into_iter()
            .map(|t| Tensor {
                kind: safetensors_kind(t.dtype),
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                begin: data_start + t.begin,
                end: data_start + t.end,
            })
            .collect();
        Ok(Some(Layout::new("safetensors", false, tensors, data_start)))
    }

    fn gguf(parsed: gguf::Parsed) -> Layout {
        let start = parsed.data_start;
        let tensors = parsed
            .tensors
            .into_iter()
            .map(|t| Tensor {
                kind: match gguf_kind(t.type_id) {
                    // gguf-py's writer leaves quantized blocks in little-endian order in a
                    // big-endian file, gguf-convert-endian swaps their scales: which order a
                    // block is in is not recorded, so only the all-zero check applies.
                    Kind::Blocks(b) if parsed.big_endian => {
                        Kind::Blocks(Blocks { scales: &[], ..b })
                    }
                    kind => kind,
                },
                dtype: gguf::type_name(t.type_id),
                shape: t.ne[..t.n_dims as usize]
                    .iter()
                    .map(|&d| d as u64)
                    .collect(),
                begin: start + t.offset,
                end: start + t.offset + t.nbytes,
                name: t.name,
            })
            .collect();
        Layout::new("gguf", parsed.big_endian, tensors, start)
    }

    fn new(
        format: &'static str,
        big_endian: bool,
        mut tensors: Vec<Tensor>,
        data_start: u64,
    ) -> Layout {
        tensors.sort_by_key(|t| (t.begin, t.end));
        let data_end = tensors.iter().map(|t| t.end).max().unwrap_or(data_start);
        Layout {
            format,
            big_endian,
            tensors,
            data_start,
            data_end,
        }
    }

    /// `safetensors` or `gguf`.
    pub fn format(&self) -> &'static str {
        self.format
    }
}

/// One tensor's running state: a few words, whatever its size.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Acc {
    /// Whole elements (or blocks) seen.
    units: u64,
    /// The first element's bits.
    first: u64,
    /// OR of every element's bits (for blocks: of every byte).
    nz: u64,
    /// OR of every element XOR the first.
    diff: u64,
    nan: u64,
    first_nan: u64,
    inf_pos: u64,
    inf_neg: u64,
    first_inf: u64,
}

impl Acc {
    fn nan(&mut self, index: u64) {
        if self.nan == 0 {
            self.first_nan = index;
        }
        self.nan += 1;
    }

    fn inf(&mut self, index: u64, negative: bool) {
        if self.inf_pos + self.inf_neg == 0 {
            self.first_inf = index;
        }
        if negative {
            self.inf_neg += 1;
        } else {
            self.inf_pos += 1;
        }
    }
}

/// What one file's scan counted: the part recorded in the signed manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// `safetensors` or `gguf`.
    pub format: &'static str,
    /// Tensors in the file.
    pub tensors: u64,
    /// Tensors whose values were checked (the others take part in the zero-region check only).
    pub checked: u64,
    /// NaN values (for quantized tensors: NaN scales).
    pub nan: u64,
    /// ±Inf values (for quantized tensors: infinite scales).
    pub inf: u64,
    /// Tensors of at least two values, all zero.
    pub zero_tensors: u64,
    /// Tensors of at least two values, all equal and not zero (float tensors only).
    pub constant_tensors: u64,
    /// Zero-filled regions across tensor boundaries.
    pub zero_regions: u64,
}

/// A tensor with a finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Note {
    /// The tensor's name.
    pub tensor: String,
    /// Its dtype as the format names it.
    pub dtype: &'static str,
    /// Its shape as the format lists it.
    pub shape: Box<[u64]>,
    /// NaN or Inf values (or scales), or the tensor's values for the all-zero and constant
    /// findings.
    pub count: u64,
    /// The first bad value's element index (row-major as listed); for a bad block scale, the
    /// block's first element.
    pub first: u64,
    /// For a quantized tensor, its block scale names (`d`, `dmin`, …): NaN and Inf count
    /// blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scales: Option<String>,
    /// For a constant tensor: the value. For Inf: `+Inf` and `-Inf` counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A zero-filled region.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Region {
    /// Its first byte's offset in the file.
    pub start: u64,
    /// The offset just past its last byte.
    pub end: u64,
    /// The tensor it starts in (or the first one after the padding it starts in).
    pub first_tensor: String,
    /// The element of `first_tensor` it starts at.
    pub first_element: u64,
    /// The tensor it ends in.
    pub last_tensor: String,
    /// Tensor boundaries inside it.
    pub boundaries: u64,
}

/// The result of scanning one file.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FileScan {
    /// The counts.
    pub summary: Summary,
    /// Tensors holding NaN: how many.
    pub nan_tensors: u64,
    /// Tensors holding Inf: how many.
    pub inf_tensors: u64,
    /// The first tensors holding NaN.
    pub nan_notes: Vec<Note>,
    /// The first tensors holding Inf.
    pub inf_notes: Vec<Note>,
    /// The first all-zero tensors, known-benign ones ([`benign_zero`]) left out.
    pub zero_notes: Vec<Note>,
    /// The first constant tensors, known-benign ones ([`benign_constant`]) left out.
    pub constant_notes: Vec<Note>,
    /// All-zero tensors that are biases: counted in the summary, not findings.
    pub benign_zero_tensors: u64,
    /// Constant tensors that are norm weights at 1.0: counted in the summary, not findings.
    pub benign_constant_tensors: u64,
    /// The first zero-filled regions.
    pub regions: Vec<Region>,
}

/// Runs of zero bytes through the tensor data, and the tensor boundaries inside the open one.
#[derive(Debug, Default)]
struct ZeroRuns {
    /// Where the open run started.
    start: Option<u64>,
    /// The first tensor start inside the open run.
    first_boundary: Option<u64>,
    /// The first tensor start inside the open run with [`ZERO_REGION_EDGE`] zeros before it.
    edge_boundary: Option<u64>,
    /// Regions found: (start, end).
    found: Vec<(u64, u64)>,
    count: u64,
}

impl ZeroRuns {
    /// A tensor starts at `b`.
    fn boundary(&mut self, b: u64) {
        let Some(start) = self.start else {
            return;
        };
        if self.first_boundary.is_none() {
            self.first_boundary = Some(b);
        }
        if self.edge_boundary.is_none() && b - start >= ZERO_REGION_EDGE {
            self.edge_boundary = Some(b);
        }
    }

    /// The bytes `seg`, at offset `pos`.
    fn feed(&mut self, pos: u64, seg: &[u8]) {
        let lead = kernels::leading_zeros(seg);
        if lead == seg.len() {
            self.start.get_or_insert(pos);
            return;
        }
        if self.start.is_some() {
            self.close(pos + lead as u64, false);
        }
        let trail = kernels::trailing_zeros(seg);
        if trail > 0 {
            self.start = Some(pos + (seg.len() - trail) as u64);
        }
    }

    /// Ends the open run at `end` (`at_data_end`: where the tensor data ends).
    fn close(&mut self, end: u64, at_data_end: bool) {
        let (Some(start), first, edge) = (
            self.start.take(),
            self.first_boundary.take(),
            self.edge_boundary.take(),
        ) else {
            return;
        };
        if end - start < ZERO_REGION_MIN {
            return;
        }
        let across_edges = edge.is_some_and(|b| b < end && end - b >= ZERO_REGION_EDGE);
        let across_to_end = at_data_end && first.is_some_and(|b| b < end);
        if across_edges || across_to_end {
            self.count += 1;
            if self.found.len() < NOTES_PER_CODE {
                self.found.push((start, end));
            }
        }
    }
}

/// Scans one file's bytes as they stream past, in any pieces.
///
/// Feed it every byte of the file from the start, in order ([`Scanner::update`]), then
/// [`Scanner::finish`]. Memory: the layout, one tensor's [`Acc`], a partial element or block
/// (at most 292 bytes) carried between pieces, and the notes kept.
pub struct Scanner {
    layout: Layout,
    /// Offset of the next byte.
    pos: u64,
    /// The first tensor not finished (all before it are).
    next: usize,
    acc: Acc,
    /// The start of an element or block cut by the end of a piece.
    carry: Vec<u8>,
    zero: ZeroRuns,
    out: FileScan,
}

impl Scanner {
    /// A scanner for a file laid out as `layout`.
    pub fn new(layout: Layout) -> Scanner {
        let out = FileScan {
            summary: Summary {
                format: layout.format,
                ..Summary::default()
            },
            ..FileScan::default()
        };
        Scanner {
            layout,
            pos: 0,
            next: 0,
            acc: Acc::default(),
            carry: Vec::with_capacity(292),
            zero: ZeroRuns::default(),
            out,
        }
    }

    /// The next bytes of the file.
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let pos = self.pos;
            let (data_start, data_end) = (self.layout.data_start, self.layout.data_end);
            if pos < data_start {
                let skip = (data_start - pos).min(bytes.len() as u64) as usize;
                self.pos += skip as u64;
                bytes = &bytes[skip..];
                continue;
            }
            if pos >= data_end {
                self.pos += bytes.len() as u64;
                return;
            }
            self.settle();
            let limit = pos + (data_end - pos).min(bytes.len() as u64);
            let (seg_end, tensor) = match self.layout.tensors.get(self.next) {
                Some(t) if t.begin <= pos => (t.end.min(limit), Some(t.begin)),
                Some(t) => (t.begin.min(limit), None),
                None => (limit, None),
            };
            let n = (seg_end - pos) as usize;
            let (seg, rest) = bytes.split_at(n);
            if let Some(begin) = tensor {
                if pos == begin {
                    self.zero.boundary(begin);
                }
                self.tensor_bytes(seg);
            }
            self.zero.feed(pos, seg);
            self.pos = seg_end;
            bytes = rest;
        }
    }

    /// Bytes of the tensor `self.next`, whole or in part.
    fn tensor_bytes(&mut self, mut seg: &[u8]) {
        let t = &self.layout.tensors[self.next];
        let (kind, be) = (t.kind, self.layout.big_endian);
        if matches!(kind, Kind::Bytes) {
            return;
        }
        let unit = kind.unit();
        if !self.carry.is_empty() {
            let take = (unit - self.carry.len()).min(seg.len());
            self.carry.extend_from_slice(&seg[..take]);
            seg = &seg[take..];
            if self.carry.len() == unit {
                fold(kind, be, &self.carry, &mut self.acc);
                self.carry.clear();
            }
        }
        let whole = seg.len() / unit * unit;
        fold(kind, be, &seg[..whole], &mut self.acc);
        self.carry.extend_from_slice(&seg[whole..]);
    }

    /// Finishes every tensor that ends at or before `self.pos`.
    fn settle(&mut self) {
        while let Some(t) = self.layout.tensors.get(self.next) {
            if t.end > self.pos {
                return;
            }
            self.finish_tensor();
        }
    }

    fn finish_tensor(&mut self) {
        let t = &self.layout.tensors[self.next];
        let acc = std::mem::take(&mut self.acc);
        self.carry.clear();
        self.next += 1;
        let out = &mut self.out;
        out.summary.tensors += 1;
        let per_unit = match t.kind {
            Kind::Bytes => return,
            Kind::Float(_) => 1,
            Kind::Blocks(b) => b.elements,
        };
        out.summary.checked += 1;
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
                        .map(|(_, name)| *name)
                        .collect::<Vec<_>>()
                        .join("/"),
                ),
                _ => None,
            },
            detail,
        };
        if acc.nan > 0 {
            out.summary.nan += acc.nan;
            out.nan_tensors += 1;
            if out.nan_notes.len() < NOTES_PER_CODE {
                out.nan_notes.push(note(acc.nan, acc.first_nan, None));
            }
        }
        let inf = acc.inf_pos + acc.inf_neg;
        if inf > 0 {
            out.summary.inf += inf;
            out.inf_tensors += 1;
            if out.inf_notes.len() < NOTES_PER_CODE {
                let detail = format!("{} +Inf, {} -Inf", acc.inf_pos, acc.inf_neg);
                out.inf_notes.push(note(inf, acc.first_inf, Some(detail)));
            }
        }
        let elements = acc.units * per_unit;
        if elements < 2 {
            return;
        }
        if acc.nz == 0 {
            out.summary.zero_tensors += 1;
            if benign_zero(&t.name) {
                out.benign_zero_tensors += 1;
            } else if out.zero_notes.len() < NOTES_PER_CODE {
                out.zero_notes.push(note(elements, 0, None));
            }
        } else if let Kind::Float(f) = t.kind
            && acc.diff == 0
        {
            out.summary.constant_tensors += 1;
            let value = f.value(acc.first);
            if benign_constant(&t.name, value) {
                out.benign_constant_tensors += 1;
            } else if out.constant_notes.len() < NOTES_PER_CODE {
                out.constant_notes
                    .push(note(elements, 0, Some(format!("{value:?}"))));
            }
        }
    }

    /// The result, once every byte of the tensor data went through [`Scanner::update`];
    /// `None` if the bytes stopped short of the end of the tensor data.
    pub fn finish(mut self) -> Option<FileScan> {
        if self.pos < self.layout.data_end {
            return None;
        }
        self.settle();
        self.zero.close(self.layout.data_end, true);
        self.out.summary.zero_regions = self.zero.count;
        let regions: Vec<Region> = self
            .zero
            .found
            .iter()
            .map(|&(start, end)| self.region(start, end))
            .collect();
        self.out.regions = regions;
        Some(self.out)
    }

    fn region(&self, start: u64, end: u64) -> Region {
        let tensors = &self.layout.tensors;
        // The tensor holding `start`, or the first after it.
        let first = tensors.partition_point(|t| t.end <= start);
        let last = tensors.partition_point(|t| t.begin < end).saturating_sub(1);
        let boundaries = tensors
            .iter()
            .filter(|t| t.begin > start && t.begin < end && t.end > t.begin)
            .count() as u64;
        let name = |i: usize| tensors.get(i).map(|t| t.name.clone()).unwrap_or_default();
        let first_element = tensors.get(first).map_or(0, |t| {
            let per_unit = match t.kind {
                Kind::Blocks(b) => b.elements,
                _ => 1,
            };
            start.saturating_sub(t.begin) / t.kind.unit() as u64 * per_unit
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
}

fn fold(kind: Kind, be: bool, bytes: &[u8], acc: &mut Acc) {
    match kind {
        Kind::Float(f) => kernels::float(f, be, bytes, acc),
        Kind::Blocks(b) => kernels::blocks(b, be, bytes, acc),
        Kind::Bytes => {}
    }
}

/// Reads the file `rel` open as `file` (`len` bytes) from the start and scans it: for a file no
/// other pass reads. `Ok(None)` when it has no layout ([`Layout::of`]; then nothing is read
/// and `advance` is told of the whole file) or ended early.
///
/// # Errors
///
/// Reading failed.
pub fn scan_file(
    rel: &str,
    file: &File,
    len: u64,
    advance: &dyn Fn(u64),
) -> io::Result<Option<FileScan>> {
    let Some(layout) = Layout::of(rel, file, len)? else {
        advance(len);
        return Ok(None);
    };
    let mut scanner = Scanner::new(layout);
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    // A model read cold leaves the page cache as it found it, a warm one stays cached
    // ([`crate::writeback::ReadBehind`]).
    let mut behind = crate::writeback::ReadBehind::new();
    while pos < len {
        let want = (len - pos).min(buf.len() as u64) as usize;
        let n = loop {
            match behind.read_at(file, &mut buf[..want], pos) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if n == 0 {
            break;
        }
        scanner.update(&buf[..n]);
        advance(n as u64);
        pos += n as u64;
    }
    behind.finish(file, pos);
    Ok(scanner.finish())
}

/// A tensor name as a finding shows it: at most [`NAME_SHOWN`] characters, escaped
/// ([`crate::display::escape`]: a manifest's free text refuses control characters).
fn shown(name: &str) -> String {
    let cut = name
        .char_indices()
        .nth(NAME_SHOWN)
        .map_or(name, |(i, _)| &name[..i]);
    let mut out = crate::display::escape(cut).into_owned();
    if cut.len() < name.len() {
        out.push('…');
    }
    out
}

/// `problem` cut to [`MAX_PROBLEM_BYTES`] at a character boundary.
fn bounded(mut problem: String) -> String {
    if problem.len() > MAX_PROBLEM_BYTES {
        let mut cut = MAX_PROBLEM_BYTES - '…'.len_utf8();
        while !problem.is_char_boundary(cut) {
            cut -= 1;
        }
        problem.truncate(cut);
        problem.push('…');
    }
    problem
}

fn shape_text(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// `, and N more <kind> tensors <with>` when `tensors` > 1.
fn more(tensors: u64, kind: &str, with: &str) -> String {
    match tensors {
        0 | 1 => String::new(),
        n => format!(
            ", and {} more {kind}{}{with}",
            grouped(n - 1),
            if n == 2 { "tensor" } else { "tensors" }
        ),
    }
}

const FIX_DIVERGED: &str = "take the checkpoint from a step before the run diverged, or download \
     it again and compare its SHA-256 with the publisher's; to carry it as it is, pack with \
     --no-model-checks";

impl FileScan {
    /// The findings for the file `rel`: one per code, naming the first tensor.
    pub fn findings(&self, rel: &str) -> Vec<Finding> {
        let mut out = Vec::new();
        let s = &self.summary;
        if let Some(n) = self.nan_notes.first() {
            let what = match &n.scales {
                Some(scales) => format!(
                    "{} whose scale ({scales}) is NaN in tensor `{}` ({} {}), the first at \
                     element {}",
                    count_grouped(n.count, "block"),
                    shown(&n.tensor),
                    n.dtype,
                    shape_text(&n.shape),
                    grouped(n.first)
                ),
                None => format!(
                    "{} in tensor `{}` ({} {}), the first at element {}",
                    count_grouped(n.count, "NaN value"),
                    shown(&n.tensor),
                    n.dtype,
                    shape_text(&n.shape),
                    grouped(n.first)
                ),
            };
            out.push(Finding::error(
                codes::TENSOR_NAN,
                rel,
                format!(
                    "has {what}{} ({} NaN in all): weights from a run that diverged load \
                     without an error and compute garbage",
                    more(self.nan_tensors, "", " with NaN"),
                    grouped(s.nan)
                ),
                FIX_DIVERGED,
            ));
        }
        if let Some(n) = self.inf_notes.first() {
            let split = n.detail.as_deref().unwrap_or_default();
            let what = match &n.scales {
                Some(scales) => format!(
                    "{} whose scale ({scales}) is infinite ({split}) in tensor `{}` ({} {}), \
                     the first at element {}",
                    count_grouped(n.count, "block"),
                    shown(&n.tensor),
                    n.dtype,
                    shape_text(&n.shape),
                    grouped(n.first)
                ),
                None => format!(
                    "{} ({split}) in tensor `{}` ({} {}), the first at element {}",
                    count_grouped(n.count, "infinite value"),
                    shown(&n.tensor),
                    n.dtype,
                    shape_text(&n.shape),
                    grouped(n.first)
                ),
            };
            out.push(Finding::error(
                codes::TENSOR_INF,
                rel,
                format!(
                    "has {what}{} ({} Inf in all): weights that overflowed load without an \
                     error and compute garbage",
                    more(self.inf_tensors, "", " with Inf"),
                    grouped(s.inf)
                ),
                FIX_DIVERGED,
            ));
        }
        if let Some(r) = self.regions.first() {
            let others = match s.zero_regions {
                0 | 1 => String::new(),
                n => format!(", and {} more", count_grouped(n - 1, "region")),
            };
            out.push(Finding::error(
                codes::TENSOR_ZERO_REGION,
                rel,
                format!(
                    "has {} of zero bytes from byte {} to {}, across {} from tensor `{}` \
                     (element {}) to `{}`{others}: the mark of a file that was preallocated \
                     and never completely written",
                    human_size(r.end - r.start),
                    grouped(r.start),
                    grouped(r.end),
                    count_grouped(r.boundaries, "tensor boundary"),
                    shown(&r.first_tensor),
                    grouped(r.first_element),
                    shown(&r.last_tensor)
                ),
                "download or copy the file again (an interrupted download, or a save that died \
                 after preallocating the file, leaves this) and compare its SHA-256 with the \
                 source; to carry it as it is, pack with --no-model-checks",
            ));
        }
        if let Some(n) = self.zero_notes.first() {
            out.push(Finding::warning(
                codes::TENSOR_ALL_ZERO,
                rel,
                format!(
                    "has tensor `{}` ({} {}) whose {} are all zero{}: a bias initialised to \
                     zero, or a tensor that was never trained or written",
                    shown(&n.tensor),
                    n.dtype,
                    shape_text(&n.shape),
                    count_grouped(n.count, "value"),
                    more(s.zero_tensors - self.benign_zero_tensors, "all-zero ", "")
                ),
                "nothing, if these are biases or untrained heads; if they should hold trained \
                 weights, export the checkpoint again",
            ));
        }
        if let Some(n) = self.constant_notes.first() {
            out.push(Finding::warning(
                codes::TENSOR_CONSTANT,
                rel,
                format!(
                    "has tensor `{}` ({} {}) whose {} all equal {}{}: a norm initialised to \
                     one, or a model saved before it was trained",
                    shown(&n.tensor),
                    n.dtype,
                    shape_text(&n.shape),
                    count_grouped(n.count, "value"),
                    n.detail.as_deref().unwrap_or("?"),
                    more(
                        s.constant_tensors - self.benign_constant_tensors,
                        "constant ",
                        ""
                    )
                ),
                "nothing, for a freshly initialised model; for a trained checkpoint, export it \
                 again",
            ));
        }
        for f in &mut out {
            f.problem = bounded(std::mem::take(&mut f.problem));
        }
        out
    }
}

#[cfg(any(test, fuzzing))]
pub mod reference;

#[cfg(test)]
mod tests;
