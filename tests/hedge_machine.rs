//! Every transition of the hedge state machine, and every out-of-order event.

use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{
    Attempt, AttemptSet, CommitOutcome, ConfigError, FailureOutcome, FailurePolicy, HedgeConfig,
    Hedger, Idempotency, NoHedge, Plan, TimerAction,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const IDEMPOTENT: Idempotency = Idempotency::Idempotent;

fn hedger(config: HedgeConfig) -> Hedger<(), Budget> {
    Hedger::with_budget(config, Budget::Unlimited).unwrap()
}

/// A hedger whose window holds `n` samples of `latency` (warm).
fn warm(config: HedgeConfig, n: u64, latency: u64) -> Hedger<(), Budget> {
    let mut h = hedger(config);
    for i in 0..n {
        let (mut r, _) = h.start((), i, IDEMPOTENT);
        assert!(matches!(
            h.on_commit(&mut r, Attempt::PRIMARY, i + latency),
            CommitOutcome::Won { .. }
        ));
    }
    h
}

fn hedge_at(plan: Plan) -> (u64, u64) {
    match plan {
        Plan::HedgeAt { at, delay_ns, .. } => (at, delay_ns),
        other => panic!("expected a hedge plan, got {other:?}"),
    }
}

#[test]
fn cold_start_does_not_hedge_and_counts_samples_not_requests() {
    let mut h = hedger(HedgeConfig::DEFAULT);
    // Requests that never answer add no samples: still cold after 100 of them.
    for i in 0..100 {
        let (mut r, plan) = h.start((), i, IDEMPOTENT);
        assert_eq!(plan, Plan::NoHedge(NoHedge::ColdStart));
        h.abandon(&mut r);
    }
    assert_eq!(h.stats().cold_starts, 100);
    assert_eq!(h.delay_ns(&()), None);
    // 19 samples: still cold; the 20th warms it.
    let mut h = warm(HedgeConfig::DEFAULT, 19, 5 * MS);
    assert_eq!(
        h.start((), 100, IDEMPOTENT).1,
        Plan::NoHedge(NoHedge::ColdStart)
    );
    let mut h2 = warm(HedgeConfig::DEFAULT, 20, 5 * MS);
    let (_, delay) = hedge_at(h2.start((), 100, IDEMPOTENT).1);
    assert!(delay.abs_diff(5 * MS) <= 5 * MS / 50, "{delay}");
    let _ = &mut h;
}

#[test]
fn prior_delay_serves_cold_start_and_is_clamped() {
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(20 * MS)
        .max_delay_ns(15 * MS);
    let mut h = hedger(config);
    let (_, plan) = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        plan,
        Plan::HedgeAt {
            at: 15 * MS,
            delay_ns: 15 * MS,
            from_prior: true
        }
    );
}

#[test]
fn delay_is_the_quantile_times_the_multiplier_clamped() {
    // p95 × 1.5 from one seed walk-through.
    let config = HedgeConfig::DEFAULT
        .quantile(0.95)
        .delay_multiplier_permille(1_500);
    let h = warm(config, 100, 10 * MS);
    let d = h.delay_ns(&()).unwrap();
    assert!(d.abs_diff(15 * MS) <= 15 * MS / 50, "{d}");
    // Never below min_delay, even when the backend is very fast.
    let h = warm(HedgeConfig::DEFAULT, 100, 10_000);
    assert_eq!(h.delay_ns(&()), Some(MS));
}

#[test]
fn not_idempotent_and_disabled_never_hedge() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let (mut r, plan) = h.start((), 100, Idempotency::NotIdempotent);
    assert_eq!(plan, Plan::NoHedge(NoHedge::NotIdempotent));
    assert_eq!(r.next_timer(), None);
    assert_eq!(
        h.on_timer(&mut r, 100 * SEC),
        TimerAction::Skip(NoHedge::AttemptsExhausted)
    );
    assert_eq!(h.stats().not_idempotent, 1);
    let mut h = warm(HedgeConfig::DEFAULT.max_hedges(0), 50, 5 * MS);
    assert_eq!(
        h.start((), 100, IDEMPOTENT).1,
        Plan::NoHedge(NoHedge::Disabled)
    );
}

#[test]
fn hedge_wins_and_the_primary_is_cancelled() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let t0 = SEC;
    let (mut r, plan) = h.start((), t0, IDEMPOTENT);
    let (at, _) = hedge_at(plan);
    assert_eq!(r.next_timer(), Some(at));
    // Early wake-up: wait.
    assert_eq!(h.on_timer(&mut r, at - 1), TimerAction::Wait { until: at });
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    assert_eq!(h.hedges_in_flight(), 1);
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
    assert_eq!(h.hedges_in_flight(), 0);
    let s = h.stats();
    assert_eq!((s.hedges_sent, s.hedge_wins, s.primary_wins), (1, 1, 50));
    // Both attempts were recorded: the winner and the censored primary.
    assert_eq!(s.samples, 52);
}

#[test]
fn primary_wins_and_nothing_is_cancelled() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let (mut r, _) = h.start((), SEC, IDEMPOTENT);
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
    assert_eq!(h.stats().hedges_sent, 0);
}

#[test]
fn double_commit_late_loser_and_unknown_attempts() {
    let mut h = warm(HedgeConfig::DEFAULT, 50, 5 * MS);
    let (mut r, plan) = h.start((), SEC, IDEMPOTENT);
    let (at, _) = hedge_at(plan);
    // An attempt that was never sent.
    assert_eq!(h.on_commit(&mut r, Attempt(1), at), CommitOutcome::Unknown);
    assert_eq!(
        h.on_commit(&mut r, Attempt(200), at),
        CommitOutcome::Unknown
    );
    assert_eq!(
        h.on_failure(&mut r, Attempt(3), at),
        FailureOutcome::Ignored
    );
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, at + MS),
        CommitOutcome::Won { .. }
    ));
    let samples = h.stats().samples;
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
        h.on_failure(&mut r, Attempt(1), at + 3 * MS),
        FailureOutcome::Ignored
    );
    assert_eq!(h.abandon(&mut r), AttemptSet::EMPTY);
    assert_eq!(h.stats().samples, samples);
    assert_eq!(h.stats().primary_wins, 51);
}

#[test]
fn multiple_hedges_are_spaced_by_the_delay() {
    let mut h = hedger(HedgeConfig::DEFAULT.prior_delay_ns(10 * MS).max_hedges(3));
    let (mut r, plan) = h.start((), 0, IDEMPOTENT);
    let (at, d) = hedge_at(plan);
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
    assert_eq!(h.hedges_in_flight(), 3);
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
    assert_eq!(h.hedges_in_flight(), 0);
}

#[test]
fn budget_denial_stops_hedging_for_the_request() {
    let mut h: Hedger = Hedger::with_budget(
        HedgeConfig::DEFAULT.prior_delay_ns(MS).max_hedges(2),
        Budget::Never,
    )
    .unwrap();
    let (mut r, plan) = h.start((), 0, IDEMPOTENT);
    let (at, _) = hedge_at(plan);
    assert_eq!(
        h.on_timer(&mut r, at),
        TimerAction::Skip(NoHedge::BudgetDenied)
    );
    assert_eq!(r.next_timer(), None);
    assert_eq!(h.stats().budget_denials, 1);
    assert_eq!(h.stats().hedges_sent, 0);
}

#[test]
fn ratio_budget_caps_hedges_at_its_share() {
    let budget = Budget::Ratio(RatioBudget::new(1_000, 5).unwrap());
    let mut h: Hedger =
        Hedger::with_budget(HedgeConfig::DEFAULT.prior_delay_ns(MS), budget).unwrap();
    // Every request wants a hedge; the backend never answers in time.
    for i in 0..1_000u64 {
        let t = i * 10 * MS;
        let (mut r, plan) = h.start((), t, IDEMPOTENT);
        if let Plan::HedgeAt { at, .. } = plan {
            let _ = h.on_timer(&mut r, at);
        }
        h.abandon(&mut r);
    }
    let s = h.stats();
    assert!(s.hedges_sent <= 100, "{s:?}");
    assert!(s.hedges_sent >= 95, "{s:?}");
    assert_eq!(s.hedges_sent + s.budget_denials, 1_000);
}

#[test]
fn in_flight_cap_defers_hedges() {
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(MS)
            .max_hedges_in_flight(1),
    );
    let (mut a, _) = h.start((), 0, IDEMPOTENT);
    let (mut b, _) = h.start((), 0, IDEMPOTENT);
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
fn deadline_gives_up_and_cancels_everything() {
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(10 * MS)
            .deadline_ns(15 * MS),
    );
    let (mut r, _) = h.start((), 0, IDEMPOTENT);
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
    assert_eq!(
        h.on_commit(&mut r, Attempt::PRIMARY, 16 * MS),
        CommitOutcome::Late
    );
    assert_eq!(h.hedges_in_flight(), 0);
    assert_eq!(h.stats().gave_up, 1);
    // A deadline before the hedge is due wins over it.
    let mut h = hedger(
        HedgeConfig::DEFAULT
            .prior_delay_ns(10 * MS)
            .deadline_ns(5 * MS),
    );
    let (r, _) = h.start((), 0, IDEMPOTENT);
    assert_eq!(r.next_timer(), Some(5 * MS));
}

#[test]
fn failures_follow_the_policy() {
    let config = HedgeConfig::DEFAULT.prior_delay_ns(MS);
    let mut h = hedger(config);
    let (mut r, _) = h.start((), 0, IDEMPOTENT);
    assert_eq!(h.on_timer(&mut r, MS), TimerAction::SendHedge(Attempt(1)));
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, 2 * MS),
        FailureOutcome::Continue
    );
    // Failed twice: ignored the second time.
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, 2 * MS),
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
            ..
        }
    ));

    // Nothing left in flight: give up.
    let (mut r, _) = h.start((), 0, IDEMPOTENT);
    assert_eq!(
        h.on_failure(&mut r, Attempt::PRIMARY, MS / 2),
        FailureOutcome::GiveUp {
            cancel: AttemptSet::EMPTY
        }
    );
    assert_eq!(h.on_timer(&mut r, MS), TimerAction::Skip(NoHedge::Finished));

    let mut h = hedger(config.failure_policy(FailurePolicy::GiveUpOnFirst));
    let (mut r, _) = h.start((), 0, IDEMPOTENT);
    assert_eq!(h.on_timer(&mut r, MS), TimerAction::SendHedge(Attempt(1)));
    match h.on_failure(&mut r, Attempt(1), 2 * MS) {
        FailureOutcome::GiveUp { cancel } => {
            assert_eq!(cancel.iter().collect::<Vec<_>>(), [Attempt(0)])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.hedges_in_flight(), 0);
}

#[test]
fn backwards_time_is_survived() {
    let mut h = hedger(HedgeConfig::DEFAULT.prior_delay_ns(MS));
    let (mut r, plan) = h.start((), 10 * SEC, IDEMPOTENT);
    let (at, _) = hedge_at(plan);
    // The timer "fires" at a time before the start.
    assert_eq!(h.on_timer(&mut r, 0), TimerAction::Wait { until: at });
    assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
    // The commit arrives with a timestamp before the hedge was sent.
    assert!(matches!(
        h.on_commit(&mut r, Attempt(1), 5),
        CommitOutcome::Won { .. }
    ));
    let s = h.stats();
    assert_eq!(s.samples, 0);
    assert_eq!(s.clock_anomalies, 2);
    // Extremes of u64 time.
    let (mut r, plan) = h.start((), u64::MAX - 1, IDEMPOTENT);
    assert_eq!(hedge_at(plan).0, u64::MAX);
    assert_eq!(
        h.on_timer(&mut r, u64::MAX),
        TimerAction::SendHedge(Attempt(1))
    );
    assert!(matches!(
        h.on_commit(&mut r, Attempt::PRIMARY, u64::MAX),
        CommitOutcome::Won { .. }
    ));
}

#[test]
fn idle_gap_returns_to_cold_start() {
    let mut h = warm(HedgeConfig::DEFAULT, 100, 5 * MS);
    assert!(matches!(
        h.start((), SEC, IDEMPOTENT).1,
        Plan::HedgeAt { .. }
    ));
    // Two rotation periods of silence empty the window.
    assert_eq!(
        h.start((), 61 * SEC, IDEMPOTENT).1,
        Plan::NoHedge(NoHedge::ColdStart)
    );
}

#[test]
fn targets_have_their_own_windows_and_the_table_evicts() {
    let mut h: Hedger<u32, Budget, 2> =
        Hedger::with_budget(HedgeConfig::DEFAULT, Budget::Unlimited).unwrap();
    for (target, latency) in [(1, 2 * MS), (2, 20 * MS)] {
        for i in 0..50 {
            let (mut r, _) = h.start(target, i, IDEMPOTENT);
            h.on_commit(&mut r, Attempt::PRIMARY, i + latency);
        }
    }
    let fast = h.delay_ns(&1).unwrap();
    let slow = h.delay_ns(&2).unwrap();
    assert!(
        fast.abs_diff(2 * MS) < MS / 10 && slow.abs_diff(20 * MS) < MS,
        "{fast} {slow}"
    );
    // A third target evicts the least recently used (target 1).
    let (_, plan) = h.start(3, 100, IDEMPOTENT);
    assert_eq!(plan, Plan::NoHedge(NoHedge::ColdStart));
    assert_eq!(h.stats().evictions, 1);
    assert_eq!(h.delay_ns(&1), None);
    assert!(h.delay_ns(&2).is_some());
    assert_eq!(h.targets(), 2);
    // Target 3 was last used at 100 ns, target 2 at 20 ms + 49 ns.
    assert_eq!(h.evict_unused_since(20 * MS), 1);
    assert!(h.window(&3).is_none());
    assert_eq!(h.targets(), 1);
}

#[test]
fn per_target_budgets_are_separate() {
    fn one_token() -> Budget {
        Budget::Ratio(RatioBudget::new(10_000, 1).unwrap())
    }
    let config = HedgeConfig::DEFAULT.prior_delay_ns(MS);
    let mut h: Hedger<u8, Budget, 4> = Hedger::with_budget_per_target(config, one_token).unwrap();
    // Target 1's request earns it one token and spends it; target 2's too.
    for target in [1u8, 2] {
        let (mut r, _) = h.start(target, 0, IDEMPOTENT);
        assert_eq!(h.on_timer(&mut r, MS), TimerAction::SendHedge(Attempt(1)));
        assert_eq!(h.budget_stats(&target).unwrap().grants, 1);
    }
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
    ];
    for (config, expected) in bad {
        assert_eq!(Hedger::new(config).unwrap_err(), expected);
        assert!(!expected.to_string().is_empty());
    }
    assert!(Hedger::new(HedgeConfig::DEFAULT.quantile(f64::NAN)).is_err());
}
