//! A hedger on a coarse tick clock, as firmware runs it: timestamps are
//! multiples of a 1 ms or 10 ms tick, and the timer fires at the first tick
//! whose reading reaches `next_timer()`. Answers tie at tick values; with
//! the delay at a tick, every request that reaches that tick hedged (2.1
//! times `1 − q` at p99 with 0.5 ms latencies on a 1 ms tick), and with a
//! zero minimum delay and latencies under a tick the delay was 0 and every
//! request hedged at once. With `clock_tick_ns` set, the hedge rate stays
//! at or below `1 − q` and the delay is a whole number of ticks, never 0,
//! for every latency scale, tick and quantile below.

mod support;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use support::MS;
use tailguard::hedge::{Attempt, HedgeConfig, Hedger, Idempotency, TimerAction};
use tailguard::Budget;

/// Hedges and requests after warm-up, and the delays seen, for requests
/// every 100 ms (true time) on a clock of `tick` ns, lognormal latencies
/// of median `median` ns and σ 0.5.
fn run(config: HedgeConfig, tick: u64, median: f64, seed: u64) -> (u64, u64, Vec<u64>) {
    let mut h: Hedger = Hedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let latency = LogNormal::new(median.ln(), 0.5).unwrap();
    let draw = |rng: &mut StdRng| latency.sample(rng).max(1.0) as u64;
    let read = |t: u64| t / tick * tick;
    let (mut hedges, mut requests, mut delays) = (0, 0, Vec::new());
    for i in 0..12_000u64 {
        let start = i * 100 * MS + rng.random_range(0..100 * MS);
        let mut r = h.start((), read(start), Idempotency::Idempotent);
        let answer = start + draw(&mut rng);
        let mut winner = (Attempt::PRIMARY, answer);
        if let Some(due) = r.next_timer() {
            // The first tick boundary whose reading reaches `due`.
            let fires = due.div_ceil(tick) * tick;
            if fires < answer {
                if let TimerAction::SendHedge(hedge) = h.on_timer(&mut r, read(fires)) {
                    let hedge_answer = fires + draw(&mut rng);
                    if hedge_answer < answer {
                        winner = (hedge, hedge_answer);
                    }
                    if i >= 2_000 {
                        hedges += 1;
                    }
                }
            }
        }
        if i >= 2_000 {
            requests += 1;
            delays.extend(r.delay_ns());
        }
        let _ = h.on_commit(&mut r, winner.0, read(winner.1));
    }
    (hedges, requests, delays)
}

#[test]
fn on_a_tick_clock_the_hedge_rate_stays_at_or_below_its_share() {
    for tick in [MS, 10 * MS] {
        for median in [0.5 * MS as f64, 3.0 * MS as f64, 20.0 * MS as f64] {
            for (q, min_delay) in [(0.9, 0), (0.9, 2 * tick), (0.99, 2 * tick)] {
                let config = HedgeConfig::DEFAULT
                    .quantile(q)
                    .min_delay_ns(min_delay)
                    .clock_tick_ns(tick);
                let (hedges, requests, delays) = run(config, tick, median, 7);
                let rate = hedges as f64 / requests as f64;
                let case = format!("tick {tick} ns, median {median} ns, q {q}, min {min_delay}");
                // 10 000 requests: a binomial's spread at 1 % is ±0.2 %.
                assert!(rate <= (1.0 - q) * 1.1 + 0.002, "{case}: {rate}");
                assert!(
                    delays.iter().all(|&d| d >= tick && d % tick == 0),
                    "{case}: {:?}",
                    delays.iter().find(|&&d| d < tick || d % tick != 0)
                );
            }
        }
    }
}

/// Where the tick is fine for the latencies, the tick setting changes
/// little: the rate stays near `1 − q`, not far below it.
#[test]
fn a_fine_tick_still_hedges_its_share() {
    let tick = 30_518; // a 32.768 kHz RTC
    let config = HedgeConfig::DEFAULT.clock_tick_ns(tick);
    let (hedges, requests, _) = run(config, tick, 20.0 * MS as f64, 11);
    let rate = hedges as f64 / requests as f64;
    assert!((0.08..=0.11).contains(&rate), "{rate}");
}
