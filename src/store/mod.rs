//! Bucket stores: fixed-capacity arrays of counters keyed by mapping keys.
//!
//! A store holds at most `N` consecutive keys in a `[u32; N]` used as a
//! ring: key `k` lives in slot `k mod N`. Adding a key inside the occupied
//! range is a range check, a mask and a saturating add; a key outside only
//! widens the range (no counter moves) or, when the keys seen span more than
//! `N`, *collapses*: the lowest ([`CollapsingLowestStore`]) or highest
//! ([`CollapsingHighestStore`]) buckets are folded into the edge bucket of
//! the `N` kept, so memory stays fixed and the quantiles on the kept side
//! stay exact to α. The result depends only on the keys added, not on their
//! order, so merging two stores gives the store of both streams.
//!
//! Counters are `u32` (4 bytes a bucket, so 1024 buckets take 4 KiB). A
//! counter that would pass `u32::MAX` stays at `u32::MAX` and the samples that
//! did not fit are counted in [`Store::saturated`]; they are then missing from
//! [`Store::total`], so quantiles stay consistent with what was stored. Both
//! depend only on the samples given, not their order, and a merge adds the
//! other store's saturated samples to its own.

mod collapsing;
mod no_store;

pub use collapsing::{Collapse, CollapseSide, CollapsingStore, Highest, Lowest};
pub use no_store::NoStore;

/// `N` buckets that fold the lowest keys when full: the quantiles of large
/// values (the latency tail) stay exact to α. The default store.
pub type CollapsingLowestStore<const N: usize> = CollapsingStore<N, Lowest>;

/// `N` buckets that fold the highest keys when full: the quantiles of small
/// values stay exact to α.
pub type CollapsingHighestStore<const N: usize> = CollapsingStore<N, Highest>;

/// The key at `rank` in the union of two stores, a key at a time over
/// `lowest ..= highest` (which holds every non-empty bucket of both), from
/// the nearer end.
fn walk_keys<T: Store>(a: &T, b: &T, rank: u64, lowest: i32, highest: i32) -> Option<i32> {
    let total = a.total().saturating_add(b.total());
    if rank >= total {
        return None;
    }
    // Two `u32`s in a `u64` cannot wrap.
    let count = |k: i32| u64::from(a.count_of(k)).wrapping_add(u64::from(b.count_of(k)));
    let mut seen = 0u64;
    if rank < total / 2 {
        (lowest..=highest).find(|&k| {
            seen = seen.saturating_add(count(k));
            seen > rank
        })
    } else {
        // `rank < total`.
        let need = total.wrapping_sub(rank);
        (lowest..=highest).rev().find(|&k| {
            seen = seen.saturating_add(count(k));
            seen >= need
        })
    }
}

/// The largest capacity a store accepts (16 Mi buckets, 64 MiB): far beyond
/// any useful sketch, small enough that window arithmetic never overflows.
pub const MAX_CAPACITY: usize = 1 << 24;

/// How much collapsing has cost a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StoreCollapse {
    /// Samples (by weight) counted in the collapsed bucket although their
    /// own key was elsewhere: those folded in and those that arrived later,
    /// but never more than the bucket holds (saturation may have dropped
    /// some), so never more than [`Store::total`].
    pub samples: u64,
    /// The key that bounds the exact region. For collapsing-lowest, keys
    /// `>= boundary` are exact and everything below was folded into
    /// `boundary − 1`. For collapsing-highest, keys `< boundary` are exact
    /// and everything at or above was folded into `boundary`.
    pub boundary: i32,
}

/// A fixed-capacity map from bucket keys to counts.
///
/// Implemented by [`CollapsingLowestStore`], [`CollapsingHighestStore`] and
/// [`NoStore`]. The methods are what [`DDSketch`](crate::DDSketch) needs; most
/// users never call them directly.
pub trait Store: Clone + Default {
    /// The number of buckets the store holds.
    const CAPACITY: usize;

    /// Adds `count` samples to bucket `key`, widening the occupied range or
    /// collapsing if `key` lies outside it. Never panics.
    fn add(&mut self, key: i32, count: u32);

    /// Samples stored (saturating; excludes [`saturated`](Self::saturated) ones).
    fn total(&self) -> u64;

    /// Samples dropped because their bucket counter was already at `u32::MAX`.
    fn saturated(&self) -> u64;

    /// Whether, and how much, the store has collapsed.
    fn collapse(&self) -> Option<StoreCollapse>;

    /// The lowest and highest keys of the occupied range, `None` when
    /// empty. Every non-empty bucket lies in it and both ends are non-empty.
    fn key_range(&self) -> Option<(i32, i32)>;

    /// The key of the first bucket, in ascending key order, at which the
    /// cumulative count exceeds `rank`; `None` if `rank >= total()`.
    ///
    /// Walks the occupied range from whichever end is nearer to `rank`,
    /// sixteen counters a step.
    fn key_at_rank(&self, rank: u64) -> Option<i32>;

    /// Samples in buckets whose key is `<= key`.
    fn count_at_or_below(&self, key: i32) -> u64;

    /// Samples in buckets that may hold values of keys `<= key`: those
    /// [`count_at_or_below`](Self::count_at_or_below) counts and, once the
    /// lowest keys have collapsed, the collapsed bucket for any `key` below
    /// it, since it holds samples of every key up to its own.
    fn count_covering_at_or_below(&self, key: i32) -> u64 {
        self.count_at_or_below(key)
    }

    /// Samples in buckets that may hold values of keys `>= key`: those in
    /// buckets whose key is `>= key` and, once the highest keys have
    /// collapsed, the collapsed bucket for any `key` above it.
    fn count_covering_at_or_above(&self, key: i32) -> u64 {
        match key.checked_sub(1) {
            Some(below) => self.total().saturating_sub(self.count_at_or_below(below)),
            None => self.total(),
        }
    }

    /// The count of bucket `key` (0 outside the occupied range).
    fn count_of(&self, key: i32) -> u32;

    /// [`key_at_rank`](Self::key_at_rank) over the union of two stores,
    /// without merging them: what a rotating window asks of its halves.
    /// This default walks the union of the two ranges a key at a time.
    fn key_at_rank_with(&self, other: &Self, rank: u64) -> Option<i32> {
        let (lowest, highest) = match (self.key_range(), other.key_range()) {
            (Some(a), Some(b)) => (a.0.min(b.0), a.1.max(b.1)),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        };
        walk_keys(self, other, rank, lowest, highest)
    }

    /// Non-empty buckets as `(key, count)`, in ascending key order.
    fn bins(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_;

    /// Adds every bucket of `other` to this store; the result has the bucket
    /// counts of one store fed both streams (collapsing included).
    fn merge(&mut self, other: &Self) {
        for (key, count) in other.bins() {
            self.add(key, count);
        }
    }

    /// Empties the store and forgets any collapse.
    fn clear(&mut self);
}
