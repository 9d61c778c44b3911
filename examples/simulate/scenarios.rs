//! The scenarios of `cargo run --example simulate`, as data (no printing),
//! shared with `tests/simulation.rs`.

// The example and the test each use a subset of this module.
#![allow(dead_code)]

use crate::engine::{
    data_driven_share, origin_share, poisson_pauses, quantiles, quantiles_between, simulate,
    Backend, Client, DelayOrigin, GoReference, HeaderCalibrated, Latency, LoadSensitivity,
    LogNormal, OnCancel, Ours, Outcome, Popularity, Quantiles, Replica, Rng, Routing, Second,
    Signal, UserRecord, Workload, MS, SEC,
};
use tailguard::budget::{Budget, RatioBudget, UNITS_PER_TOKEN};
use tailguard::hedge::{Failure, HedgeConfig, HedgeStats};

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

    /// The share of user requests that failed (every try of a backend
    /// request failed).
    pub fn failure_rate(&self) -> f64 {
        self.outcome.failure_rate()
    }

    /// Caller retries per user request.
    pub fn retried_share(&self) -> f64 {
        self.outcome.caller_retries as f64 / self.outcome.users.len().max(1) as f64
    }

    /// Hedges per *user* request (a user request's caller retries are
    /// hedger requests of their own: [`extra_load`](Self::extra_load) is
    /// per hedger request).
    pub fn hedges_per_user(&self) -> f64 {
        self.outcome.hedges as f64 / self.outcome.users.len().max(1) as f64
    }

    /// Attempts sent per user request beyond the first: hedges and caller
    /// retries.
    pub fn extra_attempts_per_user(&self) -> f64 {
        let users = self.outcome.users.len() as f64;
        (self.outcome.requests + self.outcome.hedges) as f64 / users.max(1.0) - 1.0
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

/// A client of ours with `config` and the default budget
/// ([`RatioBudget::default`]: [`RatioBudget::DEFAULT_SHARE_BPS`] of traffic,
/// a bank of the last 100 ms of earnings, at least
/// [`RatioBudget::DEFAULT_FLOOR_TOKENS`] tokens).
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
    // No duplicate of any kind: retrying is left to the caller.
    HedgeConfig::DEFAULT.max_hedges(0).max_retries(0)
}

/// A static delay through our hedger: the prior is the delay, clamped to
/// itself, and the window is never trusted. With [`ours`], the same
/// default budget as the adaptive rows.
pub fn static_delay(delay_ns: u64) -> HedgeConfig {
    HedgeConfig::DEFAULT
        .prior_delay_ns(delay_ns)
        .min_delay_ns(delay_ns)
        .max_delay_ns(delay_ns)
        .min_samples(u64::MAX)
}

/// A ratio budget of `share_bps` with a **fixed** cap: it banks at most
/// `max_tokens`, whatever the traffic ([`RatioBudget::fixed_cap`]).
pub fn fixed_cap(share_bps: u32, max_tokens: u32) -> Budget {
    Budget::Ratio(RatioBudget::fixed_cap(share_bps, max_tokens).expect("valid budget"))
}

/// A ratio budget of `share_bps` whose bank scales with traffic like the
/// default's ([`RatioBudget::new`], floor
/// [`RatioBudget::DEFAULT_FLOOR_TOKENS`]): the default with another share.
pub fn traffic_scaled(share_bps: u32) -> Budget {
    Budget::Ratio(
        RatioBudget::new(share_bps, RatioBudget::DEFAULT_FLOOR_TOKENS).expect("valid budget"),
    )
}

/// A share in basis points as the tables print it: `15 %`, `12.5 %`.
pub fn share_label(bps: u32) -> String {
    if bps.is_multiple_of(100) {
        format!("{} %", bps / 100)
    } else {
        format!("{} %", f64::from(bps) / 100.0)
    }
}

/// The default budget's share, as the tables print it.
pub fn default_share() -> String {
    share_label(RatioBudget::DEFAULT_SHARE_BPS)
}

/// The share of the "headroom" rows: what hedging at p90 needs, without
/// the default's headroom.
pub const TIGHT_SHARE_BPS: u32 = 1_000;

/// The name of the adaptive row with a [`TIGHT_SHARE_BPS`] traffic-scaled
/// budget.
pub fn tight_row_name() -> String {
    format!(
        "adaptive p90 (ours, {} budget)",
        share_label(TIGHT_SHARE_BPS)
    )
}

/// The fixed cap of the article's fixed-cap row.
pub const ARTICLE_FIXED_CAP: u32 = 100;

/// What a ratio budget could grant in one second of a run, from the run's
/// per-second counts: tokens earned by that second's requests, plus at
/// most the bank it started the second with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    /// `share × requests` of the second, in budget units
    /// ([`UNITS_PER_TOKEN`] a token).
    pub earned_units: u64,
    /// The most the bank can hold at the second's start, in units: the cap
    /// the last deposit before it clipped to (a traffic-scaled cap is
    /// `max(floor, share × max(n, n_before))` over the per-second request
    /// counts of that deposit's second and the one before), and no more
    /// than what was earned and not spent before.
    pub bank_units: u64,
}

impl Allowance {
    /// The most hedges the second could pay for.
    pub fn tokens(&self) -> u64 {
        (self.earned_units + self.bank_units) / UNITS_PER_TOKEN
    }

    /// The tokens earned in the second.
    pub fn earned_tokens(&self) -> u64 {
        self.earned_units / UNITS_PER_TOKEN
    }

    /// The bank at the second's start, at most, in whole tokens.
    pub fn bank_tokens(&self) -> u64 {
        self.bank_units / UNITS_PER_TOKEN
    }
}

/// The allowance of `budget` (no reserve; a fixed cap, or a traffic-scaled
/// bank whose window is a second or a tenth of one, so that its windows
/// are the run's seconds or their tenths) in each second of a run of one
/// shared budget, from the run's per-second requests (one deposit each)
/// and hedges (one token each).
pub fn allowances(budget: &RatioBudget, per_second: &[Second]) -> Vec<Allowance> {
    let tenths = match budget.bank_window_ns() {
        None | Some(SEC) => false,
        Some(w) if w == SEC / 10 => true,
        Some(w) => panic!("a bank window of 1 s or 100 ms (or a fixed cap), not {w} ns"),
    };
    assert!(budget.reserve().is_none(), "no reserve");
    let share = u64::from(budget.share_bps());
    // The cap at the last deposit of second `t`: the share of the larger
    // count of that deposit's window and the one before, or the floor.
    let cap = |t: usize| match budget.bank_window_ns() {
        None => budget.floor_units(),
        Some(_) => {
            let s = &per_second[t];
            let before = t.checked_sub(1).map(|b| &per_second[b]);
            let (n, prior) = if tenths {
                // `s` has a deposit: some tenth is not empty.
                let j = s.by_tenth.iter().rposition(|&n| n > 0).unwrap_or(0);
                let prior = match j.checked_sub(1) {
                    Some(i) => s.by_tenth[i],
                    None => before.map_or(0, |b| b.by_tenth[9]),
                };
                (s.by_tenth[j], prior)
            } else {
                (s.requests, before.map_or(0, |b| b.requests))
            };
            budget.floor_units().max(share * n.max(prior))
        }
    };
    let (mut earned, mut spent) = (0u64, 0u64);
    // The cap of the latest deposit so far (the balance is at most that).
    let mut last_cap = 0;
    let mut out = Vec::with_capacity(per_second.len());
    for (t, s) in per_second.iter().enumerate() {
        let unspent = earned.saturating_sub(spent);
        out.push(Allowance {
            earned_units: share * s.requests,
            bank_units: last_cap.min(unspent),
        });
        earned += share * s.requests;
        spent += UNITS_PER_TOKEN * s.hedges;
        if s.requests > 0 {
            last_cap = cap(t);
        }
    }
    out
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
            &tight_row_name(),
            ours_with(
                HedgeConfig::DEFAULT,
                traffic_scaled(TIGHT_SHARE_BPS),
                Signal::Answer,
            ),
            &backend,
            w,
            seed,
        ),
        ours_row(
            &format!(
                "adaptive p90 (ours, {}, fixed cap {ARTICLE_FIXED_CAP} tokens)",
                default_share()
            ),
            ours_with(
                HedgeConfig::DEFAULT,
                fixed_cap(RatioBudget::DEFAULT_SHARE_BPS, ARTICLE_FIXED_CAP),
                Signal::Answer,
            ),
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
    /// The true attempt-latency p90 of each phase (ms, Monte Carlo).
    pub true_p90_ms: Vec<f64>,
    /// The oracle's sweep, where the scenario has an oracle row.
    pub sweep: Vec<SweepPoint>,
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

/// The Go reference's rotation period in the drift and outage scenarios
/// (its windows rotate on time alone; ours use the defaults).
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
    let adaptive = HedgeConfig::DEFAULT;
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

/// Every attempt is 10× slower during the middle of three phases. The
/// delay is sampled every 0.5 s; the last row is the oracle: the static
/// delay of `sweep` (none if empty) with the best whole-run p99.9, same
/// budget.
pub fn outage(phase_ns: u64, sweep: &[u64], seed: u64) -> Phased {
    let backend = Backend::article(0.05).with_slowdown(phase_ns, 2 * phase_ns, 10.0);
    let w = Workload::closed_loop(u64::MAX, WORKERS)
        .until(3 * phase_ns)
        .sample_every(SEC / 2);
    let adaptive = HedgeConfig::DEFAULT;
    let rows = vec![
        ours_row("no hedging", ours(no_hedging()), &backend, w, seed),
        ours_row("adaptive p90 (ours)", ours(adaptive), &backend, w, seed),
    ];
    let mut p = with_go_reference(rows, &backend, w, seed, phase_ns, "outage 10×");
    if !sweep.is_empty() {
        let setup = Setup::new(&backend, w, vec![seed]);
        let (best, sweep) = setup.oracle(|d| ours(static_delay(d)), sweep);
        p.rows.extend(best);
        p.sweep = sweep;
    }
    p.true_p90_ms = p
        .phases
        .iter()
        .map(|&(_, from, _)| backend.true_quantiles_ms(from, &[0.9], PLOT_TRUTH_DRAWS, seed)[0])
        .collect();
    p
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
        true_p90_ms: Vec::new(),
        sweep: Vec::new(),
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
    let full = || fixed_cap(10_000, 100);
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
            &format!(
                "first-token calibrated, default budget ({})",
                default_share()
            ),
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

/// A fixed cap that holds one round of fan-out deposits: every worker's
/// `n` primaries at the default share each (at least
/// [`RatioBudget::DEFAULT_MAX_TOKENS`]).
pub fn fan_out_cap(n: usize) -> u32 {
    let tokens =
        WORKERS as u64 * n as u64 * u64::from(RatioBudget::DEFAULT_SHARE_BPS) / UNITS_PER_TOKEN;
    u32::try_from(tokens)
        .unwrap_or(u32::MAX)
        .max(RatioBudget::DEFAULT_MAX_TOKENS)
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
                    &format!(
                        "adaptive p90 (ours, {}, fixed cap {} tokens)",
                        default_share(),
                        fan_out_cap(n)
                    ),
                    ours_with(
                        HedgeConfig::DEFAULT,
                        fixed_cap(RatioBudget::DEFAULT_SHARE_BPS, fan_out_cap(n)),
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

// ---------------------------------------------------------------------------
// Oracles: the best static delay of a sweep
// ---------------------------------------------------------------------------

/// Draws for the Monte Carlo "true" attempt-latency quantiles.
pub const TRUTH_DRAWS: usize = 1_000_000;

/// Draws for a true p90 that is only plotted (the outage's): its standard
/// error is already below 0.5 %.
pub const PLOT_TRUTH_DRAWS: usize = 100_000;

/// The static delays an oracle tries: 16 values log-spaced from 1 ms to
/// 200 ms, rounded to two significant digits (1.0, 1.4, 2.0, 2.9 … 140,
/// 200 ms).
pub fn sweep_delays() -> Vec<u64> {
    let (lo, hi, n) = (1.0_f64, 200.0_f64, 16);
    (0..n)
        .map(|i| {
            let ms = lo * (hi / lo).powf(f64::from(i) / f64::from(n - 1));
            let digits = 10f64.powf(ms.log10().floor() - 1.0);
            ((ms / digits).round() * digits * MS as f64).round() as u64
        })
        .collect()
}

/// A delay in ms as the tables print it: `1.4`, `12`, `140`.
pub fn ms_label(ns: u64) -> String {
    let ms = ns as f64 / MS as f64;
    if ms < 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

/// One static delay of an oracle's sweep.
#[derive(Clone, Copy, Debug)]
pub struct SweepPoint {
    /// The delay.
    pub delay_ns: u64,
    /// Its latency quantiles.
    pub q: Quantiles,
    /// Its hedges per request.
    pub extra_load: f64,
}

/// The index of the sweep's best point: lowest p99.9, ties by p99.
pub fn best_of(sweep: &[SweepPoint]) -> usize {
    let mut best = 0;
    for (i, p) in sweep.iter().enumerate() {
        let b = &sweep[best].q;
        if (p.q.p999, p.q.p99) < (b.p999, b.p99) {
            best = i;
        }
    }
    best
}

/// A backend, a workload and the seeds of the clients to pool (one seed:
/// one client).
pub struct Setup<'a> {
    /// The backend.
    pub backend: &'a Backend,
    /// The workload of each client.
    pub workload: Workload,
    /// One independent client (own hedger, own arrivals) per seed.
    pub seeds: Vec<u64>,
}

impl<'a> Setup<'a> {
    /// Clients with these seeds, each running `workload` on `backend`.
    pub fn new(backend: &'a Backend, workload: Workload, seeds: Vec<u64>) -> Self {
        Self {
            backend,
            workload,
            seeds,
        }
    }

    /// Runs a fresh client from `make` per seed; pools their outcomes and
    /// sums their counters.
    pub fn run<C: Client>(&self, name: &str, mut make: impl FnMut() -> C) -> Row {
        let mut pooled: Option<(Outcome, Option<HedgeStats>)> = None;
        for &seed in &self.seeds {
            let mut client = make();
            let outcome = simulate(&mut client, self.backend, self.workload, seed);
            let stats = client.stats();
            pooled = Some(match pooled {
                None => (outcome, stats),
                Some((mut o, s)) => {
                    o.pool(outcome);
                    (o, add_stats(s, stats))
                }
            });
        }
        let (outcome, stats) = pooled.unwrap_or_default();
        Row::new(name, outcome, stats)
    }

    /// Runs `make(delay)` for every delay of `delays`; returns the best
    /// one's row (lowest p99.9, ties by p99), named `oracle static X ms
    /// (best of sweep)`, and the whole sweep. The delay is chosen and
    /// scored on the same runs: an optimistic bound for any static delay.
    /// No row for an empty sweep.
    pub fn oracle<C: Client>(
        &self,
        make: impl Fn(u64) -> C,
        delays: &[u64],
    ) -> (Option<Row>, Vec<SweepPoint>) {
        let mut best: Option<Row> = None;
        let mut sweep = Vec::with_capacity(delays.len());
        for &d in delays {
            let name = format!("oracle static {} ms (best of sweep)", ms_label(d));
            let row = self.run(&name, || make(d));
            sweep.push(SweepPoint {
                delay_ns: d,
                q: row.q,
                extra_load: row.extra_load,
            });
            if best_of(&sweep) == sweep.len() - 1 {
                best = Some(row);
            }
        }
        (best, sweep)
    }
}

/// Counter sums of two clients (the first's current delay).
fn add_stats(a: Option<HedgeStats>, b: Option<HedgeStats>) -> Option<HedgeStats> {
    let (mut a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (a, b) => return a.or(b),
    };
    a.requests += b.requests;
    a.hedges_sent += b.hedges_sent;
    a.retries_released += b.retries_released;
    a.hedge_wins += b.hedge_wins;
    a.retry_wins += b.retry_wins;
    a.primary_wins += b.primary_wins;
    a.budget_denials += b.budget_denials;
    a.cold_starts += b.cold_starts;
    a.aggregate_delays += b.aggregate_delays;
    a.not_idempotent += b.not_idempotent;
    a.in_flight_limited += b.in_flight_limited;
    a.leases_expired += b.leases_expired;
    a.gave_up += b.gave_up;
    a.samples += b.samples;
    a.censored_samples += b.censored_samples;
    a.samples_refused += b.samples_refused;
    a.evictions += b.evictions;
    a.clock_anomalies += b.clock_anomalies;
    Some(a)
}

/// Seeds of `n` independent clients derived from `seed`.
pub fn client_seeds(seed: u64, n: usize) -> Vec<u64> {
    (0..n as u64)
        .map(|i| Rng::keyed(&[0x636c_6965_6e74, seed, i]).next_u64())
        .collect()
}

// ---------------------------------------------------------------------------
// low-rate: a client too quiet to fill its window
// ---------------------------------------------------------------------------

/// Requests per second of the low-rate client.
pub const LOW_RATE_PER_SEC: f64 = 0.5;
/// Virtual run time of each low-rate client.
pub const LOW_RATE_RUN_NS: u64 = 20 * 60 * SEC;
/// Requests before this time are the warm-up, left out of the data-driven
/// share.
pub const LOW_RATE_WARMUP_NS: u64 = 60 * SEC;
/// The prior of the "with a prior" row.
pub const LOW_RATE_PRIOR_NS: u64 = 10 * MS;

/// The low-rate scenario's results.
#[derive(Clone, Debug)]
pub struct LowRate {
    /// No hedging, adaptive (default), adaptive with a prior, oracle.
    pub rows: Vec<Row>,
    /// The oracle's sweep.
    pub sweep: Vec<SweepPoint>,
    /// Independent clients pooled.
    pub clients: usize,
}

impl LowRate {
    /// `row`'s share of requests after the first minute that got a delay
    /// from measured latency.
    pub fn data_driven(&self, row: &Row) -> f64 {
        data_driven_share(&row.outcome.users, LOW_RATE_WARMUP_NS)
    }
}

/// `clients` independent clients, each with its own hedger, sending Poisson
/// arrivals at 0.5 requests/s for 20 virtual minutes to the article backend
/// (lognormal 5/2 ms, 5 % of attempts ×10); their requests pooled.
pub fn low_rate(clients: usize, sweep: &[u64], seed: u64) -> LowRate {
    let backend = Backend::article(0.05);
    let w = Workload::open_loop(LOW_RATE_PER_SEC, LOW_RATE_RUN_NS);
    let setup = Setup::new(&backend, w, client_seeds(seed, clients.max(1)));
    let mut rows = vec![
        setup.run("no hedging", || ours(no_hedging())),
        setup.run("adaptive p90 (ours, default)", || {
            ours(HedgeConfig::DEFAULT)
        }),
        setup.run(
            &format!(
                "adaptive p90 (ours, prior {} ms)",
                ms_label(LOW_RATE_PRIOR_NS)
            ),
            || ours(HedgeConfig::DEFAULT.prior_delay_ns(LOW_RATE_PRIOR_NS)),
        ),
    ];
    let (best, sweep) = setup.oracle(|d| ours(static_delay(d)), sweep);
    rows.extend(best);
    LowRate {
        rows,
        sweep,
        clients: clients.max(1),
    }
}

// ---------------------------------------------------------------------------
// correlated: replicas with stop-the-world pauses
// ---------------------------------------------------------------------------

/// The correlated scenario's parameters.
#[derive(Clone, Copy, Debug)]
pub struct CorrelatedParams {
    /// Replicas behind the service.
    pub replicas: u32,
    /// Open-loop arrival rate.
    pub per_sec: f64,
    /// Length of each pause.
    pub pause_ns: u64,
    /// Mean gap between pauses on one replica.
    pub mean_gap_ns: u64,
    /// Run time.
    pub run_ns: u64,
}

impl CorrelatedParams {
    /// 4 replicas, 1000 requests/s, 50 ms pauses about every 2 s.
    pub fn new(run_ns: u64) -> Self {
        Self {
            replicas: 4,
            per_sec: 1_000.0,
            pause_ns: 50 * MS,
            mean_gap_ns: 2 * SEC,
            run_ns,
        }
    }
}

/// The correlated scenario's results.
#[derive(Clone, Debug)]
pub struct Correlated {
    /// Its parameters.
    pub params: CorrelatedParams,
    /// No hedging, adaptive (default), adaptive (10 % budget), oracle.
    pub rows: Vec<Row>,
    /// The oracle's sweep.
    pub sweep: Vec<SweepPoint>,
    /// The share of replica-time spent paused, over the run.
    pub paused_share: f64,
}

/// The backend of the correlated scenario: lognormal 5/2 ms with no
/// independent stragglers; each replica pauses on its own Poisson schedule.
pub fn correlated_backend(p: &CorrelatedParams, seed: u64) -> Backend {
    let horizon = p.run_ns + 60 * SEC;
    let replicas = (0..p.replicas)
        .map(|r| {
            let mut rng = Rng::keyed(&[0x6763, seed, u64::from(r)]);
            Replica {
                scale: 1.0,
                pauses: poisson_pauses(&mut rng, p.pause_ns, p.mean_gap_ns, horizon),
            }
        })
        .collect();
    Backend::article(0.0).with_replicas(replicas)
}

/// The correlated scenario's row with a one-second bank window.
pub const SECOND_BANK_ROW: &str = "adaptive p90 (ours, 15 %, bank of 1 s)";

/// Open-loop arrivals spread over replicas that each pause now and then; a
/// hedge goes to another replica than its primary.
pub fn correlated(params: CorrelatedParams, sweep: &[u64], seed: u64) -> Correlated {
    let backend = correlated_backend(&params, seed);
    let w = Workload::open_loop(params.per_sec, params.run_ns).routing(Routing::Spread);
    let setup = Setup::new(&backend, w, vec![seed]);
    let mut rows = vec![
        setup.run("no hedging", || ours(no_hedging())),
        setup.run("adaptive p90 (ours, default)", || {
            ours(HedgeConfig::DEFAULT)
        }),
        setup.run(&tight_row_name(), || {
            ours_with(
                HedgeConfig::DEFAULT,
                traffic_scaled(TIGHT_SHARE_BPS),
                Signal::Answer,
            )
        }),
        // A bank of a second's earnings: more hedges for a pause, and no
        // guard against load that slows the backend (see the budget docs).
        setup.run(SECOND_BANK_ROW, || {
            let budget = RatioBudget::with_bank_window(
                RatioBudget::DEFAULT_SHARE_BPS,
                RatioBudget::DEFAULT_FLOOR_TOKENS,
                SEC,
            )
            .expect("valid budget");
            ours_with(HedgeConfig::DEFAULT, Budget::Ratio(budget), Signal::Answer)
        }),
    ];
    let (best, sweep) = setup.oracle(|d| ours(static_delay(d)), sweep);
    rows.extend(best);
    let paused: u64 = backend
        .replicas
        .iter()
        .flat_map(|r| &r.pauses)
        .map(|&(a, b)| b.min(params.run_ns).saturating_sub(a))
        .sum();
    Correlated {
        params,
        rows,
        sweep,
        paused_share: paused as f64 / (params.run_ns as f64 * f64::from(params.replicas)),
    }
}

// ---------------------------------------------------------------------------
// heavy-tail: Pareto and bimodal backends
// ---------------------------------------------------------------------------

/// Open-loop rate of the heavy-tail runs.
pub const HEAVY_PER_SEC: f64 = 1_000.0;

/// A hedger's final delay against the true attempt-latency quantile.
#[derive(Clone, Debug)]
pub struct DelayVsTruth {
    /// The row.
    pub row: String,
    /// The quantile the hedger tracks.
    pub q: f64,
    /// Its delay when the run ended.
    pub delay_ns: Option<u64>,
    /// The true quantile of one attempt's latency (ms, Monte Carlo).
    pub true_ms: f64,
}

impl DelayVsTruth {
    /// delay ÷ truth.
    pub fn ratio(&self) -> Option<f64> {
        self.delay_ns.map(|d| d as f64 / MS as f64 / self.true_ms)
    }
}

/// One heavy-tailed backend's results.
#[derive(Clone, Debug)]
pub struct HeavyTail {
    /// Short name.
    pub name: &'static str,
    /// The model, in words.
    pub model: &'static str,
    /// No hedging, adaptive p90, adaptive p99, oracle.
    pub rows: Vec<Row>,
    /// The oracle's sweep.
    pub sweep: Vec<SweepPoint>,
    /// The adaptive rows' final delays against the truth.
    pub truth: Vec<DelayVsTruth>,
}

/// The heavy-tail backends: Pareto (α = 1.5, 2 ms minimum, capped at 10 s)
/// and bimodal (90 % lognormal(3, 1) ms, 10 % lognormal(40, 10) ms).
pub fn heavy_tail_backends() -> [(&'static str, &'static str, Backend); 2] {
    [
        (
            "pareto",
            "Pareto α = 1.5, minimum 2 ms, capped at 10 s",
            Backend::new(Latency::Pareto {
                shape: 1.5,
                scale_ms: 2.0,
                cap_ms: 10_000.0,
            }),
        ),
        (
            "bimodal",
            "90 % lognormal(3, 1) ms, 10 % lognormal(40, 10) ms",
            Backend::new(Latency::Bimodal {
                fast: LogNormal::from_mean_sd(3.0, 1.0),
                slow: LogNormal::from_mean_sd(40.0, 10.0),
                slow_prob: 0.10,
            }),
        ),
    ]
}

/// Each heavy-tailed backend under open-loop load for `run_ns`: no hedging,
/// adaptive at q = 0.9 and q = 0.99 (default budget), the oracle.
pub fn heavy_tail(run_ns: u64, sweep: &[u64], truth_draws: usize, seed: u64) -> Vec<HeavyTail> {
    heavy_tail_backends()
        .into_iter()
        .map(|(name, model, backend)| {
            heavy_tail_one(name, model, &backend, run_ns, sweep, truth_draws, seed)
        })
        .collect()
}

/// [`heavy_tail`] for one backend only.
pub fn heavy_tail_one(
    name: &'static str,
    model: &'static str,
    backend: &Backend,
    run_ns: u64,
    sweep: &[u64],
    truth_draws: usize,
    seed: u64,
) -> HeavyTail {
    let w = Workload::open_loop(HEAVY_PER_SEC, run_ns);
    let setup = Setup::new(backend, w, vec![seed]);
    let qs = [0.9, 0.99];
    let truths = backend.true_quantiles_ms(0, &qs, truth_draws, seed);
    let mut rows = vec![setup.run("no hedging", || ours(no_hedging()))];
    let mut truth = Vec::new();
    for (&q, &true_ms) in qs.iter().zip(&truths) {
        let label = format!("adaptive p{:.0} (ours)", q * 100.0);
        let r = setup.run(&label, || ours(HedgeConfig::DEFAULT.quantile(q)));
        truth.push(DelayVsTruth {
            row: label,
            q,
            delay_ns: r.outcome.final_delay_ns,
            true_ms,
        });
        rows.push(r);
    }
    let (best, sweep) = setup.oracle(|d| ours(static_delay(d)), sweep);
    rows.extend(best);
    HeavyTail {
        name,
        model,
        rows,
        sweep,
        truth,
    }
}

// ---------------------------------------------------------------------------
// step: the backend doubles its latency for good
// ---------------------------------------------------------------------------

/// When the step happens.
pub const STEP_AT_NS: u64 = 30 * SEC;
/// How much slower the backend is after it.
pub const STEP_FACTOR: f64 = 2.0;
/// How often the delay is sampled.
pub const STEP_SAMPLE_NS: u64 = SEC / 2;
/// The open-loop rate.
pub const STEP_PER_SEC: f64 = 1_000.0;

/// One adaptive row's delay against the truth, over time.
#[derive(Clone, Debug)]
pub struct Tracking {
    /// The row.
    pub row: String,
    /// `(t, delay, true p90)` every [`STEP_SAMPLE_NS`] (ns).
    pub series: Vec<(u64, Option<u64>, u64)>,
    /// After the step, when the delay first came within 10 % of the new
    /// true p90 (ns after the step).
    pub first_within_ns: Option<u64>,
    /// After the step, from when on it stayed within 10 % to the end.
    pub settled_ns: Option<u64>,
}

/// The step scenario's results.
#[derive(Clone, Debug)]
pub struct Step {
    /// When the step happened.
    pub at_ns: u64,
    /// Before and after the step; no hedging, then the adaptive rows.
    pub phased: Phased,
    /// The adaptive rows' tracking.
    pub tracking: Vec<Tracking>,
}

/// Open-loop load on the article backend; at `at_ns` ([`STEP_AT_NS`] in
/// the example) every attempt
/// becomes [`STEP_FACTOR`] times slower for the remaining `after_ns`.
/// Adaptive rows: the default config (rotation every 1 000 samples or
/// 30 s), and rotation on the 30 s period alone (the window before it
/// rotated on sample counts too).
pub fn step(at_ns: u64, after_ns: u64, truth_draws: usize, seed: u64) -> Step {
    let end = at_ns + after_ns;
    let backend = Backend::article(0.05).with_slowdown(at_ns, u64::MAX, STEP_FACTOR);
    let w = Workload::open_loop(STEP_PER_SEC, end).sample_every(STEP_SAMPLE_NS);
    let setup = Setup::new(&backend, w, vec![seed]);
    let truth = [0, at_ns].map(|at| {
        let ms = backend.true_quantiles_ms(at, &[0.9], truth_draws, seed)[0];
        (ms * MS as f64) as u64
    });
    let rows = vec![
        setup.run("no hedging", || ours(no_hedging())),
        setup.run(
            "adaptive p90 (ours, default: 1 000 samples or 30 s)",
            || ours(HedgeConfig::DEFAULT),
        ),
        setup.run("adaptive p90 (ours, 30 s rotation only)", || {
            ours(HedgeConfig::DEFAULT.rotation_samples(u64::MAX))
        }),
    ];
    let tracking = rows[1..]
        .iter()
        .map(|r| tracking(r, at_ns, truth))
        .collect();
    Step {
        at_ns,
        phased: Phased {
            phases: vec![
                ("before".to_owned(), 0, at_ns),
                (format!("after (×{STEP_FACTOR})"), at_ns, end),
            ],
            rows,
            go_rps: 0,
            true_p90_ms: truth.iter().map(|&t| t as f64 / MS as f64).collect(),
            sweep: Vec::new(),
        },
        tracking,
    }
}

fn tracking(row: &Row, at_ns: u64, truth: [u64; 2]) -> Tracking {
    let series: Vec<(u64, Option<u64>, u64)> = row
        .outcome
        .delay_series
        .iter()
        .map(|&(t, d)| (t, d, truth[usize::from(t >= at_ns)]))
        .collect();
    let within = |&(_, d, truth): &(u64, Option<u64>, u64)| {
        d.is_some_and(|d| (d as f64 / truth as f64 - 1.0).abs() <= 0.10)
    };
    let after: Vec<_> = series.iter().filter(|s| s.0 >= at_ns).collect();
    let first_within_ns = after.iter().find(|s| within(s)).map(|s| s.0 - at_ns);
    let settled_ns = match after.iter().rposition(|s| !within(s)) {
        None => after.first().map(|s| s.0 - at_ns),
        Some(i) => after.get(i + 1).map(|s| s.0 - at_ns),
    };
    Tracking {
        row: row.name.clone(),
        series,
        first_within_ns,
        settled_ns,
    }
}

// ---------------------------------------------------------------------------
// many-targets: more targets than table slots
// ---------------------------------------------------------------------------

/// Targets of the many-targets scenario.
pub const MANY_TARGETS: u32 = 16;
/// The hot key's share.
pub const HOT_SHARE: f64 = 0.5;
/// Table slots of the constrained hedger.
pub const SLOTS: usize = 4;
/// The open-loop rate.
pub const MANY_PER_SEC: f64 = 1_000.0;

/// Target `k`'s latency multiplier: 1, 1.5, 2, 2.5, 1, 1.5 … (the hot key
/// is the fastest).
pub fn target_scale(k: u32) -> f64 {
    1.0 + 0.5 * f64::from(k % 4)
}

/// The many-targets scenario's results.
#[derive(Clone, Debug)]
pub struct ManyTargets {
    /// Who goes where.
    pub popularity: Popularity,
    /// No hedging, adaptive with 4 slots, adaptive with 16, oracle.
    pub rows: Vec<Row>,
    /// The oracle's sweep.
    pub sweep: Vec<SweepPoint>,
}

impl ManyTargets {
    /// `row`'s share of requests (to the hot key if `hot`, to the others
    /// otherwise) that got a delay from measured latency (the target's own
    /// or the aggregate's).
    pub fn data_driven(&self, row: &Row, hot: bool) -> f64 {
        data_driven_share(&Self::users(row, hot), 0)
    }

    /// `row`'s share of requests (to the hot key if `hot`, to the others
    /// otherwise) whose delay came from the aggregate window.
    pub fn aggregate_share(&self, row: &Row, hot: bool) -> f64 {
        origin_share(&Self::users(row, hot), 0, |o| o == DelayOrigin::Aggregate)
    }

    fn users(row: &Row, hot: bool) -> Vec<UserRecord> {
        row.outcome
            .users
            .iter()
            .filter(|u| (u.target == 0) == hot)
            .copied()
            .collect()
    }
}

/// A keyed client of ours with `T` table slots and the default budget.
pub fn ours_keyed<const T: usize>(config: HedgeConfig) -> Ours<u32, Budget, T> {
    Ours::with_budget(config, Budget::default(), Signal::Answer)
}

/// 16 targets (one hot key with half the requests, the rest Zipf), each its
/// own backend with the article's latency times [`target_scale`]; a hedger
/// keyed by target with 4 table slots, one with 16 (every target fits),
/// all sharing the default budget.
pub fn many_targets(run_ns: u64, sweep: &[u64], seed: u64) -> ManyTargets {
    let popularity = Popularity::HotZipf {
        n: MANY_TARGETS,
        hot_share: HOT_SHARE,
    };
    let backend = Backend::article(0.05).with_replicas(
        (0..MANY_TARGETS)
            .map(|k| Replica::scaled(target_scale(k)))
            .collect(),
    );
    let w = Workload::open_loop(MANY_PER_SEC, run_ns).popularity(popularity);
    let setup = Setup::new(&backend, w, vec![seed]);
    let mut rows = vec![
        setup.run("no hedging", || ours_keyed::<SLOTS>(no_hedging())),
        setup.run(&format!("adaptive p90 (ours, T = {SLOTS} slots)"), || {
            ours_keyed::<SLOTS>(HedgeConfig::DEFAULT)
        }),
        setup.run("adaptive p90 (ours, T = 16 slots)", || {
            ours_keyed::<16>(HedgeConfig::DEFAULT)
        }),
    ];
    let (best, sweep) = setup.oracle(|d| ours_keyed::<SLOTS>(static_delay(d)), sweep);
    rows.extend(best);
    ManyTargets {
        popularity,
        rows,
        sweep,
    }
}

// ---------------------------------------------------------------------------
// failures: attempts that fail fast, and caller retries
// ---------------------------------------------------------------------------

/// Share of attempts that fail fast.
pub const FAIL_PROB: f64 = 0.20;
/// Mean time to a fast failure (ms); its standard deviation is a fifth.
pub const FAIL_AFTER_MS: f64 = 1.0;
/// Tries per user request: the first and up to two caller retries.
pub const CALLER_TRIES: u32 = 3;
/// The open-loop rate.
pub const FAILURES_PER_SEC: f64 = 1_000.0;

/// The failures scenario's results.
#[derive(Clone, Debug)]
pub struct Failures {
    /// Run time.
    pub run_ns: u64,
    /// No hedging (caller retries only), adaptive with retryable failures,
    /// adaptive with fatal failures, adaptive with retryable failures and
    /// no budget limit, oracle (retryable).
    pub rows: Vec<Row>,
    /// The oracle's sweep.
    pub sweep: Vec<SweepPoint>,
}

/// The failures backend: the article's (lognormal 5/2 ms, 5 % of attempts
/// ×10), [`FAIL_PROB`] of attempts failing after about [`FAIL_AFTER_MS`].
pub fn failures_backend() -> Backend {
    Backend::article(0.05).with_fast_failures(
        FAIL_PROB,
        LogNormal::from_mean_sd(FAIL_AFTER_MS, FAIL_AFTER_MS / 5.0),
    )
}

/// The diagnostic row: retryable failures, no budget limit (what the
/// budget costs the retryable row).
pub const UNLIMITED_RETRYABLE_ROW: &str =
    "adaptive p90, failures retryable, no budget limit (ours)";

/// The name of the row reporting failures as `failure`.
pub fn failure_row_name(failure: Failure) -> &'static str {
    match failure {
        Failure::Retryable => "adaptive p90, failures retryable (ours)",
        Failure::Fatal => "adaptive p90, failures fatal (ours)",
    }
}

/// Open-loop load for `run_ns` on [`failures_backend`]; a request the
/// client gives up is retried by the caller, up to [`CALLER_TRIES`] tries.
/// Rows: no hedging (caller retries only); adaptive p90 (default budget)
/// reporting failures as [`Failure::Retryable`] (the hedger releases the
/// next attempt at once) and as [`Failure::Fatal`] (the request ends);
/// retryable again with [`Budget::Unlimited`], to separate what the budget
/// costs; the oracle static delay (retryable, default budget).
pub fn failures(run_ns: u64, sweep: &[u64], seed: u64) -> Failures {
    let backend = failures_backend();
    let w = Workload::open_loop(FAILURES_PER_SEC, run_ns).tries(CALLER_TRIES);
    let setup = Setup::new(&backend, w, vec![seed]);
    let mut rows = vec![
        setup.run("no hedging (caller retries only)", || ours(no_hedging())),
        setup.run(failure_row_name(Failure::Retryable), || {
            ours(HedgeConfig::DEFAULT).reporting(Failure::Retryable)
        }),
        setup.run(failure_row_name(Failure::Fatal), || {
            ours(HedgeConfig::DEFAULT).reporting(Failure::Fatal)
        }),
        setup.run(UNLIMITED_RETRYABLE_ROW, || {
            ours_with(HedgeConfig::DEFAULT, Budget::Unlimited, Signal::Answer)
                .reporting(Failure::Retryable)
        }),
    ];
    let (best, sweep) = setup.oracle(
        |d| ours(static_delay(d)).reporting(Failure::Retryable),
        sweep,
    );
    rows.extend(best);
    Failures {
        run_ns,
        rows,
        sweep,
    }
}

// ---------------------------------------------------------------------------
// overload: a backend whose latency rises with its load
// ---------------------------------------------------------------------------

/// Attempts a second at which the overload runs' backend saturates.
pub const OVERLOAD_CAPACITY: f64 = 10_000.0;

/// The overload scenario's cap on hedges in flight: a few milliseconds of
/// the share's hedges at the capacity (15 % of 10 000 a second is 1.5 a
/// millisecond).
pub const OVERLOAD_IN_FLIGHT: u32 = 8;

/// The name of the overload row with the default budget and at most `n`
/// hedges in flight ([`OVERLOAD_IN_FLIGHT`], and twice that: a cap sized
/// too large).
pub fn in_flight_row(n: u32) -> String {
    let hedges = if n == 1 { "hedge" } else { "hedges" };
    format!("adaptive p90 (ours, default, ≤ {n} {hedges} in flight)")
}

/// The overload runs' backend: lognormal (median 2 ms, σ ≈ 0.3), 3 % of
/// attempts ×8, stretched by `1 / (1 − ρ)` for the attempts sent in the
/// last 100 ms against [`OVERLOAD_CAPACITY`].
pub fn overload_backend() -> Backend {
    Backend::new(Latency::Plain {
        base: LogNormal::from_mean_sd(2.1, 0.64),
        slow_prob: 0.03,
        slow_factor: 8.0,
    })
    .with_load(LoadSensitivity {
        capacity_per_sec: OVERLOAD_CAPACITY,
        window_ns: 100 * MS,
    })
}

/// One utilisation's runs.
#[derive(Clone, Debug)]
pub struct Overload {
    /// Primaries a second over the capacity.
    pub utilisation: f64,
    /// No hedging, then our rows.
    pub rows: Vec<Row>,
}

/// Open loop at each of `utilisations` of the backend's capacity for
/// `run_ns`: no hedging, and adaptive p90 with the default budget, with a
/// bank of a second's earnings, with a fixed cap of 10 tokens, and with the
/// default budget and at most [`OVERLOAD_IN_FLIGHT`] hedges in flight, and
/// twice that.
pub fn overload(utilisations: &[f64], run_ns: u64, seed: u64) -> Vec<Overload> {
    let backend = overload_backend();
    utilisations
        .iter()
        .map(|&u| {
            let w = Workload::open_loop(u * OVERLOAD_CAPACITY, run_ns);
            let second_bank = || {
                Budget::Ratio(
                    RatioBudget::with_bank_window(
                        RatioBudget::DEFAULT_SHARE_BPS,
                        RatioBudget::DEFAULT_FLOOR_TOKENS,
                        SEC,
                    )
                    .expect("valid budget"),
                )
            };
            let run = |name: &str, client: Ours| ours_row(name, client, &backend, w, seed);
            Overload {
                utilisation: u,
                rows: vec![
                    run("no hedging", ours(no_hedging())),
                    run("adaptive p90 (ours, default)", ours(HedgeConfig::DEFAULT)),
                    run(
                        SECOND_BANK_ROW,
                        ours_with(HedgeConfig::DEFAULT, second_bank(), Signal::Answer),
                    ),
                    run(
                        "adaptive p90 (ours, 15 %, fixed cap 10 tokens)",
                        ours_with(
                            HedgeConfig::DEFAULT,
                            fixed_cap(RatioBudget::DEFAULT_SHARE_BPS, 10),
                            Signal::Answer,
                        ),
                    ),
                    run(
                        &in_flight_row(OVERLOAD_IN_FLIGHT),
                        ours(HedgeConfig::DEFAULT.max_hedges_in_flight(OVERLOAD_IN_FLIGHT)),
                    ),
                    run(
                        &in_flight_row(2 * OVERLOAD_IN_FLIGHT),
                        ours(HedgeConfig::DEFAULT.max_hedges_in_flight(2 * OVERLOAD_IN_FLIGHT)),
                    ),
                ],
            }
        })
        .collect()
}

/// Replicas of the queued scenario's backend.
pub const QUEUED_REPLICAS: u32 = 4;

/// The queued scenario's backend: [`QUEUED_REPLICAS`] replicas, each a FIFO
/// single server ([`Backend::queued`]) whose service time is lognormal
/// (mean 2.1 ms, median 2 ms), 3 % of attempts ×8.
pub fn queued_backend() -> Backend {
    queued_backend_with(OnCancel::Kept)
}

/// [`queued_backend`] whose servers treat a cancelled attempt as
/// `on_cancel` says.
pub fn queued_backend_with(on_cancel: OnCancel) -> Backend {
    Backend::new(Latency::Plain {
        base: LogNormal::from_mean_sd(2.1, 0.64),
        slow_prob: 0.03,
        slow_factor: 8.0,
    })
    .with_replicas(vec![Replica::scaled(1.0); QUEUED_REPLICAS as usize])
    .queued_with(on_cancel)
}

/// Attempts a second the queued backend serves at most: its replicas over
/// the mean service time, 2.1 ms × (0.97 + 0.03 × 8) = 2.541 ms.
pub const QUEUED_CAPACITY: f64 = QUEUED_REPLICAS as f64 * 1_000.0 / 2.541;

/// Open loop at each of `utilisations` of [`QUEUED_CAPACITY`] for `run_ns`,
/// each request's primary on a random replica: no hedging, then adaptive
/// p90 with the default budget, alone and with at most one hedge in
/// flight, its hedge on another random replica ([`Routing::Spread`]) and
/// on the next one ([`Routing::Next`]); then the default on servers that
/// take a cancelled attempt off their queue ([`OnCancel::Dequeued`]) and
/// that also stop its service ([`OnCancel::Stopped`]).
pub fn queued(utilisations: &[f64], run_ns: u64, seed: u64) -> Vec<Overload> {
    let backend = queued_backend();
    let dequeued = queued_backend_with(OnCancel::Dequeued);
    let stopped = queued_backend_with(OnCancel::Stopped);
    utilisations
        .iter()
        .map(|&u| {
            let w = Workload::open_loop(u * QUEUED_CAPACITY, run_ns);
            let run = |name: &str, routing: Routing, config: HedgeConfig| {
                ours_row(name, ours(config), &backend, w.routing(routing), seed)
            };
            let told = |name: &str, backend: &Backend| {
                let config = HedgeConfig::DEFAULT;
                ours_row(
                    name,
                    ours(config),
                    backend,
                    w.routing(Routing::Spread),
                    seed,
                )
            };
            let one = HedgeConfig::DEFAULT.max_hedges_in_flight(1);
            Overload {
                utilisation: u,
                rows: vec![
                    run("no hedging", Routing::Spread, no_hedging()),
                    run(
                        "adaptive p90 (ours, default)",
                        Routing::Spread,
                        HedgeConfig::DEFAULT,
                    ),
                    run(&in_flight_row(1), Routing::Spread, one),
                    run(QUEUED_NEXT_ROW, Routing::Next, HedgeConfig::DEFAULT),
                    run(QUEUED_NEXT_CAPPED_ROW, Routing::Next, one),
                    told(QUEUED_DEQUEUED_ROW, &dequeued),
                    told(QUEUED_STOPPED_ROW, &stopped),
                ],
            }
        })
        .collect()
}

/// The queued scenario's row whose hedges go to the replica after the
/// primary's.
pub const QUEUED_NEXT_ROW: &str = "adaptive p90 (ours, default), hedge to the next replica";

/// [`QUEUED_NEXT_ROW`] with at most one hedge in flight.
pub const QUEUED_NEXT_CAPPED_ROW: &str =
    "adaptive p90 (ours, default, ≤ 1 hedge in flight), hedge to the next replica";

/// The queued scenario's default row on servers that take a cancelled
/// attempt off their queue.
pub const QUEUED_DEQUEUED_ROW: &str =
    "adaptive p90 (ours, default), the server drops a cancelled attempt it has not started";

/// The queued scenario's default row on servers that also stop a
/// cancelled attempt's service.
pub const QUEUED_STOPPED_ROW: &str =
    "adaptive p90 (ours, default), the server drops a cancelled attempt, started or not";
