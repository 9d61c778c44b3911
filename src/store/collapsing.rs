//! The collapsing store: `N` counters as a window over the key space.

use super::{Store, StoreCollapse, MAX_CAPACITY};
use core::cmp::{max, min};
use core::fmt;
use core::marker::PhantomData;

/// Which side gives way when the keys seen span more than the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// `N` counters for the keys `offset .. offset + N`, collapsing on side `S`.
///
/// Use it through [`CollapsingLowestStore`](super::CollapsingLowestStore) or
/// [`CollapsingHighestStore`](super::CollapsingHighestStore). Takes
/// `4 · N + 32` bytes.
#[derive(Clone, Debug)]
pub struct CollapsingStore<const N: usize, S> {
    counts: [u32; N],
    /// The key of `counts[0]`. Always `<= i32::MAX − (N − 1)`.
    offset: i32,
    total: u64,
    saturated: u64,
    collapsed: u64,
    /// Set once the window has collapsed: its far edge is then pinned.
    has_collapsed: bool,
    side: PhantomData<S>,
}

/// Counters read a step when walking for a rank (one or two vector loads).
const CHUNK: usize = 16;

// Integer arithmetic in this file never overflows, for three reasons the
// comments below cite:
// * keys are `i32`s and window distances at most `SPAN <= 2^24`, so sums and
//   differences of a few of them, done in `i64`, stay far inside its range;
//   the `saturating_*` forms used for them never saturate;
// * slots are `< N <= 2^24`;
// * counts are `u32`s, so a sum of at most `N` of them, in `u64`, is below
//   `2^56`.

impl<const N: usize, S: CollapseSide> CollapsingStore<N, S> {
    const VALID: () = assert!(
        N > 0 && N <= MAX_CAPACITY,
        "capacity must be in 1..=MAX_CAPACITY"
    );
    /// `N` as a key distance; exact because `N <= 2^24`.
    const SPAN: i64 = N as i64;
    /// The last slot, `N − 1` (`N >= 1` by `VALID`).
    const LAST: usize = N.saturating_sub(1);
    /// The key distance from the first slot to the last, `SPAN − 1`.
    const REACH: i64 = Self::LAST as i64;

    /// An empty store.
    pub const fn new() -> Self {
        let () = Self::VALID;
        Self {
            counts: [0; N],
            // Centre the empty window on key 0 (the bucket of 1.0). `N / 2 <=
            // 2^23`, so the cast is exact and the negation cannot wrap.
            offset: ((N / 2) as i32).wrapping_neg(),
            total: 0,
            saturated: 0,
            collapsed: 0,
            has_collapsed: false,
            side: PhantomData,
        }
    }

    /// The slot of `key`, if the window holds it.
    #[inline(always)]
    fn slot(&self, key: i32) -> Option<usize> {
        // Wrapping difference, read as unsigned: keys below the window wrap
        // to at least `N` (the window never reaches past `i32::MAX`).
        let i = key.wrapping_sub(self.offset) as u32 as usize;
        (i < N).then_some(i)
    }

    #[inline(always)]
    fn key_of(&self, slot: usize) -> i32 {
        // `slot < N` and the window ends at or below `i32::MAX`.
        self.offset.wrapping_add(slot as i32)
    }

    /// Adds `count` at `slot` (which `slot()` produced), saturating.
    #[inline(always)]
    fn add_at(&mut self, slot: usize, count: u32) {
        if let Some(c) = self.counts.get_mut(slot) {
            match c.checked_add(count) {
                Some(n) => {
                    *c = n;
                    self.total = self.total.saturating_add(u64::from(count));
                }
                None => {
                    // `*c + count > u32::MAX`, so `stored < count`: neither
                    // subtraction can wrap.
                    let stored = u32::MAX.wrapping_sub(*c);
                    *c = u32::MAX;
                    self.total = self.total.saturating_add(u64::from(stored));
                    self.saturated = self
                        .saturated
                        .saturating_add(u64::from(count.wrapping_sub(stored)));
                }
            }
        }
    }

    /// Adds a key outside the window: moves the window if the keys seen still
    /// fit, otherwise collapses on the given side.
    #[cold]
    #[inline(never)]
    fn add_outside(&mut self, key: i32, count: u32) {
        let side = S::SIDE;
        let bottom = i64::from(self.offset);
        let top = i64::from(self.key_of(Self::LAST));
        let k = i64::from(key);
        // Steady state after a collapse: the far edge is pinned, so a key
        // past the near edge lands in the collapsed bucket without a scan.
        if self.has_collapsed {
            let pinned = match side {
                Collapse::Lowest if k < bottom => Some(0),
                Collapse::Highest if k > top => Some(Self::LAST),
                _ => None,
            };
            if let Some(slot) = pinned {
                self.collapsed = self.collapsed.saturating_add(u64::from(count));
                self.add_at(slot, count);
                return;
            }
        }
        let (lo, hi) = match self.occupied() {
            Some((a, b)) => (
                min(k, i64::from(self.key_of(a))),
                max(k, i64::from(self.key_of(b))),
            ),
            None => (k, k),
        };
        // `i32` keys in `i64`: the width is at most `2^32`, no saturation.
        let width = hi.saturating_sub(lo);
        if width < Self::SPAN {
            // Everything fits: centre the occupied keys in the window. The
            // spare slots, `SPAN − 1 − width`, are in `0 .. SPAN`.
            let spare = Self::REACH.saturating_sub(width);
            self.move_window(lo.saturating_sub(spare / 2));
        } else {
            let start = match side {
                Collapse::Lowest => hi.saturating_sub(Self::REACH),
                Collapse::Highest => lo,
            };
            self.collapse_to(start);
        }
        // `max`/`min`, not `clamp`: `clamp` asserts its bounds are ordered.
        let clamped = k
            .max(i64::from(self.offset))
            .min(i64::from(self.key_of(Self::LAST)));
        if clamped != k {
            self.collapsed = self.collapsed.saturating_add(u64::from(count));
        }
        // `clamped` lies in the window, so the slot exists.
        if let Some(slot) = self.slot(clamped as i32) {
            self.add_at(slot, count);
        }
    }

    /// Moves the window to start at key `start` (clamped so it stays in
    /// `i32`), shifting counters; counters pushed out must be zero.
    fn move_window(&mut self, start: i64) {
        let start = start
            .max(i64::from(i32::MIN))
            .min(i64::from(i32::MAX).saturating_sub(Self::REACH));
        // Both in `i32`'s range: no saturation.
        let shift = start.saturating_sub(i64::from(self.offset));
        // `n <= N`, so `N − n` is exact.
        let n = min(shift.unsigned_abs(), N as u64) as usize;
        let kept = N.saturating_sub(n);
        if shift > 0 {
            self.counts.copy_within(n.., 0);
            if let Some(tail) = self.counts.get_mut(kept..) {
                tail.fill(0);
            }
        } else if shift < 0 {
            self.counts.copy_within(..kept, n);
            if let Some(head) = self.counts.get_mut(..n) {
                head.fill(0);
            }
        }
        self.offset = start as i32;
    }

    /// Moves the window to start at `start` and folds every counter that
    /// falls off the collapsing side into the window's edge bucket.
    fn collapse_to(&mut self, start: i64) {
        let side = S::SIDE;
        let old_start = i64::from(self.offset);
        // `start` comes from `i32` keys and `SPAN`: no saturation.
        let shift = start.saturating_sub(old_start);
        // Counters that leave the window: below `start` (lowest) or at or
        // above `start + N` (highest).
        let leaving = min(shift.unsigned_abs(), N as u64) as usize;
        let range = match side {
            Collapse::Lowest if shift > 0 => 0..leaving,
            // `leaving <= N`.
            Collapse::Highest if shift < 0 => N.saturating_sub(leaving)..N,
            _ => 0..0,
        };
        // Samples already counted as collapsed all sit in the edge bucket;
        // if it is folded again they must not be counted twice.
        let edge_before = match side {
            Collapse::Lowest => self.counts.first(),
            Collapse::Highest => self.counts.last(),
        }
        .map_or(0, |&c| u64::from(c));
        let refolded = if range.is_empty() {
            0
        } else {
            min(self.collapsed, edge_before)
        };
        let folded: u64 = match self.counts.get_mut(range) {
            Some(gone) => {
                let sum = gone.iter().map(|&c| u64::from(c)).sum();
                gone.fill(0);
                sum
            }
            None => 0,
        };
        self.move_window(start);
        // The folded counts go to the edge bucket; their stored total does
        // not change, unless that bucket saturates.
        let edge = match side {
            Collapse::Lowest => 0,
            Collapse::Highest => Self::LAST,
        };
        self.total = self.total.saturating_sub(folded);
        let mut rest = folded;
        while rest > 0 {
            let part = min(rest, u64::from(u32::MAX)) as u32;
            self.add_at(edge, part);
            // `part <= rest`.
            rest = rest.saturating_sub(u64::from(part));
        }
        // A non-empty `range` includes the edge slot, so `folded >=
        // edge_before >= refolded`; otherwise both are 0.
        self.collapsed = self
            .collapsed
            .saturating_add(folded.saturating_sub(refolded));
        self.has_collapsed = true;
    }

    /// Adds `other`'s counters slot by slot if all its occupied keys lie in
    /// this window (the common case when merging sketches of similar data);
    /// returns `false`, changing nothing, otherwise. Same result as adding
    /// each bucket, without the per-bucket window checks.
    fn add_in_window(&mut self, other: &Self) -> bool {
        let Some((a, b)) = other.occupied() else {
            return true;
        };
        let (Some(sa), Some(sb)) = (self.slot(other.key_of(a)), self.slot(other.key_of(b))) else {
            return false;
        };
        let (Some(dst), Some(src)) = (self.counts.get_mut(sa..=sb), other.counts.get(a..=b)) else {
            return false;
        };
        let (mut stored, mut dropped) = (0u64, 0u64);
        for (d, &c) in dst.iter_mut().zip(src) {
            // `added <= c`, and each sum is of at most `N` `u32`s in `u64`:
            // nothing here wraps.
            let kept = d.saturating_add(c);
            let added = kept.wrapping_sub(*d);
            stored = stored.wrapping_add(u64::from(added));
            dropped = dropped.wrapping_add(u64::from(c.wrapping_sub(added)));
            *d = kept;
        }
        self.total = self.total.saturating_add(stored);
        self.saturated = self.saturated.saturating_add(dropped);
        true
    }

    /// First and last non-empty slots. Skips empty stretches `CHUNK`
    /// counters a step (an OR of the chunk, which vectorises), then looks
    /// inside the first and last non-empty chunks.
    fn occupied(&self) -> Option<(usize, usize)> {
        let nonzero = |(_, c): &(usize, &[u32])| c.iter().fold(0, |a, &x| a | x) != 0;
        let chunks = self.counts.chunks(CHUNK).enumerate();
        let (i, low) = chunks.clone().find(nonzero)?;
        let (k, high) = chunks.rev().find(nonzero)?;
        // Chunk `i` starts at slot `i · CHUNK < N`: nothing here wraps.
        let first = i
            .wrapping_mul(CHUNK)
            .wrapping_add(low.iter().position(|&c| c != 0)?);
        let last = k
            .wrapping_mul(CHUNK)
            .wrapping_add(high.iter().rposition(|&c| c != 0)?);
        Some((first, last))
    }

    fn total_impl(&self) -> u64 {
        self.total
    }

    fn saturated_impl(&self) -> u64 {
        self.saturated
    }

    fn collapse_impl(&self) -> Option<StoreCollapse> {
        let side = S::SIDE;
        self.has_collapsed.then(|| StoreCollapse {
            samples: self.collapsed,
            boundary: match side {
                Collapse::Lowest => self.offset.saturating_add(1),
                Collapse::Highest => self.key_of(Self::LAST),
            },
        })
    }

    /// The slot range a key hint covers, clamped into the window.
    fn slots_for(&self, lowest: i32, highest: i32) -> (usize, usize) {
        // The difference of two `i32`s in `i64` never saturates.
        let to_slot = |k: i32| {
            i64::from(k)
                .saturating_sub(i64::from(self.offset))
                .max(0)
                .min(Self::REACH) as usize
        };
        (to_slot(lowest), max(to_slot(lowest), to_slot(highest)))
    }

    fn key_at_rank_impl(&self, rank: u64, lowest: i32, highest: i32) -> Option<i32> {
        if rank >= self.total {
            return None;
        }
        let (a, b) = self.slots_for(lowest, highest);
        let found = if rank < self.total / 2 {
            self.walk_up(a, b, rank)
        } else {
            // `rank < total`.
            self.walk_down(a, b, self.total.wrapping_sub(rank))
        };
        // A hint that missed buckets: walk the whole window instead.
        let slot = found.or_else(|| self.walk_up(0, Self::LAST, rank))?;
        Some(self.key_of(slot))
    }

    /// The first slot in `a..=b` where the running sum from `a` exceeds `rank`.
    ///
    /// `seen` sums at most `N` counters (below `2^56`) and slot arithmetic
    /// stays `<= b + 1 <= N`: the wrapping operations never wrap.
    fn walk_up(&self, a: usize, b: usize, rank: u64) -> Option<usize> {
        let mut seen = 0u64;
        let mut base = a;
        for chunk in self.counts.get(a..=b)?.chunks(CHUNK) {
            let sum: u64 = chunk.iter().map(|&c| u64::from(c)).sum();
            if seen.wrapping_add(sum) > rank {
                for (j, &c) in chunk.iter().enumerate() {
                    seen = seen.wrapping_add(u64::from(c));
                    if seen > rank {
                        return Some(base.wrapping_add(j));
                    }
                }
            }
            seen = seen.wrapping_add(sum);
            base = base.wrapping_add(chunk.len());
        }
        None
    }

    /// The last slot in `a..=b` where the running sum from `b` downwards
    /// reaches `need` (at least 1).
    ///
    /// As in [`walk_up`](Self::walk_up), nothing wraps: `seen` is below
    /// `2^56`, `a <= start` and `start + chunk.len() <= b + 1 <= N`.
    fn walk_down(&self, a: usize, b: usize, need: u64) -> Option<usize> {
        let mut seen = 0u64;
        let mut top = b.wrapping_add(1);
        for chunk in self.counts.get(a..=b)?.rchunks(CHUNK) {
            let start = top.wrapping_sub(chunk.len());
            let sum: u64 = chunk.iter().map(|&c| u64::from(c)).sum();
            if seen.wrapping_add(sum) >= need {
                for (j, &c) in chunk.iter().enumerate().rev() {
                    seen = seen.wrapping_add(u64::from(c));
                    if seen >= need {
                        return Some(start.wrapping_add(j));
                    }
                }
            }
            seen = seen.wrapping_add(sum);
            top = start;
        }
        None
    }

    fn count_at_or_below_impl(&self, key: i32) -> u64 {
        // The difference of two `i32`s in `i64` never saturates.
        let end = i64::from(key).saturating_sub(i64::from(self.offset));
        if end < 0 {
            return 0;
        }
        let end = min(end, Self::REACH) as usize;
        self.counts
            .get(..=end)
            .map_or(0, |c| c.iter().map(|&c| u64::from(c)).sum())
    }

    fn bins_impl(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c != 0)
            .map(|(i, &c)| (self.key_of(i), c))
    }

    fn clear_impl(&mut self) {
        *self = Self::new();
    }
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
        match self.slot(key) {
            Some(slot) => self.add_at(slot, count),
            None => self.add_outside(key, count),
        }
    }

    fn total(&self) -> u64 {
        self.total_impl()
    }

    fn saturated(&self) -> u64 {
        self.saturated_impl()
    }

    fn collapse(&self) -> Option<StoreCollapse> {
        self.collapse_impl()
    }

    fn key_at_rank(&self, rank: u64, lowest: i32, highest: i32) -> Option<i32> {
        self.key_at_rank_impl(rank, lowest, highest)
    }

    fn count_at_or_below(&self, key: i32) -> u64 {
        self.count_at_or_below_impl(key)
    }

    #[inline]
    fn count_of(&self, key: i32) -> u32 {
        self.slot(key)
            .and_then(|i| self.counts.get(i).copied())
            .unwrap_or(0)
    }

    fn bins(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_ {
        self.bins_impl()
    }

    fn merge(&mut self, other: &Self) {
        if !self.add_in_window(other) {
            for (key, count) in other.bins() {
                self.add(key, count);
            }
        }
        if other.has_collapsed {
            if !self.has_collapsed {
                // `other`'s edge bucket holds folded samples. Its bins fitted
                // this window without a collapse, so every occupied key lies
                // in `other`'s window: pin ours there, as one store fed both
                // streams would be, so the collapse is reported at its bound.
                self.move_window(i64::from(other.offset));
                self.has_collapsed = true;
            }
            // The other's collapsed samples may already have been counted
            // here if its edge bucket was folded again; the collapsed
            // samples all sit in the edge bucket, so cap at its count.
            let edge = match S::SIDE {
                Collapse::Lowest => self.counts.first(),
                Collapse::Highest => self.counts.last(),
            }
            .map_or(0, |&c| u64::from(c));
            self.collapsed = min(self.collapsed.saturating_add(other.collapsed), edge);
        }
    }

    fn clear(&mut self) {
        self.clear_impl();
    }
}
