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
    /// A recent-use count: +1 a request, halved every `AGE_EVERY × T`
    /// misses (see [`Table`]). It saturates at 65 535, far above what
    /// "twice as often" must tell apart (a ceiling of 15 made busy slots
    /// look alike: a newcomer with 30 % of the traffic never took one of 16
    /// slots at 4.4 % each).
    hits: u16,
    /// Whether it was asked for in the current aging period (bit 0) and
    /// in the one before (bit 1).
    asked: u8,
    /// Asked for nothing lately (at the last halving its count was 0, or
    /// it had not been asked for in the two periods before): any key
    /// without a slot may take it.
    quiet: bool,
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
            asked: 1,
            quiet: false,
            budget,
        }
    }

    /// Notes a request at `now`.
    pub(crate) fn touch(&mut self, now: u64) {
        self.last_used = now;
        self.quiet = false;
        self.asked |= 1;
        self.hits = self.hits.saturating_add(1);
    }
}

/// Keys without a slot remembered, with their use counts: those evicted
/// and those refused one, lately.
const CANDIDATES: usize = 32;

/// Every `AGE_EVERY × T` misses (requests to a key without a slot, the
/// table full) every use count is halved: counts reflect recent use, and a
/// target asked for nothing for two whole such periods is *quiet* at the
/// halving that ends them (sooner if its count reaches 0 first).
const AGE_EVERY: u32 = 16;

/// A key without a slot, and its recent use count.
#[derive(Clone, Copy, Debug)]
struct Candidate<K> {
    key: K,
    hits: u16,
}

/// Up to `T` targets, found by a linear scan (faster than hashing for the
/// handful of hosts a client talks to). Each request adds one to its
/// target's use count; a key without a slot has a count too,
/// while it is among the 32 remembered (evicted or refused lately; the
/// least recently asked for is forgotten first). While the table has room
/// a new key takes a slot. When it is full, a key without one takes the
/// slot of the least used target (among equals, the first from a hand that
/// moves past each victim) only once its own count, this request included,
/// is at least twice that target's and two more: a newcomer must have been
/// asked for about twice as often as the target it replaces, so that
/// targets asked for equally often keep their slots rather than evict one
/// another, in turn (one more target than slots, in turn, evicted at every
/// request under a recency rule) or at random (where counts differ by
/// chance, the least of a table's by more than a constant margin). Counts
/// have no ceiling that matters (65 535), so a newcomer asked for more
/// than twice as often as a slot's target gets that slot however busy the
/// target stays. A key refused a slot is served without one (the
/// hedger reads the aggregate window). An admitted key starts with its
/// count less one: a target's first request adds nothing, so keys seen
/// once never displace a target that was asked for, while a key that
/// starts being busy gets a slot over an unused one at its second request.
/// Every `16 × T` misses all counts, slots' and candidates', are halved;
/// a target whose count is 0 at a halving, or that was asked for nothing
/// in the two periods that halving ends, is *quiet* and yields its slot
/// to any key without one, so targets that go quiet give their slots to
/// newcomers however rare: within one period of their last request if
/// asked for once, within two to three however busy they were. No
/// timestamp is involved, so no clock anomaly can pin an entry.
#[derive(Clone, Debug)]
pub(crate) struct Table<K, S: Store, B, M: IndexMapping, const T: usize> {
    targets: heapless::Vec<Target<K, S, B, M>, T>,
    hand: usize,
    /// Keys without a slot lately; when full, the one at `candidate_at`
    /// is replaced (the oldest, but for the reordering an admission's
    /// removal makes).
    candidates: heapless::Vec<Candidate<K>, CANDIDATES>,
    candidate_at: usize,
    /// Misses since counts were last halved.
    misses: u32,
}

impl<K: Eq + Copy, S: Store, B, M: IndexMapping, const T: usize> Table<K, S, B, M, T> {
    pub(crate) const fn new() -> Self {
        Self {
            targets: heapless::Vec::new(),
            hand: 0,
            candidates: heapless::Vec::new(),
            candidate_at: 0,
            misses: 0,
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

    /// A request for `key`, which has no slot: gives it one, made by
    /// `make` (called only then), if the table has room or `key` earns one
    /// (see the type's docs). Returns the entry's index and whether a
    /// target was evicted for it; `None` when it is refused a slot (or
    /// `make` made nothing).
    pub(crate) fn insert(
        &mut self,
        key: K,
        make: impl FnOnce(K) -> Option<Target<K, S, B, M>>,
    ) -> Option<(usize, bool)> {
        self.insert_as(key, make, true)
    }

    /// A slot for `key` if the table has room (with one slot, the slot):
    /// for a use that is no request, which earns no slot but may take a
    /// free one. Counts nothing.
    pub(crate) fn insert_if_room(
        &mut self,
        key: K,
        make: impl FnOnce(K) -> Option<Target<K, S, B, M>>,
    ) -> Option<(usize, bool)> {
        self.insert_as(key, make, false)
    }

    /// [`insert`](Self::insert), or, unless `request`,
    /// [`insert_if_room`](Self::insert_if_room).
    fn insert_as(
        &mut self,
        key: K,
        make: impl FnOnce(K) -> Option<Target<K, S, B, M>>,
        request: bool,
    ) -> Option<(usize, bool)> {
        if T == 1 {
            // One slot, no choice: the new key takes it.
            let target = make(key)?;
            return match self.targets.first_mut() {
                Some(slot) => {
                    *slot = target;
                    Some((0, true))
                }
                None => self.targets.push(target).ok().map(|()| (0, false)),
            };
        }
        let len = self.targets.len();
        if !request {
            if len == T {
                return None;
            }
            let mut target = make(key)?;
            if let Some(at) = self.candidates.iter().position(|c| c.key == key) {
                target.hits = self
                    .candidates
                    .get(at)
                    .map_or(0, |c| c.hits.saturating_sub(1));
                self.forget(at);
            }
            return self.targets.push(target).ok().map(|()| (len, false));
        }
        if len == T {
            // A miss: counts age first, so that the newcomer's and the
            // slots' are compared at one age.
            self.age(len);
        }
        let (hits, at) = self.note(key);
        if len < T {
            self.forget(at);
            let mut target = make(key)?;
            target.hits = hits.saturating_sub(1);
            return self.targets.push(target).ok().map(|()| (len, false));
        }
        let victim = self.least_used(len)?;
        let (least, quiet) = self
            .targets
            .get(victim)
            .map_or((0, true), |t| (t.hits, t.quiet));
        // A quiet target yields to any key; a busy one to a key asked for
        // at least twice as often, and two more (`2 × least + 2`): counts
        // of keys asked for equally often, at random, differ by chance, the
        // least of a table's by more than two, so a margin of a constant
        // churned the table (50 equal keys at random over 16 slots: one
        // eviction every 26 requests, the slots' windows seldom warm).
        if !quiet && hits < least.saturating_mul(2).saturating_add(2) {
            return None;
        }
        self.forget(at);
        let mut target = make(key)?;
        target.hits = hits.saturating_sub(1);
        let slot = self.targets.get_mut(victim)?;
        let old = core::mem::replace(slot, target);
        self.hand = victim.wrapping_add(1).checked_rem(len).unwrap_or(0);
        self.remember(Candidate {
            key: old.key,
            hits: old.hits,
        });
        Some((victim, true))
    }

    /// Counts a request for `key`, without a slot, among the candidates:
    /// its count after it, and where it is. A key asked for again becomes
    /// the newest (the last to be forgotten), so a stream of keys seen
    /// once does not wipe the count of one that keeps coming back.
    fn note(&mut self, key: K) -> (u16, usize) {
        if let Some(i) = self.candidates.iter().position(|c| c.key == key) {
            let hits = self
                .candidates
                .get(i)
                .map_or(1, |c| c.hits.saturating_add(1));
            // The newest: the one before the next to be replaced, or the
            // last pushed while the list is not full.
            let len = self.candidates.len();
            let newest = if len < CANDIDATES {
                len.saturating_sub(1)
            } else {
                self.candidate_at
                    .checked_sub(1)
                    .unwrap_or(len.saturating_sub(1))
            };
            // A swap by hand: `slice::swap` would keep a panic path.
            if let (Some(&found), Some(&last)) =
                (self.candidates.get(i), self.candidates.get(newest))
            {
                if let Some(slot) = self.candidates.get_mut(i) {
                    *slot = last;
                }
                if let Some(slot) = self.candidates.get_mut(newest) {
                    *slot = Candidate { hits, ..found };
                }
                return (hits, newest);
            }
            return (hits, i);
        }
        (1, self.remember(Candidate { key, hits: 1 }))
    }

    /// Drops the candidate at `at` (it took a slot).
    fn forget(&mut self, at: usize) {
        if at < self.candidates.len() {
            self.candidates.swap_remove(at);
            self.candidate_at = self.candidate_at.min(self.candidates.len());
        }
    }

    /// The first quiet slot from the hand, or else the slot with the
    /// smallest use count, the first from the hand among equals. (A quiet
    /// slot's count is 0, as a slot's asked for once since may be: the
    /// quiet one is taken first, since it yields to any key.)
    fn least_used(&self, len: usize) -> Option<usize> {
        let start = self.hand.checked_rem(len).unwrap_or(0);
        let (mut victim, mut least) = (None, u32::MAX);
        for step in 0..len {
            let i = start.wrapping_add(step).checked_rem(len).unwrap_or(0);
            // Quiet first (0), then by count (1 + hits).
            let rank =
                self.targets
                    .get(i)
                    .map_or(0, |t| if t.quiet { 0 } else { u32::from(t.hits) + 1 });
            if victim.is_none() || rank < least {
                (victim, least) = (Some(i), rank);
                if rank == 0 {
                    break;
                }
            }
        }
        victim
    }

    /// Remembers a key without a slot, replacing the oldest when full;
    /// returns where it went.
    fn remember(&mut self, candidate: Candidate<K>) -> usize {
        match self.candidates.push(candidate) {
            Ok(()) => self.candidates.len().saturating_sub(1),
            Err(candidate) => {
                let at = self.candidate_at;
                if let Some(slot) = self.candidates.get_mut(at) {
                    *slot = candidate;
                }
                self.candidate_at = at.wrapping_add(1).checked_rem(CANDIDATES).unwrap_or(0);
                at
            }
        }
    }

    /// Counts one miss; every `AGE_EVERY × len` halves every count.
    fn age(&mut self, len: usize) {
        self.misses = self.misses.saturating_add(1);
        let period = u32::try_from(len).map_or(u32::MAX, |l| l.saturating_mul(AGE_EVERY));
        if self.misses >= period {
            self.misses = 0;
            for t in &mut self.targets {
                t.quiet = t.hits == 0 || t.asked & 0b11 == 0;
                t.asked = (t.asked & 1) << 1;
                t.hits /= 2;
            }
            for c in &mut self.candidates {
                c.hits /= 2;
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
