//! The headline properties of `cargo run --example simulate`, on reduced
//! runs: hedging cuts the tail, the budget holds during an outage,
//! first-token calibration is cheaper than header calibration, fan-out
//! amplifies stragglers as predicted. Properties, not exact numbers.

#[path = "../examples/simulate/engine.rs"]
mod engine;
#[path = "../examples/simulate/scenarios.rs"]
mod scenarios;

use engine::{simulate, Backend, Workload, SEC};
use scenarios::{ours, ours_with, Row};
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
    let p = scenarios::outage(phase, SEED);
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
