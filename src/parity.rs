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
pub(crate) const MAX_UNITS_PER_STRIPE: u32 = 32768;

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

/// A parity failure reported against a file (`Error::io`): the error itself inside (kind
/// `Other`, so it draws no hint of the file's own), its words the message. The one place a
/// parity error becomes an `io::Error`.
impl From<ParityError> for io::Error {
    fn from(e: ParityError) -> io::Error {
        io::Error::other(e)
    }
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

    /// Number of stripes, `K = ceil(U / D)`.
    pub fn stripes(&self) -> u64 {
        self.units.div_ceil(u64::from(self.data))
    }

    /// Recovery units in the bundle, `K * R`.
    pub fn recovery_units(&self) -> u64 {
        self.stripes() * u64::from(self.recovery)
    }

    /// Bytes of parity, `K * R * unit_size`, or `None` on overflow.
    pub(crate) fn parity_bytes(&self) -> Option<u64> {
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

/// What the operator asks of `pack --parity`: a share of the data, or survival of any `N`
/// whole lost data volumes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ask {
    /// Parity bytes as a percentage of the data bytes, more than 0 and at most 100.
    Percent(f64),
    /// The least parity that rebuilds any this many lost data volumes.
    Volumes(u32),
}

impl std::fmt::Display for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ask::Percent(p) => write!(f, "{p}%"),
            Ask::Volumes(n) => write!(f, "{n}vol"),
        }
    }
}

/// The data volumes as parity sees them: the unit size, each data volume's units (a short last
/// chunk is a whole unit), and the data bytes.
#[derive(Clone, Copy, Debug)]
pub struct DataShape<'a> {
    /// Bytes per unit (the bundle's `chunk_size`).
    pub unit_size: u64,
    /// Units of each data volume, in order.
    pub volume_units: &'a [u64],
    /// Bytes of the data volumes.
    pub bytes: u64,
}

impl DataShape<'_> {
    /// All data units, `U`.
    pub fn units(&self) -> u64 {
        self.volume_units.iter().sum()
    }

    /// Parity of `g` as a percentage of the data bytes.
    pub fn percent(&self, g: &Geometry) -> f64 {
        g.parity_bytes().unwrap_or(u64::MAX) as f64 * 100.0 / self.bytes.max(1) as f64
    }
}

/// What a bundle's parity rebuilds whatever the placement of the damage (FORMAT.md 17.4), in
/// the operator's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Survives {
    /// Any this many whole data volumes lost together (the parity volumes intact); 0 when not
    /// even the largest one alone.
    pub volumes: u32,
    /// Contiguous damage in one place (a bad region of a disc, a torn file), in bytes.
    pub contiguous_bytes: u64,
    /// Contiguous damage in every data volume at once, in bytes per volume (0 when the stripes
    /// have fewer recovery units than the bundle has volumes).
    pub per_volume_bytes: u64,
}

/// Largest unit `pack` chooses unless the payload needs larger ones ([`unit_size_for`]); a
/// reader holds one unit in memory while it checks it (FORMAT.md 17.3).
pub const MAX_UNIT_SIZE: u64 = 16 << 20;

/// Units a full volume should have, so that a volume's zero-padded last unit costs little and a
/// lost volume spreads over many stripes.
const UNITS_PER_VOLUME: u64 = 256;

/// Units a bundle should have at most (each is a signed digest in the manifest: 2^18 digests are
/// about 20 MB of manifest).
const MAX_UNITS: u64 = 1 << 18;

/// Largest `D` a chosen geometry has (a rebuild reads a stripe's `D` units).
const MAX_CHOSEN_DATA: u64 = 1024;

/// The parity unit `pack` uses, as the chunk size of a bundle with parity (FORMAT.md 17.4): the
/// largest power of two that gives a full volume of `volume_size` bytes (or the whole payload,
/// when it is smaller) at least 256 units, from 4096 bytes to [`MAX_UNIT_SIZE`], and at least
/// `payload / 2^18` (rounded up to a power of two) so a bundle of any size has a manifest of
/// bounded size. `payload` is an estimate (the model's size) for a payload not written yet.
pub fn unit_size_for(volume_size: u64, payload: u64) -> u64 {
    let volume = volume_size.min(payload).max(1);
    let fine = match volume / UNITS_PER_VOLUME {
        0 => 1,
        n => 1u64 << (63 - n.leading_zeros()),
    };
    let floor = payload.div_ceil(MAX_UNITS).max(1).next_power_of_two();
    fine.clamp(4096, MAX_UNIT_SIZE).max(floor).min(1 << 30)
}

impl Geometry {
    /// Chooses the geometry for the data `shape` and what the operator asked.
    ///
    /// For a percentage: among the geometries whose parity is within one point of it (all of
    /// them, when none is: a bundle too small for the unit), one that rebuilds a whole lost
    /// data volume where any does, then one within half a point, then the fewest data units
    /// per stripe (a rebuild reads a stripe), then the closest. For `N` volumes: the least
    /// parity that rebuilds any `N` lost data volumes, then the fewest data units per stripe;
    /// an error when the bundle has no more than `N` data volumes.
    pub fn choose_for(shape: &DataShape<'_>, ask: Ask) -> Result<Geometry, ParityError> {
        let units = shape.units();
        let volumes = shape.volume_units.len();
        let bad = |m: String| Err(ParityError::Geometry(m));
        match ask {
            Ask::Percent(p) if !(p > 0.0 && p <= 100.0) => {
                return bad(format!("parity of {p}% is not between 0 and 100"));
            }
            Ask::Volumes(0) => return bad("0 volumes asked".into()),
            Ask::Volumes(n) if n as usize >= volumes => {
                return bad(format!(
                    "parity that rebuilds {n} lost volume(s) of a bundle of {volumes} data volume(s) is a whole copy: cut the bundle into more volumes (--volume-size)"
                ));
            }
            _ => {}
        }
        if units == 0 {
            return bad("no data units".into());
        }
        // Every candidate: for each D, the R near the asked share and the R each volume count
        // needs.
        let target = match ask {
            Ask::Percent(p) => p / 100.0 * shape.bytes as f64 / shape.unit_size as f64,
            Ask::Volumes(_) => 0.0,
        };
        let mut largest_first = shape.volume_units.to_vec();
        largest_first.sort_unstable_by(|a, b| b.cmp(a));
        let mut best: Option<(Key, Geometry)> = None;
        for data in 1..=units.min(MAX_CHOSEN_DATA) as u32 {
            let probe = Geometry {
                unit_size: shape.unit_size,
                units,
                data,
                recovery: 1,
            };
            let stripes = probe.stripes();
            let mut rs: Vec<u32> = Vec::with_capacity(4);
            match ask {
                Ask::Percent(_) => {
                    let r = target / stripes as f64;
                    rs.push(r.floor().max(1.0).min(f64::from(MAX_UNITS_PER_STRIPE)) as u32);
                    rs.push(r.ceil().max(1.0).min(f64::from(MAX_UNITS_PER_STRIPE)) as u32);
                    if volumes > 1 {
                        rs.push(probe.needed_for(&largest_first, 1));
                    }
                }
                Ask::Volumes(n) => rs.push(probe.needed_for(&largest_first, n)),
            }
            for recovery in rs {
                let g = Geometry { recovery, ..probe };
                if g.validate().is_err() {
                    continue;
                }
                let pct = shape.percent(&g);
                let key = match ask {
                    Ask::Percent(p) => {
                        let error = (pct - p).abs();
                        let in_band = error <= 1.0 + 1e-9;
                        let survives = volumes > 1 && g.survives_volumes(&largest_first) >= 1;
                        Key(
                            !in_band,
                            in_band && !survives,
                            in_band && error > 0.5,
                            if in_band { 0.0 } else { error },
                            data,
                            error,
                        )
                    }
                    Ask::Volumes(_) => Key(false, false, false, pct, data, 0.0),
                };
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, g));
                }
            }
        }
        best.map(|(_, g)| g)
            .ok_or_else(|| ParityError::Geometry(format!("no geometry for {units} units")))
    }

    /// Recovery units per stripe that rebuild any `n` lost data volumes: the sum of the `n`
    /// largest `ceil(V / K)` (a run of `V` units puts at most that many in any stripe).
    /// `largest_first` is the volumes' unit counts, sorted from the largest.
    fn needed_for(&self, largest_first: &[u64], n: u32) -> u32 {
        let k = self.stripes();
        let sum: u64 = largest_first
            .iter()
            .take(n as usize)
            .map(|v| v.div_ceil(k))
            .sum();
        sum.clamp(1, u64::from(MAX_UNITS_PER_STRIPE)) as u32
    }

    /// How many lost data volumes, whichever they are, every stripe can rebuild
    /// (`largest_first` as for [`Geometry::needed_for`]).
    fn survives_volumes(&self, largest_first: &[u64]) -> u32 {
        let k = self.stripes();
        let mut sum = 0;
        let mut n = 0;
        for v in largest_first {
            sum += v.div_ceil(k);
            if sum > u64::from(self.recovery) {
                break;
            }
            n += 1;
        }
        n
    }

    /// What this geometry rebuilds for the data volumes `volume_units`, whatever the
    /// placement: a run of `L` units puts at most `ceil(L / K)` in any stripe, and a byte
    /// range of `(m - 1)` units' length touches at most `m` units.
    pub fn survives(&self, volume_units: &[u64]) -> Survives {
        let mut largest_first = volume_units.to_vec();
        largest_first.sort_unstable_by(|a, b| b.cmp(a));
        let kr = self.recovery_units();
        let per_volume_runs = u64::from(self.recovery) / (volume_units.len().max(1) as u64);
        Survives {
            volumes: self.survives_volumes(&largest_first),
            contiguous_bytes: kr.saturating_sub(1).saturating_mul(self.unit_size),
            per_volume_bytes: (self.stripes() * per_volume_runs)
                .saturating_sub(1)
                .saturating_mul(self.unit_size),
        }
    }
}

/// The order [`Geometry::choose_for`] prefers candidates in (smallest first): out of the band,
/// in the band but no whole volume rebuilt, more than half a point off, distance out of the
/// band (or the parity, for a volume count), data units per stripe, distance.
#[derive(PartialEq, PartialOrd)]
struct Key(bool, bool, bool, f64, u32, f64);

/// Reads a data unit's bytes: `(unit, offset, buf)`.
pub(crate) type ReadUnit<'a> = dyn FnMut(u64, u64, &mut [u8]) -> io::Result<()> + 'a;
/// Receives recovery bytes: `(r, offset, bytes)`.
pub(crate) type WriteRecovery<'a> = dyn FnMut(u32, u64, &[u8]) -> io::Result<()> + 'a;
/// Reads a shard of the stripe being rebuilt: `(shard, offset, buf)`.
pub(crate) type ReadShard<'a> = dyn FnMut(Shard, u64, &mut [u8]) -> io::Result<()> + 'a;
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
    StripeEncoder::new(g)?.encode(g, stripe, read, write)
}

/// The codec's work area and a slice buffer for the stripes of one geometry, kept from stripe
/// to stripe. A bundle has thousands of small stripes; making (and zero-filling) the work area
/// afresh for each cost more than encoding them.
pub struct StripeEncoder {
    enc: ReedSolomonEncoder,
    buf: Vec<u8>,
}

impl StripeEncoder {
    /// The work area for stripes of `g`, or [`ParityError::Memory`] if it cannot be had.
    pub fn new(g: &Geometry) -> Result<Self, ParityError> {
        let slice = g.slice_size();
        can_allocate(g.working_memory())?;
        Ok(StripeEncoder {
            enc: ReedSolomonEncoder::new(g.data as usize, g.recovery as usize, slice)
                .map_err(codec)?,
            buf: zeroed(slice)?,
        })
    }

    /// [`encode_stripe`] with this work area (made for `g`).
    pub fn encode(
        &mut self,
        g: &Geometry,
        stripe: u64,
        read: &mut ReadUnit<'_>,
        write: &mut WriteRecovery<'_>,
    ) -> Result<(), ParityError> {
        let slice = self.buf.len();
        debug_assert_eq!(slice, g.slice_size());
        let mut offset = 0u64;
        while offset < g.unit_size {
            for d in 0..g.data {
                match g.data_unit(stripe, d) {
                    Some(unit) => read(unit, offset, &mut self.buf)?,
                    None => self.buf.fill(0),
                }
                self.enc.add_original_shard(&self.buf).map_err(codec)?;
            }
            let result = self.enc.encode().map_err(codec)?;
            for (r, bytes) in result.recovery_iter().enumerate() {
                write(r as u32, offset, bytes)?;
            }
            offset += slice as u64;
        }
        Ok(())
    }
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

    /// The geometry for `units` units of `unit_size` in one volume at `percent`.
    fn choose(units: u64, unit_size: u64, percent: f64) -> Geometry {
        let shape = DataShape {
            unit_size,
            volume_units: &[units],
            bytes: units * unit_size,
        };
        Geometry::choose_for(&shape, Ask::Percent(percent)).unwrap()
    }

    fn fixture(units: u64, unit_size: u64, percent: f64) -> Fixture {
        let g = choose(units, unit_size, percent);
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
                let g = choose(units, 1 << 26, percent);
                g.validate().unwrap();
                let got = g.ratio() * 100.0;
                assert!(
                    (got - percent).abs() <= 1.0,
                    "{units} units at {percent}%: {g:?} gives {got:.2}%"
                );
            }
        }
    }

    /// A payload of `payload` bytes cut into volumes of `volume_size`, in units of the size
    /// `pack` chooses: (unit size, units per volume).
    fn cut(payload: u64, volume_size: u64) -> (u64, Vec<u64>) {
        let unit = unit_size_for(volume_size, payload);
        let mut left = payload;
        let mut units = Vec::new();
        while left > 0 {
            let v = left.min(volume_size);
            units.push(v.div_ceil(unit));
            left -= v;
        }
        (unit, units)
    }

    /// Every erased unit of the data volumes `lost` (indexes), per stripe, is within `R`.
    fn rebuilds(g: &Geometry, volume_units: &[u64], lost: &[usize]) -> bool {
        let mut first = 0;
        let mut per_stripe: HashMap<u64, u32> = HashMap::new();
        for (i, &n) in volume_units.iter().enumerate() {
            if lost.contains(&i) {
                for u in first..first + n {
                    *per_stripe.entry(g.locate(u).0).or_default() += 1;
                }
            }
            first += n;
        }
        per_stripe.values().all(|&e| e <= g.recovery)
    }

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// Issue 24: the unit follows the volume size (a volume is about 256 units), within 4 KiB
    /// to 16 MiB, and the unit count stays bounded for the largest bundles.
    #[test]
    fn the_unit_follows_the_volume_size() {
        assert_eq!(unit_size_for(16 * MIB, 128 * MIB), 64 << 10);
        assert_eq!(unit_size_for(100 * MIB, 286 * MIB), 256 << 10);
        assert_eq!(unit_size_for(u64::MAX, 4 * GIB), 16 * MIB);
        assert_eq!(unit_size_for(u64::MAX, 3 * MIB), 8 << 10);
        assert_eq!(unit_size_for(4096, 10_000), 4096);
        assert_eq!(unit_size_for(4 * GIB - 1, 300 * GIB), 8 * MIB);
        // 500 GiB in 16 MiB volumes: 2^18 units of 2 MiB, not 8 million of 64 KiB.
        assert_eq!(unit_size_for(16 * MIB, 500 * GIB), 2 * MIB);
        for (v, p) in [
            (16 * MIB, 500 * GIB),
            (u64::MAX, 900 * GIB),
            (4096, 10 * GIB),
        ] {
            assert!(p.div_ceil(unit_size_for(v, p)) <= MAX_UNITS, "{v} {p}");
        }
    }

    /// Issue 24: the percentage asked is the percentage written, within one point, for
    /// bundles from a few MiB to hundreds of GiB in the volume sizes operators use.
    #[test]
    fn the_share_asked_is_the_share_written_within_one_point() {
        for payload in [3 * MIB, 128 * MIB, 286 * MIB, 4 * GIB, 100 * GIB, 400 * GIB] {
            for volume in [16 * MIB, 100 * MIB, 700 * MIB, 4 * GIB - 1, u64::MAX] {
                if payload / volume.min(payload) > 5000 {
                    continue;
                }
                let (unit, units) = cut(payload, volume);
                let shape = DataShape {
                    unit_size: unit,
                    volume_units: &units,
                    bytes: payload,
                };
                for p in [1.0, 5.0, 10.0, 12.5, 25.0, 50.0, 100.0] {
                    let g = Geometry::choose_for(&shape, Ask::Percent(p)).unwrap();
                    let got = shape.percent(&g);
                    assert!(
                        (got - p).abs() <= 1.0,
                        "{payload} in volumes of {volume} at {p}%: {g:?} writes {got:.2}%"
                    );
                }
            }
        }
    }

    /// Issue 24's examples, scaled by the unit rule (the geometry depends on ratios only).
    #[test]
    fn ten_percent_over_ten_volumes_and_a_quarter_over_sixteen_mib_volumes_rebuild_a_volume() {
        // 10% over 10 or more volumes (the last one short) rebuilds any one lost volume.
        for (payload, volume) in [
            (10 * 100 * MIB, 100 * MIB),
            (1000 * MIB, 95 * MIB),
            (4 * GIB, 400 * MIB),
            (20 * GIB, 1024 * MIB),
        ] {
            let (unit, units) = cut(payload, volume);
            let shape = DataShape {
                unit_size: unit,
                volume_units: &units,
                bytes: payload,
            };
            let g = Geometry::choose_for(&shape, Ask::Percent(10.0)).unwrap();
            assert!(g.survives(&units).volumes >= 1, "{payload}/{volume}: {g:?}");
            for lost in 0..units.len() {
                assert!(rebuilds(&g, &units, &[lost]), "volume {lost} of {g:?}");
            }
        }
        // 25% on 16 MiB volumes of a 128 MiB model writes 20-27% and rebuilds any volume.
        let (unit, units) = cut(128 * MIB, 16 * MIB);
        let shape = DataShape {
            unit_size: unit,
            volume_units: &units,
            bytes: 128 * MIB,
        };
        let g = Geometry::choose_for(&shape, Ask::Percent(25.0)).unwrap();
        let got = shape.percent(&g);
        assert!((20.0..=27.0).contains(&got), "{got}");
        for lost in 0..units.len() {
            assert!(rebuilds(&g, &units, &[lost]));
        }
        // 10% of 3 volumes cannot: said so, not promised.
        let (unit, units) = cut(286 * MIB, 100 * MIB);
        let shape = DataShape {
            unit_size: unit,
            volume_units: &units,
            bytes: 286 * MIB,
        };
        let g = Geometry::choose_for(&shape, Ask::Percent(10.0)).unwrap();
        assert_eq!(g.survives(&units).volumes, 0);
        assert!(!rebuilds(&g, &units, &[0]));
    }

    /// `Nvol`: the least parity that rebuilds any `N` lost volumes, and what it promises holds.
    #[test]
    fn asking_for_volumes_gets_the_least_parity_that_rebuilds_them() {
        let (unit, units) = cut(286 * MIB, 100 * MIB);
        let shape = DataShape {
            unit_size: unit,
            volume_units: &units,
            bytes: 286 * MIB,
        };
        let g = Geometry::choose_for(&shape, Ask::Volumes(1)).unwrap();
        assert!(g.survives(&units).volumes >= 1);
        for lost in 0..3 {
            assert!(rebuilds(&g, &units, &[lost]));
        }
        // About one volume's share (100 of 286 MiB), not twice it.
        let got = shape.percent(&g);
        assert!((34.0..=38.0).contains(&got), "{got}");
        let (unit, units) = cut(2 * GIB, 100 * MIB);
        let shape = DataShape {
            unit_size: unit,
            volume_units: &units,
            bytes: 2 * GIB,
        };
        let g = Geometry::choose_for(&shape, Ask::Volumes(2)).unwrap();
        assert!(g.survives(&units).volumes >= 2, "{g:?}");
        for a in 0..units.len() {
            for b in a + 1..units.len() {
                assert!(rebuilds(&g, &units, &[a, b]), "{a} and {b} of {g:?}");
            }
        }
        assert!(shape.percent(&g) < 12.0, "{}", shape.percent(&g));
        // As many volumes as the bundle has: refused, with the way out.
        let e = Geometry::choose_for(&shape, Ask::Volumes(units.len() as u32)).unwrap_err();
        assert!(e.to_string().contains("--volume-size"), "{e}");
    }

    /// What `survives` promises holds for every placement of the damage it names.
    #[test]
    fn the_promise_holds_for_every_placement() {
        for (payload, volume, p) in [
            (5 * MIB, 512 << 10, 10.0),
            (7 * MIB, 600 << 10, 25.0),
            (3 * MIB, 3 * MIB, 10.0),
            (9 * MIB, MIB, 50.0),
        ] {
            let (unit, units) = cut(payload, volume);
            let shape = DataShape {
                unit_size: unit,
                volume_units: &units,
                bytes: payload,
            };
            let g = Geometry::choose_for(&shape, Ask::Percent(p)).unwrap();
            let s = g.survives(&units);
            let n = s.volumes as usize;
            if n >= 1 {
                for lost in 0..units.len() {
                    let set: Vec<usize> = (lost..lost + n).map(|i| i % units.len()).collect();
                    assert!(rebuilds(&g, &units, &set), "{set:?} of {g:?}");
                }
            }
            // Contiguous damage of that length anywhere in the data touches at most `m`
            // units in a row, and no stripe gets more than R of them.
            let m = (s.contiguous_bytes.div_ceil(unit) + 1).min(g.units);
            for start in 0..g.units - m + 1 {
                let mut per: HashMap<u64, u32> = HashMap::new();
                for u in start..start + m {
                    *per.entry(g.locate(u).0).or_default() += 1;
                }
                assert!(per.values().all(|&e| e <= g.recovery), "{s:?} {g:?}");
            }
        }
    }

    #[test]
    fn every_data_unit_has_exactly_one_place() {
        let g = choose(103, 4096, 10.0);
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
