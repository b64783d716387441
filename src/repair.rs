//! `airlock repair`: restores damaged or missing volumes of a bundle, chunk by chunk, from
//! other copies of the same bundle and from its parity volumes (FORMAT.md section 17).
//!
//! Every chunk of every damaged volume (data or parity) gets a source: the bundle itself where
//! its chunk is intact, else the first other copy whose same chunk matches the signed digest,
//! else a rebuild from parity when its stripe has at most `R` units without a good source. So
//! two copies damaged in different places make one good bundle, with or without parity. If any
//! chunk has no source, nothing is changed and the error lists the volumes to copy again.
//!
//! Every repaired chunk is checked against its signed digest before it is written. In place,
//! the bundle directory is opened once, without following a link, and everything written into
//! it goes through that handle: a private work directory (a [`Staging`], `0700` and locked from
//! birth) is made inside it, each repaired volume is created there exclusively, synced and
//! renamed over the damaged one. Nothing on the medium is opened for writing by path, so a
//! link planted in the bundle directory (under any name) is never followed. A work directory
//! left by a killed repair is removed by the next one once its lock is free. With an output
//! directory, a complete bundle is written under `OUT.partial` (the same kind of work
//! directory) and renamed to `OUT` once it is whole.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::RenameFlags;

use sha2::{Digest, Sha256};

use crate::bundle::damage::{DamageMap, UnitState};
use crate::bundle::open::{self, BundleDir};
use crate::bundle::volumes::{self, UnitReader, VolumeProblem, VolumeSource};
use crate::error::{Error, Result};
use crate::fsio;
use crate::manifest::{self, Manifest, Volume};
use crate::parity::Shard;
use crate::progress::Progress;
use crate::staging::{self, Staging};

/// Prefix of the work directory an in-place repair makes in the bundle directory.
pub(crate) const WORK_PREFIX: &str = ".airlock-staging-repair-";

/// What to repair from and where to.
pub struct RepairOptions {
    /// Write a complete repaired bundle here instead of repairing in place.
    pub out: Option<PathBuf>,
    /// Other copies of the same bundle to take good chunks from.
    pub from: Vec<PathBuf>,
}

/// What a repair did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Repaired {
    /// Volumes (data and parity) rewritten, in manifest order.
    pub volumes: Vec<String>,
    /// Chunks taken from other copies.
    pub chunks_from_copies: u64,
    /// Chunks rebuilt from parity.
    pub chunks_from_parity: u64,
    /// Where the repaired bundle is.
    pub bundle: PathBuf,
    /// Other copies given that were not used, and why (another bundle, unreadable manifest).
    pub copies_skipped: Vec<(PathBuf, String)>,
    /// Work directories of interrupted repairs that were removed.
    pub cleaned_stale: Vec<PathBuf>,
    /// Work directories that look abandoned but were left alone, and why.
    pub stale_skipped: Vec<(PathBuf, String)>,
}

/// Where the good bytes of one chunk come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Directory `n` of the list (0 = the bundle, 1.. = the other copies).
    Dir(usize),
    /// Rebuilt from parity.
    Parity,
}

/// Reads each chunk from the directory known to hold it intact; a chunk without a good
/// directory reads as an error (an erased unit).
struct Merged<'a> {
    dirs: &'a [PathBuf],
    chunk_size: u64,
    good: &'a BTreeMap<String, Vec<Option<usize>>>,
}

impl VolumeSource for Merged<'_> {
    fn open(&self, _index: usize, _name: &str) -> io::Result<Box<dyn io::Read + Send + '_>> {
        Err(crate::fault::fault("merged copies are read by chunk only"))
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dirs[0].join(name)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let c = (offset / self.chunk_size) as usize;
        let dir = match self.good.get(name).and_then(|v| v.get(c)) {
            Some(Some(d)) => *d,
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, NoIntactCopy)),
        };
        volumes::DirVolumes::new(&self.dirs[dir]).read_at(name, offset, buf)
    }
}

/// Why [`Merged`] cannot read a chunk (typed inside the `io::Error` the volume reader takes, as
/// an erased unit): every copy of it failed its digest or is missing.
#[derive(Debug, thiserror::Error)]
#[error("no intact copy of this chunk")]
struct NoIntactCopy;

fn all_volumes(m: &Manifest) -> impl Iterator<Item = (bool, &Volume)> {
    m.volumes.iter().map(|v| (false, v)).chain(
        m.parity
            .iter()
            .flat_map(|p| p.volumes.iter().map(|v| (true, v))),
    )
}

/// The map of what repair finds before it starts: for each chunk of each volume, intact here,
/// intact in another copy (`good` names the directory), or else rebuilt from parity unless its
/// stripe is `beyond` repair (damaged, in a bundle without parity).
fn damage_map(
    m: &Manifest,
    ur: Option<&UnitReader<'_>>,
    good: &BTreeMap<String, Vec<Option<usize>>>,
    beyond: &HashSet<u64>,
) -> DamageMap {
    let mut map = DamageMap::intact(m);
    for (is_parity, v) in all_volumes(m) {
        let Some(row) = map.row_mut(&v.name) else {
            continue;
        };
        for (c, found) in good[&v.name].iter().enumerate() {
            row.units[c] = match (found, ur) {
                (Some(0), _) => UnitState::Intact,
                (Some(_), _) => UnitState::FromCopy,
                (None, None) => UnitState::Damaged,
                (None, Some(ur)) if beyond.contains(&shard_of(m, ur, is_parity, &v.name, c).0) => {
                    UnitState::BeyondRepair
                }
                (None, Some(_)) => UnitState::Rebuildable,
            };
        }
    }
    map
}

/// The stripe and shard of chunk `c` of the data or parity volume `name`.
fn shard_of(
    m: &Manifest,
    ur: &UnitReader<'_>,
    is_parity: bool,
    name: &str,
    c: usize,
) -> (u64, Shard) {
    let g = ur.g;
    if is_parity {
        let j = m
            .parity
            .as_ref()
            .and_then(|p| p.volumes.iter().position(|v| v.name == name))
            .expect("a listed parity volume");
        let n = ur.layout.recovery_of_chunk(j, c);
        (
            n / u64::from(g.recovery),
            Shard::Recovery((n % u64::from(g.recovery)) as u32),
        )
    } else {
        let i = m
            .volumes
            .iter()
            .position(|v| v.name == name)
            .expect("a listed volume");
        let (k, d) = g.locate(ur.layout.unit_of_chunk(i, c));
        (k, Shard::Data(d))
    }
}

/// SHA-256 of `[start, start + len)` of volume `name` in `dir`, or `None` if unreadable.
fn hash_chunk(dir: &Path, name: &str, start: u64, len: u64) -> Option<String> {
    let src = volumes::DirVolumes::new(dir);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(buf.len() as u64) as usize;
        src.read_at(name, start + pos, &mut buf[..n]).ok()?;
        h.update(&buf[..n]);
        pos += n as u64;
    }
    Some(hex::encode(h.finalize()))
}

/// Repairs the opened bundle (see the module documentation). `show_damage` hears of a damaged
/// bundle's map, found before the work on it starts, for the operator to see where the damage
/// is while the work goes on (the progress trait, on the ground floor, knows no bundle).
pub fn repair(
    opened: &BundleDir,
    opts: &RepairOptions,
    trust: &crate::trust::Policy,
    progress: &dyn Progress,
    show_damage: &dyn Fn(&DamageMap),
) -> Result<Repaired> {
    let m = &opened.manifest;
    let mut report = Repaired {
        bundle: opts
            .out
            .clone()
            .unwrap_or_else(|| opened.dir().to_path_buf()),
        ..Default::default()
    };
    let bundle_fd = prepare_target(opened, opts, &mut report)?;
    let dirs = usable_copies(opened, opts, trust, &mut report);

    // Which volumes are damaged, and which of their chunks.
    let bad: Vec<VolumeProblem> = volumes::check_volumes(opened, progress)
        .into_iter()
        .chain(volumes::check_parity_volumes(opened, progress))
        .collect();
    let bad_names: HashSet<&str> = bad.iter().map(|p| p.volume.as_str()).collect();
    let good = intact_chunks(m, &dirs, &bad_names);

    // The chunks no copy has: rebuilt from parity where their stripe allows.
    let merged = Merged {
        dirs: &dirs,
        chunk_size: m.chunk_size,
        good: &good,
    };
    let ur = UnitReader::new(m, &merged);
    let plan = Plan::new(m, ur.as_ref(), &good, &bad_names);
    let beyond = plan.beyond_repair(ur.as_ref());
    if !bad.is_empty() {
        show_damage(&damage_map(m, ur.as_ref(), &good, &beyond));
    }
    plan.refuse_unrepairable(m, ur.as_ref(), &beyond)?;
    if bad.is_empty() && opts.out.is_none() {
        return Ok(report);
    }

    let work = work_dir(opened, opts, bundle_fd.as_ref())?;
    let writer = Writer {
        m,
        dirs: &dirs,
        ur: ur.as_ref(),
        plan: &plan,
    };
    for (is_parity, v) in all_volumes(m) {
        let damaged = bad_names.contains(v.name.as_str());
        if !damaged && opts.out.is_none() {
            continue;
        }
        progress.item(&v.name);
        // On failure the work directory, with this volume in it, is removed when `work` drops.
        writer.write_volume(&work, is_parity, v, &mut report, progress)?;
        if let Some(bundle_fd) = &bundle_fd {
            replace_volume(&work, bundle_fd, opened.dir(), &v.name)?;
        }
        if damaged {
            report.volumes.push(v.name.clone());
        }
    }
    if let Some(out) = &opts.out {
        finish_output(work, opened, out)?;
    }
    // In place, `work` (now holding only its lock) is removed here.
    Ok(report)
}

/// Checks the output directory (none yet, not inside the bundle); in place, opens the bundle
/// directory once, refusing a link (every later step in it goes through this handle), and
/// removes the work directories of interrupted repairs.
fn prepare_target(
    opened: &BundleDir,
    opts: &RepairOptions,
    report: &mut Repaired,
) -> Result<Option<OwnedFd>> {
    if let Some(out) = &opts.out {
        refuse_output_inside(out, opened.dir())?;
        if std::fs::symlink_metadata(out).is_ok() {
            return Err(Error::Usage(format!(
                "{} already exists; choose a new directory for the repaired bundle",
                out.display()
            )));
        }
        return Ok(None);
    }
    let fd = open_bundle_dir(opened.dir())?;
    clean_stale(&fd, opened.dir(), report);
    Ok(Some(fd))
}

/// The bundle's directory, then each other copy that opens with `trust` and has the same
/// manifest; the others are reported as skipped, with why.
fn usable_copies(
    opened: &BundleDir,
    opts: &RepairOptions,
    trust: &crate::trust::Policy,
    report: &mut Repaired,
) -> Vec<PathBuf> {
    let mut dirs = vec![opened.dir().to_path_buf()];
    for copy in &opts.from {
        match open::open_with(copy, trust) {
            Ok(o) if o.manifest_sha256 == opened.manifest_sha256 => dirs.push(copy.clone()),
            Ok(_) => report.copies_skipped.push((
                copy.clone(),
                "is a copy of another bundle (its manifest differs)".into(),
            )),
            Err(e) => report
                .copies_skipped
                .push((copy.clone(), format!("cannot be used: {e}"))),
        }
    }
    dirs
}

/// For each chunk of each volume, the first directory of `dirs` holding it intact (the bundle
/// itself for a volume not in `bad`; for a damaged one, the first whose chunk hashes to its
/// signed digest), `None` where none does.
fn intact_chunks(
    m: &Manifest,
    dirs: &[PathBuf],
    bad: &HashSet<&str>,
) -> BTreeMap<String, Vec<Option<usize>>> {
    let cs = m.chunk_size;
    let mut good = BTreeMap::new();
    for (_, v) in all_volumes(m) {
        let damaged = bad.contains(v.name.as_str());
        let mut per_chunk = Vec::with_capacity(v.chunks.len());
        for (c, want) in v.chunks.iter().enumerate() {
            let start = c as u64 * cs;
            let len = (v.size - start).min(cs);
            let found = if !damaged {
                Some(0)
            } else {
                (0..dirs.len()).find(|&d| {
                    hash_chunk(&dirs[d], &v.name, start, len).as_deref() == Some(want.as_str())
                })
            };
            per_chunk.push(found);
        }
        good.insert(v.name.clone(), per_chunk);
    }
    good
}

/// Where each chunk to write comes from, decided before anything is written.
struct Plan {
    /// The chunks of damaged volumes, and chunks found only in another copy, by source.
    sources: BTreeMap<(String, usize), Source>,
    /// The shards of each stripe that are rebuilt from parity.
    stripes: BTreeMap<u64, Vec<Shard>>,
    /// Volumes with a chunk no directory holds intact, in a bundle without parity.
    missing: Vec<String>,
}

impl Plan {
    /// Each chunk's source: the directory `good` names, else parity (with `ur`), else none.
    fn new(
        m: &Manifest,
        ur: Option<&UnitReader<'_>>,
        good: &BTreeMap<String, Vec<Option<usize>>>,
        bad: &HashSet<&str>,
    ) -> Plan {
        let mut plan = Plan {
            sources: BTreeMap::new(),
            stripes: BTreeMap::new(),
            missing: Vec::new(),
        };
        for (is_parity, v) in all_volumes(m) {
            for (c, found) in good[&v.name].iter().enumerate() {
                if let Some(d) = found {
                    if *d != 0 || bad.contains(v.name.as_str()) {
                        plan.sources.insert((v.name.clone(), c), Source::Dir(*d));
                    }
                    continue;
                }
                let Some(ur) = ur else {
                    plan.missing.push(v.name.clone());
                    continue;
                };
                let (stripe, shard) = shard_of(m, ur, is_parity, &v.name, c);
                plan.stripes.entry(stripe).or_default().push(shard);
                plan.sources.insert((v.name.clone(), c), Source::Parity);
            }
        }
        plan
    }

    /// The stripes with more shards to rebuild than the parity has recovery units.
    fn beyond_repair(&self, ur: Option<&UnitReader<'_>>) -> HashSet<u64> {
        match ur {
            Some(ur) => self
                .stripes
                .iter()
                .filter(|(_, e)| e.len() > ur.g.recovery as usize)
                .map(|(k, _)| *k)
                .collect(),
            None => Default::default(),
        }
    }

    /// Fails, naming the volumes to copy again, when a chunk has no source: none intact
    /// anywhere and no parity, or its stripe `beyond` repair. Nothing has been written yet.
    fn refuse_unrepairable(
        &self,
        m: &Manifest,
        ur: Option<&UnitReader<'_>>,
        beyond: &HashSet<u64>,
    ) -> Result<()> {
        let mut missing = self.missing.clone();
        if let Some(ur) = ur {
            for ((name, c), src) in &self.sources {
                if *src != Source::Parity {
                    continue;
                }
                let (is_parity, _) = all_volumes(m)
                    .find(|(_, v)| &v.name == name)
                    .expect("listed");
                let (stripe, _) = shard_of(m, ur, is_parity, name, *c);
                if beyond.contains(&stripe) {
                    missing.push(name.clone());
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort();
        missing.dedup();
        Err(Error::BadVolumes {
            summary: format!(
                "cannot repair the bundle: {} hold(s) damage that no copy has intact and parity cannot rebuild{}; nothing was changed",
                missing.join(", "),
                if m.parity.is_none() {
                    " (the bundle has no parity)"
                } else {
                    ""
                }
            ),
            copy_again: missing,
            remove: vec![],
        })
    }
}

/// The private work directory the repaired volumes are written into: beside OUT, or inside
/// the bundle through its handle (refusing read-only media before any work, with the way out).
fn work_dir(
    opened: &BundleDir,
    opts: &RepairOptions,
    bundle_fd: Option<&OwnedFd>,
) -> Result<Staging> {
    match (&opts.out, bundle_fd) {
        (Some(out), _) => out_staging(out),
        (None, Some(fd)) => {
            let fd = fd.try_clone().map_err(|e| Error::io(opened.dir(), e))?;
            let name = format!("{WORK_PREFIX}{}", staging::random_hex());
            Staging::create_named_at(fd, opened.dir(), &name).map_err(|e| match e {
                Error::Io { source, .. } => read_only(opened.dir(), source),
                e => e,
            })
        }
        (None, None) => unreachable!("in place always has the bundle's handle"),
    }
}

/// One chunk of a volume: its index, offset and length.
#[derive(Clone, Copy)]
struct Chunk {
    index: usize,
    start: u64,
    len: u64,
}

/// A volume being written in the work directory: the file and its path (for messages).
struct Target<'a> {
    file: &'a std::fs::File,
    path: &'a Path,
}

/// Writes repaired volumes by the [`Plan`], each chunk checked against its signed digest.
struct Writer<'a> {
    m: &'a Manifest,
    dirs: &'a [PathBuf],
    ur: Option<&'a UnitReader<'a>>,
    plan: &'a Plan,
}

impl Writer<'_> {
    /// Writes volume `v` whole into `work`, created exclusively, and syncs it.
    fn write_volume(
        &self,
        work: &Staging,
        is_parity: bool,
        v: &Volume,
        report: &mut Repaired,
        progress: &dyn Progress,
    ) -> Result<()> {
        let cs = self.m.chunk_size;
        let work_path = work.path();
        let tmp = work_path.join(&v.name);
        let f = crate::durable::create_new_at(work.fd(), &work_path, &v.name, VOLUME_MODE)?;
        let out = Target {
            file: &f,
            path: &tmp,
        };
        for (index, want) in v.chunks.iter().enumerate() {
            let start = index as u64 * cs;
            let chunk = Chunk {
                index,
                start,
                len: (v.size - start).min(cs),
            };
            let mut h = Sha256::new();
            match self.plan.sources.get(&(v.name.clone(), index)) {
                Some(Source::Parity) => {
                    self.rebuild_chunk(is_parity, &v.name, chunk, &out, &mut h)?;
                    report.chunks_from_parity += 1;
                }
                found => {
                    let d = match found {
                        Some(Source::Dir(d)) => *d,
                        _ => 0,
                    };
                    if d != 0 {
                        report.chunks_from_copies += 1;
                    }
                    self.copy_chunk(d, &v.name, chunk, &out, &mut h)?;
                }
            }
            if hex::encode(h.finalize()) != *want {
                return Err(Error::BadVolumes {
                    summary: format!(
                        "chunk {index} of {} does not match its signed digest after repair (the media changed while being read, or the parity volumes are not this bundle's); nothing was changed",
                        v.name
                    ),
                    copy_again: vec![v.name.clone()],
                    remove: vec![],
                });
            }
            progress.advance(chunk.len);
        }
        f.set_len(v.size).map_err(|e| Error::io(&tmp, e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, e))?;
        Ok(())
    }

    /// Rebuilds `chunk` of volume `name` from its stripe's surviving units, slice by slice,
    /// writing and hashing its bytes.
    fn rebuild_chunk(
        &self,
        is_parity: bool,
        name: &str,
        chunk: Chunk,
        out: &Target<'_>,
        h: &mut Sha256,
    ) -> Result<()> {
        let ur = self.ur.expect("parity rebuild needs parity");
        let g = ur.g;
        let (stripe, shard) = shard_of(self.m, ur, is_parity, name, chunk.index);
        let erased = &self.plan.stripes[&stripe];
        let size = g.slice_size() as u64;
        let (start, len) = (chunk.start, chunk.len);
        let mut off = 0;
        while off < len {
            let end = (off + size).min(g.unit_size);
            let mut io_err: Option<io::Error> = None;
            ur.rebuild(stripe, erased, off, end, &mut |s, o, bytes| {
                if s == shard && o < len {
                    let real = &bytes[..(len - o).min(bytes.len() as u64) as usize];
                    h.update(real);
                    if let Err(e) = out.file.write_all_at(real, start + o) {
                        io_err = Some(e);
                    }
                }
                Ok(())
            })
            .map_err(|e| Error::io(out.path, e.into()))?;
            if let Some(e) = io_err {
                return Err(Error::io(out.path, e));
            }
            off = end;
        }
        Ok(())
    }

    /// Copies `chunk` of volume `name` from directory `d` of the list, hashing its bytes.
    fn copy_chunk(
        &self,
        d: usize,
        name: &str,
        chunk: Chunk,
        out: &Target<'_>,
        h: &mut Sha256,
    ) -> Result<()> {
        let src = volumes::DirVolumes::new(&self.dirs[d]);
        let mut buf = vec![0u8; (1 << 20).min(chunk.len as usize)];
        let mut pos = 0;
        while pos < chunk.len {
            let n = (chunk.len - pos).min(buf.len() as u64) as usize;
            src.read_at(name, chunk.start + pos, &mut buf[..n])
                .map_err(|e| Error::io(self.dirs[d].join(name), e))?;
            h.update(&buf[..n]);
            out.file
                .write_all_at(&buf[..n], chunk.start + pos)
                .map_err(|e| Error::io(out.path, e))?;
            pos += n as u64;
        }
        Ok(())
    }
}

/// Renames the repaired volume `name` from `work` over the damaged one in the bundle, through
/// the bundle's handle, and syncs the bundle directory.
fn replace_volume(work: &Staging, bundle_fd: &OwnedFd, dir: &Path, name: &str) -> Result<()> {
    // rename(2) replaces the name itself: a link there is replaced, never followed.
    {
        let _commit = staging::commit_guard();
        fsio::rename_at(work.fd(), name, bundle_fd, name, RenameFlags::empty())
            .map_err(|e| Error::io(dir.join(name), e.into()))?;
    }
    crate::durable::sync_dir_fd(bundle_fd, dir)
}

/// Completes the bundle written to `work` (manifest, signatures, trust roots, mode 0755),
/// syncs it and renames it to `out`.
fn finish_output(work: Staging, opened: &BundleDir, out: &Path) -> Result<()> {
    work.write_file(manifest::MANIFEST_NAME, &opened.manifest_bytes, 0o644)?;
    work.write_file(
        manifest::SIGNATURE_NAME,
        opened.signature_text.as_bytes(),
        0o644,
    )?;
    for (name, text) in &opened.trust.cosignatures {
        work.write_file(name, text.as_bytes(), 0o644)?;
    }
    for r in &opened.trust.roots {
        let name = crate::trust::update::file_name(r.version);
        work.write_file(&name, &r.bytes, 0o644)?;
    }
    rustix::fs::fchmod(work.fd(), rustix::fs::Mode::from_raw_mode(0o755))
        .map_err(|e| Error::io(out, e.into()))?;
    work.sync()?;
    work.into_place(out)
}

/// Mode of a repaired volume, as pack writes them.
const VOLUME_MODE: u32 = 0o644;

/// Opens the bundle directory for an in-place repair: a directory, not a link to one.
fn open_bundle_dir(dir: &Path) -> Result<OwnedFd> {
    crate::durable::open_dir(dir).map_err(|e| {
        // `O_NOFOLLOW | O_DIRECTORY` on a link fails with ELOOP or ENOTDIR.
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            Error::Usage(format!(
                "{} is a symbolic link: repair in place writes only into the bundle directory itself; give its real path, or -o NEW_BUNDLE",
                dir.display()
            ))
        } else {
            e
        }
    })
}

/// Removes the work directories interrupted repairs left in the bundle directory (see
/// [`staging::remove_if_stale`]: only when their lock is free and they are this user's).
/// Failures (read-only media) are not errors: what cannot be removed is reported.
fn clean_stale(bundle_fd: &OwnedFd, dir: &Path, report: &mut Repaired) {
    if let Ok(swept) = staging::sweep(bundle_fd, dir, WORK_PREFIX) {
        report.cleaned_stale.extend(swept.removed);
        report.stale_skipped.extend(swept.skipped);
    }
}

/// The work directory `OUT.partial` for `-o OUT`; one an interrupted repair left (its lock
/// free, this user's) is removed first.
fn out_staging(out: &Path) -> Result<Staging> {
    let parent = fsio::parent_dir(out);
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::Usage(format!("{}: not a usable name", out.display())))?;
    let partial = format!("{name}.partial");
    match Staging::create_named(&parent, &partial) {
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
            let parent_fd = crate::durable::open_dir(&parent)?;
            let path = parent.join(&partial);
            match staging::remove_if_stale(&parent_fd, &partial, &path, false) {
                Ok(true) => Staging::create_named(&parent, &partial),
                _ => Err(Error::Usage(format!(
                    "{} exists and is not the work directory of an interrupted airlock repair (another repair may be running); remove it or choose another name",
                    path.display()
                ))),
            }
        }
        other => other,
    }
}

/// Refuses `-o OUT` inside the bundle (or equal to it), before anything is created: compared
/// by device and inode, so links and `..` cannot hide it.
fn refuse_output_inside(out: &Path, bundle: &Path) -> Result<()> {
    let b = std::fs::metadata(bundle).map_err(|e| Error::io(bundle, e))?;
    // The nearest part of OUT that exists, resolved; then each directory above it.
    let mut existing = out;
    let resolved = loop {
        if let Ok(p) = std::fs::canonicalize(existing) {
            break p;
        }
        match existing.parent() {
            Some(p) if !p.as_os_str().is_empty() => existing = p,
            _ => break std::env::current_dir().map_err(|e| Error::io(".", e))?,
        }
    };
    for dir in resolved.ancestors() {
        if let Ok(d) = std::fs::metadata(dir)
            && d.dev() == b.dev()
            && d.ino() == b.ino()
        {
            return Err(Error::Usage(format!(
                "-o {} is {} the bundle being repaired ({}); choose a new directory outside it",
                out.display(),
                if dir == resolved && existing == out {
                    "the same directory as"
                } else {
                    "inside"
                },
                bundle.display()
            )));
        }
    }
    Ok(())
}

fn read_only(dir: &Path, e: io::Error) -> Error {
    Error::io(dir, io::Error::new(e.kind(), NotInPlace(e)))
}

/// The bundle's directory cannot be written, so it cannot be repaired in place (typed inside
/// the `io::Error` of the error naming it, with the system's error's kind and as its source).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0}: the bundle cannot be repaired in place (read-only media?); pass -o NEW_BUNDLE to write a repaired copy elsewhere"
)]
struct NotInPlace(#[source] io::Error);
