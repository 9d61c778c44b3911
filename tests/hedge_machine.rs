//! Every transition of the hedge state machine, and every out-of-order event.

use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{
    Attempt, AttemptSet, CommitOutcome, ConfigError, DelaySource, Failure, FailureOutcome,
    HedgeConfig, Hedger, Idempotency, NoHedge, Plan, Request, RouteError, TimerAction,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const IDEMPOTENT: Idempotency = Idempotency::Idempotent;

fn hedger(config: HedgeConfig) -> Hedger<(), Budget> {
    Hedger::with_budget(config, Budget::Unlimited).unwrap()
}

/// A hedger whose window holds `n` exact samples of `latency` (warm).
fn warm(config: HedgeConfig, n: u64, latency: u64) -> Hedger<(), Budget> {
    let mut h = hedger(config);
    for i in 0..n {
        let mut r = h.start((), i, IDEMPOTENT);
        assert!(matches!(
            h.on_commit(&mut r, Attempt::PRIMARY, i + latency),
            CommitOutcome::Won { .. }
        ));
    }
    h
}

/// When the hedge of a request planned to hedge is due, and its delay.
fn hedge_at<K: Copy>(request: &Request<K>) -> (u64, u64) {
    match request.plan() {
        Plan::Hedge { delay_ns, .. } => {
            let at = request.next_timer().expect("a hedge plan arms a timer");
            (at, delay_ns)
        }
        other => panic!("expected a hedge plan, got {other:?}"),
    }
}

#[test]
fn cold_start_does_not_hedge_and_counts_samples_not_requests() {
    let mut h = hedger(HedgeConfig::DEFAULT);
    // Requests that never answer (dropped without an event) add no
    // samples: still cold after 100 of them.
    for i in 0..100 {
        let r = h.start((), i, IDEMPOTENT);
        assert_eq!(r.plan(), Plan::NoHedge(NoHedge::ColdStart));
        assert_eq!(r.next_timer(), None);
        drop(r);
    }
    let s = h.stats();
    assert_eq!((s.cold_starts, s.samples, s.censored_samples), (100, 0, 0));
    assert_eq!(h.delay_ns(&(), 100), None);
    assert_eq!(h.plan(&(), 100), Plan::NoHedge(NoHedge::ColdStart));
    // 19 samples: still cold; the 20th warms it.
    let mut h = warm(HedgeConfig::DEFAULT, 19, 5 * MS);
    assert_eq!(
        h.start((), 100, IDEMPOTENT).plan(),
        Plan::NoHedge(NoHedge::ColdStart)
    );
    let mut h2 = warm(HedgeConfig::DEFAULT, 20, 5 * MS);
    assert_eq!(h2.stats().cold_starts, 20);
    let r = h2.start((), 100, IDEMPOTENT);
    let (at, delay) = hedge_at(&r);
    assert_eq!(at, 100 + delay);
    assert!(delay.abs_diff(5 * MS) <= 5 * MS / 50, "{delay}");
    assert!(matches!(
        r.plan(),
        Plan::Hedge {
            source: DelaySource::Target,
            ..
        }
    ));
    // `plan` and `delay_ns` read what `start` decides, changing nothing.
    assert_eq!(h2.plan(&(), 100), r.plan());
    assert_eq!(h2.delay_ns(&(), 100), Some(delay));
    assert_eq!(h2.stats().cold_starts, 20);
}

#[test]
fn prior_delay_serves_cold_start_and_is_clamped() {
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(20 * MS)
        .max_delay_ns(15 * MS);
    let mut h = hedger(config);
    let r = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        r.plan(),
        Plan::Hedge {
            delay_ns: 15 * MS,
            source: DelaySource::Prior
        }
    );
    assert_eq!(r.next_timer(), Some(15 * MS));
    assert_eq!(r.delay_ns(), Some(15 * MS));
    // The prior is not data: the request counts as a cold start.
    assert_eq!(h.stats().cold_starts, 1);
}

#[test]
fn delay_is_the_quantile_times_the_multiplier_clamped() {
    // p95 × 1.5 from one seed walk-through.
    let config = HedgeConfig::DEFAULT
        .quantile(0.95)
        .delay_multiplier_permille(1_500);
    let h = warm(config, 100, 10 * MS);
    let d = h.delay_ns(&(), SEC).unwrap();
    assert!(d.abs_diff(15 * MS) <= 15 * MS / 50, "{d}");
    // Never below min_delay, even when the backend is very fast.
    let h = warm(HedgeConfig::DEFAULT, 100, 10_000);
    assert_eq!(h.delay_ns(&(), SEC), Some(MS));
}

#[test]
fn not_idempotent_and_disabled_never_hedge() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let mut r = h.start((), 100, Idempotency::NotIdempotent);
    assert_eq!(r.plan(), Plan::NoHedge(NoHedge::NotIdempotent));
    assert_eq!(r.next_timer(), None);
    assert_eq!(
        h.on_timer(&mut r, 100 * SEC),
        TimerAction::Skip(NoHedge::NotIdempotent)
    );
    assert_eq!(h.stats().not_idempotent, 1);
    // Nor retried: a retryable failure of its only attempt gives it up.
    let mut r = h.start((), 200, Idempotency::NotIdempotent);
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, 300, Failure::Retryable),
        FailureOutcome::GiveUp {
            cancel: AttemptSet::EMPTY
        }
    );
    assert_eq!(h.stats().hedges_sent, 0);
    let mut h = warm(HedgeConfig::DEFAULT.max_hedges(0), 50, 5 * MS);
    assert_eq!(
        h.start((), 100, IDEMPOTENT).plan(),
        Plan::NoHedge(NoHedge::Disabled)
    );
    assert_eq!(h.plan(&(), 100), Plan::NoHedge(NoHedge::Disabled));
}

#[test]
fn hedge_wins_and_the_primary_is_cancelled() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let t0 = SEC;
    let mut r = h.start((), t0, IDEMPOTENT);
    let (at, _) = hedge_at(&r);
    // Early wake-up: wait.
    assert_eq!(h.on_timer(&mut r, at - 1), TimerAction::Wait { until: at });
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    assert_eq!(h.hedges_in_flight(at), 1);
    // max_hedges = 1: no further timer.
    assert_eq!(r.next_timer(), None);
    assert_eq!(
        h.on_timer(&mut r, at + SEC),
        TimerAction::Skip(NoHedge::AttemptsExhausted)
    );
    let out = h.on_commit(&mut r, Attempt(1), at + 2 * MS);
    assert_eq!(
        out,
        CommitOutcome::Won {
            winner: Attempt(1),
            cancel: AttemptSet::EMPTY.with(Attempt::PRIMARY),
        }
    );
    assert_eq!(r.winner(), Some(Attempt(1)));
    assert_eq!(h.hedges_in_flight(at + 2 * MS), 0);
    let s = h.stats();
    assert_eq!((s.hedges_sent, s.hedge_wins, s.primary_wins), (1, 1, 50));
    // Both attempts were recorded: the winner exactly, the cancelled
    // primary as censored ("at least delay + 2 ms").
    assert_eq!((s.samples, s.censored_samples), (51, 1));
    assert_eq!(h.window(&()).unwrap().censored_count(), 1);
}

#[test]
fn primary_wins_and_nothing_is_cancelled() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let mut r = h.start((), SEC, IDEMPOTENT);
    let out = h.on_commit(&mut r, Attempt::PRIMARY, SEC + MS);
    assert_eq!(
        out,
        CommitOutcome::Won {
            winner: Attempt::PRIMARY,
            cancel: AttemptSet::EMPTY
        }
    );
    assert_eq!(r.next_timer(), None);
    // The hedge timer firing after completion does nothing.
    assert_eq!(
        h.on_timer(&mut r, SEC + 100 * MS),
        TimerAction::Skip(NoHedge::Finished)
    );
    let s = h.stats();
    assert_eq!((s.hedges_sent, s.samples, s.censored_samples), (0, 51, 0));
}

#[test]
fn double_commit_late_loser_and_unknown_attempts() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let mut r = h.start((), SEC, IDEMPOTENT);
    let (at, _) = hedge_at(&r);
    // An attempt that was never sent.
    assert_eq!(h.on_commit(&mut r, Attempt(1), at), CommitOutcome::Unknown);
    assert_eq!(
        h.on_commit(&mut r, Attempt(200), at),
        CommitOutcome::Unknown
    );
    assert_eq!(
        h.on_failure(&mut r, Attempt(3), at, Failure::Retryable),
        FailureOutcome::Ignored
    );
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, at + MS),
        CommitOutcome::Won { .. }
    ));
    let before = h.stats();
    // The same commit again, and the loser answering after all: late, no effect.
    assert_eq!(
        h.on_commit(&mut r, Attempt::PRIMARY, at + 2 * MS),
        CommitOutcome::Late
    );
    assert_eq!(
        h.on_commit(&mut r, Attempt(1), at + 3 * MS),
        CommitOutcome::Late
    );
    assert_eq!(
        h.on_failure(&mut r, Attempt(1), at + 3 * MS, Failure::Fatal),
        FailureOutcome::Ignored
    );
    assert_eq!(h.abandon(&mut r, at + 4 * MS), AttemptSet::EMPTY);
    let after = h.stats();
    assert_eq!(after, before);
    assert_eq!((after.samples, after.censored_samples), (51, 1));
    assert_eq!(after.primary_wins, 51);
}

#[test]
fn multiple_hedges_are_spaced_by_the_delay() {
    let mut h = hedger(HedgeConfig::DEFAULT.prior_delay_ns(10 * MS).max_hedges(3));
    let mut r = h.start((), 0, IDEMPOTENT);
    let (at, d) = hedge_at(&r);
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    assert_eq!(r.next_timer(), Some(at + d));
    assert_eq!(
        h.on_timer(&mut r, at + d),
        TimerAction::SendHedge(Attempt(2))
    );
    assert_eq!(
        h.on_timer(&mut r, at + 2 * d),
        TimerAction::SendHedge(Attempt(3))
    );
    assert_eq!(r.next_timer(), None);
    assert_eq!(r.attempts_sent(), 4);
    assert_eq!(h.hedges_in_flight(at + 2 * d), 3);
    match h.on_commit(&mut r, Attempt(2), at + 2 * d + MS) {
        CommitOutcome::Won { winner, cancel } => {
            assert_eq!(winner, Attempt(2));
            assert_eq!(
                cancel.iter().collect::<Vec<_>>(),
                [Attempt(0), Attempt(1), Attempt(3)]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.hedges_in_flight(at + 2 * d + MS), 0);
    let s = h.stats();
    assert_eq!((s.samples, s.censored_samples), (1, 3));
}

#[test]
fn budget_denial_stops_hedging_for_the_request() {
    let mut h: Hedger = Hedger::with_budget(
        HedgeConfig::DEFAULT.prior_delay_ns(MS).max_hedges(2),
        Budget::Never,
    )
    .unwrap();
    let mut r = h.start((), 0, IDEMPOTENT);
    let (at, _) = hedge_at(&r);
    assert_eq!(
        h.on_timer(&mut r, at),
        TimerAction::Skip(NoHedge::BudgetDenied)
    );
    assert_eq!(r.next_timer(), None);
    assert_eq!(h.stats().budget_denials, 1);
    assert_eq!(h.stats().hedges_sent, 0);
    // A retryable failure with nothing left in flight is a retry: it adds
    // no concurrent load, so it needs no token.
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, at + MS, Failure::Retryable),
        FailureOutcome::SendNow(Attempt(1))
    );
    let s = h.stats();
    assert_eq!(
        (s.budget_denials, s.hedges_sent, s.retries_released),
        (1, 0, 1)
    );
    // Without retries, the request gives up.
    let mut h: Hedger = Hedger::with_budget(
        HedgeConfig::DEFAULT.prior_delay_ns(MS).max_retries(0),
        Budget::Never,
    )
    .unwrap();
    let mut r = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, MS, Failure::Retryable),
        FailureOutcome::GiveUp {
            cancel: AttemptSet::EMPTY
        }
    );
    assert_eq!(h.stats().gave_up, 1);
}

#[test]
fn ratio_budget_caps_hedges_at_its_share() {
    // An explicit 10 % share, 5 tokens banked at most.
    let budget = Budget::Ratio(RatioBudget::new(1_000, 5).unwrap());
    let mut h: Hedger =
        Hedger::with_budget(HedgeConfig::DEFAULT.prior_delay_ns(MS), budget).unwrap();
    // Every request wants a hedge; the backend never answers in time.
    for i in 0..1_000u64 {
        let t = i * 10 * MS;
        let mut r = h.start((), t, IDEMPOTENT);
        let (at, _) = hedge_at(&r);
        let _ = h.on_timer(&mut r, at);
        h.abandon(&mut r, at);
    }
    let s = h.stats();
    assert!(s.hedges_sent <= 100, "{s:?}");
    assert!(s.hedges_sent >= 95, "{s:?}");
    assert_eq!(s.hedges_sent + s.budget_denials, 1_000);
    assert_eq!(s.gave_up, 1_000);
}

#[test]
fn in_flight_cap_defers_hedges() {
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(MS)
            .max_hedges_in_flight(1),
    );
    let mut a = h.start((), 0, IDEMPOTENT);
    let mut b = h.start((), 0, IDEMPOTENT);
    assert_eq!(h.on_timer(&mut a, MS), TimerAction::SendHedge(Attempt(1)));
    assert_eq!(
        h.on_timer(&mut b, MS),
        TimerAction::Skip(NoHedge::InFlightLimit)
    );
    assert_eq!(b.next_timer(), Some(2 * MS));
    assert!(matches!(
        h.on_commit(&mut a, Attempt(1), 3 * MS / 2),
        CommitOutcome::Won { .. }
    ));
    assert_eq!(
        h.on_timer(&mut b, 2 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    assert_eq!(h.stats().in_flight_limited, 1);
}

#[test]
fn a_dropped_request_releases_its_hedge_within_the_lease() {
    const LEASE: u64 = 100 * MS;
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(MS)
            .max_hedges_in_flight(1)
            .in_flight_lease_ns(LEASE),
    );
    let mut a = h.start((), 0, IDEMPOTENT);
    assert_eq!(h.on_timer(&mut a, MS), TimerAction::SendHedge(Attempt(1)));
    // The caller's task is cancelled: the request is dropped, no event.
    drop(a);
    assert_eq!(h.hedges_in_flight(MS), 1);
    let mut b = h.start((), 10 * MS, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut b, 11 * MS),
        TimerAction::Skip(NoHedge::InFlightLimit)
    );
    // Still held before ¾ of the lease, released once the lease has run.
    assert_eq!(h.hedges_in_flight(MS + LEASE / 2), 1);
    assert_eq!(h.hedges_in_flight(MS + LEASE), 0);
    let at = b.next_timer().unwrap();
    let at = at.max(MS + LEASE);
    assert_eq!(h.on_timer(&mut b, at), TimerAction::SendHedge(Attempt(1)));
    assert_eq!(h.stats().leases_expired, 1);
    // Abandoning releases at once, and records the attempts as censored.
    let censored = h.stats().censored_samples;
    assert_eq!(
        h.abandon(&mut b, at + MS).iter().collect::<Vec<_>>(),
        [Attempt(0), Attempt(1)]
    );
    assert_eq!(h.hedges_in_flight(at + MS), 0);
    assert_eq!(h.stats().censored_samples, censored + 2);
    assert_eq!(h.abandon(&mut b, at + 2 * MS), AttemptSet::EMPTY);
}

#[test]
fn deadline_gives_up_and_cancels_everything() {
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(10 * MS)
            .deadline_ns(15 * MS),
    );
    let mut r = h.start((), 0, IDEMPOTENT);
    assert_eq!(r.next_timer(), Some(10 * MS));
    assert_eq!(
        h.on_timer(&mut r, 10 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    assert_eq!(r.next_timer(), Some(15 * MS));
    assert_eq!(
        h.on_timer(&mut r, 12 * MS),
        TimerAction::Wait { until: 15 * MS }
    );
    match h.on_timer(&mut r, 15 * MS) {
        TimerAction::GiveUp { cancel } => assert_eq!(cancel.len(), 2),
        other => panic!("{other:?}"),
    }
    assert!(r.is_finished());
    assert_eq!(r.next_timer(), None);
    assert_eq!(
        h.on_commit(&mut r, Attempt::PRIMARY, 16 * MS),
        CommitOutcome::Late
    );
    assert_eq!(h.hedges_in_flight(16 * MS), 0);
    let s = h.stats();
    assert_eq!(s.gave_up, 1);
    // Both attempts given up in flight: censored at 15 ms and 5 ms.
    assert_eq!((s.samples, s.censored_samples), (0, 2));
    // A deadline before the hedge is due wins over it.
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(10 * MS)
            .deadline_ns(5 * MS),
    );
    let r = h.start((), 0, IDEMPOTENT);
    assert_eq!(r.next_timer(), Some(5 * MS));
}

#[test]
fn failures_release_the_next_attempt_or_end_the_request() {
    let config = HedgeConfig::DEFAULT.prior_delay_ns(MS);
    let mut h = hedger(config);
    let mut r = h.start((), 0, IDEMPOTENT);
    assert_eq!(h.on_timer(&mut r, MS), TimerAction::SendHedge(Attempt(1)));
    // Retryable, but the only hedge is already out: wait for it.
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, 2 * MS, Failure::Retryable),
        FailureOutcome::Continue
    );
    // Failed twice: ignored the second time.
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, 2 * MS, Failure::Retryable),
        FailureOutcome::Ignored
    );
    // A commit from an attempt that reported failure is not believed.
    assert_eq!(
        h.on_commit(&mut r, Attempt::PRIMARY, 3 * MS),
        CommitOutcome::Unknown
    );
    assert!(matches!(
        h.on_commit(&mut r, Attempt(1), 3 * MS),
        CommitOutcome::Won {
            winner: Attempt(1),
            cancel: AttemptSet::EMPTY,
        }
    ));
    // A failed attempt records nothing: only the winner's sample.
    let s = h.stats();
    assert_eq!((s.samples, s.censored_samples), (1, 0));

    // A retryable failure with nothing else in flight is retried at once,
    // and the retry can still be hedged one delay later.
    let mut r = h.start((), 10 * MS, IDEMPOTENT);
    let t = 10 * MS + MS / 2;
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, t, Failure::Retryable),
        FailureOutcome::SendNow(Attempt(1))
    );
    assert_eq!(h.hedges_in_flight(t), 0, "a retry is not a hedge");
    assert_eq!(r.next_timer(), Some(t + MS));
    assert_eq!(
        h.on_timer(&mut r, t + MS),
        TimerAction::SendHedge(Attempt(2))
    );
    assert_eq!((r.hedges_sent(), r.retries_sent()), (1, 1));
    // The hedge fails while the retry still races: its place is free, so
    // another hedge races the retry at once (the second replacement).
    assert_eq!(
        h.on_failure(&mut r, Attempt(2), t + 2 * MS, Failure::Retryable),
        FailureOutcome::SendNow(Attempt(3))
    );
    // The retry fails while that hedge races: replacements exhausted (two
    // by default), so wait for the hedge.
    assert_eq!(
        h.on_failure(&mut r, Attempt(1), t + 3 * MS, Failure::Retryable),
        FailureOutcome::Continue
    );
    // The hedge fails too, nothing is in flight and nothing may replace
    // it: give up.
    assert_eq!(
        h.on_failure(&mut r, Attempt(3), t + 4 * MS, Failure::Retryable),
        FailureOutcome::GiveUp {
            cancel: AttemptSet::EMPTY
        }
    );
    let s = h.stats();
    assert_eq!((s.hedges_sent, s.retries_released), (3, 1));
    assert_eq!((r.hedges_sent(), r.retries_sent()), (2, 1));
    assert_eq!(
        h.on_timer(&mut r, 20 * MS),
        TimerAction::Skip(NoHedge::Finished)
    );
    assert_eq!(h.hedges_in_flight(16 * MS), 0);

    // A fatal failure ends the request and cancels the rest.
    let mut r = h.start((), 30 * MS, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut r, 31 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    match h.on_failure(&mut r, Attempt(1), 32 * MS, Failure::Fatal) {
        FailureOutcome::GiveUp { cancel } => {
            assert_eq!(cancel.iter().collect::<Vec<_>>(), [Attempt(0)])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.hedges_in_flight(32 * MS), 0);
    let s = h.stats();
    assert_eq!((s.gave_up, s.samples, s.censored_samples), (2, 1, 1));
}

#[test]
fn backwards_time_is_survived() {
    let mut h = hedger(HedgeConfig::DEFAULT.prior_delay_ns(MS));
    let mut r = h.start((), 10 * SEC, IDEMPOTENT);
    let (at, _) = hedge_at(&r);
    // The timer "fires" at a time before the start.
    assert_eq!(h.on_timer(&mut r, 0), TimerAction::Wait { until: at });
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    // The commit arrives with a timestamp before the hedge was sent.
    assert!(matches!(
        h.on_commit(&mut r, Attempt(1), 5),
        CommitOutcome::Won { .. }
    ));
    let s = h.stats();
    assert_eq!((s.samples, s.censored_samples), (0, 0));
    assert_eq!(s.clock_anomalies, 2);
    // Extremes of u64 time.
    let mut r = h.start((), u64::MAX - 1, IDEMPOTENT);
    assert_eq!(hedge_at(&r).0, u64::MAX);
    assert_eq!(
        h.on_timer(&mut r, u64::MAX),
        TimerAction::SendHedge(Attempt(1))
    );
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, u64::MAX),
        CommitOutcome::Won { .. }
    ));
    // An elapsed time no latency can have (another clock): refused.
    let mut r = h.start((), 0, IDEMPOTENT);
    let refused = h.stats().samples_refused;
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, u64::MAX / 2),
        CommitOutcome::Won { .. }
    ));
    assert_eq!(h.stats().samples_refused, refused + 1);
}

#[test]
fn idle_gap_returns_to_cold_start() {
    let mut h = warm(HedgeConfig::DEFAULT, 100, 5 * MS);
    assert!(matches!(
        h.start((), SEC, IDEMPOTENT).plan(),
        Plan::Hedge { .. }
    ));
    // Two rotation periods of silence empty the window.
    assert_eq!(
        h.start((), 61 * SEC, IDEMPOTENT).plan(),
        Plan::NoHedge(NoHedge::ColdStart)
    );
}

#[test]
fn targets_have_their_own_windows_and_the_table_evicts() {
    let mut h: Hedger<u32, Budget, 2> =
        Hedger::with_budget(HedgeConfig::DEFAULT.min_samples(5), Budget::Unlimited).unwrap();
    // Target 1 is used twice as often as target 2, but less recently (use
    // counts saturate at 15, so the test stays below).
    for (target, latency, n, t0) in [(1, 2 * MS, 12, 0), (2, 20 * MS, 6, 100 * MS)] {
        for i in 0..n {
            let mut r = h.start(target, t0 + i, IDEMPOTENT);
            let _ = h.on_commit(&mut r, Attempt::PRIMARY, t0 + i + latency);
        }
    }
    let now = SEC;
    let fast = h.delay_ns(&1, now).unwrap();
    let slow = h.delay_ns(&2, now).unwrap();
    assert!(
        fast.abs_diff(2 * MS) < MS / 10 && slow.abs_diff(20 * MS) < MS,
        "{fast} {slow}"
    );
    assert_eq!(
        h.plan(&1, now),
        Plan::Hedge {
            delay_ns: fast,
            source: DelaySource::Target
        }
    );
    // A third target gets no slot until it has been asked for twice as
    // often as the less used target and two more times (target 2, five
    // counted requests: a first one counts for nothing; 2 × 5 + 2 = 12):
    // eleven requests without one, then the twelfth evicts target 2.
    // Without a slot, and then with a cold window, it gets the aggregate
    // window's delay (as target 2's first 5 requests did).
    assert_eq!(h.stats().aggregate_delays, 5);
    for i in 0..12 {
        let r = h.start(3, now, IDEMPOTENT);
        assert!(
            matches!(
                r.plan(),
                Plan::Hedge {
                    source: DelaySource::Aggregate,
                    ..
                }
            ),
            "{:?}",
            r.plan()
        );
        assert_eq!(h.window(&3).is_some(), i == 11, "{i}");
        assert_eq!(h.stats().evictions, u64::from(i == 11), "{i}");
    }
    let s = h.stats();
    assert_eq!((s.evictions, s.aggregate_delays), (1, 17));
    assert!(h.window(&2).is_none());
    assert!(h.window(&1).is_some());
    assert_eq!(h.delay_ns(&1, now), Some(fast));
    // The evicted target falls back to the aggregate too.
    assert!(matches!(
        h.plan(&2, now),
        Plan::Hedge {
            source: DelaySource::Aggregate,
            ..
        }
    ));
    assert_eq!(h.aggregate_window().count(), 18);
    assert_eq!(h.targets(), 2);
    // Target 1 was last used at 99 ns, target 3 at 1 s.
    assert_eq!(h.evict_idle(now + MS, 500 * MS), 1);
    assert!(h.window(&1).is_none());
    assert!(h.window(&3).is_some());
    assert_eq!(h.targets(), 1);
    // A last use far after `now` (another clock) counts as idle too.
    assert_eq!(h.evict_idle(0, 500 * MS), 1);
    assert_eq!(h.targets(), 0);
}

#[test]
fn routed_hedges_are_recorded_under_their_replica() {
    let mut h: Hedger<u32, Budget, 4> =
        Hedger::with_budget(HedgeConfig::DEFAULT.prior_delay_ns(MS), Budget::Unlimited).unwrap();
    let mut r = h.start(1, 0, IDEMPOTENT);
    let TimerAction::SendHedge(hedge) = h.on_timer(&mut r, MS) else {
        panic!("no hedge")
    };
    assert_eq!(r.route(hedge, 2), Ok(()));
    assert_eq!(r.target_of(hedge), Some(2));
    assert!(matches!(
        h.on_commit(&mut r, hedge, 3 * MS),
        CommitOutcome::Won { .. }
    ));
    // The hedge's 2 ms is an exact sample of target 2, the primary's 3 ms
    // a censored one of target 1; the aggregate holds both.
    let (one, two) = (h.window(&1).unwrap(), h.window(&2).unwrap());
    assert_eq!((one.count(), one.censored_count()), (1, 1));
    assert_eq!((two.count(), two.censored_count()), (1, 0));
    assert_eq!(h.aggregate_window().count(), 2);
}

#[test]
fn the_primary_stays_with_the_target_it_started_for() {
    // Routing the primary would move the request's identity but not what
    // its start did (the delay, the deposit, the slot's use): its answers
    // would land in another target's window, its hedges draw on a budget
    // it never paid into. Refused; so are attempts no request sends.
    let mut h: Hedger<u32, Budget, 4> =
        Hedger::with_budget(HedgeConfig::DEFAULT.prior_delay_ns(MS), Budget::Unlimited).unwrap();
    let mut r = h.start(1, 0, IDEMPOTENT);
    assert_eq!(r.route(Attempt::PRIMARY, 2), Err(RouteError::Primary));
    assert_eq!(r.route(Attempt(8), 2), Err(RouteError::NoSuchAttempt));
    assert_eq!((r.target(), r.target_of(Attempt::PRIMARY)), (1, Some(1)));
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, 2 * MS),
        CommitOutcome::Won { .. }
    ));
    assert_eq!(h.window(&1).map(|w| w.count()), Some(1));
    assert!(h.window(&2).is_none());
}

#[test]
fn per_target_budgets_are_separate_and_start_drained() {
    // Half a token per request, one token banked at most.
    let half_a_token = Budget::Ratio(RatioBudget::new(5_000, 1).unwrap());
    let config = HedgeConfig::DEFAULT.prior_delay_ns(MS);
    let mut h: Hedger<u8, Budget, 4> =
        Hedger::with_budget_per_target(config, half_a_token).unwrap();
    // Each target's second request has earned it a token; the first not.
    for target in [1u8, 2] {
        for (i, expected) in [
            TimerAction::Skip(NoHedge::BudgetDenied),
            TimerAction::SendHedge(Attempt(1)),
        ]
        .into_iter()
        .enumerate()
        {
            let t = i as u64 * 10 * MS;
            let mut r = h.start(target, t, IDEMPOTENT);
            assert_eq!(h.on_timer(&mut r, t + MS), expected, "{target} {i}");
            h.abandon(&mut r, t + 2 * MS);
        }
        let b = h.budget_stats(&target);
        assert_eq!((b.grants, b.denials), (1, 1));
    }
    // A target that leaves the table and comes back starts drained again:
    // churn cannot refill its budget. Without a slot it reads the budget
    // targets without one share (the prototype: nothing spent yet).
    assert_eq!(h.evict_idle(10 * SEC, SEC), 2);
    let shared = h.budget_stats(&1);
    assert_eq!((shared.grants, shared.denials), (0, 0));
    let mut r = h.start(1, 10 * SEC, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut r, 10 * SEC + MS),
        TimerAction::Skip(NoHedge::BudgetDenied)
    );
}

#[test]
fn invalid_configurations_are_errors() {
    let bad = [
        (
            HedgeConfig::DEFAULT.quantile(1.0),
            ConfigError::Quantile(1.0),
        ),
        (
            HedgeConfig::DEFAULT.delay_multiplier_permille(0),
            ConfigError::ZeroMultiplier,
        ),
        (
            HedgeConfig::DEFAULT.min_delay_ns(2).max_delay_ns(1),
            ConfigError::DelayBounds {
                min_ns: 2,
                max_ns: 1,
            },
        ),
        (
            HedgeConfig::DEFAULT.min_samples(0),
            ConfigError::ZeroMinSamples,
        ),
        (
            HedgeConfig::DEFAULT.rotation_period_ns(0),
            ConfigError::ZeroPeriod,
        ),
        (
            HedgeConfig::DEFAULT.rotation_samples(0),
            ConfigError::ZeroRotationSamples,
        ),
        (
            HedgeConfig::DEFAULT.max_sample_ns(0),
            ConfigError::ZeroMaxSample,
        ),
        (
            HedgeConfig::DEFAULT.in_flight_lease_ns(0),
            ConfigError::ZeroLease,
        ),
        (
            HedgeConfig::DEFAULT.relative_accuracy(0.0),
            ConfigError::RelativeAccuracy(0.0),
        ),
        (
            HedgeConfig::DEFAULT.max_hedges(8),
            ConfigError::TooManyHedges(8),
        ),
        (
            HedgeConfig::DEFAULT.max_hedges_in_flight(0),
            ConfigError::ZeroInFlight,
        ),
        (
            HedgeConfig::DEFAULT.deadline_ns(0),
            ConfigError::ZeroDeadline,
        ),
        (
            HedgeConfig::DEFAULT.retry_throttle(1),
            ConfigError::RetryThrottle(1),
        ),
        (
            HedgeConfig::DEFAULT.retry_throttle(2),
            ConfigError::RetryThrottle(2),
        ),
    ];
    for (config, expected) in bad {
        assert_eq!(Hedger::new(config).unwrap_err(), expected);
        assert!(!expected.to_string().is_empty());
    }
    assert!(Hedger::new(HedgeConfig::DEFAULT.quantile(f64::NAN)).is_err());
}

/// Every extra attempt fails at once and the primary never answers: the
/// request sends at most `1 + max_hedges + max_retries` attempts, whatever
/// the mix (a failed hedge's place is only taken again as one of the
/// `max_retries` replacements), and with `max_retries(0)` a failed hedge
/// is not replaced.
#[test]
fn failed_attempts_are_replaced_at_most_max_retries_times() {
    for max_hedges in 0..=3u8 {
        for max_retries in 0..=3u8 {
            let config = HedgeConfig::DEFAULT
                .prior_delay_ns(5 * MS)
                .max_hedges(max_hedges)
                .max_retries(max_retries);
            let mut h = hedger(config);
            let mut r = h.start((), 0, IDEMPOTENT);
            let mut sent = 1u32;
            let mut pending = Vec::new();
            let mut now = 0;
            for _ in 0..64 {
                if let Some(a) = pending.pop() {
                    now += MS;
                    match h.on_failure(&mut r, a, now, Failure::Retryable) {
                        FailureOutcome::SendNow(next) => {
                            sent += 1;
                            pending.push(next);
                        }
                        FailureOutcome::GiveUp { .. } => break,
                        _ => {}
                    }
                    continue;
                }
                let Some(at) = r.next_timer() else { break };
                now = now.max(at);
                if let TimerAction::SendHedge(a) = h.on_timer(&mut r, now) {
                    sent += 1;
                    pending.push(a);
                }
            }
            let most = 1 + u32::from(max_hedges) + u32::from(max_retries);
            assert!(
                sent <= most,
                "max_hedges {max_hedges}, max_retries {max_retries}: {sent} attempts"
            );
            if max_hedges > 0 {
                // The hedges all went out, and each failure was replaced
                // while replacements lasted.
                assert_eq!(
                    sent, most,
                    "max_hedges {max_hedges}, max_retries {max_retries}"
                );
            }
        }
    }
}

#[test]
fn a_retry_that_wins_is_counted_as_a_retry_win() {
    let mut h = hedger(HedgeConfig::DEFAULT.prior_delay_ns(5 * MS));
    let mut r = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, MS, Failure::Retryable),
        FailureOutcome::SendNow(Attempt(1))
    );
    assert!(matches!(
        h.on_commit(&mut r, Attempt(1), 2 * MS),
        CommitOutcome::Won {
            winner: Attempt(1),
            ..
        }
    ));
    let s = h.stats();
    assert_eq!(
        (
            s.retries_released,
            s.hedges_sent,
            s.retry_wins,
            s.hedge_wins,
            s.primary_wins
        ),
        (1, 0, 1, 0, 0)
    );
}

proptest::proptest! {
    /// Whatever fails when, and whenever the timer fires, a request sends
    /// at most `1 + max_hedges + max_retries` attempts.
    #[test]
    fn no_event_sequence_sends_more_than_the_bound(
        max_hedges in 0u8..=3,
        max_retries in 0u8..=3,
        events in proptest::collection::vec((proptest::bool::ANY, 0u8..8), 0..40),
    ) {
        let config = HedgeConfig::DEFAULT
            .prior_delay_ns(5 * MS)
            .max_hedges(max_hedges)
            .max_retries(max_retries);
        let mut h = hedger(config);
        let mut r = h.start((), 0, IDEMPOTENT);
        let mut now = 0;
        for (timer, which) in events {
            now += MS;
            if timer {
                if let Some(at) = r.next_timer() {
                    now = now.max(at);
                    let _ = h.on_timer(&mut r, now);
                }
            } else {
                let a = Attempt(which % r.attempts_sent());
                let _ = h.on_failure(&mut r, a, now, Failure::Retryable);
            }
        }
        let most = 1 + u32::from(max_hedges) + u32::from(max_retries);
        proptest::prop_assert!(
            u32::from(r.attempts_sent()) <= most,
            "{} attempts, at most {most}", r.attempts_sent()
        );
    }
}

/// A cold request started at 0 under `config` with a 10 ms prior delay,
/// its hedge (attempt 1) sent on the timer.
fn hedged_at_10_ms(config: HedgeConfig) -> (Hedger<(), Budget>, Request<()>) {
    let mut h = hedger(config.prior_delay_ns(10 * MS));
    let mut r = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut r, 10 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    (h, r)
}

/// A hedge that fails with nothing else in flight is replaced by a retry,
/// and its place in `max_hedges` goes to a hedge of the retry, as one more
/// replacement, while `max_retries` has one left: a retry that straggles
/// is raced, whichever attempt failed last (a failed hedge used to keep
/// its place, and such a retry was never hedged).
#[test]
fn a_retry_after_a_failed_hedge_is_hedged_while_replacements_last() {
    let run = |max_retries: u8| {
        let (mut h, mut r) = hedged_at_10_ms(HedgeConfig::DEFAULT.max_retries(max_retries));
        // The primary fails while the hedge races: no hedge place is left.
        assert_eq!(
            h.on_failure(&mut r, Attempt::PRIMARY, 11 * MS, Failure::Retryable),
            FailureOutcome::Continue
        );
        // Then the hedge fails: a retry.
        assert_eq!(
            h.on_failure(&mut r, Attempt(1), 12 * MS, Failure::Retryable),
            FailureOutcome::SendNow(Attempt(2))
        );
        let timer = r.next_timer();
        let action = h.on_timer(&mut r, 22 * MS);
        (timer, action)
    };
    // Two replacements: the retry, and the hedge's place for its hedge.
    assert_eq!(run(2), (Some(22 * MS), TimerAction::SendHedge(Attempt(3))));
    // One: the retry alone (at most 1 + max_hedges + max_retries = 3).
    let (timer, action) = run(1);
    assert_eq!(timer, None);
    assert!(matches!(action, TimerAction::Skip(_)), "{action:?}");
}

/// A commit from an attempt that already failed is `Unknown`, as the docs
/// say, whether the request still races or is over (it was `Late` once the
/// request had finished).
#[test]
fn a_commit_from_a_failed_attempt_is_unknown_racing_or_finished() {
    let (mut h, mut r) = hedged_at_10_ms(HedgeConfig::DEFAULT);
    assert_eq!(
        h.on_failure(&mut r, Attempt(1), 11 * MS, Failure::Retryable),
        FailureOutcome::SendNow(Attempt(2))
    );
    assert_eq!(
        h.on_commit(&mut r, Attempt(1), 12 * MS),
        CommitOutcome::Unknown
    );
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, 13 * MS),
        CommitOutcome::Won { .. }
    ));
    assert_eq!(
        h.on_commit(&mut r, Attempt(1), 14 * MS),
        CommitOutcome::Unknown
    );
    assert_eq!(
        h.on_commit(&mut r, Attempt(2), 14 * MS),
        CommitOutcome::Late
    );
    assert_eq!(
        h.on_commit(&mut r, Attempt(5), 14 * MS),
        CommitOutcome::Unknown
    );
}

/// A failed hedge's place counts as one of `max_retries` replacements only
/// if an attempt takes it: refused by the budget, it is given back, and
/// the primary's retryable failure then gets its retry. Taken, it counts:
/// the same failure of the primary then gives the request up.
#[test]
fn a_freed_place_no_attempt_takes_is_no_replacement() {
    for tokens in [1u64, 2] {
        // A 10 % share: ten requests earn a token.
        let budget = Budget::Ratio(RatioBudget::fixed_cap(1_000, 10).unwrap());
        let config = HedgeConfig::DEFAULT
            .prior_delay_ns(10 * MS)
            .max_retries(1)
            .max_hedges(2);
        let mut h: Hedger<(), Budget> = Hedger::with_budget(config, budget).unwrap();
        for i in 0..10 * tokens {
            let mut r = h.start((), i, Idempotency::NotIdempotent);
            let _ = h.on_commit(&mut r, Attempt::PRIMARY, 1_000 + i);
        }
        let mut r = h.start((), MS, IDEMPOTENT);
        assert_eq!(
            h.on_timer(&mut r, 11 * MS),
            TimerAction::SendHedge(Attempt(1))
        );
        let failed = h.on_failure(&mut r, Attempt(1), 12 * MS, Failure::Retryable);
        if tokens == 1 {
            // The replacement is refused, and hedging on the timer ends.
            assert_eq!((failed, r.next_timer()), (FailureOutcome::Continue, None));
            let retried = h.on_failure(&mut r, Attempt::PRIMARY, 13 * MS, Failure::Retryable);
            assert_eq!(retried, FailureOutcome::SendNow(Attempt(2)));
        } else {
            assert_eq!(failed, FailureOutcome::SendNow(Attempt(2)));
            let _ = h.on_failure(&mut r, Attempt(2), 13 * MS, Failure::Retryable);
            let last = h.on_failure(&mut r, Attempt::PRIMARY, 14 * MS, Failure::Retryable);
            assert!(matches!(last, FailureOutcome::GiveUp { .. }), "{last:?}");
        }
    }
}

/// A timer call when no hedge is due says why none is: the plan's reason
/// for a request that never hedges, what ended hedging for one that did
/// (a budget denial, every hedge sent), as often as it is asked.
#[test]
fn a_timer_with_no_hedge_due_says_why() {
    let stray = |config: HedgeConfig, idempotency: Idempotency| {
        let mut h = hedger(config);
        let mut r = h.start((), 0, idempotency);
        assert_eq!(r.next_timer(), None);
        let reason = match r.plan() {
            Plan::NoHedge(reason) => reason,
            plan => panic!("{plan:?}"),
        };
        assert_eq!(h.on_timer(&mut r, 10 * MS), TimerAction::Skip(reason));
        reason
    };
    let prior = HedgeConfig::DEFAULT.prior_delay_ns(5 * MS);
    assert_eq!(
        stray(prior, Idempotency::NotIdempotent),
        NoHedge::NotIdempotent
    );
    assert_eq!(stray(HedgeConfig::DEFAULT, IDEMPOTENT), NoHedge::ColdStart);
    assert_eq!(stray(prior.max_hedges(0), IDEMPOTENT), NoHedge::Disabled);

    // Denied: the next calls say so too.
    let mut h: Hedger<(), Budget> =
        Hedger::with_budget(prior.max_hedges(3), Budget::Never).unwrap();
    let mut r = h.start((), 0, IDEMPOTENT);
    for at in [5, 10, 20] {
        assert_eq!(
            h.on_timer(&mut r, at * MS),
            TimerAction::Skip(NoHedge::BudgetDenied),
            "at {at} ms"
        );
    }
    assert_eq!(r.attempts_sent(), 1);
    // Every hedge sent.
    let mut h = hedger(prior);
    let mut r = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut r, 5 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    assert_eq!(
        h.on_timer(&mut r, 20 * MS),
        TimerAction::Skip(NoHedge::AttemptsExhausted)
    );
}

/// A request belongs to the hedger that started it: another hedger (of
/// either kind, whatever its configuration) does nothing with it, so it
/// can neither take its hedges out of that hedger's in-flight count nor
/// record its latencies there; its own hedger still ends it.
#[test]
fn another_hedger_refuses_a_request() {
    use tailguard::hedge::SharedHedger;
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(10 * MS)
        .max_hedges_in_flight(1);
    let mut a: Hedger<usize, Budget> = Hedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut b: Hedger<usize, Budget> = Hedger::with_budget(config, Budget::Unlimited).unwrap();
    let shared: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut r = a.start(0, 0, IDEMPOTENT);
    let mut other = b.start(0, 0, IDEMPOTENT);
    assert_eq!(
        b.on_timer(&mut other, 10 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    let (before_b, before_shared) = (b.stats(), shared.stats());
    // To `b` and to `shared`, every event on `r` is a no-op.
    assert_eq!(
        b.on_timer(&mut r, 10 * MS),
        TimerAction::Skip(NoHedge::OtherHedger)
    );
    assert_eq!(
        shared.on_timer(&mut r, 10 * MS),
        TimerAction::Skip(NoHedge::OtherHedger)
    );
    assert_eq!(
        a.on_timer(&mut r, 10 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    for attempt in [Attempt::PRIMARY, Attempt(1)] {
        assert_eq!(
            b.on_commit(&mut r, attempt, 12 * MS),
            CommitOutcome::Unknown
        );
        assert_eq!(
            shared.on_commit(&mut r, attempt, 12 * MS),
            CommitOutcome::Unknown
        );
        assert_eq!(
            b.on_failure(&mut r, attempt, 12 * MS, Failure::Retryable),
            FailureOutcome::Ignored
        );
    }
    assert_eq!(b.abandon(&mut r, 12 * MS), AttemptSet::EMPTY);
    assert_eq!(shared.abandon(&mut r, 12 * MS), AttemptSet::EMPTY);
    assert_eq!((b.stats(), shared.stats()), (before_b, before_shared));
    assert_eq!(
        b.hedges_in_flight(12 * MS),
        1,
        "b's own hedge still counted"
    );
    assert_eq!(a.hedges_in_flight(12 * MS), 1);
    assert!(!r.is_finished());
    // Its own hedger ends it.
    assert!(matches!(
        a.on_commit(&mut r, Attempt(1), 13 * MS),
        CommitOutcome::Won { .. }
    ));
    assert_eq!(a.hedges_in_flight(13 * MS), 0);
    // And the other way: a shared hedger's request to a `Hedger<usize>`.
    let mut s = shared.start(0, 20 * MS, IDEMPOTENT);
    assert_eq!(
        a.on_commit(&mut s, Attempt::PRIMARY, 21 * MS),
        CommitOutcome::Unknown
    );
    assert!(matches!(
        shared.on_commit(&mut s, Attempt::PRIMARY, 21 * MS),
        CommitOutcome::Won { .. }
    ));
}

/// Ten not-idempotent requests: a 10 % ratio budget earns a token.
fn earn_a_token(h: &mut Hedger<(), Budget>, at: u64) {
    for i in 0..10 {
        let mut r = h.start((), at + i, Idempotency::NotIdempotent);
        let _ = h.on_commit(&mut r, Attempt::PRIMARY, at + i + 1_000);
    }
}

/// A place given back (the budget refused its hedge) is the failed hedge's
/// again: when the budget earns a token later in the request, no hedge
/// goes out in it past `1 + max_hedges + max_retries` (found by a review:
/// primary, hedge, retry and a second hedge went out under a bound of 3).
#[test]
fn a_place_given_back_is_not_taken_later() {
    let budget = Budget::Ratio(RatioBudget::fixed_cap(1_000, 10).unwrap());
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(10 * MS)
        .max_retries(1)
        .max_hedges(1)
        .retry_throttle(0);
    let mut h: Hedger<(), Budget> = Hedger::with_budget(config, budget).unwrap();
    earn_a_token(&mut h, 0);
    let mut r = h.start((), MS, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut r, 11 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    let failed = h.on_failure(&mut r, Attempt(1), 12 * MS, Failure::Retryable);
    assert_eq!(failed, FailureOutcome::Continue);
    let retried = h.on_failure(&mut r, Attempt::PRIMARY, 13 * MS, Failure::Retryable);
    assert_eq!(retried, FailureOutcome::SendNow(Attempt(2)));
    earn_a_token(&mut h, 14 * MS);
    if let Some(at) = r.next_timer() {
        assert!(!matches!(h.on_timer(&mut r, at), TimerAction::SendHedge(_)));
    }
    assert_eq!(r.attempts_sent(), 3);
}

/// A place freed for a hedge of a retry that fails before that hedge is
/// due was no replacement: the retry's failure gets the second retry
/// `max_retries(2)` allows (found by a review: it was given up).
#[test]
fn a_place_no_hedge_took_before_the_race_ended_is_no_replacement() {
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(10 * MS)
        .max_retries(2)
        .max_hedges(1)
        .retry_throttle(0);
    let mut h = hedger(config);
    let mut r = h.start((), MS, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut r, 11 * MS),
        TimerAction::SendHedge(Attempt(1))
    );
    let out = h.on_failure(&mut r, Attempt::PRIMARY, 12 * MS, Failure::Retryable);
    assert_eq!(out, FailureOutcome::Continue);
    let out = h.on_failure(&mut r, Attempt(1), 13 * MS, Failure::Retryable);
    assert_eq!(out, FailureOutcome::SendNow(Attempt(2)));
    // The retry fails before its hedge (due at 23 ms) goes out.
    let out = h.on_failure(&mut r, Attempt(2), 14 * MS, Failure::Retryable);
    assert_eq!(out, FailureOutcome::SendNow(Attempt(3)));
    assert_eq!(r.attempts_sent(), 4);
}

use proptest::strategy::Strategy as _;

/// What happens to one request, step by step.
#[derive(Clone, Debug)]
enum Step {
    /// Its timer fires when due.
    Timer,
    /// Its `k`-th attempt in flight (modulo) fails.
    Fail(usize, bool),
    /// Other traffic earns the budget a token.
    Earn,
}

proptest::proptest! {
    /// However failures, timers and a budget that earns tokens mid-request
    /// interleave, a request sends at most `1 + max_hedges + max_retries`
    /// attempts, and never more than 8.
    #[test]
    fn a_request_sends_at_most_its_bound(
        max_hedges in 0u8..=3,
        max_retries in 0u8..=3,
        steps in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just(Step::Timer),
                (0usize..4, proptest::bool::weighted(0.8)).prop_map(|(k, r)| Step::Fail(k, r)),
                proptest::strategy::Just(Step::Earn),
            ],
            1..40,
        ),
    ) {
        let budget = Budget::Ratio(RatioBudget::fixed_cap(1_000, 10).unwrap());
        let config = HedgeConfig::DEFAULT
            .prior_delay_ns(10 * MS)
            .max_hedges(max_hedges)
            .max_retries(max_retries)
            .retry_throttle(0);
        let mut h: Hedger<(), Budget> = Hedger::with_budget(config, budget).unwrap();
        earn_a_token(&mut h, 0);
        let mut now = MS;
        let mut r = h.start((), now, IDEMPOTENT);
        let bound = (1 + usize::from(max_hedges) + usize::from(max_retries)).min(8);
        for step in steps {
            now += MS;
            match step {
                Step::Timer => {
                    if let Some(at) = r.next_timer() {
                        now = now.max(at);
                        let _ = h.on_timer(&mut r, now);
                    }
                }
                Step::Fail(k, retryable) => {
                    let live: Vec<Attempt> = r.in_flight().iter().collect();
                    if let Some(&a) = live.get(k % live.len().max(1)) {
                        let failure = if retryable { Failure::Retryable } else { Failure::Fatal };
                        let _ = h.on_failure(&mut r, a, now, failure);
                    }
                }
                Step::Earn => earn_a_token(&mut h, now),
            }
            proptest::prop_assert!(
                usize::from(r.attempts_sent()) <= bound,
                "{} attempts sent, bound {}", r.attempts_sent(), bound
            );
            if r.is_finished() {
                break;
            }
        }
    }
}
