//! The hedge workload shared by `benches/hedge.rs` (criterion, time) and
//! `benches/instructions.rs` (gungraun, instruction counts).

use std::hint::black_box;
use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, TimerAction};

pub const MS: u64 = 1_000_000;

/// A hedger warmed with 1000 samples of ~5 ms, and the time after them.
pub fn warm(config: HedgeConfig, budget: Budget) -> (Hedger, u64) {
    let mut h: Hedger = Hedger::with_budget(config, budget).unwrap();
    let mut t = 0;
    for i in 0..1_000u64 {
        let mut r = h.start((), t, Idempotency::Idempotent);
        let _ = h.on_commit(&mut r, Attempt::PRIMARY, t + 4 * MS + (i % 100) * 20_000);
        t += 10_000;
    }
    (h, t)
}

/// The common path's hedger: the default budget (a traffic ratio, one CAS
/// per start); answers in ~4-6 ms come before the ~6 ms p90 delay, so no
/// request hedges.
pub fn common_hedger() -> (Hedger, u64) {
    warm(HedgeConfig::DEFAULT, Budget::default())
}

/// One request on the common path: start, then the primary's answer.
/// `t` advances 1 µs a request; `i` picks the latency.
pub fn common_path(h: &mut Hedger, t: &mut u64, i: &mut u64) {
    *t += 1_000;
    *i += 1;
    let mut r = h.start((), *t, Idempotency::Idempotent);
    let latency = 4 * MS + (*i % 100) * 20_000;
    let out = h.on_commit(&mut r, Attempt::PRIMARY, *t + latency);
    let _ = black_box((r.plan(), out));
}

/// The hedged path's hedger. Every primary deposits a whole token (100 %
/// share), so every request hedges: the full path with the real budget.
/// Each records the hedge's 1 ms exactly and the primary as censored at
/// delay + 1 ms; the delay is pinned at 6 ms so that every request takes
/// the same path.
pub fn hedged_hedger() -> (Hedger, u64) {
    let pinned = HedgeConfig::DEFAULT
        .min_delay_ns(6 * MS)
        .max_delay_ns(6 * MS);
    warm(pinned, Budget::Ratio(RatioBudget::new(10_000, 10).unwrap()))
}

/// One request on the hedged path: start, timer, hedge, the hedge's answer
/// (which wins), and the primary to cancel.
pub fn hedged_path(h: &mut Hedger, t: &mut u64) {
    *t += 1_000;
    let mut r = h.start((), *t, Idempotency::Idempotent);
    let Some(at) = r.next_timer() else {
        panic!("{:?}", r.plan())
    };
    let TimerAction::SendHedge(hedge) = h.on_timer(&mut r, at) else {
        panic!("no hedge")
    };
    match h.on_commit(&mut r, hedge, at + MS) {
        CommitOutcome::Won { cancel, .. } => {
            black_box(cancel);
        }
        other => panic!("{other:?}"),
    }
}
