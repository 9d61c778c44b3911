//! Both hedgers under configurations and timestamps at their extremes, as
//! a careless or adversarial caller would set them: every knob of
//! `HedgeConfig` at 0, 1, `u64::MAX` or just inside its range, together
//! (quantiles of 5·10⁻³²⁴ and 1 − ε, multipliers of `u32::MAX`, delay
//! bounds crossed, samples of `u64::MAX`, α of 10⁻⁷ and 1, ticks and
//! leases of 1 ns or `u64::MAX`, deadlines of 1 ns); requests started and
//! answered up to the last nanosecond of `u64`, with the in-flight cap
//! held, failures, abandons, and `SharedHedger` publishing in batches of
//! 1, 2, 64 or never until flushed.
//!
//! A configuration `validate` refuses is refused at construction; one it
//! accepts builds, unless the store cannot span it (`KeyRange`). A built
//! hedger keeps every bound whatever the timestamps: each plan's delay lies
//! within `[min_delay_ns, max_delay_ns]`, a request sends at most
//! `max_hedges` hedges, a timer that sends nothing moves on or ends (a
//! caller following it never spins), the in-flight cap holds, and every
//! request is counted. The other hedge tests check the same hedgers'
//! answers with ordinary configurations.

mod support;

use proptest::prelude::*;
use support::MS;
use tailguard::budget::Budget;
use tailguard::hedge::{
    Attempt, ConfigError, Failure, HedgeConfig, HedgeStats, Hedger, Idempotency, Plan, Request,
    SharedHedger, TimerAction, MAX_HEDGES,
};

/// A request's life as the tests drive it: the gap since the last one
/// ended, how long its attempts take, and how it ends.
#[derive(Clone, Copy, Debug)]
struct Life {
    gap: u64,
    latency: u64,
    idempotent: bool,
    end: End,
}

#[derive(Clone, Copy, Debug)]
enum End {
    /// The latest attempt sent answers.
    Commit,
    /// The primary fails, retryably.
    Fail,
    /// The caller drops the request.
    Abandon,
}

/// What the tests do with either hedger.
trait Drive {
    fn start(&mut self, now: u64, idempotency: Idempotency) -> Request<usize>;
    fn on_timer(&mut self, request: &mut Request<usize>, now: u64) -> TimerAction;
    fn end(&mut self, request: &mut Request<usize>, end: End, sent: u8, now: u64);
    fn hedges_in_flight(&self, now: u64) -> u32;
    fn stats(&self) -> HedgeStats;
}

/// [`Drive`] for a hedger: both take the same calls (`SharedHedger`
/// through `&self`).
macro_rules! drive {
    ($hedger:ty) => {
        impl Drive for $hedger {
            fn start(&mut self, now: u64, idempotency: Idempotency) -> Request<usize> {
                <$hedger>::start(self, 0, now, idempotency)
            }
            fn on_timer(&mut self, request: &mut Request<usize>, now: u64) -> TimerAction {
                <$hedger>::on_timer(self, request, now)
            }
            fn end(&mut self, request: &mut Request<usize>, end: End, sent: u8, now: u64) {
                // What the hedger answers is checked elsewhere; here only
                // that it takes it.
                match end {
                    End::Commit => {
                        let _ = self.on_commit(request, Attempt(sent), now);
                    }
                    End::Fail => {
                        let _ = self.on_failure(request, Attempt::PRIMARY, now, Failure::Retryable);
                    }
                    End::Abandon => {
                        let _ = self.abandon(request, now);
                    }
                }
            }
            fn hedges_in_flight(&self, now: u64) -> u32 {
                <$hedger>::hedges_in_flight(self, now)
            }
            fn stats(&self) -> HedgeStats {
                <$hedger>::stats(self)
            }
        }
    };
}

drive!(Hedger<usize, Budget>);
drive!(SharedHedger<Budget>);

/// Timer firings followed a request: a hedge the in-flight cap holds back
/// looks again one delay later, and a delay of a few nanoseconds would
/// otherwise have the tests fire the timer a million times a request.
const FIRINGS: usize = 256;

/// Runs `lives` one after the other from `start` and checks every bound of
/// `config` on the way.
fn keeps_its_bounds(
    h: &mut impl Drive,
    config: &HedgeConfig,
    start: u64,
    lives: &[Life],
) -> Result<(), TestCaseError> {
    let mut now = start;
    for (i, life) in lives.iter().enumerate() {
        now = now.saturating_add(life.gap);
        let idempotency = if life.idempotent {
            Idempotency::Idempotent
        } else {
            Idempotency::NotIdempotent
        };
        let mut r = h.start(now, idempotency);
        if let Plan::Hedge { delay_ns, .. } = r.plan() {
            prop_assert!(
                (config.min_delay_ns..=config.max_delay_ns).contains(&delay_ns),
                "request {}: delay {} outside [{}, {}]",
                i,
                delay_ns,
                config.min_delay_ns,
                config.max_delay_ns
            );
        }
        // The caller's timer fires until the answer comes, or `FIRINGS`
        // times.
        let done = now.saturating_add(life.latency);
        let mut sent = 0u8;
        for _ in 0..FIRINGS {
            let Some(t) = r.next_timer().filter(|&t| t <= done) else {
                break;
            };
            match h.on_timer(&mut r, t) {
                TimerAction::SendHedge(_) => {
                    sent += 1;
                    prop_assert!(sent <= config.max_hedges, "request {}: {} hedges", i, sent);
                }
                action => prop_assert!(
                    r.next_timer().is_none_or(|next| next > t),
                    "request {}: {:?} at {} leaves the timer there",
                    i,
                    action,
                    t
                ),
            }
        }
        if let Some(cap) = config.max_hedges_in_flight {
            prop_assert!(h.hedges_in_flight(done) <= cap, "request {}", i);
        }
        h.end(&mut r, life.end, sent, done);
        now = done;
    }
    prop_assert_eq!(h.stats().requests, lives.len() as u64);
    Ok(())
}

/// Durations at their extremes (never 0), or anything.
fn duration() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![1, 2, MS, u64::MAX / 2, u64::MAX - 1, u64::MAX]),
        1..=u64::MAX,
    ]
}

/// `valid`, or now and then a value `validate` refuses, so that most
/// configurations build and every refusal still comes up.
fn rarely<T: Clone + std::fmt::Debug>(
    valid: impl Strategy<Value = T>,
    invalid: impl Strategy<Value = T>,
) -> impl Strategy<Value = T> {
    prop_oneof![20 => valid, 1 => invalid]
}

/// Every knob at its extremes, rarely out of its range.
fn extreme_config() -> impl Strategy<Value = HedgeConfig> {
    let quantile = rarely(
        prop_oneof![
            prop::sample::select(vec![5e-324, 1e-300, 0.5, 1.0 - f64::EPSILON]),
            (0.0f64..1.0).prop_filter("positive", |&q| q > 0.0),
        ],
        prop::sample::select(vec![0.0, 1.0]),
    );
    let multiplier = rarely(
        prop_oneof![prop::sample::select(vec![1, u32::MAX]), 1u32..5_000],
        Just(0),
    );
    // Crossed now and then.
    let delays = rarely(
        (prop::option::of(duration()), duration()).prop_map(|(a, b)| {
            let a = a.unwrap_or(0);
            (a.min(b), a.max(b))
        }),
        (duration(), duration()),
    );
    let min_samples = rarely(
        prop_oneof![prop::sample::select(vec![1, 2, u64::MAX]), 1u64..50],
        Just(0),
    );
    let nonzero = || rarely(duration(), Just(0));
    let alpha = rarely(
        prop::sample::select(vec![1e-7, 0.02, 0.5, 0.999_999]),
        prop::sample::select(vec![0.0, 1.0]),
    );
    let hedges = rarely(0..=MAX_HEDGES, Just(MAX_HEDGES + 1));
    let cap = prop::option::of(rarely(1u32..3, Just(0)));
    (
        (quantile, multiplier, delays, min_samples),
        (nonzero(), prop::option::of(nonzero()), nonzero(), alpha),
        (nonzero(), nonzero(), prop::option::of(nonzero())),
        (prop::option::of(duration()), hedges, cap),
    )
        .prop_map(
            |(
                (quantile, multiplier, (min_delay, max_delay), min_samples),
                (period, rotation_samples, max_sample, alpha),
                (tick, lease, deadline),
                (prior, hedges, cap),
            )| {
                let mut c = HedgeConfig::DEFAULT
                    .quantile(quantile)
                    .delay_multiplier_permille(multiplier)
                    .min_delay_ns(min_delay)
                    .max_delay_ns(max_delay)
                    .min_samples(min_samples)
                    .rotation_period_ns(period)
                    .max_sample_ns(max_sample)
                    .relative_accuracy(alpha)
                    .clock_tick_ns(tick)
                    .in_flight_lease_ns(lease)
                    .max_hedges(hedges);
                if let Some(n) = rotation_samples {
                    c = c.rotation_samples(n);
                }
                if let Some(d) = deadline {
                    c = c.deadline_ns(d);
                }
                if let Some(p) = prior {
                    c = c.prior_delay_ns(p);
                }
                if let Some(n) = cap {
                    c = c.max_hedges_in_flight(n);
                }
                c
            },
        )
}

fn life(gap: impl Strategy<Value = u64>) -> impl Strategy<Value = Life> {
    let end = prop_oneof![
        4 => Just(End::Commit),
        1 => Just(End::Fail),
        1 => Just(End::Abandon),
    ];
    (gap, 0u64..3 * MS, any::<bool>(), end).prop_map(|(gap, latency, idempotent, end)| Life {
        gap,
        latency,
        idempotent,
        end,
    })
}

/// Clocks that start anywhere, or within ten seconds (or one
/// nanosecond) of the end of `u64`.
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![0, u64::MAX - 10_000_000_000, u64::MAX - 1, u64::MAX]),
        any::<u64>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A configuration is refused when `validate` refuses it, with the
    /// error `validate` gives, or builds (but for a key range the store
    /// cannot span) and keeps every bound.
    #[test]
    fn any_configuration_is_refused_or_keeps_its_bounds(
        config in extreme_config(),
        start in start(),
        lives in prop::collection::vec(life(0u64..5 * MS), 1..40),
    ) {
        let plain = Hedger::<usize, Budget>::with_budget(config, Budget::Unlimited);
        let shared = SharedHedger::<Budget>::with_budget(config, Budget::Unlimited);
        // Refused as `validate` refuses, or for the key range only.
        let refused = |built: Result<(), ConfigError>| match (built, config.validate()) {
            (Ok(()), Ok(())) => Ok(false),
            // By their text: an error carrying a NaN is not equal to itself.
            (Err(got), Err(first)) if format!("{got:?}") == format!("{first:?}") => Ok(true),
            (Err(ConfigError::KeyRange { .. }), Ok(())) => Ok(true),
            (built, valid) => Err(TestCaseError::fail(format!("{built:?} for {valid:?}"))),
        };
        if !refused(plain.as_ref().map(drop).map_err(|e| *e))? {
            keeps_its_bounds(&mut plain.unwrap(), &config, start, &lives)?;
        }
        if !refused(shared.as_ref().map(drop).map_err(|e| *e))? {
            keeps_its_bounds(&mut shared.unwrap().with_batch(1), &config, start, &lives)?;
        }
    }

    /// Up to the last nanosecond of `u64`, with the in-flight cap held,
    /// retries, failures and abandons, and samples published in batches,
    /// both hedgers keep every bound.
    #[test]
    fn the_end_of_time_keeps_every_bound(
        batch in prop::sample::select(vec![1usize, 2, 64, usize::MAX]),
        cap in prop::option::of(1u32..3),
        hedges in 0..=MAX_HEDGES,
        retries in 0u8..3,
        start in start(),
        lives in prop::collection::vec(
            life(prop_oneof![Just(0), 1u64..5 * MS, Just(u64::MAX / 4), any::<u64>()]),
            1..80,
        ),
    ) {
        let mut config = HedgeConfig::DEFAULT
            .max_hedges(hedges)
            .max_retries(retries)
            .min_samples(3)
            .prior_delay_ns(MS);
        if let Some(n) = cap {
            config = config.max_hedges_in_flight(n);
        }
        let mut plain: Hedger<usize, Budget> = Hedger::with_budget(config, Budget::Unlimited).unwrap();
        keeps_its_bounds(&mut plain, &config, start, &lives)?;
        let mut shared: SharedHedger<Budget> = SharedHedger::with_budget(config, Budget::Unlimited)
            .unwrap()
            .with_batch(batch);
        keeps_its_bounds(&mut shared, &config, start, &lives)?;
        shared.flush(u64::MAX);
        prop_assert_eq!(shared.stats().requests, lives.len() as u64);
    }
}
