//! The headline properties of `cargo run --example simulate`, on reduced
//! runs: hedging cuts the tail, the budget holds during an outage,
//! first-token calibration is cheaper than header calibration, fan-out
//! amplifies stragglers as predicted; and the engine and the scenarios
//! with oracle rows behave as documented (pauses stall attempts, hedges
//! change replica, open-loop runs share their random draws, an oracle is
//! the best of its sweep). Properties, not exact numbers, and nothing that
//! depends on how well the hedger estimates its delay.

#[path = "../examples/simulate/engine.rs"]
mod engine;
#[path = "../examples/simulate/scenarios.rs"]
mod scenarios;

use engine::{
    quantiles, simulate, Backend, DelayOrigin, Latency, Replica, Routing, Workload, MS, SEC,
};
use scenarios::{best_of, ours, ours_with, static_delay, Row, SweepPoint};
use tailguard::hedge::HedgeConfig;

const SEED: u64 = 7;

fn by_name<'a>(rows: &'a [Row], prefix: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row {prefix:?}"))
}

#[test]
fn article_hedging_cuts_p99_within_budget() {
    let a = scenarios::article(5_000, SEED);
    let none = by_name(&a.rows, "no hedging");
    let adaptive = by_name(&a.rows, "adaptive p90 (ours, default)");
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
    // The 10 % ratio budget: at most 10 % of requests (it starts empty).
    for r in &a.rows[..5] {
        assert!(r.extra_load <= 0.10, "{}: {}", r.name, r.extra_load);
    }
    assert!(adaptive.extra_load > 0.05, "{}", adaptive.extra_load);
    // The median is untouched.
    assert!((adaptive.q.p50 - none.q.p50).abs() < 0.5);
}

#[test]
fn outage_hedges_stay_within_the_ratio_budget_and_resume() {
    let phase = 2 * SEC;
    let p = scenarios::outage(phase, &[], SEED);
    let ours = by_name(&p.rows, "adaptive p90");
    // Exact bound of the ratio budget at every prefix of the run:
    // hedges ≤ 10 % of requests + nothing banked at the start (cap 10).
    let (mut req, mut hedges) = (0, 0);
    for s in &ours.outcome.per_second {
        req += s.requests;
        hedges += s.hedges;
        assert!(hedges * 10 <= req, "{hedges} hedges for {req} requests");
    }
    assert!(p.extra_load(ours, 1) <= 0.10 + 10.0 / 500.0);
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
        scenarios::ratio(10_000, 1_000),
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
