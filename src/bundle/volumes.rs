//! The volumes of an opened bundle: that each listed one is there with its size, that its
//! signed chunk digests (and, in format version 1, its whole-volume digest) match, which files
//! in the bundle directory are not part of the bundle, and [`VolumeReader`], which reads the
//! volumes in order as one payload on a thread of its own while it checks them.
//!
//! The signed chunk digests are the authority on a volume's content (FORMAT.md, section 6):
//! all of them matching proves the volume as well as a whole-volume digest would, and they also
//! name the damaged byte ranges. A version 1 manifest also carries `volumes[].sha256`; where it
//! is present it is checked too, so a manifest whose two digests disagree is refused.

use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crossbeam_channel::{Receiver, Sender};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::open::Opened;
use crate::error::Error;
use crate::fsio::{AlignedBuf, Follow, MEDIUM_READ_SIZE, MediumFile, MediumRead, open_medium};
pub use crate::manifest::units::UnitLayout;
use crate::manifest::{self, Manifest};
use crate::parity::{self, Geometry, ParityError, Shard};
use crate::progress::Progress;

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
fn is_parity_name(name: &str) -> bool {
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
                plural(good_data, "data volume"),
                plural(good_parity, "parity volume"),
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

/// `n thing` or `n things`.
fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// One unit of hashing work for [`check_volumes`].
#[derive(Clone, Copy)]
enum Job {
    /// Chunk `c` of volume `i`, on its own (no whole-volume digest to check).
    Chunk(usize, usize),
    /// All of volume `i` in order: its chunks and its whole-volume digest in one pass.
    Whole(usize),
}

/// What a [`Job`] found: for each chunk it covered, whether it matched; and for a whole
/// volume, whether the whole-volume digest matched.
type Hashed = io::Result<(Vec<(usize, bool)>, Option<bool>)>;

/// A [`Hashed`] with the error as the text the report shows.
type JobResult = std::result::Result<(Vec<(usize, bool)>, Option<bool>), String>;

/// Checks every listed volume's size and digests: its chunks all in parallel, or, where the
/// manifest also has a whole-volume digest (format version 1), each such volume in one
/// sequential pass that checks both. Reads only. Returns the problems of listed volumes in
/// manifest order.
pub fn check_volumes(opened: &Opened, progress: &dyn Progress) -> Vec<VolumeProblem> {
    let m = &opened.manifest;
    progress.start("verify volumes", m.totals.volume_bytes);
    let problems = check_list(opened, &m.volumes, progress);
    progress.finish();
    problems
}

/// [`check_volumes`] for the parity volumes (FORMAT.md section 17): checked the same way, by
/// their signed chunk digests. Empty without parity.
pub fn check_parity_volumes(opened: &Opened, progress: &dyn Progress) -> Vec<VolumeProblem> {
    let Some(p) = &opened.manifest.parity else {
        return vec![];
    };
    progress.start(
        "verify parity volumes",
        p.volumes.iter().map(|v| v.size).sum(),
    );
    let problems = check_list(opened, &p.volumes, progress);
    progress.finish();
    problems
}

fn check_list(
    opened: &Opened,
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
fn missing_from(media: &super::media::Media, name: &str) -> (String, Option<String>) {
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
fn check_held(
    opened: &Opened,
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
    let results: Vec<(usize, JobResult)> = jobs
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
                                Err(e) => return (k, Err(io::Error::from(e).to_string())),
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
                (k, r.map_err(|e| e.to_string()))
            },
        )
        .collect();
    type Found = (Vec<(u64, u64)>, Option<String>, bool);
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
fn merge_ranges(ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
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
const RANGES_LISTED: usize = 8;

/// `0-4096, 8192-12288` (the first [`RANGES_LISTED`], then how many more and their bytes).
fn ranges_text(ranges: &[(u64, u64)]) -> String {
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
fn chunk_range(chunk_size: u64, v: &manifest::Volume, c: usize) -> (u64, u64) {
    let start = c as u64 * chunk_size;
    (start, (start + chunk_size).min(v.size))
}

/// The checks of [`check_volumes`] that need no reading, for the copy of volume `i` at
/// `path`: a regular file of its manifest size. `None` when it passes.
fn stat_copy(i: usize, v: &manifest::Volume, path: &Path) -> Option<VolumeProblem> {
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
fn dir_of(path: &Path) -> String {
    path.parent().unwrap_or(Path::new("")).display().to_string()
}

/// Whether every listed volume is held by a directory as a regular file of its manifest size
/// (the checks of [`check_volumes`] that need no reading).
pub fn volumes_look_complete(opened: &Opened) -> bool {
    opened.manifest.volumes.iter().enumerate().all(|(i, v)| {
        let copies = opened.media.holders(&v.name);
        copies.len() == 1 && stat_copy(i, v, &copies[0]).is_none()
    })
}

/// Files in the bundle directory that the manifest does not account for, sorted by name
/// (FORMAT.md, section 2).
pub fn stray_files(opened: &Opened) -> Vec<StrayFile> {
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
        .chain(std::iter::once(super::media::PLACEMENT_NAME))
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
                    !super::open::is_cosignature_name(&s.name)
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
fn stray_in<'a>(dir: &Path, listed: impl Iterator<Item = &'a str>) -> Vec<StrayFile> {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
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
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
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
fn hash_range(
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
fn hash_volume(
    path: &Path,
    m: &Manifest,
    v: &manifest::Volume,
    buf: &mut AlignedBuf,
    read: MediumRead,
    media: &super::media::Media,
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

/// Where the volume reader gets each volume's bytes: the bundle directory, or (for the fuzz
/// target) memory.
pub trait VolumeSource: Sync {
    /// Opens the volume called `name`, the `index`-th (0-based) of the manifest. A volume that
    /// does not exist is an error of kind `NotFound`.
    fn open(&self, index: usize, name: &str) -> io::Result<Box<dyn Read + Send + '_>>;
    /// The path that errors about the volume name.
    fn path(&self, name: &str) -> PathBuf;
    /// What the report says of a volume that is not there ("is missing", and where it is when
    /// the media say).
    fn missing(&self, _name: &str) -> (String, Option<String>) {
        ("is missing".to_string(), None)
    }
    /// Fills `buf` from the volume (data or parity) called `name` at `offset`; a volume that is
    /// missing or too short is an error. Only needed for bundles with parity, which are read
    /// unit by unit (FORMAT.md section 17.3).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let _ = (name, offset, buf);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this volume source has no random access",
        ))
    }
    /// The largest parity unit the reader holds in memory, to read it once (FORMAT.md 17.3);
    /// larger units are read twice, hashed and then streamed. The tests lower it to read the
    /// second way.
    fn unit_memory(&self) -> u64 {
        parity::MAX_UNIT_SIZE
    }
}

/// The volumes of a bundle directory, or of a bundle spread over several media. Each is opened
/// without blocking and must be a regular file: a FIFO or device planted as a volume must not
/// hang or feed the reader. Its bytes are read from the medium, not the page cache, where the
/// media ask for it ([`crate::fsio::MediumFile`]). A volume read at random (`read_at`, unit by
/// unit) is opened once and kept open.
pub struct DirVolumes<'a> {
    place: Place<'a>,
    opened: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<std::fs::File>>>,
}

/// Where [`DirVolumes`] finds the volumes.
enum Place<'a> {
    /// One directory (another copy `repair` takes chunks from), its cached pages dropped when
    /// a volume is opened: read from the medium at no cost.
    Dir(&'a Path),
    /// The media of an opened bundle, with whom to ask for a missing medium.
    Media(&'a super::media::Media, &'a dyn Progress),
}

impl<'a> DirVolumes<'a> {
    /// The volumes in `dir`.
    pub fn new(dir: &'a Path) -> Self {
        DirVolumes {
            place: Place::Dir(dir),
            opened: Default::default(),
        }
    }

    /// The volumes of `opened`, in whichever of its directories holds each, read as its media
    /// say; a volume held by none is asked for through `progress` before it is missing.
    pub fn of(opened: &'a Opened, progress: &'a dyn Progress) -> Self {
        DirVolumes {
            place: Place::Media(&opened.media, progress),
            opened: Default::default(),
        }
    }

    /// Records how volume `name` is read, for the report.
    fn record(&self, name: &str, path: &Path, f: &MediumFile) {
        if let Place::Media(media, _) = &self.place {
            media.record_read(name, path, f);
        }
    }

    /// Opens volume `name` as [`open_medium`] does, asking for its medium first where none of
    /// the directories holds it.
    fn open_file(&self, name: &str) -> io::Result<(MediumFile, u64, PathBuf)> {
        match &self.place {
            Place::Dir(dir) => {
                let path = dir.join(name);
                let (f, len) = open_medium(&path, Follow::Final, MediumRead::DropCache)?;
                Ok((f, len, path))
            }
            Place::Media(media, progress) => {
                if !media.holds(name) {
                    media.ask_for(&[name.to_string()], *progress);
                }
                let path = media.volume_path(name);
                let (f, len) = open_medium(&path, Follow::Final, media.read())?;
                Ok((f, len, path))
            }
        }
    }
}

impl VolumeSource for DirVolumes<'_> {
    fn open(&self, _index: usize, name: &str) -> io::Result<Box<dyn Read + Send + '_>> {
        let (f, _, path) = self.open_file(name)?;
        self.record(name, &path, &f);
        Ok(Box::new(f.into_reader(STREAM_BUFFER_SIZE * 4)))
    }
    fn path(&self, name: &str) -> PathBuf {
        match &self.place {
            Place::Dir(dir) => dir.join(name),
            Place::Media(media, _) => media.volume_path(name),
        }
    }
    fn missing(&self, name: &str) -> (String, Option<String>) {
        match &self.place {
            Place::Media(media, _) => missing_from(media, name),
            Place::Dir(_) => ("is missing".to_string(), None),
        }
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let cached = self.opened.lock().expect("not poisoned").get(name).cloned();
        let f = match cached {
            Some(f) => f,
            None => {
                // Unit by unit, the reads are small and at random: the cache is dropped once
                // when the volume is opened, and read through from then on.
                let (f, _, path) = self.open_file(name)?;
                let f = f.into_cached();
                self.record(name, &path, &f);
                let f = std::sync::Arc::new(f.into_file());
                self.opened
                    .lock()
                    .expect("not poisoned")
                    .insert(name.to_string(), f.clone());
                f
            }
        };
        f.read_exact_at(buf, offset)
    }
}

pub use crate::entries::Mode;

/// A read error on a volume (a failing medium), carried up the io::Error chain so the
/// message names the volume and the exit code says "operational", not "bad bundle".
#[derive(Debug)]
pub(super) struct VolumeIo {
    pub(super) path: PathBuf,
    pub(super) source: io::Error,
}

impl std::fmt::Display for VolumeIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}
impl std::error::Error for VolumeIo {}

/// The typed failure a volume reader raises inside the io::Error chain.
#[derive(Debug)]
pub(super) struct VolumeFailure {
    pub(super) problem: VolumeProblem,
    /// How many data volumes the bundle has.
    pub(super) total: usize,
}

impl std::fmt::Display for VolumeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.problem.volume, self.problem.problem)
    }
}
impl std::error::Error for VolumeFailure {}

/// Buffers in flight between the volume-reading thread and the stream's consumer.
pub(super) const STREAM_BUFFERS: usize = 8;
/// Size of each of them.
pub(super) const STREAM_BUFFER_SIZE: usize = 1 << 20;

/// Reads the volumes in order as one payload, checking each volume's size and chunk digests
/// (and its whole-volume digest where the manifest has one).
///
/// It runs on a thread of its own ([`VolumeReader::run`]) and hands its buffers to a
/// [`PipeReader`] on the consuming thread, so reading and hashing the volumes overlaps with
/// decompressing, parsing and hashing the files (and, for unpack, writing them): the two SHA-256
/// passes of a stream run on two cores.
pub(super) struct VolumeReader<'a> {
    manifest: &'a Manifest,
    source: &'a dyn VolumeSource,
    mode: Mode,
    index: usize,
    file: Option<Box<dyn Read + Send + 'a>>,
    read_in_volume: u64,
    chunk_hasher: Sha256,
    /// The whole-volume hasher, for a volume whose manifest entry has a `sha256`.
    whole_hasher: Option<Sha256>,
    in_chunk: u64,
    chunk_index: usize,
    /// Byte ranges of the open volume whose chunk digest failed.
    bad_ranges: Vec<(u64, u64)>,
    problems: Vec<VolumeProblem>,
    /// With parity: unit-by-unit reading, rebuilding erased units (FORMAT.md section 17.3).
    units: Option<UnitReader<'a>>,
    /// The erased shards of the stripe of the data unit being rebuilt, while one is.
    rebuilding: Option<Vec<Shard>>,
    /// Rebuilt bytes `[slice_start, slice_start + slice.len())` of that unit.
    slice: Vec<u8>,
    slice_start: u64,
    /// Names of the data volumes with units rebuilt from parity, in order.
    repaired: Vec<String>,
    /// With parity and units of at most [`VolumeReader::max_held`] bytes: the data unit being
    /// handed on, read once and checked (or rebuilt and checked) before any of it is.
    unit: Vec<u8>,
    /// Whether `unit` holds the current unit.
    unit_held: bool,
    /// Largest unit read whole into memory; larger ones are read twice (hashed, then streamed).
    max_held: u64,
}

/// What the volume-reading thread hands on, in stream order.
pub(super) enum Piece {
    /// A buffer and how many of its bytes are stream bytes.
    Data(Vec<u8>, usize),
    /// The error the stream's reader must see at this point.
    Err(io::Error),
}

impl<'a> VolumeReader<'a> {
    pub(super) fn new(manifest: &'a Manifest, source: &'a dyn VolumeSource, mode: Mode) -> Self {
        VolumeReader {
            manifest,
            source,
            mode,
            index: 0,
            file: None,
            read_in_volume: 0,
            chunk_hasher: Sha256::new(),
            whole_hasher: None,
            in_chunk: 0,
            chunk_index: 0,
            bad_ranges: Vec::new(),
            problems: Vec::new(),
            units: UnitReader::new(manifest, source),
            rebuilding: None,
            slice: Vec::new(),
            slice_start: 0,
            repaired: Vec::new(),
            unit: Vec::new(),
            unit_held: false,
            max_held: source.unit_memory(),
        }
    }

    fn fail(&mut self, problem: String) -> io::Result<()> {
        self.fail_with(problem, None)
    }

    /// [`VolumeReader::fail`] for a volume that is not there: `elsewhere` is the medium that
    /// holds it, when the media say.
    fn fail_with(&mut self, problem: String, missing: Option<Option<String>>) -> io::Result<()> {
        let count = self.manifest.volumes.len();
        let v = &self.manifest.volumes[self.index];
        let p = VolumeProblem {
            volume: v.name.clone(),
            index: self.index,
            problem,
            bad_ranges: merge_ranges(std::mem::take(&mut self.bad_ranges)),
            missing: missing.is_some(),
            elsewhere: missing.flatten(),
        };
        match self.mode {
            Mode::Strict => Err(io::Error::other(VolumeFailure {
                problem: p,
                total: count,
            })),
            Mode::Collect => {
                self.problems.push(p);
                Ok(())
            }
        }
    }

    /// Ends the current chunk and compares its digest with the manifest's.
    fn end_chunk(&mut self) {
        let v = &self.manifest.volumes[self.index];
        let digest = hex::encode(std::mem::take(&mut self.chunk_hasher).finalize());
        if v.chunks.get(self.chunk_index) != Some(&digest) {
            let start = self.chunk_index as u64 * self.manifest.chunk_size;
            self.bad_ranges.push((start, start + self.in_chunk));
        }
        self.chunk_index += 1;
        self.in_chunk = 0;
    }

    /// The thread's body: fills buffers from the pool and sends them until the last volume
    /// ends, an error is sent, or the consumer goes away. Returns the problems collected in
    /// [`Mode::Collect`], and the data volumes rebuilt in part from parity.
    pub(super) fn run(
        mut self,
        tx: Sender<Piece>,
        pool: Receiver<Vec<u8>>,
    ) -> (Vec<VolumeProblem>, Vec<String>) {
        while let Ok(mut buf) = pool.recv() {
            // A buffer is filled before it is sent: with parity a read ends at the end of its
            // unit (tens of KiB), and a message per unit cost more than the units' digests.
            // Bytes are still handed on only after their unit checked, and in order; an error
            // follows the checked bytes before it.
            let mut filled = 0;
            let mut error = None;
            let mut ended = false;
            while filled < buf.len() {
                match self.read(&mut buf[filled..]) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => filled += n,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            if filled > 0 && tx.send(Piece::Data(buf, filled)).is_err() {
                break;
            }
            if let Some(e) = error {
                let _ = tx.send(Piece::Err(e));
                break;
            }
            if ended {
                break;
            }
        }
        (self.problems, self.repaired)
    }

    /// The part of [`VolumeReader::read_parity`] for units held in memory: data unit `u` of
    /// `len` real bytes, the current one, handed on from memory, loaded first at its start.
    fn read_held(&mut self, u: u64, len: u64, buf: &mut [u8]) -> io::Result<usize> {
        if !self.unit_held {
            self.load_unit(u, len)?;
        }
        let from = self.in_chunk as usize;
        let n = buf.len().min(len as usize - from);
        buf[..n].copy_from_slice(&self.unit[from..from + n]);
        self.in_chunk += n as u64;
        self.read_in_volume += n as u64;
        if self.in_chunk == len {
            self.unit_held = false;
            self.chunk_index += 1;
            self.in_chunk = 0;
        }
        Ok(n)
    }

    /// Reads data unit `u` (`len` real bytes) into memory and checks it against its signed
    /// digest; an erased unit (unreadable, missing, or failing its digest) is rebuilt from its
    /// stripe into memory and checked again.
    fn load_unit(&mut self, u: u64, len: u64) -> io::Result<()> {
        let ur = self.units.as_ref().expect("parity mode");
        let g = ur.g;
        let name = self.manifest.volumes[self.index].name.clone();
        let io_error = |path: PathBuf, e: io::Error| io::Error::other(VolumeIo { path, source: e });
        let len_us = len as usize;
        if self.unit.len() < len_us {
            self.unit
                .try_reserve_exact(len_us - self.unit.len())
                .map_err(|_| {
                    io_error(
                        self.source.path(&name),
                        io::Error::other(ParityError::Memory(len)),
                    )
                })?;
        }
        self.unit.resize(len_us, 0);
        let (want, _) = ur.digest(false, u);
        let read = ur.read_data(u, 0, &mut self.unit);
        if read.is_ok() && hex::encode(Sha256::digest(&self.unit)) == want {
            ur.set_known(false, u, true);
            self.unit_held = true;
            return Ok(());
        }
        ur.set_known(false, u, false);
        let (k, d) = g.locate(u);
        let erased = ur.erased(k);
        let chunk = self.chunk_index;
        if erased.len() > g.recovery as usize {
            let msg = format!(
                "is damaged (chunk {chunk}) and its parity stripe {k} lost {} units, more than its {} recovery units: beyond what parity can rebuild",
                erased.len(),
                g.recovery
            );
            self.fail(msg)?;
            return Err(io::Error::other(format!(
                "{name} cannot be rebuilt from parity"
            )));
        }
        if self.repaired.last() != Some(&name) {
            self.repaired.push(name.clone());
            if self.mode == Mode::Collect {
                self.problems.push(VolumeProblem {
                    volume: name.clone(),
                    index: self.index,
                    problem: "is damaged (rebuilt from parity to read on)".into(),
                    bad_ranges: vec![],
                    elsewhere: None,
                    missing: false,
                });
            }
        }
        let unit = &mut self.unit;
        let r = ur.rebuild(k, &erased, 0, g.unit_size, &mut |shard, off, bytes| {
            if shard == Shard::Data(d) && off < len {
                let n = (len - off).min(bytes.len() as u64) as usize;
                unit[off as usize..off as usize + n].copy_from_slice(&bytes[..n]);
            }
            Ok(())
        });
        if let Err(e) = r {
            return Err(io_error(
                self.source.path(&name),
                io::Error::other(format!("rebuilding chunk {chunk} from parity: {e}")),
            ));
        }
        self.unit_held = true;
        if hex::encode(Sha256::digest(&self.unit)) != want {
            let start = chunk as u64 * self.manifest.chunk_size;
            self.bad_ranges.push((start, start + len));
            self.fail(format!(
                "chunk {chunk} rebuilt from parity does not match its signed digest (the parity volumes are damaged or not this bundle's)"
            ))?;
        }
        Ok(())
    }

    /// [`Read::read`] for a bundle with parity: each data unit is checked against its signed
    /// digest before any of its bytes are handed on. A unit of at most [`parity::MAX_UNIT_SIZE`]
    /// (every unit `pack` makes, but for payloads of terabytes) is read once into memory,
    /// hashed there and handed on from there ([`VolumeReader::read_held`]). A larger one (the
    /// 64 MiB units of bundles packed before issue 24) is hashed, then read again and hashed
    /// again as it goes (media that change between the two reads are caught); an erased one
    /// is rebuilt from its stripe slice by slice and checked at its end. Memory stays at one
    /// unit, or `(D + R)` slices.
    fn read_parity(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let volumes = &self.manifest.volumes;
            if self.index >= volumes.len() {
                return Ok(0);
            }
            let v = &volumes[self.index];
            if self.read_in_volume == v.size {
                if !self.bad_ranges.is_empty() {
                    self.fail("fails its sha256".to_string())?;
                }
                self.index += 1;
                self.read_in_volume = 0;
                self.chunk_index = 0;
                self.in_chunk = 0;
                self.bad_ranges.clear();
                continue;
            }
            let ur = self.units.as_ref().expect("parity mode");
            let g = ur.g;
            let u = ur.layout.unit_of_chunk(self.index, self.chunk_index);
            let (_, _, len) = ur.layout.data_unit(u);
            if g.unit_size <= self.max_held {
                return self.read_held(u, len, buf);
            }
            if self.in_chunk == 0 && self.rebuilding.is_none() && !ur.intact(false, u) {
                let (k, _) = g.locate(u);
                let erased = ur.erased(k);
                if erased.len() > g.recovery as usize {
                    let msg = format!(
                        "is damaged (chunk {}) and its parity stripe {k} lost {} units, more than its {} recovery units: beyond what parity can rebuild",
                        self.chunk_index,
                        erased.len(),
                        g.recovery
                    );
                    self.fail(msg)?;
                    return Err(io::Error::other(format!(
                        "{} cannot be rebuilt from parity",
                        v.name
                    )));
                }
                if self.repaired.last() != Some(&v.name) {
                    self.repaired.push(v.name.clone());
                    if self.mode == Mode::Collect {
                        self.problems.push(VolumeProblem {
                            volume: v.name.clone(),
                            index: self.index,
                            problem: "is damaged (rebuilt from parity to read on)".into(),
                            bad_ranges: vec![],
                            elsewhere: None,
                            missing: false,
                        });
                    }
                }
                self.rebuilding = Some(erased);
                self.slice.clear();
                self.slice_start = 0;
            }
            let want = (buf.len() as u64).min(len - self.in_chunk) as usize;
            let n = match &self.rebuilding {
                None => {
                    let ur = self.units.as_ref().expect("parity mode");
                    if let Err(e) = ur.read_data(u, self.in_chunk, &mut buf[..want]) {
                        return Err(io::Error::other(VolumeIo {
                            path: self.source.path(&v.name),
                            source: e,
                        }));
                    }
                    want
                }
                Some(erased) => {
                    let held = self.slice_start..self.slice_start + self.slice.len() as u64;
                    if !held.contains(&self.in_chunk) {
                        let size = g.slice_size() as u64;
                        let start = self.in_chunk / size * size;
                        let end = (start + size).min(g.unit_size);
                        let (k, d) = g.locate(u);
                        let ur = self.units.as_ref().expect("parity mode");
                        let mut slice = std::mem::take(&mut self.slice);
                        let len = (end - start) as usize;
                        let r = slice
                            .try_reserve_exact(len.saturating_sub(slice.len()))
                            .map_err(|_| ParityError::Memory(len as u64))
                            .and_then(|()| {
                                slice.resize(len, 0);
                                ur.rebuild(k, erased, start, end, &mut |shard, off, bytes| {
                                    if shard == Shard::Data(d) {
                                        let o = (off - start) as usize;
                                        slice[o..o + bytes.len()].copy_from_slice(bytes);
                                    }
                                    Ok(())
                                })
                            });
                        if let Err(e) = r {
                            return Err(io::Error::other(VolumeIo {
                                path: self.source.path(&v.name),
                                source: io::Error::other(format!(
                                    "rebuilding chunk {} from parity: {e}",
                                    self.chunk_index
                                )),
                            }));
                        }
                        self.slice = slice;
                        self.slice_start = start;
                    }
                    let from = (self.in_chunk - self.slice_start) as usize;
                    let n = want.min(self.slice.len() - from);
                    buf[..n].copy_from_slice(&self.slice[from..from + n]);
                    n
                }
            };
            self.chunk_hasher.update(&buf[..n]);
            self.in_chunk += n as u64;
            self.read_in_volume += n as u64;
            if self.in_chunk == len {
                let before = self.bad_ranges.len();
                let chunk = self.chunk_index;
                self.end_chunk();
                if self.rebuilding.take().is_some() && self.bad_ranges.len() > before {
                    self.fail(format!(
                        "chunk {chunk} rebuilt from parity does not match its signed digest (the parity volumes are damaged or not this bundle's)"
                    ))?;
                }
            }
            return Ok(n);
        }
    }
}

impl Read for VolumeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.units.is_some() {
            return self.read_parity(buf);
        }
        loop {
            let volumes = &self.manifest.volumes;
            if self.index >= volumes.len() {
                return Ok(0);
            }
            let v = &volumes[self.index];
            if self.file.is_none() {
                let f = match self.source.open(self.index, &v.name) {
                    Ok(f) => f,
                    Err(e) => {
                        if e.kind() == io::ErrorKind::NotFound {
                            let (msg, elsewhere) = self.source.missing(&v.name);
                            self.fail_with(msg, Some(elsewhere))?;
                        } else {
                            self.fail(format!("cannot be opened: {e}"))?;
                        }
                        // Collect mode: the stream cannot go on without the volume's bytes.
                        return Err(io::Error::other(format!("{} is missing", v.name)));
                    }
                };
                self.file = Some(f);
                self.read_in_volume = 0;
                self.chunk_hasher = Sha256::new();
                self.whole_hasher = v.sha256.as_ref().map(|_| Sha256::new());
                self.in_chunk = 0;
                self.chunk_index = 0;
                self.bad_ranges.clear();
            }
            let remaining = v.size - self.read_in_volume;
            let chunk_room = self.manifest.chunk_size - self.in_chunk;
            let want = (buf.len() as u64).min(remaining).min(chunk_room) as usize;
            let file = self.file.as_mut().expect("opened above");
            let n = if want == 0 {
                // At the declared end: anything more means the volume was extended.
                let mut probe = [0u8; 1];
                if read_retrying(file, &mut probe)? != 0 {
                    let msg = format!(
                        "is longer than the {} bytes the manifest says (extended)",
                        v.size
                    );
                    self.fail(msg)?;
                }
                0
            } else {
                match read_retrying(file, &mut buf[..want]) {
                    Ok(n) => n,
                    Err(e) => {
                        return Err(io::Error::other(VolumeIo {
                            path: self.source.path(&v.name),
                            source: e,
                        }));
                    }
                }
            };
            if n == 0 {
                if self.read_in_volume < v.size {
                    let msg = format!(
                        "ends after {} of its {} bytes (truncated)",
                        self.read_in_volume, v.size
                    );
                    self.bad_ranges.clear();
                    self.fail(msg)?;
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{} is truncated", v.name),
                    ));
                }
                if self.in_chunk > 0 {
                    self.end_chunk();
                }
                let whole_ok = match (self.whole_hasher.take(), &v.sha256) {
                    (Some(h), Some(want)) => hex::encode(h.finalize()) == *want,
                    _ => true,
                };
                if !self.bad_ranges.is_empty() {
                    self.fail("fails its sha256".to_string())?;
                } else if !whole_ok {
                    self.fail(WHOLE_DIGEST_DISAGREES.to_string())?;
                }
                self.file = None;
                self.index += 1;
                continue;
            }
            self.chunk_hasher.update(&buf[..n]);
            if let Some(h) = &mut self.whole_hasher {
                h.update(&buf[..n]);
            }
            self.in_chunk += n as u64;
            self.read_in_volume += n as u64;
            if self.in_chunk == self.manifest.chunk_size {
                self.end_chunk();
            }
            return Ok(n);
        }
    }
}

/// One `read`, retried when a signal interrupts it.
fn read_retrying(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The consuming end of the volume-reading thread: a `BufRead` over the buffers it sends,
/// which go back to its pool once read.
pub(super) struct PipeReader {
    rx: Receiver<Piece>,
    recycle: Sender<Vec<u8>>,
    current: Option<(Vec<u8>, usize)>,
    pos: usize,
    failed: bool,
}

impl PipeReader {
    pub(super) fn new(rx: Receiver<Piece>, recycle: Sender<Vec<u8>>) -> Self {
        PipeReader {
            rx,
            recycle,
            current: None,
            pos: 0,
            failed: false,
        }
    }
}

impl io::BufRead for PipeReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.current.as_ref().is_none_or(|(_, n)| self.pos >= *n) {
            if let Some((buf, _)) = self.current.take() {
                let _ = self.recycle.send(buf);
            }
            self.pos = 0;
            if self.failed {
                return Err(io::Error::other(
                    "the volumes could not be read past an earlier error",
                ));
            }
            match self.rx.recv() {
                Ok(Piece::Data(buf, n)) => self.current = Some((buf, n)),
                Ok(Piece::Err(e)) => {
                    self.failed = true;
                    return Err(e);
                }
                Err(_) => return Ok(&[]),
            }
        }
        let (buf, n) = self.current.as_ref().expect("filled above");
        Ok(&buf[self.pos..*n])
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt;
    }
}

impl Read for PipeReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        use io::BufRead;
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// Unit-by-unit access to a bundle with parity (FORMAT.md section 17.3): which data and
/// recovery units are intact (their signed chunk digest matches; a missing or short volume
/// erases its units), whether a stripe can be rebuilt, and rebuilt bytes of an erased unit,
/// slice by slice. A unit's state is found once (by hashing it) and remembered.
pub struct UnitReader<'a> {
    m: &'a Manifest,
    source: &'a dyn VolumeSource,
    /// The geometry.
    pub g: Geometry,
    /// Where the units are.
    pub layout: UnitLayout,
    known: std::sync::Mutex<std::collections::HashMap<(bool, u64), bool>>,
}

impl<'a> UnitReader<'a> {
    /// For a manifest with parity; `None` without.
    pub fn new(m: &'a Manifest, source: &'a dyn VolumeSource) -> Option<Self> {
        Some(UnitReader {
            m,
            source,
            g: m.parity_geometry()?,
            layout: UnitLayout::of(m),
            known: Default::default(),
        })
    }

    fn parity_volumes(&self) -> &'a [manifest::Volume] {
        self.m.parity.as_ref().map_or(&[][..], |p| &p.volumes[..])
    }

    /// Reads `[offset, offset + buf.len())` of data unit `u` (zeros past its real end) from
    /// the media, unchecked.
    pub fn read_data(&self, u: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (i, start, len) = self.layout.data_unit(u);
        let real = len.saturating_sub(offset).min(buf.len() as u64) as usize;
        self.source
            .read_at(&self.m.volumes[i].name, start + offset, &mut buf[..real])?;
        buf[real..].fill(0);
        Ok(())
    }

    /// Reads part of recovery unit `n` from the media, unchecked.
    pub fn read_recovery(&self, n: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (j, start) = self.layout.recovery_unit(n);
        self.source
            .read_at(&self.parity_volumes()[j].name, start + offset, buf)
    }

    /// The signed digest and real length of a unit.
    fn digest(&self, recovery: bool, n: u64) -> (&'a str, u64) {
        let cs = self.m.chunk_size;
        if recovery {
            let (j, start) = self.layout.recovery_unit(n);
            (&self.parity_volumes()[j].chunks[(start / cs) as usize], cs)
        } else {
            let (i, start, len) = self.layout.data_unit(n);
            (&self.m.volumes[i].chunks[(start / cs) as usize], len)
        }
    }

    /// Whether a unit is intact: readable in full and matching its signed digest.
    pub fn intact(&self, recovery: bool, n: u64) -> bool {
        if let Some(ok) = self.known.lock().expect("not poisoned").get(&(recovery, n)) {
            return *ok;
        }
        let (want, len) = self.digest(recovery, n);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; (1 << 20).min(len as usize)];
        let mut pos = 0;
        let ok = loop {
            if pos == len {
                break hex::encode(h.finalize()) == want;
            }
            let n_read = (len - pos).min(buf.len() as u64) as usize;
            let r = if recovery {
                self.read_recovery(n, pos, &mut buf[..n_read])
            } else {
                self.read_data(n, pos, &mut buf[..n_read])
            };
            if r.is_err() {
                break false;
            }
            h.update(&buf[..n_read]);
            pos += n_read as u64;
        };
        self.known
            .lock()
            .expect("not poisoned")
            .insert((recovery, n), ok);
        ok
    }

    /// Records a unit's state found elsewhere (a full volume check), so it is not hashed again.
    pub fn set_known(&self, recovery: bool, n: u64, ok: bool) {
        self.known
            .lock()
            .expect("not poisoned")
            .insert((recovery, n), ok);
    }

    /// The erased shards of `stripe` (hashing every unit of it not yet known).
    pub fn erased(&self, stripe: u64) -> Vec<Shard> {
        let g = &self.g;
        let mut out = Vec::new();
        for d in 0..g.data {
            if let Some(u) = g.data_unit(stripe, d)
                && !self.intact(false, u)
            {
                out.push(Shard::Data(d));
            }
        }
        for r in 0..g.recovery {
            if !self.intact(true, g.recovery_index(stripe, r)) {
                out.push(Shard::Recovery(r));
            }
        }
        out
    }

    /// Rebuilds `[start, end)` (whole slices) of the erased shards of `stripe`; `write`
    /// receives each rebuilt shard's bytes. The caller checks rebuilt units against their
    /// digests.
    pub fn rebuild(
        &self,
        stripe: u64,
        erased: &[Shard],
        start: u64,
        end: u64,
        write: &mut parity::WriteShard<'_>,
    ) -> Result<(), ParityError> {
        let g = &self.g;
        parity::rebuild_range(
            g,
            stripe,
            erased,
            start,
            end,
            &mut |shard, offset, buf| match shard {
                Shard::Data(d) => {
                    let u = g.data_unit(stripe, d).expect("a zero unit is not read");
                    self.read_data(u, offset, buf)
                }
                Shard::Recovery(r) => self.read_recovery(g.recovery_index(stripe, r), offset, buf),
            },
            write,
        )
    }
}

/// How the damage found compares with the parity budget (FORMAT.md section 17.3).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Repairability {
    /// Whether every stripe has at most `R` erased units.
    pub repairable: bool,
    /// Erased data units (chunks of data volumes).
    pub erased_data_units: u64,
    /// Erased recovery units (chunks of parity volumes).
    pub erased_recovery_units: u64,
    /// Stripes with at least one erased unit, of `stripes`.
    pub damaged_stripes: u64,
    /// Stripes in the bundle.
    pub stripes: u64,
    /// Erased units in the worst stripe.
    pub worst_stripe_erased: u32,
    /// Recovery units per stripe (`R`).
    pub recovery_per_stripe: u32,
    /// Recovery units left in the worst stripe (`R` minus its erased units, at least 0).
    pub parity_left_in_worst_stripe: u32,
    /// Data volumes with damage that cannot be rebuilt (to copy again), when not repairable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copy_again: Vec<String>,
}

impl Repairability {
    /// One sentence for the operator: how much is damaged, how much parity is left, and
    /// whether it can be rebuilt.
    pub fn describe(&self) -> String {
        let what = format!(
            "{} damaged data chunk(s) and {} damaged parity chunk(s) in {} of {} parity stripes; the worst stripe lost {} unit(s) of the {} its parity can rebuild",
            self.erased_data_units,
            self.erased_recovery_units,
            self.damaged_stripes,
            self.stripes,
            self.worst_stripe_erased,
            self.recovery_per_stripe
        );
        if self.repairable {
            format!(
                "REPAIRABLE from parity: {what} ({} left); `airlock unpack` installs it as it is, `airlock repair` fixes the bundle",
                self.parity_left_in_worst_stripe
            )
        } else {
            format!("NOT repairable from parity: {what}")
        }
    }
}

/// Assesses a bundle with parity whose volumes were checked: `data` and `parity` are the
/// problems [`check_volumes`] and [`check_parity_volumes`] found. Units of volumes without
/// problems are intact; the units of damaged volumes are read and hashed one by one.
pub fn assess(
    opened: &Opened,
    data: &[VolumeProblem],
    parity: &[VolumeProblem],
) -> Option<Repairability> {
    let source = DirVolumes::of(opened, &crate::progress::Silent);
    let ur = UnitReader::new(&opened.manifest, &source)?;
    Some(assess_with(&ur, data, parity))
}

/// [`assess`] with a given unit reader (whose remembered states are reused by a repair).
pub fn assess_with(
    ur: &UnitReader<'_>,
    data: &[VolumeProblem],
    parity: &[VolumeProblem],
) -> Repairability {
    let m = ur.m;
    let g = ur.g;
    let mut erased: Vec<(u64, Shard)> = Vec::new();
    let mut erased_data = 0;
    let mut erased_recovery = 0;
    let mut lost_units_of: std::collections::BTreeMap<u64, usize> = Default::default();
    for p in data {
        let i = p.index;
        for c in 0..m.volumes[i].chunks.len() {
            let u = ur.layout.unit_of_chunk(i, c);
            if !ur.intact(false, u) {
                let (k, d) = g.locate(u);
                erased.push((k, Shard::Data(d)));
                lost_units_of.insert(u, i);
                erased_data += 1;
            }
        }
    }
    for p in parity {
        let j = p.index;
        for c in 0..ur.parity_volumes()[j].chunks.len() {
            let n = ur.layout.recovery_of_chunk(j, c);
            if !ur.intact(true, n) {
                let r = (n % u64::from(g.recovery)) as u32;
                erased.push((n / u64::from(g.recovery), Shard::Recovery(r)));
                erased_recovery += 1;
            }
        }
    }
    let a = g.assess(&erased);
    let mut per_stripe: std::collections::BTreeMap<u64, u32> = Default::default();
    for (k, _) in &erased {
        *per_stripe.entry(*k).or_default() += 1;
    }
    let mut copy_again: Vec<String> = lost_units_of
        .iter()
        .filter(|(u, _)| per_stripe[&g.locate(**u).0] > g.recovery)
        .map(|(_, i)| m.volumes[*i].name.clone())
        .collect();
    copy_again.dedup();
    Repairability {
        repairable: a.repairable,
        erased_data_units: erased_data,
        erased_recovery_units: erased_recovery,
        damaged_stripes: a.damaged_stripes,
        stripes: g.stripes(),
        worst_stripe_erased: a.worst_stripe_erased,
        recovery_per_stripe: g.recovery,
        parity_left_in_worst_stripe: g.recovery.saturating_sub(a.worst_stripe_erased),
        copy_again,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::stream::stream_volumes;
    use crate::entries::NullSink;
    use crate::pack::{self, Compress, Model, ModelSpec, PackOptions};

    /// A bundle of about 200 KB in 4 KiB chunks and 16 KiB volumes with 25% parity.
    fn packed(dir: &Path) -> Manifest {
        let model = dir.join("m");
        std::fs::create_dir_all(&model).unwrap();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let bytes: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(model.join("w.bin"), bytes).unwrap();
        let key = crate::keys::SecretKey::generate().unwrap();
        let packed = pack::pack(
            &Model::open(&ModelSpec::Dir(model.clone())).unwrap(),
            PackOptions {
                out: dir.join("b"),
                key: &key,
                name: "m".into(),
                version: 1,
                compress: Compress::None,
                volume_size: 16384,
                chunk_size: Some(4096),
                created_unix: 0,
                warnings: vec![],
                parity: Some(crate::parity::Ask::Percent(25.0)),
                base: None,
                trust_update: vec![],
                values: None,
                oms: Default::default(),
            },
            &crate::progress::Silent,
        )
        .unwrap();
        packed.manifest
    }

    /// FORMAT.md section 2: the exact grammar of a volume-like name.
    #[test]
    fn volume_like_names_are_exactly_prefix_and_ascii_digits_in_any_case() {
        for name in [
            "data.000",
            "data.0",
            "data.0000000000000000000000001",
            "parity.007",
            "DATA.005",
            "Data.005",
            "dAtA.1",
            "PARITY.000",
            "Parity.12",
        ] {
            assert!(is_volume_like(name), "{name}");
        }
        for name in [
            "data.",
            "parity.",
            "data",
            "data.x",
            "data.00x",
            "data.000.sha256",
            "data.000 (1)",
            "data.001.part",
            "data.000~",
            "data.-1",
            "data.+1",
            " data.000",
            ".data.000.airlock-repair",
            "xdata.000",
            "data_000",
            "data.\u{661}\u{662}",
            "data.\u{ff11}",
            "d\u{430}ta.000",
            "manifest.json",
            "README.txt",
        ] {
            assert!(!is_volume_like(name), "{name}");
        }
    }

    /// Before: `DATA.005` was an "other" file, ignored by unpack; a second spelling of a listed
    /// volume that is another file is a duplicate; the same entry seen in another case (here a
    /// hard link, as a case-insensitive filesystem shows it) is the listed volume.
    #[test]
    fn strays_are_classified_in_any_case_and_a_listed_entry_in_another_case_is_not_stray() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        for n in [
            "manifest.json",
            "manifest.json.minisig",
            "data.000",
            "data.001",
        ] {
            std::fs::write(d.join(n), n).unwrap();
        }
        std::fs::write(d.join("DATA.002"), "x").unwrap();
        std::fs::write(d.join("Data.001"), "another copy").unwrap();
        std::fs::hard_link(d.join("data.000"), d.join("DATA.000")).unwrap();
        std::fs::hard_link(d.join("manifest.json"), d.join("MANIFEST.JSON")).unwrap();
        std::fs::write(d.join("data.000.sha256"), "x").unwrap();
        std::os::unix::fs::symlink("data.001", d.join("data.0001")).unwrap();
        std::os::unix::fs::symlink("data.001", d.join("DATA.001")).unwrap();
        std::fs::create_dir(d.join("parity.000")).unwrap();
        let listed = [
            "manifest.json",
            "manifest.json.minisig",
            "data.000",
            "data.001",
        ];
        let got: Vec<(String, StrayKind)> = stray_in(d, listed.into_iter())
            .into_iter()
            .map(|s| (s.name, s.kind))
            .collect();
        let want = [
            ("DATA.001", StrayKind::VolumeLike),
            ("DATA.002", StrayKind::VolumeLike),
            ("Data.001", StrayKind::VolumeLike),
            ("data.000.sha256", StrayKind::Other),
            ("data.0001", StrayKind::VolumeLike),
            ("parity.000", StrayKind::VolumeLike),
        ];
        let want: Vec<(String, StrayKind)> =
            want.iter().map(|(n, k)| (n.to_string(), *k)).collect();
        assert_eq!(got, want);
    }

    fn flip(path: &Path, at: usize) {
        let mut b = std::fs::read(path).unwrap();
        b[at] ^= 1;
        std::fs::write(path, b).unwrap();
    }

    /// A bundle directory that counts the bytes read at random and may hold units of at most
    /// `memory` bytes.
    struct Counted<'a> {
        dir: DirVolumes<'a>,
        memory: u64,
        read: std::sync::atomic::AtomicU64,
    }

    impl<'a> Counted<'a> {
        fn new(dir: &'a Path, memory: u64) -> Self {
            Counted {
                dir: DirVolumes::new(dir),
                memory,
                read: Default::default(),
            }
        }
    }

    impl VolumeSource for Counted<'_> {
        fn open(&self, index: usize, name: &str) -> io::Result<Box<dyn Read + Send + '_>> {
            self.dir.open(index, name)
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path(name)
        }
        fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.read
                .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
            self.dir.read_at(name, offset, buf)
        }
        fn unit_memory(&self) -> u64 {
            self.memory
        }
    }

    /// Both ways of reading a bundle with parity: units held in memory, and units read twice.
    const HELD_AND_TWICE: [u64; 2] = [parity::MAX_UNIT_SIZE, 0];

    /// Issue 24: an intact bundle with parity is read once (each unit was hashed, then read
    /// and hashed again: unpack took 1.46x unpack without parity); units larger than a reader
    /// holds are still read twice.
    #[test]
    fn an_intact_bundle_with_parity_is_read_once() {
        let t = tempfile::tempdir().unwrap();
        let m = packed(t.path());
        let b = t.path().join("b");
        for (memory, reads) in [(parity::MAX_UNIT_SIZE, 1), (0, 2)] {
            let source = Counted::new(&b, memory);
            stream_volumes(
                &m,
                &source,
                Mode::Strict,
                &mut NullSink,
                &crate::progress::Silent,
            )
            .unwrap();
            assert_eq!(
                source.read.into_inner(),
                reads * m.totals.volume_bytes,
                "units held up to {memory} bytes"
            );
        }
    }

    #[test]
    fn an_erased_unit_is_rebuilt_while_streaming_and_the_volume_named() {
        for memory in HELD_AND_TWICE {
            let t = tempfile::tempdir().unwrap();
            let m = packed(t.path());
            let b = t.path().join("b");
            flip(&b.join("data.000"), 3);
            std::fs::remove_file(b.join("data.002")).unwrap();
            // Strict: every file is held to its signed digest, so the rebuilt bytes are right.
            let report = stream_volumes(
                &m,
                &Counted::new(&b, memory),
                Mode::Strict,
                &mut NullSink,
                &crate::progress::Silent,
            )
            .unwrap();
            assert_eq!(report.repaired, ["data.000", "data.002"]);
        }
    }

    #[test]
    fn a_rebuilt_unit_that_fails_its_signed_digest_is_refused() {
        // The recovery unit of stripe 0 is changed and its digest in the manifest with it (a
        // parity volume that verifies but lies): the rebuilt data unit 0 must not be used.
        for memory in HELD_AND_TWICE {
            let t = tempfile::tempdir().unwrap();
            let mut m = packed(t.path());
            let b = t.path().join("b");
            let g = m.parity_geometry().unwrap();
            assert_eq!(g.recovery_index(0, 0), 0);
            let p0 = b.join("parity.000");
            flip(&p0, 10);
            let unit = std::fs::read(&p0).unwrap()[..4096].to_vec();
            m.parity.as_mut().unwrap().volumes[0].chunks[0] = hex::encode(Sha256::digest(&unit));
            flip(&b.join("data.000"), 3);
            let e = stream_volumes(
                &m,
                &Counted::new(&b, memory),
                Mode::Strict,
                &mut NullSink,
                &crate::progress::Silent,
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("chunk 0 rebuilt from parity does not match its signed digest"),
                "{e}"
            );
        }
    }
}
