//! The verdict on a bundle: one entry point, [`verify`], that a library caller and
//! `airlock verify` share.
//!
//! It takes a bundle whose signature has already verified ([`crate::bundle::open`]) and
//! checks its volumes (every listed volume there, of its size, every signed chunk digest and,
//! in format version 1, the whole-volume digest), finds the files the manifest does not list,
//! and at [`Depth::Deep`] streams the whole payload to check every file's digest. The result is
//! a [`Verdict`] that records everything found, so the caller can report all of it in one go
//! (an operator re-copies every damaged volume in one trip across the gap), and that turns into
//! the one error the bundle's state amounts to with [`Verdict::into_error`].

use crate::bundle::damage::{self, DamageMap};
use crate::bundle::media::VolumeRead;
use crate::bundle::open::BundleDir;
use crate::bundle::stream;
use crate::bundle::volumes::{self, Repairability, StrayFile, StrayKind, VolumeProblem};
use crate::entries::{Mode, NullSink};
use crate::error::Error;
use crate::manifest::Warning;
use crate::progress::Progress;

/// How the volumes are read: from the device, past the page cache, or through it
/// (`verify --cached`); re-exported so a caller of [`verify`] needs no `fsio`.
pub use crate::fsio::MediumRead;

/// How much of the bundle to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Depth {
    /// The volumes: sizes and signed digests (`airlock verify`).
    Volumes,
    /// The volumes and the whole stream, every entry and file digest (`verify --deep`).
    Deep,
}

/// How the deep check of the stream ended.
#[derive(Debug)]
pub enum DeepOutcome {
    /// The stream was read to its end; these files failed their digests.
    Completed {
        /// Paths of the files whose content fails its sha256.
        bad_files: Vec<String>,
    },
    /// The stream could not be read to its end because of volume damage already listed in
    /// [`Verdict::bad_volumes`] (or a stray volume); the text says where it stopped.
    StoppedAtDamage(String),
    /// Every volume is good but the stream breaks the format or disagrees with the manifest
    /// (a signed but malformed bundle), or a volume could not be read (a failing medium).
    Failed(Error),
}

/// The verdict on an opened bundle.
#[derive(Debug)]
pub struct Verdict {
    /// How deep the check went.
    pub depth: Depth,
    /// How many volumes the manifest lists (all were checked).
    pub volumes_checked: usize,
    /// How many parity volumes the manifest lists (all were checked).
    pub parity_checked: usize,
    /// Listed volumes that are missing, of the wrong size or fail their digests, in manifest
    /// order.
    pub bad_volumes: Vec<VolumeProblem>,
    /// Files in the bundle directory the manifest does not list. Volume-like ones make the
    /// bundle fail; the others are reported and ignored (FORMAT.md, section 2).
    pub stray: Vec<StrayFile>,
    /// The deep check's outcome, at [`Depth::Deep`].
    pub deep: Option<DeepOutcome>,
    /// Model-check findings the packer recorded in the signed manifest (a bundle packed with
    /// `--no-model-checks`): not failures of the bundle, but the operator must see them.
    pub recorded_warnings: Vec<Warning>,
    /// Disagreements between the signature's trusted comment and the manifest.
    pub signature_warnings: Vec<String>,
    /// Parity volumes that are missing, of the wrong size or fail their digests (FORMAT.md
    /// section 17), in manifest order.
    pub bad_parity: Vec<VolumeProblem>,
    /// With parity and damage: how the damage compares with the parity budget.
    pub repair: Option<Repairability>,
    /// With damage to listed volumes: the state of each of their units, for a display that
    /// draws it ([`crate::bundle::damage`]).
    pub damage: Option<DamageMap>,
    /// How each volume read was read: from the medium, or why not (FORMAT.md section 21).
    pub reads: Vec<VolumeRead>,
    /// Copies of a volume on several media that failed where another copy was good.
    pub copy_notes: Vec<String>,
}

impl Verdict {
    /// Stray files that look like volumes (they fail the bundle).
    pub fn stray_volumes(&self) -> impl Iterator<Item = &StrayFile> {
        self.stray
            .iter()
            .filter(|s| s.kind == StrayKind::VolumeLike)
    }

    /// Stray files that do not look like volumes (reported, ignored).
    pub fn stray_others(&self) -> impl Iterator<Item = &StrayFile> {
        self.stray.iter().filter(|s| s.kind == StrayKind::Other)
    }

    /// Files whose content failed its digest in a completed deep check.
    pub fn bad_files(&self) -> &[String] {
        match &self.deep {
            Some(DeepOutcome::Completed { bad_files }) => bad_files,
            _ => &[],
        }
    }

    /// Whether every volume read came from below the page cache.
    pub fn all_from_medium(&self) -> bool {
        self.reads.iter().all(|r| r.read_from.from_medium())
    }

    /// Whether the bundle passed every check made.
    pub fn is_ok(&self) -> bool {
        self.bad_volumes.is_empty()
            && self.bad_parity.is_empty()
            && self.stray_volumes().next().is_none()
            && match &self.deep {
                None => true,
                Some(DeepOutcome::Completed { bad_files }) => bad_files.is_empty(),
                Some(_) => false,
            }
    }

    /// The error the verdict amounts to, `None` when the bundle is good. Volume problems come
    /// first (they explain any stream failure), then a stream failure, then bad files.
    pub fn into_error(self) -> Option<Error> {
        if !self.bad_volumes.is_empty()
            || !self.bad_parity.is_empty()
            || self.stray_volumes().next().is_some()
        {
            let mut listed = self.bad_volumes.clone();
            listed.extend(self.bad_parity.iter().cloned());
            let mut e = volumes::volumes_error(
                &listed,
                &self.stray,
                volumes::VolumeCounts {
                    data: self.volumes_checked,
                    parity: self.parity_checked,
                },
                true,
            );
            if let (
                Some(r),
                Error::BadVolumes {
                    summary,
                    copy_again,
                    ..
                },
            ) = (&self.repair, &mut e)
            {
                summary.push_str("; ");
                summary.push_str(&r.describe());
                *copy_again = if r.repairable {
                    vec![]
                } else {
                    r.copy_again.clone()
                };
            }
            return Some(e);
        }
        match self.deep {
            Some(DeepOutcome::Failed(e)) => Some(e),
            Some(DeepOutcome::Completed { bad_files }) if !bad_files.is_empty() => {
                Some(Error::BadFile {
                    path: bad_files.join(", "),
                    reason: format!(
                        "{} file(s) fail their sha256 although every volume matches",
                        bad_files.len()
                    ),
                })
            }
            _ => None,
        }
    }
}

/// Checks an opened bundle to `depth`, reporting progress; reads only.
///
/// At [`Depth::Deep`] with every volume present at its size, the stream is read once: it
/// checks every chunk digest as it goes (on a thread of its own), so when it finds nothing
/// wrong a separate read of every volume would prove nothing more. Any volume problem falls
/// back to the full per-volume check, which names every damaged volume and byte range.
pub fn verify(opened: &BundleDir, depth: Depth, progress: &dyn Progress) -> Verdict {
    let m = &opened.manifest;
    let mut streamed = None;
    if depth == Depth::Deep && volumes::volumes_look_complete(opened) {
        streamed = Some(stream::stream(
            opened,
            Mode::Collect,
            &mut NullSink,
            progress,
        ));
    }
    let bad_volumes = match &streamed {
        Some(Ok(report)) if report.volume_problems.is_empty() => vec![],
        _ => volumes::check_volumes(opened, progress),
    };
    let bad_parity = volumes::check_parity_volumes(opened, progress);
    let (repair, damage) = if bad_volumes.is_empty() && bad_parity.is_empty() {
        (None, None)
    } else {
        let (repair, map) = damage::assess(opened, &bad_volumes, &bad_parity);
        (repair, Some(map))
    };
    let stray = volumes::stray_files(opened);
    let damaged = !bad_volumes.is_empty() || stray.iter().any(|s| s.kind == StrayKind::VolumeLike);
    let deep = (depth == Depth::Deep).then(|| {
        let streamed = streamed
            .unwrap_or_else(|| stream::stream(opened, Mode::Collect, &mut NullSink, progress));
        match streamed {
            Ok(report) => DeepOutcome::Completed {
                bad_files: report.bad_files,
            },
            Err(e) if !damaged => DeepOutcome::Failed(e),
            Err(e) => DeepOutcome::StoppedAtDamage(e.to_string()),
        }
    });
    Verdict {
        depth,
        volumes_checked: m.volumes.len(),
        parity_checked: m.parity.as_ref().map_or(0, |p| p.volumes.len()),
        bad_volumes,
        bad_parity,
        repair,
        damage,
        stray,
        deep,
        recorded_warnings: m.warnings.clone(),
        signature_warnings: opened.warnings.clone(),
        reads: opened.media.reads(),
        copy_notes: opened.media.notes(),
    }
}
