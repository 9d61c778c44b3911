//! Under sustained hedging the delay must not drift downward.
//!
//! We record each attempt's own latency (losers censored at cancellation).
//! The article's client records only the winner's own latency: when a hedge
//! wins, the slow primary is never recorded, the window learns the *hedged*
//! distribution, whose p90 is lower, so the next delay is lower, and so on.
//!
//! A third policy, the winner timed from the primary's start
//! (`min(primary, delay + hedge)`), keeps every quantile up to the delay's
//! own exact — `P(min(L1, d + L2) > x) = P(L1 > x)` for `x < d` — but flattens
//! everything above it to about `d + hedge`: the third test shows its p99
//! collapsing while the p90 holds. Every policy sees the same backend.

use tailguard::budget::Budget;
use tailguard::hedge::{
    Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, Plan, TimerAction,
};
use tailguard::window::LatencyWindow;

const MS: f64 = 1e6;

/// splitmix64: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Lognormal latency in ns: median 5 ms, sigma 0.6.
    fn latency(&mut self) -> u64 {
        let (u, v) = (self.unit(), self.unit());
        let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
        (5.0 * MS * (0.6 * z).exp()) as u64
    }
}

/// The backend's true p90: 5 ms · e^(0.6 · 1.2816).
fn true_p90() -> f64 {
    5.0 * MS * (0.6f64 * 1.281_551_565_5).exp()
}

const REQUESTS: u64 = 20_000;
const SPACING: u64 = 200_000; // one request every 0.2 ms: 4 s of traffic

#[test]
fn our_recording_keeps_the_delay_at_the_backend_p90() {
    let mut rng = Rng(7);
    let mut h: Hedger = Hedger::with_budget(HedgeConfig::DEFAULT, Budget::Unlimited).unwrap();
    for i in 0..REQUESTS {
        let t = i * SPACING;
        let (primary, hedge) = (rng.latency(), rng.latency());
        let (mut r, plan) = h.start((), t, Idempotency::Idempotent);
        let (winner, at) = match plan {
            Plan::HedgeAt { at, .. } if t + primary > at => {
                assert_eq!(h.on_timer(&mut r, at), TimerAction::SendHedge(Attempt(1)));
                if at + hedge < t + primary {
                    (Attempt(1), at + hedge)
                } else {
                    (Attempt::PRIMARY, t + primary)
                }
            }
            _ => (Attempt::PRIMARY, t + primary),
        };
        assert!(matches!(
            h.on_commit(&mut r, winner, at),
            CommitOutcome::Won { .. }
        ));
    }
    let delay = h.delay_ns(&()).unwrap() as f64;
    let stats = h.stats();
    assert!(
        stats.hedges_sent > REQUESTS / 20,
        "hedging was sustained: {stats:?}"
    );
    let ratio = delay / true_p90();
    assert!(
        (0.95..=1.05).contains(&ratio),
        "delay {delay} vs true p90 {}",
        true_p90()
    );
}

/// Runs `REQUESTS` hedged requests against a bare window that records
/// `recorded(primary, delay, hedge)` whenever a hedge was sent.
fn run_bare_window(recorded: fn(u64, u64, u64) -> u64) -> LatencyWindow {
    let mut rng = Rng(7);
    let mut w: LatencyWindow = LatencyWindow::new(0.01, 30_000_000_000, 0.9).unwrap();
    for i in 0..REQUESTS {
        let t = i * SPACING;
        let (primary, hedge) = (rng.latency(), rng.latency());
        // Warm-up of 20 requests at 10 ms, then the window's p90.
        let delay = if w.count() >= 20 {
            w.cached_quantile().unwrap()
        } else {
            10_000_000
        };
        let sample = if primary > delay {
            recorded(primary, delay, hedge)
        } else {
            primary
        };
        w.record(t + sample, sample).unwrap();
    }
    w
}

#[test]
fn winner_only_recording_drifts_down() {
    // The winner's own latency: the hedge's when it wins.
    let w = run_bare_window(|primary, delay, hedge| {
        if delay + hedge < primary {
            hedge
        } else {
            primary
        }
    });
    let delay = w.cached_quantile().unwrap() as f64;
    let ratio = delay / true_p90();
    // It settles about 11 % low here; ours stays within 5 % (first test).
    assert!(
        ratio < 0.92,
        "expected a downward drift, got {delay} vs {}",
        true_p90()
    );
}

#[test]
fn winner_timed_from_primary_start_keeps_p90_but_loses_the_tail() {
    let w = run_bare_window(|primary, delay, hedge| primary.min(delay + hedge));
    let p90 = w.cached_quantile().unwrap() as f64;
    assert!((0.95..=1.05).contains(&(p90 / true_p90())), "{p90}");
    // The backend's true p99 is 5 ms · e^(0.6 · 2.3263) ≈ 20.3 ms.
    let true_p99 = 5.0 * MS * (0.6f64 * 2.326_347_874).exp();
    let p99 = w.quantile(0.99).unwrap().unwrap();
    assert!(p99 < 0.85 * true_p99, "p99 {p99} vs true {true_p99}");
}
