//! The hedge state machine's two paths: the common one (start + commit, no
//! hedge) and the hedged one (start + timer + hedge + commit + cancel).
//!
//! Run: `cargo bench --bench hedge`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, TimerAction};

const MS: u64 = 1_000_000;

/// A hedger warmed with 1000 samples of ~5 ms.
fn warm(config: HedgeConfig, budget: Budget) -> (Hedger, u64) {
    let mut h: Hedger = Hedger::with_budget(config, budget).unwrap();
    let mut t = 0;
    for i in 0..1_000u64 {
        let mut r = h.start((), t, Idempotency::Idempotent);
        h.on_commit(&mut r, Attempt::PRIMARY, t + 4 * MS + (i % 100) * 20_000);
        t += 10_000;
    }
    (h, t)
}

fn hedge_paths(c: &mut Criterion) {
    let mut group = c.benchmark_group("hedge");

    // Default budget (a traffic ratio, one CAS per start); answers in
    // ~4-6 ms, before the ~6 ms p90 delay: no hedge.
    let (mut h, mut t) = warm(HedgeConfig::DEFAULT, Budget::default());
    let mut i = 0u64;
    group.bench_function("common path: start + commit", |b| {
        b.iter(|| {
            t += 1_000;
            i += 1;
            let mut r = h.start((), t, Idempotency::Idempotent);
            let latency = 4 * MS + (i % 100) * 20_000;
            let out = h.on_commit(&mut r, Attempt::PRIMARY, t + latency);
            black_box((r.plan(), out))
        })
    });

    // Every primary deposits a whole token (100 % share), so every request
    // hedges: the full path with the real budget. Each records the hedge's
    // 1 ms exactly and the primary as censored at delay + 1 ms; the delay is
    // pinned at 6 ms so that every iteration takes the same path.
    let pinned = HedgeConfig::DEFAULT
        .min_delay_ns(6 * MS)
        .max_delay_ns(6 * MS);
    let (mut h, mut t) = warm(pinned, Budget::Ratio(RatioBudget::new(10_000, 10).unwrap()));
    group.bench_function(
        "hedged path: start + timer + hedge + commit + cancel",
        |b| {
            b.iter(|| {
                t += 1_000;
                let mut r = h.start((), t, Idempotency::Idempotent);
                let Some(at) = r.next_timer() else {
                    panic!("{:?}", r.plan())
                };
                let TimerAction::SendHedge(hedge) = h.on_timer(&mut r, at) else {
                    panic!("no hedge")
                };
                match h.on_commit(&mut r, hedge, at + MS) {
                    CommitOutcome::Won { cancel, .. } => black_box(cancel),
                    other => panic!("{other:?}"),
                }
            })
        },
    );

    // The O(1) delay read, for scale.
    group.bench_function("delay_ns read", |b| {
        b.iter(|| black_box(h.delay_ns(black_box(&()), black_box(t))))
    });
    group.finish();
}

criterion_group!(benches, hedge_paths);
criterion_main!(benches);
