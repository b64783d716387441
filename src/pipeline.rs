//! The install pipeline: a bundle *source* feeds a *target* through the verified entry stream,
//! and a delta is applied in between when the source carries one.
//!
//! ```text
//! source (volumes on disk | registry) → Verifier → [DeltaStage onto the target's base] → Tally → target
//! ```
//!
//! - A [`Source`] reads a verified bundle's content (the volumes of a bundle on disk, or the
//!   blobs of a registry artifact) and feeds every entry through a [`crate::entries::Verifier`]:
//!   the one place that holds each entry to the signed manifest.
//! - A [`Target`] is where the content goes: a directory, a Hugging Face cache, an OCI image
//!   layout, a registry. It has two phases around the entries: [`Target::begin`] checks
//!   everything that needs no content and prepares (replace rules, free space, a private
//!   staging area) without changing anything visible; [`Target::commit`] makes the result
//!   visible in one step once every entry arrived verified. Dropping a target that did not
//!   commit removes what it staged.
//! - A source whose entries are a delta's stream (patches) is applied onto the base the target
//!   holds ([`Target::base`]: the version being updated is the one already at the target) by
//!   [`DeltaStage`]; a target never learns how its bytes were made.
//!
//! Every combination composes: each source feeds each target, full or delta.

use crate::bundle::open::Opened;
use crate::bundle::stream::{self, StreamReport};
use crate::delta::apply::DeltaStage;
use crate::entries::Base;
use crate::entries::{EntrySink, Mode, Tally};
use crate::error::Result;
use crate::progress::Progress;

/// What a source reports besides the entries.
#[derive(Debug, Default)]
pub struct Fed {
    /// Data volumes that were damaged and rebuilt from parity as they were read (FORMAT.md
    /// section 17); the bytes fed match the signed digests all the same.
    pub repaired_volumes: Vec<String>,
}

/// Where a verified bundle's content comes from.
pub trait Source {
    /// The bundle, its signature verified.
    fn opened(&self) -> &Opened;

    /// Whether the entries are the complete tree the manifest lists (a registry artifact is
    /// always complete) rather than the bundle's stream, which for a delta holds patches.
    fn complete(&self) -> bool;

    /// Feeds every entry, each checked by a verifier, into `sink`, in bundle order.
    fn feed(&self, sink: &mut dyn EntrySink, progress: &dyn Progress) -> Result<Fed>;
}

/// Where a verified bundle's content goes (module documentation).
pub trait Target {
    /// What a finished run reports.
    type Done;

    /// Checks everything that needs no content and prepares; changes nothing visible.
    fn begin(&mut self, opened: &Opened, progress: &dyn Progress) -> Result<()>;

    /// Where the target's base of a delta is.
    type Base: Base;

    /// The base a delta applies onto: the version the target already holds, proven to be the
    /// one the delta names. Called before [`Target::begin`]: a target without the base is
    /// refused before anything is prepared.
    fn base(&mut self, opened: &Opened) -> Result<Self::Base>;

    /// Where the entries go, between [`Target::begin`] and [`Target::commit`].
    fn sink(&mut self) -> &mut dyn EntrySink;

    /// Every entry arrived verified: make the result visible.
    fn commit(self, opened: &Opened, fed: Fed, progress: &dyn Progress) -> Result<Self::Done>;
}

/// Runs `source` into `target`: begin, the entries (through a delta onto the target's base
/// when the source carries one), a tally of what arrived, commit.
pub fn run<T: Target>(
    source: &dyn Source,
    mut target: T,
    progress: &dyn Progress,
) -> Result<T::Done> {
    let opened = source.opened();
    let m = &opened.manifest;
    let base = if m.base.is_some() && !source.complete() {
        Some(target.base(opened)?)
    } else {
        None
    };
    target.begin(opened, progress)?;
    let fed = if let Some(mut base) = base {
        let mut tally = Tally::new(m, target.sink());
        let mut stage = DeltaStage::new(m, &mut base, &mut tally)?;
        stage.prepare(progress)?;
        let fed = source.feed(&mut stage, progress)?;
        stage.finish()?;
        drop(stage);
        tally.finish()?;
        fed
    } else {
        let mut tally = Tally::new(m, target.sink());
        let fed = source.feed(&mut tally, progress)?;
        tally.finish()?;
        fed
    };
    target.commit(opened, fed, progress)
}

/// A bundle on disk (removable media): its volumes → zstd → tar, in strict mode (the first
/// problem stops it; damaged volumes are rebuilt from parity where it can).
pub struct BundleOnDisk<'a>(pub &'a Opened);

impl Source for BundleOnDisk<'_> {
    fn opened(&self) -> &Opened {
        self.0
    }
    fn complete(&self) -> bool {
        self.0.manifest.base.is_none()
    }
    fn feed(&self, sink: &mut dyn EntrySink, progress: &dyn Progress) -> Result<Fed> {
        let StreamReport { repaired, .. } = stream::stream(self.0, Mode::Strict, sink, progress)?;
        Ok(Fed {
            repaired_volumes: repaired,
        })
    }
}
