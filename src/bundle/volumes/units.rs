//! Parity units (FORMAT.md section 17): [`UnitReader`] reads and checks the units of a
//! bundle with parity, each from its volume or rebuilt from the others of its stripe.

use std::io;

use sha2::{Digest, Sha256};

use super::source::*;
use crate::manifest::units::UnitLayout;
use crate::manifest::{self, Manifest};
use crate::parity::{self, Geometry, ParityError, Shard};

/// Unit-by-unit access to a bundle with parity (FORMAT.md section 17.3): which data and
/// recovery units are intact (their signed chunk digest matches; a missing or short volume
/// erases its units), whether a stripe can be rebuilt, and rebuilt bytes of an erased unit,
/// slice by slice. A unit's state is found once (by hashing it) and remembered.
pub struct UnitReader<'a> {
    pub(super) m: &'a Manifest,
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

    pub(super) fn parity_volumes(&self) -> &'a [manifest::Volume] {
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
    pub(crate) fn read_recovery(&self, n: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (j, start) = self.layout.recovery_unit(n);
        self.source
            .read_at(&self.parity_volumes()[j].name, start + offset, buf)
    }

    /// The signed digest and real length of a unit.
    pub(super) fn digest(&self, recovery: bool, n: u64) -> (&'a str, u64) {
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
