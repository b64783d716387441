//! The `xor` patch of docs/FORMAT.md section 16.3: `patch = zstd(new XOR aligned_base)`.
//!
//! The *aligned base* `A` has the new file's length. With [`Map::Bytes`] it is the base file
//! itself (zero past its end). With [`Map::Safetensors`] it is zero over the new file's length
//! prefix and header and over every tensor the base lacks, and the base tensor's bytes over every
//! data range whose tensor the base has with the same name, dtype and shape: a header change
//! that shifts every offset still lines the tensors up. The new header travels XORed with zeros,
//! so the decoder reads it from the patch itself before it needs the alignment.
//!
//! Both directions stream: the new file (or the patch) is read front to back in 1 MiB pieces and
//! the base is read with positioned reads of the same size.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;

use crate::inspect::safetensors::{ListError, Listed, Listing, list_tensors, list_tensors_at};
use crate::zstd_frame;

/// Bytes moved per step.
const PIECE: usize = 1 << 20;

/// The reference safetensors reader's limit on the header length.
pub(crate) const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// zstd window limit shared with the bundle reader (docs/FORMAT.md section 5).
const WINDOW_LOG_MAX: u32 = 27;

/// How the base is lined up with the new file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Map {
    /// Byte `j` of the new file against byte `j` of the base.
    Bytes,
    /// Tensors lined up by name, dtype and shape.
    Safetensors,
}

/// Why a patch could not be made or applied. The caller adds the file names.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// Reading the base, the new file or the patch, or writing the output, failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The patch decodes to a different length than the manifest says.
    #[error("the patch rebuilds {got} bytes, the manifest says {expected}")]
    Length {
        /// Bytes the manifest lists.
        expected: u64,
        /// Bytes the patch produced (a lower bound when it produced too many).
        got: u64,
    },
    /// A safetensors header (of the new file, as rebuilt, or of the base) cannot be used.
    #[error("{which} safetensors header: {reason}")]
    Header {
        /// `new` or `base`.
        which: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The patch is not one well-formed zstd frame.
    #[error("the patch is not a single zstd frame: {0}")]
    Frame(String),
}

/// One run of the aligned base: `[start, end)` of the new file, read from the base at
/// `base_offset` or zero.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    end: u64,
    base_offset: Option<u64>,
}

/// Parses the JSON header of a safetensors file into its tensors, through the model checks'
/// streaming parser and its limits (`inspect::safetensors::list_tensors`: at most
/// `MAX_TENSORS` tensors, records kept compact, never a JSON tree of the header). Only what
/// alignment needs is checked here: each entry has a string dtype, an integer shape and a
/// well-ordered data range inside `data_len`. The model checks hold files to the reference
/// reader.
fn parse_header(
    which: &'static str,
    listed: Result<Listing, ListError>,
    data_len: u64,
) -> Result<Listing, PatchError> {
    let bad = |reason: String| PatchError::Header { which, reason };
    let listing = listed.map_err(|e| match e {
        ListError::Io(e) => PatchError::Io(e),
        ListError::Json(detail) => bad(format!("not a safetensors JSON header ({detail})")),
        ListError::Limit(what) => bad(format!("{what}, more than airlock reads from one header")),
    })?;
    if let Some(t) = listing
        .tensors
        .iter()
        .find(|t| t.begin > t.end || t.end > data_len)
    {
        return Err(bad(format!(
            "tensor {:?} data_offsets [{}, {}] lie outside the {data_len}-byte data buffer",
            t.name, t.begin, t.end
        )));
    }
    Ok(listing)
}

/// Reads the length prefix of a safetensors file (`which`: `new` or `base`) and streams its
/// header to the parser with positioned reads, bounded by the reference limit and by the
/// file's length. Returns `8 + N` and the tensors.
fn file_header(which: &'static str, file: &File, len: u64) -> Result<(u64, Listing), PatchError> {
    let bad = |reason: String| PatchError::Header { which, reason };
    if len < 8 {
        return Err(bad(format!("the file has {len} bytes, fewer than 8")));
    }
    let mut prefix = [0u8; 8];
    file.read_exact_at(&mut prefix, 0)?;
    let n = u64::from_le_bytes(prefix);
    if n > MAX_SAFETENSORS_HEADER || n > len - 8 {
        return Err(bad(format!(
            "header length {n} exceeds the limit or the {len}-byte file"
        )));
    }
    let tensors = parse_header(which, list_tensors_at(file, 8, n), len - 8 - n)?;
    Ok((8 + n, tensors))
}

/// The alignment of section 16.3 for a safetensors pair: `new` lists the new file's tensors,
/// `new_header_len` is its 8 + N, `new_len` its size.
fn safetensors_segments(
    new: &Listing,
    new_header_len: u64,
    new_len: u64,
    base: &File,
    base_len: u64,
) -> Result<Vec<Segment>, PatchError> {
    let (base_start, base_tensors) = file_header("base", base, base_len)?;
    let by_name: std::collections::HashMap<&str, &Listed> = base_tensors
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let mut matched: Vec<Segment> = new
        .tensors
        .iter()
        .filter(|t| t.end > t.begin)
        .filter_map(|t| {
            let b = by_name.get(t.name.as_str())?;
            (b.dtype == t.dtype
                && base_tensors.shape(b) == new.shape(t)
                && b.end - b.begin == t.end - t.begin)
                .then(|| Segment {
                    start: new_header_len + t.begin,
                    end: new_header_len + t.end,
                    base_offset: Some(base_start + b.begin),
                })
        })
        .collect();
    matched.sort_by_key(|s| s.start);
    if let Some(w) = matched.windows(2).find(|w| w[0].end > w[1].start) {
        return Err(PatchError::Header {
            which: "new",
            reason: format!(
                "tensor data ranges overlap at byte {} of the file",
                w[1].start
            ),
        });
    }
    Ok(fill_gaps(matched, new_len))
}

/// The segments of a new safetensors file read from disk (the packer's side).
fn new_file_segments(
    new: &File,
    new_len: u64,
    base: &File,
    base_len: u64,
) -> Result<Vec<Segment>, PatchError> {
    let (start, tensors) = file_header("new", new, new_len)?;
    safetensors_segments(&tensors, start, new_len, base, base_len)
}

/// The segments of a new safetensors file whose prefix and header `header` came out of a
/// patch (the decoders' side).
fn patched_segments(
    header: &[u8],
    size: u64,
    base: &File,
    base_len: u64,
) -> Result<Vec<Segment>, PatchError> {
    let len = header.len() as u64;
    let tensors = parse_header("new", list_tensors(&header[8..]), size - len)?;
    safetensors_segments(&tensors, len, size, base, base_len)
}

/// Completes sorted, disjoint base-backed segments with zero segments to cover `[0, len)`.
fn fill_gaps(matched: Vec<Segment>, len: u64) -> Vec<Segment> {
    let mut out = Vec::with_capacity(matched.len() * 2 + 1);
    let mut at = 0;
    for s in matched {
        if s.start > at {
            out.push(Segment {
                start: at,
                end: s.start,
                base_offset: None,
            });
        }
        at = s.end;
        out.push(s);
    }
    if at < len {
        out.push(Segment {
            start: at,
            end: len,
            base_offset: None,
        });
    }
    out
}

fn bytes_segments(new_len: u64, base_len: u64) -> Vec<Segment> {
    let shared = new_len.min(base_len);
    let matched = if shared > 0 {
        vec![Segment {
            start: 0,
            end: shared,
            base_offset: Some(0),
        }]
    } else {
        Vec::new()
    };
    fill_gaps(matched, new_len)
}

/// Produces the aligned base front to back.
struct Aligned<'a> {
    base: &'a File,
    segments: Vec<Segment>,
    index: usize,
}

impl Aligned<'_> {
    /// XORs `buf`, which holds the new file's (or patch's) bytes at `[pos, pos + len)`, with
    /// the aligned base over the same range. Calls must come in increasing `pos`.
    fn xor_into(&mut self, pos: u64, buf: &mut [u8], scratch: &mut [u8]) -> io::Result<()> {
        xor_segments(
            self.base,
            &self.segments,
            &mut self.index,
            pos,
            buf,
            scratch,
        )
    }
}

/// [`Aligned::xor_into`] over explicit state, for the push decoder that owns its base.
fn xor_segments(
    base: &File,
    segments: &[Segment],
    index: &mut usize,
    pos: u64,
    buf: &mut [u8],
    scratch: &mut [u8],
) -> io::Result<()> {
    {
        let end = pos + buf.len() as u64;
        let mut at = pos;
        while at < end {
            while segments[*index].end <= at {
                *index += 1;
            }
            let seg = &segments[*index];
            let upto = seg.end.min(end);
            if let Some(off) = seg.base_offset {
                let n = (upto - at) as usize;
                let from = off + (at - seg.start);
                base.read_exact_at(&mut scratch[..n], from)?;
                let dst = &mut buf[(at - pos) as usize..(upto - pos) as usize];
                for (d, s) in dst.iter_mut().zip(&scratch[..n]) {
                    *d ^= s;
                }
            }
            at = upto;
        }
        Ok(())
    }
}

fn file_len(f: &File) -> io::Result<u64> {
    Ok(f.metadata()?.len())
}

/// Whether `new` and `base` can be lined up as safetensors files (both headers parse). The
/// packer uses this to choose the map; anything else falls back to [`Map::Bytes`].
pub fn safetensors_pair(new: &File, base: &File) -> bool {
    let (Ok(new_len), Ok(base_len)) = (file_len(new), file_len(base)) else {
        return false;
    };
    new_file_segments(new, new_len, base, base_len).is_ok()
}

/// What [`encode`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// Bytes of the patch.
    pub patch_size: u64,
    /// Bytes of the aligned base that came from the base file (the rest is zero).
    pub aligned_bytes: u64,
    /// SHA-256 of the new file as read for the patch.
    pub new_sha256: String,
}

/// Writes the patch that rebuilds `new` from `base` to `out`, as one zstd frame at `level`.
pub fn encode<W: Write>(
    new: &File,
    base: &File,
    map: Map,
    level: i32,
    out: W,
) -> Result<(W, Encoded), PatchError> {
    encode_observed(new, base, map, level, out, &mut |_| {})
}

/// [`encode`], handing each piece of `new` to `observe` as it is read, front to back (the
/// pack's value scan reads the new file in the same pass).
pub fn encode_observed<W: Write>(
    new: &File,
    base: &File,
    map: Map,
    level: i32,
    out: W,
    observe: &mut dyn FnMut(&[u8]),
) -> Result<(W, Encoded), PatchError> {
    let new_len = file_len(new)?;
    let base_len = file_len(base)?;
    let segments = match map {
        Map::Bytes => bytes_segments(new_len, base_len),
        Map::Safetensors => new_file_segments(new, new_len, base, base_len)?,
    };
    let aligned_bytes = segments
        .iter()
        .filter(|s| s.base_offset.is_some())
        .map(|s| s.end - s.start)
        .sum();
    let counter = CountingWriter {
        inner: out,
        count: 0,
    };
    let mut enc = zstd::stream::write::Encoder::new(counter, level)?;
    enc.set_pledged_src_size(Some(new_len))?;
    enc.include_checksum(false)?;
    let mut aligned = Aligned {
        base,
        segments,
        index: 0,
    };
    let mut buf = vec![0u8; PIECE];
    let mut scratch = vec![0u8; PIECE];
    let mut pos = 0u64;
    let mut hash = <sha2::Sha256 as sha2::Digest>::new();
    while pos < new_len {
        let n = (new_len - pos).min(PIECE as u64) as usize;
        new.read_exact_at(&mut buf[..n], pos)?;
        sha2::Digest::update(&mut hash, &buf[..n]);
        observe(&buf[..n]);
        aligned.xor_into(pos, &mut buf[..n], &mut scratch)?;
        enc.write_all(&buf[..n])?;
        pos += n as u64;
    }
    let counter = enc.finish()?;
    let encoded = Encoded {
        patch_size: counter.count,
        aligned_bytes,
        new_sha256: hex::encode(sha2::Digest::finalize(hash)),
    };
    Ok((counter.inner, encoded))
}

struct CountingWriter<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads exactly `buf.len()` bytes of the decoded patch, or reports how many there were.
fn fill(dec: &mut impl Read, buf: &mut [u8], pos: u64, expected: u64) -> Result<(), PatchError> {
    let mut got = 0;
    while got < buf.len() {
        match dec.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(PatchError::Length {
                    expected,
                    got: pos + got as u64,
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(frame_error(e)),
        }
    }
    Ok(())
}

fn frame_error(e: io::Error) -> PatchError {
    if e.get_ref()
        .is_some_and(|inner| inner.is::<zstd_frame::FrameRefused>())
    {
        return PatchError::Frame(e.to_string());
    }
    // zstd reports a malformed frame as `Other`; a failing source read keeps its own kind.
    if e.kind() == io::ErrorKind::Other {
        PatchError::Frame(e.to_string())
    } else {
        PatchError::Io(e)
    }
}

/// Rebuilds the new file (`size` bytes) from `patch` and `base`, writing it to `out`. Fails if
/// the patch decodes to another length, is not one zstd frame, or (with [`Map::Safetensors`])
/// rebuilds a header that cannot be lined up. The caller checks the output's SHA-256.
pub fn decode<R: Read, W: Write>(
    patch: R,
    size: u64,
    base: &File,
    map: Map,
    out: &mut W,
) -> Result<(), PatchError> {
    let base_len = file_len(base)?;
    // libzstd skips `window_log_max` for a frame whose content fits the first read: the
    // declared window is checked on the frame header itself (`zstd_frame`).
    let mut dec = zstd::stream::read::Decoder::new(zstd_frame::Checked::new(patch))?.single_frame();
    dec.window_log_max(WINDOW_LOG_MAX)?;
    let mut buf = vec![0u8; PIECE];
    let mut scratch = vec![0u8; PIECE];
    let mut pos = 0u64;
    let segments = match map {
        Map::Bytes => bytes_segments(size, base_len),
        Map::Safetensors => {
            let bad = |reason: String| PatchError::Header {
                which: "new",
                reason,
            };
            if size < 8 {
                return Err(bad(format!("the file has {size} bytes, fewer than 8")));
            }
            let mut prefix = [0u8; 8];
            fill(&mut dec, &mut prefix, 0, size)?;
            out.write_all(&prefix)?;
            let n = u64::from_le_bytes(prefix);
            if n > MAX_SAFETENSORS_HEADER || n > size - 8 {
                return Err(bad(format!(
                    "header length {n} exceeds the limit or the {size}-byte file"
                )));
            }
            let mut header = prefix.to_vec();
            header.resize(8 + n as usize, 0);
            fill(&mut dec, &mut header[8..], 8, size)?;
            out.write_all(&header[8..])?;
            pos = 8 + n;
            patched_segments(&header, size, base, base_len)?
        }
    };
    let mut aligned = Aligned {
        base,
        segments,
        index: 0,
    };
    while pos < size {
        let n = (size - pos).min(PIECE as u64) as usize;
        fill(&mut dec, &mut buf[..n], pos, size)?;
        aligned.xor_into(pos, &mut buf[..n], &mut scratch)?;
        out.write_all(&buf[..n])?;
        pos += n as u64;
    }
    let mut probe = [0u8; 1];
    loop {
        match dec.read(&mut probe) {
            Ok(0) => break,
            Ok(_) => {
                return Err(PatchError::Length {
                    expected: size,
                    got: size + 1,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(frame_error(e)),
        }
    }
    // Bytes after the frame (a second frame, padding) are not part of a patch.
    let mut rest = dec.finish();
    match rest.read(&mut probe) {
        Ok(0) => Ok(()),
        Ok(_) => Err(PatchError::Frame("bytes follow the frame".into())),
        Err(e) => Err(PatchError::Io(e)),
    }
}

/// The push form of [`decode`]: the patch arrives in pieces (as a tar entry's content does) and
/// the rebuilt bytes leave through a callback, front to back. Memory: two [`PIECE`] buffers,
/// the zstd window (at most 2^27 bytes) and, with [`Map::Safetensors`], the new header.
pub struct PushDecoder {
    raw: zstd::stream::raw::Decoder<'static>,
    /// The frame header while it is collected and before it is checked against the window
    /// limit (`zstd_frame::check`), then `None`; the decoder sees nothing before.
    frame_head: Option<Vec<u8>>,
    base: File,
    base_len: u64,
    size: u64,
    /// Bytes of the new file produced so far.
    pos: u64,
    /// The length prefix and header while they are collected (safetensors), then `None`.
    header: Option<Vec<u8>>,
    segments: Vec<Segment>,
    index: usize,
    frame_done: bool,
    out: Vec<u8>,
    scratch: Vec<u8>,
}

impl PushDecoder {
    /// Starts rebuilding a `size`-byte file from `base` with `map`.
    pub fn new(base: File, map: Map, size: u64) -> Result<Self, PatchError> {
        let base_len = file_len(&base)?;
        let mut raw = zstd::stream::raw::Decoder::new()?;
        raw.set_parameter(zstd::stream::raw::DParameter::WindowLogMax(WINDOW_LOG_MAX))?;
        let (header, segments) = match map {
            Map::Bytes => (None, bytes_segments(size, base_len)),
            Map::Safetensors => (Some(Vec::new()), Vec::new()),
        };
        Ok(PushDecoder {
            raw,
            frame_head: Some(Vec::new()),
            base,
            base_len,
            size,
            pos: 0,
            header,
            segments,
            index: 0,
            frame_done: false,
            out: vec![0u8; PIECE],
            scratch: vec![0u8; PIECE],
        })
    }

    /// Feeds the next piece of the patch; rebuilt bytes go to `emit`.
    pub fn write(
        &mut self,
        mut input: &[u8],
        emit: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(), PatchError> {
        if let Some(head) = &mut self.frame_head {
            let mut complete = false;
            while let Some((&byte, rest)) = input.split_first() {
                head.push(byte);
                input = rest;
                match zstd_frame::check(head) {
                    Ok(None) => {}
                    Ok(Some(_)) => {
                        complete = true;
                        break;
                    }
                    Err(e) => return Err(PatchError::Frame(format!("the zstd frame {e}"))),
                }
            }
            if !complete {
                return Ok(());
            }
            let head = self.frame_head.take().expect("present");
            self.feed(&head, emit)?;
        }
        self.feed(input, emit)
    }

    /// [`PushDecoder::write`] once the frame header was checked.
    fn feed(
        &mut self,
        input: &[u8],
        emit: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(), PatchError> {
        let mut at = 0;
        loop {
            if self.frame_done {
                if at < input.len() {
                    return Err(PatchError::Frame("bytes follow the frame".into()));
                }
                return Ok(());
            }
            let (used, produced) = self.step(&input[at..], emit)?;
            at += used;
            // Done with this piece once it is consumed and the output buffer was not filled
            // (a full buffer may mean more output is pending for input already consumed).
            if at == input.len() && produced < PIECE {
                return Ok(());
            }
        }
    }

    /// One decoder call: returns the input bytes consumed and the output bytes produced.
    fn step(
        &mut self,
        input: &[u8],
        emit: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(usize, usize), PatchError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let mut inb = InBuffer::around(input);
        let mut out = std::mem::take(&mut self.out);
        let ran = {
            let mut outb = OutBuffer::around(&mut out[..]);
            self.raw
                .run(&mut inb, &mut outb)
                .map(|hint| (hint, outb.pos()))
        };
        let result = match ran {
            Err(e) => Err(PatchError::Frame(e.to_string())),
            Ok((hint, produced)) => {
                if hint == 0 {
                    self.frame_done = true;
                }
                self.apply(&mut out[..produced], emit)
                    .map(|()| (inb.pos(), produced))
            }
        };
        self.out = out;
        result
    }

    /// Ends the patch: drains the decoder and checks the frame ended and the length is right.
    pub fn finish(
        mut self,
        emit: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(), PatchError> {
        // A patch shorter than a frame header: the decoder says the frame is truncated.
        if let Some(head) = self.frame_head.take() {
            self.feed(&head, emit)?;
        }
        while !self.frame_done {
            let (_, produced) = self.step(&[], emit)?;
            if produced == 0 {
                break;
            }
        }
        if self.pos > self.size || (self.frame_done && self.pos != self.size) {
            return Err(PatchError::Length {
                expected: self.size,
                got: self.pos,
            });
        }
        if !self.frame_done {
            return Err(PatchError::Frame(format!(
                "the frame is truncated after {} of {} bytes",
                self.pos, self.size
            )));
        }
        Ok(())
    }

    /// XORs decoded bytes with the aligned base and emits them.
    fn apply(
        &mut self,
        mut bytes: &mut [u8],
        emit: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(), PatchError> {
        if self.pos + bytes.len() as u64 > self.size {
            return Err(PatchError::Length {
                expected: self.size,
                got: self.pos + bytes.len() as u64,
            });
        }
        while let Some(header) = &mut self.header {
            let bad = |reason: String| PatchError::Header {
                which: "new",
                reason,
            };
            if self.size < 8 {
                return Err(bad(format!(
                    "the file has {} bytes, fewer than 8",
                    self.size
                )));
            }
            let target = if header.len() < 8 {
                8
            } else {
                8 + u64::from_le_bytes(header[..8].try_into().expect("8 bytes")) as usize
            };
            let take = (target - header.len()).min(bytes.len());
            header.extend_from_slice(&bytes[..take]);
            emit(&bytes[..take])?;
            self.pos += take as u64;
            bytes = &mut bytes[take..];
            if header.len() < target {
                return Ok(());
            }
            if target == 8 {
                let n = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
                if n > MAX_SAFETENSORS_HEADER || n > self.size - 8 {
                    return Err(bad(format!(
                        "header length {n} exceeds the limit or the {}-byte file",
                        self.size
                    )));
                }
                if n > 0 {
                    continue;
                }
            }
            let header = self.header.take().expect("present");
            self.segments = patched_segments(&header, self.size, &self.base, self.base_len)?;
        }
        for piece in bytes.chunks_mut(PIECE) {
            xor_segments(
                &self.base,
                &self.segments,
                &mut self.index,
                self.pos,
                piece,
                &mut self.scratch,
            )?;
            emit(piece)?;
            self.pos += piece.len() as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// A deterministic byte generator (xorshift), so tests need no random source.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// Writes a safetensors file with the given tensors (name, dtype, shape, data), data in the
    /// order given, header keys in the order given.
    fn safetensors(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
        let mut header = String::from("{");
        let mut at = 0;
        for (i, (name, dtype, shape, data)) in tensors.iter().enumerate() {
            if i > 0 {
                header.push(',');
            }
            let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
            header.push_str(&format!(
                "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{at},{}]}}",
                shape.join(","),
                at + data.len()
            ));
            at += data.len();
        }
        header.push('}');
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        for (_, _, _, data) in tensors {
            out.extend_from_slice(data);
        }
        out
    }

    fn file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> File {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        File::open(path).unwrap()
    }

    /// Encodes and decodes; returns the patch size and checks the rebuilt bytes.
    fn round_trip(new: &[u8], base: &[u8], map: Map) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let new_f = file(&dir, "new", new);
        let base_f = file(&dir, "base", base);
        let (patch, enc) = encode(&new_f, &base_f, map, 1, Vec::new()).unwrap();
        assert_eq!(enc.patch_size, patch.len() as u64);
        let mut rebuilt = Vec::new();
        decode(&patch[..], new.len() as u64, &base_f, map, &mut rebuilt).unwrap();
        assert_eq!(
            Sha256::digest(&rebuilt),
            Sha256::digest(new),
            "rebuilt bytes differ"
        );
        patch.len() as u64
    }

    /// Changes about `per_mille` of every 1000 bf16 elements the way a fine-tuning step does:
    /// the sign and exponent (high byte) stay, the mantissa bits move.
    fn perturb(bytes: &[u8], per_mille: u64, seed: u64) -> Vec<u8> {
        let mut out = bytes.to_vec();
        let r = noise(seed, out.len());
        for (i, pair) in out.chunks_exact_mut(2).enumerate() {
            if u64::from(r[2 * i]) * 1000 / 256 < per_mille {
                pair[0] ^= r[2 * i + 1] | 1;
                pair[1] ^= r[(2 * i + 7) % r.len()] & 0x01;
            }
        }
        out
    }

    #[test]
    fn identical_files_give_a_tiny_patch_and_rebuild_exactly() {
        let data = noise(1, 3 << 20);
        let size = round_trip(&data, &data, Map::Bytes);
        assert!(
            size < 4096,
            "patch of identical 3 MiB files is {size} bytes"
        );
    }

    #[test]
    fn bytes_map_rebuilds_longer_and_shorter_files_than_the_base() {
        let base = noise(2, 100_000);
        let mut longer = base.clone();
        longer.extend_from_slice(&noise(3, 50_000));
        round_trip(&longer, &base, Map::Bytes);
        round_trip(&base[..1234], &base, Map::Bytes);
        round_trip(&[], &base, Map::Bytes);
        round_trip(&base, &[], Map::Bytes);
    }

    #[test]
    fn two_percent_changed_bf16_elements_give_a_patch_of_a_few_percent() {
        let base = noise(4, 4 << 20);
        let new = perturb(&base, 20, 5);
        let size = round_trip(&new, &base, Map::Bytes);
        let ratio = size as f64 / new.len() as f64;
        assert!(ratio < 0.06, "patch is {ratio:.3} of the file");
    }

    #[test]
    fn safetensors_map_absorbs_a_header_change_that_shifts_every_tensor() {
        let a = noise(6, 1 << 20);
        let b = noise(7, 2 << 20);
        let base = safetensors(&[
            ("a", "BF16", vec![512, 1024], a.clone()),
            ("b", "BF16", vec![1024, 1024], b.clone()),
        ]);
        // A new tensor in front moves both old tensors; their bytes are unchanged.
        let new = safetensors(&[
            ("new_bias", "F32", vec![7], noise(8, 28)),
            ("a", "BF16", vec![512, 1024], a),
            ("b", "BF16", vec![1024, 1024], b),
        ]);
        let aligned = round_trip(&new, &base, Map::Safetensors);
        let by_offset = round_trip(&new, &base, Map::Bytes);
        assert!(
            (aligned as f64) < 0.01 * new.len() as f64,
            "tensor-aligned patch is {aligned} bytes of {}",
            new.len()
        );
        assert!(
            by_offset > 10 * aligned,
            "offset-aligned patch ({by_offset}) should not be able to use the base"
        );
    }

    #[test]
    fn safetensors_map_zeroes_tensors_whose_dtype_or_shape_changed() {
        let t = noise(9, 4096);
        let base = safetensors(&[("w", "F16", vec![2048], t.clone())]);
        let new = safetensors(&[("w", "BF16", vec![2048], t)]);
        let dir = tempfile::tempdir().unwrap();
        let (_, enc) = encode(
            &file(&dir, "n", &new),
            &file(&dir, "b", &base),
            Map::Safetensors,
            1,
            Vec::new(),
        )
        .unwrap();
        assert_eq!(enc.aligned_bytes, 0, "a dtype change must not line up");
        round_trip(&new, &base, Map::Safetensors);
    }

    #[test]
    fn a_patch_for_another_base_or_length_is_refused() {
        let base = noise(10, 200_000);
        let new = perturb(&base, 10, 11);
        let dir = tempfile::tempdir().unwrap();
        let base_f = file(&dir, "base", &base);
        let (patch, _) =
            encode(&file(&dir, "new", &new), &base_f, Map::Bytes, 1, Vec::new()).unwrap();
        let mut out = Vec::new();
        let short = decode(
            &patch[..],
            new.len() as u64 + 1,
            &base_f,
            Map::Bytes,
            &mut out,
        );
        assert!(matches!(short, Err(PatchError::Length { .. })), "{short:?}");
        let mut out = Vec::new();
        let long = decode(
            &patch[..],
            new.len() as u64 - 1,
            &base_f,
            Map::Bytes,
            &mut out,
        );
        assert!(matches!(long, Err(PatchError::Length { .. })), "{long:?}");
        // Another base rebuilds other bytes: the caller's digest check catches it.
        let other = file(&dir, "other", &noise(12, 200_000));
        let mut out = Vec::new();
        decode(&patch[..], new.len() as u64, &other, Map::Bytes, &mut out).unwrap();
        assert_ne!(Sha256::digest(&out), Sha256::digest(&new));
    }

    #[test]
    fn trailing_bytes_and_second_frames_are_refused() {
        let base = noise(13, 10_000);
        let dir = tempfile::tempdir().unwrap();
        let base_f = file(&dir, "base", &base);
        let (mut patch, _) = encode(
            &file(&dir, "new", &base),
            &base_f,
            Map::Bytes,
            1,
            Vec::new(),
        )
        .unwrap();
        let one = patch.clone();
        patch.extend_from_slice(&one);
        let mut out = Vec::new();
        let r = decode(&patch[..], base.len() as u64, &base_f, Map::Bytes, &mut out);
        assert!(matches!(r, Err(PatchError::Frame(_))), "{r:?}");
        let mut garbage = one.clone();
        garbage.push(0);
        let mut out = Vec::new();
        let r = decode(
            &garbage[..],
            base.len() as u64,
            &base_f,
            Map::Bytes,
            &mut out,
        );
        assert!(r.is_err(), "a byte after the frame was accepted");
    }

    #[test]
    fn a_rebuilt_header_that_is_not_safetensors_is_refused() {
        let base = safetensors(&[("w", "F32", vec![4], noise(14, 16))]);
        let dir = tempfile::tempdir().unwrap();
        let base_f = file(&dir, "base", &base);
        // A patch made with the bytes map for a non-safetensors file, applied as safetensors.
        let junk = noise(15, 5000);
        let (patch, _) =
            encode(&file(&dir, "j", &junk), &base_f, Map::Bytes, 1, Vec::new()).unwrap();
        let mut out = Vec::new();
        let r = decode(
            &patch[..],
            junk.len() as u64,
            &base_f,
            Map::Safetensors,
            &mut out,
        );
        assert!(
            matches!(r, Err(PatchError::Header { which: "new", .. })),
            "{r:?}"
        );
        assert!(!safetensors_pair(&file(&dir, "j2", &junk), &base_f));
    }

    /// Issue 26 item 13a: a patch frame declaring a window over 2^27 bytes is refused by both
    /// decoders (FORMAT.md section 5), though its content is small enough that libzstd would
    /// decode it in one pass without applying `window_log_max`. At the limit it still decodes.
    #[test]
    fn a_patch_frame_declaring_a_window_over_the_limit_is_refused() {
        let base = noise(30, 5000);
        let new = perturb(&base, 40, 31);
        let dir = tempfile::tempdir().unwrap();
        let (new_f, base_f) = (file(&dir, "n", &new), file(&dir, "b", &base));
        let (patch, _) = encode(&new_f, &base_f, Map::Bytes, 3, Vec::new()).unwrap();
        let size = new.len() as u64;
        for (wd, ok) in [(17u8 << 3, true), ((17 << 3) | 1, false), (21 << 3, false)] {
            let patch = crate::zstd_frame::tests::with_window(&patch, wd);
            let mut out = Vec::new();
            let pulled = decode(&patch[..], size, &base_f, Map::Bytes, &mut out);
            // In small pieces, and whole (libzstd's one-pass case).
            let pushed = push_decode(&patch, size, &base_f, Map::Bytes, 7);
            let whole = push_decode(&patch, size, &base_f, Map::Bytes, patch.len());
            if ok {
                pulled.unwrap();
                assert!(out == new);
                assert!(pushed.unwrap() == new);
                assert!(whole.unwrap() == new);
            } else {
                for r in [pulled, pushed.map(|_| ()), whole.map(|_| ())] {
                    assert!(
                        matches!(&r, Err(PatchError::Frame(m)) if m.contains("declares a window")),
                        "window descriptor {wd:#x}: {r:?}"
                    );
                }
            }
        }
    }

    /// Issue 26 item 4: the safetensors map reads headers through the model checks' parser,
    /// with its limit, so a legal header of millions of tensors cannot make a delta's packer
    /// or decoders hold a JSON tree of it. Over the limit the packer falls back to the bytes
    /// map and both decoders refuse the map.
    #[test]
    fn a_header_over_the_tensor_limit_is_not_lined_up() {
        use crate::inspect::safetensors::MAX_TENSORS;
        use crate::inspect::safetensors::tests::{make, many_tensors};
        let at = make(&many_tensors(MAX_TENSORS), MAX_TENSORS);
        let over = make(&many_tensors(MAX_TENSORS + 1), MAX_TENSORS + 1);
        let dir = tempfile::tempdir().unwrap();
        let (at_f, over_f) = (file(&dir, "at", &at), file(&dir, "over", &over));
        assert!(safetensors_pair(&at_f, &at_f));
        assert!(!safetensors_pair(&over_f, &at_f));
        assert!(!safetensors_pair(&at_f, &over_f));
        let r = encode(&over_f, &at_f, Map::Safetensors, 1, Vec::new());
        assert!(
            matches!(&r, Err(PatchError::Header { which: "new", reason }) if reason.contains("more than 262144 tensors")),
            "{r:?}"
        );
        // A patch that decodes to the over-limit file itself (the bytes map over an empty
        // base), applied as safetensors: the header it rebuilds is over the limit.
        let empty = file(&dir, "empty", &[]);
        let (patch, _) = encode(&over_f, &empty, Map::Bytes, 1, Vec::new()).unwrap();
        let size = over.len() as u64;
        let r = decode(&patch[..], size, &at_f, Map::Safetensors, &mut Vec::new());
        assert!(
            matches!(&r, Err(PatchError::Header { which: "new", reason }) if reason.contains("262144")),
            "{r:?}"
        );
        let r = push_decode(&patch, size, &at_f, Map::Safetensors, 1 << 16);
        assert!(
            matches!(&r, Err(PatchError::Header { which: "new", .. })),
            "{r:?}"
        );
    }

    #[test]
    fn overlapping_tensor_ranges_are_refused() {
        let data = noise(16, 64);
        let header = r#"{"a":{"dtype":"U8","shape":[32],"data_offsets":[0,32]},"b":{"dtype":"U8","shape":[32],"data_offsets":[16,48]}}"#;
        let mut new = (header.len() as u64).to_le_bytes().to_vec();
        new.extend_from_slice(header.as_bytes());
        new.extend_from_slice(&data);
        let base = new.clone();
        let dir = tempfile::tempdir().unwrap();
        let r = encode(
            &file(&dir, "n", &new),
            &file(&dir, "b", &base),
            Map::Safetensors,
            1,
            Vec::new(),
        );
        assert!(matches!(r, Err(PatchError::Header { .. })), "{r:?}");
    }

    /// Applies `patch` with the push decoder, fed in pieces of `step` bytes.
    fn push_decode(
        patch: &[u8],
        size: u64,
        base: &File,
        map: Map,
        step: usize,
    ) -> Result<Vec<u8>, PatchError> {
        let mut out = Vec::new();
        let mut emit = |b: &[u8]| -> io::Result<()> {
            out.extend_from_slice(b);
            Ok(())
        };
        let mut dec = PushDecoder::new(base.try_clone().unwrap(), map, size)?;
        for piece in patch.chunks(step.max(1)) {
            dec.write(piece, &mut emit)?;
        }
        dec.finish(&mut emit)?;
        Ok(out)
    }

    #[test]
    fn the_push_decoder_rebuilds_what_encode_made_in_any_piece_size() {
        let a = noise(20, 300_000);
        let b = noise(21, 3 << 20);
        let base = safetensors(&[
            ("a", "BF16", vec![150_000], a.clone()),
            ("b", "BF16", vec![3 << 19], b.clone()),
        ]);
        let new = safetensors(&[
            ("new", "F32", vec![3], noise(22, 12)),
            ("a", "BF16", vec![150_000], perturb(&a, 20, 23)),
            ("b", "BF16", vec![3 << 19], b),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let base_f = file(&dir, "base", &base);
        let new_f = file(&dir, "new", &new);
        for map in [Map::Bytes, Map::Safetensors] {
            let (patch, _) = encode(&new_f, &base_f, map, 1, Vec::new()).unwrap();
            for step in [1, 7, 4096, 1 << 20, patch.len()] {
                if step == 1 && patch.len() > 200_000 {
                    continue;
                }
                let out = push_decode(&patch, new.len() as u64, &base_f, map, step).unwrap();
                assert!(out == new, "{map:?} step {step}: rebuilt bytes differ");
            }
        }
    }

    #[test]
    fn the_push_decoder_refuses_truncated_long_short_and_trailing_patches() {
        let base = noise(24, 100_000);
        let new = perturb(&base, 50, 25);
        let dir = tempfile::tempdir().unwrap();
        let base_f = file(&dir, "base", &base);
        let (patch, _) =
            encode(&file(&dir, "new", &new), &base_f, Map::Bytes, 1, Vec::new()).unwrap();
        let n = new.len() as u64;
        let r = push_decode(&patch[..patch.len() - 3], n, &base_f, Map::Bytes, 999);
        assert!(matches!(r, Err(PatchError::Frame(_))), "{r:?}");
        let r = push_decode(&patch, n + 1, &base_f, Map::Bytes, 999);
        assert!(matches!(r, Err(PatchError::Length { .. })), "{r:?}");
        let r = push_decode(&patch, n - 1, &base_f, Map::Bytes, 999);
        assert!(matches!(r, Err(PatchError::Length { .. })), "{r:?}");
        let mut two = patch.clone();
        two.extend_from_slice(&patch);
        let r = push_decode(&two, n, &base_f, Map::Bytes, 999);
        assert!(matches!(r, Err(PatchError::Frame(_))), "{r:?}");
        let mut flipped = patch.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x55;
        let r = push_decode(&flipped, n, &base_f, Map::Bytes, 999);
        assert!(
            r.map_or(true, |out| out != new),
            "a flipped patch rebuilt the file"
        );
    }
}
