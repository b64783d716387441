#![no_main]
//! The delta patch decoders (FORMAT.md section 16.3), both alignments (`bytes` and
//! `safetensors`), both forms (the pull `decode` and the push `PushDecoder` fed in pieces).
//!
//! Input: a flags byte, a 2-byte little-endian base length, the base, then the rest. In
//! *encoded* mode the rest is the new file: it is encoded against the base (so the decoders see
//! a well-formed frame and, with a safetensors-looking pair, the safetensors alignment), decoded
//! back, then decoded again with one byte of the patch changed. In *raw* mode the rest is the
//! patch itself, with the new file's size taken from 4 of its bytes.
//!
//! Invariants: no panic, no hang, memory within the cap scripts/fuzz.sh sets; an encoded patch
//! decodes to exactly the new file in both forms; no decoder ever produces more than the
//! declared size; the two forms agree on success and on the bytes.
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use airlock::delta::patch::{Map, PushDecoder, decode, encode};
use libfuzzer_sys::fuzz_target;

/// Largest new file the target rebuilds (the decoders stream; this keeps each run short).
const MAX_SIZE: u64 = 4 << 20;

/// A file of this process, rewritten for each input.
fn scratch(name: &str, bytes: &[u8]) -> File {
    let dir = std::env::temp_dir().join(format!("airlock-fuzz-patch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f
}

/// Output that fails once it passes `limit` bytes (a decoder must never get there).
struct Capped {
    bytes: Vec<u8>,
    limit: u64,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        assert!(
            self.bytes.len() as u64 + buf.len() as u64 <= self.limit,
            "a decoder produced more than the declared size"
        );
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Both decoders on one patch; returns what they rebuilt when both succeed, and checks that
/// they agree.
fn both(patch: &[u8], size: u64, base: &File, map: Map, step: usize) -> Option<Vec<u8>> {
    let mut pulled = Capped {
        bytes: Vec::new(),
        limit: size,
    };
    let pull = decode(patch, size, base, map, &mut pulled);
    let mut pushed = Capped {
        bytes: Vec::new(),
        limit: size,
    };
    let push = (|| {
        let mut dec = PushDecoder::new(base.try_clone()?, map, size)?;
        let mut emit = |b: &[u8]| pushed.write_all(b);
        for piece in patch.chunks(step) {
            dec.write(piece, &mut emit)?;
        }
        dec.finish(&mut emit)
    })();
    assert_eq!(
        pull.is_ok(),
        push.is_ok(),
        "the decoders disagree: pull {pull:?}, push {push:?}"
    );
    if pull.is_ok() {
        assert_eq!(pulled.bytes.len() as u64, size);
        assert!(
            pulled.bytes == pushed.bytes,
            "the decoders rebuilt different bytes"
        );
        return Some(pulled.bytes);
    }
    None
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let flags = data[0];
    let map = if flags & 1 == 0 {
        Map::Bytes
    } else {
        Map::Safetensors
    };
    let encoded = flags & 2 == 0;
    let step = [1usize, 7, 4096, 1 << 20][usize::from(flags >> 2) & 3];
    let base_len = usize::from(u16::from_le_bytes([data[1], data[2]]));
    let rest = &data[3..];
    if base_len > rest.len() {
        return;
    }
    let base = scratch("base", &rest[..base_len]);
    let rest = &rest[base_len..];
    if encoded {
        let new = scratch("new", rest);
        let Ok((patch, _)) = encode(&new, &base, map, 1, Vec::new()) else {
            // The safetensors map needs both headers to parse; the packer falls back then.
            assert!(map == Map::Safetensors, "the bytes map always encodes");
            return;
        };
        let size = rest.len() as u64;
        let rebuilt = both(&patch, size, &base, map, step);
        assert!(
            rebuilt.as_deref() == Some(rest),
            "an encoded patch did not rebuild the new file"
        );
        // One byte of the patch changed: whatever happens, nothing panics or overflows.
        if !patch.is_empty() {
            let mut bad = patch.clone();
            let at = usize::from(flags) * 31 % bad.len();
            bad[at] ^= 1 + (flags >> 4);
            both(&bad, size, &base, map, step);
        }
    } else {
        if rest.len() < 4 {
            return;
        }
        let size = u64::from(u32::from_le_bytes(rest[..4].try_into().unwrap())) % MAX_SIZE;
        both(&rest[4..], size, &base, map, step);
    }
});
