//! Where a verified bundle's content comes from ([`crate::pipeline::Source`]), the two sources
//! side by side: [`disk`] (a bundle on disk: its volumes → zstd → tar, in strict mode) and
//! [`registry`] (the ModelPack artifact `airlock push` published, its signed manifest fetched
//! and verified first, then each file's blob by its signed digest). Both feed every entry
//! through an [`crate::entries::Verifier`]; the targets are in [`crate::unpack`].

pub mod disk;
pub mod registry;

pub use disk::BundleOnDisk;
pub use registry::RegistrySource;
