//! One hedger shared by every thread: all events take `&self`.
//!
//! [`SharedHedger`] is [`Hedger`](super::Hedger)'s machine for runtimes
//! whose tasks move between threads (tokio's multi-threaded scheduler):
//! no mutex around a hedger, no hedger per thread. The per-request state
//! stays in the caller's [`Request`], exactly as with `Hedger` (the two run
//! the same transition code); the state shared between requests is atomic:
//!
//! * **windows** — per target and, when `T > 1`, an aggregate one: the
//!   same rotating two-half window and Kaplan–Meier estimate as
//!   [`LatencyWindow`](crate::window::LatencyWindow), over a fixed range of
//!   1 024 atomic bucket counters per side keyed by the same mapping (the
//!   cubic one by default, through its integer entry point `index_u64`;
//!   α = [`relative_accuracy`](HedgeConfig::relative_accuracy)), ending at
//!   [`max_sample_ns`](HedgeConfig::max_sample_ns): 10 min down to
//!   0.95 µs at the defaults ([`key_floor_ns`](SharedHedger::key_floor_ns)),
//!   smaller keys collapsed into the first bucket. A configuration whose
//!   range stops above 1 µs and above the minimum delay is refused
//!   ([`ConfigError::KeyRange`]): at α = 0.5 % the buckets span
//!   only 25 300×, so pair a finer α with a shorter `max_sample_ns`.
//!   Recording a sample is a relaxed `fetch_add` on its bucket and
//!   one on its side's count. Refreshing the cached delay (every 1/32 new
//!   samples, and at rotation) and rotating are done by whichever thread
//!   wins a try-lock flag — nobody waits for it; losers skip the work,
//!   which the next sample finds still due. Reading the delay is one load
//!   (plus the loads that say whether the window is warm and not idle).
//! * **in flight** — four time slots, each an `AtomicU64` holding epoch and
//!   count, updated by compare-and-swap; a hedge is counted by one that
//!   fails if [`max_hedges_in_flight`](HedgeConfig::max_hedges_in_flight)
//!   are already counted, so threads whose timers fire together cannot
//!   both take the last place (only two sending at the same instant on
//!   either side of a slot boundary, every ¼ lease, can);
//! * **budget** — already lock-free ([`HedgeBudget`] is `Sync`);
//! * **lanes** — one per thread (up to eight), on cache lines of its own:
//!   the thread's counters, its requests not yet deposited in the budget
//!   and its latest samples, published to the windows and the budget in
//!   batches (see *Batches*).
//!
//! ```
//! use std::sync::Arc;
//! use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Idempotency, SharedHedger};
//!
//! let hedger = Arc::new(SharedHedger::new(HedgeConfig::DEFAULT)?);
//! std::thread::scope(|s| {
//!     for t in 0..2u64 {
//!         let hedger = &hedger;
//!         s.spawn(move || {
//!             for i in 0..100 {
//!                 let now = t * 1_000 + i * 10_000_000;
//!                 let mut req = hedger.start(0, now, Idempotency::Idempotent);
//!                 let outcome = hedger.on_commit(&mut req, Attempt::PRIMARY, now + 2_000_000);
//!                 assert!(matches!(outcome, CommitOutcome::Won { .. }));
//!             }
//!         });
//!     }
//! });
//! let stats = hedger.stats();
//! assert_eq!((stats.requests, stats.primary_wins, stats.samples), (200, 200, 200));
//! # Ok::<(), tailguard::hedge::ConfigError>(())
//! ```
//!
//! # Batches
//! A request's writes to shared state — its budget deposit, its sample's
//! bucket and counts, the window's latest timestamps — make those cache
//! lines travel to the writing core and back to the others. With two
//! threads sending requests, that costs more than the requests
//! themselves. So each thread gathers them in its lane and publishes them
//! [`batch`](SharedHedger::with_batch) samples at a time (64 by
//! default): the lines then travel once a batch. A lane publishes its
//! samples in the order they came, each with its own timestamp, exactly
//! as if they had been recorded then — rotation, idle gaps and clock steps
//! included — so after a publication the windows are what `Hedger` has
//! after the same samples (`tests/hedge_shared.rs` checks it step by
//! step). What a batch delays, and for how long:
//! * a lane publishes at once while a window its sample goes to is not
//!   warm (fewer than `min_samples` answers): warming up is never delayed;
//! * it publishes at once when it last published 1 ms (or an eighth of the
//!   rotation period) or more before the sample's timestamp, or after it
//!   (the clock went back): a thread recording fewer than a thousand
//!   samples a second publishes every sample, and batches form only under
//!   load, where 64 samples take a few milliseconds at most;
//! * otherwise the samples of the batch in progress — at most 63 a lane —
//!   wait for the next one or for [`flush`](SharedHedger::flush): the
//!   delay estimate misses at most `63 × threads` samples, out of the
//!   thousands the window holds at that rate;
//! * a thread that goes quiet with a batch in progress (it exits, it
//!   parks) does not keep it: the next publication of any other thread
//!   publishes every lane that holds samples and has waited `max_wait`
//!   (1 ms, or an eighth of the rotation period), before its own, so the
//!   windows take them before the newer samples (batch by batch; a batch
//!   in progress may hold older ones, within two rotation periods);
//! * deposits go with the samples, and a thread publishes its own pending
//!   deposits before it takes a hedge token, so the budget misses at most
//!   the other threads' last requests (fail closed) — and the thread's
//!   own, when its lane is held at that moment (by another thread
//!   publishing it, or sharing it: more threads than the eight lanes). A quiet lane's
//!   deposits count at the time of the publication that takes them: after
//!   a silence in which no thread published at all, up to 63 requests a
//!   lane count when traffic resumes, not when they were made.
//!
//! [`stats`](SharedHedger::stats) counts samples when they are recorded,
//! published or not. `with_batch(1)` publishes everything at once.
//!
//! # Same answers as `Hedger`
//! On one thread, a `SharedHedger<B, T>` with a batch of 1 decides what a
//! `Hedger<usize, B, T>` given the same events decides, and computes the
//! same delays (with batches, the same delays after each publication),
//! with two documented exceptions: samples below the fixed
//! key range (under [`key_floor_ns`](SharedHedger::key_floor_ns), 0.95 µs
//! at the defaults) share its first bucket, where the sketch's range
//! follows the samples (it collapses only once its span is full), and in-flight
//! epochs are compared modulo 2⁴⁰ slots (see below). `tests/hedge_shared.rs`
//! drives both with random event sequences and compares every outcome.
//!
//! # Targets
//! Targets are indexes `0..T` into a fixed table of windows: nothing is
//! inserted or evicted, so [`HedgeStats::evictions`] stays 0. A target
//! index `>= T` never panics: it has no window of its own, so its requests
//! get the aggregate window's delay (or the prior) and its samples go to
//! the aggregate window alone — except with `T == 1`, where the single
//! window is the aggregate and takes every target. [`Request::route`]
//! records a hedge's latency under the target it was sent to, as with
//! `Hedger`.
//!
//! # What a concurrent reader may see
//! Every counter is exact: no increment is lost, whatever the threads do
//! (a multi-thread test checks requests, wins, samples and bucket totals
//! against the exact answers, also under Miri). Reads are not snapshots:
//! [`stats`](SharedHedger::stats) sums the lanes' counters while others add
//! to them, and the windows hold published samples only (see *Batches*).
//! During a rotation the half being cleared is the *previous* one, which no
//! writer is adding to; a sample whose writer was preempted across two
//! rotations may be cleared with it or survive. After an idle gap the
//! window is emptied, its current half too: a thread that finds the gap
//! while another thread holds the window's flag drops its sample (counted
//! as refused) rather than write into a half being cleared. A refresh
//! racing with writers estimates from some of the samples arriving during
//! its pass, and mostly leans low: it reads the counts before the
//! buckets, so samples added in between sit in buckets its risk sets
//! leave out, and it stops early (a weakly ordered CPU may also show a
//! count before its bucket: then the pass finds fewer samples than
//! counted, and answers where its walk ends, within the buckets it read).
//! The lean grows with the samples recorded during one pass (a
//! pass over the occupied buckets, microseconds), which only a hot loop
//! of records makes many. The next refresh sees every sample. The cached delay is one atomic word. A
//! hedge refused for the in-flight cap after the budget granted it
//! (another thread took the last place in between) has spent its token:
//! the budget fails closed.
//!
//! # Time
//! As with `Hedger`: timestamps are the caller's monotonic nanoseconds, and
//! they may come from threads that read the clock a little apart. Each
//! window keeps its time by `Hedger`'s rules (see *Time* in
//! [`crate::window`]): the latest timestamp it has taken. A sample behind
//! it by less than two rotation periods moves neither that time nor the
//! period's start; a stale one (two periods or more behind) neither, until
//! 16 distinct stale timestamps with none between them that moves the
//! window's time take the new clock; one two periods or more ahead is an
//! idle gap and empties the window. Windows rotate on their sample count
//! and on time. Threads move a window's time forward with `fetch_max`, so
//! a thread that read it before another moved it cannot move it back. The in-flight slots compare epochs modulo 2⁴⁰ slots
//! (87 000 years at the default 10 s lease), so timestamps that far apart
//! may count each other's hedges.
//!
//! # Memory
//! Inline, no allocation: 16 KiB a window (two halves × exact and censored
//! × 1 024 `AtomicU32`), `T + 1` windows, 13 KiB of lanes, 20 KiB for the
//! table that keys samples without floating point, and the budget.
//! Put it in an `Arc` or a `static`.
//!
//! It is built on the stack and moved out (safe Rust cannot build in
//! place): about 68 KiB at `T = 1`, 184 KiB at `T = 8` and 1.1 MiB at
//! `T = 64`, a few times over while the compiler copies it (more in a
//! debug build, which keeps every copy). A debug build with 16 targets
//! already overflows a 2 MiB thread stack (a tokio worker's, a test
//! thread's, or any spawned thread's by default; 12 fit), a release build
//! with dozens: build it once at startup, on the main thread (8 MiB) or
//! on a thread given room (`std::thread::Builder::stack_size`), and hand
//! out the `Arc`.

mod in_flight;
mod lanes;
mod slots;
mod window;

use super::machine::{self, Core, Stat};
use super::{
    Attempt, AttemptSet, CommitOutcome, ConfigError, DelaySource, Failure, FailureOutcome,
    HedgeConfig, HedgeStats, Idempotency, Plan, Request, TimerAction,
};
use crate::budget::{Budget, BudgetStats, HedgeBudget};
use crate::mapping::IndexMapping;
use crate::sync::{AtomicU32, Ordering};
use crate::{CubicMapping, FromRelativeAccuracy};
use in_flight::AtomicInFlight;
use lanes::{Lane, Lanes, Locked, Sample, LANE_SAMPLES};
use window::{AtomicWindow, Params};

/// A lane that published longer ago than this (1 ms, or an eighth of the
/// rotation period if that is shorter) publishes each sample at once: its
/// thread records slowly, and batching would only delay the estimate.
const MAX_WAIT_NS: u64 = 1_000_000;

/// Hedge state shared by every thread: all events take `&self`; see the
/// module docs.
///
/// * `B`: the budget, [`Budget`] (a 15 % traffic ratio) by default.
/// * `T`: how many targets (indexes `0..T`) keep their own window.
/// * `M`: the index mapping, [`CubicMapping`] by default;
///   [`LogLinearMapping`](crate::LogLinearMapping) keys samples in integer
///   operations only. The 1 024 buckets a side end at `max_sample_ns`: at
///   α = 1 % the log-linear mapping's span 2¹⁶ (9 ms to the default 10
///   min, refused unless the minimum delay is at least that: see
///   [`key_floor_ns`](Self::key_floor_ns)), so take α = 2 % with it (2³²:
///   140 ns to 10 min).
///
/// `Send + Sync` (every budget is).
#[derive(Debug)]
pub struct SharedHedger<B: HedgeBudget = Budget, const T: usize = 1, M: IndexMapping = CubicMapping>
{
    config: HedgeConfig,
    params: Params<M>,
    budget: B,
    windows: [AtomicWindow; T],
    /// Every sample of every target (unused when `T == 1`).
    aggregate: AtomicWindow,
    in_flight: AtomicInFlight,
    /// Retry throttling's tokens ([`HedgeConfig::retry_throttle`]):
    /// written only by failures and by answers while it is not full.
    retry_balance: AtomicU32,
    lanes: Lanes,
    /// Samples a lane publishes at a time (1: each at once, no lane).
    batch: usize,
    /// A lane that published longer ago publishes each sample at once.
    max_wait_ns: u64,
    /// Its number, kept by its requests (another hedger refuses them).
    id: u32,
}

impl SharedHedger {
    /// A single-target shared hedger with the default ratio budget.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds, or
    /// [`ConfigError::KeyRange`] (see [`key_floor_ns`](SharedHedger::key_floor_ns)).
    pub fn new(config: HedgeConfig) -> Result<Self, ConfigError> {
        Self::with_budget(config, Budget::default())
    }
}

impl<B: HedgeBudget, const T: usize, M: IndexMapping + FromRelativeAccuracy> SharedHedger<B, T, M> {
    const HAS_TARGETS: () = assert!(T > 0, "a hedger needs room for at least one target");

    /// A shared hedger whose targets all share `budget`. Defaults of the
    /// type's parameters do not apply in an expression: name the type,
    /// e.g. `SharedHedger::<Budget>::with_budget(config, Budget::Unlimited)`
    /// (or `SharedHedger::<Budget, 8>` for eight targets).
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds, or
    /// [`ConfigError::KeyRange`] (see [`key_floor_ns`](SharedHedger::key_floor_ns)).
    pub fn with_budget(config: HedgeConfig, budget: B) -> Result<Self, ConfigError> {
        let () = Self::HAS_TARGETS;
        config.validate()?;
        let mapping = M::from_relative_accuracy(config.relative_accuracy)
            .map_err(|_| ConfigError::RelativeAccuracy(config.relative_accuracy))?;
        let rotation = config.rotation();
        let params = Params::new(mapping, config.max_sample_ns, rotation, config.quantile);
        let floor_ns = params.floor_ns();
        if floor_ns > config.key_floor_needed() {
            return Err(ConfigError::KeyRange { floor_ns });
        }
        Ok(Self {
            config,
            params,
            budget,
            windows: core::array::from_fn(|_| AtomicWindow::new()),
            aggregate: AtomicWindow::new(),
            in_flight: AtomicInFlight::new(config.in_flight_lease_ns),
            retry_balance: AtomicU32::new(u32::from(config.retry_throttle)),
            lanes: Lanes::new(),
            batch: LANE_SAMPLES,
            max_wait_ns: MAX_WAIT_NS.min(rotation.period_ns / 8),
            id: machine::hedger_id(),
        })
    }
}

impl<B: HedgeBudget, const T: usize, M: IndexMapping> SharedHedger<B, T, M> {
    /// Publishes a thread's samples and deposits `samples` at a time
    /// (default and most: 64; 1 publishes each at once). See *Batches*
    /// in the module docs.
    #[must_use]
    pub fn with_batch(mut self, samples: usize) -> Self {
        self.batch = samples.clamp(1, LANE_SAMPLES);
        self
    }

    /// Samples a thread publishes at a time (see [`with_batch`](Self::with_batch)).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The smallest sample the windows key exactly: their 1 024 buckets a
    /// side end at [`max_sample_ns`](HedgeConfig::max_sample_ns), and
    /// shorter samples share the first bucket. At most 1 µs, or at most
    /// what [`min_delay_ns`](HedgeConfig::min_delay_ns) keeps the delay
    /// above: a configuration whose floor is higher is refused with
    /// [`ConfigError::KeyRange`]. 947 ns at the defaults.
    ///
    /// ```
    /// use tailguard::hedge::{ConfigError, HedgeConfig, SharedHedger};
    ///
    /// assert!(SharedHedger::new(HedgeConfig::DEFAULT)?.key_floor_ns() < 1_000);
    /// // α = 0.5 %: the buckets span 25 300×, 23.7 ms to 10 min...
    /// let fine = HedgeConfig::DEFAULT.relative_accuracy(0.005);
    /// assert!(matches!(SharedHedger::new(fine), Err(ConfigError::KeyRange { .. })));
    /// // ...or 0.40 ms to 10 s, under the default 1 ms minimum delay.
    /// let fine = fine.max_sample_ns(10_000_000_000);
    /// assert!(SharedHedger::new(fine)?.key_floor_ns() < 1_000_000);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn key_floor_ns(&self) -> u64 {
        self.params.floor_ns()
    }

    /// Starts a request to `target` at `now`: the caller sends the primary
    /// and arms a timer at [`Request::next_timer`] if it is `Some`.
    /// [`Request::plan`] says what was decided and why.
    #[inline(always)]
    pub fn start(&self, target: usize, now: u64, idempotency: Idempotency) -> Request<usize> {
        let lane = self.lanes.mine();
        let undeposited = lane.request();
        if self.batch <= 1 {
            self.budget.on_request(now);
        } else if undeposited >= self.batch as u64 {
            // A thread that starts requests and records few samples (they
            // time out, they are dropped) deposits here.
            if let Some(locked) = lane.try_lock() {
                self.deposit(now, locked.take_deposits());
            }
        }
        let delay = self.delay_at(target, now);
        machine::start(&mut self.on(lane), target, now, idempotency, delay)
    }

    /// The caller's timer for `request` fired at `now`.
    pub fn on_timer(&self, request: &mut Request<usize>, now: u64) -> TimerAction {
        machine::on_timer(&mut self.here(), request, now)
    }

    /// `attempt` of `request` gave its commit signal at `now`.
    #[inline(always)]
    pub fn on_commit(
        &self,
        request: &mut Request<usize>,
        attempt: Attempt,
        now: u64,
    ) -> CommitOutcome {
        let mut here = self.here();
        if machine::is_sole_primary(request, attempt, self.id) {
            machine::commit_sole_primary(&mut here, request, now)
        } else {
            machine::on_commit(&mut here, request, attempt, now)
        }
    }

    /// `attempt` of `request` failed (an error, not slowness) at `now`;
    /// see [`Hedger::on_failure`](super::Hedger::on_failure).
    pub fn on_failure(
        &self,
        request: &mut Request<usize>,
        attempt: Attempt,
        now: u64,
        failure: Failure,
    ) -> FailureOutcome {
        machine::on_failure(&mut self.here(), request, attempt, now, failure)
    }

    /// The caller gives `request` up at `now`: releases its in-flight
    /// hedges at once and records the attempts in flight as censored.
    /// Returns the attempts to cancel. Dropping a request without this call
    /// is safe too, only slower to release (see
    /// [`in_flight_lease_ns`](HedgeConfig::in_flight_lease_ns)).
    pub fn abandon(&self, request: &mut Request<usize>, now: u64) -> AttemptSet {
        machine::abandon(&mut self.here(), request, now)
    }

    /// Publishes what every lane holds (samples to the windows, deposits
    /// to the budget, the deposits at `now`), but for lanes another thread
    /// is using at this moment: theirs go with that thread's next batch.
    /// Not needed for correctness (see *Batches*: other threads publish a
    /// quiet thread's batch): for a reading that includes every sample so
    /// far.
    pub fn flush(&self, now: u64) {
        for lane in self.lanes.all() {
            if let Some(locked) = lane.try_lock() {
                self.publish(&locked, now, false);
            }
        }
    }

    /// What [`start`](Self::start) would decide for an idempotent request
    /// to `target` at `now`, without starting one. Changes nothing.
    pub fn plan(&self, target: usize, now: u64) -> Plan {
        machine::plan(&self.config, self.delay_at(target, now))
    }

    /// The hedge delay a request to `target` would get at `now` (from its
    /// window, the aggregate window or the prior), `None` in cold start.
    /// Changes nothing.
    pub fn delay_ns(&self, target: usize, now: u64) -> Option<u64> {
        self.delay_at(target, now).map(|(d, _)| d)
    }

    /// What the hedger has done so far, summed over the threads' lanes.
    /// Samples count when recorded, published or not.
    pub fn stats(&self) -> HedgeStats {
        HedgeStats {
            leases_expired: self.in_flight.expired(),
            ..self.lanes.snapshot()
        }
    }

    /// The budget's own counters (deposits still in a lane not counted:
    /// see [`flush`](Self::flush)).
    pub fn budget_stats(&self) -> BudgetStats {
        self.budget.stats()
    }

    /// Hedges sent and not yet finished at `now`, across requests and
    /// threads (those of dropped requests count until their lease runs
    /// out).
    pub fn hedges_in_flight(&self, now: u64) -> u32 {
        self.in_flight.count(now)
    }

    /// The configuration.
    pub fn config(&self) -> &HedgeConfig {
        &self.config
    }

    /// The number of targets with a window of their own: `T`.
    pub fn targets(&self) -> usize {
        T
    }

    /// The machine's view of this hedger from `lane`.
    #[inline(always)]
    fn on<'a>(&'a self, lane: &'a Lane) -> Here<'a, B, T, M> {
        Here {
            hedger: self,
            lane,
            event: false,
            event_cold: false,
        }
    }

    /// The machine's view of this hedger from this thread's lane.
    #[inline(always)]
    fn here(&self) -> Here<'_, B, T, M> {
        self.on(self.lanes.mine())
    }

    /// The window of `target`: its own, or the single one when `T == 1`.
    #[inline]
    fn window(&self, target: usize) -> Option<&AtomicWindow> {
        match self.windows.get(target) {
            Some(w) => Some(w),
            None if T == 1 => self.windows.first(),
            None => None,
        }
    }

    /// The delay for `target` at `now`: its own window if warm, else the
    /// aggregate if warm, else the prior.
    #[inline]
    fn delay_at(&self, target: usize, now: u64) -> Option<(u64, DelaySource)> {
        if let Some(d) = self.window(target).and_then(|w| self.estimate(w, now)) {
            return Some((d, DelaySource::Target));
        }
        if T > 1 {
            if let Some(d) = self.estimate(&self.aggregate, now) {
                return Some((d, DelaySource::Aggregate));
            }
        }
        self.config
            .prior_delay_ns
            .map(|p| (self.config.bound(p), DelaySource::Prior))
    }

    /// The delay `window` gives at `now`, as `Hedger`'s windows do: `None`
    /// while it holds fewer than `min_samples` answers or is idle.
    #[inline]
    fn estimate(&self, window: &AtomicWindow, now: u64) -> Option<u64> {
        if window.exact_count() < self.config.min_samples || window.is_idle_at(&self.params, now) {
            return None;
        }
        window.cached_quantile().map(|q| self.config.delay_for(q))
    }

    /// Records one sample in the shared windows now: `target`'s (if it has
    /// one) and the aggregate. Whether the target's window took it.
    #[inline]
    fn record_now(&self, target: usize, now: u64, elapsed: u64, exact: bool) -> bool {
        let p = &self.params;
        match self.window(target) {
            Some(w) => {
                let recorded = w.record(p, now, elapsed, exact);
                if T > 1 {
                    self.aggregate.record(p, now, elapsed, exact);
                }
                recorded
            }
            // A target without a window: the aggregate is its window.
            None => self.aggregate.record(p, now, elapsed, exact),
        }
    }

    /// Whether a lane holding a sample of `target` at `now` must publish
    /// now: its batch is full; or it last published `max_wait_ns` or more
    /// before `now`, so samples come slowly on this thread and none should
    /// wait; or the clock went back since (publishing now keeps the
    /// samples' order, and a stale run is counted as it comes); or
    /// the windows the sample goes to are not warm yet (warming up is never
    /// delayed). A thread's events come in time order when their
    /// timestamps are read as they happen.
    #[inline]
    fn due(&self, locked: &Locked<'_>, target: usize, now: u64) -> bool {
        self.due_anyway(locked, now) || self.cold(target)
    }

    /// [`due`](Self::due) whatever the sample's target: the batch is full,
    /// the thread is slow, or the clock went back.
    #[inline]
    fn due_anyway(&self, locked: &Locked<'_>, now: u64) -> bool {
        locked.len() >= self.batch
            || now
                .checked_sub(locked.published_at())
                .is_none_or(|since| since >= self.max_wait_ns)
    }

    /// Whether a window a sample of `target` goes to is cold.
    #[inline]
    fn cold(&self, target: usize) -> bool {
        let min = self.config.min_samples;
        let cold = |w: &AtomicWindow| w.exact_count() < min;
        match self.window(target) {
            Some(w) => cold(w) || (T > 1 && cold(&self.aggregate)),
            // No window of its own: the aggregate is its window.
            None => cold(&self.aggregate),
        }
    }

    /// Publishes a lane: its samples to the windows, in the order they
    /// came (each window gets its own in one batch), and its deposits to
    /// the budget at `now`. With `own`, the batch's last sample is the
    /// caller's, not counted yet: whether it was taken is returned (and a
    /// refusal of it left to the caller to count); `true` otherwise.
    fn publish(&self, locked: &Locked<'_>, now: u64, own: bool) -> bool {
        let batch = locked.drain(now);
        let lane = locked.lane();
        let last = batch.len().wrapping_sub(1);
        let own_refused = core::cell::Cell::new(false);
        // Counted as recorded when it was buffered (all but `own`'s).
        let refused = |i: usize, exact: bool| {
            if own && i == last {
                own_refused.set(true);
                return;
            }
            lane.take_back(exact);
            lane.bump(Stat::SamplesRefused);
        };
        let p = &self.params;
        let all = || batch.iter().map(|s| (s.at, s.elapsed, s.exact));
        if T == 1 {
            // The single window takes every target.
            if let Some(w) = self.windows.first() {
                w.record_batch(p, all(), refused);
            }
        } else {
            // Each target's window its samples (targets in the order they
            // first come), then the aggregate all of them; a sample refused
            // by the window of its target, or by the aggregate when it has
            // none, is refused.
            for (i, s) in batch.iter().enumerate() {
                let first = batch.iter().take(i).all(|b| b.target != s.target);
                if let (true, Some(w)) = (first, self.windows.get(s.target)) {
                    let of = || {
                        batch
                            .iter()
                            .enumerate()
                            .filter(|(_, b)| b.target == s.target)
                    };
                    let samples = of().map(|(_, b)| (b.at, b.elapsed, b.exact));
                    w.record_batch(p, samples, |k, exact| {
                        // The `k`th of this target's: its place in the batch.
                        if let Some((at, _)) = of().nth(k) {
                            refused(at, exact);
                        }
                    });
                }
            }
            self.aggregate.record_batch(p, all(), |i, exact| {
                if batch.get(i).is_some_and(|s| s.target >= T) {
                    refused(i, exact);
                }
            });
        }
        self.deposit(now, locked.take_deposits());
        !own_refused.get()
    }

    /// Publishes the other lanes that hold samples and last published
    /// `max_wait_ns` or more before `now`: their threads went quiet with a
    /// batch in progress (they exited, or parked), and it would wait for
    /// them, or for a thread taking their lane over, however long that
    /// takes, then come back as current. Run before a lane publishes its
    /// own batch, so that the windows take the older samples first; a
    /// lane in use at this moment is left to its thread.
    fn publish_quiet(&self, mine: &Lane, now: u64) {
        for lane in self.lanes.all() {
            if core::ptr::eq(lane, mine) || !lane.waits_since(now, self.max_wait_ns) {
                continue;
            }
            if let Some(locked) = lane.try_lock() {
                if locked.len() > 0 {
                    self.publish(&locked, now, false);
                }
            }
        }
    }

    /// Deposits `n` requests in the budget at `now`.
    fn deposit(&self, now: u64, mut n: u64) {
        while n > 0 {
            let chunk = u32::try_from(n).unwrap_or(u32::MAX);
            self.budget.on_requests(now, chunk);
            n = n.saturating_sub(u64::from(chunk));
        }
    }
}

/// The shared hedger as the state machine sees it from one thread: the
/// shared state, and the thread's lane for its counters and samples.
struct Here<'a, B: HedgeBudget, const T: usize, M: IndexMapping> {
    hedger: &'a SharedHedger<B, T, M>,
    lane: &'a Lane,
    /// Samples of one event are being buffered (see `Core::begin_samples`):
    /// whether one is due is decided when the last is in.
    event: bool,
    /// A window one of the event's buffered samples goes to is cold.
    event_cold: bool,
}

impl<B: HedgeBudget, const T: usize, M: IndexMapping> Here<'_, B, T, M> {
    /// Records a sample: into this thread's lane (publishing the batch it
    /// completes, if due), or into the windows now (no batching, or the
    /// lane is another thread's at this moment).
    #[inline(always)]
    fn buffer_sample(&mut self, target: usize, now: u64, elapsed: u64, exact: bool) -> bool {
        let h = self.hedger;
        if h.batch > 1 {
            if let Some(locked) = self.lane.try_lock() {
                let sample = Sample {
                    at: now,
                    elapsed,
                    target: target.min(T),
                    exact,
                };
                if locked.push(sample) {
                    if self.event && locked.len() < h.batch {
                        // Decided with the event's last (`end_samples`).
                        self.event_cold = self.event_cold || h.cold(target);
                        return true;
                    }
                    // Published with the batch it completes: refused or not.
                    if !h.due(&locked, target, now) {
                        return true;
                    }
                    h.publish_quiet(locked.lane(), now);
                    return h.publish(&locked, now, true);
                }
                // Full (a batch is at most the lane's size: not reached).
                h.publish(&locked, now, false);
            }
        }
        // No batching, or the lane is another thread's at this moment.
        h.record_now(target, now, elapsed, exact)
    }
}

impl<B: HedgeBudget, const T: usize, M: IndexMapping> Core<usize> for Here<'_, B, T, M> {
    #[inline]
    fn config(&self) -> &HedgeConfig {
        &self.hedger.config
    }

    #[inline(always)]
    fn id(&self) -> u32 {
        self.hedger.id
    }

    #[inline]
    fn in_flight_count(&self, now: u64) -> u32 {
        self.hedger.in_flight.count(now)
    }

    #[inline]
    fn in_flight_acquire(&mut self, now: u64, cap: Option<u32>) -> bool {
        self.hedger.in_flight.acquire(now, cap)
    }

    #[inline]
    fn in_flight_release(&mut self, sent_at: u64) {
        self.hedger.in_flight.release(sent_at);
    }

    #[inline]
    fn acquire_token(&mut self, _target: usize, now: u64) -> bool {
        let h = self.hedger;
        if h.batch > 1 {
            // This thread's own requests count before it hedges.
            if let Some(locked) = self.lane.try_lock() {
                h.deposit(now, locked.take_deposits());
            }
        }
        h.budget.try_acquire(now)
    }

    #[inline]
    fn record_sample(&mut self, target: usize, now: u64, elapsed: u64, exact: bool) -> bool {
        self.buffer_sample(target, now, elapsed, exact)
    }

    #[inline]
    fn begin_samples(&mut self) {
        self.event = true;
        self.event_cold = false;
    }

    /// The event's buffered samples go out together, if due: a slow
    /// thread's commit publishes its losers with its winner (decided one
    /// by one, the winner's publication would hold the losers back, at
    /// the same timestamp, until the thread's next sample).
    #[inline]
    fn end_samples(&mut self, now: u64) {
        let cold = core::mem::take(&mut self.event_cold);
        if !core::mem::take(&mut self.event) {
            return;
        }
        let h = self.hedger;
        if h.batch > 1 {
            if let Some(locked) = self.lane.try_lock() {
                if locked.len() > 0 && (cold || h.due_anyway(&locked, now)) {
                    h.publish_quiet(locked.lane(), now);
                    h.publish(&locked, now, false);
                }
            }
        }
    }

    /// Inlined into the commit of most requests (the sole primary's).
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    fn record_answer(&mut self, target: usize, now: u64, elapsed: u64) -> bool {
        self.buffer_sample(target, now, elapsed, true)
    }
    #[inline(always)]
    fn bump(&mut self, stat: Stat) {
        self.lane.bump(stat);
    }

    #[inline]
    fn set_current_delay(&mut self, delay_ns: u64) {
        self.hedger.lanes.set_current_delay(delay_ns);
    }

    #[inline]
    fn retry_balance_take(&mut self) -> u32 {
        let b = &self.hedger.retry_balance;
        let before = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
        // Already empty (`Err(0)`): it stays 0.
        before.unwrap_or(0).saturating_sub(1)
    }

    #[inline(always)]
    fn retry_balance_give(&mut self) {
        let full = u32::from(self.hedger.config.retry_throttle);
        let b = &self.hedger.retry_balance;
        // Full, nearly always: one load, no write to a shared line.
        if b.load(Ordering::Relaxed) < full {
            let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v < full).then(|| v.saturating_add(1))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A sample refused while its own lane publishes (here: at once, the
    /// window being cold) is counted as refused only, also as a lane's
    /// first sample, whose counters are still 0.
    #[test]
    fn a_sample_refused_in_its_own_publication_is_counted_once() {
        for exact in [true, false] {
            let hedger = SharedHedger::new(HedgeConfig::DEFAULT).unwrap();
            let window = hedger.windows.first().unwrap();
            // Started, so that the fill lands in the half being written.
            assert!(window.record(&hedger.params, 0, 3 * MS, true));
            window.fill_bucket(&hedger.params, 5 * MS, exact);
            let mut request = hedger.start(0, 0, Idempotency::Idempotent);
            if exact {
                let _ = hedger.on_commit(&mut request, Attempt::PRIMARY, 5 * MS);
            } else {
                hedger.abandon(&mut request, 5 * MS);
            }
            let s = hedger.stats();
            assert_eq!(
                (s.samples, s.censored_samples, s.samples_refused),
                (0, 0, 1),
                "exact: {exact}"
            );
        }
    }

    /// As above with several targets: refused by the target's own window,
    /// or by the aggregate for a target without one.
    #[test]
    fn a_refusal_is_counted_once_with_targets() {
        for target in [1, 5] {
            let hedger: SharedHedger<Budget, 2> =
                SharedHedger::with_budget(HedgeConfig::DEFAULT, Budget::default()).unwrap();
            let window = hedger.window(target).unwrap_or(&hedger.aggregate);
            assert!(window.record(&hedger.params, 0, 3 * MS, true));
            window.fill_bucket(&hedger.params, 5 * MS, true);
            let mut request = hedger.start(target, 0, Idempotency::Idempotent);
            let _ = hedger.on_commit(&mut request, Attempt::PRIMARY, 5 * MS);
            let s = hedger.stats();
            assert_eq!((s.samples, s.samples_refused), (0, 1), "target {target}");
        }
    }

    /// A target without a window of its own batches like the others once
    /// the aggregate (its window) is warm: its samples wait in the lane.
    #[test]
    fn a_target_without_a_window_batches_once_the_aggregate_is_warm() {
        let config = HedgeConfig::DEFAULT.min_samples(1);
        let hedger: SharedHedger<Budget, 2> =
            SharedHedger::with_budget(config, Budget::default()).unwrap();
        let target = 5;
        for i in 0..4u64 {
            let t = i * 10;
            let mut r = hedger.start(target, t, Idempotency::NotIdempotent);
            let _ = hedger.on_commit(&mut r, Attempt::PRIMARY, t + 3 * MS);
        }
        // The first published at once (cold), the rest wait.
        assert_eq!(hedger.aggregate.count(), 1);
        hedger.flush(4 * MS);
        assert_eq!(hedger.aggregate.count(), 4);
        assert_eq!(hedger.stats().samples, 4);
    }

    /// The same in a batch: samples buffered and then refused when the
    /// batch is published are taken back from the counts, the publishing
    /// sample's own refusal counted once.
    #[test]
    fn refusals_in_a_batch_are_counted_once_each() {
        let config = HedgeConfig::DEFAULT.min_samples(1);
        let hedger = SharedHedger::new(config).unwrap();
        // Warm, so that samples wait in the lane.
        let mut first = hedger.start(0, 0, Idempotency::NotIdempotent);
        let _ = hedger.on_commit(&mut first, Attempt::PRIMARY, 3 * MS);
        let window = hedger.windows.first().unwrap();
        window.fill_bucket(&hedger.params, 5 * MS, true);
        let n = hedger.batch() as u64 * 2;
        for i in 0..n {
            // Within 1 ms of each other: batched.
            let t = 3 * MS + i;
            let mut r = hedger.start(0, t, Idempotency::NotIdempotent);
            let _ = hedger.on_commit(&mut r, Attempt::PRIMARY, t + 5 * MS);
        }
        hedger.flush(4 * MS + n);
        let s = hedger.stats();
        assert_eq!((s.samples, s.samples_refused), (1, n));
    }
}
