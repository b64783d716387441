#![no_main]
//! Parity (FORMAT.md section 17): geometry validation and rebuilding damaged units, in two
//! modes chosen by the first byte.
//!
//! - Bundle mode (even first byte): the rest is read like the `volumes` target's input (a
//!   4-byte little-endian manifest length, the manifest, then the payload), cut into the data
//!   volumes and then the parity volumes at the sizes the manifest lists. A manifest with a
//!   `parity` object is validated (its geometry against the bundle), then streamed in both
//!   modes through the unit reader, which rebuilds every unit whose signed digest fails: the
//!   seeds are real parity bundles, so mutations damage units that the stripe can rebuild.
//! - Geometry mode (first byte 1 mod 4): a geometry from the input (unit size, units, `D`,
//!   `R`), validated; a valid small one gets pseudo-random data units, its recovery units are
//!   encoded and shards the input picks are erased: a stripe with at most `R` erased shards must
//!   rebuild them exactly, one with more must be refused as beyond repair.
//! - Choice mode (first byte 3 mod 4): what `pack --parity` chooses (issue 24) for a volume
//!   size, a payload and a share or a volume count from the input: the unit pack takes, then
//!   the geometry; what it chooses must be valid, within the memory bound (`D <= U` included),
//!   and rebuild the volumes asked for.
//!
//! Invariants: no panic, no hang, memory within the cap scripts/fuzz.sh sets (a valid geometry
//! says how much a rebuild may hold, and that is bounded whatever the geometry), never more
//! file bytes handed on than the manifest declares.
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::PathBuf;

use airlock::bundle::stream::stream_volumes;
use airlock::entries::{EntrySink, Mode};
use airlock::bundle::volumes::VolumeSource;
use airlock::error::Result;
use airlock::manifest::{FileEntry, Manifest};
use airlock::parity::{
    Ask, DataShape, Geometry, ParityError, Shard, encode_stripe, rebuild_stripe, unit_size_for,
};
use airlock::progress::Silent;
use libfuzzer_sys::fuzz_target;

/// Volumes by name, in memory, with random access (the unit reader's `read_at`).
struct Memory(BTreeMap<String, Vec<u8>>, Vec<String>);

impl VolumeSource for Memory {
    fn open(&self, index: usize, _name: &str) -> io::Result<Box<dyn Read + Send + '_>> {
        match self.1.get(index).and_then(|n| self.0.get(n)) {
            Some(v) => Ok(Box::new(&v[..])),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        PathBuf::from(name)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let v = self.0.get(name).ok_or(io::ErrorKind::NotFound)?;
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = v.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Counts what reaches the installer.
struct Counting {
    bytes: u64,
    limit: u64,
}

impl EntrySink for Counting {
    fn dir(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
    fn begin_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.bytes += bytes.len() as u64;
        assert!(
            self.bytes <= self.limit,
            "more file bytes than the manifest declares"
        );
        Ok(())
    }
    fn end_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
}

fn bundle(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let len = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
    let rest = &data[4..];
    if len > rest.len() {
        return;
    }
    let Ok(m) = Manifest::parse(&rest[..len]) else {
        return;
    };
    let Some(g) = m.parity_geometry() else {
        return;
    };
    assert!(
        g.validate().is_ok(),
        "a parsed manifest has a valid geometry"
    );
    assert!(g.working_memory() <= 80 << 20, "{g:?}");
    // Keep each run small: the declared sizes bound the work.
    let parity = &m.parity.as_ref().unwrap().volumes;
    let declared: u64 = m.volumes.iter().chain(parity).map(|v| v.size).sum();
    if m.stream.size > 16 << 20 || declared > 16 << 20 {
        return;
    }
    let mut payload = &rest[len..];
    let mut volumes = BTreeMap::new();
    let mut order = Vec::new();
    for v in m.volumes.iter().chain(parity) {
        let take = (v.size as usize).min(payload.len());
        volumes.insert(v.name.clone(), payload[..take].to_vec());
        payload = &payload[take..];
    }
    for v in &m.volumes {
        order.push(v.name.clone());
    }
    let source = Memory(volumes, order);
    for mode in [Mode::Collect, Mode::Strict] {
        let mut sink = Counting {
            bytes: 0,
            limit: m.totals.file_bytes,
        };
        let _ = stream_volumes(&m, &source, mode, &mut sink, &Silent);
    }
}

/// Pseudo-random bytes from a seed (xorshift).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn geometry(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let g = Geometry {
        unit_size: 4096 << (data[0] % 3),
        units: u64::from(u16::from_le_bytes([data[1], data[2]])),
        data: u32::from(u16::from_le_bytes([data[3], data[4]])),
        recovery: u32::from(u16::from_le_bytes([data[5], data[6]])),
    };
    if g.validate().is_err() {
        return;
    }
    assert!(g.working_memory() <= 80 << 20, "{g:?}");
    assert_eq!(g.slice_size() % 64, 0, "{g:?}");
    let bytes = |n: u64| n.saturating_mul(g.unit_size);
    if bytes(g.units) > 2 << 20 || bytes(g.recovery_units()) > 2 << 20 {
        return;
    }
    let unit = g.unit_size as usize;
    let units: Vec<Vec<u8>> = (0..g.units)
        .map(|u| noise(u + u64::from(data[7]), unit))
        .collect();
    let mut recovery = vec![vec![0u8; unit]; g.recovery_units() as usize];
    for k in 0..g.stripes() {
        encode_stripe(
            &g,
            k,
            &mut |u, off, buf| {
                let o = off as usize;
                buf.copy_from_slice(&units[u as usize][o..o + buf.len()]);
                Ok(())
            },
            &mut |r, off, b| {
                let o = off as usize;
                recovery[g.recovery_index(k, r) as usize][o..o + b.len()].copy_from_slice(b);
                Ok(())
            },
        )
        .unwrap();
    }
    // Erasures: each 3 bytes pick a stripe and a shard of it.
    let mut erased: BTreeMap<u64, Vec<Shard>> = BTreeMap::new();
    for pick in data[8..].chunks_exact(3).take(64) {
        let k = u64::from(pick[0]) % g.stripes();
        let i = u32::from(u16::from_le_bytes([pick[1], pick[2]]));
        let shard = if i % 2 == 0 {
            let d = (i / 2) % g.data;
            if g.data_unit(k, d).is_none() {
                continue;
            }
            Shard::Data(d)
        } else {
            Shard::Recovery((i / 2) % g.recovery)
        };
        let list = erased.entry(k).or_default();
        if !list.contains(&shard) {
            list.push(shard);
        }
    }
    for (k, lost) in erased {
        let mut rebuilt: BTreeMap<Shard, Vec<u8>> = BTreeMap::new();
        let r = rebuild_stripe(
            &g,
            k,
            &lost,
            &mut |shard, off, buf| {
                assert!(!lost.contains(&shard), "an erased shard was read");
                let src = match shard {
                    Shard::Data(d) => &units[g.data_unit(k, d).expect("not a zero unit") as usize],
                    Shard::Recovery(r) => &recovery[g.recovery_index(k, r) as usize],
                };
                let o = off as usize;
                buf.copy_from_slice(&src[o..o + buf.len()]);
                Ok(())
            },
            &mut |shard, off, b| {
                let v = rebuilt.entry(shard).or_insert_with(|| vec![0u8; unit]);
                v[off as usize..off as usize + b.len()].copy_from_slice(b);
                Ok(())
            },
        );
        if lost.len() > g.recovery as usize {
            assert!(matches!(r, Err(ParityError::BeyondRepair { .. })), "{r:?}");
            continue;
        }
        r.unwrap();
        for shard in &lost {
            let want = match *shard {
                Shard::Data(d) => &units[g.data_unit(k, d).unwrap() as usize],
                Shard::Recovery(r) => &recovery[g.recovery_index(k, r) as usize],
            };
            assert!(
                rebuilt.get(shard) == Some(want),
                "{shard:?} of stripe {k} rebuilt wrong"
            );
        }
    }
}

fn choice(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    // Volumes from 4 KiB to 512 GiB (any size, not only powers of two), payloads up to 16 TiB.
    let volume_size = (4096u64 << (data[0] % 28)) + u64::from(u16::from_le_bytes([data[1], 0]));
    let payload = u64::from_le_bytes([data[2], data[3], data[4], data[5], data[6] % 4, 0, 0, 0])
        .max(1)
        << (data[7] % 11);
    let unit = unit_size_for(volume_size, payload);
    assert!(unit.is_power_of_two() && (4096..=1 << 30).contains(&unit), "{unit}");
    // Volumes hold whole units (the writer cuts at chunk boundaries); keep the run small.
    let per_volume = (volume_size / unit).max(1);
    let units = payload.div_ceil(unit);
    let volumes = units.div_ceil(per_volume);
    if volumes > 4096 || units > 1 << 22 {
        return;
    }
    let volume_units: Vec<u64> = (0..volumes)
        .map(|i| per_volume.min(units - i * per_volume))
        .collect();
    let shape = DataShape {
        unit_size: unit,
        volume_units: &volume_units,
        bytes: payload,
    };
    let ask = match data.get(8) {
        Some(&b) if b >= 0xf0 => Ask::Volumes(u32::from(b - 0xef)),
        Some(&b) => Ask::Percent(f64::from(b % 100 + 1)),
        None => Ask::Percent(10.0),
    };
    let Ok(g) = Geometry::choose_for(&shape, ask) else {
        return;
    };
    assert!(g.validate().is_ok(), "{g:?} for {ask}");
    assert_eq!((g.units, g.unit_size), (units, unit));
    assert!(u64::from(g.data) <= units, "{g:?}");
    assert!(g.working_memory() <= 80 << 20, "{g:?}");
    let s = g.survives(&volume_units);
    if let Ask::Volumes(n) = ask {
        assert!(s.volumes >= n, "{g:?} asked {n} volumes, survives {s:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 | 2 => bundle(rest),
        1 => geometry(rest),
        _ => choice(rest),
    }
});
