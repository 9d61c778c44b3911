//! The shared hedger: the same answers as `Hedger` on one thread, exact
//! counts from many threads, recovery from clock jumps, expiring leases and
//! targets out of range.

use proptest::prelude::*;
use tailguard::budget::Budget;
use tailguard::hedge::{
    Attempt, CommitOutcome, DelaySource, Failure, FailureOutcome, HedgeConfig, Hedger, Idempotency,
    NoHedge, Plan, Request, SharedHedger, TimerAction,
};
use tailguard::store::CollapsingLowestStore;
use tailguard::window::LatencyWindow;
use tailguard::{CubicMapping, FromRelativeAccuracy, IndexMapping, LogLinearMapping};

const US: u64 = 1_000;
const MS: u64 = 1_000 * US;
const SEC: u64 = 1_000 * MS;
const IDEMPOTENT: Idempotency = Idempotency::Idempotent;

/// Events a run.
const EVENTS: usize = 400;

/// One event of a random run; request slots index the live requests.
#[derive(Clone, Debug)]
enum Event {
    /// Time moves by this many µs (negative: the clock steps back).
    Tick(i64),
    Start {
        target: usize,
        idempotent: bool,
    },
    Timer {
        slot: usize,
    },
    Commit {
        slot: usize,
        attempt: u8,
    },
    Fail {
        slot: usize,
        attempt: u8,
        fatal: bool,
    },
    Abandon {
        slot: usize,
    },
    Route {
        slot: usize,
        attempt: u8,
        target: usize,
    },
    /// The request is dropped without a final event.
    Drop {
        slot: usize,
    },
}

fn event(targets: usize) -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => prop_oneof![
            8 => 0i64..3_000,
            1 => -2_000_000i64..0,
            1 => 0i64..200_000_000,
        ]
        .prop_map(Event::Tick),
        4 => (0..targets, prop::bool::weighted(0.9))
            .prop_map(|(target, idempotent)| Event::Start { target, idempotent }),
        3 => (0..8usize).prop_map(|slot| Event::Timer { slot }),
        4 => (0..8usize, 0..4u8).prop_map(|(slot, attempt)| Event::Commit { slot, attempt }),
        1 => (0..8usize, 0..4u8, prop::bool::weighted(0.3))
            .prop_map(|(slot, attempt, fatal)| Event::Fail { slot, attempt, fatal }),
        1 => (0..8usize).prop_map(|slot| Event::Abandon { slot }),
        1 => (0..8usize, 0..4u8, 0..targets)
            .prop_map(|(slot, attempt, target)| Event::Route { slot, attempt, target }),
        1 => (0..8usize).prop_map(|slot| Event::Drop { slot }),
    ]
}

fn config() -> impl Strategy<Value = HedgeConfig> {
    (
        1u64..6,
        prop::option::of(5u64..60),
        0u8..3,
        prop::option::of(1u32..3),
        prop::option::of(1u64..50),
        prop::option::of(1u64..20),
        1u64..100,
        0u8..3,
    )
        .prop_map(
            |(min_samples, rotation, hedges, cap, deadline_ms, prior_ms, period_ms, retries)| {
                let mut c = HedgeConfig::DEFAULT
                    .min_samples(min_samples)
                    .max_hedges(hedges)
                    .max_retries(retries)
                    .rotation_period_ns(period_ms * MS)
                    .in_flight_lease_ns(40 * MS);
                if let Some(n) = rotation {
                    c = c.rotation_samples(n);
                }
                if let Some(n) = cap {
                    c = c.max_hedges_in_flight(n);
                }
                if let Some(d) = deadline_ms {
                    c = c.deadline_ns(d * MS);
                }
                if let Some(p) = prior_ms {
                    c = c.prior_delay_ns(p * MS);
                }
                c
            },
        )
}

/// Events with what `event` leaves out: clock steps of hours back and
/// days ahead, attempts up to the last one, time standing still.
fn wide_event(targets: usize) -> impl Strategy<Value = Event> {
    prop_oneof![
        1 => prop_oneof![
            4 => Just(0i64),
            2 => -3_600_000_000i64..=-1_000_000_000,
            2 => 1_000_000_000i64..=86_400_000_000,
        ]
        .prop_map(Event::Tick),
        9 => event(targets),
        2 => (0..8usize, 0..8u8).prop_map(|(slot, attempt)| Event::Commit { slot, attempt }),
        1 => (0..8usize, 0..8u8, any::<bool>())
            .prop_map(|(slot, attempt, fatal)| Event::Fail { slot, attempt, fatal }),
    ]
}

/// Configurations with what `config` leaves out: quantiles, multipliers,
/// delay bounds, up to `MAX_HEDGES` hedges and more retries, accuracies
/// whose 1 024 buckets still reach 1 µs, shorter sample limits.
fn wide_config() -> impl Strategy<Value = HedgeConfig> {
    (
        config(),
        prop::sample::select(vec![0.5, 0.9, 0.99, 0.999]),
        prop::sample::select(vec![1u32, 500, 1_000, 1_500, 4_000, u32::MAX]),
        (0u64..5, prop::option::of(5u64..100)),
        (0u8..=tailguard::hedge::MAX_HEDGES, 0u8..8),
        prop::sample::select(vec![0.01, 0.02, 0.05]),
        prop::sample::select(vec![600 * SEC, 5 * SEC, 20 * MS]),
    )
        .prop_map(
            |(c, q, permille, (min_ms, max_ms), (hedges, retries), alpha, max_sample)| {
                let c = c
                    .quantile(q)
                    .delay_multiplier_permille(permille)
                    .min_delay_ns(min_ms * MS)
                    .max_hedges(hedges)
                    .max_retries(retries)
                    .relative_accuracy(alpha)
                    .max_sample_ns(max_sample);
                match max_ms {
                    Some(max) => c.max_delay_ns(max * MS),
                    None => c,
                }
            },
        )
}

/// Configurations at their extremes: rotation on every sample or every
/// nanosecond, one sample to warm up, leases of a few nanoseconds, zero
/// delays, one hedge in flight. (Ticks stay below the 2⁴⁰-slot horizon
/// of tiny leases, the documented exception.)
fn extreme_config() -> impl Strategy<Value = HedgeConfig> {
    (
        config(),
        prop::sample::select(vec![1u64, 1_000, 10 * MS]),
        prop::option::of(1u64..3),
        prop::sample::select(vec![1u64, 7, 8, 1_000]),
        prop::sample::select(vec![(0, 0), (0, u64::MAX), (0, 1), (5 * MS, 5 * MS)]),
        0u8..=tailguard::hedge::MAX_HEDGES,
    )
        .prop_map(|(c, period, rotation, lease, (min, max), hedges)| {
            let c = c
                .min_samples(1)
                .rotation_period_ns(period)
                .in_flight_lease_ns(lease)
                .min_delay_ns(min)
                .max_delay_ns(max)
                .max_hedges(hedges);
            match rotation {
                Some(n) => c.rotation_samples(n),
                None => c,
            }
        })
}

/// Budgets of every kind (each hedger gets its own, alike).
fn budget_kind() -> impl Strategy<Value = u8> {
    0u8..4
}

fn make_budget(kind: u8) -> Budget {
    match kind {
        0 => Budget::default(),
        1 => Budget::Unlimited,
        2 => Budget::Never,
        _ => Budget::TokenBucket(tailguard::TokenBucket::new(50, 3).unwrap()),
    }
}

/// Drives a `Hedger<usize, Budget, T, _, M>` and a
/// `SharedHedger<Budget, T, M>` with the same events and asserts they
/// answer alike at every step.
fn run_both<const T: usize, M: IndexMapping + FromRelativeAccuracy>(
    config: HedgeConfig,
    events: &[Event],
) {
    run_both_from::<T, M>(config, Budget::default, 10 * SEC, events);
}

/// [`run_both`] with budgets made by `budget` and the clock starting at
/// `start`.
fn run_both_from<const T: usize, M: IndexMapping + FromRelativeAccuracy>(
    config: HedgeConfig,
    budget: impl Fn() -> Budget,
    start: u64,
    events: &[Event],
) {
    // Every sample and deposit published at once: the same decisions.
    run_both_batched::<T, M>(config, budget, start, Some(1), 0, events);
}

/// [`run_both_from`] with the shared hedger's batch `batch` (`None`: the
/// default) and the clock moved `gap_ns` before every event but a tick.
/// With batches, deposits wait in the lane: the budgets' counts are not
/// compared (the hedges they grant are).
fn run_both_batched<const T: usize, M: IndexMapping + FromRelativeAccuracy>(
    config: HedgeConfig,
    budget: impl Fn() -> Budget,
    start: u64,
    batch: Option<usize>,
    gap_ns: u64,
    events: &[Event],
) {
    let mut plain: Hedger<usize, Budget, T, CollapsingLowestStore<1024>, M> =
        Hedger::with_budget(config, budget()).unwrap();
    let mut shared: SharedHedger<Budget, T, M> =
        SharedHedger::with_budget(config, budget()).unwrap();
    if let Some(batch) = batch {
        shared = shared.with_batch(batch);
    }
    let mut live: Vec<(Request<usize>, Request<usize>)> = Vec::new();
    // Multiples of 1 µs from `start`: elapsed times are 0 or within the
    // shared key range.
    let mut now = start;
    for (step, e) in events.iter().enumerate() {
        let slot = |s: usize, n: usize| (n > 0).then(|| s % n);
        if !matches!(e, Event::Tick(_)) {
            now = now.saturating_add(gap_ns);
        }
        match *e {
            Event::Tick(us) => {
                now = now.saturating_add_signed(us.saturating_mul(US as i64));
            }
            Event::Start { target, idempotent } => {
                let idem = if idempotent {
                    IDEMPOTENT
                } else {
                    Idempotency::NotIdempotent
                };
                let a = plain.start(target, now, idem);
                let b = shared.start(target, now, idem);
                assert_eq!(a.plan(), b.plan(), "step {step}");
                assert_eq!(a.next_timer(), b.next_timer(), "step {step}");
                if live.len() < 8 {
                    live.push((a, b));
                }
            }
            Event::Timer { slot: s } => {
                if let Some(i) = slot(s, live.len()) {
                    let (a, b) = &mut live[i];
                    assert_eq!(
                        plain.on_timer(a, now),
                        shared.on_timer(b, now),
                        "step {step}"
                    );
                }
            }
            Event::Commit { slot: s, attempt } => {
                if let Some(i) = slot(s, live.len()) {
                    let (a, b) = &mut live[i];
                    let x = Attempt(attempt);
                    assert_eq!(
                        plain.on_commit(a, x, now),
                        shared.on_commit(b, x, now),
                        "step {step}"
                    );
                }
            }
            Event::Fail {
                slot: s,
                attempt,
                fatal,
            } => {
                if let Some(i) = slot(s, live.len()) {
                    let (a, b) = &mut live[i];
                    let x = Attempt(attempt);
                    let f = if fatal {
                        Failure::Fatal
                    } else {
                        Failure::Retryable
                    };
                    assert_eq!(
                        plain.on_failure(a, x, now, f),
                        shared.on_failure(b, x, now, f),
                        "step {step}"
                    );
                }
            }
            Event::Abandon { slot: s } => {
                if let Some(i) = slot(s, live.len()) {
                    let (a, b) = &mut live[i];
                    assert_eq!(plain.abandon(a, now), shared.abandon(b, now), "step {step}");
                }
            }
            Event::Route {
                slot: s,
                attempt,
                target,
            } => {
                if let Some(i) = slot(s, live.len()) {
                    let (a, b) = &mut live[i];
                    let routed = a.route(Attempt(attempt), target);
                    assert_eq!(routed, b.route(Attempt(attempt), target));
                }
            }
            Event::Drop { slot: s } => {
                if let Some(i) = slot(s, live.len()) {
                    let _dropped = live.swap_remove(i);
                }
            }
        }
        for (a, b) in &live {
            assert_eq!(a.next_timer(), b.next_timer(), "step {step}");
            assert_eq!(a.is_finished(), b.is_finished(), "step {step}");
        }
        live.retain(|(a, _)| !a.is_finished());
        assert_eq!(plain.stats(), shared.stats(), "step {step}");
        if batch == Some(1) {
            assert_eq!(plain.budget_stats(&0), shared.budget_stats(), "step {step}");
        }
        assert_eq!(
            plain.hedges_in_flight(now),
            shared.hedges_in_flight(now),
            "step {step}"
        );
        for t in 0..T {
            assert_eq!(
                plain.plan(&t, now),
                shared.plan(t, now),
                "step {step}, target {t}"
            );
            assert_eq!(
                plain.delay_ns(&t, now),
                shared.delay_ns(t, now),
                "step {step}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // Under Miri only the multi-thread test runs: the single-threaded ones
    // hold no unsafe code and no race for it to find, at minutes each.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn one_thread_answers_as_the_hedger_does(
        config in config(),
        events in prop::collection::vec(event(1), 1..EVENTS),
    ) {
        run_both::<1, CubicMapping>(config, &events);
    }

    /// The integer mapping, at α = 2 % (1 024 buckets span 2³², 140 ns to
    /// 10 min, in both hedgers).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn one_thread_answers_as_the_hedger_does_log_linear(
        config in config(),
        events in prop::collection::vec(event(2), 1..400),
    ) {
        run_both::<2, LogLinearMapping>(config.relative_accuracy(0.02), &events);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn one_thread_answers_as_the_hedger_does_with_targets(
        config in config(),
        events in prop::collection::vec(event(3), 1..EVENTS),
    ) {
        run_both::<3, CubicMapping>(config, &events);
    }

    /// The default batch on a thread whose events come 1 ms or more apart:
    /// it publishes every event's samples as they come (a commit's losers
    /// with its winner), so it answers as `Hedger` does.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_slow_thread_answers_as_the_hedger_does_with_the_default_batch(
        config in config(),
        budget in budget_kind(),
        events in prop::collection::vec(event(2), 1..EVENTS),
    ) {
        run_both_batched::<2, CubicMapping>(
            config,
            || make_budget(budget),
            10 * SEC,
            None,
            MS,
            &events,
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Wider configurations and events, every budget kind, and clocks that
    /// start at 0 or near `u64::MAX` (saturating ticks pin time there).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn one_thread_answers_as_the_hedger_does_in_every_configuration(
        config in wide_config(),
        budget in budget_kind(),
        start in prop::sample::select(vec![0, 10 * SEC, u64::MAX - 100 * SEC, u64::MAX]),
        events in prop::collection::vec(wide_event(3), 1..EVENTS),
    ) {
        run_both_from::<3, CubicMapping>(config, || make_budget(budget), start, &events);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn one_thread_answers_as_the_hedger_does_at_the_extremes(
        config in extreme_config(),
        budget in budget_kind(),
        events in prop::collection::vec(event(2), 1..EVENTS),
    ) {
        run_both_from::<2, CubicMapping>(config, || make_budget(budget), 10 * SEC, &events);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn one_thread_answers_as_the_hedger_does_in_every_configuration_one_target(
        config in wide_config(),
        budget in budget_kind(),
        events in prop::collection::vec(wide_event(1), 1..EVENTS),
    ) {
        run_both_from::<1, CubicMapping>(config, || make_budget(budget), 10 * SEC, &events);
    }
}

/// One step of a batched run: requests start, answer or are given up (no
/// timer, so the two hedgers' delays cannot make the runs differ), time
/// moves, or the shared hedger publishes.
#[derive(Clone, Debug)]
enum Step {
    Tick(u64),
    /// The clock steps back this many ms...
    Back(u64),
    /// ...and returns to just after the latest time so far.
    Return,
    /// This many requests to target 0, 1 µs apart, each committed at once
    /// (a run of timestamps: on a stepped-back clock, a stale run).
    Burst(u64),
    Start(usize),
    Commit(usize),
    Abandon(usize),
    Flush,
}

fn step(targets: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop_oneof![0u64..200, 0u64..20_000].prop_map(Step::Tick),
        1 => prop_oneof![0u64..100, 0u64..1_000_000].prop_map(Step::Back),
        1 => Just(Step::Return),
        1 => (1u64..40).prop_map(Step::Burst),
        4 => (0..targets).prop_map(Step::Start),
        4 => any::<usize>().prop_map(Step::Commit),
        1 => any::<usize>().prop_map(Step::Abandon),
        1 => Just(Step::Flush),
    ]
}

/// Drives a `Hedger` and a batching `SharedHedger` with the same steps. A
/// lane replays its samples in the order they came, each at its own time:
/// after every flush the windows (hence delays and plans) are the ones
/// the hedger has, and counters always match.
///
/// Run with `std` only (CI's `--features tower` stage): without it a
/// thread is known by its stack's address at megabyte granularity, and a
/// thread whose calls straddle a megabyte boundary (at random, with the
/// address space's layout: a quarter of runs here) fills two lanes, whose
/// batches publish in another order than the calls came. Counts stay
/// exact; the windows end with the same samples, but a refresh may have
/// seen another prefix of them, so delays can differ until the next one.
fn run_batched<const T: usize>(config: HedgeConfig, batch: usize, steps: &[Step]) {
    let mut plain: Hedger<usize, Budget, T> =
        Hedger::with_budget(config, Budget::Unlimited).unwrap();
    let shared: SharedHedger<Budget, T> = SharedHedger::with_budget(config, Budget::Unlimited)
        .unwrap()
        .with_batch(batch);
    assert_eq!(shared.batch(), batch);
    let mut live: Vec<(Request<usize>, Request<usize>)> = Vec::new();
    let mut now = 10_000 * SEC;
    let mut latest = now;
    for (i, s) in steps.iter().enumerate() {
        latest = latest.max(now);
        match *s {
            Step::Tick(us) => now += us * US,
            Step::Back(ms) => now = now.saturating_sub(ms * MS),
            Step::Return => now = latest + US,
            Step::Burst(n) => {
                for _ in 0..n {
                    now += US;
                    let mut a = plain.start(0, now, IDEMPOTENT);
                    let mut b = shared.start(0, now, IDEMPOTENT);
                    let x = plain.on_commit(&mut a, Attempt::PRIMARY, now);
                    assert_eq!(
                        x,
                        shared.on_commit(&mut b, Attempt::PRIMARY, now),
                        "step {i}"
                    );
                }
            }
            Step::Start(target) => {
                let a = plain.start(target, now, IDEMPOTENT);
                let b = shared.start(target, now, IDEMPOTENT);
                if live.len() < 16 {
                    live.push((a, b));
                }
            }
            Step::Commit(k) | Step::Abandon(k) if !live.is_empty() => {
                let (mut a, mut b) = live.swap_remove(k % live.len());
                if matches!(s, Step::Commit(_)) {
                    let x = plain.on_commit(&mut a, Attempt::PRIMARY, now);
                    assert_eq!(
                        x,
                        shared.on_commit(&mut b, Attempt::PRIMARY, now),
                        "step {i}"
                    );
                } else {
                    assert_eq!(
                        plain.abandon(&mut a, now),
                        shared.abandon(&mut b, now),
                        "step {i}"
                    );
                }
            }
            Step::Commit(_) | Step::Abandon(_) => {}
            Step::Flush => {
                shared.flush(now);
                for t in 0..T {
                    assert_eq!(
                        plain.delay_ns(&t, now),
                        shared.delay_ns(t, now),
                        "step {i}, target {t}"
                    );
                    assert_eq!(
                        plain.plan(&t, now),
                        shared.plan(t, now),
                        "step {i}, target {t}"
                    );
                }
            }
        }
        let (p, q) = (plain.stats(), shared.stats());
        assert_eq!(
            (
                p.requests,
                p.samples,
                p.censored_samples,
                p.gave_up,
                p.primary_wins
            ),
            (
                q.requests,
                q.samples,
                q.censored_samples,
                q.gave_up,
                q.primary_wins
            ),
            "step {i}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    #[cfg_attr(miri, ignore)]
    #[cfg_attr(not(feature = "std"), ignore = "a thread's lane follows its stack address without std")]
    fn batches_replay_to_the_hedgers_windows(
        config in config(),
        batch in 2usize..=64,
        steps in prop::collection::vec(step(1), 1..600),
    ) {
        run_batched::<1>(config, batch, &steps);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    #[cfg_attr(not(feature = "std"), ignore = "a thread's lane follows its stack address without std")]
    fn batches_replay_to_the_hedgers_windows_with_targets(
        config in config(),
        batch in 2usize..=64,
        steps in prop::collection::vec(step(3), 1..600),
    ) {
        run_batched::<3>(config, batch, &steps);
    }
}

// Without `std` a thread is known by its stack's address at megabyte
// granularity, which Miri's allocator moves from call to call: the burst's
// samples then land in several lanes, and none fills a batch.
#[test]
#[cfg_attr(
    all(miri, not(feature = "std")),
    ignore = "lanes follow stack addresses, which Miri moves between calls"
)]
fn a_burst_is_published_in_batches_and_a_trickle_at_once() {
    let config = HedgeConfig::DEFAULT;
    let mut plain: Hedger<usize, Budget, 1> =
        Hedger::with_budget(config, Budget::Unlimited).unwrap();
    let shared: SharedHedger<Budget, 1> =
        SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let batch = shared.batch();
    assert_eq!(batch, 64);
    let answer = |now: u64, latency: u64, plain: &mut Hedger<usize, Budget, 1>| {
        let mut a = plain.start(0, now, IDEMPOTENT);
        let mut b = shared.start(0, now, IDEMPOTENT);
        let _ = plain.on_commit(&mut a, Attempt::PRIMARY, now + latency);
        let _ = shared.on_commit(&mut b, Attempt::PRIMARY, now + latency);
    };
    // A trickle, 10 ms apart (warming up, then warm): each sample at once.
    let mut now = SEC;
    for i in 0..40 {
        answer(now, (5 + i % 3) * MS, &mut plain);
        now += 10 * MS;
        assert_eq!(
            plain.delay_ns(&0, now),
            shared.delay_ns(0, now),
            "sample {i}"
        );
    }
    // A burst of slow answers 1 µs apart. The first is published at once
    // (the lane last published 50 ms before); after it, the lane holds up
    // to a batch before it publishes, so the shared delay lags...
    answer(now, 50 * MS, &mut plain);
    now += US;
    assert_eq!(plain.delay_ns(&0, now), shared.delay_ns(0, now));
    let before = shared.delay_ns(0, now);
    for _ in 0..batch - 1 {
        answer(now, 50 * MS, &mut plain);
        now += US;
    }
    assert_ne!(plain.delay_ns(&0, now), before);
    assert_eq!(shared.delay_ns(0, now), before);
    // ...and the batch's last publishes it: the same windows again.
    answer(now, 50 * MS, &mut plain);
    assert_eq!(plain.delay_ns(&0, now), shared.delay_ns(0, now));
    // Counters match, but for the delay the last request got (before the
    // batch was published).
    let mut stats = shared.stats();
    stats.current_delay_ns = plain.stats().current_delay_ns;
    assert_eq!(plain.stats(), stats);
}

/// A thread that goes quiet with a batch in progress (it exits, or parks)
/// leaves samples in its lane: the other threads' publications take them
/// out, in their own time order, before they go stale. (Before, they
/// waited for a thread taking the lane over, or for the parked one, and
/// then, minutes later, set the delay to a burst long gone: 200 ms against
/// the 2 ms every recent answer took, for two rotation periods.)
#[test]
#[cfg_attr(
    all(miri, not(feature = "std")),
    ignore = "lanes follow stack addresses, which Miri moves between calls"
)]
fn a_quiet_thread_s_batch_does_not_come_back_later() {
    let config = HedgeConfig::DEFAULT;
    let mut plain: Hedger<usize, Budget, 1> =
        Hedger::with_budget(config, Budget::Unlimited).unwrap();
    let shared: SharedHedger<Budget, 1> =
        SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let one = |h: &SharedHedger<Budget, 1>, now: u64, latency: u64| {
        let mut r = h.start(0, now, IDEMPOTENT);
        let _ = h.on_commit(&mut r, Attempt::PRIMARY, now + latency);
    };
    let one_plain = |h: &mut Hedger<usize, Budget, 1>, now: u64, latency: u64| {
        let mut r = h.start(0, now, IDEMPOTENT);
        let _ = h.on_commit(&mut r, Attempt::PRIMARY, now + latency);
    };
    for i in 0..100 {
        one(&shared, i * 10 * MS, 2 * MS);
        one_plain(&mut plain, i * 10 * MS, 2 * MS);
    }
    // A burst at 1 s: threads record 50 slow answers each within 1 ms and
    // exit, and one parks with 40 of its own until much later.
    let threads = if cfg!(miri) { 2 } else { 7 };
    let (wake, parked) = std::sync::mpsc::channel::<u64>();
    let (said, heard) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let shared = &shared;
        scope.spawn(move || {
            for i in 0..40 {
                one(shared, SEC + i * 10 * US, 300 * MS);
            }
            said.send(()).unwrap();
            let now = parked.recv().unwrap();
            one(shared, now, 2 * MS);
            said.send(()).unwrap();
        });
        heard.recv().unwrap();
        std::thread::scope(|burst| {
            for k in 0..threads {
                burst.spawn(move || {
                    for i in 0..50 {
                        one(shared, SEC + k * US + i * 10 * US, 200 * MS);
                    }
                });
            }
        });
        for i in 0..40 {
            one_plain(&mut plain, SEC + i * 10 * US, 300 * MS);
        }
        for k in 0..threads {
            for i in 0..50 {
                one_plain(&mut plain, SEC + k * US + i * 10 * US, 200 * MS);
            }
        }
        // Five minutes later, 20 answers a second of 2 ms for a minute.
        let mut now = 300 * SEC;
        while now < 360 * SEC {
            one(shared, now, 2 * MS);
            one_plain(&mut plain, now, 2 * MS);
            assert_eq!(shared.delay_ns(0, now), plain.delay_ns(&0, now), "at {now}");
            now += 50 * MS;
        }
        // The parked thread wakes, and threads spawned for one request
        // each take the burst's lanes over: nothing old comes back.
        wake.send(now).unwrap();
        heard.recv().unwrap();
        one_plain(&mut plain, now, 2 * MS);
        for k in 0..threads {
            let at = now + (k + 1) * 50 * MS;
            std::thread::scope(|s| {
                s.spawn(|| one(shared, at, 2 * MS));
            });
            one_plain(&mut plain, at, 2 * MS);
            assert_eq!(shared.delay_ns(0, at), plain.delay_ns(&0, at), "at {at}");
        }
        let end = now + (threads + 1) * 50 * MS;
        shared.flush(end);
        assert_eq!(shared.delay_ns(0, end), plain.delay_ns(&0, end));
        assert_eq!(shared.delay_ns(0, end), Some(2 * MS));
    });
}

/// Warm, quick single-thread requests: start, commit after `latency`.
fn commit_all(h: &SharedHedger<Budget, 2>, target: usize, from: u64, n: u64, latency: u64) {
    for i in 0..n {
        let now = from + i * MS;
        let mut r = h.start(target, now, IDEMPOTENT);
        assert!(matches!(
            h.on_commit(&mut r, Attempt::PRIMARY, now + latency),
            CommitOutcome::Won { .. }
        ));
    }
}

#[test]
fn counts_are_exact_from_many_threads() {
    let (threads, per) = if cfg!(miri) {
        (2u64, 12u64)
    } else {
        (4, 4_000)
    };
    exact_counts(threads, per);
}

/// Twice as many threads as lanes: lanes are shared and taken over while
/// their threads still use them, and every count stays exact.
#[test]
#[cfg_attr(miri, ignore)] // sixteen threads: hours under Miri
fn counts_are_exact_with_more_threads_than_lanes() {
    exact_counts(16, 1_500);
}

/// `threads` threads send `per` requests each to two targets, a third of
/// them hedged; the hedger's and the budget's counts must be exact.
fn exact_counts(threads: u64, per: u64) {
    let config = HedgeConfig::DEFAULT.prior_delay_ns(MS).min_samples(5);
    let h: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, Budget::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..threads {
            let h = &h;
            s.spawn(move || {
                for i in 0..per {
                    // Interleaved clocks a little apart, as threads read them.
                    let now = SEC + i * 100 * US + t * 7 * US;
                    let target = (i % 2) as usize;
                    let mut r = h.start(target, now, IDEMPOTENT);
                    // Every third request waits for its hedge timer, and
                    // its hedge (if the budget grants one) wins.
                    let mut done = now + 2 * MS;
                    let mut winner = Attempt::PRIMARY;
                    if let Some(at) = r.next_timer().filter(|_| i % 3 == 0) {
                        if let TimerAction::SendHedge(hedge) = h.on_timer(&mut r, at) {
                            winner = hedge;
                        }
                        done = at + MS;
                    }
                    assert!(matches!(
                        h.on_commit(&mut r, winner, done),
                        CommitOutcome::Won { .. }
                    ));
                }
            });
        }
    });
    let stats = h.stats();
    let requests = threads * per;
    assert_eq!(stats.requests, requests);
    assert_eq!(
        stats.primary_wins + stats.hedge_wins + stats.retry_wins,
        requests
    );
    // Each request's winner is exact; a hedged request's loser is censored.
    assert_eq!(stats.samples, requests);
    assert_eq!(stats.censored_samples, stats.hedges_sent);
    assert_eq!(stats.samples_refused + stats.clock_anomalies, 0);
    let budget = h.budget_stats();
    assert_eq!(budget.grants, stats.hedges_sent);
    assert_eq!(budget.denials, stats.budget_denials);
    // The default ratio budget: 15 % of requests, never more.
    assert!(budget.grants * 10_000 <= requests * 1_500, "{budget:?}");
    assert!(stats.hedges_sent > 0 && stats.hedge_wins > 0, "{stats:?}");
    assert_eq!(h.hedges_in_flight(SEC + per * 100 * US), 0);
}

#[test]
#[cfg_attr(miri, ignore)] // single-threaded: see above
fn a_clock_jump_ahead_goes_cold_and_recovers() {
    let config = HedgeConfig::DEFAULT.min_samples(5).rotation_period_ns(SEC);
    let h: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    commit_all(&h, 0, SEC, 50, 3 * MS);
    let warm = h.delay_ns(0, SEC + 50 * MS).expect("warm");
    assert!(warm.abs_diff(3 * MS) <= 3 * MS / 50, "{warm}");
    // Two periods without a timestamp: cold, on reads and on starts.
    let later = 10_000 * SEC;
    assert_eq!(h.delay_ns(0, later), None);
    assert_eq!(
        h.start(0, later, IDEMPOTENT).plan(),
        Plan::NoHedge(NoHedge::ColdStart)
    );
    // It refills after `min_samples` answers, with the new latency only.
    commit_all(&h, 0, later, 5, 7 * MS);
    let again = h.delay_ns(0, later + 5 * MS).expect("warm again");
    assert!(again.abs_diff(7 * MS) <= 7 * MS / 50, "{again}");
    // A clock stepped back an hour keeps recording and rotating.
    let back = later - 3_600 * SEC;
    commit_all(&h, 0, back, 30, 9 * MS);
    commit_all(&h, 0, back + 2 * SEC, 30, 9 * MS);
    let after = h.delay_ns(0, back + 3 * SEC).expect("still warm");
    assert!(after.abs_diff(9 * MS) <= 9 * MS / 50, "{after}");
}

/// As `Hedger`'s windows: a run of fewer than `STALE_RUN` requests on a
/// clock stepped back and returned, or of more over two periods or less,
/// does not empty the window (with batches or without); `STALE_RUN` or
/// more in a row over more than two periods take the new clock.
#[test]
#[cfg_attr(miri, ignore)] // single-threaded: see above
fn a_short_excursion_of_a_stale_clock_does_not_empty_the_window() {
    let run = u64::from(LatencyWindow::<CubicMapping>::STALE_RUN);
    let two_periods = 2 * LatencyWindow::<CubicMapping>::DEFAULT_PERIOD_NS;
    for batch in [1, 64] {
        // Requests 1 ms apart: 2, 15, 16 and 60 000 (over two periods less
        // 1 ms) span two periods or less; 60 002 span more.
        let spanning = two_periods / MS;
        for stale in [2, run - 1, run, spanning, spanning + 2] {
            let config = HedgeConfig::DEFAULT.min_samples(5);
            let h: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, Budget::Unlimited)
                .unwrap()
                .with_batch(batch);
            let t = 7_200 * SEC;
            commit_all(&h, 0, t, 300, 3 * MS);
            commit_all(&h, 0, t - 3_600 * SEC, stale, 3 * MS);
            h.flush(t);
            let back = t + 300 * MS;
            let delay = h.delay_ns(0, back);
            if stale <= spanning {
                let d = delay.expect("not emptied");
                assert!(d.abs_diff(3 * MS) <= 3 * MS / 50, "{d}");
            } else {
                // The window took the stepped-back clock: the true time
                // is now an hour ahead, an idle gap.
                assert_eq!(delay, None, "batch {batch}");
            }
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)] // single-threaded: see above
fn dropped_requests_leases_expire() {
    let lease = 40 * MS;
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(MS)
        .max_hedges_in_flight(1)
        .in_flight_lease_ns(lease);
    let h: SharedHedger<Budget, 1> = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut r = h.start(0, 0, IDEMPOTENT);
    assert!(matches!(h.on_timer(&mut r, MS), TimerAction::SendHedge(_)));
    drop(r); // never finished
    assert_eq!(h.hedges_in_flight(2 * MS), 1);
    let mut blocked = h.start(0, 2 * MS, IDEMPOTENT);
    assert_eq!(
        h.on_timer(&mut blocked, 3 * MS),
        TimerAction::Skip(NoHedge::InFlightLimit)
    );
    // After the lease the dropped hedge no longer counts.
    let t = MS + lease;
    assert_eq!(h.hedges_in_flight(t), 0);
    let mut next = h.start(0, t, IDEMPOTENT);
    assert!(matches!(
        h.on_timer(&mut next, t + MS),
        TimerAction::SendHedge(_)
    ));
    assert_eq!(h.stats().leases_expired, 1);
}

#[test]
#[cfg_attr(miri, ignore)] // single-threaded: see above
fn targets_out_of_range_use_the_aggregate() {
    let config = HedgeConfig::DEFAULT.min_samples(5);
    let h: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    // Target 7 has no window: its samples warm the aggregate, which serves it.
    commit_all(&h, 7, SEC, 10, 4 * MS);
    assert_eq!(h.stats().samples, 10);
    let now = SEC + 10 * MS;
    assert!(matches!(
        h.plan(7, now),
        Plan::Hedge {
            source: DelaySource::Aggregate,
            ..
        }
    ));
    assert!(matches!(
        h.plan(0, now),
        Plan::Hedge {
            source: DelaySource::Aggregate,
            ..
        }
    ));
    assert_eq!(h.plan(7, now), h.plan(usize::MAX, now));
    assert_eq!(h.targets(), 2);
    // With one target, the single window takes every index.
    let one: SharedHedger = SharedHedger::new(config).unwrap();
    for i in 0..10 {
        let mut r = one.start(usize::MAX - i as usize, i * MS, IDEMPOTENT);
        let _ = one.on_commit(&mut r, Attempt::PRIMARY, i * MS + 4 * MS);
    }
    assert!(matches!(
        one.plan(3, 10 * MS),
        Plan::Hedge {
            source: DelaySource::Target,
            ..
        }
    ));
    // A hedge routed to another target records its latency there.
    let routed: SharedHedger<Budget, 2> =
        SharedHedger::with_budget(config.prior_delay_ns(MS), Budget::Unlimited).unwrap();
    for i in 0..10 {
        let now = SEC + i * 10 * MS;
        let mut r = routed.start(0, now, IDEMPOTENT);
        let at = r.next_timer().expect("a prior delay hedges");
        let TimerAction::SendHedge(hedge) = routed.on_timer(&mut r, at) else {
            panic!("a prior delay hedges");
        };
        assert_eq!(r.route(hedge, 1), Ok(()));
        let _ = routed.on_commit(&mut r, hedge, at + 2 * MS);
    }
    let now = SEC + 100 * MS;
    assert!(matches!(
        routed.plan(1, now),
        Plan::Hedge {
            source: DelaySource::Target,
            ..
        }
    ));
    assert!(matches!(
        routed.plan(0, now),
        Plan::Hedge {
            source: DelaySource::Aggregate,
            ..
        }
    ));
}

/// Retry throttling holds across threads: four threads drive a backend
/// that fails every attempt at once (retryable), through one hedger. The
/// balance (20 tokens) is shared, so however the threads interleave, at
/// most 9 failures are retried (each decides on the balance its own take
/// left, 19 down to 11: above half), every later request's failure is a
/// throttled retry, counted.
/// Then answers come back and refill it, and a failure is retried again.
#[test]
fn a_shared_hedger_throttles_retries_in_a_fail_fast_outage() {
    let hedger = SharedHedger::new(HedgeConfig::DEFAULT).unwrap();
    let per_thread = if cfg!(miri) { 10 } else { 2_000u64 };
    let attempts: u64 = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..4u64)
            .map(|thread| {
                let hedger = &hedger;
                scope.spawn(move || {
                    let mut sent = 0u64;
                    for i in 0..per_thread {
                        let now = (i * 4 + thread) * MS;
                        let mut r = hedger.start(0, now, IDEMPOTENT);
                        let mut attempt = Attempt::PRIMARY;
                        sent += 1;
                        while let FailureOutcome::SendNow(next) =
                            hedger.on_failure(&mut r, attempt, now + 100 * US, Failure::Retryable)
                        {
                            attempt = next;
                            sent += 1;
                        }
                        assert!(r.is_finished());
                    }
                    sent
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).sum()
    });
    let n = 4 * per_thread;
    let s = hedger.stats();
    assert!(attempts <= n + 9, "{attempts} attempts for {n} requests");
    assert_eq!(s.gave_up, n);
    assert_eq!(s.retries_released, attempts - n);
    assert!(s.retries_throttled + 9 >= n, "{s:?}");
    // Answers refill the balance: 11 of them leave it at half once the
    // next failure has taken its token (throttled), 12 above (retried).
    let now = 10 * SEC;
    for i in 0..11 {
        let mut r = hedger.start(0, now + i * MS, IDEMPOTENT);
        let _ = hedger.on_commit(&mut r, Attempt::PRIMARY, now + i * MS + MS);
    }
    let mut r = hedger.start(0, now + 20 * MS, IDEMPOTENT);
    assert!(matches!(
        hedger.on_failure(&mut r, Attempt::PRIMARY, now + 21 * MS, Failure::Retryable),
        FailureOutcome::GiveUp { .. }
    ));
    for i in 30..42 {
        let mut r = hedger.start(0, now + i * MS, IDEMPOTENT);
        let _ = hedger.on_commit(&mut r, Attempt::PRIMARY, now + i * MS + MS);
    }
    let mut r = hedger.start(0, 11 * SEC, IDEMPOTENT);
    assert!(matches!(
        hedger.on_failure(&mut r, Attempt::PRIMARY, 11 * SEC + MS, Failure::Retryable),
        FailureOutcome::SendNow(_)
    ));
}
