//! `airlock copy`: a verified bundle onto one or more mounted media, each volume read back
//! from the device (issue 32; FORMAT.md section 21, CLI.md).
//!
//! Each medium gets `MEDIUM/<bundle directory name>/`: the bundle's signed small files (the
//! manifest, its signature, co-signatures, carried roots, the OMS signature) on every medium,
//! the placement file [`crate::bundle::media::PLACEMENT_NAME`], and whole volumes, filled in
//! order. Nothing is written before the plan fits: every medium is a directory on a file system
//! of its own, none holds another bundle or a file airlock did not make under the bundle's name,
//! and the media together hold the bundle. A volume is written into a work directory on its
//! medium ([`crate::staging::Staging`]: private, locked, removed on drop and on SIGINT/SIGTERM),
//! its source bytes checked against the signed chunk digests as they pass, fsynced, its cached
//! pages dropped, then renamed to its name: a killed copy leaves no half volume under a volume's
//! name, and a rerun keeps every volume that has its name and size. When a medium's volumes are
//! all there, every one of them is read back from the device ([`crate::fsio::MediumRead::Device`])
//! against its signed digests before the next medium is used: a counterfeit stick that wraps its
//! writes around overwrites an earlier volume, and the read-back of the whole medium finds it.
//!
//! With parity, the data volumes are spread over the media in order in runs of about equal
//! size, and each parity volume goes where it leaves the fewest media whose loss the parity
//! cannot rebuild; the report says which media the set survives losing (FORMAT.md 17.2: a lost
//! medium erases every unit of its volumes).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::bundle::media::{MediumVolumes, PLACEMENT_NAME, Placement};
use crate::bundle::open::BundleDir;
use crate::error::{Error, Result};
use crate::fsio::{self, AlignedBuf, Follow, MEDIUM_READ_SIZE, MediumRead, ReadFrom};
use crate::manifest::{self, Manifest, Volume};
use crate::progress::{Phase, Progress};
use crate::staging::{Publish, Staging};

/// Mode of everything `copy` writes on a medium: a bundle is public, signed data.
const FILE_MODE: u32 = 0o644;
/// Mode of the bundle directory it makes on a medium.
const DIR_MODE: u32 = 0o755;
/// Room kept free on every medium beyond the files' blocks: the directory, the work
/// directory and its lock, the file system's own bookkeeping for new files.
const SLACK: u64 = 1 << 20;

/// What to copy where.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// The mounted media (directories), in the order they are filled.
    pub media: Vec<PathBuf>,
}

/// What was done on one medium.
#[derive(Debug, Clone, Serialize)]
pub struct MediumReport {
    /// Its number in the set, from 1.
    pub number: usize,
    /// The directory given.
    pub medium: PathBuf,
    /// The bundle directory on it.
    pub dir: PathBuf,
    /// Every volume it holds, in order.
    pub volumes: Vec<String>,
    /// The volumes written by this run.
    pub written: Vec<String>,
    /// The volumes that were already there (an earlier, interrupted copy), kept.
    pub kept: Vec<String>,
    /// Bytes written and the seconds it took (including the fsync).
    pub bytes_written: u64,
    /// Seconds spent writing.
    pub write_seconds: f64,
    /// Bytes read back from the device and the seconds it took.
    pub bytes_read_back: u64,
    /// Seconds spent reading back.
    pub read_seconds: f64,
    /// How the read-back read: `medium` (direct I/O), or why not.
    pub read_from: ReadFrom,
    /// Why the read-back may not have come from the device itself; absent when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Free bytes on the medium before the copy.
    pub free_before: u64,
}

/// The result of [`copy`].
#[derive(Debug, Clone, Serialize)]
pub struct Copied {
    /// The bundle's name and version.
    pub name: String,
    /// Its version.
    pub version: u64,
    /// Per medium, in order.
    pub media: Vec<MediumReport>,
    /// With parity: the numbers of the media whose loss the parity rebuilds (empty: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub survives_losing: Option<Vec<usize>>,
    /// Work directories of an earlier, interrupted copy that were removed.
    pub removed_stale: Vec<PathBuf>,
}

/// One medium as found before anything is written.
struct Medium {
    /// The directory given.
    root: PathBuf,
    /// `root/NAME`.
    dir: PathBuf,
    /// Whether `dir` exists already (holding this bundle, or empty).
    exists: bool,
    /// Bytes available to this user, plus the blocks of this bundle's volumes already there.
    capacity: u64,
    /// Free bytes now.
    free: u64,
    /// The file system's block size (files take whole blocks).
    block: u64,
    /// The largest file the file system takes (FAT32: 4 GiB - 1).
    max_file: u64,
    /// The file system's name, for messages.
    fstype: String,
    /// Volumes of this bundle already there with their name and size.
    present: Vec<String>,
}

/// Copies the opened (signature-verified) bundle onto `opts.media`; see the module
/// documentation.
pub fn copy(opened: &BundleDir, opts: &CopyOptions, progress: &dyn Progress) -> Result<Copied> {
    let m = &opened.manifest;
    if opts.media.is_empty() {
        return Err(Error::Usage("copy needs at least one medium".into()));
    }
    let src = opened.media.first().to_path_buf();
    let name = src
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: the bundle directory needs a name to copy it under",
                src.display()
            ))
        })?;
    let small = small_files(opened)?;
    let small_bytes: u64 = small.iter().map(|(_, b)| b.len() as u64).sum();
    let mut media = Vec::with_capacity(opts.media.len());
    let volumes = all_volumes(m);
    for root in &opts.media {
        media.push(inspect(root, &name, opened, &volumes, &small)?);
    }
    refuse_shared_file_systems(&media, &src)?;
    let plan = plan(m, &volumes, &media, small_bytes)?;
    let survives = m.parity.as_ref().map(|_| survivors(m, &plan, media.len()));
    let placement = |medium: usize| Placement {
        airlock_media: 1,
        manifest_sha256: opened.manifest_sha256.clone(),
        medium: medium + 1,
        media: (0..media.len())
            .map(|k| MediumVolumes {
                number: k + 1,
                volumes: volumes
                    .iter()
                    .zip(&plan)
                    .filter(|(_, p)| **p == k)
                    .map(|(v, _)| v.name.clone())
                    .collect(),
            })
            .filter(|mv| !mv.volumes.is_empty() || mv.number == medium + 1)
            .collect(),
    };
    let mut out = Copied {
        name: m.name.clone(),
        version: m.version,
        media: Vec::new(),
        survives_losing: survives,
        removed_stale: Vec::new(),
    };
    for (k, medium) in media.iter().enumerate() {
        let mine: Vec<&Volume> = volumes
            .iter()
            .zip(&plan)
            .filter(|(_, p)| **p == k)
            .map(|(v, _)| *v)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let report = copy_to(
            opened,
            medium,
            k + 1,
            &mine,
            &small,
            &placement(k),
            progress,
            &mut out.removed_stale,
        )?;
        out.media.push(report);
    }
    Ok(out)
}

/// Every volume of the bundle: data, then parity.
fn all_volumes(m: &Manifest) -> Vec<&Volume> {
    m.volumes
        .iter()
        .chain(m.parity.iter().flat_map(|p| p.volumes.iter()))
        .collect()
}

/// The bundle's signed small files as they are in the source directory: the manifest, its
/// signature, the co-signatures and carried roots that counted, the OMS signature it lists.
fn small_files(opened: &BundleDir) -> Result<Vec<(String, Vec<u8>)>> {
    let m = &opened.manifest;
    let src = opened.media.first();
    let mut names = vec![
        manifest::MANIFEST_NAME.to_string(),
        manifest::SIGNATURE_NAME.to_string(),
    ];
    names.extend(opened.trust.cosignatures.iter().map(|(n, _)| n.clone()));
    if let Ok(rd) = crate::fsio::list_dir(src, crate::fsio::Follow::Final) {
        for (n, _) in rd {
            let n = n.to_string_lossy().into_owned();
            if (crate::trust::update::is_listed_root(m, &n) || crate::oms::is_listed(m, &n))
                && !names.contains(&n)
            {
                names.push(n);
            }
        }
    }
    names
        .into_iter()
        .map(|n| {
            let path = src.join(&n);
            let bytes = fsio::read_capped(&path, manifest::MAX_MANIFEST_BYTES, Follow::Never)
                .map_err(|e| Error::io(&path, e.into()))?;
            Ok((n, bytes))
        })
        .collect()
}

/// Looks at one medium: a directory; `NAME` in it absent, empty, or this bundle (same signed
/// manifest, only its own files); its free space and limits.
fn inspect(
    root: &Path,
    name: &str,
    opened: &BundleDir,
    volumes: &[&Volume],
    small: &[(String, Vec<u8>)],
) -> Result<Medium> {
    let root_fd = fsio::open_dir_path(root, Follow::Final).map_err(|e| {
        Error::io(
            root,
            std::io::Error::new(
                std::io::Error::from(e).kind(),
                "cannot be opened as a directory (give the directory the medium is mounted on)",
            ),
        )
    })?;
    let st = rustix::fs::fstatvfs(&root_fd).map_err(|e| Error::io(root, e.into()))?;
    let block = st.f_frsize.max(512);
    let free = st.f_bavail.saturating_mul(block);
    let fstype = crate::fsinfo::mount_of(root).map_or_else(String::new, |mt| mt.fstype);
    let max_file = if matches!(fstype.as_str(), "vfat" | "msdos" | "fat") {
        crate::size::FAT32_MAX
    } else {
        u64::MAX
    };
    let dir = root.join(name);
    let mut medium = Medium {
        root: root.to_path_buf(),
        dir: dir.clone(),
        exists: false,
        capacity: free,
        free,
        block,
        max_file,
        fstype,
        present: Vec::new(),
    };
    let meta = match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(medium),
        Err(e) => return Err(Error::io(&dir, e)),
        Ok(meta) => meta,
    };
    if !meta.is_dir() {
        return Err(not_ours(
            &dir,
            "exists and is not a directory: airlock copy writes nothing over it",
        ));
    }
    medium.exists = true;
    let own = crate::bundle::media::Media::new(vec![dir.clone()], &opened.manifest_sha256);
    let listing: Vec<String> = crate::fsio::list_dir(&dir, crate::fsio::Follow::Final)
        .map_err(|e| Error::io(&dir, e.into()))?
        .into_iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .collect();
    if listing.is_empty() {
        return Ok(medium);
    }
    own.check_same_bundle(false).map_err(|e| match e {
        Error::MixedMedia { path, reason } => Error::MixedMedia {
            path,
            reason: format!("{reason}; airlock copy writes nothing over another bundle"),
        },
        _ => not_ours(
            &dir,
            &format!(
                "exists and holds {} but no manifest of this bundle: airlock copy writes nothing over what it did not make",
                listing.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            ),
        ),
    })?;
    for n in &listing {
        if let Some(v) = volumes.iter().find(|v| &v.name == n) {
            let path = dir.join(n);
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
            if !meta.is_file() || meta.len() != v.size {
                return Err(not_ours(
                    &path,
                    &format!(
                        "is not volume {n} as airlock copy writes it ({} bytes of {}, a {}): remove it and copy again",
                        meta.len(),
                        v.size,
                        if meta.is_file() {
                            "regular file"
                        } else {
                            "non-regular file"
                        }
                    ),
                ));
            }
            medium.capacity = medium.capacity.saturating_add(blocks(meta.len(), block));
            medium.present.push(n.clone());
        } else if small.iter().any(|(s, _)| s == n)
            || n == PLACEMENT_NAME
            || n.starts_with(&format!(".{PLACEMENT_NAME}.airlock-tmp-"))
            || n.starts_with(crate::staging::STAGING_PREFIX)
            || n.starts_with(crate::staging::BIRTH_PREFIX)
        {
            // The bundle's own small files and an interrupted copy's work directory.
        } else {
            return Err(not_ours(
                &dir.join(n),
                "is not part of this bundle: airlock copy writes into a bundle directory that holds only the bundle; remove it or give another medium",
            ));
        }
    }
    Ok(medium)
}

fn not_ours(path: &Path, reason: &str) -> Error {
    Error::MixedMedia {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Two media on one file system would count its space twice; the source's own directory is
/// not a medium.
fn refuse_shared_file_systems(media: &[Medium], src: &Path) -> Result<()> {
    let src = src.canonicalize().ok();
    let mut seen: BTreeMap<u64, &Path> = BTreeMap::new();
    for m in media {
        if src.is_some() && m.dir.canonicalize().ok() == src {
            return Err(Error::Usage(format!(
                "{} is the bundle being copied: give the directory of another medium",
                m.dir.display()
            )));
        }
        let dev = std::fs::metadata(&m.root)
            .map_err(|e| Error::io(&m.root, e))?
            .dev();
        if let Some(other) = seen.insert(dev, &m.root) {
            return Err(Error::Usage(format!(
                "{} and {} are on the same file system: give each medium once (their space would count twice)",
                other.display(),
                m.root.display()
            )));
        }
    }
    Ok(())
}

/// Bytes a file of `len` bytes takes on a file system of `block`-byte blocks.
fn blocks(len: u64, block: u64) -> u64 {
    len.div_ceil(block).saturating_mul(block)
}

/// Which medium each volume goes on (indexes into `media`), or why the media cannot hold the
/// bundle. A volume already on a medium stays there; the rest fill the media in order (with
/// parity, the data in runs of about equal size and each parity volume where it leaves the
/// fewest media whose loss cannot be rebuilt).
fn plan(m: &Manifest, volumes: &[&Volume], media: &[Medium], small: u64) -> Result<Vec<usize>> {
    let fixed: Vec<Option<usize>> = volumes
        .iter()
        .map(|v| media.iter().position(|md| md.present.contains(&v.name)))
        .collect();
    let room: Vec<u64> = media
        .iter()
        .map(|md| {
            md.capacity
                .saturating_sub(blocks(small, md.block) + (2 + 4) * md.block + SLACK)
        })
        .collect();
    let fits = |plan: &[usize]| -> bool {
        let mut used = vec![0u64; media.len()];
        for (v, &k) in volumes.iter().zip(plan) {
            if v.size > media[k].max_file {
                return false;
            }
            used[k] += blocks(v.size, media[k].block);
        }
        used.iter().zip(&room).all(|(u, r)| u <= r)
    };
    // With parity: the data over the first `d` media for every `d`, the parity where it
    // hurts least; the plan that survives the loss of the most media wins (the most even one
    // on a tie).
    if m.parity.is_some() && media.len() > 1 {
        let mut best: Option<(usize, Vec<usize>)> = None;
        for d in (1..=media.len()).rev() {
            if let Some(c) = balanced(m, volumes, media, &room, &fixed, d)
                && fits(&c)
            {
                let s = survivors(m, &c, media.len()).len();
                if best.as_ref().is_none_or(|(b, _)| s > *b) {
                    best = Some((s, c));
                }
            }
        }
        if let Some((_, c)) = best {
            return Ok(c);
        }
    }
    match in_order(volumes, media, &room, &fixed) {
        Some(c) if fits(&c) => Ok(c),
        _ => Err(too_small(volumes, media, &room)),
    }
}

/// Fills the media in order: each volume not already placed goes on the first medium from the
/// previous volume's on that still has room for it.
fn in_order(
    volumes: &[&Volume],
    media: &[Medium],
    room: &[u64],
    fixed: &[Option<usize>],
) -> Option<Vec<usize>> {
    let mut left = room.to_vec();
    for (v, f) in volumes.iter().zip(fixed) {
        if let Some(k) = f {
            left[*k] = left[*k].saturating_sub(blocks(v.size, media[*k].block));
        }
    }
    let mut cur = 0;
    let mut plan = Vec::with_capacity(volumes.len());
    for (v, f) in volumes.iter().zip(fixed) {
        if let Some(k) = f {
            plan.push(*k);
            continue;
        }
        loop {
            let need = blocks(v.size, media.get(cur)?.block);
            if v.size <= media[cur].max_file && need <= left[cur] {
                left[cur] -= need;
                plan.push(cur);
                break;
            }
            cur += 1;
        }
    }
    Some(plan)
}

/// With parity: the data volumes in runs of about equal bytes over the first `spread` media in
/// order, then each parity volume on the medium that leaves the fewest media whose loss cannot
/// be rebuilt (ties: the one with the most room left). A parity volume holds every recovery
/// unit of its stripes (FORMAT.md 17.2), so a medium holding one survives its loss only if it
/// holds no data: hence the data on fewer media than there are.
fn balanced(
    m: &Manifest,
    volumes: &[&Volume],
    media: &[Medium],
    room: &[u64],
    fixed: &[Option<usize>],
    spread: usize,
) -> Option<Vec<usize>> {
    let data = m.volumes.len();
    let total: u64 = m.volumes.iter().map(|v| v.size).sum();
    let n = spread as u64;
    let mut plan: Vec<usize> = Vec::with_capacity(volumes.len());
    let mut placed = 0u64;
    for (i, v) in volumes[..data].iter().enumerate() {
        let k = match fixed[i] {
            Some(k) => k,
            // The medium whose share of the data this volume's middle falls in.
            None => (((placed + v.size / 2) as u128 * n as u128 / total.max(1) as u128) as usize)
                .min(spread - 1),
        };
        placed += v.size;
        plan.push(k);
    }
    let mut left = room.to_vec();
    for (v, &k) in volumes[..data].iter().zip(&plan) {
        left[k] = left[k].checked_sub(blocks(v.size, media[k].block))?;
    }
    for (j, v) in volumes[data..].iter().enumerate() {
        if let Some(k) = fixed[data + j] {
            plan.push(k);
            left[k] = left[k].checked_sub(blocks(v.size, media[k].block))?;
            continue;
        }
        let mut best: Option<(usize, u64, usize)> = None;
        for k in 0..media.len() {
            let need = blocks(v.size, media[k].block);
            if need > left[k] || v.size > media[k].max_file {
                continue;
            }
            let mut trial = plan.clone();
            trial.push(k);
            // The parity volumes not yet placed count as lost with nothing (none of them
            // helps yet).
            let lost = (0..media.len())
                .filter(|&x| !survives_loss(m, &trial, x))
                .count();
            let better = match best {
                None => true,
                Some((bl, br, _)) => lost < bl || (lost == bl && left[k] - need > br),
            };
            if better {
                best = Some((lost, left[k] - need, k));
            }
        }
        let (_, _, k) = best?;
        left[k] -= blocks(v.size, media[k].block);
        plan.push(k);
    }
    Some(plan)
}

/// The media (numbers from 1) whose loss the parity rebuilds, under `plan`.
fn survivors(m: &Manifest, plan: &[usize], count: usize) -> Vec<usize> {
    (0..count)
        .filter(|&k| plan.contains(&k) && survives_loss(m, plan, k))
        .map(|k| k + 1)
        .collect()
}

/// Whether every stripe keeps enough units when every volume `plan` puts on medium `lost` is
/// gone (FORMAT.md 17.2/17.3). Volumes past the end of `plan` (parity not yet placed) count as
/// lost. Without parity, no loss is survivable.
fn survives_loss(m: &Manifest, plan: &[usize], lost: usize) -> bool {
    let Some(p) = &m.parity else { return false };
    let layout = crate::manifest::units::UnitLayout::of(m);
    let stripes = p.stripes.max(1);
    let r = u64::from(p.recovery_units);
    let mut erased: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, v) in m.volumes.iter().enumerate() {
        if plan.get(i) == Some(&lost) || plan.get(i).is_none() {
            for c in 0..v.chunks.len() {
                *erased
                    .entry(layout.unit_of_chunk(i, c) % stripes)
                    .or_default() += 1;
            }
        }
    }
    let data = m.volumes.len();
    for (j, v) in p.volumes.iter().enumerate() {
        if plan.get(data + j) == Some(&lost) || plan.get(data + j).is_none() {
            for c in 0..v.chunks.len() {
                *erased
                    .entry(layout.recovery_of_chunk(j, c) / r)
                    .or_default() += 1;
            }
        }
    }
    erased.values().all(|&e| e <= r)
}

/// The error for media that cannot hold the bundle: what it needs, what each has.
fn too_small(volumes: &[&Volume], media: &[Medium], room: &[u64]) -> Error {
    use crate::display::human;
    let needed: u64 = volumes.iter().map(|v| v.size).sum();
    let have: u64 = room.iter().sum();
    let largest = volumes.iter().map(|v| v.size).max().unwrap_or(0);
    let each: Vec<String> = media
        .iter()
        .zip(room)
        .map(|(md, r)| {
            format!(
                "{} ({}{}) has room for {}",
                md.root.display(),
                if md.fstype.is_empty() {
                    "?"
                } else {
                    &md.fstype
                },
                if md.max_file < u64::MAX {
                    ", files below 4 GiB"
                } else {
                    ""
                },
                human(*r)
            )
        })
        .collect();
    let why = if media.iter().all(|md| largest > md.max_file) {
        format!(
            "a volume of {} is larger than any of these file systems takes in one file: pack again with --volume-size fat32",
            human(largest)
        )
    } else if have >= needed {
        "the volumes do not divide among them whole (a volume is never split): add a medium or use larger ones".to_string()
    } else {
        format!(
            "{} more are needed: add a medium or use larger ones",
            human(needed - have)
        )
    };
    Error::MediaTooSmall {
        summary: format!(
            "the media cannot hold the bundle: its {} volume(s) need {}; {}; {why}",
            volumes.len(),
            human(needed),
            each.join(", ")
        ),
    }
}

/// Writes and reads back everything planned for one medium.
#[allow(clippy::too_many_arguments)]
fn copy_to(
    opened: &BundleDir,
    medium: &Medium,
    number: usize,
    mine: &[&Volume],
    small: &[(String, Vec<u8>)],
    placement: &Placement,
    progress: &dyn Progress,
    removed_stale: &mut Vec<PathBuf>,
) -> Result<MediumReport> {
    let dir = &medium.dir;
    let root_fd = std::sync::Arc::new(
        fsio::open_dir_path(&medium.root, Follow::Final)
            .map_err(|e| Error::io(&medium.root, e.into()))?,
    );
    let _created;
    if !medium.exists {
        let name = file_name(dir);
        crate::durable::mkdir_at(&*root_fd, &medium.root, &name, DIR_MODE)?;
        _created = Some(crate::staging::register_created(
            root_fd.clone(),
            &name,
            dir.clone(),
        ));
        crate::durable::sync_dir_fd(&*root_fd, &medium.root)?;
    } else {
        let cleaned = crate::staging::clean_stale(dir)?;
        removed_stale.extend(cleaned.removed);
    }
    let dir_fd = crate::durable::open_dir(dir)?;
    let work = Staging::create(dir, "copy")?;
    // The signed small files first (a medium is recognisable from its first file on), then
    // the placement file; each whole or not at all.
    for (n, bytes) in small {
        if std::fs::symlink_metadata(dir.join(n)).is_err() {
            work.write_file(n, bytes, FILE_MODE)?;
            work.publish(n, &dir.join(n), Publish::NoReplace)?;
        }
    }
    let placement_bytes = serde_json::to_vec_pretty(placement)
        .map_err(|e| Error::Internal(format!("placement: {e}")))?;
    crate::durable::replace_at(&dir_fd, dir, PLACEMENT_NAME, &placement_bytes, FILE_MODE)?;
    let mut report = MediumReport {
        number,
        medium: medium.root.clone(),
        dir: dir.clone(),
        volumes: mine.iter().map(|v| v.name.clone()).collect(),
        written: Vec::new(),
        kept: Vec::new(),
        bytes_written: 0,
        write_seconds: 0.0,
        bytes_read_back: 0,
        read_seconds: 0.0,
        read_from: ReadFrom::Medium,
        why: None,
        free_before: medium.free,
    };
    let to_write: Vec<&Volume> = mine
        .iter()
        .copied()
        .filter(|v| !medium.present.contains(&v.name))
        .collect();
    report.kept = mine
        .iter()
        .filter(|v| medium.present.contains(&v.name))
        .map(|v| v.name.clone())
        .collect();
    progress.start(
        Phase::CopyToMedium(number),
        to_write.iter().map(|v| v.size).sum(),
    );
    let started = Instant::now();
    for v in &to_write {
        progress.item(&v.name);
        write_volume(opened, v, &work, dir, progress)?;
        report.bytes_written += v.size;
        report.written.push(v.name.clone());
    }
    report.write_seconds = started.elapsed().as_secs_f64();
    progress.finish();
    crate::durable::sync_dir_fd(&dir_fd, dir)?;
    test_pause_before_read_back(dir);
    // Every volume of the medium, read back from the device.
    progress.start(
        Phase::ReadBackMedium(number),
        mine.iter().map(|v| v.size).sum(),
    );
    let started = Instant::now();
    let mut bad = Vec::new();
    let mut buf = AlignedBuf::new(MEDIUM_READ_SIZE);
    for v in mine {
        progress.item(&v.name);
        let path = dir.join(&v.name);
        let (mut f, len) = fsio::open_medium(&path, Follow::Never, MediumRead::Device)
            .map_err(|e| Error::io(&path, e.into()))?;
        if !f.read_from().from_medium() && report.why.is_none() {
            report.read_from = f.read_from();
            report.why = f.why();
        }
        if len != v.size {
            bad.push(format!(
                "{} reads back as {len} bytes, not {}",
                v.name, v.size
            ));
            continue;
        }
        let mut ranges = Vec::new();
        for (c, want) in v.chunks.iter().enumerate() {
            let start = c as u64 * opened.manifest.chunk_size;
            let end = (start + opened.manifest.chunk_size).min(v.size);
            let mut h = Sha256::new();
            f.read_range(&mut buf, start, end, |piece| {
                h.update(piece);
                progress.advance(piece.len() as u64);
                Ok(())
            })
            .map_err(|e| Error::io(&path, e))?;
            if &hex::encode(h.finalize()) != want {
                ranges.push(format!("{start}-{end}"));
            }
        }
        report.bytes_read_back += v.size;
        if !ranges.is_empty() {
            bad.push(format!(
                "{} reads back other bytes than were written (byte ranges {})",
                v.name,
                ranges.join(", ")
            ));
        }
    }
    report.read_seconds = started.elapsed().as_secs_f64();
    progress.finish();
    // The work directory lives until the medium is done (a copy killed before that leaves it
    // for the rerun to remove and report).
    drop(work);
    if !bad.is_empty() {
        return Err(Error::MediumFailing {
            medium: medium.root.clone(),
            summary: format!(
                "{}: this medium may be counterfeit or failing (it gave back other bytes than were written); do not carry it: copy onto another medium",
                bad.join("; ")
            ),
        });
    }
    Ok(report)
}

/// Tests only (debug builds): with `AIRLOCK_TEST_PAUSE_BEFORE_READ_BACK=FLAG` set, a medium's
/// volumes written and dropped from the cache, the copy creates `FLAG.waiting` (holding the
/// medium's bundle directory) and waits until `FLAG` exists, so that a test can write to the
/// device under the file system, as a failing or counterfeit medium would, before the read-back.
/// Nothing is run and nothing read but the two names; release builds have no such pause.
fn test_pause_before_read_back(dir: &Path) {
    #[cfg(debug_assertions)]
    if let Some(flag) = std::env::var_os("AIRLOCK_TEST_PAUSE_BEFORE_READ_BACK") {
        let flag = PathBuf::from(flag);
        let mut waiting = flag.clone().into_os_string();
        waiting.push(".waiting");
        let _ = std::fs::write(&waiting, dir.as_os_str().as_encoded_bytes());
        while std::fs::symlink_metadata(&flag).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&flag);
        let _ = std::fs::remove_file(&waiting);
    }
    let _ = dir;
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Buffers between the source reader and the writer.
const PIPE_BUFFERS: usize = 4;

/// Copies volume `v` from the source into the work directory, checking the source bytes
/// against the signed chunk digests on the way, syncs it, drops its cached pages (the
/// read-back must read the device) and renames it to its name in `dir`.
fn write_volume(
    opened: &BundleDir,
    v: &Volume,
    work: &Staging,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<()> {
    let chunk_size = opened.manifest.chunk_size;
    let src_path = opened.media.volume_path(&v.name);
    let (src_file, len) =
        fsio::open_regular(&src_path, Follow::Final).map_err(|e| Error::io(&src_path, e.into()))?;
    if len != v.size {
        return Err(Error::BadVolumes {
            summary: format!(
                "the source's volume {} is {len} bytes, the manifest says {}: verify the source bundle ({})",
                v.name,
                v.size,
                src_path.display()
            ),
            copy_again: vec![v.name.clone()],
            remove: vec![],
        });
    }
    let mut out = crate::durable::create_new_at(work.fd(), &work.path(), &v.name, FILE_MODE)?;
    let out_path = work.path().join(&v.name);
    let flusher = crate::writeback::Flusher::new();
    let src_ref = &src_file;
    let bad_chunks = std::thread::scope(|s| -> Result<Vec<usize>> {
        // Both channels live in this closure: an error of the writer drops them, which ends
        // the reader.
        let (tx, rx) =
            crossbeam_channel::bounded::<std::io::Result<(Vec<u8>, usize)>>(PIPE_BUFFERS);
        let (pool_tx, pool_rx) = crossbeam_channel::bounded::<Vec<u8>>(PIPE_BUFFERS + 1);
        for _ in 0..PIPE_BUFFERS + 1 {
            let _ = pool_tx.send(vec![0u8; MEDIUM_READ_SIZE]);
        }
        let reader = s.spawn(move || -> Vec<usize> {
            let mut bad = Vec::new();
            let mut src_file = src_ref;
            let mut h = Sha256::new();
            let mut in_chunk = 0u64;
            let mut chunk = 0usize;
            let mut pos = 0u64;
            while let Ok(mut buf) = pool_rx.recv() {
                if pos >= v.size {
                    break;
                }
                let want = ((v.size - pos).min(chunk_size - in_chunk) as usize).min(buf.len());
                let n = loop {
                    match src_file.read(&mut buf[..want]) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        other => break other,
                    }
                };
                let n = match n {
                    Ok(0) => {
                        let _ = tx.send(Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the source volume ended early",
                        )));
                        break;
                    }
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                };
                h.update(&buf[..n]);
                in_chunk += n as u64;
                pos += n as u64;
                if in_chunk == chunk_size || pos == v.size {
                    let digest = hex::encode(std::mem::take(&mut h).finalize());
                    if v.chunks.get(chunk) != Some(&digest) {
                        bad.push(chunk);
                    }
                    chunk += 1;
                    in_chunk = 0;
                }
                if tx.send(Ok((buf, n))).is_err() {
                    break;
                }
            }
            drop(tx);
            bad
        });
        let mut written = 0u64;
        let mut since_flush = 0u64;
        for piece in &rx {
            let (buf, n) = piece.map_err(|e| Error::io(&src_path, e))?;
            out.write_all(&buf[..n])
                .map_err(|e| Error::io(&out_path, e))?;
            written += n as u64;
            since_flush += n as u64;
            progress.advance(n as u64);
            if since_flush >= crate::writeback::FLUSH_EVERY {
                flusher.flush(&out, &out_path);
                since_flush = 0;
            }
            let _ = pool_tx.send(buf);
        }
        drop(pool_tx);
        let bad = reader
            .join()
            .map_err(|_| Error::Internal("the source reading thread panicked".into()))?;
        if written != v.size && bad.is_empty() {
            return Err(Error::io(
                &src_path,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the source volume ended early",
                ),
            ));
        }
        Ok(bad)
    })?;
    if !bad_chunks.is_empty() {
        return Err(Error::BadVolumes {
            summary: format!(
                "the source's volume {} fails its sha256 (chunks {:?}): nothing of it was placed on the medium; verify the source bundle ({}) and copy it from the staging host again",
                v.name,
                bad_chunks,
                src_path.display()
            ),
            copy_again: vec![v.name.clone()],
            remove: vec![],
        });
    }
    if let Some((p, e)) = flusher.finish() {
        return Err(Error::io(p, e));
    }
    fsio::write_back_and_drop(&out, 0, 0).map_err(|e| Error::io(&out_path, e))?;
    let _ = rustix::fs::fadvise(&src_file, 0, None, rustix::fs::Advice::DontNeed);
    drop(out);
    work.publish(&v.name, &dir.join(&v.name), Publish::NoReplace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_up() {
        assert_eq!(blocks(0, 4096), 0);
        assert_eq!(blocks(1, 4096), 4096);
        assert_eq!(blocks(4096, 4096), 4096);
        assert_eq!(blocks(4097, 4096), 8192);
    }
}
