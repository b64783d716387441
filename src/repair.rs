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

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::RenameFlags;

use sha2::{Digest, Sha256};

use crate::bundle::damage::{DamageMap, UnitState};
use crate::bundle::open::{self, Opened};
use crate::bundle::volumes::{self, UnitReader, VolumeProblem, VolumeSource};
use crate::error::{Error, Result};
use crate::fsio;
use crate::manifest::{self, Manifest, Volume};
use crate::parity::Shard;
use crate::progress::Progress;
use crate::staging::{self, Staging};

/// Prefix of the work directory an in-place repair makes in the bundle directory.
pub const WORK_PREFIX: &str = ".airlock-staging-repair-";

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
        Err(io::Error::other("merged copies are read by chunk only"))
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dirs[0].join(name)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let c = (offset / self.chunk_size) as usize;
        let dir = match self.good.get(name).and_then(|v| v.get(c)) {
            Some(Some(d)) => *d,
            _ => return Err(io::Error::other("no intact copy of this chunk")),
        };
        volumes::DirVolumes::new(&self.dirs[dir]).read_at(name, offset, buf)
    }
}

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
    beyond: &std::collections::HashSet<u64>,
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

/// Repairs the opened bundle (see the module documentation).
pub fn repair(
    opened: &Opened,
    opts: &RepairOptions,
    trust: &crate::trust::Policy,
    progress: &dyn Progress,
) -> Result<Repaired> {
    let m = &opened.manifest;
    let cs = m.chunk_size;
    let mut report = Repaired {
        bundle: opts
            .out
            .clone()
            .unwrap_or_else(|| opened.dir().to_path_buf()),
        ..Default::default()
    };
    if let Some(out) = &opts.out {
        refuse_output_inside(out, opened.dir())?;
        if std::fs::symlink_metadata(out).is_ok() {
            return Err(Error::Usage(format!(
                "{} already exists; choose a new directory for the repaired bundle",
                out.display()
            )));
        }
    }
    // In place, the bundle directory is opened once, refusing a link; every later step in it
    // goes through this handle.
    let bundle_fd = match &opts.out {
        Some(_) => None,
        None => {
            let fd = open_bundle_dir(opened.dir())?;
            clean_stale(&fd, opened.dir(), &mut report);
            Some(fd)
        }
    };
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

    // Which volumes are damaged, and which of their chunks.
    let bad: Vec<VolumeProblem> = volumes::check_volumes(opened, progress)
        .into_iter()
        .chain(volumes::check_parity_volumes(opened, progress))
        .collect();
    let bad_names: std::collections::HashSet<&str> =
        bad.iter().map(|p| p.volume.as_str()).collect();
    let mut good: BTreeMap<String, Vec<Option<usize>>> = BTreeMap::new();
    let mut sources: BTreeMap<(String, usize), Source> = BTreeMap::new();
    for (_, v) in all_volumes(m) {
        let damaged = bad_names.contains(v.name.as_str());
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

    // The chunks no copy has: rebuilt from parity where their stripe allows.
    let merged = Merged {
        dirs: &dirs,
        chunk_size: cs,
        good: &good,
    };
    let ur = UnitReader::new(m, &merged);
    let mut missing: Vec<String> = Vec::new();
    let mut stripes: BTreeMap<u64, Vec<Shard>> = BTreeMap::new();
    for (is_parity, v) in all_volumes(m) {
        for (c, found) in good[&v.name].iter().enumerate() {
            if let Some(d) = found {
                if *d != 0 || bad_names.contains(v.name.as_str()) {
                    sources.insert((v.name.clone(), c), Source::Dir(*d));
                }
                continue;
            }
            let Some(ur) = &ur else {
                missing.push(v.name.clone());
                continue;
            };
            let (stripe, shard) = shard_of(m, ur, is_parity, &v.name, c);
            stripes.entry(stripe).or_default().push(shard);
            sources.insert((v.name.clone(), c), Source::Parity);
        }
    }
    let beyond: std::collections::HashSet<u64> = match &ur {
        Some(ur) => stripes
            .iter()
            .filter(|(_, e)| e.len() > ur.g.recovery as usize)
            .map(|(k, _)| *k)
            .collect(),
        None => Default::default(),
    };
    if !bad.is_empty() {
        progress.damage(&damage_map(m, ur.as_ref(), &good, &beyond));
    }
    if let Some(ur) = &ur {
        for ((name, c), src) in &sources {
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
    missing.dedup();
    if !missing.is_empty() {
        let mut names: Vec<String> = missing;
        names.sort();
        names.dedup();
        return Err(Error::BadVolumes {
            summary: format!(
                "cannot repair the bundle: {} hold(s) damage that no copy has intact and parity cannot rebuild{}; nothing was changed",
                names.join(", "),
                if m.parity.is_none() {
                    " (the bundle has no parity)"
                } else {
                    ""
                }
            ),
            copy_again: names,
            remove: vec![],
        });
    }
    if bad.is_empty() && opts.out.is_none() {
        return Ok(report);
    }

    // Write, into a private work directory: beside OUT, or inside the bundle.
    let work = match (&opts.out, &bundle_fd) {
        (Some(out), _) => out_staging(out)?,
        (None, Some(fd)) => {
            let fd = fd.try_clone().map_err(|e| Error::io(opened.dir(), e))?;
            let name = format!("{WORK_PREFIX}{}", staging::random_hex());
            // Refuses read-only media before any work, with the way out.
            Staging::create_named_at(fd, opened.dir(), &name).map_err(|e| match e {
                Error::Io { source, .. } => read_only(opened.dir(), source),
                e => e,
            })?
        }
        (None, None) => unreachable!("in place always has the bundle's handle"),
    };
    let work_path = work.path();
    let rebuilt = |name: &str, c: usize| -> bool {
        matches!(sources.get(&(name.to_string(), c)), Some(Source::Parity))
    };
    for (is_parity, v) in all_volumes(m) {
        let damaged = bad_names.contains(v.name.as_str());
        if !damaged && opts.out.is_none() {
            continue;
        }
        progress.item(&v.name);
        let tmp = work_path.join(&v.name);
        let f = crate::durable::create_new_at(work.fd(), &work_path, &v.name, VOLUME_MODE)?;
        let result = (|| -> Result<()> {
            for (c, want) in v.chunks.iter().enumerate() {
                let start = c as u64 * cs;
                let len = (v.size - start).min(cs);
                let mut h = Sha256::new();
                if rebuilt(&v.name, c) {
                    let ur = ur.as_ref().expect("parity rebuild needs parity");
                    let g = ur.g;
                    let (stripe, shard) = shard_of(m, ur, is_parity, &v.name, c);
                    let erased = &stripes[&stripe];
                    let size = g.slice_size() as u64;
                    let mut off = 0;
                    while off < len {
                        let end = (off + size).min(g.unit_size);
                        let mut io_err: Option<io::Error> = None;
                        ur.rebuild(stripe, erased, off, end, &mut |s, o, bytes| {
                            if s == shard && o < len {
                                let real = &bytes[..(len - o).min(bytes.len() as u64) as usize];
                                h.update(real);
                                if let Err(e) = f.write_all_at(real, start + o) {
                                    io_err = Some(e);
                                }
                            }
                            Ok(())
                        })
                        .map_err(|e| Error::io(&tmp, io::Error::other(e.to_string())))?;
                        if let Some(e) = io_err {
                            return Err(Error::io(&tmp, e));
                        }
                        off = end;
                    }
                    report.chunks_from_parity += 1;
                } else {
                    let d = match sources.get(&(v.name.clone(), c)) {
                        Some(Source::Dir(d)) => *d,
                        _ => 0,
                    };
                    if d != 0 {
                        report.chunks_from_copies += 1;
                    }
                    let src = volumes::DirVolumes::new(&dirs[d]);
                    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
                    let mut pos = 0;
                    while pos < len {
                        let n = (len - pos).min(buf.len() as u64) as usize;
                        src.read_at(&v.name, start + pos, &mut buf[..n])
                            .map_err(|e| Error::io(dirs[d].join(&v.name), e))?;
                        h.update(&buf[..n]);
                        f.write_all_at(&buf[..n], start + pos)
                            .map_err(|e| Error::io(&tmp, e))?;
                        pos += n as u64;
                    }
                }
                if hex::encode(h.finalize()) != *want {
                    return Err(Error::BadVolumes {
                        summary: format!(
                            "chunk {c} of {} does not match its signed digest after repair (the media changed while being read, or the parity volumes are not this bundle's); nothing was changed",
                            v.name
                        ),
                        copy_again: vec![v.name.clone()],
                        remove: vec![],
                    });
                }
                progress.advance(len);
            }
            f.set_len(v.size).map_err(|e| Error::io(&tmp, e))?;
            f.sync_all().map_err(|e| Error::io(&tmp, e))?;
            Ok(())
        })();
        // On failure the work directory, with this volume in it, is removed when `work` drops.
        result?;
        drop(f);
        if let Some(bundle_fd) = &bundle_fd {
            // rename(2) replaces the name itself: a link there is replaced, never followed.
            {
                let _commit = staging::commit_guard();
                fsio::rename_at(work.fd(), &v.name, bundle_fd, &v.name, RenameFlags::empty())
                    .map_err(|e| Error::io(opened.dir().join(&v.name), e))?;
            }
            crate::durable::sync_dir_fd(bundle_fd, opened.dir())?;
        }
        if damaged {
            report.volumes.push(v.name.clone());
        }
    }
    if let Some(out) = &opts.out {
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
        work.into_place(out)?;
    }
    // In place, `work` (now holding only its lock) is removed here.
    Ok(report)
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
    let Ok(entries) = fsio::dir_entries(bundle_fd) else {
        return;
    };
    for (name, kind) in entries {
        let Some(name) = name.to_str() else { continue };
        let birth = name.starts_with(staging::BIRTH_PREFIX);
        if kind != rustix::fs::FileType::Directory || !(birth || name.starts_with(WORK_PREFIX)) {
            continue;
        }
        let path = dir.join(name);
        match staging::remove_if_stale(bundle_fd, name, &path, birth) {
            Ok(true) => report.cleaned_stale.push(path),
            Ok(false) => {}
            Err(why) => report.stale_skipped.push((path, why)),
        }
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
    Error::io(
        dir,
        io::Error::new(
            e.kind(),
            format!(
                "{e}: the bundle cannot be repaired in place (read-only media?); pass -o NEW_BUNDLE to write a repaired copy elsewhere"
            ),
        ),
    )
}
