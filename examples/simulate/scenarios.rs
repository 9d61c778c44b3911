//! The scenarios of `cargo run --example simulate`, as data (no printing),
//! shared with `tests/simulation.rs`.

// The example and the test each use a subset of this module.
#![allow(dead_code)]

use crate::engine::{
    quantiles, quantiles_between, simulate, Backend, Client, GoReference, HeaderCalibrated, Ours,
    Outcome, Quantiles, Signal, Workload, MS, SEC,
};
use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{HedgeConfig, HedgeStats};

/// Concurrent workers in every scenario.
pub const WORKERS: usize = 20;

/// One strategy's result.
#[derive(Clone, Debug)]
pub struct Row {
    /// Strategy name.
    pub name: String,
    /// User-visible latency.
    pub q: Quantiles,
    /// Hedges per backend request.
    pub extra_load: f64,
    /// Backend busy time per backend request (ms).
    pub work_ms: f64,
    /// The hedger's counters, for our clients.
    pub stats: Option<HedgeStats>,
    /// Everything measured.
    pub outcome: Outcome,
}

impl Row {
    /// A row of `outcome`, with `stats` from the client.
    pub fn new(name: &str, outcome: Outcome, stats: Option<HedgeStats>) -> Self {
        Self {
            name: name.to_owned(),
            q: quantiles(&outcome.users),
            extra_load: outcome.extra_load(),
            work_ms: outcome.busy_ns as f64 / MS as f64 / outcome.requests.max(1) as f64,
            stats,
            outcome,
        }
    }
}

fn row<C: Client>(
    name: &str,
    client: &mut C,
    backend: &Backend,
    workload: Workload,
    seed: u64,
) -> Row {
    let outcome = simulate(client, backend, workload, seed);
    Row::new(name, outcome, client.stats())
}

fn ours_row(name: &str, mut client: Ours, backend: &Backend, w: Workload, seed: u64) -> Row {
    row(name, &mut client, backend, w, seed)
}

/// A client of ours with `config` and the default 10 % ratio budget.
pub fn ours(config: HedgeConfig) -> Ours {
    ours_with(config, Budget::default(), Signal::Answer)
}

/// A client of ours with `config` and `budget`, racing and recording on
/// `signal`.
pub fn ours_with(config: HedgeConfig, budget: Budget, signal: Signal) -> Ours {
    Ours::with_budget(config, budget, signal)
}

/// No hedging: our hedger with `max_hedges(0)` (it still measures).
pub fn no_hedging() -> HedgeConfig {
    HedgeConfig::DEFAULT.max_hedges(0)
}

/// A static delay through our hedger: the prior is the delay, clamped to
/// itself, and the window is never trusted. Same 10 % ratio budget.
pub fn static_delay(delay_ns: u64) -> HedgeConfig {
    HedgeConfig::DEFAULT
        .prior_delay_ns(delay_ns)
        .min_delay_ns(delay_ns)
        .max_delay_ns(delay_ns)
        .min_samples(u64::MAX)
}

/// A ratio budget of `share_bps`, banking at most `max_tokens`.
pub fn ratio(share_bps: u32, max_tokens: u32) -> Budget {
    Budget::Ratio(RatioBudget::new(share_bps, max_tokens).expect("valid budget"))
}

/// The article scenario's results.
#[derive(Clone, Debug)]
pub struct Article {
    /// One row per strategy, "no hedging" first.
    pub rows: Vec<Row>,
    /// The throughput of the no-hedging run, the "right" RPS guess.
    pub measured_rps: u32,
}

/// The article's benchmark: `requests` requests, 20 workers, lognormal
/// (5 ms, 2 ms), 5 % of attempts ×10.
pub fn article(requests: u64, seed: u64) -> Article {
    let backend = Backend::article(0.05);
    let w = Workload::closed_loop(requests, WORKERS);
    let mut rows = vec![
        ours_row("no hedging", ours(no_hedging()), &backend, w, seed),
        ours_row(
            "static 10 ms",
            ours(static_delay(10 * MS)),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "static 50 ms",
            ours(static_delay(50 * MS)),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "adaptive p90 (ours, default)",
            ours(HedgeConfig::DEFAULT),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "adaptive p90 (ours, cap 100 tokens)",
            ours_with(HedgeConfig::DEFAULT, ratio(1_000, 100), Signal::Answer),
            &backend,
            w,
            seed,
        ),
    ];
    let measured_rps = rows[0].outcome.throughput() as u32;
    let period = HedgeConfig::DEFAULT.rotation_period_ns;
    rows.push(row(
        "Go reference (RPS guess 1000)",
        &mut GoReference::new(1_000, period),
        &backend,
        w,
        seed,
    ));
    rows.push(row(
        &format!("Go reference (RPS guess {measured_rps})"),
        &mut GoReference::new(measured_rps, period),
        &backend,
        w,
        seed,
    ));
    Article { rows, measured_rps }
}

/// A run split into phases of virtual time.
#[derive(Clone, Debug)]
pub struct Phased {
    /// Phase names and their `[from, until)` in ns.
    pub phases: Vec<(String, u64, u64)>,
    /// One row per strategy (the whole run).
    pub rows: Vec<Row>,
    /// The Go reference's RPS guess (the first phase's throughput).
    pub go_rps: u32,
}

impl Phased {
    /// `row`'s latency quantiles within phase `i`.
    pub fn quantiles(&self, row: &Row, i: usize) -> Quantiles {
        let (_, from, until) = self.phases[i];
        quantiles_between(&row.outcome.users, from, until)
    }

    /// `row`'s hedges per request within phase `i`.
    pub fn extra_load(&self, row: &Row, i: usize) -> f64 {
        let (_, from, until) = self.phases[i];
        let secs = &row.outcome.per_second;
        let range = (from / SEC) as usize..((until / SEC) as usize).min(secs.len());
        let (req, hedges) = secs[range]
            .iter()
            .fold((0, 0), |(r, h), s| (r + s.requests, h + s.hedges));
        hedges as f64 / req.max(1) as f64
    }
}

/// The window rotation used by the drift and outage scenarios (the default
/// 30 s would need minutes of virtual time per phase).
pub const FAST_ROTATION_NS: u64 = 2 * SEC;

fn three_phases(phase_ns: u64, middle: &str) -> Vec<(String, u64, u64)> {
    vec![
        ("before".to_owned(), 0, phase_ns),
        (middle.to_owned(), phase_ns, 2 * phase_ns),
        ("after".to_owned(), 2 * phase_ns, 3 * phase_ns),
    ]
}

/// The backend turns 3× slower for the middle of three phases of
/// `phase_ns` each.
pub fn drift(phase_ns: u64, seed: u64) -> Phased {
    let backend = Backend::article(0.05).with_slowdown(phase_ns, 2 * phase_ns, 3.0);
    let w = Workload::closed_loop(u64::MAX, WORKERS).until(3 * phase_ns);
    let adaptive = HedgeConfig::DEFAULT.rotation_period_ns(FAST_ROTATION_NS);
    let rows = vec![
        ours_row("no hedging", ours(no_hedging()), &backend, w, seed),
        ours_row(
            "static 10 ms (tuned before)",
            ours(static_delay(10 * MS)),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "static 30 ms (tuned for 3×)",
            ours(static_delay(30 * MS)),
            &backend,
            w,
            seed,
        ),
        ours_row("adaptive p90 (ours)", ours(adaptive), &backend, w, seed),
    ];
    with_go_reference(rows, &backend, w, seed, phase_ns, "3× slower")
}

/// Every attempt is 10× slower during the middle of three phases.
pub fn outage(phase_ns: u64, seed: u64) -> Phased {
    let backend = Backend::article(0.05).with_slowdown(phase_ns, 2 * phase_ns, 10.0);
    let w = Workload::closed_loop(u64::MAX, WORKERS).until(3 * phase_ns);
    let adaptive = HedgeConfig::DEFAULT.rotation_period_ns(FAST_ROTATION_NS);
    let rows = vec![
        ours_row("no hedging", ours(no_hedging()), &backend, w, seed),
        ours_row("adaptive p90 (ours)", ours(adaptive), &backend, w, seed),
    ];
    with_go_reference(rows, &backend, w, seed, phase_ns, "outage 10×")
}

/// Adds the Go reference's row, its RPS guessed right for the first phase
/// (from the first row's per-second counts), and frames the three phases.
fn with_go_reference(
    mut rows: Vec<Row>,
    backend: &Backend,
    w: Workload,
    seed: u64,
    phase_ns: u64,
    middle: &str,
) -> Phased {
    let before = &rows[0].outcome.per_second;
    let secs = (phase_ns / SEC).max(1) as usize;
    let rps = before.iter().take(secs).map(|s| s.requests).sum::<u64>() / secs as u64;
    rows.push(row(
        &format!("Go reference (RPS guess {rps})"),
        &mut GoReference::new(rps as u32, FAST_ROTATION_NS),
        backend,
        w,
        seed,
    ));
    Phased {
        phases: three_phases(phase_ns, middle),
        rows,
        go_rps: rps as u32,
    }
}

/// The streaming hedge rule: 1.5 × the median of the calibration signal.
pub fn streaming_config() -> HedgeConfig {
    HedgeConfig::DEFAULT
        .quantile(0.5)
        .delay_multiplier_permille(1_500)
}

/// LLM streaming: time to first token under header and first-token
/// calibration. Every hedging row uses a 100 % ratio budget (at most one
/// hedge per request) unless named otherwise, so that the calibration, not
/// the budget, sets the load.
pub fn streaming(requests: u64, seed: u64) -> Vec<Row> {
    let backend = Backend::streaming();
    let w = Workload::closed_loop(requests, WORKERS);
    let full = || ratio(10_000, 100);
    let period = HedgeConfig::DEFAULT.rotation_period_ns;
    vec![
        ours_row("no hedging", ours(no_hedging()), &backend, w, seed),
        ours_row(
            "first-token calibrated (ours)",
            ours_with(streaming_config(), full(), Signal::Answer),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "first-token calibrated, up to 2 hedges (ours)",
            ours_with(streaming_config().max_hedges(2), full(), Signal::Answer),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "first-token calibrated, 10 % budget",
            ours_with(streaming_config(), Budget::default(), Signal::Answer),
            &backend,
            w,
            seed,
        ),
        row(
            "header-calibrated (record headers, race first token)",
            &mut HeaderCalibrated::new(0.5, 1.5, period, full()),
            &backend,
            w,
            seed,
        ),
        ours_row(
            "race and record on headers (ours)",
            ours_with(streaming_config(), full(), Signal::Headers),
            &backend,
            w,
            seed,
        ),
    ]
}

/// One fan-out width's results.
#[derive(Clone, Debug)]
pub struct FanOut {
    /// Backends per user request.
    pub n: usize,
    /// Share of slow attempts.
    pub p: f64,
    /// Share of user requests with at least one slow primary (no hedging).
    pub measured_any_slow: f64,
    /// No hedging, then ours.
    pub rows: Vec<Row>,
}

impl FanOut {
    /// 1 − (1 − p)ⁿ.
    pub fn predicted_any_slow(&self) -> f64 {
        1.0 - (1.0 - self.p).powi(self.n as i32)
    }
}

/// A ratio-budget cap that holds one round of fan-out deposits: every
/// worker's `n` primaries at 10 % each (at least the default 10).
pub fn fan_out_cap(n: usize) -> u32 {
    ((WORKERS * n / 10) as u32).max(RatioBudget::DEFAULT_MAX_TOKENS)
}

/// Each user request fans out to `n` backends (1 % of attempts ×10) and
/// waits for all; about `backend_requests` backend requests per width.
pub fn fan_out(widths: &[usize], backend_requests: u64, seed: u64) -> Vec<FanOut> {
    let p = 0.01;
    let backend = Backend::article(p);
    widths
        .iter()
        .map(|&n| {
            let w =
                Workload::closed_loop((backend_requests / n as u64).max(100), WORKERS).fanout(n);
            let mut rows = vec![
                ours_row("no hedging", ours(no_hedging()), &backend, w, seed),
                ours_row(
                    "adaptive p90 (ours, default)",
                    ours(HedgeConfig::DEFAULT),
                    &backend,
                    w,
                    seed,
                ),
            ];
            if fan_out_cap(n) > RatioBudget::DEFAULT_MAX_TOKENS {
                rows.push(ours_row(
                    &format!("adaptive p90 (ours, cap {} tokens)", fan_out_cap(n)),
                    ours_with(
                        HedgeConfig::DEFAULT,
                        ratio(1_000, fan_out_cap(n)),
                        Signal::Answer,
                    ),
                    &backend,
                    w,
                    seed,
                ));
            }
            let users = &rows[0].outcome.users;
            let slow = users.iter().filter(|u| u.any_slow_primary).count();
            FanOut {
                n,
                p,
                measured_any_slow: slow as f64 / users.len().max(1) as f64,
                rows,
            }
        })
        .collect()
}
