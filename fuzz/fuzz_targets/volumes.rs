#![no_main]
//! The volume reader with its size cap: a manifest and the bytes of its volumes, streamed
//! through the same code unpack and `verify --deep` use (volume reader thread → zstd → cap →
//! strict tar reader → entry checks). Input: a 4-byte little-endian manifest length, the
//! manifest, then the payload, cut into the volumes at the sizes the manifest lists (the rest
//! goes to the last volume; a short payload truncates volumes and leaves later ones missing).
//!
//! Invariants: no panic, no hang, and never more file bytes handed on than the manifest
//! declares (the decompression cap holds), in both modes.
use std::io::{self, Read};
use std::path::PathBuf;

use airlock::bundle::stream::stream_volumes;
use airlock::entries::{EntrySink, Mode};
use airlock::bundle::volumes::VolumeSource;
use airlock::error::Result;
use airlock::manifest::{FileEntry, Manifest};
use airlock::progress::Silent;
use libfuzzer_sys::fuzz_target;

struct Memory(Vec<Vec<u8>>);

impl VolumeSource for Memory {
    fn open(&self, index: usize, _name: &str) -> io::Result<Box<dyn Read + Send + '_>> {
        match self.0.get(index) {
            Some(v) => Ok(Box::new(&v[..])),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        PathBuf::from(name)
    }
}

/// Counts what reaches the installer.
struct Counting {
    bytes: u64,
    limit: u64,
}

impl EntrySink for Counting {
    fn dir(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
    fn begin_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.bytes += bytes.len() as u64;
        assert!(self.bytes <= self.limit, "more file bytes than the manifest declares");
        Ok(())
    }
    fn end_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let len = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
    let rest = &data[4..];
    if len > rest.len() {
        return;
    }
    let Ok(m) = Manifest::parse(&rest[..len]) else {
        return;
    };
    // Keep each run small: the declared sizes bound the work, and the fuzzer's input bounds
    // the bytes actually there.
    if m.stream.size > 64 << 20 || m.volumes.len() > 64 {
        return;
    }
    let mut payload = &rest[len..];
    let mut volumes = Vec::new();
    for (i, v) in m.volumes.iter().enumerate() {
        if payload.is_empty() {
            break;
        }
        let take = if i + 1 == m.volumes.len() {
            payload.len()
        } else {
            (v.size as usize).min(payload.len())
        };
        volumes.push(payload[..take].to_vec());
        payload = &payload[take..];
    }
    let source = Memory(volumes);
    for mode in [Mode::Collect, Mode::Strict] {
        let mut sink = Counting {
            bytes: 0,
            limit: m.totals.file_bytes,
        };
        let _ = stream_volumes(&m, &source, mode, &mut sink, &Silent);
    }
});
