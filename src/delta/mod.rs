//! Delta bundles: carrying a new version of a model as its difference from an installed base.
//!
//! docs/FORMAT.md section 16 is the normative description. This folder holds:
//!
//! - [`apply`]: applying a delta onto any base, the pipeline stage between a delta's verified
//!   stream and any target (`crate::pipeline`);
//! - [`patch`]: the `xor` patch of one file against one base file, with the `bytes` and
//!   `safetensors` alignments. Both directions stream: memory stays at a few buffers (plus a
//!   safetensors header, which the reference reader caps at 100 MB) whatever the file size.
//!
//! Why XOR against an aligned base rather than a generic binary delta (bsdiff, `zstd
//! --patch-from`): a fine-tuning step changes a few percent of the elements of every tensor in
//! place, which leaves `new XOR base` mostly zero bytes that zstd at level 1 squeezes to about
//! the changed fraction, in one streaming pass and without holding the base in a window (zstd's
//! `--patch-from` needs the whole base in memory and stops at 2 GiB, shards are 5-10 GB). A
//! header change that moves every tensor is absorbed by aligning tensors by name, dtype and
//! shape instead of by offset.

pub mod apply;
pub mod patch;

use crate::manifest::Manifest;

/// What a delta holds, in new-file bytes.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counts {
    /// Files and bytes carried whole in the stream.
    pub carried_files: u64,
    /// Bytes of the carried files.
    pub carried_bytes: u64,
    /// Files taken unchanged from the base.
    pub copied_files: u64,
    /// Bytes of the copied files.
    pub copied_bytes: u64,
    /// Files rebuilt from a base file and a patch.
    pub patched_files: u64,
    /// Bytes of the patched files.
    pub patched_bytes: u64,
    /// Bytes of their patches.
    pub patch_bytes: u64,
}

impl Counts {
    /// The counts of a delta manifest.
    pub fn of(m: &Manifest) -> Counts {
        let mut c = Counts::default();
        for f in &m.files {
            match (&f.from, f.patch()) {
                (None, _) => {
                    c.carried_files += 1;
                    c.carried_bytes += f.size;
                }
                (Some(_), None) => {
                    c.copied_files += 1;
                    c.copied_bytes += f.size;
                }
                (Some(_), Some((size, _))) => {
                    c.patched_files += 1;
                    c.patched_bytes += f.size;
                    c.patch_bytes += size;
                }
            }
        }
        c
    }
}
