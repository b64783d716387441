//! Bundles on disk: writing (`write`: tar → zstd → volumes) and reading, split by concept:
//! `open` (the signature and the manifest), `volumes` (each volume's size and digests, stray
//! files, the volume-reading thread) and `stream` (volumes → zstd → cap → tar → entry checks →
//! a sink). The verdict that combines them is `crate::verify`.

pub mod open;
pub mod parity_write;
pub mod stream;
pub mod volumes;
pub mod write;
