//! The hedge state machine: when to hedge, whether one may, who won, whom
//! to cancel.
//!
//! A [`Hedger`] holds, per target, a rotating [`LatencyWindow`] with a cached
//! hedge delay, an aggregate window over every target, a [`HedgeBudget`],
//! and [`HedgeStats`]. It owns no clock, no timer and no I/O: the caller
//! feeds it timestamps (monotonic nanoseconds, any epoch) and events, and
//! acts on what it returns.
//!
//! ```
//! use tailguard::hedge::{Attempt, CommitOutcome, DelaySource, Hedger, HedgeConfig, Idempotency, Plan, TimerAction};
//!
//! let mut hedger = Hedger::new(HedgeConfig::DEFAULT.prior_delay_ns(10_000_000))?;
//! // The default budget is 15 % of traffic: seven quick requests earn a hedge.
//! for i in 0..10 {
//!     let mut req = hedger.start((), i, Idempotency::Idempotent);
//!     hedger.on_commit(&mut req, Attempt::PRIMARY, i + 500_000); // 0.5 ms
//! }
//! let t0 = 1_000_000_000;
//! // A request starts: send the primary, arm a timer at `next_timer()`.
//! let mut req = hedger.start((), t0, Idempotency::Idempotent);
//! // Still cold (10 samples < 20): the configured prior delay applies.
//! assert_eq!(req.plan(), Plan::Hedge { delay_ns: 10_000_000, source: DelaySource::Prior });
//! assert_eq!(req.next_timer(), Some(t0 + 10_000_000));
//! // The timer fires before any answer: send the hedge the machine names.
//! let action = hedger.on_timer(&mut req, t0 + 10_000_000);
//! let TimerAction::SendHedge(hedge) = action else { unreachable!("{action:?}") };
//! // The hedge answers first (its commit signal: headers, or first token).
//! match hedger.on_commit(&mut req, hedge, t0 + 12_000_000) {
//!     CommitOutcome::Won { winner, cancel } => {
//!         assert_eq!(winner, hedge);
//!         assert!(cancel.contains(Attempt::PRIMARY)); // cancel the primary
//!     }
//!     other => unreachable!("{other:?}"),
//! }
//! // Recorded: the hedge's 2 ms exactly, the primary's 12 ms as censored
//! // ("at least 12 ms").
//! let stats = hedger.stats();
//! assert_eq!((stats.hedge_wins, stats.samples, stats.censored_samples), (1, 11, 1));
//! # Ok::<(), tailguard::hedge::ConfigError>(())
//! ```
//!
//! # What is recorded
//! The estimate must describe *one attempt's* latency, unbiased, whatever
//! hedging does to it. Every attempt is a draw of that latency, timed from
//! its own send to its commit signal:
//! * the winner's elapsed time is an exact sample;
//! * every loser cancelled at elapsed `t`, and every attempt still in flight
//!   when the request is given up, is a *censored* sample: its latency is
//!   at least `t`;
//! * a failed attempt records nothing.
//!
//! The windows estimate the quantile with Kaplan–Meier's product-limit
//! estimator over both kinds ([`crate::window`]). An attempt is cancelled
//! when *another* one answers, independently of its own latency, which is
//! what makes the estimate unbiased: a hedge cancelled 1 ms after its send
//! does not pull the delay down, and a primary cancelled at
//! "delay + hedge latency" does not cut its tail short. Recording only
//! winners, or losers as if they had answered, teaches the window the
//! *hedged* distribution and drags the delay down request after request.
//!
//! That independence holds within one target's window. The aggregate
//! window pools targets, and where their latencies differ, when an attempt
//! is cancelled depends on which target it went to, and so on its latency:
//! under frequent hedging its estimate leans high (most at low quantiles:
//! a p50 read about 10 % high in an audit with targets whose medians
//! spread 2–14 ms; a p90 about 1 %). Give busy targets windows of their own
//! (`T`) and treat the aggregate as the fallback it is.
//!
//! It also takes a request's attempts to be independent draws. Where they
//! are not (a request that is slow on every replica: a heavy query, a cold
//! key), a hedge goes out only when its primary is slow, so its own answer
//! is slow more often than one attempt in general, and the window holds
//! more slow answers than the backend gives: the delay reads above the
//! quantile of one attempt, several times above when a few per cent of
//! requests are slow on every attempt and the quantile lies below them.
//! There hedging cannot help anyway (every attempt of such a request is
//! slow), and the higher delay sends fewer hedges for nothing; attempts
//! only partly correlated lean the delay high by a few per cent.
//!
//! Kaplan–Meier sees only as far as answers reach. Where the delay starts
//! below the true quantile and every attempt slower than "delay + a
//! hedge's latency" is cancelled, the tail above that is only ever seen
//! censored: the estimate stops at the largest answer (never at a
//! cancellation time, which the delay itself sets) and climbs by about a
//! hedge's latency at a time. Up to p99 this is not seen in practice; at
//! p99.9 of a heavy tail (Pareto, shape 1.5; 40 000 requests, four seeds)
//! the delay reads 0.76× the true quantile (0.61× to 0.91×), against 0.96×
//! without hedging, and about 3× the 0.1 % of requests are hedged. For
//! such levels hedge at a lower quantile the answers do reach, scaled up
//! ([`HedgeConfig::delay_multiplier_permille`]): there p99 × 4.64 (the
//! tail's p99.9/p99) reads 1.03× the true p99.9 at the asked hedge rate
//! (`tests/audit_client_hedger.rs`).
//!
//! A target whose every answer is beaten gets no answer of its own: when
//! its requests' hedges go to faster replicas ([`Request::route`]) and
//! always win, its window holds only censored samples and its requests
//! keep the aggregate's delay (or the prior), hedging early, away from
//! it, which is what routing is for. Its own delay comes once enough of
//! its answers beat the hedges (the other replicas' tails let one win now
//! and then); a target slower than every attempt routed away from it never
//! gets one.
//!
//! Failures and endings bend the estimate where they depend on latency:
//! * **Failures that come late.** A failure records nothing, but an
//!   attempt that would have failed and is cancelled first (another
//!   answered) is recorded censored, as still able to answer: where a
//!   sizeable share of attempts fail slowly (a tenth, failing after many
//!   times the quantile), the delay leans high, fewer stragglers are
//!   hedged, and the budget is spent on fewer of them.
//! * **Failures because of slowness** (a proxy's 504, a server's deadline
//!   reported as [`Failure::Retryable`]) remove slow attempts from the
//!   sample and pull the delay low: such a failure is the attempt's
//!   slowness, not an error.
//! * **Requests dropped without [`Hedger::abandon`]** (a caller's own
//!   timeout) record nothing of their slow attempts: the delay leans low,
//!   the more the earlier the timeout. Give them up with `abandon`, or let
//!   the hedger do it ([`HedgeConfig::deadline_ns`]): their attempts are
//!   then recorded censored, and the estimate stays unbiased.
//! * **A quantile beyond the deadline** is never answered: the delay then
//!   settles just under the deadline, and hedges go out just before their
//!   requests are given up. Hedge at a quantile the deadline leaves room
//!   for, or bound the delay ([`HedgeConfig::max_delay_ns`]).
//!
//! The caller chooses the commit signal and must use the same one to race
//! and to record: response headers for plain RPC, first body byte or first
//! token for streaming (LLM time to first token).
//!
//! **Streaming with a slow mode.** First tokens often come in two modes
//! (a cache hit in 15 ms, a miss in 200 ms for one request in five). The
//! default p90 then falls inside the slow mode (198 ms there): the misses
//! wait for it and hedging does nothing. To race the misses, put the delay
//! between the modes and pay for them: a quantile below the fast share
//! (`quantile(0.7)`, `1 − quantile` above the 20 % of misses) or a
//! multiple of the median (`quantile(0.5).delay_multiplier_permille(1_500)`),
//! with a budget share above the misses' (`RatioBudget::new(2_500, 10)`,
//! not the default 15 %). The README's *streaming* simulation does this:
//! hedged at 1.5 × the median, first-token p90 falls from 198 ms to 39 for
//! 21 % extra load. A client that commits on headers instead almost never
//! sees a hedge win (`hedge_wins` stays near 0 for the hedges it sends):
//! the sign to look for.
//!
//! # Time
//! Timestamps that go backwards, repeat or jump never panic and never
//! freeze anything. An event earlier than its attempt's send is counted in
//! [`HedgeStats::clock_anomalies`] and records nothing; an elapsed time
//! above [`HedgeConfig::max_sample_ns`] cannot be real and is counted in
//! [`HedgeStats::samples_refused`]. Starting a request reads the windows
//! without changing them, so a single bad timestamp changes no estimate.
//! Each window keeps its own time, the latest timestamp it has taken (see
//! *Time* in [`crate::window`]): a sample behind it by less than two
//! rotation periods (a thread whose clock lags, a clock stepped back a
//! little) is recorded and moves neither that time nor the rotation
//! period; a stale one, two periods or more behind, neither, until 16 or
//! more distinct stale timestamps spanning more than two periods, with
//! none between them that moves the window's time, take the new clock (a
//! clock stepped back for good: the window's own silent as long as makes
//! an idle gap); one two periods or more ahead is an idle gap and empties
//! the window. So threads whose clocks lag, taking turns shorter than two
//! periods with one on the window's clock, or a clock that steps back and
//! returns, cost no estimate and hasten no rotation. The table's eviction uses no
//! timestamp. The in-flight count keeps four time slots a lease, by send
//! time, and cannot tell a hedge stamped by another clock from one sent
//! after the clock jumped: one a lease or more from the others takes its
//! slot as if the lease had passed there, and the live hedges that slot
//! held stop counting. Until a lease has passed, the count may then read
//! low by them (the cap lets as many more through), and their requests'
//! ends may take out other requests' places; a lease later it is exact
//! again (`tests/hedge_production.rs`).
//!
//! # Targets
//! Each target (host, replica, endpoint: the caller's key `K`) has its own
//! window in a table of `T` slots. Each request counts one for its target
//! (all counts halved every `16 × T` requests to targets without a slot),
//! whether it has a slot or is one of the 32 keys without one
//! remembered lately. When the table is full, a target without a slot
//! takes the slot of the least used one only once its count, this request
//! included, is at least twice that one's and two more (`2 × c + 2`); a
//! target's first request counts for nothing once it has a slot. So busy
//! targets keep their slots among keys seen once (a target with a
//! thirtieth of the requests among a stream of one-off keys does), and
//! targets asked for equally often do not evict one another, in turn (12
//! in turn over 3 slots: no eviction, where a recency rule evicts at every
//! request) or at random (a random or power-of-two-choices balancer,
//! whose counts differ by chance: 50 over 16 slots, at most 0.004
//! evictions a request, and at least three quarters of the requests that
//! could have their own delay have it). The slots go to the targets that
//! took them first among equals, while a newcomer asked for more than
//! twice as often as a slot's target gets that slot however busy the
//! target stays (one with 30 % of the traffic against 16 slots of 4.4 %:
//! within 2 000 requests). Give `T` a slot for every target
//! that carries a steady share of the traffic where you can, or use a
//! [`SharedHedger<B, T>`](SharedHedger), whose targets are indices with a
//! window each and never evict. And a target asked for nothing yields
//! its slot to any target without one (a newcomer among one-off keys gets
//! a slot however rare it is) at the first halving that finds its count
//! at 0, or that ends two periods without a request for it: within one
//! period (`16 × T` such requests) for a target asked for once, within two
//! to three (at most `48 × T` requests) however busy it was. A newcomer
//! asked for often takes the slot sooner: at twice the idle target's count
//! and two more, a count that halves each period. Every sample is also
//! recorded in one aggregate window (when `T > 1`), and a target whose own
//! window is cold, or that has no slot, gets the aggregate's delay
//! ([`DelaySource::Aggregate`]) rather than none; with budgets per target
//! ([`Hedger::with_budget_per_target`]), targets without a slot share one. A hedge sent to another
//! replica can say so ([`Request::route`]), so its latency is recorded
//! under the replica that served it, and the attempt counts as a use of
//! that replica's slot. With `T = 1` there is one slot and no aggregate:
//! give it one key (`()`, as the default does); two keys taking turns
//! evict each other's window at every request and never hedge. For more
//! targets, `T` slots; for one window whatever the key, a
//! [`SharedHedger<B, 1>`](SharedHedger), whose single window takes every
//! target.
//!
//! Sizing `T`: a slot gives its target its own delay; the targets without
//! one, and those whose window is still cold, share the aggregate's. The
//! aggregate pools every target's samples as they come, so it is the
//! traffic-weighted mix, led by the busiest targets: a busy target that
//! turns slow raises the delay of every target without a window of its
//! own, which then hedges less. Slots are earned by requests, not
//! answers: a target that never answers (hung, failing fast) holds its
//! slot while it is asked for, with a window that never warms. So give
//! `T` at least the targets that carry most of the traffic, and every
//! target whose latency differs from the rest; where traffic is spread
//! evenly over more targets than that, a
//! [`SharedHedger<B, T>`](SharedHedger) with one window per target index
//! keeps them all. [`HedgeStats::evictions`] rising steadily says the
//! table is too small for the traffic's spread;
//! [`HedgeStats::aggregate_delays`] counts the requests that used the
//! aggregate's delay (no slot, or a cold window).
//!
//! # Idempotency
//! The machine cannot know whether a request is safe to send twice.
//! [`Hedger::start`] takes an [`Idempotency`] every time, and
//! [`Idempotency::NotIdempotent`] requests are measured but never hedged
//! nor retried.
//!
//! # Cancellation and dropped requests
//! A [`Request`] is a value the caller owns; it cannot be copied. Dropping
//! it without a final event (a `select!` that lost, a timeout, an aborted
//! task) is safe: its hedges stop counting against
//! [`HedgeConfig::max_hedges_in_flight`] within
//! [`HedgeConfig::in_flight_lease_ns`] on their own, and nothing else was
//! held. Call [`Hedger::abandon`] when you can: it releases them at once
//! and records the attempts' elapsed times as censored samples.
//!
//! # Concurrency
//! A `Hedger` is a plain value: events take `&mut self` (they record
//! samples and rotate windows), reads take `&self`. It is `Send`, and `Sync`
//! when its budget is. Three ways to use the machine from many threads:
//! * [`SharedHedger`]: one hedger for every thread, all events on `&self`
//!   (atomic bucket counters, an atomic in-flight count, per-thread lanes
//!   that publish samples and deposits in batches, rotation by whichever
//!   thread wins a try-lock) — for work-stealing runtimes. Targets are
//!   indexes `0..T`; see [`shared`];
//! * one `Hedger` per worker thread (thread-per-core runtimes, shards),
//!   sharing one budget by reference — `HedgeBudget` is implemented for
//!   `&B`, and budgets are lock-free — so the budget holds for the
//!   process while no lock is taken anywhere (each hedger's
//!   `max_hedges_in_flight` is its own: divide a process-wide cap among
//!   them);
//! * one `Hedger` behind the caller's mutex: each event holds it for the
//!   tens of nanoseconds the machine needs (see the benchmarks), never
//!   across I/O (`cargo bench --bench shared` compares it with
//!   `SharedHedger`, on one thread and two).
//!
//! # Embedded
//! On a microcontroller without double-precision hardware (Cortex-M4F and
//! M33 have a single-precision FPU only; M0/M3 and RISC-V `imc` none),
//! every `f64` operation is a software routine. Give the hedger
//! [`LogLinearMapping`](crate::LogLinearMapping) as its mapping `M`: every
//! event is then integer arithmetic — keys through
//! [`index_u64`](crate::IndexMapping::index_u64), the windows' Kaplan–Meier
//! refresh in fixed point (see [`crate::window`]), the delay's scaling and
//! bounds. Only construction uses floats (validating the configuration,
//! deriving the rotation rule), once; with a constant configuration the
//! compiler folds them away.
//!
//! ```
//! use tailguard::hedge::{Attempt, HedgeConfig, Hedger, Idempotency};
//! use tailguard::{CollapsingLowestStore, LogLinearMapping, RatioBudget};
//!
//! // α = 2 % asked, 1.54 % achieved: 32 buckets a power of two, so the
//! // default 1 024 buckets span 1 µs to over an hour in nanoseconds.
//! type Embedded = Hedger<(), RatioBudget, 1, CollapsingLowestStore<1024>, LogLinearMapping>;
//! let mapping = LogLinearMapping::with_bits(5, 0)?;
//! let config = HedgeConfig::DEFAULT.relative_accuracy(0.02);
//! let mut hedger = Embedded::with_mapping(config, RatioBudget::default(), mapping)?;
//! let mut req = hedger.start((), 0, Idempotency::Idempotent);
//! let _ = hedger.on_commit(&mut req, Attempt::PRIMARY, 2_000_000);
//! assert_eq!(hedger.stats().samples, 1);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! CI builds such a hedger for `thumbv7em-none-eabihf` (start, timer,
//! commit, stats; opt-level `"s"`, LTO) and checks from its disassembly
//! that no software double-precision routine is reachable from any event:
//! it takes 16.2 KB of flash (20.4 KB at opt-level 3; more on
//! `thumbv6m-none-eabi` and `riscv32imc-unknown-none-elf`, whose 64-bit
//! atomics take critical sections; see the README's *Embedded targets*). 64-bit atomics, emulated with a lock on 32-bit
//! targets, are one out-of-line function an operation there.
//!
//! # State machine
//! Per request (see [`Request`]): `Racing` until the first commit
//! (`Won(attempt)`), or until a timer or a failure at or past the
//! deadline, a fatal failure, every attempt failed, or the caller abandons
//! it (`GaveUp`). A commit reported past the deadline but before any
//! such event still wins: the answer is in hand (an event loop that finds
//! the answer and the deadline timer ready in one poll may report either
//! first), and the sample it gives is exact. The caller arms its timer at
//! [`Request::next_timer`] after every event.
//! * `start` → `Racing` with the primary sent; the next hedge is due at
//!   `start + delay` if [`Request::plan`] is [`Plan::Hedge`].
//! * `on_timer` while `Racing`: past the deadline → `GaveUp` (cancel all);
//!   before the hedge is due (early wake-up, clock went backwards) → wait;
//!   otherwise attempts, in-flight cap and budget are checked, in that
//!   order, and the next hedge is sent and the one after scheduled one
//!   delay later. A budget denial ends hedging on the timer for the
//!   attempts racing then (a retry, a fresh race, is hedged again); a
//!   timer call when no hedge is due says why none is (the plan's reason,
//!   or what ended hedging).
//! * `on_commit` while `Racing` → `Won`, samples recorded, the rest
//!   cancelled; after `Won`/`GaveUp` → [`CommitOutcome::Late`]; for an
//!   attempt never sent or already failed → [`CommitOutcome::Unknown`].
//! * `on_failure` while `Racing`: [`Failure::Fatal`] → `GaveUp`;
//!   [`Failure::Retryable`] → a fresh attempt is sent now
//!   ([`FailureOutcome::SendNow`]) instead of after the delay, if the
//!   request has replacements left ([`HedgeConfig::max_retries`] in all):
//!   a *hedge* if other attempts are still in flight (hedges left — a
//!   failed hedge frees its place —, in-flight cap and budget permitting;
//!   otherwise the others race on), a *retry* if none is (no budget: it
//!   adds no concurrent load; but throttled, as gRPC does, once failures
//!   outrun answers: [`HedgeConfig::retry_throttle`], so that a backend
//!   failing fast in an outage sees one attempt a request). With no
//!   replacement left the others race on, or, with none in flight,
//!   `GaveUp`; a throttled retry is `GaveUp` too. A retried request keeps its
//!   hedges: the next one is due one delay after the retry (when the
//!   attempt that failed was a hedge, its place is freed for that one as
//!   one more replacement, if one is left). A request
//!   sends at most `1 + max_hedges + max_retries` attempts.
//! * Every event on a finished request changes nothing.

mod config;
mod in_flight;
mod machine;
mod request;
pub mod shared;
mod stats;
mod table;

pub use config::{ConfigError, HedgeConfig, MAX_HEDGES};
pub use request::{
    Attempt, AttemptSet, CommitOutcome, DelaySource, Failure, FailureOutcome, Idempotency, NoHedge,
    Plan, Request, RouteError, TimerAction,
};
pub use shared::SharedHedger;
pub use stats::HedgeStats;

use crate::budget::{Budget, HedgeBudget};
use crate::mapping::IndexMapping;
use crate::store::{CollapsingLowestStore, Store};
use crate::window::{LatencyWindow, Rotation};
use crate::{CubicMapping, FromRelativeAccuracy};
use in_flight::InFlight;
use machine::{Core, Stat};
use stats::bump;
use table::{Table, Target};

/// Where the budget lives.
#[derive(Debug)]
enum BudgetScope<B> {
    /// One budget for every target.
    Shared(B),
    /// Each target gets a drained copy of this one when it enters the table.
    PerTarget(B),
}

/// The hedge state machine for up to `T` targets keyed by `K`; see the
/// module docs.
///
/// * `K`: the caller's target id (host, endpoint index, `()` for one):
///   `Copy` and `Eq`, so that a key always finds its own slot (an `f64`
///   key would not: a NaN, unequal to itself, would take a new slot at
///   every use and evict others).
///
///   ```compile_fail
///   use tailguard::budget::Budget;
///   use tailguard::hedge::{HedgeConfig, Hedger};
///   let h = Hedger::<f64, Budget, 4>::with_budget(HedgeConfig::DEFAULT, Budget::default());
///   ```
/// * `B`: the budget, [`Budget`] (a 15 % traffic ratio) by default.
/// * `T`: how many targets keep their own latency state (default 1).
/// * `S`: the sketch store; [`CollapsingLowestStore<1024>`] (4 KiB, 1 µs to
///   10 min at α = 1 %) by default. A window holds four sketches (exact and
///   censored, two halves), about 16.5 KiB by default; the hedger holds
///   one per target plus the aggregate window, inline. It is built by
///   value, on the stack: with `T = 64` it is over 1 MiB and building it
///   takes about twice that, more than a 2 MiB thread stack (tokio's
///   workers, `std::thread::spawn`'s default) holds even when the result
///   is boxed at once: build a large table on a thread with a larger
///   stack (a [`SharedHedger`] too).
/// * `M`: the index mapping of every window, [`CubicMapping`] by default.
///   [`LogLinearMapping`](crate::LogLinearMapping) keeps every event free
///   of float arithmetic (for microcontrollers without a double-precision
///   FPU; see *Embedded* in the module docs); give it
///   `CollapsingLowestStore<2048>` at α = 1 %, or α = 2 %, for the same
///   1 µs to 10 min span.
#[derive(Debug)]
pub struct Hedger<
    K = (),
    B = Budget,
    const T: usize = 1,
    S: Store = CollapsingLowestStore<1024>,
    M: IndexMapping = CubicMapping,
> {
    config: HedgeConfig,
    /// `config.rotation()`, computed once (it takes float arithmetic).
    rotation: Rotation,
    mapping: M,
    budget: BudgetScope<B>,
    table: Table<K, S, B, M, T>,
    /// Every sample of every target (unused when `T == 1`).
    aggregate: LatencyWindow<M, S>,
    in_flight: InFlight,
    /// Retry throttling's tokens ([`HedgeConfig::retry_throttle`]).
    retry_balance: u32,
    stats: HedgeStats,
    /// Its number, kept by its requests (another hedger refuses them).
    id: u32,
}

impl Hedger {
    /// A single-target hedger with the default ratio budget.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds, or
    /// [`ConfigError::KeyRange`] when the store's buckets are too few for
    /// the configuration (see [`key_floor_ns`](Self::key_floor_ns)).
    pub fn new(config: HedgeConfig) -> Result<Self, ConfigError> {
        Self::with_budget(config, Budget::default())
    }
}

impl<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M> Hedger<K, B, T, S, M>
where
    M: IndexMapping + FromRelativeAccuracy,
{
    /// A hedger whose targets all share `budget`.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds, or
    /// [`ConfigError::KeyRange`] when the store's buckets are too few for
    /// the configuration (see [`key_floor_ns`](Self::key_floor_ns)).
    pub fn with_budget(config: HedgeConfig, budget: B) -> Result<Self, ConfigError> {
        let mapping = Self::mapping_for(&config)?;
        Self::build(config, BudgetScope::Shared(budget), mapping)
    }

    /// A hedger in which each target has a budget of its own, configured
    /// like `prototype`. A target entering the table (for the first time,
    /// or again after an eviction) gets [`HedgeBudget::drained`]: it must
    /// earn its tokens, so churn through the table cannot refill budgets.
    /// Targets without a slot (more targets than `T`; see *Targets* in the
    /// module docs) deposit into and draw from `prototype` itself, one
    /// budget for all of them.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds, or
    /// [`ConfigError::KeyRange`] when the store's buckets are too few for
    /// the configuration (see [`key_floor_ns`](Self::key_floor_ns)).
    pub fn with_budget_per_target(config: HedgeConfig, prototype: B) -> Result<Self, ConfigError> {
        let mapping = Self::mapping_for(&config)?;
        Self::build(config, BudgetScope::PerTarget(prototype), mapping)
    }

    /// The mapping of `config`'s accuracy, once `config` is valid: so that
    /// the error is the first problem `validate` finds, not the accuracy's
    /// (`build` validates again, for `with_mapping`: construction runs
    /// once).
    fn mapping_for(config: &HedgeConfig) -> Result<M, ConfigError> {
        config.validate()?;
        M::from_relative_accuracy(config.relative_accuracy)
            .map_err(|_| ConfigError::RelativeAccuracy(config.relative_accuracy))
    }
}

impl<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M: IndexMapping>
    Hedger<K, B, T, S, M>
{
    const HAS_TARGETS: () = assert!(T > 0, "a hedger needs room for at least one target");

    /// A hedger over a mapping built by the caller (the configuration's
    /// `relative_accuracy` is then only validated: the mapping's own
    /// accuracy applies), whose targets all share `budget`. E.g.
    /// `LogLinearMapping::with_bits(6, 0)`, which builds without float
    /// arithmetic.
    ///
    /// # Errors
    /// The first problem [`HedgeConfig::validate`] finds, or
    /// [`ConfigError::KeyRange`] when the store's buckets are too few for
    /// the configuration (see [`key_floor_ns`](Self::key_floor_ns)).
    pub fn with_mapping(config: HedgeConfig, budget: B, mapping: M) -> Result<Self, ConfigError> {
        Self::build(config, BudgetScope::Shared(budget), mapping)
    }

    fn build(config: HedgeConfig, budget: BudgetScope<B>, mapping: M) -> Result<Self, ConfigError> {
        let () = Self::HAS_TARGETS;
        config.validate()?;
        Self::check_key_range(&config, &mapping)?;
        let rotation = config.rotation();
        let aggregate = LatencyWindow::with_rotation(mapping, rotation, config.quantile)
            .map_err(|_| ConfigError::Quantile(config.quantile))?;
        Ok(Self {
            config,
            rotation,
            mapping,
            budget,
            table: Table::new(),
            aggregate,
            in_flight: InFlight::new(config.in_flight_lease_ns),
            retry_balance: u32::from(config.retry_throttle),
            stats: HedgeStats::default(),
            id: machine::hedger_id(),
        })
    }

    /// The smallest sample the windows key apart from the lowest bucket
    /// once an answer of [`max_sample_ns`](HedgeConfig::max_sample_ns) is
    /// in: the store's `S::CAPACITY` buckets end at that answer's, and a
    /// collapsing store folds shorter samples into its lowest. At most
    /// 1 µs, or at most what [`min_delay_ns`](HedgeConfig::min_delay_ns)
    /// keeps the delay above: a configuration whose floor is higher is
    /// refused with [`ConfigError::KeyRange`]. 947 ns at the defaults.
    ///
    /// ```
    /// use tailguard::hedge::{ConfigError, HedgeConfig, Hedger};
    /// use tailguard::{Budget, CollapsingLowestStore, CubicMapping};
    ///
    /// assert!(Hedger::new(HedgeConfig::DEFAULT)?.key_floor_ns() < 1_000);
    /// // 128 buckets of 2 % reach from 10 min down to 48 s only...
    /// type Small = Hedger<(), Budget, 1, CollapsingLowestStore<128>, CubicMapping>;
    /// let mapping = CubicMapping::new(0.01).unwrap();
    /// let refused = Small::with_mapping(HedgeConfig::DEFAULT, Budget::default(), mapping);
    /// assert!(matches!(refused, Err(ConfigError::KeyRange { .. })));
    /// // ...and from 50 ms down to 4.04 ms, under a 5 ms minimum delay.
    /// let short = HedgeConfig::DEFAULT.max_sample_ns(50_000_000).min_delay_ns(5_000_000);
    /// Small::with_mapping(short, Budget::default(), mapping)?;
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn key_floor_ns(&self) -> u64 {
        Self::floor_of(&self.mapping, self.config.max_sample_ns)
    }

    /// Refuses a store too small for `config` ([`ConfigError::KeyRange`]),
    /// comparing keys: in integer operations for a [`LogLinearMapping`],
    /// folded away for a constant configuration (the float floor is
    /// computed for the error only).
    fn check_key_range(config: &HedgeConfig, mapping: &M) -> Result<(), ConfigError> {
        let Some(top) = mapping.index_u64(config.max_sample_ns) else {
            return Ok(());
        };
        let span = i32::try_from(S::CAPACITY)
            .unwrap_or(i32::MAX)
            .saturating_sub(1);
        let low = top.saturating_sub(span);
        let needed = mapping.index_u64(config.key_floor_needed());
        if needed.is_some_and(|key| key < low) {
            return Err(ConfigError::KeyRange {
                floor_ns: Self::floor_of(mapping, config.max_sample_ns),
            });
        }
        Ok(())
    }

    /// [`key_floor_ns`](Self::key_floor_ns) of `mapping` and `max_sample_ns`.
    fn floor_of(mapping: &M, max_sample_ns: u64) -> u64 {
        let Some(top) = mapping.index_u64(max_sample_ns) else {
            return 0; // beyond the mapping's range: nothing collapses below
        };
        let span = i32::try_from(S::CAPACITY)
            .unwrap_or(i32::MAX)
            .saturating_sub(1);
        // `as` saturates: 0 below the smallest `u64`.
        mapping.lower_bound(top.saturating_sub(span)) as u64
    }

    /// Starts a request to `target` at `now`: the caller sends the primary
    /// and arms a timer at [`Request::next_timer`] if it is `Some`.
    /// [`Request::plan`] says what was decided and why.
    // Always inlined on 64-bit targets (the common path's calls cost more
    // than their code); on 32-bit ones, where flash is scarce, at the
    // compiler's choice.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    pub fn start(&mut self, target: K, now: u64, idempotency: Idempotency) -> Request<K> {
        bump(&mut self.stats.requests);
        let (index, new) = self.entry_inserted(target, now);
        // One look at the entry: note the request, read the delay, and its
        // own budget if any.
        let (own, budget) = match self.table.get_mut(index) {
            Some(entry) => {
                // A target's first request leaves its use count at zero: a
                // one-off target is the next to go, not the busy ones. One
                // slot has no choice to make: only the time is kept.
                if T == 1 {
                    entry.last_used = now;
                } else if !new {
                    entry.touch(now);
                }
                (
                    estimate(&self.config, &entry.window, now),
                    entry.budget.as_ref(),
                )
            }
            None => (None, None),
        };
        // The deposit: the shared budget, the target's own, or (no slot)
        // the one targets without a slot share.
        match &self.budget {
            BudgetScope::Shared(b) => b,
            BudgetScope::PerTarget(prototype) => budget.unwrap_or(prototype),
        }
        .on_request(now);
        let delay = match own {
            Some(d) => Some((d, DelaySource::Target)),
            None => self.fallback_delay(now),
        };
        machine::start(self, target, now, idempotency, delay)
    }

    /// What [`start`](Self::start) would decide for an idempotent request to
    /// `target` at `now`, without starting one. Changes nothing.
    pub fn plan(&self, target: &K, now: u64) -> Plan {
        machine::plan(&self.config, self.delay_at(self.table.find(target), now))
    }

    /// The hedge delay a request to `target` would get at `now` (from its
    /// window, the aggregate window or the prior), `None` in cold start.
    /// A scan of the table's `T` slots, then O(1);
    /// changes nothing.
    pub fn delay_ns(&self, target: &K, now: u64) -> Option<u64> {
        self.delay_at(self.table.find(target), now).map(|(d, _)| d)
    }

    /// The delay for the entry at `index` at `now`: its own window if warm,
    /// else the aggregate if warm, else the prior.
    fn delay_at(&self, index: Option<usize>, now: u64) -> Option<(u64, DelaySource)> {
        let own = index
            .and_then(|i| self.table.get(i))
            .and_then(|t| estimate(&self.config, &t.window, now));
        match own {
            Some(d) => Some((d, DelaySource::Target)),
            None => self.fallback_delay(now),
        }
    }

    /// The delay for a target without a warm window of its own: the
    /// aggregate window's if warm, else the prior.
    fn fallback_delay(&self, now: u64) -> Option<(u64, DelaySource)> {
        if T > 1 {
            if let Some(d) = estimate(&self.config, &self.aggregate, now) {
                return Some((d, DelaySource::Aggregate));
            }
        }
        self.config
            .prior_delay_ns
            .map(|p| (self.config.bound(p), DelaySource::Prior))
    }

    /// The table index for a use of `target` (a request, or an attempt
    /// routed there): its entry, made if it earns a slot (see *Targets*),
    /// `usize::MAX` (no entry) if it does not; and whether it is new.
    #[inline]
    fn entry_inserted(&mut self, target: K, now: u64) -> (usize, bool) {
        match self.table.find(&target) {
            Some(i) => (i, false),
            None => self.insert_entry(target, now),
        }
    }

    /// The miss of [`Self::entry_inserted`], out of line: the hit is the
    /// per-request path.
    #[cold]
    #[inline(never)]
    fn insert_entry(&mut self, target: K, now: u64) -> (usize, bool) {
        self.insert_entry_as(target, now, true)
    }

    /// The table index for a sample of `target` (a commit, which is no
    /// request): its entry, made only if the table has room (with one slot,
    /// it takes it); `usize::MAX` if it has none.
    #[inline]
    fn sample_entry(&mut self, target: K, now: u64) -> usize {
        match self.table.find(&target) {
            Some(i) => i,
            None => self.insert_entry_as(target, now, false).0,
        }
    }

    /// [`insert_entry`](Self::insert_entry) for a request, or for another
    /// use that takes a free slot only.
    #[cold]
    #[inline(never)]
    fn insert_entry_as(&mut self, target: K, now: u64, request: bool) -> (usize, bool) {
        let (mapping, rotation, quantile) = (self.mapping, self.rotation, self.config.quantile);
        let budget = &self.budget;
        let make = |key| {
            // The quantile was validated at construction: never `None`.
            let window = LatencyWindow::with_rotation(mapping, rotation, quantile).ok()?;
            let budget = match budget {
                BudgetScope::Shared(_) => None,
                BudgetScope::PerTarget(prototype) => Some(prototype.drained(now)),
            };
            Some(Target::new(key, window, now, budget))
        };
        let made = if request {
            self.table.insert(target, make)
        } else {
            self.table.insert_if_room(target, make)
        };
        match made {
            Some((index, evicted)) => {
                if evicted {
                    bump(&mut self.stats.evictions);
                }
                (index, true)
            }
            None => (usize::MAX, false),
        }
    }

    /// The caller's timer for `request` fired at `now`.
    pub fn on_timer(&mut self, request: &mut Request<K>, now: u64) -> TimerAction {
        machine::on_timer(self, request, now)
    }

    /// Takes a hedge token for a request to `target` at `now`.
    /// `attempt` of `request` gave its commit signal at `now`.
    // Always inlined on 64-bit targets (the common path's calls cost more
    // than their code); on 32-bit ones, where flash is scarce, at the
    // compiler's choice.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    pub fn on_commit(
        &mut self,
        request: &mut Request<K>,
        attempt: Attempt,
        now: u64,
    ) -> CommitOutcome {
        // Inline only the common commit (the sole primary's answer).
        if machine::is_sole_primary(request, attempt, self.id) {
            machine::commit_sole_primary(self, request, now)
        } else {
            machine::on_commit(self, request, attempt, now)
        }
    }

    /// `attempt` of `request` failed (an error, not slowness) at `now`.
    /// Failures record no latency sample. A [`Failure::Retryable`] failure
    /// sends a fresh attempt at once, within [`HedgeConfig::max_retries`]
    /// replacements — a hedge if others are in flight (budget permitting;
    /// gRPC's hedging policy does the same), a retry if none is — and a
    /// [`Failure::Fatal`] one ends the request. See the module docs.
    pub fn on_failure(
        &mut self,
        request: &mut Request<K>,
        attempt: Attempt,
        now: u64,
        failure: Failure,
    ) -> FailureOutcome {
        machine::on_failure(self, request, attempt, now, failure)
    }

    /// The caller gives `request` up at `now` (its task was cancelled, its
    /// own timeout fired): releases its in-flight hedges at once and records
    /// the attempts in flight as censored. Returns the attempts to cancel.
    /// Dropping a request without this call is safe too (see the module
    /// docs), only slower to release.
    pub fn abandon(&mut self, request: &mut Request<K>, now: u64) -> AttemptSet {
        machine::abandon(self, request, now)
    }

    /// What the hedger has done so far.
    pub fn stats(&self) -> HedgeStats {
        HedgeStats {
            leases_expired: self.in_flight.expired(),
            ..self.stats
        }
    }

    /// The counters of the budget `target` draws on: the shared one; with
    /// budgets per target, the target's own, or, for a target without a
    /// slot, the one those share (the prototype).
    pub fn budget_stats(&self, target: &K) -> crate::BudgetStats {
        let (BudgetScope::Shared(shared) | BudgetScope::PerTarget(shared)) = &self.budget;
        let own = self
            .table
            .find(target)
            .and_then(|i| self.table.get(i))
            .and_then(|t| t.budget.as_ref());
        own.unwrap_or(shared).stats()
    }

    /// The configuration.
    pub fn config(&self) -> &HedgeConfig {
        &self.config
    }

    /// The latency window of `target`, if the table holds it.
    pub fn window(&self, target: &K) -> Option<&LatencyWindow<M, S>> {
        self.table
            .find(target)
            .and_then(|i| self.table.get(i))
            .map(|t| &t.window)
    }

    /// The window of every target's samples (empty when `T == 1`: the
    /// target's own window is the same data).
    pub fn aggregate_window(&self) -> &LatencyWindow<M, S> {
        &self.aggregate
    }

    /// Hedges sent and not yet finished at `now`, across requests (those
    /// of dropped requests count until their lease runs out).
    pub fn hedges_in_flight(&self, now: u64) -> u32 {
        self.in_flight.count(now)
    }

    /// Targets in the table.
    pub fn targets(&self) -> usize {
        self.table.len()
    }

    /// Drops the targets whose latest request is more than `idle_ns` away
    /// from `now` (e.g. 10 minutes), so their slots, and their memory of
    /// latency, go to new targets. A target last used at a time far *after*
    /// `now` (a timestamp from another clock) counts as idle too. Returns
    /// how many were dropped.
    pub fn evict_idle(&mut self, now: u64, idle_ns: u64) -> usize {
        self.table.evict_idle(now, idle_ns)
    }

    /// The mapping every target's sketches use.
    pub fn mapping(&self) -> &M {
        &self.mapping
    }
}

impl<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M: IndexMapping>
    Hedger<K, B, T, S, M>
{
    /// Records one sample, exact or censored, in `target`'s window and the
    /// aggregate: whether the target's window took it, or, for a target
    /// without a slot (refused one, or evicted since its start, the table
    /// full), the aggregate. A target without a slot takes a free one (with
    /// one slot, the slot), as before its first request.
    // Always inlined on 64-bit targets (the common path's calls cost more
    // than their code); on 32-bit ones, where flash is scarce, at the
    // compiler's choice.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    fn record_into<const EXACT: bool>(&mut self, target: K, now: u64, elapsed: u64) -> bool {
        // A commit is no request: it earns no slot, but takes a free one.
        let index = self.sample_entry(target, now);
        let own = self.table.get_mut(index).map(|t| {
            let w = &mut t.window;
            if EXACT {
                w.record(now, elapsed)
            } else {
                w.record_censored(now, elapsed)
            }
            .is_ok()
        });
        let aggregate = T > 1 && {
            let w = &mut self.aggregate;
            if EXACT {
                w.record(now, elapsed)
            } else {
                w.record_censored(now, elapsed)
            }
            .is_ok()
        };
        own.unwrap_or(aggregate)
    }
}

impl<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M: IndexMapping> Core<K>
    for Hedger<K, B, T, S, M>
{
    #[inline]
    fn config(&self) -> &HedgeConfig {
        &self.config
    }

    #[inline(always)]
    fn id(&self) -> u32 {
        self.id
    }

    #[inline]
    fn in_flight_count(&self, now: u64) -> u32 {
        self.in_flight.count(now)
    }

    #[inline]
    fn in_flight_acquire(&mut self, now: u64, _cap: Option<u32>) -> bool {
        // One thread: the machine's check just before still holds.
        self.in_flight.acquire(now);
        true
    }

    #[inline]
    fn in_flight_release(&mut self, sent_at: u64) {
        self.in_flight.release(sent_at);
    }

    /// A routed attempt uses its target's slot as a start does (it may
    /// enter the table if absent, and then counts as its first use).
    fn touch_routed(&mut self, target: K, now: u64) {
        let (index, new) = self.entry_inserted(target, now);
        if let (Some(t), false) = (self.table.get_mut(index), new) {
            t.touch(now);
        }
    }

    /// Takes a hedge token for a request to `target` at `now`.
    fn acquire_token(&mut self, target: K, now: u64) -> bool {
        if let BudgetScope::Shared(b) = &self.budget {
            return b.try_acquire(now);
        }
        // Per target: its own (drained when it took its slot), or, without
        // a slot, the one targets without a slot share.
        let (BudgetScope::Shared(shared) | BudgetScope::PerTarget(shared)) = &self.budget;
        self.table
            .find(&target)
            .and_then(|i| self.table.get(i))
            .and_then(|t| t.budget.as_ref())
            .unwrap_or(shared)
            .try_acquire(now)
    }

    #[inline]
    fn record_sample(&mut self, target: K, now: u64, elapsed: u64, exact: bool) -> bool {
        if exact {
            self.record_into::<true>(target, now, elapsed)
        } else {
            self.record_into::<false>(target, now, elapsed)
        }
    }

    // Always inlined on 64-bit targets (the common path's calls cost more
    // than their code); on 32-bit ones, where flash is scarce, at the
    // compiler's choice.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    fn record_answer(&mut self, target: K, now: u64, elapsed: u64) -> bool {
        self.record_into::<true>(target, now, elapsed)
    }

    #[inline(always)]
    fn bump(&mut self, stat: Stat) {
        let s = &mut self.stats;
        bump(match stat {
            Stat::HedgesSent => &mut s.hedges_sent,
            Stat::RetriesReleased => &mut s.retries_released,
            Stat::HedgeWins => &mut s.hedge_wins,
            Stat::RetryWins => &mut s.retry_wins,
            Stat::PrimaryWins => &mut s.primary_wins,
            Stat::BudgetDenials => &mut s.budget_denials,
            Stat::ColdStarts => &mut s.cold_starts,
            Stat::AggregateDelays => &mut s.aggregate_delays,
            Stat::NotIdempotent => &mut s.not_idempotent,
            Stat::InFlightLimited => &mut s.in_flight_limited,
            Stat::GaveUp => &mut s.gave_up,
            Stat::Samples => &mut s.samples,
            Stat::CensoredSamples => &mut s.censored_samples,
            Stat::SamplesRefused => &mut s.samples_refused,
            Stat::ClockAnomalies => &mut s.clock_anomalies,
            Stat::RetriesThrottled => &mut s.retries_throttled,
        });
    }

    #[inline]
    fn set_current_delay(&mut self, delay_ns: u64) {
        self.stats.current_delay_ns = Some(delay_ns);
    }

    #[inline]
    fn retry_balance_take(&mut self) -> u32 {
        self.retry_balance = self.retry_balance.saturating_sub(1);
        self.retry_balance
    }

    #[inline(always)]
    fn retry_balance_give(&mut self) {
        if self.retry_balance < u32::from(self.config.retry_throttle) {
            self.retry_balance = self.retry_balance.wrapping_add(1); // below a u16
        }
    }
}

/// The delay a window's estimate gives at `now`, `None` while it holds
/// fewer than `min_samples` answers (exact samples: censored ones say only
/// how long attempts were *not* answered) or is idle: the cached quantile,
/// scaled and bounded.
fn estimate<M: IndexMapping, S: Store>(
    config: &HedgeConfig,
    window: &LatencyWindow<M, S>,
    now: u64,
) -> Option<u64> {
    if window.exact_count() < config.min_samples || window.is_idle_at(now) {
        return None;
    }
    window.cached_quantile().map(|q| config.delay_for(q))
}
