//! Bundles on disk, read, split by concept: `open` (the signature and the manifest, first),
//! `volumes` (each volume's size and digests, stray files, the volume-reading thread, parity
//! units) and `stream` (volumes → zstd → cap → tar → the verifier → a sink: the pipeline's
//! source for a bundle on disk). The verdict that combines them is `crate::verify`; writing a
//! bundle is `crate::pack`.

pub mod damage;
pub mod media;
pub mod open;
pub mod stream;
pub mod volumes;
