//! The bucket of a sample, by table: the shared windows' record path
//! without the mapping's floating-point arithmetic.
//!
//! A shared window keys a sample of `v` ns by its mapping
//! ([`IndexMapping::index_u64`](crate::mapping::IndexMapping::index_u64))
//! and clamps the key into its 1 024 buckets. That is a conversion to
//! `f64`, two range comparisons, the cubic polynomial and a floor: about
//! 35 instructions, most of what publishing a sample costs. The bucket only
//! steps up with `v` (the mapping is monotonic), one step every 2 α or so
//! of relative width, so the table cuts each octave `[2ᵉ, 2ᵉ⁺¹)` into 64
//! cells of equal width (at most 1.6 % of relative width each) and keeps,
//! for each cell, the bucket of its first value and the first value of the
//! next bucket, if the cell reaches it. A look-up is a leading-zero count,
//! a shift, two loads and a comparison, and gives exactly the mapping's
//! bucket: every entry is the mapping's own answer at the cell's ends and
//! at its split, found by search when the table is built (from the
//! mapping's lower bound of the bucket, a few look-ups a cell). Cells that
//! span three buckets or more (mappings finer than α ≈ 0.8 %), and values
//! outside the table's 32 octaves (below 256 ns at the defaults, where
//! every sample shares the first bucket anyway, or past the range's end),
//! go to the mapping as before. The table takes 20 KiB of the hedger.

/// Octaves the table covers, ending at the octave of the range's last key.
const OCTAVES: usize = 32;

/// Cells an octave: `2^CELL_BITS`.
const CELL_BITS: u32 = 6;
const CELLS: usize = 1 << CELL_BITS;

/// The entry of a cell the table does not answer.
const SLOW: u16 = u16::MAX;

/// The bucket of every sample in 32 octaves; see the module docs. 20 KiB.
#[derive(Clone, Debug)]
pub(crate) struct SlotTable {
    /// The octave (`⌊log₂ v⌋`) of the first cell; at least `CELL_BITS`.
    first: u32,
    /// Each cell's bucket at its first value, or [`SLOW`].
    starts: [u16; OCTAVES * CELLS],
    /// The first value of each cell in the bucket after its first one
    /// (`u64::MAX`: none in the cell).
    splits: [u64; OCTAVES * CELLS],
}

impl SlotTable {
    /// The table of `slot` (the window's bucket of a sample, `None` for the
    /// zero bucket; monotonic where `Some`, as the mapping is), for
    /// buckets below `u16::MAX`, whose last octave is that of `top` (the
    /// largest sample the window keys). `guess` estimates the first value
    /// of a bucket (the mapping's lower bound): where a bucket starts is
    /// searched from there, so a good guess makes building the table a
    /// few thousand look-ups; a wrong one only makes it slower.
    pub(crate) fn new(
        top: u64,
        slot: impl Fn(u64) -> Option<usize>,
        guess: impl Fn(usize) -> u64,
    ) -> Self {
        let last = top.checked_ilog2().unwrap_or(0);
        // The `OCTAVES` octaves ending at `last`, none below `CELL_BITS`
        // (a cell is at least one value wide).
        let first = last.saturating_sub(OCTAVES_BACK).max(CELL_BITS);
        let mut table = Self {
            first,
            starts: [SLOW; OCTAVES * CELLS],
            splits: [u64::MAX; OCTAVES * CELLS],
        };
        let entries = table.starts.iter_mut().zip(table.splits.iter_mut());
        for ((start, split), (octave, cell)) in entries.zip(cells(first)) {
            if let Some(entry) = Self::cell(octave, cell, &slot, &guess) {
                (*start, *split) = entry;
            }
        }
        table
    }

    /// The entry of cell `cell` of octave `octave`: the bucket of its
    /// first value and the first value in the next bucket; `None` if the
    /// cell has a sample of the zero bucket or spans more than two buckets.
    fn cell(
        octave: u32,
        cell: u64,
        slot: &impl Fn(u64) -> Option<usize>,
        guess: &impl Fn(usize) -> u64,
    ) -> Option<(u16, u64)> {
        let (from, to) = bounds(octave, cell);
        let (first, last) = (slot(from)?, slot(to)?);
        let start = u16::try_from(first).ok().filter(|&s| s != SLOW)?;
        if last == first {
            // `u64::MAX` itself would read as past the split: the cell
            // that holds it goes to the mapping.
            return (to != u64::MAX).then_some((start, u64::MAX));
        }
        if last != first.wrapping_add(1) {
            return None;
        }
        // The first value whose bucket is `last` lies in `(from, to]`
        // (`to > from`: the cell holds two buckets). Bracketed by steps
        // doubling away from the guess, then bisected; `below` is always
        // in `first`'s bucket, `at` in `last`'s.
        let next = |v: u64| slot(v).map(|s| s > first);
        let lowest = from.wrapping_add(1);
        // Not `clamp`, which panics on bounds out of order (`lowest ≤ to`
        // here, but not by type).
        let mut probe = guess(last).max(lowest).min(to);
        let (mut below, mut at) = (from, to);
        let mut step = 1u64;
        if next(probe)? {
            at = probe;
            while probe > lowest.max(below) {
                probe = at.saturating_sub(step).max(lowest);
                if next(probe)? {
                    at = probe;
                } else {
                    below = probe;
                    break;
                }
                step = step.saturating_mul(2);
            }
        } else {
            below = probe;
            while probe < at {
                probe = below.saturating_add(step).min(at);
                if next(probe)? {
                    at = probe;
                    break;
                }
                below = probe;
                step = step.saturating_mul(2);
            }
        }
        // `below < at` throughout: no wrap.
        while at.wrapping_sub(below) > 1 {
            let mid = below.wrapping_add(at.wrapping_sub(below) / 2);
            if next(mid)? {
                at = mid;
            } else {
                below = mid;
            }
        }
        Some((start, at))
    }

    /// The bucket of `v` (`None`: the zero bucket), by the table where it
    /// answers, else by `slot` (the function it was built from).
    #[inline(always)]
    pub(crate) fn slot(&self, v: u64, slot: impl FnOnce(u64) -> Option<usize>) -> Option<usize> {
        // `v = 0` has no octave: it wraps far past the table.
        let octave = 63u32.wrapping_sub(v.leading_zeros());
        let o = octave.wrapping_sub(self.first) as usize;
        if o < OCTAVES {
            // `octave ≥ first ≥ CELL_BITS`: the shift is in range, and the
            // cell below `OCTAVES · CELLS` (no wrap).
            let within = (v >> octave.wrapping_sub(CELL_BITS)) as usize & (CELLS - 1);
            let cell = o.wrapping_mul(CELLS).wrapping_add(within);
            if let (Some(&start), Some(&split)) = (self.starts.get(cell), self.splits.get(cell)) {
                if start != SLOW {
                    // `start < u16::MAX`: no wrap.
                    return Some(usize::from(start).wrapping_add(usize::from(v >= split)));
                }
            }
        }
        slot(v)
    }
}

/// `OCTAVES − 1`: the table's first octave is this many below its last.
const OCTAVES_BACK: u32 = OCTAVES as u32 - 1;

/// The octave and cell of each entry of a table whose first octave is
/// `first`, in order, up to the octave of `u64::MAX`.
fn cells(first: u32) -> impl Iterator<Item = (u32, u64)> {
    (first..=63)
        .flat_map(|octave| (0..CELLS as u64).map(move |cell| (octave, cell)))
        .take(OCTAVES * CELLS)
}

/// The first and last value of cell `cell` (below `CELLS`) of octave
/// `octave` (from `CELL_BITS` to 63).
fn bounds(octave: u32, cell: u64) -> (u64, u64) {
    let width = 1u64.wrapping_shl(octave.wrapping_sub(CELL_BITS));
    // Within the octave: no overflow.
    let from = 1u64.wrapping_shl(octave) | cell.wrapping_mul(width);
    (from, from.wrapping_add(width.wrapping_sub(1)))
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::mapping::{CubicMapping, IndexMapping, LogLinearMapping, LogarithmicMapping};
    use proptest::prelude::*;

    /// A window's bucket of a sample under `mapping`, as `Params` computes
    /// it: the key clamped into 1 024 buckets ending at `top`'s.
    fn window_slot(mapping: &impl IndexMapping, top: u64) -> impl Fn(u64) -> Option<usize> + '_ {
        let low = i64::from(mapping.index_u64(top).unwrap_or(0)) - 1023;
        move |v| {
            mapping
                .index_u64(v)
                .map(|k| (i64::from(k) - low).clamp(0, 1023) as usize)
        }
    }

    /// The mapping's lower bound of a window's bucket.
    fn window_guess(mapping: &impl IndexMapping, top: u64) -> impl Fn(usize) -> u64 + '_ {
        let low = i64::from(mapping.index_u64(top).unwrap_or(0)) - 1023;
        move |s| mapping.lower_bound((low + s as i64) as i32).ceil() as u64
    }

    /// Every cell's ends, split and neighbours answer as the mapping does,
    /// whatever the guess (the mapping's bound, or nothing useful).
    fn check_cells(mapping: &impl IndexMapping, top: u64) -> usize {
        let slot = window_slot(mapping, top);
        let table = SlotTable::new(top, &slot, window_guess(mapping, top));
        if !cfg!(miri) {
            let blind = SlotTable::new(top, &slot, |_| 0);
            assert_eq!((blind.starts, blind.splits), (table.starts, table.splits));
        }
        let mut answered = 0;
        let entries = table.starts.iter().zip(&table.splits);
        for ((&start, &split), (octave, cell)) in entries.zip(cells(table.first)) {
            let (from, to) = bounds(octave, cell);
            let mut probes = std::vec![from, to, from.saturating_sub(1), to.saturating_add(1)];
            if split != u64::MAX {
                probes.extend([split - 1, split]);
            }
            for v in probes {
                assert_eq!(table.slot(v, &slot), slot(v), "{v} ns");
            }
            answered += usize::from(start != SLOW);
        }
        answered
    }

    #[test]
    fn the_default_table_answers_its_cells_as_the_mapping() {
        let mapping = CubicMapping::new(0.01).unwrap();
        let answered = check_cells(&mapping, 600_000_000_000);
        // All 32 octaves answered, 256 ns to 1 100 s.
        assert_eq!(answered, OCTAVES * CELLS);
        let top = 600_000_000_000;
        let table = SlotTable::new(top, window_slot(&mapping, top), window_guess(&mapping, top));
        assert_eq!(table.first, 8);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "plain arithmetic, checked natively: a dozen tables take many minutes under Miri"
    )]
    fn coarse_and_fine_mappings_answer_as_the_mapping() {
        for alpha in [0.001, 0.005, 0.02, 0.05, 0.2] {
            check_cells(&CubicMapping::new(alpha).unwrap(), 600_000_000_000);
            check_cells(&LogarithmicMapping::new(alpha).unwrap(), 10_000_000_000);
        }
        check_cells(
            &LogLinearMapping::with_bits(5, 0).unwrap(),
            3_600_000_000_000,
        );
        // A range ending low: the table starts at 64 ns.
        check_cells(&CubicMapping::new(0.01).unwrap(), 5_000);
        // And one ending at the top of `u64`.
        check_cells(&CubicMapping::new(0.01).unwrap(), u64::MAX);
    }

    #[test]
    fn zero_and_the_ends_of_u64() {
        let mapping = CubicMapping::new(0.01).unwrap();
        let top = 600_000_000_000;
        let slot = window_slot(&mapping, top);
        let table = SlotTable::new(top, &slot, window_guess(&mapping, top));
        for v in [0, 1, 63, 64, 255, 256, u64::MAX - 1, u64::MAX] {
            assert_eq!(table.slot(v, &slot), slot(v), "{v} ns");
        }
    }

    proptest! {
        #[test]
        fn any_sample_is_keyed_as_by_the_mapping(
            v in prop_oneof![any::<u64>(), 0u64..10_000_000_000],
            alpha in 0.002f64..0.1,
            top_shift in 10u32..64,
        ) {
            let mapping = CubicMapping::new(alpha).unwrap();
            let top = u64::MAX >> (64 - top_shift);
            let slot = window_slot(&mapping, top);
            let table = SlotTable::new(top, &slot, window_guess(&mapping, top));
            prop_assert_eq!(table.slot(v, &slot), slot(v));
        }
    }
}
