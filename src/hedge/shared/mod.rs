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
//!   0.75 µs at the defaults, smaller keys collapsed into the first
//!   bucket. Recording a sample is a relaxed `fetch_add` on its bucket and
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
//! * **counters** — striped over cache lines by thread (see
//!   [`stats`](SharedHedger::stats)).
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
//! # Same answers as `Hedger`
//! On one thread, a `SharedHedger<B, T>` decides what a
//! `Hedger<usize, B, T>` given the same events decides, and computes the
//! same delays, with two documented exceptions: samples below the fixed
//! key range (under 0.75 µs at the defaults, while the window also holds
//! samples near `max_sample_ns`) collapse into its first bucket where the
//! sketch's range would have followed its largest samples, and in-flight
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
//! [`stats`](SharedHedger::stats) sums counters while others add to them.
//! During a rotation the half being cleared is the *previous* one, which no
//! writer is adding to; a sample whose writer was preempted across two
//! rotations may be cleared with it or survive. A refresh racing with
//! writers estimates from some of the samples arriving during its pass;
//! the next refresh sees them all. The cached delay is one atomic word. A
//! hedge refused for the in-flight cap after the budget granted it
//! (another thread took the last place in between) has spent its token:
//! the budget fails closed.
//!
//! # Time
//! As with `Hedger`: timestamps are the caller's monotonic nanoseconds, and
//! they may come from threads that read the clock a little apart. A window
//! restarts its period when the clock steps back, empties after an idle gap
//! of two periods, and rotates on its sample count and on time (see
//! [`crate::window`]). The in-flight slots compare epochs modulo 2⁴⁰ slots
//! (87 000 years at the default 10 s lease), so timestamps that far apart
//! may count each other's hedges.
//!
//! # Memory
//! Inline, no allocation: 16 KiB a window (two halves × exact and censored
//! × 1 024 `AtomicU32`), `T + 1` windows, 1 KiB of counter stripes, and the
//! budget. Put it in an `Arc` or a `static`.

mod in_flight;
mod stats;
mod window;

use super::machine::{self, Core, Stat};
use super::{
    Attempt, AttemptSet, CommitOutcome, ConfigError, DelaySource, Failure, FailureOutcome,
    HedgeConfig, HedgeStats, Idempotency, Plan, Request, TimerAction,
};
use crate::budget::{Budget, BudgetStats, HedgeBudget};
use crate::mapping::IndexMapping;
use crate::{CubicMapping, FromRelativeAccuracy};
use in_flight::AtomicInFlight;
use stats::AtomicStats;
use window::{AtomicWindow, Params};

/// Hedge state shared by every thread: all events take `&self`; see the
/// module docs.
///
/// * `B`: the budget, [`Budget`] (a 15 % traffic ratio) by default.
/// * `T`: how many targets (indexes `0..T`) keep their own window.
/// * `M`: the index mapping, [`CubicMapping`] by default;
///   [`LogLinearMapping`](crate::LogLinearMapping) keys samples in integer
///   operations only. The 1 024 buckets a side end at `max_sample_ns`: at
///   α = 1 % the log-linear mapping's span 2¹⁶ (9 ms to the default 10
///   min; shorter samples share the lowest bucket), so take α = 2 % with
///   it (2³²: 140 ns to 10 min).
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
    stats: AtomicStats,
}

impl SharedHedger {
    /// A single-target shared hedger with the default ratio budget.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds.
    pub fn new(config: HedgeConfig) -> Result<Self, ConfigError> {
        Self::with_budget(config, Budget::default())
    }
}

impl<B: HedgeBudget, const T: usize, M: IndexMapping + FromRelativeAccuracy> SharedHedger<B, T, M> {
    const HAS_TARGETS: () = assert!(T > 0, "a hedger needs room for at least one target");

    /// A shared hedger whose targets all share `budget`.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds.
    pub fn with_budget(config: HedgeConfig, budget: B) -> Result<Self, ConfigError> {
        let () = Self::HAS_TARGETS;
        config.validate()?;
        let mapping = M::from_relative_accuracy(config.relative_accuracy)
            .map_err(|_| ConfigError::RelativeAccuracy(config.relative_accuracy))?;
        Ok(Self {
            config,
            params: Params::new(
                mapping,
                config.max_sample_ns,
                config.rotation(),
                config.quantile,
            ),
            budget,
            windows: core::array::from_fn(|_| AtomicWindow::new()),
            aggregate: AtomicWindow::new(),
            in_flight: AtomicInFlight::new(config.in_flight_lease_ns),
            stats: AtomicStats::new(),
        })
    }

    /// Starts a request to `target` at `now`: the caller sends the primary
    /// and arms a timer at [`Request::next_timer`] if it is `Some`.
    /// [`Request::plan`] says what was decided and why.
    #[inline]
    pub fn start(&self, target: usize, now: u64, idempotency: Idempotency) -> Request<usize> {
        self.stats.request();
        self.budget.on_request(now);
        let delay = self.delay_at(target, now);
        machine::start(&mut &*self, target, now, idempotency, delay)
    }

    /// The caller's timer for `request` fired at `now`.
    pub fn on_timer(&self, request: &mut Request<usize>, now: u64) -> TimerAction {
        machine::on_timer(&mut &*self, request, now)
    }

    /// `attempt` of `request` gave its commit signal at `now`.
    #[inline]
    pub fn on_commit(
        &self,
        request: &mut Request<usize>,
        attempt: Attempt,
        now: u64,
    ) -> CommitOutcome {
        machine::on_commit(&mut &*self, request, attempt, now)
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
        machine::on_failure(&mut &*self, request, attempt, now, failure)
    }

    /// The caller gives `request` up at `now`: releases its in-flight
    /// hedges at once and records the attempts in flight as censored.
    /// Returns the attempts to cancel. Dropping a request without this call
    /// is safe too, only slower to release (see
    /// [`in_flight_lease_ns`](HedgeConfig::in_flight_lease_ns)).
    pub fn abandon(&self, request: &mut Request<usize>, now: u64) -> AttemptSet {
        machine::abandon(&mut &*self, request, now)
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

    /// What the hedger has done so far, summed over its counter stripes.
    pub fn stats(&self) -> HedgeStats {
        HedgeStats {
            leases_expired: self.in_flight.expired(),
            ..self.stats.snapshot()
        }
    }

    /// The budget's own counters.
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
        window
            .cached_quantile()
            .map(|q| self.config.bound(self.config.scale(q)))
    }
}

impl<B: HedgeBudget, const T: usize, M: IndexMapping + FromRelativeAccuracy> Core<usize>
    for &SharedHedger<B, T, M>
{
    #[inline]
    fn config(&self) -> &HedgeConfig {
        &self.config
    }

    #[inline]
    fn in_flight_count(&self, now: u64) -> u32 {
        self.in_flight.count(now)
    }

    #[inline]
    fn in_flight_acquire(&mut self, now: u64, cap: Option<u32>) -> bool {
        self.in_flight.acquire(now, cap)
    }

    #[inline]
    fn in_flight_release(&mut self, sent_at: u64) {
        self.in_flight.release(sent_at);
    }

    #[inline]
    fn acquire_token(&mut self, _target: usize, now: u64) -> bool {
        self.budget.try_acquire(now)
    }

    #[inline]
    fn record_sample(&mut self, target: usize, now: u64, elapsed: u64, exact: bool) -> bool {
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

    #[inline(always)]
    fn bump(&mut self, stat: Stat) {
        self.stats.bump(stat);
    }

    #[inline]
    fn set_current_delay(&mut self, delay_ns: u64) {
        self.stats.set_current_delay(delay_ns);
    }
}
