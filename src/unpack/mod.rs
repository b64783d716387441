//! Unpacking: a verified bundle, from media or from a registry, into a target (a directory, a
//! Hugging Face cache, an OCI image layout), through the pipeline ([`crate::pipeline`]).
//!
//! One folder per kind of target: [`dir`] (staging beside `--dest`, receipt, one rename; and
//! the installed base a delta applies onto), [`hf`] (blobs, snapshot links and refs of a
//! Hugging Face cache, with undo; and the cache snapshot a delta applies onto),
//! [`oci_layout`] (an OCI image layout holding the ModelPack artifact `push` publishes),
//! [`registry`] (a registry: what `airlock push` publishes; with [`registry_base`], a
//! repository holding a delta's base), and [`notes`] (what every install reports, free space).
//! Each target is a [`crate::pipeline::Target`]; [`unpack`] runs any source
//! ([`crate::source`]) into any of them.

pub mod dir;
pub mod hf;
pub mod notes;
pub mod oci_layout;
pub mod parents;
pub mod registry;
pub mod registry_base;
pub mod resume;
pub mod select;

pub use dir::{DirTarget, Installed, UnpackOptions};
pub use hf::{HfInstalled, HfTarget, HfUnpackOptions, SnapshotState};
pub use notes::InstallNotes;
pub use oci_layout::{LayoutOptions, LayoutTarget, LayoutWritten};

use crate::error::Result;
use crate::pipeline::{self, Source};
use crate::progress::Progress;

/// Where to unpack.
pub enum To {
    /// A directory (`--dest`).
    Dir(UnpackOptions),
    /// A Hugging Face cache (`--hf-cache`).
    HfCache(HfUnpackOptions),
    /// An OCI image layout (`--oci-layout`).
    Layout(LayoutOptions),
}

/// What an unpack did.
#[derive(Debug)]
pub enum Unpacked {
    /// Into a directory.
    Dir(Installed),
    /// Into a Hugging Face cache.
    HfCache(HfInstalled),
    /// Into an OCI image layout.
    Layout(LayoutWritten),
}

impl Unpacked {
    /// What every install reports besides its result.
    pub fn notes(&self) -> &InstallNotes {
        match self {
            Unpacked::Dir(i) => &i.notes,
            Unpacked::HfCache(i) => &i.notes,
            Unpacked::Layout(i) => &i.notes,
        }
    }
}

/// Unpacks the verified bundle `source` gives into `to`, whatever the source and the target:
/// a delta's stream is applied onto the base the target holds.
pub fn unpack(source: &dyn Source, to: To, progress: &dyn Progress) -> Result<Unpacked> {
    match to {
        To::Dir(o) => pipeline::run(source, DirTarget::new(o), progress).map(Unpacked::Dir),
        To::HfCache(o) => pipeline::run(source, HfTarget::new(o), progress).map(Unpacked::HfCache),
        To::Layout(o) => {
            pipeline::run(source, LayoutTarget::new(o), progress).map(Unpacked::Layout)
        }
    }
}
