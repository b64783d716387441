//! The damage map (issue 25 item 13): the state of every unit of every volume of a damaged
//! bundle (intact, damaged, rebuildable from parity, beyond repair, or for a repair taken from
//! another copy), for a display that draws one row per volume. A list of byte ranges over 40
//! volumes is hard to read; the map shows where the damage is and what parity makes of it.
//!
//! A unit is a chunk (FORMAT.md sections 6 and 17): a data volume's row has one state per
//! chunk, a parity volume's one per recovery unit. This module computes; drawing (the terminal
//! width, the legend, falling back to the list) is the command layer's.

use std::collections::BTreeMap;

use super::open::BundleDir;
use super::volumes::{self, DirVolumes, Repairability, UnitReader, VolumeProblem};
use crate::manifest::{Manifest, Volume};

/// What became of one unit, from best to worst (a cell showing several units shows the worst).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnitState {
    /// Its signed digest matches.
    Intact,
    /// Damaged here, intact in another copy (`repair --from`).
    FromCopy,
    /// Damaged, and its stripe has parity enough to rebuild it.
    Rebuildable,
    /// Damaged, in a bundle without parity: the volume must be copied again.
    Damaged,
    /// Damaged, and its stripe lost more units than its parity rebuilds.
    BeyondRepair,
}

/// One volume's row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VolumeRow {
    /// The volume's name (`data.003`, `parity.000`).
    pub name: String,
    /// Whether it is a parity volume.
    pub parity: bool,
    /// The state of each of its units (chunks), in order.
    pub units: Vec<UnitState>,
}

impl VolumeRow {
    /// Whether every unit is intact.
    pub fn intact(&self) -> bool {
        self.units.iter().all(|s| *s == UnitState::Intact)
    }
}

/// Every volume's row, data volumes first, and the unit size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DamageMap {
    /// Bytes per unit (the chunk size).
    pub unit_size: u64,
    /// One row per volume, in manifest order, data then parity.
    pub rows: Vec<VolumeRow>,
}

impl DamageMap {
    /// A map where every unit is intact, to be marked.
    pub fn intact(m: &Manifest) -> Self {
        let row = |v: &Volume, parity: bool| VolumeRow {
            name: v.name.clone(),
            parity,
            units: vec![UnitState::Intact; v.chunks.len()],
        };
        DamageMap {
            unit_size: m.chunk_size,
            rows: m
                .volumes
                .iter()
                .map(|v| row(v, false))
                .chain(
                    m.parity
                        .iter()
                        .flat_map(|p| p.volumes.iter().map(|v| row(v, true))),
                )
                .collect(),
        }
    }

    /// The row of the volume called `name`.
    pub fn row_mut(&mut self, name: &str) -> Option<&mut VolumeRow> {
        self.rows.iter_mut().find(|r| r.name == name)
    }

    /// Whether any unit is not intact.
    pub fn damaged(&self) -> bool {
        self.rows.iter().any(|r| !r.intact())
    }
}

/// The damage found by checking the volumes (`data` and `parity`, the problems of
/// [`volumes::check_volumes`] and [`volumes::check_parity_volumes`]): with parity, its
/// assessment against the parity budget and the map of what is rebuildable; without, no
/// assessment and the map of the damaged chunks (a volume missing or of the wrong size is
/// damaged throughout). Units of damaged volumes are read and hashed once.
pub fn assess(
    opened: &BundleDir,
    data: &[VolumeProblem],
    parity: &[VolumeProblem],
) -> (Option<Repairability>, DamageMap) {
    let m = &opened.manifest;
    let mut map = DamageMap::intact(m);
    let source = DirVolumes::of(opened, &crate::progress::Silent);
    let Some(ur) = UnitReader::new(m, &source) else {
        for p in data.iter().chain(parity) {
            let cs = m.chunk_size;
            let Some(row) = map.row_mut(&p.volume) else {
                continue;
            };
            for (c, state) in row.units.iter_mut().enumerate() {
                let (start, end) = (c as u64 * cs, (c as u64 + 1) * cs);
                let bad = p.bad_ranges.is_empty()
                    || p.bad_ranges.iter().any(|&(a, b)| a < end && start < b);
                if bad {
                    *state = UnitState::Damaged;
                }
            }
        }
        return (None, map);
    };
    let r = volumes::assess_with(&ur, data, parity);
    // The states are remembered by the unit reader: nothing is hashed again here.
    let g = ur.g;
    let mut erased: BTreeMap<u64, u32> = BTreeMap::new();
    let mut lost: Vec<(String, usize, u64)> = Vec::new();
    for p in data {
        for c in 0..m.volumes[p.index].chunks.len() {
            let u = ur.layout.unit_of_chunk(p.index, c);
            if !ur.intact(false, u) {
                let (k, _) = g.locate(u);
                *erased.entry(k).or_default() += 1;
                lost.push((p.volume.clone(), c, k));
            }
        }
    }
    let parity_volumes = m.parity.as_ref().map_or(&[][..], |p| &p.volumes[..]);
    for p in parity {
        for c in 0..parity_volumes[p.index].chunks.len() {
            let n = ur.layout.recovery_of_chunk(p.index, c);
            if !ur.intact(true, n) {
                let k = n / u64::from(g.recovery);
                *erased.entry(k).or_default() += 1;
                lost.push((p.volume.clone(), c, k));
            }
        }
    }
    for (name, c, k) in lost {
        if let Some(row) = map.row_mut(&name) {
            row.units[c] = if erased[&k] > g.recovery {
                UnitState::BeyondRepair
            } else {
                UnitState::Rebuildable
            };
        }
    }
    (Some(r), map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_shows_the_worst_of_its_units() {
        use UnitState::*;
        let states = [Intact, FromCopy, Rebuildable, Damaged, BeyondRepair];
        for (i, a) in states.iter().enumerate() {
            for b in &states[i..] {
                assert_eq!(a.max(b), b);
            }
        }
    }
}
