//! A request handle that is safe under cancellation by construction.
//!
//! [`RequestGuard`] owns one [`Request`] of a [`SharedHedger`], a reference
//! to the hedger and a [`Clock`]. Its events read the clock themselves, and
//! dropping it while the request is still racing — a `select!` that lost, a
//! timeout, an aborted task, a panic unwinding — calls
//! [`SharedHedger::abandon`]: the hedges it had in flight stop counting
//! against [`HedgeConfig::max_hedges_in_flight`](crate::hedge::HedgeConfig::max_hedges_in_flight)
//! at once, and the attempts still in flight are recorded as *censored*
//! samples ("at least this long"), never as answers. Nothing is needed from
//! the caller. (The `no_std` core keeps its own guarantee: a dropped
//! [`Request`] releases its hedges when their lease runs out.)
//!
//! It takes a [`SharedHedger`] only: its drop must reach the hedger from
//! wherever the request is dropped, without a lock. A [`Hedger`](crate::hedge::Hedger)
//! per thread or behind your mutex gets the same guarantee from a wrapper
//! of yours whose `Drop` calls [`Hedger::abandon`](crate::hedge::Hedger::abandon)
//! while the request still races ([`Request::is_finished`] says when).
//!
//! ```
//! use std::sync::Arc;
//! use tailguard::clock::MonotonicClock;
//! use tailguard::guard::RequestGuard;
//! use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Idempotency};
//! # use tailguard::hedge::SharedHedger;
//!
//! let hedger = Arc::new(SharedHedger::new(HedgeConfig::DEFAULT)?);
//! let clock = MonotonicClock::new(); // the shared time base: every `new` clock agrees
//!
//! let mut request = RequestGuard::start(Arc::clone(&hedger), clock, 0, Idempotency::Idempotent);
//! // ... send the primary, arm a timer at `request.next_timer()` ...
//! let outcome = request.on_commit(Attempt::PRIMARY);
//! assert!(matches!(outcome, CommitOutcome::Won { .. }));
//!
//! // A request dropped mid-flight is given up on the spot.
//! let request = RequestGuard::start(Arc::clone(&hedger), clock, 0, Idempotency::Idempotent);
//! drop(request);
//! let stats = hedger.stats();
//! assert_eq!((stats.samples, stats.censored_samples, stats.gave_up), (1, 1, 1));
//! # Ok::<(), tailguard::hedge::ConfigError>(())
//! ```

use std::sync::Arc;

use crate::budget::{Budget, HedgeBudget};
use crate::clock::{Clock, MonotonicClock};
use crate::hedge::SharedHedger;
use crate::hedge::{
    Attempt, AttemptSet, CommitOutcome, Failure, FailureOutcome, Idempotency, Plan, Request,
    RouteError, TimerAction,
};
use crate::mapping::{CubicMapping, IndexMapping};
use crate::FromRelativeAccuracy;

/// How a [`RequestGuard`] (and the tower layer) holds its hedger.
///
/// * [`Arc`]: the guard clones it, so every request adds to and takes from
///   the `Arc`'s count — one cache line that every thread writes, twice a
///   request;
/// * `&'static` (a `static`, or `Box::leak` at start-up): nothing to count,
///   so threads share nothing per request but what the hedger itself
///   shares.
///
/// ```
/// use std::sync::Arc;
/// use tailguard::guard::HedgerRef;
/// use tailguard::hedge::{HedgeConfig, SharedHedger};
///
/// let counted: HedgerRef = Arc::new(SharedHedger::new(HedgeConfig::DEFAULT)?).into();
/// let leaked: &'static SharedHedger = Box::leak(Box::new(SharedHedger::new(HedgeConfig::DEFAULT)?));
/// let uncounted: HedgerRef = leaked.into();
/// assert_eq!(counted.config(), uncounted.config()); // both deref to the hedger
/// # Ok::<(), tailguard::hedge::ConfigError>(())
/// ```
#[derive(Debug)]
pub enum HedgerRef<
    B: HedgeBudget + 'static = Budget,
    const T: usize = 1,
    M: IndexMapping + 'static = CubicMapping,
> {
    /// Shared by reference counting.
    Counted(Arc<SharedHedger<B, T, M>>),
    /// Borrowed for the program's life.
    Static(&'static SharedHedger<B, T, M>),
}

impl<B: HedgeBudget + 'static, const T: usize, M: IndexMapping + 'static> Clone
    for HedgerRef<B, T, M>
{
    #[inline]
    fn clone(&self) -> Self {
        match self {
            Self::Counted(arc) => Self::Counted(Arc::clone(arc)),
            Self::Static(hedger) => Self::Static(hedger),
        }
    }
}

impl<B: HedgeBudget + 'static, const T: usize, M: IndexMapping + 'static> core::ops::Deref
    for HedgerRef<B, T, M>
{
    type Target = SharedHedger<B, T, M>;

    #[inline]
    fn deref(&self) -> &Self::Target {
        match self {
            Self::Counted(arc) => arc,
            Self::Static(hedger) => hedger,
        }
    }
}

impl<B: HedgeBudget + 'static, const T: usize, M: IndexMapping + 'static>
    From<Arc<SharedHedger<B, T, M>>> for HedgerRef<B, T, M>
{
    fn from(arc: Arc<SharedHedger<B, T, M>>) -> Self {
        Self::Counted(arc)
    }
}

impl<B: HedgeBudget + 'static, const T: usize, M: IndexMapping + 'static>
    From<&'static SharedHedger<B, T, M>> for HedgerRef<B, T, M>
{
    fn from(hedger: &'static SharedHedger<B, T, M>) -> Self {
        Self::Static(hedger)
    }
}

/// One request of a [`SharedHedger`] that gives itself up when dropped;
/// see the [module docs](self).
///
/// It is neither `Copy` nor `Clone`: one request, one owner. The events are
/// those of [`SharedHedger`], with the time read from the clock.
#[derive(Debug)]
#[must_use = "dropping the guard gives the request up at once"]
pub struct RequestGuard<
    C: Clock = MonotonicClock,
    B: HedgeBudget + 'static = Budget,
    const T: usize = 1,
    M: IndexMapping + FromRelativeAccuracy + 'static = CubicMapping,
> {
    hedger: HedgerRef<B, T, M>,
    clock: C,
    request: Request<usize>,
}

impl<
        C: Clock,
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > RequestGuard<C, B, T, M>
{
    /// Starts a request to `target` now (see [`SharedHedger::start`]): send
    /// the primary, then arm a timer at [`next_timer`](Self::next_timer).
    /// `hedger` is an `Arc` or a `&'static` (see [`HedgerRef`]).
    pub fn start(
        hedger: impl Into<HedgerRef<B, T, M>>,
        clock: C,
        target: usize,
        idempotency: Idempotency,
    ) -> Self {
        let hedger = hedger.into();
        // Built in place: a request is a few hundred bytes.
        Self {
            request: hedger.start(target, clock.now_ns(), idempotency),
            hedger,
            clock,
        }
    }

    /// The request's state.
    pub fn request(&self) -> &Request<usize> {
        &self.request
    }

    /// What was decided at the start.
    pub fn plan(&self) -> Plan {
        self.request.plan()
    }

    /// When the timer should next fire, in the clock's nanoseconds
    /// ([`Request::next_timer`]).
    pub fn next_timer(&self) -> Option<u64> {
        self.request.next_timer()
    }

    /// Says that `attempt` went to `target` ([`Request::route`]).
    ///
    /// # Errors
    /// As [`Request::route`]: the primary, or an attempt no request sends.
    pub fn route(&mut self, attempt: Attempt, target: usize) -> Result<(), RouteError> {
        self.request.route(attempt, target)
    }

    /// The timer fired ([`SharedHedger::on_timer`]).
    pub fn on_timer(&mut self) -> TimerAction {
        let now = self.clock.now_ns();
        self.hedger.on_timer(&mut self.request, now)
    }

    /// `attempt` gave its commit signal ([`SharedHedger::on_commit`]).
    #[inline]
    pub fn on_commit(&mut self, attempt: Attempt) -> CommitOutcome {
        let now = self.clock.now_ns();
        self.hedger.on_commit(&mut self.request, attempt, now)
    }

    /// `attempt` failed ([`SharedHedger::on_failure`]).
    pub fn on_failure(&mut self, attempt: Attempt, failure: Failure) -> FailureOutcome {
        let now = self.clock.now_ns();
        self.hedger
            .on_failure(&mut self.request, attempt, now, failure)
    }

    /// Gives the request up now ([`SharedHedger::abandon`]); what dropping
    /// the guard does. Returns the attempts to cancel.
    pub fn abandon(&mut self) -> AttemptSet {
        if self.request.is_finished() {
            return AttemptSet::EMPTY;
        }
        let now = self.clock.now_ns();
        self.hedger.abandon(&mut self.request, now)
    }

    /// [`abandon`](Self::abandon) for a guard dropped before its request
    /// finished.
    #[cold]
    #[inline(never)]
    fn abandon_on_drop(&mut self) {
        let _ = self.abandon();
    }

    /// No further attempt can be sent (the caller has nothing left to copy
    /// them from): the hedger releases none from here on, neither hedge
    /// nor retry, so none takes a budget token or an in-flight place.
    #[cfg(feature = "tower")]
    pub(crate) fn stop_extra_attempts(&mut self) {
        self.request.hedgeable = false;
        self.request.next_hedge_at = None;
    }

    /// The hedger.
    pub fn hedger(&self) -> &HedgerRef<B, T, M> {
        &self.hedger
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<
        C: Clock,
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > Drop for RequestGuard<C, B, T, M>
{
    #[inline]
    fn drop(&mut self) {
        // Finished requests hold nothing: no clock read, no event (and the
        // check alone inlined: the abandon is out of line).
        if !self.request.is_finished() {
            self.abandon_on_drop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hedge::{HedgeConfig, HedgeStats};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock the test sets.
    #[derive(Clone, Debug)]
    struct TestClock(Arc<AtomicU64>);

    impl TestClock {
        fn set(&self, ns: u64) {
            self.0.store(ns, Ordering::Relaxed);
        }
    }

    impl Clock for TestClock {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    const MS: u64 = 1_000_000;

    /// A hedger whose prior delay is 5 ms, with an unlimited budget and a
    /// 10 s lease (so "released at once" cannot be the lease expiring).
    fn setup() -> (Arc<SharedHedger<Budget>>, TestClock) {
        let config = HedgeConfig::DEFAULT
            .prior_delay_ns(5 * MS)
            .max_hedges(3)
            .max_retries(1)
            .in_flight_lease_ns(10_000 * MS);
        let hedger = SharedHedger::with_budget(config, Budget::Unlimited).expect("valid config");
        (
            Arc::new(hedger),
            TestClock(Arc::new(AtomicU64::new(1_000 * MS))),
        )
    }

    fn start(hedger: &Arc<SharedHedger<Budget>>, clock: &TestClock) -> RequestGuard<TestClock> {
        RequestGuard::start(
            Arc::clone(hedger),
            clock.clone(),
            0,
            Idempotency::Idempotent,
        )
    }

    #[test]
    fn a_static_hedger_works_without_a_count() {
        let hedger: &'static SharedHedger<Budget> = std::boxed::Box::leak(std::boxed::Box::new(
            SharedHedger::new(HedgeConfig::DEFAULT).unwrap(),
        ));
        let clock = TestClock(Arc::new(AtomicU64::new(0)));
        let mut guard = RequestGuard::start(hedger, clock.clone(), 0, Idempotency::Idempotent);
        assert!(matches!(guard.hedger(), HedgerRef::Static(_)));
        clock.set(2_000_000);
        assert!(matches!(
            guard.on_commit(Attempt::PRIMARY),
            CommitOutcome::Won { .. }
        ));
        let dropped = RequestGuard::start(hedger, clock, 0, Idempotency::Idempotent);
        drop(dropped);
        let stats = hedger.stats();
        assert_eq!((stats.samples, stats.gave_up), (1, 1));
    }

    /// Drops `guard` at `now` and checks the hedger afterwards: nothing in
    /// flight, no exact sample, `censored` more censored samples, one more
    /// give-up if the request was still racing.
    fn drop_and_check(guard: RequestGuard<TestClock>, now: u64, censored: u64) -> HedgeStats {
        let hedger = guard.hedger().clone();
        guard.clock().set(now);
        let racing = !guard.request().is_finished();
        let before = hedger.stats();
        drop(guard);
        let after = hedger.stats();
        assert_eq!(hedger.hedges_in_flight(now), 0, "released at once");
        assert_eq!(after.samples, before.samples, "no exact sample");
        assert_eq!(after.censored_samples, before.censored_samples + censored);
        assert_eq!(after.gave_up, before.gave_up + u64::from(racing));
        after
    }

    #[test]
    fn drop_with_only_the_primary_censors_it() {
        let (hedger, clock) = setup();
        let guard = start(&hedger, &clock);
        assert!(guard.next_timer().is_some());
        drop_and_check(guard, 1_003 * MS, 1);
    }

    #[test]
    fn drop_with_hedges_in_flight_releases_them_at_once() {
        let (hedger, clock) = setup();
        let mut guard = start(&hedger, &clock);
        for (k, at) in [1_005, 1_010].into_iter().enumerate() {
            clock.set(at * MS);
            assert!(matches!(guard.on_timer(), TimerAction::SendHedge(_)));
            assert_eq!(hedger.hedges_in_flight(at * MS), k as u32 + 1);
        }
        drop_and_check(guard, 1_012 * MS, 3);
    }

    #[test]
    fn drop_after_a_failed_hedge_censors_only_the_live_attempts() {
        let (hedger, clock) = setup();
        let mut guard = start(&hedger, &clock);
        clock.set(1_005 * MS);
        let TimerAction::SendHedge(hedge) = guard.on_timer() else {
            panic!("hedge due")
        };
        clock.set(1_006 * MS);
        // The hedge fails: another one is released at once.
        let FailureOutcome::SendNow(next) = guard.on_failure(hedge, Failure::Retryable) else {
            panic!("retryable failure with the primary racing releases a hedge")
        };
        assert_ne!(next, hedge);
        assert_eq!(hedger.hedges_in_flight(1_006 * MS), 1);
        // Primary and the second hedge are censored; the failed one is not.
        drop_and_check(guard, 1_007 * MS, 2);
    }

    #[test]
    fn drop_during_a_retry_censors_the_retry() {
        let (hedger, clock) = setup();
        let mut guard = start(&hedger, &clock);
        clock.set(1_001 * MS);
        let outcome = guard.on_failure(Attempt::PRIMARY, Failure::Retryable);
        assert!(matches!(outcome, FailureOutcome::SendNow(_)), "{outcome:?}");
        drop_and_check(guard, 1_002 * MS, 1);
    }

    #[test]
    fn drop_after_the_end_changes_nothing() {
        let (hedger, clock) = setup();
        // Won: the commit records one exact sample; the drop nothing more.
        let mut won = start(&hedger, &clock);
        clock.set(1_005 * MS);
        assert!(matches!(won.on_timer(), TimerAction::SendHedge(_)));
        clock.set(1_006 * MS);
        assert!(matches!(
            won.on_commit(Attempt::PRIMARY),
            CommitOutcome::Won { .. }
        ));
        let stats = drop_and_check(won, 1_007 * MS, 0);
        assert_eq!((stats.samples, stats.censored_samples), (1, 1));
        // Given up (fatal failure): the drop changes nothing either.
        let mut failed = start(&hedger, &clock);
        assert!(matches!(
            failed.on_failure(Attempt::PRIMARY, Failure::Fatal),
            FailureOutcome::GiveUp { .. }
        ));
        drop_and_check(failed, 1_008 * MS, 0);
        // Abandoned by hand, then dropped: once only.
        let mut abandoned = start(&hedger, &clock);
        clock.set(1_009 * MS);
        assert_eq!(
            abandoned.abandon(),
            AttemptSet::EMPTY.with(Attempt::PRIMARY)
        );
        assert_eq!(abandoned.abandon(), AttemptSet::EMPTY);
        drop_and_check(abandoned, 1_010 * MS, 0);
    }

    #[test]
    fn drop_of_a_not_idempotent_request_censors_its_one_attempt() {
        let (hedger, clock) = setup();
        let guard = RequestGuard::start(
            Arc::clone(&hedger),
            clock.clone(),
            0,
            Idempotency::NotIdempotent,
        );
        assert_eq!(guard.next_timer(), None);
        drop_and_check(guard, 1_001 * MS, 1);
    }

    #[test]
    fn drop_while_unwinding_gives_the_request_up() {
        let (hedger, clock) = setup();
        let h = Arc::clone(&hedger);
        let c = clock.clone();
        let result = std::panic::catch_unwind(move || {
            let mut guard = start(&h, &c);
            c.set(1_005 * MS);
            let _ = guard.on_timer();
            panic!("the caller's task panics mid-request");
        });
        assert!(result.is_err());
        assert_eq!(hedger.hedges_in_flight(1_005 * MS), 0);
        let stats = hedger.stats();
        assert_eq!(
            (stats.samples, stats.censored_samples, stats.gave_up),
            (0, 2, 1)
        );
    }
}
