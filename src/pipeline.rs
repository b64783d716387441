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

use std::collections::HashSet;

use crate::bundle::open::Opened;
use crate::delta::apply::DeltaStage;
use crate::entries::Base;
use crate::entries::{EntrySink, Tally};
use crate::error::{Error, Result};
use crate::manifest::Expected;
use crate::progress::Progress;

/// What a source reports besides the entries.
#[derive(Debug, Default)]
pub struct Fed {
    /// Data volumes that were damaged and rebuilt from parity as they were read (FORMAT.md
    /// section 17); the bytes fed match the signed digests all the same.
    pub repaired_volumes: Vec<String>,
    /// Where the source started, when it did not start at the beginning (a resumed install).
    pub started_at: Option<StartedAt>,
}

pub use crate::bundle::stream::StartedAt;

/// What a target already holds from an interrupted install of the same signed manifest,
/// each file proven against it (size and SHA-256, re-read once) before it counts. The target's
/// sink answers [`EntrySink::holds`] from it (the one way a source learns what it may skip);
/// the pipeline reads it only to tell the operator.
#[derive(Debug, Default)]
pub struct Kept {
    /// Directories of the manifest that exist in the staged tree.
    pub dirs: HashSet<String>,
    /// Files of the manifest staged complete and proven.
    pub files: HashSet<String>,
    /// Their bytes.
    pub bytes: u64,
    /// Staged files that did not prove complete and were discarded.
    pub discarded: u64,
    /// Where they are, for the operator: "staged", "in the layout".
    pub held_in: &'static str,
}

/// `bytes` for a person: GiB with two decimals, MiB below 1 GiB.
fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Whether an install that failed with `e` keeps what it staged in `work` for a rerun: a
/// failure of the machine writing there (a full disk, an I/O error on a staged file), not of
/// the bundle or of the medium it is read from.
pub fn keeps_for_rerun(e: &Error, work: &std::path::Path) -> bool {
    match e {
        Error::NoSpace { .. } => true,
        Error::Io { path, .. } => path.starts_with(work),
        _ => false,
    }
}

/// Where a verified bundle's content comes from.
pub trait Source {
    /// The bundle, its signature verified.
    fn opened(&self) -> &Opened;

    /// Whether the entries are the complete tree the manifest lists (a registry artifact is
    /// always complete) rather than the bundle's stream, which for a delta holds patches.
    fn complete(&self) -> bool;

    /// Feeds every entry, each checked by a verifier, into `sink`, in bundle order. A source
    /// that can leave out any one file (a registry: each file is a blob of its own) asks
    /// [`EntrySink::holds`] and does not fetch what the sink holds.
    fn feed(&self, sink: &mut dyn EntrySink, progress: &dyn Progress) -> Result<Fed>;

    /// The entry (an index into the stream's entries in bundle order,
    /// [`crate::manifest::Manifest::stream_entries`]: for a delta, its carried files and
    /// patches) from which this source can start when the target's sink holds every one
    /// before `wanted` ([`EntrySink::holds`]): at most `wanted`. The default: 0, the source
    /// cannot start part way (it may still leave out the files the sink holds, see
    /// [`Source::feed`]).
    fn start_at(&self, wanted: usize) -> usize {
        let _ = wanted;
        0
    }

    /// Where the source reads from when it starts at entry `start`, for the operator
    /// (", reading from volume data.003").
    fn reads_from(&self, start: usize) -> String {
        let _ = start;
        ", reading from the start".to_string()
    }

    /// [`Source::feed`] from entry `start` (a value [`Source::start_at`] returned) on.
    fn feed_from(
        &self,
        sink: &mut dyn EntrySink,
        progress: &dyn Progress,
        start: usize,
    ) -> Result<Fed> {
        debug_assert_eq!(start, 0);
        self.feed(sink, progress)
    }
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

    /// What the target already holds from an interrupted install of this bundle (known after
    /// [`Target::begin`]), for the operator: its sink [`EntrySink::holds`] those files and
    /// ignores their bytes if they come anyway.
    fn kept(&self) -> Option<&Kept> {
        None
    }

    /// The install failed with `e`: keep what was staged for a rerun instead of removing it
    /// when `e` is a failure of the target's machine (a full disk, an I/O error writing what
    /// it stages), not of the bundle. The default: remove it.
    fn keep_for_rerun(&mut self, e: &Error) {
        let _ = e;
    }
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
    match feed(source, &mut target, base, progress) {
        Ok(fed) => target.commit(opened, fed, progress),
        Err(e) => {
            target.keep_for_rerun(&e);
            Err(e)
        }
    }
}

/// The entries of [`run`]: from the first one the target's sink does not hold yet where the
/// source can start there, through a delta onto `base` when there is one, then the tally.
fn feed<T: Target>(
    source: &dyn Source,
    target: &mut T,
    base: Option<T::Base>,
    progress: &dyn Progress,
) -> Result<Fed> {
    let opened = source.opened();
    let m = &opened.manifest;
    // A resumed install: what the target kept, for the operator.
    let kept = target
        .kept()
        .map(|k| (k.files.len(), k.bytes, k.discarded, k.held_in));
    let mut tally = Tally::new(m, target.sink());
    let fed = if let Some(mut base) = base {
        // The delta's stream holds its carried files and its patches (FORMAT.md section
        // 16.2): a rerun starts it at the first of those whose file the target does not hold
        // yet. Its directories are all made by the stage before the stream (its own
        // `.airlock-delta` is not installed), so none of them is needed from the stream.
        let patches = m.patch_entries();
        let entries = m.stream_entries(&patches);
        let start = match kept {
            Some(k) => {
                let mut wanted = entries.len();
                for (i, e) in entries.iter().enumerate() {
                    if !delta_entry_held(m, &mut tally, e)? {
                        wanted = i;
                        break;
                    }
                }
                let start = source.start_at(wanted);
                note_resuming(k, &delta_reads_from(source, start), progress);
                start
            }
            None => 0,
        };
        let mut stage = DeltaStage::new(m, &mut base, &mut tally)?;
        stage.prepare(progress)?;
        for e in &entries[..start] {
            stage.already_held(e)?;
        }
        let fed = source.feed_from(&mut stage, progress, start)?;
        stage.finish()?;
        fed
    } else {
        let expected = m.expected_entries();
        let start = match kept {
            Some(k) => {
                let mut wanted = expected.len();
                for (i, e) in expected.iter().enumerate() {
                    if !tally.sink_holds(e)? {
                        wanted = i;
                        break;
                    }
                }
                let start = source.start_at(wanted);
                note_resuming(k, &source.reads_from(start), progress);
                start
            }
            None => 0,
        };
        for e in &expected[..start] {
            tally.already_held(e)?;
        }
        source.feed_from(&mut tally, progress, start)?
    };
    tally.finish()?;
    Ok(fed)
}

/// Whether the delta stream's entry `e` needs nothing from the stream for the sink behind
/// `tally`: a directory (the stage makes every directory before the stream), a carried file
/// the sink holds, a patch of a file it holds.
fn delta_entry_held(
    m: &crate::manifest::Manifest,
    tally: &mut Tally<'_, '_>,
    e: &Expected<'_>,
) -> Result<bool> {
    match e {
        Expected::Dir(_) => Ok(true),
        Expected::File(f) => match crate::delta::apply::patch_index(&f.path) {
            Some(i) => match m.files.get(i) {
                Some(t) => tally.sink_holds(&Expected::File(t)),
                None => Ok(false),
            },
            None => tally.sink_holds(e),
        },
    }
}

/// Where a delta's source reads from when it starts at stream entry `start`.
fn delta_reads_from(source: &dyn Source, start: usize) -> String {
    if start == 0 {
        ", reading the delta's stream from its start (the copies and patches of the kept files are skipped)".to_string()
    } else {
        source.reads_from(start)
    }
}

/// Tells the operator what a resumed install holds (`kept`: files, bytes, discarded, where)
/// and where the source reads from.
fn note_resuming(
    (files, bytes, discarded, held_in): (usize, u64, u64, &str),
    reads_from: &str,
    progress: &dyn Progress,
) {
    progress.note(&format!(
        "resuming: {files} files ({}) already {held_in} and proven{}{reads_from}",
        gib(bytes),
        if discarded > 0 {
            format!(", {discarded} staged entries discarded")
        } else {
            String::new()
        },
    ));
}
