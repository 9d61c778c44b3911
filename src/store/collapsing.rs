//! The collapsing store: `N` counters as a ring over the occupied keys.

use super::{probe, Store, StoreCollapse, MAX_CAPACITY};
use core::cmp::{max, min};
use core::fmt;
use core::marker::PhantomData;
use core::ops::Range;

/// Which side gives way when the keys seen span more than the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Collapse {
    /// Fold the lowest keys (smallest magnitudes): high quantiles stay exact.
    Lowest,
    /// Fold the highest keys (largest magnitudes): low quantiles stay exact.
    Highest,
}

/// A type-level [`Collapse`] choice: [`Lowest`] or [`Highest`].
pub trait CollapseSide: Copy + fmt::Debug + Default {
    /// The side this marker stands for.
    const SIDE: Collapse;
}

/// Marker: collapse the lowest keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lowest;
/// Marker: collapse the highest keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Highest;

impl CollapseSide for Lowest {
    const SIDE: Collapse = Collapse::Lowest;
}
impl CollapseSide for Highest {
    const SIDE: Collapse = Collapse::Highest;
}

/// `N` counters used as a ring over the occupied keys, collapsing on side `S`.
///
/// Key `k` lives in slot `k mod N`, so the occupied range can grow in either
/// direction without moving a counter: adding a key is a range check, a mask
/// and a saturating add, and a key beyond the range only widens it. When
/// the keys seen span more than `N`, the store *collapses* on side `S`.
///
/// Use it through [`CollapsingLowestStore`](super::CollapsingLowestStore) or
/// [`CollapsingHighestStore`](super::CollapsingHighestStore). Takes
/// `4 · N + 32` bytes; a capacity that is a power of two makes the slot a
/// mask instead of a division by a constant.
#[derive(Clone, Debug)]
pub struct CollapsingStore<const N: usize, S> {
    counts: [u32; N],
    /// The lowest key of the occupied range (meaningless while `span == 0`).
    low: i32,
    /// Keys in the occupied range `low .. low + span`, at most `N`. Every
    /// non-zero counter is in it, every counter outside it is zero, and its
    /// two ends are non-zero. The range never reaches past `i32::MAX`.
    span: u32,
    total: u64,
    saturated: u64,
    /// Samples folded into the edge bucket from other keys; non-zero exactly
    /// when the store has collapsed (a collapse always folds a sample).
    collapsed: u64,
    side: PhantomData<S>,
}

/// Counters read a step when walking for a rank (eight vector loads); the
/// chunk where the rank lies is then read [`STEP`] counters a step, and the
/// step where it lies one counter at a time. Measured on lognormal data
/// against 16, 32 or 64 a step with or without a second level: the fastest
/// at p50, p90 and p99 taken together.
const CHUNK: usize = 32;
/// See [`CHUNK`].
const STEP: usize = 8;

// Integer arithmetic in this file never overflows, for three reasons the
// comments below cite:
// * keys are `i32`s and ranges at most `N <= 2^24` wide, so sums and
//   differences of a few of them, done in `i64`, stay far inside its range;
//   the `saturating_*` forms used for them never saturate;
// * slots and offsets into the range are `< N <= 2^24`;
// * counts are `u32`s, so a sum of at most `N` of them, in `u64`, is below
//   `2^56`.

impl<const N: usize, S: CollapseSide> CollapsingStore<N, S> {
    const VALID: () = assert!(
        N > 0 && N <= MAX_CAPACITY,
        "capacity must be in 1..=MAX_CAPACITY"
    );
    /// `N` as a key distance; exact because `N <= 2^24`.
    const SPAN: i64 = N as i64;
    /// The key distance from the lowest key of a full range to its highest.
    const REACH: i64 = Self::SPAN.saturating_sub(1);

    /// An empty store.
    pub const fn new() -> Self {
        let () = Self::VALID;
        Self {
            counts: [0; N],
            low: 0,
            span: 0,
            total: 0,
            saturated: 0,
            collapsed: 0,
            side: PhantomData,
        }
    }

    /// The slot of `key`: `key mod N`.
    #[inline(always)]
    fn slot(key: i32) -> usize {
        if N.is_power_of_two() {
            // `N` divides `2^32`, so the two's complement bits of `key` are
            // already right modulo `N`.
            (key as u32 as usize) & N.wrapping_sub(1)
        } else {
            // `N >= 1`: the remainder exists and lies in `0 .. N`.
            i64::from(key).checked_rem_euclid(Self::SPAN).unwrap_or(0) as usize
        }
    }

    /// Whether `key` lies in the occupied range.
    #[inline(always)]
    fn holds(&self, key: i32) -> bool {
        // Read as unsigned, keys below `low` wrap to at least `span` (the
        // range never reaches past `i32::MAX`).
        (key.wrapping_sub(self.low) as u32) < self.span
    }

    /// The highest key of the occupied range (`span > 0`).
    fn high(&self) -> i32 {
        // `span <= 2^24`, and the range ends at or below `i32::MAX`.
        self.low.wrapping_add(self.span as i32).wrapping_sub(1)
    }

    /// The occupied range's slots in key order: one run, or two when it
    /// wraps around the end of the array.
    fn runs(&self) -> [Range<usize>; 2] {
        Self::runs_of(self.low, self.span)
    }

    /// The slots of the keys `low .. low + span` (`span <= N`) in key order.
    fn runs_of(low: i32, span: u32) -> [Range<usize>; 2] {
        let start = Self::slot(low);
        // `start < N` and `span <= N`: the sums stay below `2 N`.
        let end = start.wrapping_add(span as usize);
        if end <= N {
            [start..end, 0..0]
        } else {
            [start..N, 0..end.wrapping_sub(N)]
        }
    }

    /// Adds `count` at `slot`, saturating.
    ///
    /// Every caller passes a slot it has just masked (`Self::slot`). One
    /// `add_at` shared by all paths, on a slot chosen among several, hid
    /// from the compiler that the counter cannot alias the sketch's other
    /// fields: a loop of adds then read the mapping's constants from memory
    /// on every value (measured here: 5.1 against 3.2 ns a value at best).
    #[inline(always)]
    fn add_at(&mut self, slot: usize, count: u32) {
        if let Some(c) = self.counts.get_mut(slot) {
            // Add first and look at the carry: on x86-64 one add to memory
            // and a jump, against a load, a test, an add and a store.
            let (sum, carried) = c.overflowing_add(count);
            *c = sum;
            if carried {
                // The counter held `sum - count` (mod 2^32) and `count`
                // took it past `u32::MAX`: `stored < count`, so neither
                // subtraction wraps.
                let stored = u32::MAX.wrapping_sub(sum.wrapping_sub(count));
                *c = u32::MAX;
                self.total = self.total.wrapping_add(u64::from(stored));
                self.saturated = self
                    .saturated
                    .saturating_add(u64::from(count.wrapping_sub(stored)));
            } else {
                // `total` is the sum of at most `N <= 2^24` counters, each
                // at most `u32::MAX`: below `2^56`, it never wraps.
                self.total = self.total.wrapping_add(u64::from(count));
            }
        }
    }

    /// Adds a key outside the occupied range: widens the range if the keys
    /// still fit, otherwise collapses on side `S`.
    ///
    /// Inlined, and free of calls, on purpose: a call anywhere in a loop of
    /// `add`s, even one never taken, would let it modify the whole sketch as
    /// far as the compiler knows, and the mapping's constants would be
    /// reloaded from memory on every value (about 40 % slower).
    #[inline(always)]
    fn add_outside(&mut self, key: i32, count: u32) {
        if count == 0 {
            // Keeps the range's ends non-zero.
            return;
        }
        if self.span == 0 {
            self.low = key;
            self.span = 1;
            self.add_at(Self::slot(key), count);
            return;
        }
        let k = i64::from(key);
        let (lo, hi) = (i64::from(self.low), i64::from(self.high()));
        let (new_lo, new_hi) = (min(lo, k), max(hi, k));
        // `i32` keys in `i64`: no saturation.
        let width = new_hi.saturating_sub(new_lo);
        if width < Self::SPAN {
            // `new_lo` is one of two `i32` keys; `width < N`.
            self.low = new_lo as i32;
            self.span = width.saturating_add(1) as u32;
            self.add_at(Self::slot(key), count);
            return;
        }
        // The range would hold more than `N` keys: keep the `N` on the exact
        // side and fold the rest into the edge bucket. `edge` and the folded
        // keys all lie between two `i32` keys.
        let (edge, folded) = match S::SIDE {
            Collapse::Lowest => {
                let edge = new_hi.saturating_sub(Self::REACH);
                self.low = edge as i32;
                (edge, lo..min(edge, hi.saturating_add(1)))
            }
            Collapse::Highest => {
                let edge = new_lo.saturating_add(Self::REACH);
                self.low = new_lo as i32;
                (edge, max(edge.saturating_add(1), lo)..hi.saturating_add(1))
            }
        };
        self.fold(folded, edge);
        // `N <= 2^24` fits `u32`.
        self.span = N as u32;
        let target = match S::SIDE {
            Collapse::Lowest => max(k, edge),
            Collapse::Highest => min(k, edge),
        };
        let slot = Self::slot(target as i32);
        self.add_at(slot, count);
        if target != k {
            // Never more than the edge bucket holds: what saturation
            // dropped is not in it (and then the cap, `u32::MAX`, is
            // reached whatever the order the samples came in).
            let at = self.counts.get(slot).map_or(0, |&c| u64::from(c));
            self.collapsed = min(self.collapsed.saturating_add(u64::from(count)), at);
        }
    }

    /// Empties the slots of the keys `keys` (all in the old occupied range)
    /// and adds what they held to the slot of key `edge`.
    #[inline(always)]
    fn fold(&mut self, keys: Range<i64>, edge: i64) {
        // Samples already counted as collapsed all sit in the old edge
        // bucket, the first (lowest) or last (highest) of `keys`; if it is
        // folded again they must not be counted twice.
        let old_edge = match S::SIDE {
            Collapse::Lowest => keys.start,
            Collapse::Highest => keys.end.saturating_sub(1),
        };
        let refolded = if keys.is_empty() {
            0
        } else {
            let at = self.counts.get(Self::slot(old_edge as i32));
            min(self.collapsed, at.map_or(0, |&c| u64::from(c)))
        };
        let mut moved = 0u64;
        probe::read(
            usize::try_from(keys.end.saturating_sub(keys.start).max(0)).unwrap_or(usize::MAX),
        );
        for key in keys {
            if let Some(c) = self.counts.get_mut(Self::slot(key as i32)) {
                moved = moved.wrapping_add(u64::from(*c));
                *c = 0;
            }
        }
        // The folded counts go to the edge bucket; their stored total does
        // not change, unless that bucket saturates.
        self.total = self.total.saturating_sub(moved);
        let slot = Self::slot(edge as i32);
        let mut rest = moved;
        while rest > 0 {
            let part = min(rest, u64::from(u32::MAX)) as u32;
            self.add_at(slot, part);
            // `part <= rest`.
            rest = rest.saturating_sub(u64::from(part));
        }
        // `moved >= refolded`: the old edge bucket is one of `keys`. What
        // saturation dropped is not in the bucket, so cap at its count.
        let edge_count = self.counts.get(slot).map_or(0, |&c| u64::from(c));
        self.collapsed = min(
            self.collapsed
                .saturating_add(moved.saturating_sub(refolded)),
            edge_count,
        );
    }

    /// Adds `other`'s counters slot by slot when the union of the two
    /// ranges fits `N` keys: keys then have the same slot in both stores.
    /// Returns `false`, changing nothing, otherwise.
    fn merge_aligned(&mut self, other: &Self) -> bool {
        let (olo, ohi) = (i64::from(other.low), i64::from(other.high()));
        let (lo, hi) = if self.span == 0 {
            (olo, ohi)
        } else {
            (
                min(olo, i64::from(self.low)),
                max(ohi, i64::from(self.high())),
            )
        };
        // `i32` keys in `i64`: no saturation.
        let width = hi.saturating_sub(lo);
        if width >= Self::SPAN {
            return false;
        }
        self.low = lo as i32;
        self.span = width.saturating_add(1) as u32;
        // A wrapping add per slot, pinned to `u32::MAX` where it wrapped,
        // with the wraps OR-ed into one flag: four vector operations per
        // four counters, no widening to `u64`. Slots rarely saturate, so
        // the stored total is only recounted when one did.
        let mut wrapped = 0u32;
        for run in other.runs() {
            let (Some(dst), Some(src)) = (self.counts.get_mut(run.clone()), other.counts.get(run))
            else {
                continue;
            };
            for (d, &c) in dst.iter_mut().zip(src) {
                let sum = d.wrapping_add(c);
                // All ones where the sum wrapped, else zero.
                let over = u32::from(sum < *d).wrapping_neg();
                wrapped |= over;
                *d = sum | over;
            }
        }
        // Every counter is in the range and `total` is their sum, so what
        // was stored is the new sum minus the old one; `other.total` is
        // what was offered.
        let before = self.total;
        self.total = if wrapped == 0 {
            before.saturating_add(other.total)
        } else {
            self.sum_of_counts()
        };
        let stored = self.total.saturating_sub(before);
        let dropped = other.total.saturating_sub(stored);
        // What did not fit now, and what `other` had already dropped.
        self.saturated = self
            .saturated
            .saturating_add(dropped)
            .saturating_add(other.saturated);
        // A collapsed `other` spans `N` keys, so the union is its range and
        // both edge buckets are the same one: its collapsed samples are
        // there (unless saturation dropped them).
        if other.collapsed > 0 {
            let edge = match S::SIDE {
                Collapse::Lowest => self.low,
                Collapse::Highest => self.high(),
            };
            let at = self
                .counts
                .get(Self::slot(edge))
                .map_or(0, |&c| u64::from(c));
            self.collapsed = min(self.collapsed.saturating_add(other.collapsed), at);
        }
        true
    }

    /// The sum of every counter (the occupied range holds them all).
    fn sum_of_counts(&self) -> u64 {
        let mut sum = 0u64;
        for run in self.runs() {
            if let Some(counts) = self.counts.get(run) {
                // At most `N <= 2^24` `u32`s: below `2^56`, no wrap.
                sum = sum.wrapping_add(counts.iter().map(|&c| u64::from(c)).sum::<u64>());
            }
        }
        sum
    }

    /// The key `offset` places above `low`.
    fn key_at(&self, offset: usize) -> i32 {
        // `offset < span`: the key is in the range, inside `i32`.
        self.low.wrapping_add(offset as i32)
    }

    fn key_range_impl(&self) -> Option<(i32, i32)> {
        (self.span > 0).then(|| (self.low, self.high()))
    }

    fn collapse_impl(&self) -> Option<StoreCollapse> {
        (self.collapsed > 0).then(|| StoreCollapse {
            samples: self.collapsed,
            boundary: match S::SIDE {
                Collapse::Lowest => self.low.saturating_add(1),
                Collapse::Highest => self.high(),
            },
            side: S::SIDE,
        })
    }

    fn key_at_rank_impl(&self, rank: u64) -> Option<i32> {
        if rank >= self.total {
            return None;
        }
        let runs = self.runs();
        let narrow = self.total <= u64::from(u32::MAX);
        let at = if rank < self.total / 2 {
            walk_up(&self.counts, &runs, rank, narrow)
        } else {
            // `rank < total`.
            walk_down(&self.counts, &runs, self.total.wrapping_sub(rank), narrow)
        }?;
        Some(self.key_at(at))
    }

    fn key_at_rank_with_impl(&self, other: &Self, rank: u64) -> Option<i32> {
        let total = self.total.saturating_add(other.total);
        if rank >= total {
            return None;
        }
        // Walk the union's slots when it fits `N` keys (slots line up);
        // otherwise each part of it on its own.
        let union = match (self.key_range_impl(), other.key_range_impl()) {
            (Some(a), Some(b)) => (min(a.0, b.0), max(a.1, b.1)),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        // `i32` keys in `i64`: no saturation.
        let width = i64::from(union.1).saturating_sub(i64::from(union.0));
        if width >= Self::SPAN {
            return self.key_at_rank_apart(other, rank);
        }
        let both = Pair(&self.counts, &other.counts);
        // `width < N`, so the span fits `u32`.
        let runs = Self::runs_of(union.0, width.saturating_add(1) as u32);
        let narrow = total <= u64::from(u32::MAX);
        let at = if rank < total / 2 {
            walk_up(&both, &runs, rank, narrow)
        } else {
            walk_down(&both, &runs, total.wrapping_sub(rank), narrow)
        }?;
        // `at` is below the union's span, inside `i32`.
        Some(union.0.wrapping_add(at as i32))
    }

    /// [`key_at_rank_with_impl`](Self::key_at_rank_with_impl) when the
    /// two ranges together span more than `N` keys (`rank` below the two
    /// totals): slots no longer line up across the union, so it is read in
    /// three parts, each within the occupied ranges. The keys below the
    /// higher range are the lower store's alone, those above the lower
    /// range the higher store's alone, and those between are in both
    /// ranges, where slots line up. The empty keys between two ranges far
    /// apart are never visited: a few passes over `2 N` counters at most.
    fn key_at_rank_apart(&self, other: &Self, rank: u64) -> Option<i32> {
        let (lo, hi) = if self.low <= other.low {
            (self, other)
        } else {
            (other, self)
        };
        if lo.span == 0 || hi.span == 0 {
            return None;
        }
        // Neither range holds the other (the union would then be one of
        // them, at most `N` keys): `lo.low < hi.low`, so `hi.low − 1` does
        // not wrap, and `lo.high() < hi.high()`.
        let below = lo.count_at_or_below_impl(hi.low.wrapping_sub(1));
        if rank < below {
            return lo.key_at_rank_impl(rank);
        }
        let lo_high = lo.high();
        // `hi`'s samples at keys `lo`'s range also holds.
        let hi_shared = hi.count_at_or_below_impl(lo_high);
        // `below <= lo.total`.
        let shared = lo.total.wrapping_sub(below).saturating_add(hi_shared);
        // `rank >= below`.
        let rank = rank.wrapping_sub(below);
        if rank >= shared {
            // Past every sample of `lo` (the ranks `below + shared −
            // hi_shared`), into `hi`'s own keys.
            return hi.key_at_rank_impl(rank.wrapping_sub(shared).wrapping_add(hi_shared));
        }
        // `shared > 0`, so the keys `hi.low ..= lo_high` exist; they lie in
        // `lo`'s range, at most `N` of them.
        let span = lo_high.wrapping_sub(hi.low).wrapping_add(1) as u32;
        let runs = Self::runs_of(hi.low, span);
        let both = Pair(&lo.counts, &hi.counts);
        let narrow = shared <= u64::from(u32::MAX);
        let at = if rank < shared / 2 {
            walk_up(&both, &runs, rank, narrow)
        } else {
            walk_down(&both, &runs, shared.wrapping_sub(rank), narrow)
        }?;
        // `at < span`: inside `lo`'s range.
        Some(hi.low.wrapping_add(at as i32))
    }

    fn count_at_or_below_impl(&self, key: i32) -> u64 {
        if self.span == 0 || key < self.low {
            return 0;
        }
        // `low <= key`: the difference fits `u32`; keys counted, `1 ..= span`.
        let below = key.wrapping_sub(self.low) as u32;
        let mut left = min(below.saturating_add(1), self.span) as usize;
        let mut sum = 0u64;
        for run in self.runs() {
            let take = min(left, run.len());
            probe::read(take);
            let counts = self.counts.get(run.start..run.start.wrapping_add(take));
            sum = sum.wrapping_add(counts.map_or(0, |c| c.iter().map(|&c| u64::from(c)).sum()));
            left = left.wrapping_sub(take);
        }
        sum
    }

    fn bins_impl(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_ {
        (0..self.span as usize).filter_map(move |i| {
            probe::read(1);
            let key = self.key_at(i);
            let count = self.counts.get(Self::slot(key)).copied().unwrap_or(0);
            (count != 0).then_some((key, count))
        })
    }
}

/// Counters read by slot: one store's, or the sums of two stores' (the
/// union walked by a rotating window).
trait Counters {
    /// The counter (or sum) at `slot`; 0 outside the array.
    fn at(&self, slot: usize) -> u64;
    /// The sum of the `W` counters from `slot` (0 if they pass the end).
    /// `narrow`: the counters all together sum below `2^32`, so the sum may
    /// be taken in `u32` lanes, twice as many a vector instruction.
    fn sum<const W: usize>(&self, slot: usize, narrow: bool) -> u64;
}

impl<const N: usize> Counters for [u32; N] {
    #[inline(always)]
    fn at(&self, slot: usize) -> u64 {
        probe::read(1);
        self.get(slot).map_or(0, |&c| u64::from(c))
    }

    #[inline(always)]
    fn sum<const W: usize>(&self, slot: usize, narrow: bool) -> u64 {
        probe::read(W);
        // A fixed-size array, so the sum unrolls into a few vector adds.
        let Some(c) = self
            .get(slot..slot.saturating_add(W))
            .and_then(|c| <&[u32; W]>::try_from(c).ok())
        else {
            return 0;
        };
        if narrow {
            // No partial sum can pass the total, which fits `u32`.
            u64::from(c.iter().fold(0u32, |a, &x| a.wrapping_add(x)))
        } else {
            // `W <= CHUNK` `u32`s in a `u64` cannot wrap.
            c.iter().fold(0u64, |a, &x| a.wrapping_add(u64::from(x)))
        }
    }
}

/// Two stores' counters, read as their sums.
struct Pair<'a, const N: usize>(&'a [u32; N], &'a [u32; N]);

impl<const N: usize> Counters for Pair<'_, N> {
    #[inline(always)]
    fn at(&self, slot: usize) -> u64 {
        self.0.at(slot).wrapping_add(self.1.at(slot))
    }

    #[inline(always)]
    fn sum<const W: usize>(&self, slot: usize, narrow: bool) -> u64 {
        self.0
            .sum::<W>(slot, narrow)
            .wrapping_add(self.1.sum::<W>(slot, narrow))
    }
}

/// The offset, from the start of `runs`, of the first slot at which the
/// running sum exceeds `rank`: whole chunks of `CHUNK` counters while the
/// sum stays at or below `rank`, then `STEP` at a time, then one by one.
///
/// `seen` sums at most `2 N` counters (below `2^57`) and slots and offsets
/// stay below `N`: the wrapping operations never wrap.
fn walk_up(c: &impl Counters, runs: &[Range<usize>; 2], rank: u64, narrow: bool) -> Option<usize> {
    let mut seen = 0u64;
    let mut offset = 0usize;
    for run in runs {
        let mut at = run.start;
        while run.end.saturating_sub(at) >= CHUNK {
            let sum = c.sum::<CHUNK>(at, narrow);
            if seen.wrapping_add(sum) > rank {
                break;
            }
            seen = seen.wrapping_add(sum);
            at = at.wrapping_add(CHUNK);
        }
        while run.end.saturating_sub(at) >= STEP {
            let sum = c.sum::<STEP>(at, narrow);
            if seen.wrapping_add(sum) > rank {
                break;
            }
            seen = seen.wrapping_add(sum);
            at = at.wrapping_add(STEP);
        }
        for slot in at..run.end {
            seen = seen.wrapping_add(c.at(slot));
            if seen > rank {
                return Some(offset.wrapping_add(slot.wrapping_sub(run.start)));
            }
        }
        offset = offset.wrapping_add(run.len());
    }
    None
}

/// The offset, from the start of `runs`, of the last slot at which the
/// running sum from the top reaches `need` (at least 1). As
/// [`walk_up`], from the other end; nothing wraps.
fn walk_down(
    c: &impl Counters,
    runs: &[Range<usize>; 2],
    need: u64,
    narrow: bool,
) -> Option<usize> {
    let mut seen = 0u64;
    // Offset of the end of the run being walked.
    let mut offset = runs[0].len().wrapping_add(runs[1].len());
    for run in runs.iter().rev() {
        let base = offset.wrapping_sub(run.len());
        let mut at = run.end;
        while at.saturating_sub(run.start) >= CHUNK {
            let sum = c.sum::<CHUNK>(at.wrapping_sub(CHUNK), narrow);
            if seen.wrapping_add(sum) >= need {
                break;
            }
            seen = seen.wrapping_add(sum);
            at = at.wrapping_sub(CHUNK);
        }
        while at.saturating_sub(run.start) >= STEP {
            let sum = c.sum::<STEP>(at.wrapping_sub(STEP), narrow);
            if seen.wrapping_add(sum) >= need {
                break;
            }
            seen = seen.wrapping_add(sum);
            at = at.wrapping_sub(STEP);
        }
        for slot in (run.start..at).rev() {
            seen = seen.wrapping_add(c.at(slot));
            if seen >= need {
                return Some(base.wrapping_add(slot.wrapping_sub(run.start)));
            }
        }
        offset = base;
    }
    None
}

impl<const N: usize, S: CollapseSide> Default for CollapsingStore<N, S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, S: CollapseSide> Store for CollapsingStore<N, S> {
    const CAPACITY: usize = N;

    #[inline(always)]
    fn add(&mut self, key: i32, count: u32) {
        if self.holds(key) {
            self.add_at(Self::slot(key), count);
        } else {
            self.add_outside(key, count);
        }
    }

    fn total(&self) -> u64 {
        self.total
    }

    fn saturated(&self) -> u64 {
        self.saturated
    }

    fn collapse(&self) -> Option<StoreCollapse> {
        self.collapse_impl()
    }

    fn key_range(&self) -> Option<(i32, i32)> {
        self.key_range_impl()
    }

    fn key_at_rank(&self, rank: u64) -> Option<i32> {
        self.key_at_rank_impl(rank)
    }

    fn key_at_rank_with(&self, other: &Self, rank: u64) -> Option<i32> {
        self.key_at_rank_with_impl(other, rank)
    }

    fn count_at_or_below(&self, key: i32) -> u64 {
        self.count_at_or_below_impl(key)
    }

    fn count_covering_at_or_below(&self, key: i32) -> u64 {
        // The collapsed lowest bucket stands for every key below it.
        let key = match S::SIDE {
            Collapse::Lowest if self.collapsed > 0 => max(key, self.low),
            _ => key,
        };
        self.count_at_or_below_impl(key)
    }

    fn count_covering_at_or_above(&self, key: i32) -> u64 {
        if self.span == 0 {
            return 0;
        }
        // The collapsed highest bucket stands for every key above it.
        let key = match S::SIDE {
            Collapse::Highest if self.collapsed > 0 => min(key, self.high()),
            _ => key,
        };
        if key <= self.low {
            return self.total;
        }
        // `key > low`, so `key − 1` does not wrap.
        self.total
            .saturating_sub(self.count_at_or_below_impl(key.wrapping_sub(1)))
    }

    #[inline]
    fn count_of(&self, key: i32) -> u32 {
        if self.holds(key) {
            self.counts.get(Self::slot(key)).copied().unwrap_or(0)
        } else {
            0
        }
    }

    fn bins(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_ {
        self.bins_impl()
    }

    fn merge(&mut self, other: &Self) {
        if other.span == 0 {
            // Nothing stored, but perhaps samples dropped.
            self.saturated = self.saturated.saturating_add(other.saturated);
            return;
        }
        if self.merge_aligned(other) {
            return;
        }
        for (key, count) in other.bins() {
            self.add(key, count);
        }
        self.saturated = self.saturated.saturating_add(other.saturated);
        if other.collapsed > 0 {
            // The union spans more than `N` keys, so this store has
            // collapsed too. If `other`'s edge bucket was folded into ours,
            // its collapsed samples were counted then; if the two edges are
            // the same key, they are counted here.
            let (edge, ours) = match S::SIDE {
                Collapse::Lowest => (other.low, self.low),
                Collapse::Highest => (other.high(), self.high()),
            };
            if edge == ours {
                let at = self
                    .counts
                    .get(Self::slot(ours))
                    .map_or(0, |&c| u64::from(c));
                self.collapsed = min(self.collapsed.saturating_add(other.collapsed), at);
            }
        }
    }

    fn clear(&mut self) {
        // Only the occupied range holds non-zero counters: zero that (one
        // or two runs of the ring), not all `N` (a window clears two
        // stores on every rotation).
        let span = (self.span as usize).min(N);
        let start = Self::slot(self.low);
        let first = span.min(N.saturating_sub(start));
        let end = start.saturating_add(first);
        if let Some(run) = self.counts.get_mut(start..end) {
            run.fill(0);
        }
        if let Some(run) = self.counts.get_mut(..span.saturating_sub(first)) {
            run.fill(0);
        }
        self.low = 0;
        self.span = 0;
        self.total = 0;
        self.saturated = 0;
        self.collapsed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{probe, CollapsingHighestStore, CollapsingLowestStore, Store};

    /// Asks the union walk of `a` and `b` for every rank: each answer must
    /// be a key and cost a few passes over the two stores' counters at
    /// most, whatever the keys between their ranges.
    fn walks_occupied<S: Store>(a: &S, b: &S) {
        let total = a.total().saturating_add(b.total());
        let budget = 8 * S::CAPACITY as u64;
        for rank in 0..total {
            probe::take();
            let key = a.key_at_rank_with(b, rank);
            let reads = probe::take();
            assert!(key.is_some(), "rank {rank}");
            assert!(reads <= budget, "rank {rank}: {reads} counters read");
        }
    }

    fn stores<S: Store>(keys: &[(i32, u32)]) -> S {
        let mut s = S::default();
        keys.iter().for_each(|&(k, c)| s.add(k, c));
        s
    }

    fn both_sides<S: Store>() {
        // Ten million empty keys between the two stores' ranges, and most
        // samples in the lower one: walks from either end cross the gap.
        let near = stores::<S>(&[(0, 1), (10, 4)]);
        let far = stores::<S>(&[(10_000_000, 1), (10_000_040, 1)]);
        walks_occupied(&near, &far);
        walks_occupied(&far, &near);
        // Overlapping ranges whose union is wider than the capacity (64).
        let low = stores::<S>(&[(0, 1), (5, 2), (40, 1), (50, 4)]);
        let high = stores::<S>(&[(40, 2), (45, 1), (50, 1), (100, 3)]);
        walks_occupied(&low, &high);
        walks_occupied(&high, &low);
        // The extreme keys.
        let bottom = stores::<S>(&[(i32::MIN, 2), (i32::MIN + 3, 3)]);
        let top = stores::<S>(&[(i32::MAX, 1), (0, 1)]);
        walks_occupied(&bottom, &top);
        walks_occupied(&top, &bottom);
    }

    #[test]
    fn the_union_walk_reads_occupied_buckets_not_the_keys_between() {
        both_sides::<CollapsingLowestStore<64>>();
        both_sides::<CollapsingHighestStore<64>>();
    }
}
