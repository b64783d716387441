//! Bundles on disk: writing (`write`) and reading with verification (`read`).

pub mod read;
pub mod write;
