//! A rotating latency window of atomic bucket counters, written by every
//! thread at once.
//!
//! The same window as [`LatencyWindow`](crate::window::LatencyWindow) —
//! two halves, each with exact and censored samples, rotated by sample
//! count and by time, emptied after an idle gap, queried with the same
//! Kaplan–Meier estimator — over a fixed key range instead of a sketch:
//! a sample is one relaxed `fetch_add` on the counter of its key (the
//! pattern of hg64 and pelikan's `AtomicHistogram`), so recording never
//! waits for anyone.
//!
//! # Keys
//! The range is the [`BUCKETS`] keys of the hedger's mapping (cubic by
//! default) ending at the key
//! of the largest sample the hedger accepts
//! ([`max_sample_ns`](crate::hedge::HedgeConfig::max_sample_ns)): 10 min
//! down to about 0.95 µs at the defaults. Keys below the range collapse
//! into its first bucket, as the lowest keys of a
//! [`CollapsingLowestStore`](crate::CollapsingLowestStore) do; elapsed
//! times of 0 (too small to index) have a counter of their own. Within the
//! range a bucket holds exactly what the sketch's bucket of the same key
//! holds.
//!
//! # Time
//! The window's time and rotation period follow `LatencyWindow`'s rules
//! (see *Time* in [`crate::window`]): the window's time is the latest
//! non-stale timestamp, a timestamp behind it by less than two periods
//! moves neither it nor the period's start, a stale one neither until a
//! run of `STALE_RUN` spanning more than two periods completes, and one two
//! periods ahead is an idle gap.
//!
//! # Rotation, refresh, and the one thread that does them
//! Rotating, emptying after an idle gap, restarting the window's time and
//! period when a stale run completes, and refreshing the cached quantile
//! are done under a try-lock flag: the thread that wins it does the work,
//! the others skip it and carry on (the condition still holds at their
//! next sample, so nothing is lost but a little timeliness). Decisions are
//! taken on a snapshot of the window's generation (bumped by every
//! rotation, idle gap's emptying and completed stale run) and dropped if
//! another thread changed it first, so two threads that both saw "rotate"
//! rotate once.
//!
//! # What a concurrent reader may see
//! * The cached delay is one `AtomicU64`: a reader sees the previous
//!   refresh's value or the new one, never a mix.
//! * A refresh reads counters while others add to them: its estimate is of
//!   some mix of the samples before and during the pass (counts are read
//!   before the buckets' bounds and the buckets, but a weakly ordered CPU
//!   may show a writer's count before its bucket: an uncensored pass that
//!   finds fewer samples than counted answers where its two walks meet).
//!   The next refresh, 1/32 of the samples later, sees them all.
//! * A rotation clears the old previous half *before* making it current,
//!   so no sample is written into a half while it is being cleared unless
//!   its writer read which half was current two rotations earlier (a
//!   thread preempted across two rotations): such a sample may survive the
//!   clear or go with it. An idle gap's emptying clears the current half
//!   too: a thread that finds the gap while another holds the flag drops
//!   its sample (counted as refused) rather than write into a half being
//!   cleared, and a thread that reads the time the emptying set writes
//!   after the clear (the time is released after it and acquired); only
//!   a sample whose timestamp is from before the gap, written during the
//!   clear, may survive it or go with it.
//! * The window's time is moved forward with `fetch_max`: a thread that
//!   read it before another moved it cannot move it back. An idle gap and
//!   a completed stale run, decided on the time a thread read, are checked
//!   again under the flag and dropped if the window's time has moved since
//!   (another thread's timestamp closed the gap, or broke the run).
//! * The run of stale timestamps is counted without the flag: threads
//!   racing on it may count a timestamp twice or miss one, so a run may
//!   take over a sample or two early or late (and a run completed while
//!   the flag is busy takes over at the next stale timestamp). One thread
//!   counts exactly as `LatencyWindow` does.
//!
//! Without rotations and clears in flight, counts are exact: every sample
//! is one atomic increment of its bucket and of its side's count.

use crate::mapping::{CubicMapping, IndexMapping};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::window::survival::{self, Answer, Level, Pair, Side};
use crate::window::{idle_after, refresh_after, LatencyWindow, Rotation};

use super::slots::SlotTable;

/// Buckets per side: 1 µs (0.95 µs) to 10 min at α = 1 %, like the
/// default `CollapsingLowestStore<1024>` of [`Hedger`](crate::hedge::Hedger).
pub(crate) const BUCKETS: usize = 1024;

/// A bucket refuses samples from here on (and is never incremented past
/// `u32::MAX`, whatever number of threads race on the last increments).
const BUCKET_LIMIT: u32 = u32::MAX - (1 << 16);

/// The offset of the last bucket from the first.
const LAST: i64 = BUCKETS as i64 - 1;

/// What every window of one hedger shares: how to key and when to rotate.
#[derive(Clone, Debug)]
pub(crate) struct Params<M: IndexMapping = CubicMapping> {
    pub(crate) mapping: M,
    /// The key of the first bucket.
    pub(crate) low: i32,
    /// The bucket of a sample, by table (see [`SlotTable`]).
    slots: SlotTable,
    pub(crate) rotation: Rotation,
    /// A longer gap is idle ([`idle_after`]).
    pub(crate) idle_after: u64,
    pub(crate) quantile: Level,
}

impl<M: IndexMapping> Params<M> {
    /// Keys for samples up to `max_sample_ns` (validated nonzero; every
    /// `u64` is indexable by the crate's mappings).
    pub(crate) fn new(mapping: M, max_sample_ns: u64, rotation: Rotation, quantile: f64) -> Self {
        let top = mapping.index_u64(max_sample_ns).unwrap_or(0);
        let period_ns = rotation.period_ns.max(1);
        // 1023 below an `i32`: no wrap in `i64`, and back in range.
        let low = i32::try_from(i64::from(top).saturating_sub(LAST)).unwrap_or(i32::MIN);
        let slots = SlotTable::new(
            max_sample_ns,
            |v| mapping.index_u64(v).map(|key| slot_of_key(low, key)),
            |slot| {
                let key = i64::from(low).saturating_add(i64::try_from(slot).unwrap_or(LAST));
                // An estimate (`as` saturates): the table checks it.
                mapping.lower_bound(i32::try_from(key).unwrap_or(i32::MAX)) as u64
            },
        );
        Self {
            mapping,
            low,
            slots,
            rotation: Rotation {
                period_ns,
                ..rotation
            },
            idle_after: idle_after(period_ns),
            // Validated with the configuration; 0 if not.
            quantile: Level::new(quantile).unwrap_or(Level::ZERO),
        }
    }

    /// The smallest sample keyed exactly (rounded down): smaller ones
    /// share the first bucket.
    pub(crate) fn floor_ns(&self) -> u64 {
        // `as` saturates; the bound is positive.
        self.mapping.lower_bound(self.low) as u64
    }

    /// The bucket of key `key`.
    #[inline]
    fn slot(&self, key: i32) -> usize {
        slot_of_key(self.low, key)
    }

    /// The bucket of a sample of `value` ns, `None` for the zero bucket
    /// (0, the only `u64` too small to index): `slot(index_u64(value))`,
    /// by table.
    #[inline(always)]
    fn slot_of(&self, value: u64) -> Option<usize> {
        self.slots.slot(value, |v| {
            self.mapping.index_u64(v).map(|key| self.slot(key))
        })
    }
}

/// The bucket of key `key` in a window whose first bucket's key is `low`.
#[inline]
fn slot_of_key(low: i32, key: i32) -> usize {
    let offset = i64::from(key).saturating_sub(i64::from(low));
    // Clamped into 0..BUCKETS: the cast is exact.
    offset.clamp(0, LAST) as usize
}

/// The exact or the censored samples of one half.
#[derive(Debug)]
struct AtomicSide {
    buckets: [AtomicU32; BUCKETS],
    /// Samples too small to index (elapsed 0).
    zero: AtomicU64,
    count: AtomicU64,
    /// The smallest and largest sample (exact side only); `min > max`
    /// while empty.
    min: AtomicU64,
    max: AtomicU64,
    /// Bounds of the occupied buckets (`lo > hi` while empty): every
    /// counted bucket lies in `lo..=hi` (a batch with a sample of 0 moves
    /// `lo` to the first bucket, occupied or not). A refresh walks these,
    /// not the whole range.
    lo: AtomicUsize,
    hi: AtomicUsize,
}

impl AtomicSide {
    fn new() -> Self {
        Self {
            buckets: core::array::from_fn(|_| AtomicU32::new(0)),
            zero: AtomicU64::new(0),
            count: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
            lo: AtomicUsize::new(BUCKETS),
            hi: AtomicUsize::new(0),
        }
    }

    /// Adds one sample; `false` if its bucket is full.
    #[inline]
    fn add<M: IndexMapping>(&self, p: &Params<M>, value: u64, extremes: bool) -> bool {
        // Integer keys (`index_u64`): 0, the only `u64` too small to
        // index, goes to the zero bucket.
        if let Some(slot) = p.slot_of(value) {
            if let Some(bucket) = self.buckets.get(slot) {
                if bucket.fetch_add(1, Ordering::Relaxed) >= BUCKET_LIMIT {
                    bucket.fetch_sub(1, Ordering::Relaxed);
                    return false;
                }
            }
            // Loads first: the common sample lands inside the range.
            if slot < self.lo.load(Ordering::Relaxed) {
                self.lo.fetch_min(slot, Ordering::Relaxed);
            }
            if slot > self.hi.load(Ordering::Relaxed) {
                self.hi.fetch_max(slot, Ordering::Relaxed);
            }
        } else {
            self.zero.fetch_add(1, Ordering::Relaxed);
        }
        // Cannot overflow: 2⁶⁴ samples at 10⁹ a second take 584 years.
        self.count.fetch_add(1, Ordering::Relaxed);
        if extremes {
            // Loads first: the common sample moves neither end.
            if value < self.min.load(Ordering::Relaxed) {
                self.min.fetch_min(value, Ordering::Relaxed);
            }
            if value > self.max.load(Ordering::Relaxed) {
                self.max.fetch_max(value, Ordering::Relaxed);
            }
        }
        true
    }

    /// The bucket part of [`add`](Self::add): `Some(true)` for a sample
    /// counted in its bucket, `Some(false)` for one of the zero bucket
    /// (not counted yet), `None` if its bucket is full. The rest of `add`
    /// waits in a [`Pending`].
    #[inline]
    fn add_to_bucket<M: IndexMapping>(&self, p: &Params<M>, value: u64) -> Option<bool> {
        let Some(slot) = p.slot_of(value) else {
            return Some(false);
        };
        if let Some(bucket) = self.buckets.get(slot) {
            if bucket.fetch_add(1, Ordering::Relaxed) >= BUCKET_LIMIT {
                bucket.fetch_sub(1, Ordering::Relaxed);
                return None;
            }
        }
        Some(true)
    }

    /// Adds what `pending` gathered: counts, zero samples, the ends of the
    /// occupied buckets and, with `extremes` (the exact side), of the
    /// samples.
    fn apply<M: IndexMapping>(&self, p: &Params<M>, pending: &Pending, extremes: bool) {
        if pending.count == 0 {
            return;
        }
        if pending.zero > 0 {
            self.zero.fetch_add(pending.zero, Ordering::Relaxed);
        }
        if pending.count > pending.zero {
            // The buckets the batch filled lie between those of its
            // smallest and largest samples (the mapping is monotonic). A
            // smallest sample of the zero bucket bounds nothing: the range
            // then starts at the first bucket, which only makes a walk pass
            // over empty buckets (and likewise at the top).
            let bucket = |value: u64, none: usize| p.slot_of(value).unwrap_or(none);
            let lo = bucket(pending.min, 0);
            // One look-up for a batch of one value (most batches, at low
            // rates: a sample a publication).
            let hi = if pending.max == pending.min {
                lo
            } else {
                bucket(pending.max, BUCKETS - 1)
            };
            if lo < self.lo.load(Ordering::Relaxed) {
                self.lo.fetch_min(lo, Ordering::Relaxed);
            }
            if hi > self.hi.load(Ordering::Relaxed) {
                self.hi.fetch_max(hi, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(pending.count, Ordering::Relaxed);
        if extremes {
            if pending.min < self.min.load(Ordering::Relaxed) {
                self.min.fetch_min(pending.min, Ordering::Relaxed);
            }
            if pending.max > self.max.load(Ordering::Relaxed) {
                self.max.fetch_max(pending.max, Ordering::Relaxed);
            }
        }
    }

    fn clear(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
        self.zero.store(0, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        self.min.store(u64::MAX, Ordering::Relaxed);
        self.max.store(0, Ordering::Relaxed);
        self.lo.store(BUCKETS, Ordering::Relaxed);
        self.hi.store(0, Ordering::Relaxed);
    }

    #[inline]
    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Every sample its buckets hold (a pass over them).
    #[cfg(test)]
    fn bucket_total(&self) -> u64 {
        self.buckets
            .iter()
            .fold(self.zero.load(Ordering::Relaxed), |sum, b| {
                sum.saturating_add(u64::from(b.load(Ordering::Relaxed)))
            })
    }
}

/// What a batch has added to one side's buckets and not yet to its counts
/// and ends: two comparisons a sample; the ends of the occupied buckets
/// follow from those of the samples, and the count from the window's
/// running counts, when the batch is published.
#[derive(Clone, Copy, Debug)]
struct Pending {
    count: u64,
    zero: u64,
    min: u64,
    max: u64,
}

impl Pending {
    const NONE: Self = Self {
        count: 0,
        zero: 0,
        min: u64::MAX,
        max: 0,
    };

    /// Notes a sample of `value` (`keyed`: counted in a bucket; else one of
    /// the zero bucket). Not its count (see above).
    #[inline]
    fn note(&mut self, value: u64, keyed: bool) {
        if !keyed {
            self.zero = self.zero.wrapping_add(1);
        }
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }
}

/// A side as the estimator reads it.
struct View<'a, M: IndexMapping> {
    side: &'a AtomicSide,
    params: &'a Params<M>,
}

impl<M: IndexMapping> Side for View<'_, M> {
    fn count(&self) -> u64 {
        self.side.count()
    }

    fn zero_count(&self) -> u64 {
        self.side.zero.load(Ordering::Relaxed)
    }

    fn extremes(&self) -> Option<(u64, u64)> {
        let (min, max) = (
            self.side.min.load(Ordering::Relaxed),
            self.side.max.load(Ordering::Relaxed),
        );
        (min <= max).then_some((min, max))
    }

    fn bins(&self) -> impl Iterator<Item = (i32, u32)> + '_ {
        let (lo, occupied) = self.occupied();
        let first = self.key(lo);
        occupied.iter().zip(first..).filter_map(|(b, key)| {
            let c = b.load(Ordering::Relaxed);
            (c != 0).then_some((key, c))
        })
    }

    fn value_u64(&self, key: i32) -> u64 {
        self.params.mapping.value_u64(key)
    }

    /// Both halves index buckets alike (from `params.low`): the union is
    /// the sum of the two arrays over the joint range, one pass without
    /// the four-way merge of the general walk (the answer is the same:
    /// keys in ascending order, the first whose cumulative count passes
    /// `rank`, empty buckets passed over).
    fn union_at_rank(&self, other: &Self, rank: u64) -> Option<Answer> {
        let zeros = self.zero_count().saturating_add(other.zero_count());
        let Some(mut rank) = rank.checked_sub(zeros) else {
            return Some(Answer::Zero);
        };
        // The counts before the bounds: a sample a writer adds meanwhile,
        // opening a bucket past them, is then not counted either.
        let total = self
            .count()
            .saturating_add(other.count())
            .saturating_sub(zeros);
        let (alo, a) = self.occupied();
        let (blo, b) = other.occupied();
        let ends = |lo: usize, run: &[AtomicU32]| {
            (!run.is_empty()).then(|| (lo, lo.saturating_add(run.len())))
        };
        let (lo, end) = match (ends(alo, a), ends(blo, b)) {
            (Some((la, ea)), Some((lb, eb))) => (la.min(lb), ea.max(eb)),
            (Some(r), None) | (None, Some(r)) => r,
            (None, None) => return Some(Answer::Largest),
        };
        // Whole arrays, one index: outside a side's occupied run its
        // buckets are empty (a writer racing ahead of its run's ends adds a
        // sample that arrives during the pass, as one anywhere else does).
        let (a, b) = (&self.side.buckets, &other.side.buckets);
        // Two `u32` counts cannot overflow a `u64`.
        let both = |i: usize| match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) => u64::from(x.load(Ordering::Relaxed))
                .wrapping_add(u64::from(y.load(Ordering::Relaxed))),
            _ => 0,
        };
        if rank >= total {
            // Counted but not yet in the buckets (a racing writer).
            return Some(Answer::Largest);
        }
        // From both ends at once, a bucket from each a step: from the
        // bottom, the first bucket whose samples at or below it pass
        // `rank`; from the top, the first whose samples at or above it
        // reach `total − rank` — the same bucket. The walk ends at the
        // nearer of the two ends (a p90 with a few outliers far above it
        // is found from the bottom, one with outliers far below from the
        // top), however far apart the occupied buckets are.
        let mut need = total.saturating_sub(rank);
        let (mut up, mut down) = (lo, end);
        // The occupied buckets nearest the meeting point, from each end.
        let (mut below, mut above) = (None, None);
        while up < down {
            let c = both(up);
            if c > rank {
                return Some(Answer::Key(self.key(up)));
            }
            if c > 0 {
                below = Some(up);
            }
            rank = rank.wrapping_sub(c);
            up = up.wrapping_add(1);
            if up >= down {
                break;
            }
            // `down > up ≥ lo`: no wrap.
            down = down.wrapping_sub(1);
            let c = both(down);
            if c >= need {
                return Some(Answer::Key(self.key(down)));
            }
            if c > 0 {
                above = Some(down);
            }
            need = need.wrapping_sub(c);
        }
        // The walks met without a match: the buckets held fewer samples
        // than counted (a writer's count seen before its bucket, as weakly
        // ordered CPUs may show them). The rank lies where they met, not at
        // the largest sample: the lowest occupied bucket the top walk took
        // (the bottom walk's cumulative count stayed at or below the rank
        // up to it), else the highest the bottom walk passed.
        Some(
            above
                .or(below)
                .map_or(Answer::Largest, |i| Answer::Key(self.key(i))),
        )
    }
}

impl<M: IndexMapping> View<'_, M> {
    /// The run of buckets from `lo` to `hi`, which holds every occupied
    /// one, and where it starts (empty while `lo > hi`, or when a racing
    /// writer left them out of bounds).
    fn occupied(&self) -> (usize, &[AtomicU32]) {
        let (lo, hi) = (
            self.side.lo.load(Ordering::Relaxed),
            self.side.hi.load(Ordering::Relaxed),
        );
        (lo, self.side.buckets.get(lo..=hi).unwrap_or(&[]))
    }

    /// The key of bucket `i` (`i < BUCKETS` fits an `i32`).
    fn key(&self, i: usize) -> i32 {
        self.params
            .low
            .saturating_add(i32::try_from(i).unwrap_or(i32::MAX))
    }
}

#[derive(Debug)]
struct Half {
    exact: AtomicSide,
    censored: AtomicSide,
}

impl Half {
    fn new() -> Self {
        Self {
            exact: AtomicSide::new(),
            censored: AtomicSide::new(),
        }
    }

    fn clear(&self) {
        self.exact.clear();
        self.censored.clear();
    }

    #[inline]
    fn count(&self) -> u64 {
        self.exact.count().saturating_add(self.censored.count())
    }
}

/// What a sample's timestamp asks of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// An idle gap: empty both halves.
    Empty,
    /// A run of stale timestamps completed: the window's time and the
    /// period restart.
    Restart,
    Rotate,
    /// Nothing to do.
    None,
}

/// A value alone on its cache lines (128 bytes: two 64-byte lines, which
/// adjacent-line prefetchers pair), so that writing it does not take the
/// lines of its neighbours away from the cores reading them.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// See the module docs.
#[derive(Debug)]
pub(crate) struct AtomicWindow {
    halves: [Half; 2],
    /// Which half is current (0 or 1).
    current: AtomicUsize,
    started: AtomicBool,
    /// When the current half began (once `started`).
    start: AtomicU64,
    /// The window's time, as in `LatencyWindow`: the latest non-stale
    /// timestamp (a running maximum, `fetch_max`), set back or forward only
    /// by an idle gap and a completed stale run (to their timestamp).
    /// Written by most samples, so on a line of its own, away from what
    /// every request reads.
    time: Padded<AtomicU64>,
    /// Distinct stale timestamps since `time` last moved, the first and
    /// the last of them and the `time` they are behind, as in
    /// `LatencyWindow` (they leave `time` and `start` alone until
    /// `STALE_RUN` of them span more than two periods).
    stale_run: AtomicU32,
    stale_since: AtomicU64,
    stale_at: AtomicU64,
    stale_of: AtomicU64,
    /// Bumped by every rotation, idle gap's emptying and completed stale
    /// run.
    generation: AtomicU64,
    /// The try-lock of rotation and refresh (on a line of its own too).
    busy: Padded<AtomicBool>,
    /// The cached quantile in ns plus one, saturating; 0 for none.
    cached: AtomicU64,
    /// At this count of the current half, refresh (or rotate, at
    /// `max_samples`): the schedule of `LatencyWindow`.
    next_check: AtomicU64,
    rotations: AtomicU64,
}

impl AtomicWindow {
    pub(crate) fn new() -> Self {
        Self {
            halves: [Half::new(), Half::new()],
            current: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            start: AtomicU64::new(0),
            time: Padded(AtomicU64::new(0)),
            stale_run: AtomicU32::new(0),
            stale_since: AtomicU64::new(0),
            stale_at: AtomicU64::new(0),
            stale_of: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            busy: Padded(AtomicBool::new(false)),
            cached: AtomicU64::new(0),
            next_check: AtomicU64::new(1),
            rotations: AtomicU64::new(0),
        }
    }

    /// The current half and the other one.
    #[inline]
    fn halves(&self) -> (&Half, &Half) {
        let [a, b] = &self.halves;
        if self.current.load(Ordering::Acquire) & 1 == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Runs `f` if no other thread is rotating or refreshing; never waits.
    #[inline]
    fn try_locked(&self, f: impl FnOnce()) -> bool {
        let won = self
            .busy
            .0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if won {
            f();
            self.busy.0.store(false, Ordering::Release);
        }
        won
    }

    /// Fills the current half's bucket of `value` (exact or censored side)
    /// to the limit, so that its next sample is refused.
    #[cfg(test)]
    pub(crate) fn fill_bucket<M: IndexMapping>(&self, p: &Params<M>, value: u64, exact: bool) {
        let (current, _) = self.halves();
        let side = if exact {
            &current.exact
        } else {
            &current.censored
        };
        if let Some(bucket) = side.buckets.get(p.slot_of(value).unwrap_or(0)) {
            bucket.store(BUCKET_LIMIT, Ordering::Relaxed);
        }
    }

    /// Records one sample of `elapsed` ns at `now`, exact or censored;
    /// `false` if its bucket is full.
    #[inline]
    pub(crate) fn record<M: IndexMapping>(
        &self,
        p: &Params<M>,
        now: u64,
        elapsed: u64,
        exact: bool,
    ) -> bool {
        if !self.advance(p, now) {
            return false;
        }
        let (current, _) = self.halves();
        let side = if exact {
            &current.exact
        } else {
            &current.censored
        };
        if !side.add(p, elapsed, exact) {
            return false;
        }
        if current.count() >= self.next_check.load(Ordering::Relaxed) {
            self.check(p);
        }
        true
    }

    /// Records `samples` (timestamp, elapsed, exact) in order, exactly as
    /// [`record`](Self::record) one by one would, calling `refused` with
    /// the position and kind of each whose bucket is full. Between the
    /// samples that do more than move the window's time forward — an idle
    /// gap, a stale timestamp, a rotation or refresh due — the window's
    /// state stays in locals: the window's time is stored once, counts and
    /// ends added once, and only the buckets are written per sample. Such a
    /// sample publishes what is gathered and takes `record`'s own path.
    pub(crate) fn record_batch<M: IndexMapping>(
        &self,
        p: &Params<M>,
        samples: impl IntoIterator<Item = (u64, u64, bool)>,
        mut refused: impl FnMut(usize, bool),
    ) {
        let period = p.rotation.period_ns;
        let idle = p.idle_after;
        let warm = p.rotation.min_samples;
        let mut samples = samples.into_iter().enumerate();
        'batch: while self.started.load(Ordering::Acquire) {
            // The window as of now, in locals.
            let generation = self.generation.load(Ordering::Acquire);
            // Acquire, as in `advance`: a time an emptying set is read
            // after its clear.
            let stored = self.time.0.load(Ordering::Acquire);
            let mut time = stored;
            let start = self.start.load(Ordering::Relaxed);
            // The sample times at which `advance` would act: more than
            // `idle` from the window's time either way (an idle gap ahead,
            // a stale timestamp behind: `time ± idle`, saturating, bound
            // the same samples), or at the period's end once the half
            // holds `min_samples`.
            let rotate_at = start.saturating_add(period);
            let (current, _) = self.halves();
            let next_check = self.next_check.load(Ordering::Relaxed);
            let mut exact_count = current.exact.count();
            let mut count = exact_count.saturating_add(current.censored.count());
            // Each side's count is what the batch added to the counts.
            let (exact_from, censored_from) = (exact_count, count.wrapping_sub(exact_count));
            let (mut exact_side, mut censored_side) = (Pending::NONE, Pending::NONE);
            let publish = |mut e: Pending, mut c: Pending, count: u64, exact_count: u64, time| {
                e.count = exact_count.wrapping_sub(exact_from);
                c.count = count.wrapping_sub(exact_count).wrapping_sub(censored_from);
                current.exact.apply(p, &e, true);
                current.censored.apply(p, &c, false);
                if time != stored {
                    self.time.0.fetch_max(time, Ordering::Relaxed);
                }
            };
            for (i, (now, elapsed, exact)) in samples.by_ref() {
                let event = now.abs_diff(time) > idle
                    || (now >= rotate_at && exact_count >= warm)
                    || self.generation.load(Ordering::Relaxed) != generation;
                if event {
                    // Time moves the window (or another thread did): as one
                    // `record`, on the window's stored state.
                    publish(exact_side, censored_side, count, exact_count, time);
                    if !self.record(p, now, elapsed, exact) {
                        refused(i, exact);
                    }
                    continue 'batch;
                }
                time = time.max(now);
                // Each side's own code: its pending ends stay in registers.
                if exact {
                    let Some(keyed) = current.exact.add_to_bucket(p, elapsed) else {
                        refused(i, exact);
                        continue;
                    };
                    exact_side.note(elapsed, keyed);
                } else {
                    let Some(keyed) = current.censored.add_to_bucket(p, elapsed) else {
                        refused(i, exact);
                        continue;
                    };
                    censored_side.note(elapsed, keyed);
                }
                // At most the samples of a batch more: no overflow.
                count = count.wrapping_add(1);
                exact_count = exact_count.wrapping_add(u64::from(exact));
                if count >= next_check {
                    publish(exact_side, censored_side, count, exact_count, time);
                    self.check(p);
                    continue 'batch;
                }
            }
            publish(exact_side, censored_side, count, exact_count, time);
            return;
        }
        // Not started: the first sample starts the window.
        for (i, (now, elapsed, exact)) in samples {
            if !self.record(p, now, elapsed, exact) {
                refused(i, exact);
            }
        }
    }

    /// The current half reached `next_check`: rotate on count, or refresh
    /// (unless another thread does it, or did).
    #[inline]
    fn check<M: IndexMapping>(&self, p: &Params<M>) {
        self.try_locked(|| {
            // Another thread may have rotated or refreshed since.
            let (current, _) = self.halves();
            if current.exact.count() >= p.rotation.max_samples {
                self.rotate(p);
            } else if current.count() >= self.next_check.load(Ordering::Relaxed) {
                self.refresh(p);
            }
        });
    }

    /// Brings the window to `now`, as `LatencyWindow::advance` does.
    #[inline]
    fn advance<M: IndexMapping>(&self, p: &Params<M>, now: u64) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if !self.started.load(Ordering::Acquire) {
            self.try_locked(|| {
                if !self.started.load(Ordering::Relaxed) {
                    self.start.store(now, Ordering::Relaxed);
                    self.time.0.store(now, Ordering::Relaxed);
                    self.started.store(true, Ordering::Release);
                }
            });
            return true;
        }
        // Acquire, against an emptying's release: a thread that reads the
        // time the emptying set writes after the clear.
        let time = self.time.0.load(Ordering::Acquire);
        // Each difference is taken where it is positive: no wrap.
        let step = if now > time {
            if now.wrapping_sub(time) > p.idle_after {
                // An idle gap leaves the window's time alone until the
                // window is emptied (which sets it): a thread that loses
                // the flag leaves the gap for the next sample to find, not
                // hidden behind its timestamp.
                Step::Empty
            } else {
                self.time.0.fetch_max(now, Ordering::Relaxed);
                self.due(p, now)
            }
        } else if time.wrapping_sub(now) > p.idle_after {
            if self.note_stale(now, time, p.idle_after) {
                Step::Restart
            } else {
                return true;
            }
        } else {
            self.due(p, now)
        };
        if step == Step::None {
            return true;
        }
        let ran = self.try_locked(|| {
            if self.generation.load(Ordering::Relaxed) != generation {
                return; // another thread acted on the same news first
            }
            match step {
                Step::Empty => {
                    if now.saturating_sub(self.time.0.load(Ordering::Relaxed)) <= p.idle_after {
                        return; // another thread's timestamp closed the gap
                    }
                    let (a, b) = self.halves();
                    a.clear();
                    b.clear();
                    // Released after the clear: see the load above.
                    self.time.0.store(now, Ordering::Release);
                    self.start.store(now, Ordering::Relaxed);
                    self.bump_generation();
                    self.refresh(p);
                }
                Step::Restart => {
                    // Not a load and a store: a `fetch_max` between them
                    // (an on-time sample) would be undone, and the next
                    // on-time sample would find an idle gap.
                    if self
                        .time
                        .0
                        .compare_exchange(time, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_err()
                    {
                        return; // the window's time moved: no run
                    }
                    self.stale_run.store(0, Ordering::Relaxed);
                    self.start.store(now, Ordering::Relaxed);
                    self.bump_generation();
                }
                Step::Rotate => self.rotate(p),
                Step::None => {}
            }
        });
        // A thread that saw an idle gap while another held the flag drops
        // its sample: that other may be emptying the half it would write.
        step != Step::Empty || ran
    }

    /// Whether a timestamp `now`, not stale, rotates the window on time.
    #[inline]
    fn due<M: IndexMapping>(&self, p: &Params<M>, now: u64) -> Step {
        let start = self.start.load(Ordering::Relaxed);
        if now.saturating_sub(start) >= p.rotation.period_ns
            && self.halves().0.exact.count() >= p.rotation.min_samples
        {
            Step::Rotate
        } else {
            Step::None
        }
    }

    /// A stale timestamp, two periods or more behind the window's time
    /// `time`: counted (a repeat of the last one once); whether the run
    /// since `time` last moved reached `STALE_RUN` timestamps over more
    /// than `idle_after` (two periods) of its own clock, so that the
    /// window's time and period restart at `now`. The run is reset when
    /// they do.
    fn note_stale(&self, now: u64, time: u64, idle_after: u64) -> bool {
        if self.stale_of.swap(time, Ordering::Relaxed) != time {
            // The window's time moved since the last one: a new run.
            self.stale_run.store(0, Ordering::Relaxed);
        }
        let mut run = self.stale_run.load(Ordering::Relaxed);
        if now != self.stale_at.load(Ordering::Relaxed) || run == 0 {
            self.stale_at.store(now, Ordering::Relaxed);
            run = self
                .stale_run
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            if run == 1 {
                self.stale_since.store(now, Ordering::Relaxed);
            }
        }
        // As in `LatencyWindow`: the window's own clock silent for two
        // periods of the new one.
        run >= LatencyWindow::<CubicMapping>::STALE_RUN
            && now.saturating_sub(self.stale_since.load(Ordering::Relaxed)) > idle_after
    }

    fn bump_generation(&self) {
        // Cannot overflow: one bump per rotation.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Under the flag: the previous half is cleared, then made current,
    /// its period starting at the window's time.
    fn rotate<M: IndexMapping>(&self, p: &Params<M>) {
        let old = self.current.load(Ordering::Relaxed) & 1;
        if let Some(next) = self.halves.get(old ^ 1) {
            next.clear();
        }
        self.current.store(old ^ 1, Ordering::Release);
        self.start
            .store(self.time.0.load(Ordering::Relaxed), Ordering::Relaxed);
        self.rotations.fetch_add(1, Ordering::Relaxed);
        self.bump_generation();
        self.refresh(p);
    }

    /// Under the flag: recomputes the cached quantile.
    fn refresh<M: IndexMapping>(&self, p: &Params<M>) {
        let (current, previous) = self.halves();
        let view = |side| View { side, params: p };
        let (ce, cc) = (view(&current.exact), view(&current.censored));
        let (pe, pc) = (view(&previous.exact), view(&previous.censored));
        let q = survival::quantile(
            [
                Pair {
                    exact: &ce,
                    censored: &cc,
                },
                Pair {
                    exact: &pe,
                    censored: &pc,
                },
            ],
            &p.quantile,
        );
        // +1 keeps 0 for "none".
        let encoded = q.map_or(0, |v| v.saturating_add(1));
        self.cached.store(encoded, Ordering::Relaxed);
        let next = refresh_after(
            current.count(),
            current.exact.count(),
            self.count(),
            &p.rotation,
        );
        self.next_check.store(next, Ordering::Relaxed);
    }

    /// The cached quantile (ns, rounded down), `None` while the window
    /// holds no answer. One load.
    #[inline]
    pub(crate) fn cached_quantile(&self) -> Option<u64> {
        // A quantile of `u64::MAX` ns reads as `u64::MAX − 1`.
        self.cached.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Samples in both halves.
    #[inline]
    pub(crate) fn count(&self) -> u64 {
        let [a, b] = &self.halves;
        a.count().saturating_add(b.count())
    }

    /// Exact samples in both halves.
    #[inline]
    pub(crate) fn exact_count(&self) -> u64 {
        let [a, b] = &self.halves;
        a.exact.count().saturating_add(b.exact.count())
    }

    /// Whether the window would be emptied at `now`.
    #[inline]
    pub(crate) fn is_idle_at<M: IndexMapping>(&self, p: &Params<M>, now: u64) -> bool {
        if !self.started.load(Ordering::Acquire) {
            return false;
        }
        now.saturating_sub(self.time.0.load(Ordering::Relaxed)) > p.idle_after
    }

    /// Rotations so far.
    #[cfg(test)]
    pub(crate) fn rotations(&self) -> u64 {
        self.rotations.load(Ordering::Relaxed)
    }

    /// Samples the buckets hold: (exact, censored), a pass over them all.
    #[cfg(test)]
    pub(crate) fn bucket_totals(&self) -> (u64, u64) {
        let [a, b] = &self.halves;
        (
            a.exact
                .bucket_total()
                .saturating_add(b.exact.bucket_total()),
            a.censored
                .bucket_total()
                .saturating_add(b.censored.bucket_total()),
        )
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::hedge::HedgeConfig;

    fn params(config: HedgeConfig) -> Params {
        let mapping = CubicMapping::new(config.relative_accuracy).unwrap();
        Params::new(
            mapping,
            config.max_sample_ns,
            config.rotation(),
            config.quantile,
        )
    }

    #[test]
    fn the_range_ends_at_max_sample_and_collapses_below() {
        let p = params(HedgeConfig::DEFAULT);
        let slot = |ns: u64| p.slot(p.mapping.index_u64(ns).unwrap());
        assert_eq!(slot(600_000_000_000), BUCKETS - 1);
        // 1 µs is inside the range at the defaults; 1 ns collapses.
        assert!(slot(1_000) > 0);
        assert_eq!(slot(1), 0);
        let w = AtomicWindow::new();
        for v in [0, 1, 1_000, 600_000_000_000] {
            assert!(w.record(&p, 0, v, true));
        }
        assert!(w.record(&p, 0, 5, false));
        assert_eq!(w.bucket_totals(), (4, 1));
        assert_eq!((w.count(), w.exact_count()), (5, 4));
    }

    /// A count seen before its bucket's sample (a writer on a weakly
    /// ordered CPU): the two walks meet without a match, and the answer is
    /// the occupied bucket where they met, not the largest sample.
    #[test]
    fn a_count_ahead_of_its_bucket_answers_where_the_walks_meet() {
        const MS: u64 = 1_000_000;
        let p = params(HedgeConfig::DEFAULT.quantile(0.03).min_samples(1));
        let w = AtomicWindow::new();
        // 1 µs once, 1 ms 49 times, 1.5 ms once (the largest); p3, the
        // second smallest, is 1 ms. With two samples more counted (rank 1
        // of 53), neither walk passes it: the bottom one's count stops at
        // the rank after 1 µs, the top one's falls short at 1 ms.
        assert!(w.record(&p, 0, 1_000, true));
        for _ in 0..49 {
            assert!(w.record(&p, 0, MS, true));
        }
        assert!(w.record(&p, 0, 3 * MS / 2, true));
        let (current, _) = w.halves();
        // Two more counted than the buckets hold (two writers' counts).
        current.exact.count.fetch_add(2, Ordering::Relaxed);
        w.refresh(&p);
        let q = w.cached_quantile().unwrap();
        assert!(q.abs_diff(MS) <= MS / 100, "{q}");
    }

    /// Threads that all find an idle gap: one empties the window (both
    /// halves, the current one included) while the others would write to
    /// it. Every half must come out consistent: its count equal to its
    /// buckets' total, every occupied bucket within its bounds (a writer
    /// adding during the clear broke both, in one run in two of 2 000
    /// rounds).
    // A stress test of a logical race, not of undefined behaviour: its
    // thousands of windows would take Miri hours.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn an_idle_gap_emptied_while_threads_write_leaves_consistent_halves() {
        const MS: u64 = 1_000_000;
        let p = params(HedgeConfig::DEFAULT);
        let (rounds, per) = (10_000, 200u64);
        for round in 0..rounds {
            let w = AtomicWindow::new();
            for i in 0..500u64 {
                assert!(w.record(&p, i, (1 + i % 50) * MS, true));
            }
            let after_gap = 10 * p.idle_after;
            let barrier = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                for k in 0..2u64 {
                    let (w, p, barrier) = (&w, &p, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        for j in 0..per {
                            let _ = w.record(p, after_gap, (1 + (j * 7 + k * 13) % 900) * MS, true);
                        }
                    });
                }
            });
            for half in &w.halves {
                for side in [&half.exact, &half.censored] {
                    let (lo, hi) = (
                        side.lo.load(Ordering::Relaxed),
                        side.hi.load(Ordering::Relaxed),
                    );
                    let outside = side
                        .buckets
                        .iter()
                        .enumerate()
                        .any(|(i, b)| b.load(Ordering::Relaxed) != 0 && (i < lo || i > hi));
                    assert!(
                        side.count() == side.bucket_total() && !outside,
                        "round {round}: count {}, buckets {}, outside its bounds: {outside}",
                        side.count(),
                        side.bucket_total()
                    );
                }
            }
        }
    }

    #[test]
    fn bucket_totals_are_exact_from_many_threads() {
        // No rotation: every sample stays in the window.
        let config = HedgeConfig::DEFAULT
            .rotation_samples(u64::MAX)
            .rotation_period_ns(u64::MAX / 4);
        let p = params(config);
        let w = AtomicWindow::new();
        let (threads, per) = if cfg!(miri) {
            (2u64, 20u64)
        } else {
            (4, 20_000)
        };
        std::thread::scope(|s| {
            for t in 0..threads {
                let (w, p) = (&w, &p);
                s.spawn(move || {
                    for i in 0..per {
                        let exact = (i + t) % 4 != 0;
                        assert!(w.record(p, t + i, 1_000 + (i % 50) * 1_000, exact));
                    }
                });
            }
        });
        let total = threads * per;
        let (exact, censored) = w.bucket_totals();
        assert_eq!(exact + censored, total);
        assert_eq!((w.count(), w.exact_count()), (total, exact));
        assert_eq!(
            exact,
            (0..threads)
                .map(|t| (0..per).filter(|i| (i + t) % 4 != 0).count() as u64)
                .sum::<u64>()
        );
        assert_eq!(w.rotations(), 0);
        // The estimate over them, refreshed once the writers are done (one
        // taken while they write reads a mix of before and after): within
        // the samples, 1 µs to 50 µs (a quarter censored puts the p90
        // above the exact samples' own).
        w.refresh(&p);
        let largest = 1_000 + per.min(50).saturating_sub(1) * 1_000;
        let q = w.cached_quantile().unwrap();
        assert!(q >= largest * 9 / 10 && q <= largest + largest / 100, "{q}");
    }

    /// A batch (zero-bucket samples, far outliers, censored samples among
    /// them) leaves the same counts, extremes and estimate as its samples
    /// recorded one by one, and occupied-bucket ranges that hold every
    /// counted bucket (a batch's may start lower: its ends come from its
    /// smallest and largest samples, and a sample of 0 bounds nothing).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "one thread's arithmetic, checked natively: two windows' atomics take minutes under Miri"
    )]
    fn a_batch_leaves_what_its_samples_one_by_one_leave() {
        const MS: u64 = 1_000_000;
        let p = params(HedgeConfig::DEFAULT.min_samples(1));
        let (batched, single) = (AtomicWindow::new(), AtomicWindow::new());
        for w in [&batched, &single] {
            assert!(w.record(&p, 0, 3 * MS, true));
        }
        let samples: std::vec::Vec<(u64, u64, bool)> = (1..60u64)
            .map(|i| {
                let v = match i % 7 {
                    0 => 0,
                    3 => 40 * MS,
                    _ => (i % 13 + 1) * 100_000,
                };
                (i * 1_000, v, i % 5 != 0)
            })
            .collect();
        batched.record_batch(&p, samples.iter().copied(), |i, _| {
            panic!("sample {i} refused")
        });
        for &(now, v, exact) in &samples {
            assert!(single.record(&p, now, v, exact));
        }
        assert_eq!(batched.bucket_totals(), single.bucket_totals());
        assert_eq!(
            (batched.count(), batched.exact_count()),
            (single.count(), single.exact_count())
        );
        let (b, s) = (batched.halves().0, single.halves().0);
        for (b, s) in [(&b.exact, &s.exact), (&b.censored, &s.censored)] {
            let load = |x: &AtomicU64| x.load(Ordering::Relaxed);
            assert_eq!(
                (load(&b.zero), load(&b.min), load(&b.max)),
                (load(&s.zero), load(&s.min), load(&s.max))
            );
            let (lo, hi) = (b.lo.load(Ordering::Relaxed), b.hi.load(Ordering::Relaxed));
            for (i, c) in b.buckets.iter().enumerate() {
                if c.load(Ordering::Relaxed) > 0 {
                    assert!((lo..=hi).contains(&i), "bucket {i} outside {lo}..={hi}");
                }
            }
        }
        batched.refresh(&p);
        single.refresh(&p);
        assert!(single.cached_quantile().is_some());
        assert_eq!(batched.cached_quantile(), single.cached_quantile());
    }

    #[test]
    fn rotation_keeps_the_previous_half_and_counts_stay_exact() {
        let config = HedgeConfig::DEFAULT.rotation_samples(100).min_samples(1);
        let p = params(config);
        let w = AtomicWindow::new();
        let (threads, per) = if cfg!(miri) {
            (2u64, 150u64)
        } else {
            (4, 5_000)
        };
        std::thread::scope(|s| {
            for t in 0..threads {
                let (w, p) = (&w, &p);
                s.spawn(move || {
                    for i in 0..per {
                        w.record(p, t + i, 2_000, true);
                    }
                });
            }
        });
        // Rotations happened and the estimate is whole. (How many samples
        // survive the last rotations depends on the interleaving: a writer
        // preempted across two rotations may add to a half being cleared.)
        let rotations = w.rotations();
        assert!(rotations > 0);
        let (exact, censored) = w.bucket_totals();
        assert_eq!(censored, 0);
        assert!(exact > 0 && exact <= threads * per, "{exact}");
        if rotations >= 2 {
            // A second rotation dropped the half the first one kept.
            assert!(exact < threads * per, "{exact} after {rotations} rotations");
        }
        assert!(w.cached_quantile().unwrap().abs_diff(2_000) <= 20);
    }
}

#[cfg(test)]
mod audit_tests {
    use super::*;
    use crate::hedge::HedgeConfig;

    const MS: u64 = 1_000_000;

    /// An idle gap's emptying that a busy try-lock made one thread skip is
    /// still due at the next sample ("losers skip the work, which the next
    /// sample finds still due"): stale samples never outlive the gap.
    #[test]
    fn an_idle_gap_skipped_under_the_lock_is_still_emptied_next() {
        let config = HedgeConfig::DEFAULT.min_samples(1);
        let mapping = CubicMapping::new(config.relative_accuracy).unwrap();
        let p = Params::new(
            mapping,
            config.max_sample_ns,
            config.rotation(),
            config.quantile,
        );
        let period = p.rotation.period_ns;
        let w = AtomicWindow::new();
        // An old regime: 100 samples of 50 ms.
        for i in 0..100 {
            assert!(w.record(&p, i * MS, 50 * MS, true));
        }
        assert!(w.cached_quantile().unwrap() > 40 * MS);
        // Three periods later, while another thread holds the flag (a
        // refresh in progress), a 1 ms sample arrives: its thread cannot
        // empty the window and carries on.
        let back = 100 * MS + 3 * period;
        assert!(w.is_idle_at(&p, back));
        w.busy.0.store(true, Ordering::Release);
        // Dropped: the flag's holder may be emptying the half.
        assert!(!w.record(&p, back, MS, true));
        w.busy.0.store(false, Ordering::Release);
        // Still idle for readers: the emptying has not happened.
        assert!(w.is_idle_at(&p, back + 1));
        // The next sample finds the emptying still due: only the samples
        // after the gap remain, and the estimate is theirs.
        for i in 1..=10 {
            assert!(w.record(&p, back + i, MS, true));
        }
        let (exact, censored) = w.bucket_totals();
        assert_eq!(exact, 10, "{exact} samples survive the gap");
        assert_eq!(censored, 0);
        let q = w.cached_quantile().unwrap();
        assert!(q.abs_diff(MS) <= MS / 100, "{q}");
    }
}
