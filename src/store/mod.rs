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

/// Counts the counters the walks read, so that a unit test can bound a
/// walk's work by construction instead of timing it. Per thread, so tests
/// running side by side do not disturb each other; outside unit tests it
/// is a no-op the compiler removes.
#[cfg(test)]
pub(crate) mod probe {
    extern crate std;
    use core::cell::Cell;

    std::thread_local!(static READS: Cell<u64> = const { Cell::new(0) });

    /// Records `n` counters read.
    pub(crate) fn read(n: usize) {
        READS.with(|r| r.set(r.get().saturating_add(n as u64)));
    }

    /// The counters read on this thread since the last call.
    pub(crate) fn take() -> u64 {
        READS.with(|r| r.replace(0))
    }
}

/// See the test build's `probe`: nothing is counted outside unit tests.
#[cfg(not(test))]
pub(crate) mod probe {
    /// Does nothing.
    #[inline(always)]
    pub(crate) fn read(_n: usize) {}
}

/// The key at which the running count of two key-ordered sequences of
/// non-empty buckets, taken together in key order (`first(a, b)`: key `a`
/// comes no later than key `b`), first satisfies `done`. A step per
/// non-empty bucket: the empty keys between them are never visited.
fn union_find(
    a: impl Iterator<Item = (i32, u32)>,
    b: impl Iterator<Item = (i32, u32)>,
    first: impl Fn(i32, i32) -> bool,
    done: impl Fn(u64) -> bool,
) -> Option<i32> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    let mut seen = 0u64;
    loop {
        let (key, count) = match (a.peek(), b.peek()) {
            (Some(&(x, _)), Some(&(y, _))) if !first(x, y) => b.next(),
            (Some(_), _) => a.next(),
            (None, _) => b.next(),
        }?;
        seen = seen.saturating_add(u64::from(count));
        // A key in both stores may be done after its first part: the
        // running count only grows, so it is the same key as after both.
        if done(seen) {
            return Some(key);
        }
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
    /// The side that was folded: [`Collapse::Lowest`] or
    /// [`Collapse::Highest`].
    pub side: Collapse,
}

/// A fixed-capacity map from bucket keys to counts.
///
/// Implemented by [`CollapsingLowestStore`], [`CollapsingHighestStore`] and
/// [`NoStore`]. The methods are what [`DDSketch`](crate::DDSketch) needs; most
/// users never call them directly.
pub trait Store: Clone + Default {
    /// The number of buckets the store holds. A sketch's positive store
    /// must hold some (a build error where `DDSketch::with_mapping` is
    /// instantiated, which `cargo check` does not report); 0 is for a
    /// negative side that refuses its values ([`NoStore`]).
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
    /// The two stores' buckets are counted as they stand, so a union wider
    /// than the capacity is not collapsed further. This default walks the
    /// two stores' [`bins`](Self::bins) together from the nearer end: its
    /// cost follows the non-empty buckets, never the keys between them.
    fn key_at_rank_with(&self, other: &Self, rank: u64) -> Option<i32> {
        let total = self.total().saturating_add(other.total());
        if rank >= total {
            return None;
        }
        if rank < total / 2 {
            union_find(self.bins(), other.bins(), |a, b| a <= b, |seen| seen > rank)
        } else {
            // `rank < total`.
            let need = total.wrapping_sub(rank);
            let (a, b) = (self.bins().rev(), other.bins().rev());
            union_find(a, b, |a, b| a >= b, |seen| seen >= need)
        }
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

#[cfg(test)]
mod tests {
    use super::{probe, CollapsingHighestStore, CollapsingLowestStore, Store, StoreCollapse};

    /// A store that keeps the trait's own union walk (the collapsing store
    /// has a faster one of its own).
    #[derive(Clone, Default)]
    struct Plain<S>(S);

    impl<S: Store> Store for Plain<S> {
        const CAPACITY: usize = S::CAPACITY;
        fn add(&mut self, key: i32, count: u32) {
            self.0.add(key, count);
        }
        fn total(&self) -> u64 {
            self.0.total()
        }
        fn saturated(&self) -> u64 {
            self.0.saturated()
        }
        fn collapse(&self) -> Option<StoreCollapse> {
            self.0.collapse()
        }
        fn key_range(&self) -> Option<(i32, i32)> {
            self.0.key_range()
        }
        fn key_at_rank(&self, rank: u64) -> Option<i32> {
            self.0.key_at_rank(rank)
        }
        fn count_at_or_below(&self, key: i32) -> u64 {
            self.0.count_at_or_below(key)
        }
        fn count_of(&self, key: i32) -> u32 {
            self.0.count_of(key)
        }
        fn bins(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_ {
            self.0.bins()
        }
        fn clear(&mut self) {
            self.0.clear();
        }
    }

    /// The trait's union walk answers what the collapsing store's own does,
    /// for every rank, reading no more than the two stores' counters a few
    /// times whatever the keys between their ranges.
    fn agrees<S: Store>(a: &[(i32, u32)], b: &[(i32, u32)]) {
        let (mut x, mut y) = (Plain(S::default()), Plain(S::default()));
        a.iter().for_each(|&(k, c)| x.add(k, c));
        b.iter().for_each(|&(k, c)| y.add(k, c));
        let total = x.total() + y.total();
        for rank in 0..=total {
            probe::take();
            let got = x.key_at_rank_with(&y, rank);
            let reads = probe::take();
            assert!(reads <= 8 * S::CAPACITY as u64, "rank {rank}: {reads} read");
            assert_eq!(got, x.0.key_at_rank_with(&y.0, rank), "rank {rank}");
            assert_eq!(got, y.key_at_rank_with(&x, rank), "rank {rank}");
        }
    }

    fn cases<S: Store>() {
        // Most samples in the lower store: walks from either end cross the
        // ten million empty keys between the two ranges.
        agrees::<S>(&[(0, 1), (10, 4)], &[(10_000_000, 1), (10_000_040, 1)]);
        agrees::<S>(
            &[(0, 1), (5, 2), (40, 1), (50, 4)],
            &[(40, 2), (50, 1), (100, 3)],
        );
        agrees::<S>(&[(3, 1), (7, 2)], &[(3, 4), (9, 1)]);
        agrees::<S>(&[(i32::MIN, 3)], &[(i32::MAX, 1), (0, 1)]);
        agrees::<S>(&[], &[(5, 1)]);
        agrees::<S>(&[], &[]);
    }

    #[test]
    fn the_default_union_walk_reads_occupied_buckets_only() {
        cases::<CollapsingLowestStore<64>>();
        cases::<CollapsingHighestStore<64>>();
    }
}
