//! Parity: Reed-Solomon recovery units over a bundle's chunks (docs/FORMAT.md section 16).
//!
//! The *data units* are the bundle's chunks in order (every chunk of volume 0, then of volume
//! 1, ...), each taken as `unit_size` bytes (a volume's short last chunk is zero-padded). Stripe
//! `k` of `K` holds the units `k, k + K, k + 2K, ...` (`D` of them; indexes past the last unit
//! stand for zero units), so neighbouring units fall into different stripes and a contiguous loss,
//! a whole volume or a bad region of a disc, costs each stripe only a few units. Each stripe gets
//! `R` recovery units; any `R` erased units of a stripe can be rebuilt from the rest.
//!
//! The code is Leopard-RS over GF(2^16) as the `reed-solomon-simd` crate implements it (chosen
//! over `reed-solomon-erasure`, GF(2^8) with at most 256 shards and O(n^2) encoding, and
//! `reed-solomon-novelpoly`, which is slower and less used; see docs/ARCHITECTURE.md). It works on
//! independent 64-byte blocks, so a stripe is processed in slices of a few hundred kilobytes and
//! memory is `(D + R) * slice` whatever the bundle size.
//!
//! The geometry comes from a signed manifest, which may be hostile: `D` and `R` up to 32768 each
//! would make 4096-byte slices cost half a gigabyte in the codec's work area alone. So the slice
//! shrinks (down to the code's 64-byte block) as the stripe grows, which keeps a rebuild under
//! [`Geometry::working_memory`] (80 MiB at most) whatever the geometry, `D` may not exceed
//! the bundle's data units (so a stripe's cost is bounded by what the bundle holds), and every
//! buffer is reserved fallibly: an allocation that fails is [`ParityError::Memory`], not an
//! abort.
//!
//! This module knows units, stripes and slices only; reading volumes and checking chunk digests
//! is the caller's (it knows which units are erased because their signed digest failed).

use std::io;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

/// Largest number of data or recovery units in one stripe the code supports here.
pub const MAX_UNITS_PER_STRIPE: u32 = 32768;

/// Memory a stripe's slices may take together; the slice size follows from it.
const SLICE_BUDGET: u64 = 16 << 20;

/// The smallest slice: the code's block (shards are multiples of 64 bytes).
const MIN_SLICE: u64 = 64;

/// The shape of a bundle's parity: how many units, stripes, data and recovery units per stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Geometry {
    /// Bytes per unit: the bundle's `chunk_size`.
    pub unit_size: u64,
    /// Data units in the bundle (`U`).
    pub units: u64,
    /// Data units per stripe (`D`).
    pub data: u32,
    /// Recovery units per stripe (`R`).
    pub recovery: u32,
}

/// One shard of a stripe: a data unit by its position `d` in the stripe, or recovery unit `r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shard {
    /// The `d`-th data unit of the stripe (unit index `stripe + d * K`).
    Data(u32),
    /// The `r`-th recovery unit of the stripe.
    Recovery(u32),
}

/// Why parity could not be planned or used.
#[derive(Debug, thiserror::Error)]
pub enum ParityError {
    /// The geometry breaks a rule of docs/FORMAT.md section 16.1.
    #[error("invalid parity geometry: {0}")]
    Geometry(String),
    /// More units of one stripe are erased than it has recovery units.
    #[error("stripe {stripe} lost {erased} units, more than its {recovery} recovery units")]
    BeyondRepair {
        /// The stripe.
        stripe: u64,
        /// Units erased in it.
        erased: u32,
        /// Its recovery units.
        recovery: u32,
    },
    /// Reading or writing a unit failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Memory for a stripe's slices or the codec's work area could not be had.
    #[error("cannot allocate {0} bytes for the parity code")]
    Memory(u64),
}

/// A zeroed buffer of `len` bytes, or [`ParityError::Memory`] if it cannot be had.
fn zeroed(len: usize) -> Result<Vec<u8>, ParityError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| ParityError::Memory(len as u64))?;
    v.resize(len, 0);
    Ok(v)
}

/// Fails with [`ParityError::Memory`] unless `bytes` can be had now. The codec
/// (`reed-solomon-simd`) allocates its work area infallibly, so its size is reserved and given
/// back first: under a memory limit a geometry too large for it is a clean error.
fn can_allocate(bytes: u64) -> Result<(), ParityError> {
    let len = usize::try_from(bytes).map_err(|_| ParityError::Memory(bytes))?;
    Vec::<u8>::new()
        .try_reserve_exact(len)
        .map_err(|_| ParityError::Memory(bytes))
}

fn codec(e: reed_solomon_simd::Error) -> ParityError {
    ParityError::Geometry(e.to_string())
}

impl Geometry {
    /// Checks the rules of docs/FORMAT.md section 16.1 (a reader calls this on a manifest's
    /// values before using any of them).
    pub fn validate(&self) -> Result<(), ParityError> {
        let bad = |m: String| Err(ParityError::Geometry(m));
        if !self.unit_size.is_power_of_two() || self.unit_size < 4096 {
            return bad(format!(
                "unit size {} is not a power of two of at least 4096",
                self.unit_size
            ));
        }
        if self.units == 0 {
            return bad("no data units".into());
        }
        if self.data == 0 || self.data > MAX_UNITS_PER_STRIPE {
            return bad(format!("{} data units per stripe", self.data));
        }
        if self.recovery == 0 || self.recovery > MAX_UNITS_PER_STRIPE {
            return bad(format!("{} recovery units per stripe", self.recovery));
        }
        if u64::from(self.data) > self.units {
            return bad(format!(
                "{} data units per stripe, more than the bundle's {} data units",
                self.data, self.units
            ));
        }
        if !ReedSolomonEncoder::supports(self.data as usize, self.recovery as usize) {
            return bad(format!(
                "{} data with {} recovery units per stripe is not supported",
                self.data, self.recovery
            ));
        }
        if self
            .stripes()
            .checked_mul(u64::from(self.recovery))
            .is_none()
            || self.parity_bytes().is_none()
        {
            return bad("parity size overflows".into());
        }
        Ok(())
    }

    /// Chooses a geometry for `units` data units that makes parity `percent` of the data as
    /// closely as the unit granularity allows, preferring few data units per stripe (a rebuild
    /// reads a whole stripe) and so many stripes (a contiguous loss spreads over more of them).
    pub fn choose(units: u64, unit_size: u64, percent: f64) -> Result<Geometry, ParityError> {
        if !(percent > 0.0 && percent <= 100.0) {
            return Err(ParityError::Geometry(format!(
                "parity of {percent}% is not between 0 and 100"
            )));
        }
        let want = percent / 100.0;
        let mut best: Option<(f64, Geometry)> = None;
        let max_d = units.clamp(1, 1024) as u32;
        for data in 1..=max_d {
            let stripes = units.div_ceil(u64::from(data));
            let recovery = ((want * units as f64) / stripes as f64).round().max(1.0);
            let recovery = (recovery as u32).min(MAX_UNITS_PER_STRIPE);
            let g = Geometry {
                unit_size,
                units,
                data,
                recovery,
            };
            if g.validate().is_err() {
                continue;
            }
            let error = (g.ratio() - want).abs();
            if error <= 0.005 {
                return Ok(g);
            }
            if best.as_ref().is_none_or(|(e, _)| error < *e) {
                best = Some((error, g));
            }
        }
        best.map(|(_, g)| g)
            .ok_or_else(|| ParityError::Geometry(format!("no geometry for {units} units")))
    }

    /// Number of stripes, `K = ceil(U / D)`.
    pub fn stripes(&self) -> u64 {
        self.units.div_ceil(u64::from(self.data))
    }

    /// Recovery units in the bundle, `K * R`.
    pub fn recovery_units(&self) -> u64 {
        self.stripes() * u64::from(self.recovery)
    }

    /// Bytes of parity, `K * R * unit_size`, or `None` on overflow.
    pub fn parity_bytes(&self) -> Option<u64> {
        self.recovery_units().checked_mul(self.unit_size)
    }

    /// Parity as a fraction of the data units.
    pub fn ratio(&self) -> f64 {
        self.recovery_units() as f64 / self.units as f64
    }

    /// The data unit at position `d` of `stripe`, or `None` for a zero unit past the end.
    pub fn data_unit(&self, stripe: u64, d: u32) -> Option<u64> {
        let unit = stripe + u64::from(d) * self.stripes();
        (unit < self.units).then_some(unit)
    }

    /// The stripe and position of data unit `unit`.
    pub fn locate(&self, unit: u64) -> (u64, u32) {
        let k = self.stripes();
        (unit % k, (unit / k) as u32)
    }

    /// The index of recovery unit `r` of `stripe` among all recovery units (their order in the
    /// parity volumes).
    pub fn recovery_index(&self, stripe: u64, r: u32) -> u64 {
        stripe * u64::from(self.recovery) + u64::from(r)
    }

    /// Bytes of each unit processed at once: a power of two (so it divides the unit) of at
    /// least 64 (the code's block), keeping `(D + R)` slices within 16 MiB. Up to `D + R` =
    /// 4096 that is at least 4096 bytes; beyond, the slice shrinks so that memory does not grow
    /// with the geometry (see [`Geometry::working_memory`]).
    pub fn slice_size(&self) -> usize {
        let per = SLICE_BUDGET / (u64::from(self.data) + u64::from(self.recovery));
        let mut slice = MIN_SLICE;
        while slice * 2 <= per && slice * 2 <= self.unit_size {
            slice *= 2;
        }
        slice.min(self.unit_size) as usize
    }

    /// An upper bound of the bytes a rebuild holds: the `D` original slices, one read buffer,
    /// and the codec's decoder and encoder work areas. `reed-solomon-simd` sizes those as
    /// powers of two and multiples around `D` and `R`; each is below `2 * (D + R)` slices
    /// (the encoder) and `2 * (D + R).next_power_of_two()` slices (the decoder). With
    /// [`Geometry::slice_size`] this is at most 80 MiB for any valid geometry.
    pub fn working_memory(&self) -> u64 {
        let slice = self.slice_size() as u64;
        let shards = u64::from(self.data) + u64::from(self.recovery);
        slice * (u64::from(self.data) + 1 + 2 * shards + 2 * shards.next_power_of_two())
    }

    /// Whether the erased shards can be rebuilt: checks each stripe against its budget.
    pub fn assess(&self, erased: &[(u64, Shard)]) -> Assessment {
        let mut per_stripe: std::collections::BTreeMap<u64, u32> = Default::default();
        for (stripe, _) in erased {
            *per_stripe.entry(*stripe).or_default() += 1;
        }
        let worst = per_stripe.values().copied().max().unwrap_or(0);
        Assessment {
            damaged_stripes: per_stripe.len() as u64,
            worst_stripe_erased: worst,
            recovery_per_stripe: self.recovery,
            repairable: worst <= self.recovery,
        }
    }
}

/// How damaged a bundle is, measured against its parity.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Assessment {
    /// Stripes with at least one erased unit.
    pub damaged_stripes: u64,
    /// Erased units in the worst stripe.
    pub worst_stripe_erased: u32,
    /// Recovery units each stripe has.
    pub recovery_per_stripe: u32,
    /// Whether every stripe can be rebuilt.
    pub repairable: bool,
}

/// Reads a data unit's bytes: `(unit, offset, buf)`.
pub type ReadUnit<'a> = dyn FnMut(u64, u64, &mut [u8]) -> io::Result<()> + 'a;
/// Receives recovery bytes: `(r, offset, bytes)`.
pub type WriteRecovery<'a> = dyn FnMut(u32, u64, &[u8]) -> io::Result<()> + 'a;
/// Reads a shard of the stripe being rebuilt: `(shard, offset, buf)`.
pub type ReadShard<'a> = dyn FnMut(Shard, u64, &mut [u8]) -> io::Result<()> + 'a;
/// Receives a rebuilt shard's bytes: `(shard, offset, bytes)`.
pub type WriteShard<'a> = dyn FnMut(Shard, u64, &[u8]) -> io::Result<()> + 'a;

/// Computes the `R` recovery units of `stripe`. `read(unit, offset, buf)` fills `buf` with the
/// data unit's bytes at `offset` (zero past the unit's real end); `write(r, offset, bytes)`
/// receives recovery unit `r`'s bytes at `offset`, slice by slice in increasing offset.
pub fn encode_stripe(
    g: &Geometry,
    stripe: u64,
    read: &mut ReadUnit<'_>,
    write: &mut WriteRecovery<'_>,
) -> Result<(), ParityError> {
    let slice = g.slice_size();
    can_allocate(g.working_memory())?;
    let mut enc =
        ReedSolomonEncoder::new(g.data as usize, g.recovery as usize, slice).map_err(codec)?;
    let mut buf = zeroed(slice)?;
    let mut offset = 0u64;
    while offset < g.unit_size {
        for d in 0..g.data {
            match g.data_unit(stripe, d) {
                Some(unit) => read(unit, offset, &mut buf)?,
                None => buf.fill(0),
            }
            enc.add_original_shard(&buf).map_err(codec)?;
        }
        let result = enc.encode().map_err(codec)?;
        for (r, bytes) in result.recovery_iter().enumerate() {
            write(r as u32, offset, bytes)?;
        }
        offset += slice as u64;
    }
    Ok(())
}

/// Rebuilds the erased shards of `stripe`. `erased` lists them; `read(shard, offset, buf)`
/// fills `buf` from an intact shard (a data shard whose unit is past the end reads as zeros
/// without a call); `write(shard, offset, bytes)` receives every rebuilt shard's bytes, slice by
/// slice. The caller checks each rebuilt data unit against its signed digest.
pub fn rebuild_stripe(
    g: &Geometry,
    stripe: u64,
    erased: &[Shard],
    read: &mut ReadShard<'_>,
    write: &mut WriteShard<'_>,
) -> Result<(), ParityError> {
    rebuild_range(g, stripe, erased, 0, g.unit_size, read, write)
}

/// [`rebuild_stripe`] over the byte range `[start, end)` of the units only: `start` a multiple
/// of [`Geometry::slice_size`] and `end` the next such multiple or the unit's end, or any
/// range of whole slices. A reader streaming a rebuilt unit asks for one slice at a time.
pub fn rebuild_range(
    g: &Geometry,
    stripe: u64,
    erased: &[Shard],
    start: u64,
    end: u64,
    read: &mut ReadShard<'_>,
    write: &mut WriteShard<'_>,
) -> Result<(), ParityError> {
    if erased.len() > g.recovery as usize {
        return Err(ParityError::BeyondRepair {
            stripe,
            erased: erased.len() as u32,
            recovery: g.recovery,
        });
    }
    // Which shards are lost, by position (a lookup per shard per slice: no scan of `erased`).
    let mut data_lost = zeroed(g.data as usize)?;
    let mut recovery_lost = zeroed(g.recovery as usize)?;
    for s in erased {
        match *s {
            Shard::Data(d) if d < g.data => data_lost[d as usize] = 1,
            Shard::Recovery(r) if r < g.recovery => recovery_lost[r as usize] = 1,
            _ => {}
        }
    }
    let lost = |s: Shard| match s {
        Shard::Data(d) => data_lost[d as usize] != 0,
        Shard::Recovery(r) => recovery_lost[r as usize] != 0,
    };
    let lost_data: Vec<u32> = (0..g.data).filter(|&d| lost(Shard::Data(d))).collect();
    let lost_recovery: Vec<u32> = (0..g.recovery)
        .filter(|&r| lost(Shard::Recovery(r)))
        .collect();
    let slice = (g.slice_size() as u64)
        .min(end.saturating_sub(start))
        .max(MIN_SLICE) as usize;
    // Only the codec halves needed are made: a decoder for lost data, an encoder for lost
    // recovery units. Their work areas and the buffers are within `working_memory`.
    can_allocate(g.working_memory())?;
    let (data, recovery) = (g.data as usize, g.recovery as usize);
    let mut dec = if lost_data.is_empty() {
        None
    } else {
        Some(ReedSolomonDecoder::new(data, recovery, slice).map_err(codec)?)
    };
    let mut enc = if lost_recovery.is_empty() {
        None
    } else {
        Some(ReedSolomonEncoder::new(data, recovery, slice).map_err(codec)?)
    };
    let mut buf = zeroed(slice)?;
    let mut originals = zeroed(slice * g.data as usize)?;
    let mut offset = start;
    while offset < end {
        for d in 0..g.data {
            if lost(Shard::Data(d)) {
                continue;
            }
            let original = &mut originals[d as usize * slice..(d as usize + 1) * slice];
            match g.data_unit(stripe, d) {
                Some(_) => read(Shard::Data(d), offset, original)?,
                None => original.fill(0),
            }
            if let Some(dec) = &mut dec {
                dec.add_original_shard(d as usize, &*original)
                    .map_err(codec)?;
            }
        }
        if let Some(dec) = &mut dec {
            // Only as many recovery shards as data shards are lost are needed.
            let mut fed = 0;
            for r in 0..g.recovery {
                if fed == lost_data.len() {
                    break;
                }
                if lost(Shard::Recovery(r)) {
                    continue;
                }
                read(Shard::Recovery(r), offset, &mut buf)?;
                dec.add_recovery_shard(r as usize, &buf).map_err(codec)?;
                fed += 1;
            }
            let result = dec.decode().map_err(codec)?;
            for &d in &lost_data {
                let bytes = result
                    .restored_original(d as usize)
                    .expect("the decoder restores every missing original");
                originals[d as usize * slice..(d as usize + 1) * slice].copy_from_slice(bytes);
                write(Shard::Data(d), offset, bytes)?;
            }
        }
        if let Some(enc) = &mut enc {
            for original in originals.chunks_exact(slice) {
                enc.add_original_shard(original).map_err(codec)?;
            }
            let result = enc.encode().map_err(codec)?;
            for &r in &lost_recovery {
                let bytes = result
                    .recovery(r as usize)
                    .expect("the encoder makes every recovery shard");
                write(Shard::Recovery(r), offset, bytes)?;
            }
        }
        offset += slice as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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

    /// A bundle's data units in memory, and its recovery units made by `encode_stripe`.
    struct Fixture {
        g: Geometry,
        data: Vec<Vec<u8>>,
        recovery: Vec<Vec<u8>>,
    }

    fn fixture(units: u64, unit_size: u64, percent: f64) -> Fixture {
        let g = Geometry::choose(units, unit_size, percent).unwrap();
        let data: Vec<Vec<u8>> = (0..units)
            .map(|u| noise(u + 1, unit_size as usize))
            .collect();
        let mut recovery = vec![vec![0u8; unit_size as usize]; g.recovery_units() as usize];
        for k in 0..g.stripes() {
            encode_stripe(
                &g,
                k,
                &mut |unit, off, buf| {
                    let o = off as usize;
                    buf.copy_from_slice(&data[unit as usize][o..o + buf.len()]);
                    Ok(())
                },
                &mut |r, off, bytes| {
                    let o = off as usize;
                    recovery[g.recovery_index(k, r) as usize][o..o + bytes.len()]
                        .copy_from_slice(bytes);
                    Ok(())
                },
            )
            .unwrap();
        }
        Fixture { g, data, recovery }
    }

    impl Fixture {
        /// Rebuilds the erased data units and recovery units; returns them.
        fn rebuild(
            &self,
            erased_units: &[u64],
            erased_recovery: &[u64],
        ) -> Result<HashMap<(u64, Shard), Vec<u8>>, ParityError> {
            let g = &self.g;
            let mut by_stripe: HashMap<u64, Vec<Shard>> = HashMap::new();
            for &u in erased_units {
                let (k, d) = g.locate(u);
                by_stripe.entry(k).or_default().push(Shard::Data(d));
            }
            for &i in erased_recovery {
                let k = i / u64::from(g.recovery);
                let r = (i % u64::from(g.recovery)) as u32;
                by_stripe.entry(k).or_default().push(Shard::Recovery(r));
            }
            let mut out: HashMap<(u64, Shard), Vec<u8>> = HashMap::new();
            for (k, erased) in by_stripe {
                rebuild_stripe(
                    g,
                    k,
                    &erased,
                    &mut |shard, off, buf| {
                        let src = match shard {
                            Shard::Data(d) => &self.data[g.data_unit(k, d).unwrap() as usize],
                            Shard::Recovery(r) => &self.recovery[g.recovery_index(k, r) as usize],
                        };
                        let o = off as usize;
                        buf.copy_from_slice(&src[o..o + buf.len()]);
                        Ok(())
                    },
                    &mut |shard, off, bytes| {
                        let v = out
                            .entry((k, shard))
                            .or_insert_with(|| vec![0u8; g.unit_size as usize]);
                        v[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
                        Ok(())
                    },
                )?;
            }
            Ok(out)
        }
    }

    #[test]
    fn chosen_geometry_gives_the_asked_percentage_within_one_point() {
        for units in [40u64, 100, 257, 2240, 10_000] {
            for percent in [5.0, 10.0, 12.5, 25.0, 50.0] {
                let g = Geometry::choose(units, 1 << 26, percent).unwrap();
                g.validate().unwrap();
                let got = g.ratio() * 100.0;
                assert!(
                    (got - percent).abs() <= 1.0,
                    "{units} units at {percent}%: {g:?} gives {got:.2}%"
                );
            }
        }
    }

    #[test]
    fn every_data_unit_has_exactly_one_place() {
        let g = Geometry::choose(103, 4096, 10.0).unwrap();
        let mut seen = [false; 103];
        for k in 0..g.stripes() {
            for d in 0..g.data {
                if let Some(u) = g.data_unit(k, d) {
                    assert!(!seen[u as usize], "unit {u} twice");
                    seen[u as usize] = true;
                    assert_eq!(g.locate(u), (k, d));
                }
            }
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn erasures_within_the_budget_rebuild_the_exact_units() {
        let f = fixture(60, 8192, 20.0);
        let g = f.g;
        // Erase R units of one stripe (data and recovery mixed) and one unit of another.
        let k = 1;
        let mut units: Vec<u64> = (0..g.recovery - 1)
            .filter_map(|d| g.data_unit(k, d))
            .collect();
        units.push(g.data_unit(0, 0).unwrap());
        let recovery = vec![g.recovery_index(k, g.recovery - 1)];
        let rebuilt = f.rebuild(&units, &recovery).unwrap();
        for &u in &units {
            let (k, d) = g.locate(u);
            assert_eq!(
                rebuilt[&(k, Shard::Data(d))],
                f.data[u as usize],
                "unit {u}"
            );
        }
        let r = g.recovery - 1;
        assert_eq!(
            rebuilt[&(k, Shard::Recovery(r))],
            f.recovery[recovery[0] as usize]
        );
    }

    #[test]
    fn a_whole_lost_volume_is_covered_when_it_is_within_the_parity_share() {
        // 100 units of 4 KiB at 10%: a "volume" of 10 consecutive units is lost.
        let f = fixture(100, 4096, 10.0);
        let lost: Vec<u64> = (40..50).collect();
        let erased: Vec<(u64, Shard)> = lost
            .iter()
            .map(|&u| {
                let (k, d) = f.g.locate(u);
                (k, Shard::Data(d))
            })
            .collect();
        let assessment = f.g.assess(&erased);
        assert!(assessment.repairable, "{assessment:?} for {:?}", f.g);
        let rebuilt = f.rebuild(&lost, &[]).unwrap();
        for u in lost {
            let (k, d) = f.g.locate(u);
            assert_eq!(rebuilt[&(k, Shard::Data(d))], f.data[u as usize]);
        }
    }

    #[test]
    fn damage_beyond_the_budget_is_refused_and_assessed_so() {
        let f = fixture(30, 4096, 10.0);
        let g = f.g;
        let units: Vec<u64> = (0..=g.recovery).filter_map(|d| g.data_unit(2, d)).collect();
        assert_eq!(units.len() as u32, g.recovery + 1);
        let erased: Vec<(u64, Shard)> = units
            .iter()
            .map(|&u| {
                let (k, d) = g.locate(u);
                (k, Shard::Data(d))
            })
            .collect();
        assert!(!g.assess(&erased).repairable);
        let r = f.rebuild(&units, &[]);
        assert!(
            matches!(r, Err(ParityError::BeyondRepair { stripe: 2, .. })),
            "{r:?}"
        );
    }

    #[test]
    fn slicing_does_not_change_the_recovery_bytes() {
        // The same stripe encoded whole (one slice of the unit) and in 4096-byte slices.
        let data: Vec<Vec<u8>> = (0..4).map(|i| noise(100 + i, 1 << 16)).collect();
        let whole = reed_solomon_simd::encode(4, 2, &data).unwrap();
        let g = Geometry {
            unit_size: 1 << 16,
            units: 4,
            data: 4,
            recovery: 2,
        };
        assert!(g.slice_size() <= 1 << 16);
        let mut sliced = vec![vec![0u8; 1 << 16]; 2];
        let slice = 4096;
        for off in (0..1 << 16).step_by(slice) {
            let parts: Vec<&[u8]> = data.iter().map(|d| &d[off..off + slice]).collect();
            for (r, bytes) in reed_solomon_simd::encode(4, 2, parts)
                .unwrap()
                .iter()
                .enumerate()
            {
                sliced[r][off..off + slice].copy_from_slice(bytes);
            }
        }
        assert_eq!(whole, sliced);
    }

    /// Issue 26 item 3: a signed manifest may declare any geometry the code supports; what a
    /// rebuild holds must not grow with it (4096-byte slices made `D = R = 32768` cost about
    /// 550 MB, an abort under a 384 MiB limit).
    #[test]
    fn working_memory_is_bounded_whatever_the_geometry() {
        let mut worst = 0;
        let counts = [1u32, 2, 3, 10, 125, 1000, 4095, 4096, 16384, 32767, 32768];
        for data in counts {
            for recovery in counts {
                for unit_size in [4096u64, 1 << 20, 1 << 26, 1 << 40] {
                    let g = Geometry {
                        unit_size,
                        units: 1 << 20,
                        data,
                        recovery,
                    };
                    if g.validate().is_err() {
                        continue;
                    }
                    assert_eq!(g.slice_size() % 64, 0, "{g:?}");
                    worst = worst.max(g.working_memory());
                }
            }
        }
        assert!(worst <= 80 << 20, "a rebuild may hold {worst} bytes");
    }

    /// The largest stripe the code supports rebuilds (in 256-byte slices) and rebuilds right.
    #[test]
    fn the_largest_stripe_rebuilds_in_small_slices() {
        let g = Geometry {
            unit_size: 4096,
            units: 32768,
            data: 32768,
            recovery: 32768,
        };
        g.validate().unwrap();
        assert_eq!(g.slice_size(), 256);
        // All data units are zero, so every recovery unit is zero too: unit 5 and recovery
        // unit 7 rebuild as zeros.
        let mut rebuilt = 0;
        rebuild_stripe(
            &g,
            0,
            &[Shard::Data(5), Shard::Recovery(7)],
            &mut |_, _, buf| {
                buf.fill(0);
                Ok(())
            },
            &mut |shard, _, bytes| {
                assert!(matches!(shard, Shard::Data(5) | Shard::Recovery(7)));
                assert!(bytes.iter().all(|b| *b == 0));
                rebuilt += bytes.len();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(rebuilt, 2 * 4096);
    }

    #[test]
    fn invalid_geometries_are_refused() {
        let ok = Geometry {
            unit_size: 4096,
            units: 10,
            data: 10,
            recovery: 1,
        };
        ok.validate().unwrap();
        for bad in [
            Geometry {
                unit_size: 4095,
                ..ok
            },
            Geometry { units: 0, ..ok },
            Geometry { data: 0, ..ok },
            Geometry { recovery: 0, ..ok },
            Geometry { data: 40_000, ..ok },
            // More data units per stripe than the bundle has: refused before any allocation.
            Geometry {
                units: 3,
                data: 32768,
                ..ok
            },
            Geometry {
                unit_size: 1 << 62,
                units: u64::MAX / 2,
                ..ok
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?} accepted");
        }
    }
}
