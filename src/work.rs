//! Splitting a list of files to hash into units of parallel work, by count and by bytes.
//!
//! A file's SHA-256 is one sequential pass, so the most a pass over many files can do is hash
//! several files at once. Fixed runs of N files (`check` used runs of 256) keep a million small
//! files cheap to hand out, but put a model of a few large shards, every LLM, in one run on one
//! core (issue 37). A unit here ends at [`UNIT_FILES`] files or [`UNIT_BYTES`] bytes, so each
//! large file is a unit of its own and the small ones still travel in runs; [`map_units`] makes
//! every unit its own task, so no unit waits behind another while a core is idle.

use std::ops::Range;

use rayon::prelude::*;

/// At most this many files in a unit: enough that handing out a unit costs little next to
/// opening and hashing its files.
pub const UNIT_FILES: usize = 256;

/// At most this many bytes in a unit of several files; a file this large or larger is a unit of
/// its own. About 10 ms of hashing on one core: small next to a shard, large next to the cost
/// of a task.
pub const UNIT_BYTES: u64 = 16 << 20;

/// The units of a list of files with `sizes` (in list order): consecutive runs of at most
/// `max_files` files whose sizes add up to at most `max_bytes`, a file larger than that alone.
/// The runs cover the list in order, without gaps; none is empty.
pub fn units(
    sizes: impl IntoIterator<Item = u64>,
    max_files: usize,
    max_bytes: u64,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    let mut end = 0;
    for size in sizes {
        let files = end - start;
        if files > 0 && (files >= max_files || bytes.saturating_add(size) > max_bytes) {
            out.push(start..end);
            start = end;
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
        end += 1;
    }
    if end > start {
        out.push(start..end);
    }
    out
}

/// `run` applied to the items of each unit, every unit its own task on rayon's pool; the
/// results in unit order.
pub fn map_units<'a, T, R, F>(items: &'a [T], units: &[Range<usize>], run: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(&'a [T]) -> R + Sync + Send,
{
    units
        .par_iter()
        // One unit a task: rayon's own split of the list would stop at runs of a few units,
        // each run sequential, so two large files could share a core while the other idles.
        .with_max_len(1)
        .map(|u| run(&items[u.clone()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn each_large_file_is_a_unit_and_small_files_are_grouped() {
        // A model as an LLM ships: config, four shards, index, tokenizer.
        let sizes = [76, 256 * MIB, 256 * MIB, 256 * MIB, 256 * MIB, 310, 585_802];
        let u = units(sizes, UNIT_FILES, UNIT_BYTES);
        assert_eq!(u, vec![0..1, 1..2, 2..3, 3..4, 4..5, 5..7]);
    }

    #[test]
    fn small_files_go_in_runs_of_the_file_limit() {
        let u = units(std::iter::repeat_n(512, 1000), 256, UNIT_BYTES);
        assert_eq!(u, vec![0..256, 256..512, 512..768, 768..1000]);
    }

    #[test]
    fn a_run_ends_at_the_byte_limit() {
        // 6 MiB files: two fit in 16 MiB, a third would not.
        let u = units([6 * MIB; 5], UNIT_FILES, UNIT_BYTES);
        assert_eq!(u, vec![0..2, 2..4, 4..5]);
        // A file of exactly the limit fills its unit; files before and after go elsewhere.
        let u = units([1, UNIT_BYTES, 1, 1], UNIT_FILES, UNIT_BYTES);
        assert_eq!(u, vec![0..1, 1..2, 2..4]);
    }

    #[test]
    fn units_cover_the_list_in_order() {
        assert!(units([], UNIT_FILES, UNIT_BYTES).is_empty());
        assert_eq!(units([0], UNIT_FILES, UNIT_BYTES), vec![0..1]);
        // Empty files cost nothing in bytes but count as files; huge sizes do not overflow.
        let sizes = [0, u64::MAX, u64::MAX, 0, 0, 3];
        let u = units(sizes, 2, UNIT_BYTES);
        assert_eq!(u, vec![0..1, 1..2, 2..3, 3..5, 5..6]);
        // Counted by files alone.
        assert_eq!(units([MIB << 10; 3], 2, u64::MAX), vec![0..2, 2..3]);
    }

    #[test]
    fn map_units_keeps_the_unit_order() {
        let items: Vec<u32> = (0..1000).collect();
        let u = units(std::iter::repeat_n(1, items.len()), 7, u64::MAX);
        let sums = map_units(&items, &u, |run| (run[0], run.len()));
        let mut next = 0;
        for (first, len) in sums {
            assert_eq!(first, next);
            next += len as u32;
        }
        assert_eq!(next, 1000);
    }
}
