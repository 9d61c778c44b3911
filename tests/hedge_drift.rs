//! Under sustained hedging the delay must not drift downward.
//!
//! We record every attempt from its own send: the winner's latency as an
//! exact sample, each loser's elapsed time at cancellation as a *censored*
//! one ("at least this long"), and estimate the quantile with
//! Kaplan–Meier's product-limit estimator. A loser is cancelled because
//! *another* attempt answered, independently of its own latency, so the
//! estimate is the backend's own distribution.
//!
//! The article's client records only the winner's own latency: when a hedge
//! wins, the slow primary is never recorded, the window learns the *hedged*
//! distribution, whose p90 is lower, so the next delay is lower, and so on.
//! Recording the losers' elapsed times as if they had answered is no cure:
//! a hedge cancelled soon after its send becomes a fast answer, and the
//! delay sinks too, if less.
//!
//! A fourth policy, the winner timed from the primary's start
//! (`min(primary, delay + hedge)`), keeps every quantile up to the delay's
//! own exact — `P(min(L1, d + L2) > x) = P(L1 > x)` for `x < d` — but flattens
//! everything above it to about `d + hedge`: the last test shows its p99
//! collapsing while the p90 holds. Every policy sees the same backend.

use tailguard::budget::Budget;
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, TimerAction};
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
    // Unlimited budget: every request whose primary is slower than the
    // delay is hedged, as hard as hedging can push the estimate.
    let mut h: Hedger = Hedger::with_budget(HedgeConfig::DEFAULT, Budget::Unlimited).unwrap();
    // The delays of the second half of the run, averaged: a drift is a
    // bias of the average, window-to-window noise averages out.
    let (mut delay_sum, mut delays) = (0.0, 0u32);
    for i in 0..REQUESTS {
        let t = i * SPACING;
        let (primary, hedge) = (rng.latency(), rng.latency());
        let mut r = h.start((), t, Idempotency::Idempotent);
        if let (Some(d), true) = (r.delay_ns(), i >= REQUESTS / 2) {
            delay_sum += d as f64;
            delays += 1;
        }
        let (winner, at) = match r.next_timer() {
            Some(at) if t + primary > at => {
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
    let stats = h.stats();
    assert!(
        stats.hedges_sent > REQUESTS / 20,
        "hedging was sustained: {stats:?}"
    );
    // Every request recorded its winner exactly and each hedged request
    // its loser as censored.
    assert_eq!(stats.samples, REQUESTS);
    assert_eq!(stats.censored_samples, stats.hedges_sent);
    assert_eq!(delays, (REQUESTS / 2) as u32);
    let mean = delay_sum / f64::from(delays);
    let ratio = mean / true_p90();
    // Within 0.5 % here; the biased policies below are 4 % and 11 % low.
    assert!(
        (0.97..=1.03).contains(&ratio),
        "mean delay {mean} vs true p90 {}",
        true_p90()
    );
    let last = h.delay_ns(&(), REQUESTS * SPACING).unwrap() as f64;
    assert!((0.9..=1.1).contains(&(last / true_p90())), "{last}");
}

/// What a policy records for one hedged request, each sample as
/// `(elapsed, exact)`.
type Recorder = fn(Hedged) -> Vec<(u64, bool)>;

/// One hedged request: the primary's and the hedge's own latencies, and the
/// delay at which the hedge was sent.
#[derive(Clone, Copy)]
struct Hedged {
    primary: u64,
    delay: u64,
    hedge: u64,
}

impl Hedged {
    fn hedge_wins(self) -> bool {
        self.delay + self.hedge < self.primary
    }

    /// When the race ends, from the primary's send.
    fn end(self) -> u64 {
        self.primary.min(self.delay + self.hedge)
    }
}

/// Runs `REQUESTS` requests against a bare window (time rotation only, every
/// 30 s: it keeps the whole run) that records `recorded(..)` whenever a hedge
/// was sent and the primary's latency otherwise.
fn run_bare_window(recorded: Recorder) -> LatencyWindow {
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
        let (samples, end) = if primary > delay {
            let hedged = Hedged {
                primary,
                delay,
                hedge,
            };
            (recorded(hedged), hedged.end())
        } else {
            (vec![(primary, true)], primary)
        };
        // Everything is recorded when the race ends.
        let now = t + end;
        for (sample, exact) in samples {
            if exact {
                w.record(now, sample).unwrap();
            } else {
                w.record_censored(now, sample).unwrap();
            }
        }
    }
    w
}

fn ratio_to_true_p90(w: &LatencyWindow) -> f64 {
    w.cached_quantile().unwrap() as f64 / true_p90()
}

#[test]
fn censored_losers_keep_the_p90_in_a_bare_window() {
    // Our rule, on its own: winner exact, loser censored at the race's end.
    let w = run_bare_window(|h| {
        let (winner, loser) = if h.hedge_wins() {
            (h.hedge, h.end())
        } else {
            (h.primary, h.end() - h.delay)
        };
        vec![(winner, true), (loser, false)]
    });
    let ratio = ratio_to_true_p90(&w);
    assert!((0.97..=1.03).contains(&ratio), "ratio {ratio}");
    assert!(w.censored_count() > REQUESTS / 20);
}

#[test]
fn winner_only_recording_drifts_down() {
    // The winner's own latency: the hedge's when it wins.
    let w = run_bare_window(|h| {
        if h.hedge_wins() {
            vec![(h.hedge, true)]
        } else {
            vec![(h.primary, true)]
        }
    });
    let ratio = ratio_to_true_p90(&w);
    // It settles about 11 % low here; ours stays within 1 % (tests above).
    assert!(ratio < 0.92, "expected a downward drift, got ratio {ratio}");
}

#[test]
fn losers_recorded_as_answers_drift_down() {
    // The loser's elapsed time at cancellation taken for an answer: the
    // primary cut short at `delay + hedge`, the hedge at `primary − delay`.
    let w = run_bare_window(|h| {
        if h.hedge_wins() {
            vec![(h.hedge, true), (h.end(), true)]
        } else {
            vec![(h.primary, true), (h.end() - h.delay, true)]
        }
    });
    let ratio = ratio_to_true_p90(&w);
    // About 4 % low here: the hedges cut short below the delay pull it down.
    assert!(ratio < 0.97, "expected a downward drift, got ratio {ratio}");
}

#[test]
fn winner_timed_from_primary_start_keeps_p90_but_loses_the_tail() {
    let w = run_bare_window(|h| vec![(h.end(), true)]);
    let p90 = w.cached_quantile().unwrap() as f64;
    assert!((0.95..=1.05).contains(&(p90 / true_p90())), "{p90}");
    // The backend's true p99 is 5 ms · e^(0.6 · 2.3263) ≈ 20.3 ms.
    let true_p99 = 5.0 * MS * (0.6f64 * 2.326_347_874).exp();
    let p99 = w.quantile(0.99).unwrap().unwrap() as f64;
    assert!(p99 < 0.85 * true_p99, "p99 {p99} vs true {true_p99}");
}
