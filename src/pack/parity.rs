//! The parity pass of `pack --parity` (FORMAT.md section 17): once the data volumes are written
//! and before the manifest is signed, read them back stripe by stripe, in slices, and write the
//! Reed-Solomon recovery units as `parity.NNN` volumes beside them, with a digest per unit.
//!
//! Memory is `(D + R) * slice` per stripe in flight (one per core), whatever the bundle size.
//! Every data unit read back is checked, as it is encoded, against the XXH3-64 checksum the
//! writer took of the same chunk when it wrote it, so the parity is over exactly the bytes
//! written and signed: a disk that returns other bytes than were written fails the pack
//! instead of making useless parity. (That check was a third SHA-256 pass over the data, a
//! third of the cost of `pack --parity`; XXH3 is some twenty times cheaper and catches the
//! same accidents. Nothing trusts it beyond this pass: a rebuilt unit is checked against its
//! signed SHA-256.)

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rayon::prelude::*;

use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

use crate::error::{Error, Result};
use crate::fsio;
use crate::manifest::units::UnitLayout;
use crate::manifest::{self, Manifest, PARITY_ALGORITHM, Parity, Volume};
use crate::parity::{self, Ask, DataShape, Geometry, Survives};
use crate::progress::Progress;

/// How many recovery units go into each parity volume: as many whole units as fit in the
/// volume size (at least one), so parity volumes are no larger than data volumes.
pub(crate) fn units_per_parity_volume(volume_size: u64, chunk_size: u64) -> u64 {
    (volume_size / chunk_size).max(1)
}

/// Parses `--parity`: a percentage such as `10%` or `12.5%` (the `%` may be left out), more
/// than 0 and at most 100; or `Nvol` (`1vol`, `2vol`): the least parity that rebuilds any `N`
/// lost data volumes.
pub fn parse_ask(s: &str) -> std::result::Result<Ask, AskError> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    if let Some(n) = lower
        .strip_suffix("vols")
        .or_else(|| lower.strip_suffix("vol"))
    {
        return match n.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Ask::Volumes(n)),
            _ => Err(AskError::NotVolumes(s.to_string())),
        };
    }
    let t = t.strip_suffix('%').unwrap_or(t);
    match t.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 && p.is_finite() => Ok(Ask::Percent(p)),
        _ => Err(AskError::Neither(s.to_string())),
    }
}

/// Why a `--parity` value was refused (the command prefixes `--parity`).
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// `Nvol` with N not a whole number of at least 1.
    #[error("{0:?} is not a number of volumes of at least 1 (e.g. 1vol)")]
    NotVolumes(String),
    /// Neither a percentage in (0, 100] nor `Nvol`.
    #[error(
        "{0:?} is neither a percentage between 0 and 100 (e.g. 10%) nor a number of volumes (e.g. 1vol)"
    )]
    Neither(String),
}

/// Why the parity volumes could not be written, carried in an `io::Error`: a chunk read back
/// differently (kind `InvalidData`: the medium gave other bytes), or a data volume's read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ParityWriteError {
    /// A data chunk read back to compute parity hashes differently from when it was written.
    #[error("chunk {0} read back for parity differs from what was written")]
    ReadBackDiffers(usize),
    /// Reading a data volume failed (carried with the system's error's kind through the
    /// codec, whose read callback passes only `io::Error`).
    #[error("{name}: {source}")]
    Read {
        /// The data volume's name.
        name: String,
        /// The system's error.
        source: io::Error,
    },
}

/// The chunk size of a bundle: the one given (`--chunk-size`, for tests), else with parity the
/// parity unit for volumes of `volume_size` and a payload of about `payload` bytes
/// ([`parity::unit_size_for`], FORMAT.md 17.4), else 64 MiB.
pub fn chunk_size(given: Option<u64>, with_parity: bool, volume_size: u64, payload: u64) -> u64 {
    match given {
        Some(c) => c,
        None if with_parity => parity::unit_size_for(volume_size, payload),
        None => manifest::DEFAULT_CHUNK_SIZE,
    }
}

/// The data volumes as parity sees them (their units and bytes), for `chunk_size`.
fn shape_of(data: &[Volume], chunk_size: u64) -> (Vec<u64>, u64) {
    (
        data.iter().map(|v| v.size.div_ceil(chunk_size)).collect(),
        data.iter().map(|v| v.size).sum(),
    )
}

/// The geometry and parity volume names and sizes for `data` and what was asked (digests
/// empty).
pub fn plan(
    data: &[Volume],
    chunk_size: u64,
    volume_size: u64,
    ask: Ask,
) -> std::result::Result<(Geometry, Vec<Volume>), parity::ParityError> {
    let (volume_units, bytes) = shape_of(data, chunk_size);
    let shape = DataShape {
        unit_size: chunk_size,
        volume_units: &volume_units,
        bytes,
    };
    let g = Geometry::choose_for(&shape, ask)?;
    let total = g.recovery_units();
    let per = units_per_parity_volume(volume_size, chunk_size);
    let count = total.div_ceil(per) as usize;
    let volumes = (0..count)
        .map(|j| {
            let n = per.min(total - j as u64 * per);
            Volume {
                name: manifest::parity_volume_name(j, count),
                size: n * chunk_size,
                sha256: None,
                chunks: Vec::new(),
            }
        })
        .collect();
    Ok((g, volumes))
}

/// An upper bound of the `parity` object for the manifest size estimate: the same shape with
/// placeholder digests.
pub fn estimate(data: &[Volume], chunk_size: u64, volume_size: u64, ask: Ask) -> Option<Parity> {
    let (g, mut volumes) = plan(data, chunk_size, volume_size, ask).ok()?;
    for v in &mut volumes {
        v.chunks = vec!["0".repeat(64); (v.size / chunk_size) as usize];
    }
    Some(Parity {
        algorithm: PARITY_ALGORITHM.into(),
        data_units: g.data,
        recovery_units: g.recovery,
        stripes: g.stripes(),
        volumes,
    })
}

/// What a bundle's parity buys, for the operator (`pack` prints it and `--json` carries it).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Advice {
    /// Parity bytes as a percentage of the data bytes.
    pub percent: f64,
    /// The parity unit (the bundle's chunk size).
    pub unit_size: u64,
    /// What it rebuilds whatever the placement of the damage.
    pub survives: Survives,
    /// When it cannot rebuild one lost data volume of several: the parity `--parity 1vol`
    /// would write, in percent of the data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_volume_percent: Option<f64>,
    /// And the largest volume size with which the share asked would rebuild one lost volume,
    /// if one of at least 4096 bytes does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_size_for_one: Option<u64>,
}

/// What the parity of `m` buys, and (for a percentage asked) how to get one lost volume
/// rebuilt when it does not. `None` without parity.
pub fn advice(m: &Manifest, ask: Option<Ask>) -> Option<Advice> {
    let g = m.parity_geometry()?;
    let (volume_units, bytes) = shape_of(&m.volumes, m.chunk_size);
    let shape = DataShape {
        unit_size: m.chunk_size,
        volume_units: &volume_units,
        bytes,
    };
    let survives = g.survives(&volume_units);
    let mut advice = Advice {
        percent: shape.percent(&g),
        unit_size: m.chunk_size,
        survives,
        one_volume_percent: None,
        volume_size_for_one: None,
    };
    if survives.volumes == 0 && volume_units.len() > 1 {
        advice.one_volume_percent = Geometry::choose_for(&shape, Ask::Volumes(1))
            .ok()
            .map(|g| shape.percent(&g));
        if let Some(Ask::Percent(p)) = ask {
            advice.volume_size_for_one = volume_size_for_one(bytes, p);
        }
    }
    Some(advice)
}

/// The largest volume size (a whole number of MiB, or of 4 KiB below 1 MiB) with which `p`
/// percent of parity over `bytes` of data rebuilds any one lost volume, if one of at least
/// 4096 bytes does.
fn volume_size_for_one(bytes: u64, p: f64) -> Option<u64> {
    // A volume larger than the parity cannot be rebuilt from it.
    let mut size = (bytes as f64 * p / 100.0) as u64;
    while size >= 4096 {
        let round = if size >= 1 << 20 { 1 << 20 } else { 4096 };
        let s = size / round * round;
        let unit = parity::unit_size_for(s, bytes);
        let units: Vec<u64> = (0..bytes.div_ceil(s))
            .map(|i| (bytes - i * s).min(s).div_ceil(unit))
            .collect();
        let shape = DataShape {
            unit_size: unit,
            volume_units: &units,
            bytes,
        };
        if units.len() > 1
            && Geometry::choose_for(&shape, Ask::Percent(p))
                .is_ok_and(|g| g.survives(&units).volumes >= 1)
        {
            return Some(s);
        }
        size = size * 15 / 16;
    }
    None
}

/// Writes the parity volumes for the data volumes `data` (already in `dir`, with their chunk
/// digests, and `checks` their chunks' XXH3-64 as written) and returns the manifest's `parity`
/// object.
pub fn write_parity(
    dir: &Path,
    data: &[Volume],
    checks: &[Vec<u64>],
    chunk_size: u64,
    volume_size: u64,
    ask: Ask,
    progress: &dyn Progress,
) -> Result<Parity> {
    let (g, mut volumes) = plan(data, chunk_size, volume_size, ask)
        .map_err(|why| Error::Usage(format!("--parity {ask}: {why}")))?;
    let layout = UnitLayout::new(chunk_size, data, &volumes);
    // The work directory is opened once, not through a link; the volumes are read and created
    // through its handle, never through a link, the parity volumes exclusively.
    let dir_fd = crate::durable::open_dir(dir)?;
    let inputs: Vec<File> = data
        .iter()
        .map(|v| open_volume(&dir_fd, dir, &v.name))
        .collect::<Result<_>>()?;
    let outputs: Vec<File> = volumes
        .iter()
        .map(|v| {
            let f = crate::durable::create_new_at(&dir_fd, dir, &v.name, VOLUME_MODE)?;
            f.set_len(v.size)
                .map_err(|e| Error::io(dir.join(&v.name), e))?;
            Ok(f)
        })
        .collect::<Result<_>>()?;
    progress.start(crate::progress::Phase::Parity, g.units * chunk_size);
    let codec_error = |e: parity::ParityError| Error::io(dir, e.into());
    let digests: Vec<(u64, Vec<String>)> = (0..g.stripes())
        .into_par_iter()
        .map_init(
            // Each thread's work area, made at its first stripe (a failure is owned, typed).
            || None,
            |encoder, k| -> Result<(u64, Vec<String>)> {
                if encoder.is_none() {
                    *encoder = Some(parity::StripeEncoder::new(&g).map_err(codec_error)?);
                }
                let encoder = encoder.as_mut().expect("made above");
                let mut data_hash: Vec<Xxh3> = vec![Xxh3::new(); g.data as usize];
                let mut rec_hash: Vec<Sha256> = vec![Sha256::new(); g.recovery as usize];
                let r = encoder.encode(
                    &g,
                    k,
                    &mut |unit, offset, buf| {
                        let (i, start, len) = layout.data_unit(unit);
                        read_padded(&inputs[i], start, len, offset, buf).map_err(|e| {
                            let name = data[i].name.clone();
                            io::Error::new(e.kind(), ParityWriteError::Read { name, source: e })
                        })?;
                        let (_, d) = g.locate(unit);
                        // Only the unit's real bytes count for its chunk digest.
                        let real = len.saturating_sub(offset).min(buf.len() as u64) as usize;
                        data_hash[d as usize].update(&buf[..real]);
                        progress.advance(real as u64);
                        Ok(())
                    },
                    &mut |r, offset, bytes| {
                        let (j, start) = layout.recovery_unit(g.recovery_index(k, r));
                        rec_hash[r as usize].update(bytes);
                        outputs[j].write_all_at(bytes, start + offset)
                    },
                );
                r.map_err(codec_error)?;
                for (d, h) in data_hash.iter().enumerate() {
                    if let Some(unit) = g.data_unit(k, d as u32) {
                        let (i, start, _) = layout.data_unit(unit);
                        let c = (start / chunk_size) as usize;
                        if checks.get(i).and_then(|v| v.get(c)) != Some(&h.digest()) {
                            return Err(Error::io(
                                dir.join(&data[i].name),
                                io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    ParityWriteError::ReadBackDiffers(c),
                                ),
                            ));
                        }
                    }
                }
                Ok((
                    k,
                    rec_hash
                        .into_iter()
                        .map(|h| hex::encode(h.finalize()))
                        .collect(),
                ))
            },
        )
        .collect::<Result<_>>()?;
    let mut all = vec![String::new(); g.recovery_units() as usize];
    for (k, ds) in digests {
        for (r, d) in ds.into_iter().enumerate() {
            all[g.recovery_index(k, r as u32) as usize] = d;
        }
    }
    let mut all = all.into_iter();
    for (v, f) in volumes.iter_mut().zip(&outputs) {
        v.chunks = all.by_ref().take((v.size / chunk_size) as usize).collect();
        f.sync_all().map_err(|e| Error::io(dir.join(&v.name), e))?;
    }
    progress.finish();
    Ok(Parity {
        algorithm: PARITY_ALGORITHM.into(),
        data_units: g.data,
        recovery_units: g.recovery,
        stripes: g.stripes(),
        volumes,
    })
}

/// Mode of a parity volume, as of a data volume.
const VOLUME_MODE: u32 = 0o644;

/// Opens the data volume `name` in `dir_fd` for reading: a regular file, not a link.
fn open_volume(dir_fd: &OwnedFd, dir: &Path, name: &str) -> Result<File> {
    fsio::open_file_below(dir_fd, name)
        .map(|(f, _)| f)
        .map_err(|e| Error::io(dir.join(name), e.into()))
}

/// Fills `buf` with the bytes of a unit of `len` real bytes at `start` of `f`, from `offset`
/// into the unit; zeros past its real end.
pub(crate) fn read_padded(
    f: &File,
    start: u64,
    len: u64,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<()> {
    let real = len.saturating_sub(offset).min(buf.len() as u64) as usize;
    f.read_exact_at(&mut buf[..real], start + offset)?;
    buf[real..].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    /// `data.000` of 20 KiB in 4 KiB chunks, written into `dir`, and its chunks' checksums.
    fn data_volume(dir: &Path) -> (Vec<Volume>, Vec<Vec<u64>>) {
        let bytes: Vec<u8> = (0..20480u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(dir.join("data.000"), &bytes).unwrap();
        let volumes = vec![Volume {
            name: "data.000".into(),
            size: bytes.len() as u64,
            sha256: None,
            chunks: bytes
                .chunks(4096)
                .map(|c| hex::encode(Sha256::digest(c)))
                .collect(),
        }];
        let checks = vec![bytes.chunks(4096).map(xxhash_rust::xxh3::xxh3_64).collect()];
        (volumes, checks)
    }

    /// A data volume whose bytes on disk are not the bytes written (as the writer's checksums
    /// say) fails the parity pass, naming the volume and chunk, instead of making parity over
    /// the wrong bytes.
    #[test]
    fn a_volume_read_back_other_than_written_fails_the_pack() {
        let t = tempfile::tempdir().unwrap();
        let (data, checks) = data_volume(t.path());
        let silent = crate::progress::Silent;
        let mut bytes = std::fs::read(t.path().join("data.000")).unwrap();
        bytes[3 * 4096 + 17] ^= 1;
        std::fs::write(t.path().join("data.000"), &bytes).unwrap();
        let e = write_parity(
            t.path(),
            &data,
            &checks,
            4096,
            1 << 20,
            Ask::Percent(50.0),
            &silent,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("data.000") && e.contains("chunk 3 "), "{e}");
        // The same bytes with their own checksums: parity is written (the failed pass left its
        // parity volumes, which pack's work directory takes away with it).
        for e in std::fs::read_dir(t.path()).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with("parity.") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        let checks = vec![bytes.chunks(4096).map(xxhash_rust::xxh3::xxh3_64).collect()];
        write_parity(
            t.path(),
            &data,
            &checks,
            4096,
            1 << 20,
            Ask::Percent(50.0),
            &silent,
        )
        .unwrap();
    }

    #[test]
    fn parity_volumes_are_written_through_the_directory_handle_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let work = t.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let (data, checks) = data_volume(&work);
        let silent = crate::progress::Silent;
        let write = |dir: &Path| {
            write_parity(
                dir,
                &data,
                &checks,
                4096,
                1 << 20,
                Ask::Percent(50.0),
                &silent,
            )
        };
        // A link planted where a parity volume goes: refused, its target untouched.
        std::fs::write(t.path().join("victim"), b"keep").unwrap();
        symlink(t.path().join("victim"), work.join("parity.000")).unwrap();
        assert!(write(&work).is_err());
        assert_eq!(std::fs::read(t.path().join("victim")).unwrap(), b"keep");
        std::fs::remove_file(work.join("parity.000")).unwrap();
        // The work directory named through a link: refused, nothing written where it points.
        symlink(&work, t.path().join("link")).unwrap();
        let e = write(&t.path().join("link"));
        assert!(e.is_err(), "wrote parity through a linked directory");
        assert!(!work.join("parity.000").exists());
        // A data volume that is a link: refused.
        std::fs::rename(work.join("data.000"), t.path().join("data.000")).unwrap();
        symlink(t.path().join("data.000"), work.join("data.000")).unwrap();
        assert!(write(&work).is_err());
        std::fs::remove_file(work.join("data.000")).unwrap();
        std::fs::rename(t.path().join("data.000"), work.join("data.000")).unwrap();
        // The real thing, with the mode set whatever the umask.
        let p = write(&work).unwrap();
        for v in &p.volumes {
            let meta = std::fs::symlink_metadata(work.join(&v.name)).unwrap();
            assert!(meta.is_file());
            assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
            assert_eq!(meta.len(), v.size);
        }
    }
}
