//! The volumes at rest: that each listed one is there with its size, that its signed chunk
//! digests (and, in format version 1, its whole-volume digest) match, hashed in parallel, and
//! which files in the bundle directory are not part of the bundle.

use std::io;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::bundle::open::BundleDir;
use crate::display;
use crate::error::Error;
use crate::fsio::{AlignedBuf, Follow, MEDIUM_READ_SIZE, MediumFile, MediumRead, open_medium};
use crate::manifest::{self, Manifest};
use crate::progress::{Phase, Progress};

/// What is wrong with one volume the manifest lists.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VolumeProblem {
    /// Volume file name.
    pub volume: String,
    /// The volume's number, as in its name (`data.003` and `parity.003` are 3): its 0-based
    /// position in the manifest's list of data or of parity volumes.
    pub index: usize,
    /// What is wrong.
    pub problem: String,
    /// Byte ranges `[start, end)` whose chunk digests fail.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bad_ranges: Vec<(u64, u64)>,
    /// For a volume on none of the directories given: the medium that holds it ("medium 2 of
    /// 3"), when the media's placement file says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elsewhere: Option<String>,
    /// Whether the volume is on none of the directories given (rather than damaged).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// What a file in the bundle directory that the manifest does not list looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrayKind {
    /// Named like a volume ([`is_volume_like`]): a volume of another copy or another bundle
    /// mixed in. Refused by verify and unpack (FORMAT.md, section 2).
    VolumeLike,
    /// Anything else (a `README.txt`, a checksum file): reported by verify, ignored otherwise.
    Other,
}

/// A file in the bundle directory that the manifest does not list.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StrayFile {
    /// Its name in the bundle directory.
    pub name: String,
    /// Whether it looks like a volume.
    pub kind: StrayKind,
}

impl StrayFile {
    /// The message for it, to follow its name.
    pub fn problem(&self) -> &'static str {
        match self.kind {
            StrayKind::VolumeLike => {
                "is not listed in the manifest (an extra or duplicated volume?)"
            }
            StrayKind::Other => {
                "is not part of the bundle (the manifest does not list it); ignored"
            }
        }
    }
}

/// How many volumes of each kind a message counts: the data volumes, and the parity volumes
/// when they were checked too (0 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeCounts {
    /// Data volumes (`data.NNN`).
    pub data: usize,
    /// Parity volumes (`parity.NNN`) that were checked.
    pub parity: usize,
}

impl VolumeCounts {
    /// The data volumes of `m` only.
    pub fn data_of(m: &Manifest) -> Self {
        VolumeCounts {
            data: m.volumes.len(),
            parity: 0,
        }
    }

    /// The data and parity volumes of `m`.
    pub fn all_of(m: &Manifest) -> Self {
        VolumeCounts {
            data: m.volumes.len(),
            parity: m.parity.as_ref().map_or(0, |p| p.volumes.len()),
        }
    }
}

/// Whether a listed volume's name is a parity volume's (the manifest's name rules make the
/// prefix decide).
pub(super) fn is_parity_name(name: &str) -> bool {
    name.starts_with("parity.")
}

/// The error for bad volumes: each listed volume named with the count of its kind ("volume
/// data.003 of 7 fails its sha256", "volume parity.000 of 2 is missing": one numbering, the
/// names', everywhere), then the stray volume-like files, then how many volumes are good when
/// every volume counted was checked.
pub fn volumes_error(
    listed: &[VolumeProblem],
    stray: &[StrayFile],
    counts: VolumeCounts,
    checked_all: bool,
) -> Error {
    let stray: Vec<&StrayFile> = stray
        .iter()
        .filter(|s| s.kind == StrayKind::VolumeLike)
        .collect();
    let of = |p: &VolumeProblem| {
        if is_parity_name(&p.volume) {
            counts.parity
        } else {
            counts.data
        }
    };
    let mut parts: Vec<String> = listed
        .iter()
        .map(|p| format!("volume {} of {} {}", p.volume, of(p), p.problem))
        .chain(stray.iter().map(|s| format!("{} {}", s.name, s.problem())))
        .collect();
    let bad_parity = listed.iter().filter(|p| is_parity_name(&p.volume)).count();
    let good_data = counts.data.saturating_sub(listed.len() - bad_parity);
    let good_parity = counts.parity.saturating_sub(bad_parity);
    let total = counts.data + counts.parity;
    if checked_all && !listed.is_empty() && total > 1 {
        parts.push(match (good_data + good_parity, counts.parity) {
            (0, _) => format!("none of the {total} volumes is good"),
            (1, 0) => "the other 1 is good".to_string(),
            (n, 0) => format!("the other {n} are good"),
            _ => format!(
                "the other {} and {} {} good",
                display::count(good_data as u64, "data volume"),
                display::count(good_parity as u64, "parity volume"),
                if good_data + good_parity == 1 {
                    "is"
                } else {
                    "are"
                }
            ),
        });
    }
    if stray.is_empty()
        && !listed.is_empty()
        && listed.iter().all(|p| p.missing && p.elsewhere.is_some())
    {
        // Not damage: media not given (or not inserted when asked for).
        return Error::MediumNeeded {
            summary: listed
                .iter()
                .map(|p| format!("{} {}", p.volume, p.problem))
                .collect::<Vec<_>>()
                .join("; "),
        };
    }
    Error::BadVolumes {
        summary: parts.join("; "),
        copy_again: listed.iter().map(|p| p.volume.clone()).collect(),
        remove: stray.iter().map(|s| s.name.clone()).collect(),
    }
}

/// One unit of hashing work for [`check_volumes`].
#[derive(Clone, Copy)]
pub(super) enum Job {
    /// Chunk `c` of volume `i`, on its own (no whole-volume digest to check).
    Chunk(usize, usize),
    /// All of volume `i` in order: its chunks and its whole-volume digest in one pass.
    Whole(usize),
}

/// What a [`Job`] found: for each chunk it covered, whether it matched; and for a whole
/// volume, whether the whole-volume digest matched.
pub(super) type Hashed = io::Result<(Vec<(usize, bool)>, Option<bool>)>;

/// Checks every listed volume's size and digests: its chunks all in parallel, or, where the
/// manifest also has a whole-volume digest (format version 1), each such volume in one
/// sequential pass that checks both. Reads only. Returns the problems of listed volumes in
/// manifest order.
pub fn check_volumes(opened: &BundleDir, progress: &dyn Progress) -> Vec<VolumeProblem> {
    let m = &opened.manifest;
    progress.start(Phase::VerifyVolumes, m.totals.volume_bytes);
    let problems = check_list(opened, &m.volumes, progress);
    progress.finish();
    problems
}

/// [`check_volumes`] for the parity volumes (FORMAT.md section 17): checked the same way, by
/// their signed chunk digests. Empty without parity.
pub fn check_parity_volumes(opened: &BundleDir, progress: &dyn Progress) -> Vec<VolumeProblem> {
    let Some(p) = &opened.manifest.parity else {
        return vec![];
    };
    progress.start(
        Phase::VerifyParityVolumes,
        p.volumes.iter().map(|v| v.size).sum(),
    );
    let problems = check_list(opened, &p.volumes, progress);
    progress.finish();
    problems
}

pub(super) fn check_list(
    opened: &BundleDir,
    list: &[manifest::Volume],
    progress: &dyn Progress,
) -> Vec<VolumeProblem> {
    let media = &opened.media;
    let mut problems = Vec::new();
    let mut pending: Vec<usize> = (0..list.len()).collect();
    loop {
        let (held, missing): (Vec<usize>, Vec<usize>) = pending
            .into_iter()
            .partition(|&i| media.holds(&list[i].name));
        problems.extend(check_held(opened, list, &held, progress));
        if missing.is_empty() {
            break;
        }
        let names: Vec<String> = missing.iter().map(|&i| list[i].name.clone()).collect();
        if media.ask_for(&names, progress) {
            pending = missing;
            continue;
        }
        // Held nowhere, and nobody to ask (or the operator stopped): each is missing, named
        // with the medium it is on when the media say.
        problems.extend(missing.into_iter().map(|i| {
            let (problem, elsewhere) = missing_from(media, &list[i].name);
            VolumeProblem {
                volume: list[i].name.clone(),
                index: i,
                problem,
                bad_ranges: vec![],
                elsewhere,
                missing: true,
            }
        }));
        break;
    }
    problems.sort_by_key(|p| p.index);
    problems
}

/// What the report says of volume `name`, held by none of the media's directories, and the
/// medium it is on: the one the placement file names, or (a bundle given as several
/// directories) none of those given. `None` for a bundle in one directory that lacks it.
pub(super) fn missing_from(
    media: &crate::bundle::media::Media,
    name: &str,
) -> (String, Option<String>) {
    match media.where_missing(name) {
        Some(m) => (
            format!("is missing (it is on {m}, which was not given)"),
            Some(m),
        ),
        None if media.is_spread() => (
            "is on none of the media given".to_string(),
            Some("another medium".to_string()),
        ),
        None => ("is missing".to_string(), None),
    }
}

/// [`check_list`] for the volumes `held` (indexes into `list`) that some directory holds:
/// every copy is checked, and a volume is good when one copy is (that copy is read from then
/// on; the bad ones are noted). Volumes of the wrong size or type are problems without a read.
pub(super) fn check_held(
    opened: &BundleDir,
    list: &[manifest::Volume],
    held: &[usize],
    progress: &dyn Progress,
) -> Vec<VolumeProblem> {
    let m = &opened.manifest;
    let media = &opened.media;
    // Every copy of every held volume: (volume index, its path).
    let copies: Vec<(usize, PathBuf)> = held
        .iter()
        .flat_map(|&i| {
            media
                .holders(&list[i].name)
                .into_iter()
                .map(move |p| (i, p))
        })
        .collect();
    let mut found: Vec<Option<VolumeProblem>> = copies
        .iter()
        .map(|(i, path)| stat_copy(*i, &list[*i], path))
        .collect();
    let jobs: Vec<Job> = (0..copies.len())
        .filter(|&k| found[k].is_none())
        .flat_map(|k| {
            let v = &list[copies[k].0];
            match v.sha256 {
                Some(_) => vec![Job::Whole(k)],
                None => (0..v.chunks.len()).map(|c| Job::Chunk(k, c)).collect(),
            }
        })
        .collect();
    let read = media.read();
    // Each worker keeps its buffer and the copy it has open: with small chunks (a bundle with
    // parity has units of 4 KiB to 16 MiB) a job is a few hundred kilobytes.
    type Worker = (Option<AlignedBuf>, Option<(usize, MediumFile)>);
    let results: Vec<(usize, Hashed)> = jobs
        .par_iter()
        .map_init(
            || -> Worker { (None, None) },
            |(buf, open), &job| {
                let k = match job {
                    Job::Chunk(k, _) | Job::Whole(k) => k,
                };
                let (i, path) = &copies[k];
                let v = &list[*i];
                progress.item(&v.name);
                let buf = buf.get_or_insert_with(|| AlignedBuf::new(MEDIUM_READ_SIZE));
                let r = match job {
                    Job::Chunk(_, c) => {
                        let (start, end) = chunk_range(m.chunk_size, v, c);
                        if open.as_ref().is_none_or(|(at, _)| *at != k) {
                            *open = None;
                            match open_medium(path, Follow::Final, read) {
                                Ok((f, _)) => *open = Some((k, f)),
                                Err(e) => return (k, Err(io::Error::from(e))),
                            }
                        }
                        let (_, f) = open.as_mut().expect("opened above");
                        let r = hash_range(f, buf, start, end, progress)
                            .map(|h| (vec![(c, h == v.chunks[c])], None));
                        media.record_read(&v.name, path, f);
                        r
                    }
                    Job::Whole(_) => hash_volume(path, m, v, buf, read, media, progress),
                };
                (k, r)
            },
        )
        .collect();
    type Found = (Vec<(u64, u64)>, Option<io::Error>, bool);
    let mut per_copy: std::collections::BTreeMap<usize, Found> = Default::default();
    for (k, r) in results {
        let v = &list[copies[k].0];
        match r {
            Ok((chunks, whole)) => {
                for (c, ok) in chunks {
                    if !ok {
                        per_copy
                            .entry(k)
                            .or_default()
                            .0
                            .push(chunk_range(m.chunk_size, v, c));
                    }
                }
                if whole == Some(false) {
                    per_copy.entry(k).or_default().2 = true;
                }
            }
            Err(e) => per_copy.entry(k).or_default().1 = Some(e),
        }
    }
    for (k, (mut ranges, err, whole_bad)) in per_copy {
        ranges.sort();
        let ranges = merge_ranges(ranges);
        let (i, _) = &copies[k];
        let problem = match err {
            Some(e) => format!("cannot be read: {e}"),
            None if ranges.is_empty() && whole_bad => WHOLE_DIGEST_DISAGREES.to_string(),
            None => format!(
                "fails its sha256 (bad byte ranges: {})",
                ranges_text(&ranges)
            ),
        };
        found[k] = Some(VolumeProblem {
            volume: list[*i].name.clone(),
            index: *i,
            problem,
            bad_ranges: ranges,
            elsewhere: None,
            missing: false,
        });
    }
    // Per volume: good when one copy is; that copy is read from then on.
    let mut problems = Vec::new();
    for &i in held {
        let mine: Vec<usize> = (0..copies.len()).filter(|&k| copies[k].0 == i).collect();
        let good = mine.iter().find(|&&k| found[k].is_none());
        match good {
            Some(&g) => {
                if mine.len() > 1 {
                    media.choose(&list[i].name, copies[g].1.clone());
                    for &k in &mine {
                        if let Some(p) = &found[k] {
                            media.note(format!(
                                "{}: {} {}; the copy in {} is good and is the one used",
                                copies[k].1.display(),
                                p.volume,
                                p.problem,
                                dir_of(&copies[g].1)
                            ));
                        }
                    }
                }
            }
            None => {
                let mut first = found[mine[0]].take().expect("every copy has a problem");
                if mine.len() > 1 {
                    let others: Vec<String> = mine[1..]
                        .iter()
                        .filter_map(|&k| {
                            let p = found[k].as_ref()?;
                            Some(format!(
                                "the copy in {} {}",
                                dir_of(&copies[k].1),
                                p.problem
                            ))
                        })
                        .collect();
                    first.problem = format!(
                        "{} in {}; {}",
                        first.problem,
                        dir_of(&copies[mine[0]].1),
                        others.join("; ")
                    );
                }
                problems.push(first);
            }
        }
    }
    problems
}
/// Sorted byte ranges with the adjacent ones joined: a bundle with parity has chunks of a few
/// KiB, and damage of a megabyte is one range, not hundreds.
pub(super) fn merge_ranges(ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => out.push((a, b)),
        }
    }
    out
}

/// How many ranges a message lists before it sums up the rest.
pub(super) const RANGES_LISTED: usize = 8;

/// `0-4096, 8192-12288` (the first [`RANGES_LISTED`], then how many more and their bytes).
pub(super) fn ranges_text(ranges: &[(u64, u64)]) -> String {
    let mut text: Vec<String> = ranges
        .iter()
        .take(RANGES_LISTED)
        .map(|(a, b)| format!("{a}-{b}"))
        .collect();
    if ranges.len() > RANGES_LISTED {
        let rest = &ranges[RANGES_LISTED..];
        text.push(format!(
            "and {} more ranges of {} bytes in all",
            rest.len(),
            rest.iter().map(|(a, b)| b - a).sum::<u64>()
        ));
    }
    text.join(", ")
}

/// The problem of a version 1 volume whose chunks all match but whose whole-volume digest
/// does not: the signed manifest disagrees with itself.
pub const WHOLE_DIGEST_DISAGREES: &str = "fails its whole-volume sha256 although every chunk digest matches (the signed manifest disagrees with itself: the bundle must be packed again)";

/// Byte range `[start, end)` of chunk `c` of volume `v`.
pub(super) fn chunk_range(chunk_size: u64, v: &manifest::Volume, c: usize) -> (u64, u64) {
    let start = c as u64 * chunk_size;
    (start, (start + chunk_size).min(v.size))
}

/// The checks of [`check_volumes`] that need no reading, for the copy of volume `i` at
/// `path`: a regular file of its manifest size. `None` when it passes.
pub(super) fn stat_copy(i: usize, v: &manifest::Volume, path: &Path) -> Option<VolumeProblem> {
    let problem = match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => "is missing".to_string(),
        Err(e) => format!("cannot be read: {e}"),
        Ok(meta) if !meta.is_file() => "is not a regular file".to_string(),
        Ok(meta) if meta.len() != v.size => format!(
            "is {} bytes, the manifest says {} ({})",
            meta.len(),
            v.size,
            if meta.len() < v.size {
                "truncated"
            } else {
                "extended"
            }
        ),
        Ok(_) => return None,
    };
    Some(VolumeProblem {
        volume: v.name.clone(),
        index: i,
        problem,
        bad_ranges: vec![],
        elsewhere: None,
        missing: false,
    })
}

/// The directory of a volume's path, for messages.
pub(super) fn dir_of(path: &Path) -> String {
    path.parent().unwrap_or(Path::new("")).display().to_string()
}

/// Whether every listed volume is held by a directory as a regular file of its manifest size
/// (the checks of [`check_volumes`] that need no reading).
pub fn volumes_look_complete(opened: &BundleDir) -> bool {
    opened.manifest.volumes.iter().enumerate().all(|(i, v)| {
        let copies = opened.media.holders(&v.name);
        copies.len() == 1 && stat_copy(i, v, &copies[0]).is_none()
    })
}

/// Files in the bundle directory that the manifest does not account for, sorted by name
/// (FORMAT.md, section 2).
pub fn stray_files(opened: &BundleDir) -> Vec<StrayFile> {
    let m = &opened.manifest;
    let listed = [manifest::MANIFEST_NAME, manifest::SIGNATURE_NAME]
        .into_iter()
        .chain(m.volumes.iter().map(|v| v.name.as_str()))
        .chain(
            m.parity
                .iter()
                .flat_map(|p| p.volumes.iter().map(|v| v.name.as_str())),
        );
    let listed: Vec<&str> = listed
        .chain(std::iter::once(crate::bundle::media::PLACEMENT_NAME))
        .collect();
    // Co-signatures and the trust roots the manifest lists are the bundle's own (FORMAT.md
    // section 18). Each directory of a bundle spread over media is looked at; the name of a
    // stray file in any but the first says where it is.
    let dirs = opened.media.dirs();
    let mut out = Vec::new();
    for (n, dir) in dirs.iter().enumerate() {
        out.extend(
            stray_in(dir, listed.iter().copied())
                .into_iter()
                .filter(|s| {
                    !crate::bundle::open::is_cosignature_name(&s.name)
                        && !crate::trust::update::is_listed_root(m, &s.name)
                        && !crate::oms::is_listed(m, &s.name)
                })
                .map(|mut s| {
                    if n > 0 {
                        s.name = dir.join(&s.name).display().to_string();
                    }
                    s
                }),
        );
    }
    out
}

/// The entries of `dir` (of any type) that are not one of the `listed` names, classified. A
/// name that differs from a listed one only in ASCII case and is the same directory entry
/// (same device and inode, not following links: a case-insensitive filesystem showing the
/// listed file in another spelling) is that file, not a stray one.
pub(super) fn stray_in<'a>(dir: &Path, listed: impl Iterator<Item = &'a str>) -> Vec<StrayFile> {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = crate::fsio::list_dir(dir, crate::fsio::Follow::Final) else {
        return vec![];
    };
    let listed: std::collections::HashMap<String, &str> =
        listed.map(|n| (n.to_ascii_lowercase(), n)).collect();
    let same_entry = |a: &str, b: &str| {
        let (Ok(x), Ok(y)) = (
            std::fs::symlink_metadata(dir.join(a)),
            std::fs::symlink_metadata(dir.join(b)),
        ) else {
            return false;
        };
        x.dev() == y.dev() && x.ino() == y.ino()
    };
    let mut out: Vec<StrayFile> = rd
        .into_iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .filter(|n| match listed.get(&n.to_ascii_lowercase()) {
            Some(l) => *l != n && !same_entry(n, l),
            None => true,
        })
        .map(|name| StrayFile {
            kind: if is_volume_like(&name) {
                StrayKind::VolumeLike
            } else {
                StrayKind::Other
            },
            name,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Whether an unlisted name in a bundle directory looks like a volume (FORMAT.md, section 2):
/// `data.` or `parity.` followed by one or more ASCII digits and nothing else, the letters in
/// any ASCII case (`data.005`, `DATA.005`, `Parity.0`). Anything before or after
/// (`data.000.sha256`, `data.000 (1)`, `.data.000.airlock-repair`) or a digit outside ASCII
/// makes it another file.
pub fn is_volume_like(name: &str) -> bool {
    let name = name.as_bytes();
    [&b"data."[..], &b"parity."[..]].iter().any(|prefix| {
        name.len() > prefix.len()
            && name[..prefix.len()].eq_ignore_ascii_case(prefix)
            && name[prefix.len()..].iter().all(u8::is_ascii_digit)
    })
}

/// SHA-256 of `[start, end)` of `f`, read from the medium through `buf`.
pub(super) fn hash_range(
    f: &mut MediumFile,
    buf: &mut AlignedBuf,
    start: u64,
    end: u64,
    progress: &dyn Progress,
) -> io::Result<String> {
    let mut h = Sha256::new();
    f.read_range(buf, start, end, |piece| {
        h.update(piece);
        progress.advance(piece.len() as u64);
        Ok(())
    })?;
    Ok(hex::encode(h.finalize()))
}

/// Hashes volume `v` at `path` from start to end once, checking each chunk digest and the
/// whole-volume digest.
pub(super) fn hash_volume(
    path: &Path,
    m: &Manifest,
    v: &manifest::Volume,
    buf: &mut AlignedBuf,
    read: MediumRead,
    media: &crate::bundle::media::Media,
    progress: &dyn Progress,
) -> Hashed {
    let mut whole = Sha256::new();
    let mut chunks = Vec::with_capacity(v.chunks.len());
    let (mut f, _) = open_medium(path, Follow::Final, read)?;
    for c in 0..v.chunks.len() {
        let (start, end) = chunk_range(m.chunk_size, v, c);
        let mut h = Sha256::new();
        f.read_range(buf, start, end, |piece| {
            h.update(piece);
            whole.update(piece);
            progress.advance(piece.len() as u64);
            Ok(())
        })?;
        chunks.push((c, hex::encode(h.finalize()) == v.chunks[c]));
    }
    media.record_read(&v.name, path, &f);
    let whole = hex::encode(whole.finalize());
    Ok((chunks, Some(v.sha256.as_deref() == Some(whole.as_str()))))
}
