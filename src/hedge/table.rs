//! Per-target latency state in a fixed-capacity table.

use crate::mapping::IndexMapping;
use crate::store::Store;
use crate::window::LatencyWindow;

/// One target's latency window and bookkeeping.
#[derive(Clone, Debug)]
pub(crate) struct Target<K, S: Store, B, M: IndexMapping> {
    pub(crate) key: K,
    pub(crate) window: LatencyWindow<M, S>,
    /// The caller time of the target's latest request (the latest given,
    /// not the largest: one far-future timestamp cannot pin it).
    pub(crate) last_used: u64,
    /// A recent-use count: +1 a request (at most [`MAX_HITS`]), −1 each
    /// time the eviction hand passes over it.
    hits: u8,
    /// The target's own budget, when budgets are per target.
    pub(crate) budget: Option<B>,
}

impl<K, S: Store, B, M: IndexMapping> Target<K, S, B, M> {
    pub(crate) fn new(key: K, window: LatencyWindow<M, S>, now: u64, budget: Option<B>) -> Self {
        Self {
            key,
            window,
            last_used: now,
            hits: 0,
            budget,
        }
    }

    /// Notes a request at `now`.
    pub(crate) fn touch(&mut self, now: u64) {
        self.last_used = now;
        if self.hits < MAX_HITS {
            self.hits = self.hits.saturating_add(1);
        }
    }
}

/// The most a slot's use count holds: a target that stops being used is
/// evicted after at most this many passes of the hand.
const MAX_HITS: u8 = 15;

/// Up to `T` targets, found by a linear scan (faster than hashing for the
/// handful of hosts a client talks to). When full, a new target replaces
/// a *rarely* used one, by CLOCK with small counts: each request adds one
/// to its target's count (up to 15; a new target's first request does
/// not), a hand sweeps the slots taking one from each count it passes, and
/// the first slot at zero is replaced. A
/// busy target keeps its slot while one-off targets churn through the
/// others — a count halved on every pass instead decayed faster than a key
/// with half of all requests refilled it when misses came every other
/// request —, and a target that goes quiet leaves within 15 passes. No
/// timestamp is involved, so no clock anomaly can pin an entry.
#[derive(Clone, Debug)]
pub(crate) struct Table<K, S: Store, B, M: IndexMapping, const T: usize> {
    targets: heapless::Vec<Target<K, S, B, M>, T>,
    hand: usize,
}

impl<K: PartialEq + Copy, S: Store, B, M: IndexMapping, const T: usize> Table<K, S, B, M, T> {
    pub(crate) const fn new() -> Self {
        Self {
            targets: heapless::Vec::new(),
            hand: 0,
        }
    }

    /// The index of `key`'s entry, if present.
    #[inline]
    pub(crate) fn find(&self, key: &K) -> Option<usize> {
        self.targets.iter().position(|t| t.key == *key)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut Target<K, S, B, M>> {
        self.targets.get_mut(index)
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&Target<K, S, B, M>> {
        self.targets.get(index)
    }

    /// Inserts `target`, evicting if the table is full. Returns the new
    /// entry's index and whether it evicted.
    pub(crate) fn insert(&mut self, target: Target<K, S, B, M>) -> (usize, bool) {
        let target = match self.targets.push(target) {
            Ok(()) => return (self.targets.len().saturating_sub(1), false),
            Err(target) => target,
        };
        let len = self.targets.len();
        if len == 0 {
            return (usize::MAX, false); // T == 0: nothing can be stored
        }
        // Every count reaches zero within MAX_HITS + 1 passes: the sweep is
        // bounded.
        let mut victim = self.hand.checked_rem(len).unwrap_or(0);
        for _ in 0..len.saturating_mul(usize::from(MAX_HITS) + 1) {
            victim = self.hand.checked_rem(len).unwrap_or(0);
            self.hand = victim.wrapping_add(1).checked_rem(len).unwrap_or(0);
            match self.targets.get_mut(victim) {
                Some(t) if t.hits == 0 => break,
                Some(t) => t.hits = t.hits.saturating_sub(1),
                None => break,
            }
        }
        match self.targets.get_mut(victim) {
            Some(slot) => {
                *slot = target;
                (victim, true)
            }
            None => (usize::MAX, false),
        }
    }

    /// Drops every entry whose latest request is more than `idle_ns` away
    /// from `now`, before or after it (a time from another clock counts as
    /// unused); returns how many.
    pub(crate) fn evict_idle(&mut self, now: u64, idle_ns: u64) -> usize {
        let before = self.targets.len();
        self.targets
            .retain(|t| t.last_used.abs_diff(now) <= idle_ns);
        self.hand = 0;
        before.saturating_sub(self.targets.len())
    }

    pub(crate) fn len(&self) -> usize {
        self.targets.len()
    }
}
