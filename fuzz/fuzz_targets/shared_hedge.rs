//! The shared hedger against the hedger it shares its machine with: both
//! get the same arbitrary configuration and the same event sequence on
//! several interleaved requests (timestamps that repeat, step back by
//! hours, jump far ahead, requests dropped mid-race, hedges routed to
//! another target), and every answer, counter, delay and in-flight count
//! must be equal at every step.
//!
//! Timestamps are whole microseconds below 2³⁹ µs (17 years): within them
//! the two are documented to agree exactly (elapsed times are 0 or at
//! least 1 µs, inside the shared window's fixed key range; in-flight epochs
//! are compared modulo 2⁴⁰ slots of at least 1 µs, so timestamps must stay
//! less than 2⁴⁰ slots apart — the end of a 2⁴⁰ µs timeline is next to its
//! start). The far future and `u64::MAX` are the plain `hedge` target's
//! business.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{Attempt, Failure, HedgeConfig, Hedger, Idempotency, Request, SharedHedger};

const US: u64 = 1_000;
const HOUR_US: u64 = 3_600 * 1_000_000;
/// The end of the timeline, in µs.
const END_US: u64 = 1 << 39;

#[derive(arbitrary::Arbitrary, Debug)]
enum Event {
    Start { target: u8, idempotent: bool },
    Timer { slot: u8 },
    Commit { slot: u8, attempt: u8 },
    Fail { slot: u8, attempt: u8, fatal: bool },
    Abandon { slot: u8 },
    Drop { slot: u8 },
    Route { slot: u8, attempt: u8, target: u8 },
    Tick(u16),
    LongTick(u32),
    Back(u32),
    BackHours(u8),
    Jump(u64),
}

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    max_hedges: u8,
    max_retries: u8,
    min_samples: u8,
    rotation_samples: Option<u8>,
    period_ms: u16,
    prior_us: Option<u32>,
    in_flight_cap: u8,
    lease_quarter_us: u16,
    deadline_us: Option<u32>,
    budget: u8,
    share_bps: u16,
    events: Vec<Event>,
}

fuzz_target!(|input: Input| {
    let mut config = HedgeConfig::DEFAULT
        .max_hedges(input.max_hedges % 8)
        .max_retries(input.max_retries % 4)
        .min_samples(u64::from(input.min_samples % 32).max(1))
        .rotation_period_ns((u64::from(input.period_ms) + 1) * 1_000 * US)
        .in_flight_lease_ns(4 * (u64::from(input.lease_quarter_us) + 1) * US);
    if let Some(n) = input.rotation_samples {
        config = config.rotation_samples(u64::from(n).max(1));
    }
    if let Some(p) = input.prior_us {
        config = config.prior_delay_ns(u64::from(p) * US);
    }
    match input.in_flight_cap % 4 {
        0 => {}
        3 => config = config.max_hedges_in_flight(2),
        _ => config = config.max_hedges_in_flight(1),
    }
    if let Some(d) = input.deadline_us {
        config = config.deadline_ns((u64::from(d) * US).max(1));
    }
    let share = u32::from(input.share_bps % 10_000) + 1;
    let budget = || match input.budget % 3 {
        0 => Budget::Unlimited,
        1 => Budget::Never,
        _ => Budget::Ratio(RatioBudget::new(share, 3).unwrap()),
    };
    let mut plain: Hedger<usize, Budget, 2> = Hedger::with_budget(config, budget()).unwrap();
    // Samples and deposits published at once: the same decisions (batches
    // are `hedge_shared`'s replay property).
    let shared: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, budget())
        .unwrap()
        .with_batch(1);
    let mut live: Vec<(Request<usize>, Request<usize>)> = Vec::new();
    let mut now_us: u64 = 0;
    for event in input.events.into_iter().take(512) {
        let now = now_us * US;
        let at = |slot: u8, n: usize| (n > 0).then(|| usize::from(slot) % n);
        match event {
            Event::Start { target, idempotent } => {
                let target = usize::from(target % 2);
                let idem = if idempotent {
                    Idempotency::Idempotent
                } else {
                    Idempotency::NotIdempotent
                };
                let a = plain.start(target, now, idem);
                let b = shared.start(target, now, idem);
                assert_eq!(a.plan(), b.plan());
                if live.len() < 6 {
                    live.push((a, b));
                }
            }
            Event::Timer { slot } => {
                if let Some(i) = at(slot, live.len()) {
                    let (a, b) = &mut live[i];
                    assert_eq!(plain.on_timer(a, now), shared.on_timer(b, now));
                }
            }
            Event::Commit { slot, attempt } => {
                if let Some(i) = at(slot, live.len()) {
                    let (a, b) = &mut live[i];
                    let x = Attempt(attempt % 9);
                    assert_eq!(plain.on_commit(a, x, now), shared.on_commit(b, x, now));
                }
            }
            Event::Fail {
                slot,
                attempt,
                fatal,
            } => {
                if let Some(i) = at(slot, live.len()) {
                    let (a, b) = &mut live[i];
                    let x = Attempt(attempt % 9);
                    let f = if fatal {
                        Failure::Fatal
                    } else {
                        Failure::Retryable
                    };
                    assert_eq!(
                        plain.on_failure(a, x, now, f),
                        shared.on_failure(b, x, now, f)
                    );
                }
            }
            Event::Abandon { slot } => {
                if let Some(i) = at(slot, live.len()) {
                    let (a, b) = &mut live[i];
                    assert_eq!(plain.abandon(a, now), shared.abandon(b, now));
                }
            }
            Event::Drop { slot } => {
                if let Some(i) = at(slot, live.len()) {
                    let _dropped = live.swap_remove(i);
                }
            }
            Event::Route {
                slot,
                attempt,
                target,
            } => {
                if let Some(i) = at(slot, live.len()) {
                    let (a, b) = &mut live[i];
                    let x = Attempt(attempt % 9);
                    let t = usize::from(target % 2);
                    let routed = a.route(x, t);
                    assert_eq!(routed, b.route(x, t));
                }
            }
            Event::Tick(d) => now_us = now_us.saturating_add(u64::from(d)),
            Event::LongTick(d) => now_us = now_us.saturating_add(u64::from(d)),
            Event::Back(d) => now_us = now_us.saturating_sub(u64::from(d)),
            Event::BackHours(n) => now_us = now_us.saturating_sub(u64::from(n % 48 + 1) * HOUR_US),
            Event::Jump(t) => now_us = t % END_US,
        }
        now_us = now_us.min(END_US - 1);
        let now = now_us * US;
        for (a, b) in &live {
            assert_eq!(a.next_timer(), b.next_timer());
            assert_eq!(a.is_finished(), b.is_finished());
        }
        live.retain(|(a, _)| !a.is_finished());
        assert_eq!(plain.stats(), shared.stats());
        assert_eq!(plain.budget_stats(&0), shared.budget_stats());
        assert_eq!(plain.hedges_in_flight(now), shared.hedges_in_flight(now));
        for t in 0..2 {
            assert_eq!(plain.plan(&t, now), shared.plan(t, now));
        }
    }
});
