//! The hedge state machine: when to hedge, whether one may, who won, whom
//! to cancel.
//!
//! A [`Hedger`] holds, per target, a rotating [`LatencyWindow`] with a cached
//! hedge delay, a [`HedgeBudget`], and [`HedgeStats`]. It owns no clock, no
//! timer and no I/O: the caller feeds it timestamps (monotonic nanoseconds,
//! any epoch) and events, and acts on what it returns.
//!
//! ```
//! use tailguard::hedge::{Attempt, CommitOutcome, Hedger, HedgeConfig, Idempotency, Plan, TimerAction};
//!
//! let mut hedger = Hedger::new(HedgeConfig::DEFAULT.prior_delay_ns(10_000_000))?;
//! // The default budget is 10 % of traffic: ten quick requests earn a hedge.
//! for i in 0..10 {
//!     let (mut req, _plan) = hedger.start((), i, Idempotency::Idempotent);
//!     hedger.on_commit(&mut req, Attempt::PRIMARY, i + 500_000); // 0.5 ms
//! }
//! let t0 = 1_000_000_000;
//! // A request starts: send the primary, arm a timer if the plan says so.
//! let (mut req, plan) = hedger.start((), t0, Idempotency::Idempotent);
//! // Still cold (11 samples < 20): the configured prior delay applies.
//! assert!(matches!(plan, Plan::HedgeAt { delay_ns: 10_000_000, from_prior: true, .. }));
//! // The timer fires before any answer: send the hedge the machine names.
//! let action = hedger.on_timer(&mut req, t0 + 10_000_000);
//! assert!(matches!(action, TimerAction::SendHedge(a) if !a.is_primary()));
//! // The hedge answers first (its commit signal: headers, or first token).
//! let hedge = req.sent_attempts().last().unwrap();
//! match hedger.on_commit(&mut req, hedge, t0 + 12_000_000) {
//!     CommitOutcome::Won { winner, cancel } => {
//!         assert_eq!(winner, hedge);
//!         assert_eq!(cancel.len(), 1); // cancel the primary
//!     }
//!     other => unreachable!("{other:?}"),
//! }
//! assert_eq!(hedger.stats().hedge_wins, 1);
//! # Ok::<(), tailguard::hedge::ConfigError>(())
//! ```
//!
//! # What is recorded
//! Each attempt's own latency, from its own send to its commit signal. The
//! winner's is a full sample; a loser cancelled at elapsed `t` is recorded
//! as `t`, a censored sample (its true latency is `≥ t`). Hedges fire only
//! after the delay quantile, so a censored value never lands below the
//! quantile it would distort. Recording only winners, timed from the
//! primary's start, teaches the window the *hedged* distribution and drags
//! the delay down request after request; `tests/hedge_drift.rs` shows
//! both.
//!
//! The caller chooses the commit signal and must use the same one to race
//! and to record: response headers for plain RPC, first body byte or first
//! token for streaming (LLM time to first token).
//!
//! # Idempotency
//! The machine cannot know whether a request is safe to send twice.
//! [`Hedger::start`] takes an [`Idempotency`] every time, and
//! [`Idempotency::NotIdempotent`] requests are measured but never hedged.
//!
//! # Concurrency
//! A `Hedger` is a plain value: events take `&mut self` (they record
//! samples and rotate windows), reads take `&self`. It is `Send`, and `Sync`
//! when its budget is. Two ways to use it from many threads:
//! * one `Hedger` per worker thread (thread-per-core runtimes, shards),
//!   sharing one budget by reference — `HedgeBudget` is implemented for
//!   `&B`, and budgets are lock-free — so the hedge cap holds for the
//!   process while no lock is taken anywhere;
//! * one `Hedger` behind the caller's mutex, for work-stealing runtimes:
//!   each event holds it for the tens of nanoseconds the machine needs
//!   (see the benchmarks), never across I/O.
//!
//! # State machine
//! Per request (see [`Request`]): `Racing` until the first commit
//! (`Won(attempt)`) or until the deadline passes, every attempt fails, or
//! the caller abandons it (`GaveUp`).
//! * `start` → `Racing` with the primary sent; the next hedge is due at
//!   `start + delay` unless the plan is [`Plan::NoHedge`].
//! * `on_timer` while `Racing`: past the deadline → `GaveUp` (cancel all);
//!   before the hedge is due (early wake-up, clock went backwards) → wait;
//!   otherwise in-flight cap, attempts and budget are checked, in that
//!   order, and the next hedge is sent and the one after scheduled one
//!   delay later. A budget denial ends hedging for that request.
//! * `on_commit` while `Racing` → `Won`, samples recorded, the rest
//!   cancelled; after `Won`/`GaveUp` → [`CommitOutcome::Late`]; for an
//!   attempt never sent or already failed → [`CommitOutcome::Unknown`].
//! * `on_failure` while `Racing`: marks the attempt failed; gives up if the
//!   policy says so or nothing is left in flight; otherwise continues.
//! * Every event on a finished request changes nothing.

mod config;
mod request;
mod stats;
mod table;

pub use config::{ConfigError, FailurePolicy, HedgeConfig, MAX_HEDGES};
pub use request::{
    Attempt, AttemptSet, CommitOutcome, FailureOutcome, Idempotency, NoHedge, Plan, Request,
    TimerAction,
};
pub use stats::HedgeStats;

use crate::budget::{Budget, HedgeBudget};
use crate::store::{CollapsingLowestStore, Store};
use crate::window::LatencyWindow;
use crate::CubicMapping;
use request::Phase;
use stats::bump;
use table::{Table, Target};

/// Where the budget lives.
#[derive(Debug)]
enum BudgetScope<B> {
    /// One budget for every target.
    Shared(B),
    /// Each target gets its own, made by this function when it is first seen.
    PerTarget(fn() -> B),
}

/// The hedge state machine for up to `T` targets keyed by `K`; see the
/// module docs.
///
/// * `K`: the caller's target id (host, endpoint index, `()` for one).
/// * `B`: the budget, [`Budget`] (a 10 % traffic ratio) by default.
/// * `T`: how many targets keep their own latency state (default 1).
/// * `S`: the sketch store; [`CollapsingLowestStore<1024>`] (4 KiB, 1 µs to
///   10 min at α = 1 %) by default. Each target holds two sketches, so a
///   default target takes about 8.3 KiB, inline in the `Hedger`.
#[derive(Debug)]
pub struct Hedger<K = (), B = Budget, const T: usize = 1, S: Store = CollapsingLowestStore<1024>> {
    config: HedgeConfig,
    mapping: CubicMapping,
    budget: BudgetScope<B>,
    table: Table<K, S, B, T>,
    hedges_in_flight: u32,
    stats: HedgeStats,
}

impl Hedger {
    /// A single-target hedger with the default 10 % ratio budget.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds.
    pub fn new(config: HedgeConfig) -> Result<Self, ConfigError> {
        Self::with_budget(config, Budget::default())
    }
}

impl<K: PartialEq + Copy, B: HedgeBudget, const T: usize, S: Store> Hedger<K, B, T, S> {
    const HAS_TARGETS: () = assert!(T > 0, "a hedger needs room for at least one target");

    /// A hedger whose targets all share `budget`.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds.
    pub fn with_budget(config: HedgeConfig, budget: B) -> Result<Self, ConfigError> {
        Self::build(config, BudgetScope::Shared(budget))
    }

    /// A hedger in which each target gets its own budget, made by
    /// `make_budget` when the target is first seen (and again if it is
    /// evicted and comes back).
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds.
    pub fn with_budget_per_target(
        config: HedgeConfig,
        make_budget: fn() -> B,
    ) -> Result<Self, ConfigError> {
        Self::build(config, BudgetScope::PerTarget(make_budget))
    }

    fn build(config: HedgeConfig, budget: BudgetScope<B>) -> Result<Self, ConfigError> {
        let () = Self::HAS_TARGETS;
        config.validate()?;
        let mapping = CubicMapping::new(config.relative_accuracy)
            .map_err(|_| ConfigError::RelativeAccuracy(config.relative_accuracy))?;
        Ok(Self {
            config,
            mapping,
            budget,
            table: Table::new(),
            hedges_in_flight: 0,
            stats: HedgeStats::default(),
        })
    }

    /// Starts a request to `target` at `now`: the caller sends the primary
    /// and, if the plan is [`Plan::HedgeAt`], arms a timer.
    pub fn start(&mut self, target: K, now: u64, idempotency: Idempotency) -> (Request<K>, Plan) {
        bump(&mut self.stats.requests);
        let mut request = Request::new(target, now);
        request.give_up_at = self.config.deadline_ns.map(|d| now.saturating_add(d));
        let index = self.target_index(target, now);
        let Some(entry) = self.table.get_mut(index) else {
            // Unreachable with T > 0; answer conservatively all the same.
            return (request, Plan::NoHedge(NoHedge::ColdStart));
        };
        entry.last_used = entry.last_used.max(now);
        entry.window.advance(now);
        match (&self.budget, &entry.budget) {
            (BudgetScope::Shared(b), _) | (_, Some(b)) => b.on_request(now),
            (BudgetScope::PerTarget(_), None) => {}
        }
        let estimate = estimate(&self.config, &entry.window);
        if estimate.is_none() {
            bump(&mut self.stats.cold_starts);
        }
        let plan = if idempotency == Idempotency::NotIdempotent {
            bump(&mut self.stats.not_idempotent);
            Plan::NoHedge(NoHedge::NotIdempotent)
        } else if self.config.max_hedges == 0 {
            Plan::NoHedge(NoHedge::Disabled)
        } else {
            let delay = match (estimate, self.config.prior_delay_ns) {
                (Some(d), _) => Some((d, false)),
                (None, Some(prior)) => Some((self.config.bound(prior), true)),
                (None, None) => None,
            };
            match delay {
                Some((d, from_prior)) => {
                    let at = now.saturating_add(d);
                    request.delay_ns = d;
                    request.next_hedge_at = Some(at);
                    self.stats.current_delay_ns = Some(d);
                    Plan::HedgeAt {
                        at,
                        delay_ns: d,
                        from_prior,
                    }
                }
                None => Plan::NoHedge(NoHedge::ColdStart),
            }
        };
        (request, plan)
    }

    /// The table index for `target`, inserting it (and evicting) if new.
    fn target_index(&mut self, target: K, now: u64) -> usize {
        if let Some(i) = self.table.find(&target) {
            return i;
        }
        let window = LatencyWindow::with_mapping(
            self.mapping,
            self.config.rotation_period_ns,
            self.config.quantile,
        );
        let budget = match &self.budget {
            BudgetScope::Shared(_) => None,
            BudgetScope::PerTarget(make) => Some(make()),
        };
        let Ok(window) = window else {
            // The quantile was validated at construction.
            return usize::MAX;
        };
        let (index, evicted) = self.table.insert(Target {
            key: target,
            window,
            last_used: now,
            budget,
        });
        if evicted {
            bump(&mut self.stats.evictions);
        }
        index
    }

    /// The caller's timer for `request` fired at `now`.
    pub fn on_timer(&mut self, request: &mut Request<K>, now: u64) -> TimerAction {
        if request.phase != Phase::Racing {
            return TimerAction::Skip(NoHedge::Finished);
        }
        if request.give_up_at.is_some_and(|g| now >= g) {
            let cancel = self.give_up(request);
            return TimerAction::GiveUp { cancel };
        }
        let Some(due) = request.next_hedge_at else {
            return match request.give_up_at {
                Some(until) => TimerAction::Wait { until },
                None => TimerAction::Skip(NoHedge::AttemptsExhausted),
            };
        };
        if now < due {
            let until = request.give_up_at.map_or(due, |g| g.min(due));
            return TimerAction::Wait { until };
        }
        if request.hedges_sent() >= u32::from(self.config.max_hedges) {
            request.next_hedge_at = None;
            return TimerAction::Skip(NoHedge::AttemptsExhausted);
        }
        if self
            .config
            .max_hedges_in_flight
            .is_some_and(|cap| self.hedges_in_flight >= cap)
        {
            bump(&mut self.stats.in_flight_limited);
            // Look again one delay later (at least 1 ns, so a zero delay
            // cannot spin): a slot may have freed up.
            request.next_hedge_at = Some(now.saturating_add(request.delay_ns.max(1)));
            return TimerAction::Skip(NoHedge::InFlightLimit);
        }
        if !self.acquire(&request.target, now) {
            bump(&mut self.stats.budget_denials);
            request.next_hedge_at = None;
            return TimerAction::Skip(NoHedge::BudgetDenied);
        }
        let attempt = Attempt(request.sent);
        if let Some(slot) = request.sent_at.get_mut(attempt.index()) {
            *slot = now;
        }
        request.sent = request.sent.saturating_add(1);
        self.hedges_in_flight = self.hedges_in_flight.saturating_add(1);
        bump(&mut self.stats.hedges_sent);
        request.next_hedge_at = (request.hedges_sent() < u32::from(self.config.max_hedges))
            .then(|| now.saturating_add(request.delay_ns));
        TimerAction::SendHedge(attempt)
    }

    fn acquire(&self, target: &K, now: u64) -> bool {
        match &self.budget {
            BudgetScope::Shared(b) => b.try_acquire(now),
            BudgetScope::PerTarget(_) => self
                .table
                .find(target)
                .and_then(|i| self.table.get(i))
                .and_then(|t| t.budget.as_ref())
                .is_some_and(|b| b.try_acquire(now)),
        }
    }

    /// `attempt` of `request` gave its commit signal at `now`.
    pub fn on_commit(
        &mut self,
        request: &mut Request<K>,
        attempt: Attempt,
        now: u64,
    ) -> CommitOutcome {
        if attempt.0 >= request.sent {
            return CommitOutcome::Unknown;
        }
        if request.phase != Phase::Racing {
            return CommitOutcome::Late;
        }
        if request.failed.contains(attempt) {
            return CommitOutcome::Unknown;
        }
        let racing = request.in_flight();
        self.record(request, racing, now);
        self.release(racing);
        request.phase = Phase::Won(attempt);
        request.next_hedge_at = None;
        if attempt.is_primary() {
            bump(&mut self.stats.primary_wins);
        } else {
            bump(&mut self.stats.hedge_wins);
        }
        CommitOutcome::Won {
            winner: attempt,
            cancel: racing.without(attempt),
        }
    }

    /// Records the elapsed time of every attempt in `attempts`: the winner's
    /// true latency, the losers' censored at `now`.
    fn record(&mut self, request: &Request<K>, attempts: AttemptSet, now: u64) {
        let Some(entry) = self
            .table
            .find(&request.target)
            .and_then(|i| self.table.get_mut(i))
        else {
            return; // evicted meanwhile: nowhere to record
        };
        for a in attempts.iter() {
            match request.sent_at(a).and_then(|sent| now.checked_sub(sent)) {
                Some(elapsed) => {
                    if entry.window.record(now, elapsed).is_ok() {
                        bump(&mut self.stats.samples);
                    }
                }
                None => bump(&mut self.stats.clock_anomalies),
            }
        }
        entry.last_used = entry.last_used.max(now);
    }

    /// Forgets the hedges among `attempts` in the in-flight count.
    fn release(&mut self, attempts: AttemptSet) {
        let hedges = attempts.without(Attempt::PRIMARY).len();
        self.hedges_in_flight = self.hedges_in_flight.saturating_sub(hedges);
    }

    fn give_up(&mut self, request: &mut Request<K>) -> AttemptSet {
        let cancel = request.in_flight();
        self.release(cancel);
        request.phase = Phase::GaveUp;
        request.next_hedge_at = None;
        bump(&mut self.stats.gave_up);
        cancel
    }

    /// `attempt` of `request` failed (an error, not slowness) at `now`.
    /// Failures record no latency sample.
    pub fn on_failure(
        &mut self,
        request: &mut Request<K>,
        attempt: Attempt,
        _now: u64,
    ) -> FailureOutcome {
        if attempt.0 >= request.sent
            || request.phase != Phase::Racing
            || request.failed.contains(attempt)
        {
            return FailureOutcome::Ignored;
        }
        request.failed = request.failed.with(attempt);
        self.release(AttemptSet::EMPTY.with(attempt));
        let give_up = match self.config.failure_policy {
            FailurePolicy::GiveUpOnFirst => true,
            FailurePolicy::WaitForOthers => request.in_flight().is_empty(),
        };
        if give_up {
            FailureOutcome::GiveUp {
                cancel: self.give_up(request),
            }
        } else {
            FailureOutcome::Continue
        }
    }

    /// The caller gave `request` up on its own (its task was cancelled):
    /// releases its in-flight hedges. Returns the attempts to cancel.
    pub fn abandon(&mut self, request: &mut Request<K>) -> AttemptSet {
        if request.phase != Phase::Racing {
            return AttemptSet::EMPTY;
        }
        self.give_up(request)
    }

    /// What the hedger has done so far.
    pub fn stats(&self) -> HedgeStats {
        self.stats
    }

    /// The budget's own counters: the shared one, or the target's.
    pub fn budget_stats(&self, target: &K) -> Option<crate::BudgetStats> {
        match &self.budget {
            BudgetScope::Shared(b) => Some(b.stats()),
            BudgetScope::PerTarget(_) => self
                .table
                .find(target)
                .and_then(|i| self.table.get(i))
                .and_then(|t| t.budget.as_ref())
                .map(HedgeBudget::stats),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &HedgeConfig {
        &self.config
    }

    /// The delay the window gives a request to `target` now, `None` in
    /// cold start (the prior, if configured, is not included) or for an
    /// unknown target. O(1).
    pub fn delay_ns(&self, target: &K) -> Option<u64> {
        estimate(&self.config, self.window(target)?)
    }

    /// The latency window of `target`, if the table holds it.
    pub fn window(&self, target: &K) -> Option<&LatencyWindow<CubicMapping, S>> {
        self.table
            .find(target)
            .and_then(|i| self.table.get(i))
            .map(|t| &t.window)
    }

    /// Hedges sent and not yet finished, across requests.
    pub fn hedges_in_flight(&self) -> u32 {
        self.hedges_in_flight
    }

    /// Targets in the table.
    pub fn targets(&self) -> usize {
        self.table.len()
    }

    /// Drops the targets not used since before `cutoff` (e.g. `now − 10 min`),
    /// so their slots, and their memory of latency, go to new targets.
    /// Returns how many were dropped.
    pub fn evict_unused_since(&mut self, cutoff: u64) -> usize {
        self.table.evict_unused_since(cutoff)
    }

    /// The mapping every target's sketches use.
    pub fn mapping(&self) -> &CubicMapping {
        &self.mapping
    }
}

/// The delay a window's estimate gives, `None` while it holds fewer than
/// `min_samples` samples: the cached quantile, scaled and bounded.
fn estimate<S: Store>(
    config: &HedgeConfig,
    window: &LatencyWindow<CubicMapping, S>,
) -> Option<u64> {
    if window.count() < config.min_samples {
        return None;
    }
    window
        .cached_quantile()
        .map(|q| config.bound(config.scale(q)))
}
