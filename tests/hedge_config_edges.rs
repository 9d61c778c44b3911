//! Configurations at their edges, as clients set them: every configuration
//! a hedger accepts must work as documented, and one that cannot gets a
//! typed error instead of a quietly wrong delay.
//!
//! * a window's buckets (`SharedHedger`'s 1 024 a side, a `Hedger`'s
//!   store), counted down from `max_sample_ns`, must reach down to the
//!   delays it can give: else one long answer folds the rest together;
//! * a window must be able to warm whatever `rotation_samples` and
//!   `min_samples` say;
//! * the in-flight cap holds at the last nanosecond of time, whatever the
//!   lease.

mod support;

use support::{MS, SEC};
use tailguard::budget::Budget;
use tailguard::hedge::{
    Attempt, ConfigError, HedgeConfig, Hedger, Idempotency, Request, SharedHedger, TimerAction,
};
use tailguard::LogLinearMapping;

const IDEMPOTENT: Idempotency = Idempotency::Idempotent;

/// Mostly 1–10 ms, every hundredth 100 ms (true p90 about 9 ms).
fn latency(i: u64) -> u64 {
    if i % 100 == 99 {
        100 * MS
    } else {
        (1 + i % 10) * MS
    }
}

/// Both hedgers after the same `n` requests, 10 ms apart, unhedged (the
/// budget never grants): their delays at the end.
fn delays_after(config: HedgeConfig, n: u64) -> (Option<u64>, Option<u64>) {
    let mut plain: Hedger = Hedger::with_budget(config, Budget::Never).unwrap();
    let shared: SharedHedger = SharedHedger::with_budget(config, Budget::Never)
        .unwrap()
        .with_batch(1);
    let mut t = SEC;
    for i in 0..n {
        let mut a = plain.start((), t, IDEMPOTENT);
        let _ = plain.on_commit(&mut a, Attempt::PRIMARY, t + latency(i));
        let mut b = shared.start(0, t, IDEMPOTENT);
        let _ = shared.on_commit(&mut b, Attempt::PRIMARY, t + latency(i));
        t += 10 * MS;
    }
    (plain.delay_ns(&(), t), shared.delay_ns(0, t))
}

#[test]
fn a_key_range_that_misses_the_delays_is_refused() {
    // The defaults' range: 10 min down to 947 ns (as documented).
    let default = SharedHedger::new(HedgeConfig::DEFAULT).unwrap();
    assert_eq!(default.key_floor_ns(), 947);
    for config in [
        HedgeConfig::DEFAULT.relative_accuracy(0.005),
        HedgeConfig::DEFAULT.relative_accuracy(0.001),
        HedgeConfig::DEFAULT.max_sample_ns(u64::MAX),
        HedgeConfig::DEFAULT.max_sample_ns(365 * 24 * 3_600 * SEC),
    ] {
        match SharedHedger::new(config) {
            Err(ConfigError::KeyRange { floor_ns }) => {
                assert!(floor_ns > config.min_delay_ns, "{config:?}: {floor_ns}");
            }
            other => panic!("{config:?}: {:?}", other.map(|h| h.delay_ns(0, 0))),
        }
        // And by `Hedger`, whose 1 024 buckets a window reach no further
        // once a long answer is in: it would fold the short ones into its
        // lowest bucket.
        match Hedger::new(config) {
            Err(ConfigError::KeyRange { floor_ns }) => {
                assert!(floor_ns > config.min_delay_ns, "{config:?}: {floor_ns}");
            }
            other => panic!("{config:?}: {:?}", other.map(|h| h.stats())),
        }
    }
}

/// A firmware hedger with a small store: 128 log-linear buckets (32 a
/// power of two) span 16×, not the default 10 min down to 1 ms. Such a
/// `Hedger` once took any configuration, and one 2 s answer among 30–46 ms
/// ones folded them into its lowest bucket: a delay of 3.4 times the p90.
/// Now the default configuration is refused, and one whose samples fit
/// (at most 100 ms, delays of 10 ms or more) keeps the delay at the p90
/// with answers at that longest latency in the window (and longer ones
/// refused).
#[test]
fn a_small_store_refuses_what_it_cannot_span_and_keeps_what_it_can() {
    type Small = Hedger<(), Budget, 1, tailguard::CollapsingLowestStore<128>, LogLinearMapping>;
    let mapping = || LogLinearMapping::with_bits(5, 0).unwrap();
    let refused = Small::with_mapping(HedgeConfig::DEFAULT, Budget::Unlimited, mapping());
    assert!(
        matches!(refused, Err(ConfigError::KeyRange { .. })),
        "{:?}",
        refused.map(|h| h.stats())
    );
    let fits = HedgeConfig::DEFAULT
        .max_sample_ns(100 * MS)
        .min_delay_ns(10 * MS);
    let mut h = Small::with_mapping(fits, Budget::Unlimited, mapping()).unwrap();
    assert!(h.key_floor_ns() <= 10 * MS, "{}", h.key_floor_ns());
    let mut kept = Vec::new();
    let mut t = 0;
    for i in 0..5_000u64 {
        let latency = match i % 50 {
            49 => 2 * SEC,  // refused: above max_sample_ns
            24 => 100 * MS, // recorded: the store spans down from it
            _ => 30 * MS + (i * 7 % 17) * MS,
        };
        let mut r = h.start((), t, IDEMPOTENT);
        let _ = h.on_commit(&mut r, Attempt::PRIMARY, t + latency);
        if latency <= 100 * MS {
            kept.push(latency);
        }
        t += 20 * MS;
    }
    kept.sort_unstable();
    let p90 = kept[(kept.len() - 1) * 9 / 10] as f64;
    let delay = h.delay_ns(&(), t).expect("warm") as f64;
    // Within the mapping's 2 % (and the rounding down to whole ns).
    assert!(
        (delay / p90 - 1.0).abs() <= 0.021,
        "delay {delay} against p90 {p90}"
    );
}

/// A minimum delay above the longest real latency would never let a hedge
/// out: refused with a typed error by both hedgers, equal bounds accepted.
#[test]
fn a_minimum_delay_above_the_longest_latency_is_refused() {
    let config = HedgeConfig::DEFAULT
        .min_delay_ns(10 * MS)
        .max_sample_ns(5 * MS);
    let want = Err(ConfigError::MinDelayAboveMaxSample {
        min_delay_ns: 10 * MS,
        max_sample_ns: 5 * MS,
    });
    assert_eq!(config.validate(), want);
    assert_eq!(Hedger::new(config).map(|_| ()), want);
    assert_eq!(SharedHedger::new(config).map(|_| ()), want);
    assert!(config.max_sample_ns(10 * MS).validate().is_ok());
}

/// The class: every configuration `SharedHedger` accepts gives `Hedger`'s
/// delay (within the two windows' accuracy), and the grid holds both
/// accepted and refused ones.
#[test]
fn every_accepted_shared_key_range_gives_the_hedgers_delay() {
    let (mut accepted, mut refused) = (0, 0);
    for alpha in [0.002, 0.005, 0.01, 0.02, 0.05] {
        for max_sample in [
            20 * MS,
            10 * SEC,
            600 * SEC,
            365 * 24 * 3_600 * SEC,
            u64::MAX,
        ] {
            for min_delay in [0, 10_000, MS] {
                let config = HedgeConfig::DEFAULT
                    .relative_accuracy(alpha)
                    .max_sample_ns(max_sample)
                    .min_delay_ns(min_delay);
                if SharedHedger::new(config).is_err() {
                    refused += 1;
                    continue;
                }
                accepted += 1;
                let (plain, shared) = delays_after(config, 1_000);
                let (plain, shared) = (plain.unwrap() as f64, shared.unwrap() as f64);
                assert!(
                    (shared / plain - 1.0).abs() <= 2.0 * alpha,
                    "α {alpha}, max {max_sample}, min delay {min_delay}: \
                     Hedger {plain} ns, SharedHedger {shared} ns"
                );
            }
        }
    }
    assert!(
        accepted >= 20 && refused >= 10,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn a_rotation_shorter_than_min_samples_still_warms() {
    for config in [
        HedgeConfig::DEFAULT.rotation_samples(9),
        HedgeConfig::DEFAULT.rotation_samples(15),
        HedgeConfig::DEFAULT.min_samples(5_000),
    ] {
        let (plain, shared) = delays_after(config, 12_000);
        for (who, delay) in [("Hedger", plain), ("SharedHedger", shared)] {
            let delay = delay.unwrap_or_else(|| panic!("{who} never warmed: {config:?}"));
            // The p90 of 1..=10 ms (and 1 % at 100 ms): 9 or 10 ms.
            assert!(
                (8_900_000..=10_100_000).contains(&delay),
                "{who}: {delay} ns, {config:?}"
            );
        }
    }
}

#[test]
fn a_lease_of_a_few_nanoseconds_caps_hedges_at_the_end_of_time() {
    for lease in [1, 4, 7] {
        let config = HedgeConfig::DEFAULT
            .prior_delay_ns(1)
            .min_delay_ns(0)
            .max_hedges_in_flight(1)
            .in_flight_lease_ns(lease);
        let mut plain: Hedger = Hedger::with_budget(config, Budget::Unlimited).unwrap();
        let shared: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
        let (mut sent_plain, mut sent_shared) = (0, 0);
        let mut held = Vec::new();
        for _ in 0..5 {
            let mut a = plain.start((), u64::MAX - 1, IDEMPOTENT);
            if let TimerAction::SendHedge(_) = plain.on_timer(&mut a, u64::MAX) {
                sent_plain += 1;
            }
            let mut b = shared.start(0, u64::MAX - 1, IDEMPOTENT);
            if let TimerAction::SendHedge(_) = shared.on_timer(&mut b, u64::MAX) {
                sent_shared += 1;
            }
            held.push((a, b));
        }
        assert_eq!((sent_plain, sent_shared), (1, 1), "lease {lease}");
        assert_eq!(plain.hedges_in_flight(u64::MAX), 1, "lease {lease}");
        assert_eq!(shared.hedges_in_flight(u64::MAX), 1, "lease {lease}");
    }
}

/// A caller that follows `next_timer` must see it move: when the in-flight
/// cap holds a hedge back at the last nanosecond of time, "look again one
/// delay later" saturated to `now`, and the timer stayed where it was for
/// ever (the caller spun). Both hedgers, from starts within a delay of the
/// end, and after a retryable failure at the last nanosecond.
#[test]
fn a_timer_held_back_at_the_end_of_time_moves_or_ends() {
    use tailguard::hedge::{Failure, FailureOutcome};
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(MS)
        .max_hedges(2)
        .max_hedges_in_flight(2);
    for now in [u64::MAX - MS, u64::MAX - 10, u64::MAX - 1] {
        let mut plain: Hedger<usize> = Hedger::with_budget(config, Budget::Unlimited).unwrap();
        let shared: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
        // `a` and `c` hedge and hold both places.
        let (mut a, mut c) = (
            plain.start(0, now, IDEMPOTENT),
            plain.start(0, now, IDEMPOTENT),
        );
        let (mut sa, mut sc) = (
            shared.start(0, now, IDEMPOTENT),
            shared.start(0, now, IDEMPOTENT),
        );
        let due = a.next_timer().unwrap();
        for sent in [
            plain.on_timer(&mut a, due),
            plain.on_timer(&mut c, due),
            shared.on_timer(&mut sa, due),
            shared.on_timer(&mut sc, due),
        ] {
            assert!(matches!(sent, TimerAction::SendHedge(_)), "{sent:?}");
        }
        // `c`'s primary fails at the last nanosecond: its next hedge is held
        // back by the cap, as is every hedge of a new request `b`.
        for outcome in [
            plain.on_failure(&mut c, Attempt::PRIMARY, u64::MAX, Failure::Retryable),
            shared.on_failure(&mut sc, Attempt::PRIMARY, u64::MAX, Failure::Retryable),
        ] {
            assert_eq!(outcome, FailureOutcome::Continue);
        }
        let (mut b, mut sb) = (
            plain.start(0, now, IDEMPOTENT),
            shared.start(0, now, IDEMPOTENT),
        );
        // Their timers, followed as a caller would, strictly advance or end.
        let mut fire = |name: &str, r: &mut Request<usize>, plain_side: bool| {
            if let Some(t) = r.next_timer() {
                let action = if plain_side {
                    plain.on_timer(r, t)
                } else {
                    shared.on_timer(r, t)
                };
                let next = r.next_timer();
                assert!(
                    next.is_none_or(|n| n > t),
                    "{name} at {t}: {action:?}, then {next:?}"
                );
            }
        };
        for _ in 0..4 {
            fire("Hedger b", &mut b, true);
            fire("Hedger c", &mut c, true);
            fire("SharedHedger b", &mut sb, false);
            fire("SharedHedger c", &mut sc, false);
        }
    }
}

/// `validate` and construction agree on the relative accuracy: every value
/// `validate` accepts builds a `Hedger` (cubic and log-linear) and a
/// `SharedHedger` (or, for the latter, is refused for its key range only),
/// and every value it refuses is refused by construction too (1e-9 passed
/// `validate` and failed construction).
#[test]
fn validate_and_construction_agree_on_the_accuracy() {
    use tailguard::mapping::MIN_RELATIVE_ACCURACY;
    let values = [
        f64::NAN,
        -0.01,
        0.0,
        f64::MIN_POSITIVE,
        1e-300,
        1e-9,
        MIN_RELATIVE_ACCURACY * 0.5,
        MIN_RELATIVE_ACCURACY,
        1e-6,
        0.01,
        0.5,
        0.999,
        1.0,
    ];
    for a in values {
        let config = HedgeConfig::DEFAULT.relative_accuracy(a);
        let valid = config.validate().is_ok();
        let cubic = Hedger::<(), Budget>::with_budget(config, Budget::Unlimited);
        let log_linear = Hedger::<
            (),
            Budget,
            1,
            tailguard::CollapsingLowestStore<1024>,
            LogLinearMapping,
        >::with_budget(config, Budget::Unlimited);
        let shared = SharedHedger::<Budget>::with_budget(config, Budget::Unlimited);
        // Valid accuracies build, or are refused for the key range only.
        let agrees = |built: Result<(), ConfigError>, name: &str| match built {
            Ok(()) | Err(ConfigError::KeyRange { .. }) => assert!(valid, "{name} at {a}"),
            Err(e) => assert!(!valid, "{name} at {a}: {e:?}"),
        };
        if a == 0.01 {
            // The default must build, not merely be refused for its range.
            assert!(cubic.is_ok() && shared.is_ok(), "α = 1 %");
        }
        if a == 0.5 {
            assert!(log_linear.is_ok(), "log-linear at 50 %");
        }
        agrees(cubic.map(drop), "cubic");
        agrees(log_linear.map(drop), "log-linear");
        agrees(shared.map(drop), "shared");
        if !valid {
            assert!(
                matches!(config.validate(), Err(ConfigError::RelativeAccuracy(_))),
                "{a}"
            );
        }
    }
}

/// A warm window stays warm through its rotations on count, however
/// close `min_samples` is to the rotation count and however many of the
/// samples are censored: a half rotates on count once it holds
/// `min_samples` answers too (it rotated on all samples, so under hedging
/// a half left with fewer answers than `min_samples` and the window went
/// cold: 4.6 % of requests at p90 with `min_samples(1000)`, 33 % at p50).
#[test]
fn a_warm_window_stays_warm_through_rotations_on_count_under_hedging() {
    use support::{run_request, Backend};
    use tailguard::hedge::Plan;
    let configs = [
        HedgeConfig::DEFAULT.min_samples(1_000),
        HedgeConfig::DEFAULT.quantile(0.5).min_samples(1_000),
        HedgeConfig::DEFAULT
            .quantile(0.5)
            .max_hedges(3)
            .min_samples(1_000),
        HedgeConfig::DEFAULT.min_samples(200).rotation_samples(200),
    ];
    for config in configs {
        let mut h: Hedger<u32, Budget> = Hedger::with_budget(config, Budget::Unlimited).unwrap();
        let mut b = Backend::lognormal(5.0, 0.8, 21);
        let (mut cold, mut warm_from) = (0u64, None);
        // 10 000 requests a second: rotations come on count alone.
        for i in 0..30_000u64 {
            let (plan, _) = run_request(&mut h, &mut b, 0, SEC + i * 100_000);
            let warm = matches!(plan, Plan::Hedge { .. });
            if warm {
                warm_from.get_or_insert(i);
            } else if warm_from.is_some() {
                cold += 1;
            }
        }
        let rotations = h.window(&0).map_or(0, |w| w.rotations());
        assert!(rotations >= 5, "{config:?}: {rotations} rotations");
        assert_eq!(
            cold, 0,
            "{config:?}: cold again {cold} times after warming at {warm_from:?}"
        );
    }
}

/// Construction reports the first problem `validate` finds, whichever
/// constructor builds the mapping: `Hedger` built the accuracy's mapping
/// first and gave `RelativeAccuracy(1.0)` for a configuration whose first
/// problem is its quantile.
#[test]
fn every_constructor_reports_validate_s_first_problem() {
    let config = HedgeConfig::DEFAULT.quantile(0.0).relative_accuracy(1.0);
    let first = config.validate().unwrap_err();
    assert_eq!(first, ConfigError::Quantile(0.0));
    let errors = [
        Hedger::<()>::new(config).err(),
        Hedger::<(), Budget>::with_budget(config, Budget::Unlimited).err(),
        Hedger::<(), Budget>::with_budget_per_target(config, Budget::Unlimited).err(),
        SharedHedger::<Budget>::with_budget(config, Budget::Unlimited).err(),
    ];
    assert!(errors.iter().all(|e| *e == Some(first)), "{errors:?}");
}
