//! Delta bundles: carrying a new version of a model as its difference from an installed base.
//!
//! docs/FORMAT.md section 16 is the normative description. This folder holds:
//!
//! - [`pack`]: `pack --base`, reading the base and choosing per file copy, xor or carried;
//! - [`apply`]: installing a delta over its base through `install::unpack_with`;
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
pub mod pack;
pub mod patch;

#[cfg(test)]
mod manifest_tests;
