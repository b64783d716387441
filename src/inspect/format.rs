//! Which format a file is read as: the one dispatch the model checks and the value scan share.
//!
//! Loaders disagree on how they pick a format. transformers goes by the file name
//! (`model.safetensors`, `pytorch_model.bin`); llama.cpp and Ollama read a GGUF by its magic
//! whatever it is called, and the safetensors loaders read any file whose first bytes are a
//! safetensors header. So a file is checked as what its name says when the name is a
//! safetensors or GGUF name (a loader going by the name reads it so, and the check says why it
//! would fail), else as what its first bytes say (the GGUF magic; a little-endian header length
//! that fits the file followed by `{`), else by its name again (a PyTorch checkpoint name, a
//! shard index, a config). Before, the value scan went by the name alone: a GGUF holding NaN
//! named `model.bin` packed and checked clean (issue 36 item 6).
//!
//! A zip is not taken for a PyTorch checkpoint by its content: `.npz`, `.keras` and other
//! archives are zips too, and the value scan does not read PyTorch files.

use std::fs::File;
use std::io;

use super::{gguf, read, safetensors};

/// The most bytes from a file's start that [`identify`] looks at.
pub(crate) const HEAD_BYTES: usize = 16;

/// What a file is checked as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A shard index (`*.index.json`), checked with the shards it names.
    ShardIndex,
    /// safetensors.
    Safetensors,
    /// GGUF.
    Gguf,
    /// A PyTorch checkpoint (`.bin`, `.pt`, `.pth`, `.ckpt`): zip or pickle.
    Torch,
    /// `config.json` or `tokenizer_config.json`, checked for code it names.
    Config,
}

impl Format {
    /// Whether the value scan reads the file's values ([`super::values`]).
    pub fn has_values(self) -> bool {
        matches!(self, Format::Safetensors | Format::Gguf)
    }
}

/// What the name alone says: the safetensors and GGUF names first, then a shard index, a
/// PyTorch checkpoint or a config. `name` may be a path (`/`-separated).
pub fn by_name(name: &str) -> Option<Format> {
    // Compared without regard to ASCII case, with no lowercased copy made (a pack asks this
    // of each of a million files).
    let name = name.rsplit('/').next().unwrap_or(name).as_bytes();
    let ext = name
        .rsplit(|&b| b == b'.')
        .next()
        .filter(|e| e.len() < name.len());
    let ext_is = |want: &str| ext.is_some_and(|e| e.eq_ignore_ascii_case(want.as_bytes()));
    let index = b".index.json";
    if name.len() >= index.len() && name[name.len() - index.len()..].eq_ignore_ascii_case(index) {
        Some(Format::ShardIndex)
    } else if ext_is("safetensors") {
        Some(Format::Safetensors)
    } else if ext_is("gguf") {
        Some(Format::Gguf)
    } else if ["bin", "pt", "pth", "ckpt"].into_iter().any(ext_is) {
        Some(Format::Torch)
    } else if name.eq_ignore_ascii_case(b"config.json")
        || name.eq_ignore_ascii_case(b"tokenizer_config.json")
    {
        Some(Format::Config)
    } else {
        None
    }
}

/// What the first bytes say (`head`, at least the first [`HEAD_BYTES`] of a file of `len`
/// bytes, or all of a shorter one): the GGUF magic, or a safetensors header (a little-endian
/// length from 2 to the reference reader's 100,000,000 that fits in the file, then `{`).
pub fn by_content(head: &[u8], len: u64) -> Option<Format> {
    if head.starts_with(gguf::MAGIC) {
        return Some(Format::Gguf);
    }
    let n = u64::from_le_bytes(head.get(..8)?.try_into().ok()?);
    let fits = (2..=safetensors::MAX_HEADER_SIZE).contains(&n) && 8 + n <= len;
    (fits && head.get(8) == Some(&b'{')).then_some(Format::Safetensors)
}

/// What the file `name` (`len` bytes, `head` its first bytes as for [`by_content`]) is read as:
/// a safetensors or GGUF name first, then its content, then the rest of [`by_name`].
pub fn identify(name: &str, head: &[u8], len: u64) -> Option<Format> {
    match by_name(name) {
        Some(f @ (Format::Safetensors | Format::Gguf | Format::ShardIndex)) => Some(f),
        named => by_content(head, len).or(named),
    }
}

/// [`identify`] for the open `file`, reading its first [`HEAD_BYTES`] through a positioned
/// read (the file's offset stays where it is).
///
/// # Errors
///
/// The read failed.
pub fn identify_file(name: &str, file: &File, len: u64) -> io::Result<Option<Format>> {
    let mut head = [0u8; HEAD_BYTES];
    let got = read::read_at(file, 0, &mut head)?;
    Ok(identify(name, &head[..got], len))
}

/// The smallest file with values to scan: a safetensors file whose header is `{}`.
const MIN_LAYOUT_BYTES: u64 = 10;

/// Whether the value scan reads the file `name` of `len` bytes whose first bytes are `head`
/// (as for [`by_content`]): it is long enough to hold a safetensors or GGUF header and its
/// format ([`identify`]) has values. The one rule every pass that decides from bytes at hand
/// applies (the scan, pack's read pass and its manifest bound, check's walk); [`has_values`]
/// is the same for an open file.
pub fn has_values_in(name: &str, head: &[u8], len: u64) -> bool {
    len >= MIN_LAYOUT_BYTES && identify(name, head, len).is_some_and(Format::has_values)
}

/// [`has_values_in`] for the file `name` open as `file` (`len` bytes), reading its first
/// [`HEAD_BYTES`] through a positioned read; a file too short to hold a header is not read.
///
/// # Errors
///
/// The read failed.
pub fn has_values(name: &str, file: &File, len: u64) -> io::Result<bool> {
    if len < MIN_LAYOUT_BYTES {
        return Ok(false);
    }
    let mut head = [0u8; HEAD_BYTES];
    let got = read::read_at(file, 0, &mut head)?;
    Ok(has_values_in(name, &head[..got], len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`by_name`] as it was written first, on a lowercased copy: the reference.
    fn by_name_lowercased(name: &str) -> Option<Format> {
        let name = name.rsplit('/').next().unwrap_or(name);
        let lower = name.to_ascii_lowercase();
        let ext = lower.rsplit_once('.').map_or("", |(_, e)| e);
        if lower.ends_with(".index.json") {
            Some(Format::ShardIndex)
        } else if ext == "safetensors" {
            Some(Format::Safetensors)
        } else if ext == "gguf" {
            Some(Format::Gguf)
        } else if matches!(ext, "bin" | "pt" | "pth" | "ckpt") {
            Some(Format::Torch)
        } else if lower == "config.json" || lower == "tokenizer_config.json" {
            Some(Format::Config)
        } else {
            None
        }
    }

    #[test]
    fn names_are_told_apart_as_the_lowercased_reference_does() {
        let names = [
            "",
            ".",
            "..",
            "bin",
            ".bin",
            "a.BIN",
            "d/x.Pt",
            "x.pth",
            "x.ckpt",
            "x.ckpt.tmp",
            "model.SafeTensors",
            "m.gguf",
            "m.GGUF",
            "a/b/model.safetensors.index.json",
            "x.INDEX.JSON",
            ".index.json",
            "index.json",
            "config.json",
            "d/CONFIG.json",
            "Tokenizer_Config.json",
            "tokenizer.json",
            "x.json",
            "é.bin",
            "d.bin/x",
            "x.",
            "dir.safetensors/readme",
            "q-00001-of-00002.gguf",
            "weights.bin.1",
        ];
        for name in names {
            assert_eq!(by_name(name), by_name_lowercased(name), "{name:?}");
        }
    }

    fn safetensors_head(n: u64) -> Vec<u8> {
        let mut h = n.to_le_bytes().to_vec();
        h.extend_from_slice(b"{\"a\":{\"dty");
        h
    }

    #[test]
    fn content_decides_unless_the_name_is_a_safetensors_or_gguf_name() {
        let gguf = b"GGUF\x03\0\0\0\x01\0\0\0\0\0\0\0";
        let st = safetensors_head(100);
        for name in [
            "model.bin",
            "weights",
            "blobs/0123abcd",
            "model.pt",
            "config.json",
        ] {
            assert_eq!(identify(name, gguf, 1000), Some(Format::Gguf), "{name}");
            assert_eq!(
                identify(name, &st, 1000),
                Some(Format::Safetensors),
                "{name}"
            );
        }
        // A name a loader goes by is checked as that format: the check says why it fails.
        assert_eq!(
            identify("m.safetensors", gguf, 1000),
            Some(Format::Safetensors)
        );
        assert_eq!(identify("m.GGUF", &st, 1000), Some(Format::Gguf));
        assert_eq!(
            identify("m.safetensors.index.json", gguf, 1000),
            Some(Format::ShardIndex)
        );
        // No content to go by: the name.
        assert_eq!(
            identify("pytorch_model.bin", b"PK\x03\x04", 1000),
            Some(Format::Torch)
        );
        assert_eq!(identify("archive.npz", b"PK\x03\x04", 1000), None);
        assert_eq!(
            identify("config.json", b"{\"model_type\"", 13),
            Some(Format::Config)
        );
        assert_eq!(identify("README.md", b"# A model\n", 10), None);
        assert!(Format::Gguf.has_values() && Format::Safetensors.has_values());
        assert!(!Format::Torch.has_values());
    }

    #[test]
    fn a_safetensors_header_must_fit_and_open_an_object() {
        assert_eq!(
            by_content(&safetensors_head(2), 10),
            Some(Format::Safetensors)
        );
        // Past the end of the file, over the reference reader's limit, too short, no object.
        assert_eq!(by_content(&safetensors_head(100), 107), None);
        assert_eq!(by_content(&safetensors_head(100_000_001), u64::MAX), None);
        assert_eq!(by_content(&safetensors_head(1), 100), None);
        assert_eq!(by_content(&safetensors_head(0), 100), None);
        let mut not_json = safetensors_head(10);
        not_json[8] = b'[';
        assert_eq!(by_content(&not_json, 100), None);
        assert_eq!(by_content(b"version https://git-lfs", 130), None);
        assert_eq!(by_content(b"GGU", 3), None);
        assert_eq!(by_content(b"", 0), None);
    }
}
