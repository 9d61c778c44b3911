//! Per-thread lanes: what a thread's requests add to the shared hedger,
//! gathered on cache lines of the thread's own and published in batches.
//!
//! Every request bumps counters, deposits into the budget and records a
//! sample. Done on the shared state directly, each of those writes a cache
//! line that the other cores then have to fetch back: with two threads
//! sending requests, the lines of the budget, of the window's counts and of
//! its busiest buckets travel between cores on every request. A lane keeps
//! a thread's counters, its not yet deposited requests and its last
//! samples on lines that only that thread writes; the thread publishes
//! them together, `batch` samples at a time (see
//! [`SharedHedger::with_batch`](super::SharedHedger::with_batch)), so the
//! shared lines travel once a batch instead of once a request.
//!
//! # Which lane
//! A thread is known by its *marker*: with `std`, a number given to it at
//! its first use; without (no thread ids in `no_std`), the address of its
//! stack at megabyte granularity, stable within a thread and different for
//! threads whose stacks are a megabyte or more apart, as those of OS
//! threads are (tasks of an RTOS with small stacks may share a marker, and
//! so a lane: exact, only slower; a thread whose calls straddle a megabyte
//! boundary has two markers, and so two lanes, whose batches publish its
//! samples in another order than they came: exact counts, and windows
//! that may refresh over another prefix of them). A thread takes the first lane,
//! from one its marker hashes to, that is its own or free, and keeps it;
//! with every lane taken, it takes over the one claimed longest ago, so
//! that threads that ended (a pool that replaces its threads) leave their
//! lanes to new ones. More threads than lanes share: it stays exact, only
//! the lines travel again. A lane's buffer is guarded by a try-lock, so two
//! threads sharing a lane never wait for each other: the one that finds it
//! taken records its sample directly in the shared windows.

use crate::hedge::machine::Stat;
use crate::hedge::HedgeStats;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Lanes of a shared hedger.
pub(crate) const LANES: usize = 8;

/// The most samples a lane holds.
pub(crate) const LANE_SAMPLES: usize = 64;

/// The index of "requests started" (the [`Stat`]s come first).
const REQUESTS: usize = Stat::RetriesThrottled as usize + 1;

/// The indexes of exact and censored samples taken back: counted when
/// buffered, refused when published. Counters of their own, subtracted
/// when read, so that a take-back that comes before the count it takes
/// back (another thread publishes the sample before its thread counts
/// it) is not lost.
const TAKEN_BACK: [usize; 2] = [REQUESTS + 1, REQUESTS + 2];

/// Counters a lane holds: every [`Stat`], the requests, the take-backs.
const COUNTERS: usize = REQUESTS + 3;

/// A sample waiting in a lane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    /// When it was recorded (the caller's timestamp of the event).
    pub(crate) at: u64,
    pub(crate) elapsed: u64,
    pub(crate) target: usize,
    pub(crate) exact: bool,
}

/// A lane's samples, being published: read in place under the lane's lock
/// (nothing is copied: a batch is up to 64 samples).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch<'a> {
    slots: &'a [Slot],
}

impl<'a> Batch<'a> {
    /// The samples, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Sample> + 'a {
        self.slots.iter().map(Slot::sample)
    }

    /// How many samples.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The `i`th sample, if there is one.
    pub(crate) fn get(&self, i: usize) -> Option<Sample> {
        self.slots.get(i).map(Slot::sample)
    }
}

/// One buffered sample's words (written and read under the lane's lock).
#[derive(Debug)]
struct Slot {
    at: AtomicU64,
    elapsed: AtomicU64,
    /// `target << 1 | exact`.
    meta: AtomicUsize,
}

impl Slot {
    #[inline]
    fn sample(&self) -> Sample {
        let meta = self.meta.load(Ordering::Relaxed);
        Sample {
            at: self.at.load(Ordering::Relaxed),
            elapsed: self.elapsed.load(Ordering::Relaxed),
            target: meta >> 1,
            exact: meta & 1 == 1,
        }
    }
}

/// One thread's lane, alone on its cache lines (aligned to 128 bytes:
/// adjacent-line prefetchers pair 64-byte lines).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Lane {
    /// The buffer's try-lock.
    busy: AtomicBool,
    /// Samples buffered (under `busy`).
    len: AtomicUsize,
    /// Requests counted whose deposits the budget has (under `busy`).
    deposited: AtomicU64,
    /// When the lane last published (under `busy`).
    published_at: AtomicU64,
    counters: [AtomicU64; COUNTERS],
    slots: [Slot; LANE_SAMPLES],
}

impl Lane {
    fn new() -> Self {
        Self {
            busy: AtomicBool::new(false),
            len: AtomicUsize::new(0),
            deposited: AtomicU64::new(0),
            published_at: AtomicU64::new(0),
            counters: core::array::from_fn(|_| AtomicU64::new(0)),
            slots: core::array::from_fn(|_| Slot {
                at: AtomicU64::new(0),
                elapsed: AtomicU64::new(0),
                meta: AtomicUsize::new(0),
            }),
        }
    }

    #[inline(always)]
    fn add(&self, index: usize) {
        if let Some(counter) = self.counters.get(index) {
            // Cannot overflow: 2⁶⁴ events at 10⁹ a second take 584 years.
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `stat`.
    #[inline(always)]
    pub(crate) fn bump(&self, stat: Stat) {
        self.add(stat as usize);
    }

    /// Takes back the count of one sample, exact or censored: counted
    /// when buffered, refused when published.
    pub(crate) fn take_back(&self, exact: bool) {
        let [exact_index, censored_index] = TAKEN_BACK;
        self.add(if exact { exact_index } else { censored_index });
    }

    /// Counts a request started; returns the requests counted on this lane
    /// whose deposits the budget does not have yet, this one included.
    #[inline(always)]
    pub(crate) fn request(&self) -> u64 {
        let before = self
            .counters
            .get(REQUESTS)
            .map_or(0, |c| c.fetch_add(1, Ordering::Relaxed));
        // Another thread sharing the lane may have deposited past `before`.
        before
            .wrapping_add(1)
            .saturating_sub(self.deposited.load(Ordering::Relaxed))
    }

    /// Whether the lane holds samples and last published `wait` or more
    /// before `now` (read without its lock: a hint, checked again under
    /// it).
    #[inline]
    pub(crate) fn waits_since(&self, now: u64, wait: u64) -> bool {
        self.len.load(Ordering::Relaxed) > 0
            && now
                .checked_sub(self.published_at.load(Ordering::Relaxed))
                .is_some_and(|since| since >= wait)
    }

    /// The lane's buffer, unless another thread holds it.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Locked<'_>> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(Locked { lane: self })
    }
}

/// A lane's buffer, held: unlocked when dropped.
#[derive(Debug)]
pub(crate) struct Locked<'a> {
    lane: &'a Lane,
}

impl Drop for Locked<'_> {
    #[inline]
    fn drop(&mut self) {
        self.lane.busy.store(false, Ordering::Release);
    }
}

impl Locked<'_> {
    /// The lane (for its counters).
    #[inline]
    pub(crate) fn lane(&self) -> &Lane {
        self.lane
    }

    /// Samples buffered.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.lane.len.load(Ordering::Relaxed)
    }

    /// When the lane last published (the timestamp it published at).
    #[inline]
    pub(crate) fn published_at(&self) -> u64 {
        self.lane.published_at.load(Ordering::Relaxed)
    }

    /// Buffers `sample`; `false` (nothing buffered) when full.
    #[inline]
    pub(crate) fn push(&self, sample: Sample) -> bool {
        let len = self.len();
        let Some(slot) = self.lane.slots.get(len) else {
            return false;
        };
        slot.at.store(sample.at, Ordering::Relaxed);
        slot.elapsed.store(sample.elapsed, Ordering::Relaxed);
        let meta = sample.target.wrapping_shl(1) | usize::from(sample.exact);
        slot.meta.store(meta, Ordering::Relaxed);
        // At most `LANE_SAMPLES`.
        self.lane.len.store(len.wrapping_add(1), Ordering::Relaxed);
        true
    }

    /// The buffered samples, oldest first, leaving the buffer empty: the
    /// lane publishes at `now`. (The samples stay in their slots, read
    /// through the batch while the lock is held.)
    pub(crate) fn drain(&self, now: u64) -> Batch<'_> {
        self.lane.published_at.store(now, Ordering::Relaxed);
        let len = self.lane.len.swap(0, Ordering::Relaxed);
        Batch {
            slots: self.lane.slots.get(..len).unwrap_or(&[]),
        }
    }

    /// The requests counted on this lane whose deposits the budget does
    /// not have yet, now taken to be deposited.
    pub(crate) fn take_deposits(&self) -> u64 {
        let counted = self
            .lane
            .counters
            .get(REQUESTS)
            .map_or(0, |c| c.load(Ordering::Relaxed));
        // Never moved back, and never more than the count read: a count
        // read stale (older than the one the last taker read) deposits
        // nothing rather than 2⁶⁴ less a few.
        let before = self.lane.deposited.fetch_max(counted, Ordering::Relaxed);
        counted.saturating_sub(before)
    }
}

/// This thread's marker: its stack's address at megabyte granularity,
/// never 0.
#[cfg(not(feature = "std"))]
#[inline(always)]
fn marker() -> usize {
    let here = 0u8;
    // Megabyte numbers, shifted up one to keep them apart when odd.
    (core::ptr::addr_of!(here).addr() >> 19) | 1
}

/// This thread's marker: with `std`, a number of its own, given at its
/// first use of any shared hedger (threads with small stacks, or an
/// interpreter's, need not be a megabyte apart).
#[cfg(feature = "std")]
#[inline(always)]
fn marker() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    std::thread_local! {
        static MARKER: usize = NEXT.fetch_add(2, Ordering::Relaxed) | 1;
    }
    MARKER.with(|m| *m)
}

/// The lane a marker tries first (Fibonacci hashing, in 64 bits on every
/// target: the multiplier cut to a 32-bit `usize` is 0x7F4A_7C15, about
/// half of 2³², which sent every small marker to lane 3).
#[inline(always)]
fn home(marker: usize) -> usize {
    // Lossless on targets up to 64 bits; the top three bits of the
    // product are below 8.
    #[allow(clippy::cast_possible_truncation)]
    let top = ((marker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) as usize;
    top % LANES
}

/// Who holds a lane.
#[derive(Debug)]
struct Owner {
    /// The marker of the thread that uses the lane; 0 while free.
    marker: AtomicUsize,
    /// When it was claimed, in claims of the hedger's lanes (0: never).
    claimed: AtomicU64,
}

/// The owners of every lane, together on lines of their own: written only
/// when a lane is claimed, read on every event (a thread looking for its
/// lane reads them, never the lanes' busy lines).
#[derive(Debug)]
#[repr(align(128))]
struct Owners([Owner; LANES]);

/// Every lane of a shared hedger, and the one value counters cannot hold.
#[derive(Debug)]
pub(crate) struct Lanes {
    owners: Owners,
    lanes: [Lane; LANES],
    /// Lanes claimed so far.
    claims: AtomicU64,
    /// The latest timer delay plus one, saturating; 0 for none.
    current_delay: AtomicU64,
}

impl Lanes {
    pub(crate) fn new() -> Self {
        Self {
            owners: Owners(core::array::from_fn(|_| Owner {
                marker: AtomicUsize::new(0),
                claimed: AtomicU64::new(0),
            })),
            lanes: core::array::from_fn(|_| Lane::new()),
            claims: AtomicU64::new(0),
            current_delay: AtomicU64::new(0),
        }
    }

    /// This thread's lane: the first from the one its marker hashes to
    /// that is its own; else the first free one there, claimed; else the
    /// one claimed longest ago (its thread may be gone), taken over.
    #[inline(always)]
    pub(crate) fn mine(&self) -> &Lane {
        let me = marker();
        let start = home(me);
        match (self.owners.0.get(start), self.lanes.get(start)) {
            (Some(owner), Some(lane)) if owner.marker.load(Ordering::Relaxed) == me => lane,
            _ => self.find(me, start),
        }
    }

    /// [`mine`](Self::mine) past the home lane.
    #[cold]
    #[inline(never)]
    fn find(&self, me: usize, start: usize) -> &Lane {
        let [first, ..] = &self.lanes;
        let lane = |i: usize| self.lanes.get(i).unwrap_or(first);
        for i in (0..LANES).map(|i| start.wrapping_add(i) % LANES) {
            let Some(owner) = self.owners.0.get(i) else {
                continue;
            };
            match owner.marker.load(Ordering::Relaxed) {
                marker if marker == me => return lane(i),
                0 if owner
                    .marker
                    .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok() =>
                {
                    self.claimed(owner);
                    return lane(i);
                }
                _ => {}
            }
        }
        // Every lane is another thread's: take over the one claimed longest
        // ago. A thread still using it shares it (exact, only slower) or
        // takes another; a thread that ended leaves it to this one. Taken
        // by compare-and-swap, so that threads looking at once take
        // different lanes.
        let [first_owner, ..] = &self.owners.0;
        for _ in 0..LANES {
            let (oldest, owner) = (0..LANES)
                .zip(self.owners.0.iter())
                .min_by_key(|(_, o)| o.claimed.load(Ordering::Relaxed))
                .unwrap_or((0, first_owner));
            let seen = owner.marker.load(Ordering::Relaxed);
            if seen == me {
                return lane(oldest);
            }
            // Marked recent first: a thread looking at the same moment then
            // sees another lane as the oldest.
            self.claimed(owner);
            if owner
                .marker
                .compare_exchange(seen, me, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return lane(oldest);
            }
        }
        lane(start)
    }

    /// Notes that `owner`'s lane was just claimed.
    fn claimed(&self, owner: &Owner) {
        let n = self.claims.fetch_add(1, Ordering::Relaxed);
        owner.claimed.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Every lane.
    pub(crate) fn all(&self) -> &[Lane; LANES] {
        &self.lanes
    }

    #[inline]
    pub(crate) fn set_current_delay(&self, delay_ns: u64) {
        let encoded = delay_ns.saturating_add(1);
        // Most requests get the delay the last one got: no write then.
        if self.current_delay.load(Ordering::Relaxed) != encoded {
            self.current_delay.store(encoded, Ordering::Relaxed);
        }
    }

    fn sum(&self, index: usize) -> u64 {
        self.lanes.iter().fold(0u64, |sum, lane| {
            sum.saturating_add(
                lane.counters
                    .get(index)
                    .map_or(0, |c| c.load(Ordering::Relaxed)),
            )
        })
    }

    /// The counters summed over the lanes (each exact; a read racing with
    /// events may see some of an event's counters and not others).
    pub(crate) fn snapshot(&self) -> HedgeStats {
        let s = |stat: Stat| self.sum(stat as usize);
        let [exact_back, censored_back] = TAKEN_BACK;
        HedgeStats {
            requests: self.sum(REQUESTS),
            hedges_sent: s(Stat::HedgesSent),
            retries_released: s(Stat::RetriesReleased),
            hedge_wins: s(Stat::HedgeWins),
            retry_wins: s(Stat::RetryWins),
            primary_wins: s(Stat::PrimaryWins),
            budget_denials: s(Stat::BudgetDenials),
            cold_starts: s(Stat::ColdStarts),
            aggregate_delays: s(Stat::AggregateDelays),
            not_idempotent: s(Stat::NotIdempotent),
            in_flight_limited: s(Stat::InFlightLimited),
            leases_expired: 0,
            gave_up: s(Stat::GaveUp),
            samples: s(Stat::Samples).saturating_sub(self.sum(exact_back)),
            censored_samples: s(Stat::CensoredSamples).saturating_sub(self.sum(censored_back)),
            samples_refused: s(Stat::SamplesRefused),
            clock_anomalies: s(Stat::ClockAnomalies),
            retries_throttled: s(Stat::RetriesThrottled),
            evictions: 0,
            // A delay of `u64::MAX` reads as `u64::MAX − 1`.
            current_delay_ns: self.current_delay.load(Ordering::Relaxed).checked_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    /// Threads' first lanes spread over the lanes, from markers of either
    /// kind: `std`'s (1, 3, 5, …) and stack megabytes (around 2 GiB, as a
    /// 32-bit target's, and 128 TiB, as a 64-bit one's). The hash is taken
    /// in 64 bits on every target, so this holds on 32-bit ones too.
    #[test]
    fn first_lanes_spread_over_the_lanes() {
        let spread = |markers: &mut dyn Iterator<Item = usize>| {
            let mut seen = [false; LANES];
            for m in markers {
                seen[home(m)] = true;
            }
            seen.iter().filter(|&&s| s).count()
        };
        assert_eq!(spread(&mut (0..16).map(|i| 2 * i + 1)), LANES);
        // Stacks a megabyte apart, as `marker` numbers them without `std`.
        let stacks = |base: usize| (0..16).map(move |i| ((base + (i << 20)) >> 19) | 1);
        assert!(spread(&mut stacks(0x7f00_0000)) >= 6);
        let high = usize::try_from(0x7ff0_0000_0000_u64).unwrap_or(0x7f00_0000);
        assert!(spread(&mut stacks(high)) >= 6);
    }

    // Without `std` the marker is the stack's address, and threads' stacks
    // under Miri are not an OS's, a megabyte apart.
    #[test]
    #[cfg_attr(all(miri, not(feature = "std")), ignore)]
    fn a_thread_keeps_its_lane_and_threads_get_their_own() {
        let lanes = Lanes::new();
        let mine = core::ptr::from_ref(lanes.mine());
        assert!(core::ptr::eq(mine, lanes.mine()), "stable within a thread");
        // Threads alive at once (their stacks megabytes apart) get lanes of
        // their own, up to the number of lanes.
        let barrier = std::sync::Barrier::new(LANES - 1);
        let theirs: std::vec::Vec<usize> = std::thread::scope(|s| {
            let handles: std::vec::Vec<_> = (0..LANES - 1)
                .map(|_| {
                    s.spawn(|| {
                        let lane = core::ptr::from_ref(lanes.mine()).addr();
                        barrier.wait(); // every thread holds its lane
                        assert_eq!(core::ptr::from_ref(lanes.mine()).addr(), lane);
                        lane
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all = theirs.clone();
        all.push(mine.addr());
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), LANES, "{theirs:?}");
    }

    #[test]
    #[cfg_attr(all(miri, not(feature = "std")), ignore)]
    fn threads_that_ended_leave_their_lanes_to_new_ones() {
        let lanes = Lanes::new();
        // Eight threads claim lanes and end.
        std::thread::scope(|s| {
            for _ in 0..LANES {
                s.spawn(|| {
                    let _ = lanes.mine();
                });
            }
        });
        // Two new threads at once: each takes over a lane claimed long ago,
        // not the same one.
        let barrier = std::sync::Barrier::new(2);
        let taken: std::vec::Vec<usize> = std::thread::scope(|s| {
            let handles: std::vec::Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let lane = core::ptr::from_ref(lanes.mine()).addr();
                        barrier.wait();
                        // ...and keeps it while the other runs.
                        assert_eq!(core::ptr::from_ref(lanes.mine()).addr(), lane);
                        lane
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_ne!(taken[0], taken[1]);
    }

    #[test]
    fn a_lane_is_one_thread_s_at_a_time_and_drains_in_order() {
        let lanes = Lanes::new();
        let lane = lanes.mine();
        let locked = lane.try_lock().unwrap();
        assert!(lane.try_lock().is_none(), "held");
        for i in 0..LANE_SAMPLES as u64 {
            let sample = Sample {
                at: i,
                elapsed: 10 * i,
                target: usize::MAX >> 1,
                exact: i % 2 == 0,
            };
            assert!(locked.push(sample));
        }
        assert!(!locked.push(Sample::default()), "full");
        let batch = locked.drain(99);
        assert_eq!(locked.published_at(), 99);
        assert_eq!(locked.len(), 0);
        for (i, s) in (0..).zip(batch.iter()) {
            assert_eq!(
                (s.at, s.elapsed, s.target, s.exact),
                (i, 10 * i, usize::MAX >> 1, i % 2 == 0)
            );
        }
        drop(locked);
        assert!(lane.try_lock().is_some(), "released");
    }

    #[test]
    fn deposits_are_taken_once() {
        let lanes = Lanes::new();
        let lane = lanes.mine();
        assert_eq!(lane.request(), 1);
        assert_eq!(lane.request(), 2);
        let locked = lane.try_lock().unwrap();
        assert_eq!(locked.take_deposits(), 2);
        assert_eq!(locked.take_deposits(), 0);
        drop(locked);
        assert_eq!(lane.request(), 1);
        assert_eq!(lanes.snapshot().requests, 3);
    }

    /// A taker whose read of the count is older than the last taker's (a
    /// stale read, seen under Miri's weak-memory emulation with two
    /// threads on one lane) once got `count - deposited` wrapped, about
    /// 2⁶⁴, and deposited it 2³² at a time: the test never ended.
    #[test]
    fn a_count_behind_the_deposits_takes_nothing_and_keeps_them() {
        let lanes = Lanes::new();
        let lane = lanes.mine();
        for _ in 0..3 {
            lane.request();
        }
        // As if another thread had taken deposits up to a count of 5.
        lane.deposited.store(5, Ordering::Relaxed);
        assert_eq!(lane.request(), 0, "nothing undeposited");
        let locked = lane.try_lock().unwrap();
        assert_eq!(locked.take_deposits(), 0);
        assert_eq!(lane.deposited.load(Ordering::Relaxed), 5, "not moved back");
        drop(locked);
        for _ in 0..3 {
            lane.request();
        }
        // Counted 7: two past the deposits.
        assert_eq!(lane.try_lock().unwrap().take_deposits(), 2);
    }

    /// A take-back that comes before the count it takes back (another
    /// thread published and refused the sample before its own thread
    /// counted it) still cancels it, on whichever lane each lands.
    #[test]
    fn a_take_back_before_its_count_still_cancels_it() {
        let lanes = Lanes::new();
        let [a, b, ..] = lanes.all();
        for exact in [true, false] {
            a.take_back(exact);
            a.bump(Stat::SamplesRefused);
        }
        let s = lanes.snapshot();
        assert_eq!(
            (s.samples, s.censored_samples, s.samples_refused),
            (0, 0, 2)
        );
        a.bump(Stat::Samples);
        b.bump(Stat::CensoredSamples);
        b.bump(Stat::Samples);
        let s = lanes.snapshot();
        assert_eq!(
            (s.samples, s.censored_samples, s.samples_refused),
            (1, 0, 2)
        );
    }
}
