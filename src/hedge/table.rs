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
    /// A recent-use count: +1 a request (at most [`MAX_HITS`]), halved
    /// every `AGE_EVERY × T` evictions (see [`Table`]).
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

/// The most a slot's use count holds.
const MAX_HITS: u8 = 15;

/// Evicted keys remembered, without their state: a key that comes back
/// while remembered was seen before, and enters with a use count of one.
const GHOSTS: usize = 32;

/// Every `AGE_EVERY × T` evictions every use count is halved: counts
/// reflect recent use, and a target that goes quiet falls to zero within
/// four such periods.
const AGE_EVERY: u32 = 16;

/// Up to `T` targets, found by a linear scan (faster than hashing for the
/// handful of hosts a client talks to). When full, a new target replaces
/// the *least used* one: each request adds one to its target's use count
/// (up to 15), and the slot with the smallest count goes (among equals,
/// the first from a hand that moves past each victim, so equals take
/// turns). A target's first request adds nothing, unless it was evicted
/// recently (remembered, without its state, among up to 32 keys evicted
/// last): keys seen once stay at zero and churn through one slot while
/// busy targets keep theirs, and a key that starts being busy while they
/// churn gets a count at its second request however short its first stay
/// was. Every `16 × T` evictions all counts are halved, so a target that
/// goes quiet leaves within 64 × T evictions. A busy target keeps its slot
/// while it gets a couple of requests every `16 × T` evictions: a thirtieth
/// of the traffic among one-off keys (a CLOCK sweep that took one from
/// each count it passed evicted any target under 1/T of it). No timestamp
/// is involved, so no clock anomaly can pin an entry.
#[derive(Clone, Debug)]
pub(crate) struct Table<K, S: Store, B, M: IndexMapping, const T: usize> {
    targets: heapless::Vec<Target<K, S, B, M>, T>,
    hand: usize,
    /// Keys evicted lately; when full, the one at `ghost_at` is replaced
    /// (the oldest, but for the reordering a comeback's removal makes).
    ghosts: heapless::Vec<K, GHOSTS>,
    ghost_at: usize,
    /// Evictions since counts were last halved.
    evictions: u32,
}

impl<K: PartialEq + Copy, S: Store, B, M: IndexMapping, const T: usize> Table<K, S, B, M, T> {
    pub(crate) const fn new() -> Self {
        Self {
            targets: heapless::Vec::new(),
            hand: 0,
            ghosts: heapless::Vec::new(),
            ghost_at: 0,
            evictions: 0,
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
    pub(crate) fn insert(&mut self, mut target: Target<K, S, B, M>) -> (usize, bool) {
        if T > 1 {
            // Seen before, lately: its second request counts.
            if let Some(i) = self.ghosts.iter().position(|k| *k == target.key) {
                self.ghosts.swap_remove(i);
                self.ghost_at = self.ghost_at.min(self.ghosts.len());
                target.hits = 1;
            }
        }
        let target = match self.targets.push(target) {
            Ok(()) => return (self.targets.len().saturating_sub(1), false),
            Err(target) => target,
        };
        let len = self.targets.len();
        if len == 0 {
            return (usize::MAX, false); // T == 0: nothing can be stored
        }
        let victim = if T > 1 { self.least_used(len) } else { 0 };
        match self.targets.get_mut(victim) {
            Some(slot) => {
                let old = core::mem::replace(slot, target);
                if T > 1 {
                    self.remember(old.key);
                    self.age(len);
                }
                (victim, true)
            }
            None => (usize::MAX, false),
        }
    }

    /// The slot with the smallest use count, the first from the hand among
    /// equals; the hand moves past it.
    fn least_used(&mut self, len: usize) -> usize {
        let start = self.hand.checked_rem(len).unwrap_or(0);
        let (mut victim, mut least) = (start, u8::MAX);
        for step in 0..len {
            let i = start.wrapping_add(step).checked_rem(len).unwrap_or(0);
            let hits = self.targets.get(i).map_or(0, |t| t.hits);
            if hits < least {
                (victim, least) = (i, hits);
                if hits == 0 {
                    break;
                }
            }
        }
        self.hand = victim.wrapping_add(1).checked_rem(len).unwrap_or(0);
        victim
    }

    /// Remembers an evicted key, replacing the oldest when full.
    fn remember(&mut self, key: K) {
        if let Err(key) = self.ghosts.push(key) {
            if let Some(slot) = self.ghosts.get_mut(self.ghost_at) {
                *slot = key;
            }
            self.ghost_at = self
                .ghost_at
                .wrapping_add(1)
                .checked_rem(GHOSTS)
                .unwrap_or(0);
        }
    }

    /// Counts one eviction; every `AGE_EVERY × len` halves every count.
    fn age(&mut self, len: usize) {
        self.evictions = self.evictions.saturating_add(1);
        let period = u32::try_from(len).map_or(u32::MAX, |l| l.saturating_mul(AGE_EVERY));
        if self.evictions >= period {
            self.evictions = 0;
            for t in &mut self.targets {
                t.hits /= 2;
            }
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
