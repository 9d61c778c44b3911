//! The headline properties of `cargo run --example simulate`, on reduced
//! runs: hedging cuts the tail, the default budget's exact bound holds
//! (during an outage too), first-token calibration is cheaper than header
//! calibration, fan-out amplifies stragglers as predicted; the engine and
//! the scenarios with oracle rows behave as documented (pauses stall
//! attempts, hedges change replica, open-loop runs share their random
//! draws, an oracle is the best of its sweep, failures are retried); and
//! the production-traffic requirements on the hedger's estimate, with
//! defaults: near the oracle under correlated pauses and with many
//! targets, the true p90 of a Pareto tail, data-driven delays at low rate,
//! a step followed within 5 s. Properties, not exact numbers.

#[path = "../examples/simulate/engine.rs"]
mod engine;
#[path = "../examples/simulate/scenarios.rs"]
mod scenarios;

use engine::{
    quantiles, simulate, Backend, DelayOrigin, Latency, OnCancel, Replica, Routing, Workload, MS,
    SEC,
};
use scenarios::{best_of, ours, ours_with, static_delay, Row, SweepPoint};
use tailguard::budget::{RatioBudget, UNITS_PER_TOKEN};
use tailguard::hedge::{Failure, HedgeConfig};

const SEED: u64 = 7;

fn by_name<'a>(rows: &'a [Row], prefix: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row {prefix:?}"))
}

/// The default budget's share, in basis points.
const SHARE: u64 = RatioBudget::DEFAULT_SHARE_BPS as u64;

/// `hedges × 10 000 ≤ requests × share_bps`: the exact bound of a ratio
/// budget over a whole run (it starts empty, so no bank is added).
fn assert_within_share(r: &Row, share_bps: u64) {
    let o = &r.outcome;
    assert!(
        o.hedges * UNITS_PER_TOKEN <= o.requests * share_bps,
        "{}: {} hedges for {} requests at {share_bps} bp",
        r.name,
        o.hedges,
        o.requests
    );
}

#[test]
fn article_hedging_cuts_p99_within_budget() {
    let a = scenarios::article(5_000, SEED);
    let none = by_name(&a.rows, "no hedging");
    let adaptive = by_name(&a.rows, "adaptive p90 (ours, default)");
    let tight = by_name(&a.rows, &scenarios::tight_row_name());
    let fixed = by_name(&a.rows, "static 10 ms");
    // No hedging: a 5 % share of ×10 stragglers puts p99 far above p90.
    assert!(none.q.p99 > 4.0 * none.q.p90, "{:?}", none.q);
    assert_eq!(none.extra_load, 0.0);
    // Adaptive p90 cuts p99 by well over half (74 % on the full run).
    assert!(
        adaptive.q.p99 < 0.5 * none.q.p99,
        "{:?} vs {:?}",
        adaptive.q,
        none.q
    );
    assert!(fixed.q.p99 < 0.5 * none.q.p99);
    // Our rows' budgets: 15 % by default (the fixed-cap row too), 10 % for
    // the tight row; hedges ≤ share × requests exactly, as every budget
    // starts empty. (The Go reference's rows have their own bucket.)
    assert_eq!(none.outcome.hedges, 0);
    for r in a.rows.iter().filter(|r| r.name.starts_with("static")) {
        assert_within_share(r, SHARE);
    }
    assert_within_share(adaptive, SHARE);
    let fixed_cap = format!(
        "adaptive p90 (ours, {}, fixed cap",
        scenarios::default_share()
    );
    assert_within_share(by_name(&a.rows, &fixed_cap), SHARE);
    assert_within_share(tight, u64::from(scenarios::TIGHT_SHARE_BPS));
    assert!(adaptive.extra_load > 0.05, "{}", adaptive.extra_load);
    // The headroom: a 10 % budget refuses more hedges than the default.
    let denials = |r: &Row| r.stats.expect("ours").budget_denials;
    assert!(
        denials(tight) > denials(adaptive),
        "{} vs {}",
        denials(tight),
        denials(adaptive)
    );
    // The median is untouched.
    assert!((adaptive.q.p50 - none.q.p50).abs() < 0.5);
}

#[test]
fn outage_hedges_stay_within_the_ratio_budget_and_resume() {
    let phase = 2 * SEC;
    let p = scenarios::outage(phase, &[], SEED);
    let ours = by_name(&p.rows, "adaptive p90");
    let secs = &ours.outcome.per_second;
    let budget = RatioBudget::default();
    let floor = budget.floor_units();
    // At every prefix of the run: hedges × 10 000 ≤ requests × 1 500 (+ the
    // bank at the start, which is empty). The largest cap the bank could
    // have reached by then, max(floor, 1 500 × the most requests in a
    // second), bounds any stretch that does not start empty.
    let (mut req, mut hedges, mut largest_cap) = (0, 0, floor);
    for s in secs {
        req += s.requests;
        hedges += s.hedges;
        largest_cap = largest_cap.max(SHARE * s.requests);
        assert!(
            hedges * UNITS_PER_TOKEN <= req * SHARE,
            "{hedges} hedges for {req} requests"
        );
        assert!(hedges * UNITS_PER_TOKEN <= req * SHARE + largest_cap);
    }
    // Every second: hedges ≤ what the default budget allows, 15 % of the
    // second's requests plus the bank it started with.
    let allowances = scenarios::allowances(&budget, secs);
    for (t, (s, a)) in secs.iter().zip(&allowances).enumerate() {
        assert!(s.hedges <= a.tokens(), "second {t}: {s:?} > {a:?}");
    }
    // During the outage: 15 % of its requests plus at most the largest cap
    // reached before it (a second's earnings of the busy phase bound it:
    // the default banks 100 ms of them).
    let (from, until) = ((phase / SEC) as usize, (2 * phase / SEC) as usize);
    let cap_before = secs[..from]
        .iter()
        .map(|s| SHARE * s.requests)
        .fold(floor, u64::max);
    let (out_req, out_hedges) = secs[from..until]
        .iter()
        .fold((0, 0), |(r, h), s| (r + s.requests, h + s.hedges));
    assert!(
        out_hedges * UNITS_PER_TOKEN <= out_req * SHARE + cap_before,
        "{out_hedges} hedges for {out_req} requests in the outage"
    );
    // … and it is the bank, not the share, that pays for more than 15 %.
    let (share, bank) = (SHARE as f64 / 1e4, cap_before as f64 / 1e4);
    assert!(p.extra_load(ours, 1) <= share + bank / out_req as f64);
    // Hedging resumes once the backend recovers.
    let last = ours.outcome.per_second.len() - 2;
    assert!(ours.outcome.per_second[last].hedges > 0);
    // The Go reference's time-refilled bucket ignores the traffic drop.
    let go = by_name(&p.rows, "Go reference");
    assert!(p.extra_load(go, 1) > p.extra_load(ours, 1));
}

#[test]
fn drift_adaptive_follows_the_slow_regime() {
    let p = scenarios::drift(4 * SEC, SEED);
    let none = by_name(&p.rows, "no hedging");
    let adaptive = by_name(&p.rows, "adaptive p90");
    for phase in 0..3 {
        assert!(
            p.quantiles(adaptive, phase).p99 < p.quantiles(none, phase).p99,
            "phase {phase}"
        );
    }
}

#[test]
fn first_token_calibration_is_cheaper_than_header_calibration() {
    let rows = scenarios::streaming(5_000, SEED);
    let none = by_name(&rows, "no hedging");
    let token = by_name(&rows, "first-token calibrated (ours)");
    let header = by_name(&rows, "header-calibrated");
    // Header calibration hedges (nearly) every request.
    assert!(header.extra_load > 0.9, "{}", header.extra_load);
    // First-token calibration hedges about the 20 % cache misses.
    assert!(
        (0.12..0.30).contains(&token.extra_load),
        "{}",
        token.extra_load
    );
    assert!(token.extra_load < 0.5 * header.extra_load);
    // And it cuts the time to first token where the misses are.
    assert!(token.q.p90 < 0.5 * none.q.p90, "{:?}", token.q);
}

#[test]
fn fan_out_amplifies_stragglers_as_predicted_and_hedging_helps() {
    let f = &scenarios::fan_out(&[10], 20_000, SEED)[0];
    assert!(
        (f.measured_any_slow - f.predicted_any_slow()).abs() < 0.03,
        "{} vs {}",
        f.measured_any_slow,
        f.predicted_any_slow()
    );
    let none = by_name(&f.rows, "no hedging");
    let best = f.rows.last().expect("rows");
    assert!(best.q.p95 < none.q.p95, "{:?} vs {:?}", best.q, none.q);
}

#[test]
fn runs_are_deterministic_and_seed_dependent() {
    let backend = Backend::article(0.05);
    let w = Workload::closed_loop(2_000, 20);
    let run = |seed| {
        let mut c = ours(HedgeConfig::DEFAULT);
        let o = simulate(&mut c, &backend, w, seed);
        (
            o.hedges,
            o.busy_ns,
            o.users.iter().map(|u| u.latency_ns).sum::<u64>(),
        )
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
    // A budget that never grants: no hedges at all.
    let mut c = ours_with(
        HedgeConfig::DEFAULT,
        tailguard::Budget::Never,
        engine::Signal::Answer,
    );
    assert_eq!(simulate(&mut c, &backend, w, 1).hedges, 0);
}

/// A short sweep for the oracle rows (the example uses 16 delays).
const SWEEP: [u64; 4] = [2 * MS, 8 * MS, 20 * MS, 60 * MS];

/// The oracle row is the sweep's best point: lowest p99.9, ties by p99;
/// no point of the sweep beats it.
fn assert_oracle(rows: &[Row], sweep: &[SweepPoint]) {
    let oracle = by_name(rows, "oracle static");
    assert_eq!(sweep.len(), SWEEP.len());
    let best = &sweep[best_of(sweep)];
    assert_eq!(oracle.q.p999, best.q.p999);
    assert_eq!(oracle.q.p99, best.q.p99);
    assert!(oracle.name.contains(&scenarios::ms_label(best.delay_ns)));
    for p in sweep {
        assert!(
            (p.q.p999, p.q.p99) >= (oracle.q.p999, oracle.q.p99),
            "{p:?} beats {:?}",
            oracle.q
        );
    }
}

#[test]
fn a_pause_stalls_every_attempt_on_its_replica() {
    let r = Replica {
        scale: 1.0,
        pauses: vec![(10, 20), (25, 30)],
    };
    assert_eq!(r.finish(0, 5), 5); // done before the pause
    assert_eq!(r.finish(0, 10), 10); // done as it starts
    assert_eq!(r.finish(5, 10), 25); // in flight: 5 before, 10 idle, 5 after
    assert_eq!(r.finish(12, 3), 23); // sent during the pause: after it ends
    assert_eq!(r.finish(12, 8), 33); // … and caught by the next one
    assert_eq!(r.finish(40, 7), 47); // after every pause
}

#[test]
fn sweep_delays_are_log_spaced_from_1_to_200_ms() {
    let d = scenarios::sweep_delays();
    assert_eq!(d.len(), 16);
    assert_eq!((d[0], d[15]), (MS, 200 * MS));
    assert!(d.windows(2).all(|w| w[1] > w[0]));
}

#[test]
fn open_loop_arrivals_are_poisson_and_shared_by_every_strategy() {
    let backend = Backend::article(0.05);
    let w = Workload::open_loop(1_000.0, 3 * SEC);
    let none = simulate(&mut ours(scenarios::no_hedging()), &backend, w, SEED);
    let hedged = simulate(&mut ours(static_delay(5 * MS)), &backend, w, SEED);
    // About 3000 arrivals (sd ≈ 55).
    assert!(
        (2_800..3_200).contains(&none.users.len()),
        "{}",
        none.users.len()
    );
    assert!(hedged.hedges > 0);
    // Same arrivals whatever the hedging (common random numbers) …
    let starts = |o: &engine::Outcome| {
        let mut v: Vec<u64> = o.users.iter().map(|u| u.start_ns).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(starts(&none), starts(&hedged));
    // … and a hedge only ever makes a request faster.
    assert!(quantiles(&hedged.users).p99 <= quantiles(&none.users).p99);
    // Deterministic in the seed.
    let again = simulate(&mut ours(static_delay(5 * MS)), &backend, w, SEED);
    assert_eq!(starts(&again), starts(&hedged));
    assert_eq!(again.busy_ns, hedged.busy_ns);
}

#[test]
fn a_hedge_goes_to_another_replica_than_its_primary() {
    // Replica 0 is 1000× slower than replica 1. With two replicas, a hedge
    // must go to the other one: requests whose primary is stuck on replica
    // 0 are rescued by replica 1, and none waits for replica 0.
    let backend = Backend::new(Latency::Plain {
        base: engine::LogNormal::from_mean_sd(5.0, 1.0),
        slow_prob: 0.0,
        slow_factor: 1.0,
    })
    .with_replicas(vec![Replica::scaled(1_000.0), Replica::scaled(1.0)]);
    let w = Workload::open_loop(200.0, 2 * SEC).routing(Routing::Spread);
    let mut client = ours_with(
        static_delay(20 * MS),
        scenarios::fixed_cap(10_000, 1_000),
        engine::Signal::Answer,
    );
    let o = simulate(&mut client, &backend, w, SEED);
    let q = quantiles(&o.users);
    // About half the primaries went to the slow replica and were hedged.
    assert!((0.35..0.65).contains(&o.extra_load()), "{}", o.extra_load());
    // The slowest request took the delay plus a fast attempt, far below
    // the slow replica's ≥ 2 s.
    assert!(q.p999 < 100.0, "{q:?}");
}

#[test]
fn correlated_adaptive_beats_no_hedging_and_the_oracle_is_its_sweeps_best() {
    let c = scenarios::correlated(scenarios::CorrelatedParams::new(4 * SEC), &SWEEP, SEED);
    assert!(c.paused_share > 0.0 && c.paused_share < 0.2);
    let none = by_name(&c.rows, "no hedging");
    let adaptive = by_name(&c.rows, "adaptive p90");
    assert!(adaptive.q.p999.is_finite());
    assert!(
        adaptive.q.p999 < none.q.p999,
        "{:?} vs {:?}",
        adaptive.q,
        none.q
    );
    assert_eq!(none.extra_load, 0.0);
    assert_oracle(&c.rows, &c.sweep);
    // Every row served the same arrivals.
    assert!(c.rows.iter().all(|r| r.q.count == none.q.count));
}

#[test]
fn low_rate_reports_where_delays_came_from() {
    let l = scenarios::low_rate(2, &SWEEP, SEED);
    assert_eq!(l.clients, 2);
    let none = by_name(&l.rows, "no hedging");
    // Two clients × 20 min × 0.5/s ≈ 1200 requests, pooled.
    assert!((1_000..1_400).contains(&none.q.count), "{}", none.q.count);
    for r in &l.rows {
        let share = l.data_driven(r);
        assert!((0.0..=1.0).contains(&share), "{}: {share}", r.name);
    }
    // Without hedging, and with a static delay, no delay is data-driven.
    assert_eq!(l.data_driven(none), 0.0);
    assert_eq!(l.data_driven(by_name(&l.rows, "oracle static")), 0.0);
    assert!(by_name(&l.rows, "oracle static")
        .outcome
        .users
        .iter()
        .all(|u| u.origin == DelayOrigin::Prior));
    assert_oracle(&l.rows, &l.sweep);
}

#[test]
fn heavy_tail_truth_matches_the_models_and_ratios_are_reported() {
    let h = scenarios::heavy_tail(2 * SEC, &SWEEP, 200_000, SEED);
    assert_eq!(h.len(), 2);
    // Pareto(α = 1.5, 2 ms): the q-quantile is 2 ms × (1 − q)^(−1/α).
    let pareto = &h[0];
    for t in &pareto.truth {
        let exact = 2.0 * (1.0 - t.q).powf(-1.0 / 1.5);
        assert!((t.true_ms / exact - 1.0).abs() < 0.05, "{t:?} vs {exact}");
    }
    for b in &h {
        assert_eq!(b.truth.len(), 2);
        for t in &b.truth {
            by_name(&b.rows, &t.row);
            if let Some(r) = t.ratio() {
                assert!(r.is_finite() && r > 0.0, "{t:?}");
            }
        }
        assert_oracle(&b.rows, &b.sweep);
    }
}

#[test]
fn step_produces_the_delay_series_against_the_truth() {
    let s = scenarios::step(3 * SEC, 3 * SEC, 200_000, SEED);
    let truth = &s.phased.true_p90_ms;
    // The backend doubles: so does its true p90.
    assert!((truth[1] / truth[0] - 2.0).abs() < 0.1, "{truth:?}");
    assert_eq!(s.tracking.len(), 2);
    for t in &s.tracking {
        // One sample every 0.5 s over the 6 s run.
        assert_eq!(t.series.len(), 12, "{}", t.row);
        assert!(t.series.windows(2).all(|w| w[1].0 == w[0].0 + SEC / 2));
        for &(at, _, true_ns) in &t.series {
            let phase = usize::from(at >= 3 * SEC);
            assert!((true_ns as f64 / MS as f64 - truth[phase]).abs() < 0.01);
        }
        // Once warm, the hedger has a delay at every sample.
        assert!(t.series.iter().skip(2).all(|s| s.1.is_some()), "{}", t.row);
    }
}

#[test]
fn many_targets_evict_with_four_slots_and_not_with_sixteen() {
    let m = scenarios::many_targets(2 * SEC, &SWEEP, SEED);
    let evictions = |prefix| by_name(&m.rows, prefix).stats.expect("ours").evictions;
    assert!(evictions("adaptive p90 (ours, T = 4") > 0);
    assert_eq!(evictions("adaptive p90 (ours, T = 16"), 0);
    // Every target was asked for; the hot key about half the time.
    let users = &by_name(&m.rows, "no hedging").outcome.users;
    let hot = users.iter().filter(|u| u.target == 0).count() as f64 / users.len() as f64;
    assert!((0.45..0.55).contains(&hot), "{hot}");
    assert!((0..16).all(|k| users.iter().any(|u| u.target == k)));
    assert_oracle(&m.rows, &m.sweep);
}

#[test]
fn outage_oracle_is_the_best_of_its_sweep() {
    let p = scenarios::outage(2 * SEC, &SWEEP, SEED);
    assert_oracle(&p.rows, &p.sweep);
    assert_eq!(p.true_p90_ms.len(), 3);
    assert!(p.true_p90_ms[1] > 5.0 * p.true_p90_ms[0]);
    // The adaptive row's delay is sampled every 0.5 s over the 6 s run.
    assert_eq!(
        by_name(&p.rows, "adaptive p90").outcome.delay_series.len(),
        12
    );
}

// ---------------------------------------------------------------------------
// Production-traffic requirements, with defaults
// ---------------------------------------------------------------------------

/// The delays of the example's sweep from `lo` to `hi` (ms): a shorter
/// sweep around the optimum, for debug builds.
fn sweep_between(lo_ms: f64, hi_ms: f64) -> Vec<u64> {
    scenarios::sweep_delays()
        .into_iter()
        .filter(|&d| (lo_ms..=hi_ms).contains(&(d as f64 / MS as f64)))
        .collect()
}

/// The adaptive row's p99.9 is at most 1.2 × the oracle's, whose delay is
/// inside its sweep (not at an end: the shorter sweep holds the optimum).
fn assert_near_oracle(rows: &[Row], sweep: &[SweepPoint], adaptive: &str) {
    let a = by_name(rows, adaptive);
    let oracle = by_name(rows, "oracle static");
    let best = best_of(sweep);
    assert!(
        best > 0 && best + 1 < sweep.len(),
        "the oracle's delay is at an end of its sweep: {:?}",
        sweep
            .iter()
            .map(|p| (p.delay_ns, p.q.p999))
            .collect::<Vec<_>>()
    );
    eprintln!(
        "{}: p99.9 {:.1} ms, {}: {:.1} ms",
        a.name, a.q.p999, oracle.name, oracle.q.p999
    );
    assert!(
        a.q.p999 <= 1.2 * oracle.q.p999,
        "{}: p99.9 {:.1} ms > 1.2 × {:.1} ms ({})",
        a.name,
        a.q.p999,
        oracle.q.p999,
        oracle.name
    );
}

#[test]
fn correlated_default_adaptive_is_within_20_percent_of_the_oracle() {
    let sweep = sweep_between(4.0, 30.0);
    let c = scenarios::correlated(
        scenarios::CorrelatedParams::new(CORRELATED_RUN_NS),
        &sweep,
        SEED,
    );
    assert_near_oracle(&c.rows, &c.sweep, "adaptive p90 (ours, default)");
}

#[test]
fn heavy_tail_pareto_delay_is_the_true_p90() {
    // One reading of the delay has about 6 % of sampling noise (a window of
    // one to two thousand samples); the bias is what must be small, so
    // average the final reading over independent runs. (The estimator's
    // bias is pinned down to ±2 % in tests/hedge_estimator.rs.)
    let [(name, model, backend), _] = scenarios::heavy_tail_backends();
    assert_eq!(name, "pareto");
    let seeds = 1..=6u64;
    let ratios: Vec<f64> = seeds
        .map(|seed| {
            let run =
                scenarios::heavy_tail_one(name, model, &backend, HEAVY_RUN_NS, &[], 200_000, seed);
            let t = run.truth.iter().find(|t| t.q == 0.9).expect("p90 row");
            t.ratio().expect("a delay at the end of the run")
        })
        .collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    eprintln!("pareto p90: delay ÷ truth {ratios:.3?}, mean {mean:.3}");
    assert!((0.93..=1.07).contains(&mean), "{ratios:?}: {mean}");
}

#[test]
fn low_rate_default_delays_are_data_driven_after_the_first_minute() {
    let l = scenarios::low_rate(2, &[], SEED);
    let share = l.data_driven(by_name(&l.rows, "adaptive p90 (ours, default)"));
    eprintln!("low-rate data-driven: {share:.4}");
    assert!(share >= 0.95, "{share}");
}

#[test]
fn step_default_delay_settles_within_5_s_on_the_new_p90() {
    let s = scenarios::step(STEP_AT_NS, STEP_AFTER_NS, 200_000, SEED);
    let t = s
        .tracking
        .iter()
        .find(|t| t.row.contains("default"))
        .expect("default row");
    eprintln!(
        "step: first within {:?}, settled {:?}",
        t.first_within_ns, t.settled_ns
    );
    // Within 10 % of the new true p90 from at most 5 s after the step to
    // the end of the run.
    assert!(
        t.settled_ns.is_some_and(|ns| ns <= 5 * SEC),
        "settled {:?}",
        t.settled_ns
    );
}

#[test]
fn many_targets_with_four_slots_are_data_driven_and_near_the_oracle() {
    let sweep = sweep_between(5.0, 40.0);
    let m = scenarios::many_targets(MANY_RUN_NS, &sweep, SEED);
    let name = format!("adaptive p90 (ours, T = {} slots)", scenarios::SLOTS);
    assert_eq!(scenarios::SLOTS, 4);
    let r = by_name(&m.rows, &name);
    let (hot, other) = (m.data_driven(r, true), m.data_driven(r, false));
    eprintln!("many-targets data-driven: hot {hot:.4}, others {other:.4}");
    assert!(hot >= 0.95 && other >= 0.95, "hot {hot}, others {other}");
    assert_near_oracle(&m.rows, &m.sweep, &name);
}

// ---------------------------------------------------------------------------
// Fast failures and caller retries
// ---------------------------------------------------------------------------

#[test]
fn a_failed_attempt_is_retried_by_the_caller_and_counted() {
    // Every attempt fails: each user request fails after its 3 tries.
    let backend =
        Backend::article(0.0).with_fast_failures(1.0, engine::LogNormal::from_mean_sd(1.0, 0.2));
    let w = Workload::open_loop(200.0, SEC).tries(3);
    let o = simulate(&mut ours(scenarios::no_hedging()), &backend, w, SEED);
    let users = o.users.len() as u64;
    assert!(users > 100);
    assert!(o.users.iter().all(|u| u.failed && u.retries == 2));
    assert_eq!(o.requests, 3 * users);
    assert_eq!(o.caller_retries, 2 * users);
    assert_eq!(o.failed_attempts, 3 * users);
    assert_eq!(o.failure_rate(), 1.0);
    assert_eq!(quantiles(&o.users).count, 0); // no success to summarise

    // A retryable failure retries at once inside the hedger; a fatal one
    // ends the request and leaves the retry to the caller.
    let backend =
        Backend::article(0.0).with_fast_failures(0.5, engine::LogNormal::from_mean_sd(1.0, 0.2));
    let run = |failure| {
        let mut c = ours_with(
            static_delay(50 * MS),
            scenarios::fixed_cap(10_000, 1_000),
            engine::Signal::Answer,
        )
        .reporting(failure);
        let o = simulate(
            &mut c,
            &backend,
            Workload::open_loop(200.0, 2 * SEC).tries(3),
            SEED,
        );
        (o, c.hedge_stats())
    };
    let (retryable, stats) = run(Failure::Retryable);
    assert!(stats.retries_released > 0);
    assert_eq!(stats.hedges_sent + stats.retries_released, retryable.hedges);
    let (fatal, stats) = run(Failure::Fatal);
    assert_eq!(stats.retries_released, 0);
    assert!(fatal.caller_retries > retryable.caller_retries);
}

#[test]
fn failures_retryable_matches_fatal_tails_with_far_fewer_caller_retries() {
    let f = scenarios::failures(FAILURES_RUN_NS, &[], SEED);
    let retryable = by_name(&f.rows, scenarios::failure_row_name(Failure::Retryable));
    let fatal = by_name(&f.rows, scenarios::failure_row_name(Failure::Fatal));
    eprintln!(
        "retryable: p99 {:.1} ms, retried {:.4}; fatal: p99 {:.1} ms, retried {:.4}",
        retryable.q.p99,
        retryable.retried_share(),
        fatal.q.p99,
        fatal.retried_share()
    );
    // Retrying inside the hedger needs far fewer caller retries, and the
    // tail is as short as a caller's fresh retry gets (the two are the same
    // race once a retry keeps its hedge): within 5 % at p99.
    assert!(retryable.retried_share() < 0.25 * fatal.retried_share());
    assert!(
        retryable.q.p99 <= 1.05 * fatal.q.p99,
        "p99 {:.1} ms (retryable) vs {:.1} ms (fatal + caller retry)",
        retryable.q.p99,
        fatal.q.p99
    );
}

const CORRELATED_RUN_NS: u64 = 10 * SEC;
const HEAVY_RUN_NS: u64 = 10 * SEC;
const STEP_AT_NS: u64 = 10 * SEC;
const STEP_AFTER_NS: u64 = 10 * SEC;
const MANY_RUN_NS: u64 = 10 * SEC;
const FAILURES_RUN_NS: u64 = 10 * SEC;

#[test]
fn a_load_sensitive_backend_is_not_overloaded_by_the_default_bank() {
    // At 60 % of capacity, latency rising with load: the default bank
    // (100 ms of earnings) cuts p99, where a bank of a second's earnings,
    // spent in a burst, overloads the backend into a p99 several times
    // that of no hedging.
    let runs = scenarios::overload(&[0.6], 10 * SEC, SEED);
    let rows = &runs[0].rows;
    let none = by_name(rows, "no hedging");
    let default = by_name(rows, "adaptive p90 (ours, default)");
    let second = by_name(rows, scenarios::SECOND_BANK_ROW);
    assert!(
        default.q.p99 < 0.7 * none.q.p99,
        "default {:?} vs none {:?}",
        default.q,
        none.q
    );
    assert!(
        second.q.p99 > 3.0 * none.q.p99,
        "a second's bank {:?} vs none {:?}",
        second.q,
        none.q
    );
    assert!(default.extra_load <= 0.15 + 0.01, "{}", default.extra_load);
}

#[test]
fn near_capacity_a_cap_on_hedges_in_flight_keeps_the_tail_below_no_hedging_s() {
    // From 70 % of capacity the default budget's bursts push the backend
    // into the slowness that spends them (p99.9 at 70 % and p99 at 80 %
    // several times no hedging's); at most 8 hedges in flight throttles itself, since a
    // hedge to a slowed backend holds its slot longer: from 70 % to 80 %,
    // p99 below 0.85 times no hedging's (0.5 to 0.8 in the README's runs),
    // p99.9 within 10 % of it. What the README's overload section
    // recommends.
    // 20 s, as the README's table: the first seconds' cold start weighs on
    // a shorter run's p99.9.
    for run in scenarios::overload(&[0.7, 0.8], 20 * SEC, SEED) {
        let rows = &run.rows;
        let none = by_name(rows, "no hedging");
        let default = by_name(rows, "adaptive p90 (ours, default)");
        let capped = by_name(
            rows,
            &scenarios::in_flight_row(scenarios::OVERLOAD_IN_FLIGHT),
        );
        let u = run.utilisation;
        assert!(
            capped.q.p99 < 0.85 * none.q.p99 && capped.q.p999 <= 1.1 * none.q.p999,
            "{u}: capped {:?} vs none {:?}",
            capped.q,
            none.q
        );
        if u >= 0.8 {
            assert!(
                default.q.p99 > 2.0 * none.q.p99,
                "{u}: default {:?} vs none {:?} (the README says it hurts)",
                default.q,
                none.q
            );
        } else {
            // From 70 % the default's p99.9 is far above no hedging's.
            assert!(
                default.q.p999 > 2.0 * none.q.p999,
                "{u}: default {:?} vs none {:?} (the README says p99.9 suffers)",
                default.q,
                none.q
            );
        }
        assert!(capped.extra_load <= 0.15 + 0.01, "{}", capped.extra_load);
    }
}

#[test]
fn on_queued_replicas_hedging_pays_at_low_load_and_one_hedge_in_flight_keeps_the_tail_near_capacity(
) {
    // FIFO replicas whose cancelled attempts keep their place: at 30 % of
    // capacity the default takes p99 to 0.55–0.73 of no hedging's over the
    // README's seeds (0.59–0.76 with hedges to the next replica), one
    // hedge in flight to 0.68–0.81 (0.67–0.80 to the next replica); at 75 %
    // the default's bursts queue
    // behind the work they were meant to skip (hedges all sent to the next
    // replica: p99 1.31–1.81 times no hedging's), and at most one hedge in
    // flight keeps p99 within 20 % of no hedging's for either routing; in
    // between, the default still cuts p99 at 45 % and gains little at 60 %.
    // What the README's queued section says.
    let runs = scenarios::queued(&[0.3, 0.45, 0.6, 0.75], 20 * SEC, SEED);
    for run in &runs {
        let rows = &run.rows;
        let none = by_name(rows, "no hedging");
        let default = by_name(rows, "adaptive p90 (ours, default)");
        let next = by_name(rows, scenarios::QUEUED_NEXT_ROW);
        let u = run.utilisation;
        for capped in [
            by_name(rows, &scenarios::in_flight_row(1)),
            by_name(rows, scenarios::QUEUED_NEXT_CAPPED_ROW),
        ] {
            assert!(
                capped.q.p99 <= 1.2 * none.q.p99 && capped.q.p999 <= 1.3 * none.q.p999,
                "{u}: capped {:?} vs none {:?}",
                capped.q,
                none.q
            );
            if u < 0.4 {
                assert!(capped.q.p99 < 0.82 * none.q.p99, "{u}: {:?}", capped.q);
            }
        }
        let ratio = |r: &Row| r.q.p99 / none.q.p99;
        if u < 0.4 {
            assert!(
                ratio(default) < 0.8 && ratio(next) < 0.8,
                "{u}: default {:?}, next {:?} vs none {:?}",
                default.q,
                next.q,
                none.q
            );
        } else if u < 0.5 {
            // Still a cut at 45 % (0.76–0.90 over the seeds).
            assert!(
                ratio(default) < 0.95,
                "{u}: {:?} vs {:?}",
                default.q,
                none.q
            );
        } else if u < 0.7 {
            // At 60 % hedging gains little, capped or not: within 15 %.
            let capped = by_name(rows, &scenarios::in_flight_row(1));
            for r in [default, capped] {
                assert!(
                    (0.85..1.15).contains(&ratio(r)),
                    "{u}: {}: {:?} vs {:?}",
                    r.name,
                    r.q,
                    none.q
                );
            }
        } else {
            assert!(
                next.q.p99 > 1.2 * none.q.p99,
                "{u}: next {:?} vs none {:?} (the README says it hurts)",
                next.q,
                none.q
            );
        }
        for r in rows {
            assert!(r.extra_load <= 0.15 + 0.01, "{}: {}", r.name, r.extra_load);
        }
    }
}

#[test]
fn on_queued_replicas_whose_servers_drop_cancelled_attempts_hedging_cuts_the_tail_up_to_75_percent()
{
    // The same queues, told of cancellations: over the README's seeds the
    // default's p99 is 0.44–0.75 of no hedging's from 30 % to 75 % of
    // capacity where a server drops a cancelled attempt it has not started,
    // and 0.33–0.55 where it also stops one in service (against 1.01–1.33
    // at 75 % where it keeps them).
    let runs = scenarios::queued(&[0.3, 0.45, 0.6, 0.75], 20 * SEC, SEED);
    for run in &runs {
        let rows = &run.rows;
        let none = by_name(rows, "no hedging");
        let kept = by_name(rows, "adaptive p90 (ours, default)");
        let dequeued = by_name(rows, scenarios::QUEUED_DEQUEUED_ROW);
        let stopped = by_name(rows, scenarios::QUEUED_STOPPED_ROW);
        let u = run.utilisation;
        let show = |r: &Row| format!("{u}: {}: {:?} vs none {:?}", r.name, r.q, none.q);
        assert!(dequeued.q.p99 < 0.8 * none.q.p99, "{}", show(dequeued));
        assert!(stopped.q.p99 < 0.6 * none.q.p99, "{}", show(stopped));
        for r in [dequeued, stopped] {
            assert!(r.q.p999 < 0.85 * none.q.p999, "{}", show(r));
            assert!(r.q.p99 < kept.q.p99, "{}", show(r));
            assert!(r.extra_load <= 0.15 + 0.01, "{}", show(r));
        }
        assert!(stopped.q.p99 < dequeued.q.p99, "{}", show(stopped));
    }
}

#[test]
fn a_queued_backend_serves_in_the_same_order_whatever_it_does_with_cancellations() {
    // Without hedging nothing is cancelled: the event-driven servers (which
    // hear of cancellations) and the kept-place queues (served in order by
    // their free times) must give every user request the same latency.
    let w = Workload::open_loop(0.7 * scenarios::QUEUED_CAPACITY, 5 * SEC);
    let latencies = |on_cancel: OnCancel| {
        let backend = scenarios::queued_backend_with(on_cancel);
        let mut client = ours(scenarios::no_hedging());
        let out = simulate(&mut client, &backend, w.routing(Routing::Spread), SEED);
        out.users.iter().map(|u| u.latency_ns).collect::<Vec<_>>()
    };
    let kept = latencies(OnCancel::Kept);
    assert!(kept.len() > 5_000, "{}", kept.len());
    assert_eq!(latencies(OnCancel::Dequeued), kept);
    assert_eq!(latencies(OnCancel::Stopped), kept);
}
