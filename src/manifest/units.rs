//! Where each parity unit of a bundle lives (FORMAT.md section 17.2), from the manifest's
//! volume sizes alone: what the parity writer (`pack::parity`), the reader (`bundle::volumes`)
//! and `copy` share, so the writer needs nothing of the reader.

use super::{Manifest, Volume};

/// Where each parity unit lives (FORMAT.md section 17.2): data unit `u` is chunk `c` of data
/// volume `i` (units numbered over the volumes in order), recovery unit `n` is chunk
/// `n - first` of the parity volume holding it.
#[derive(Clone, Debug)]
pub struct UnitLayout {
    chunk_size: u64,
    /// For each data volume: its first unit and its size.
    data: Vec<(u64, u64)>,
    /// For each parity volume: its first recovery unit.
    parity: Vec<u64>,
}

impl UnitLayout {
    /// The layout of `data` and `parity` volumes (their sizes and chunk counts).
    pub fn new(chunk_size: u64, data: &[Volume], parity: &[Volume]) -> Self {
        let mut first = 0;
        let data = data
            .iter()
            .map(|v| {
                let here = first;
                first += v.size.div_ceil(chunk_size);
                (here, v.size)
            })
            .collect();
        let mut first = 0;
        let parity = parity
            .iter()
            .map(|v| {
                let here = first;
                first += v.size / chunk_size;
                here
            })
            .collect();
        UnitLayout {
            chunk_size,
            data,
            parity,
        }
    }

    /// The layout of an opened bundle with parity (empty parity otherwise).
    pub fn of(m: &Manifest) -> Self {
        let parity = m.parity.as_ref().map_or(&[][..], |p| &p.volumes[..]);
        UnitLayout::new(m.chunk_size, &m.volumes, parity)
    }

    /// Data unit `u`: its volume, its byte offset there and its real length (the last chunk of
    /// a volume may be short; the unit is zero-padded past it).
    pub fn data_unit(&self, u: u64) -> (usize, u64, u64) {
        let i = self.data.partition_point(|(first, _)| *first <= u) - 1;
        let (first, size) = self.data[i];
        let start = (u - first) * self.chunk_size;
        (i, start, (size - start).min(self.chunk_size))
    }

    /// The data unit at chunk `c` of data volume `i`.
    pub fn unit_of_chunk(&self, i: usize, c: usize) -> u64 {
        self.data[i].0 + c as u64
    }

    /// Recovery unit `n` (in the order of section 17.2): its parity volume and byte offset.
    pub fn recovery_unit(&self, n: u64) -> (usize, u64) {
        let j = self.parity.partition_point(|first| *first <= n) - 1;
        (j, (n - self.parity[j]) * self.chunk_size)
    }

    /// The recovery unit at chunk `c` of parity volume `j`.
    pub fn recovery_of_chunk(&self, j: usize, c: usize) -> u64 {
        self.parity[j] + c as u64
    }
}
