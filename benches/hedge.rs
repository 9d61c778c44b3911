//! The hedge state machine's two paths: the common one (start + commit, no
//! hedge) and the hedged one (start + timer + hedge + commit + cancel).
//! The workloads live in `workloads/hedge.rs`, shared with the instruction
//! counts of `benches/instructions.rs`.
//!
//! Run: `cargo bench --bench hedge`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

#[path = "workloads/hedge.rs"]
mod workload;

use workload::{common_hedger, common_path, hedged_hedger, hedged_path};

fn hedge_paths(c: &mut Criterion) {
    let mut group = c.benchmark_group("hedge");

    let (mut h, mut t) = common_hedger();
    let mut i = 0u64;
    group.bench_function("common path: start + commit", |b| {
        b.iter(|| common_path(&mut h, &mut t, &mut i))
    });

    let (mut h, mut t) = hedged_hedger();
    group.bench_function(
        "hedged path: start + timer + hedge + commit + cancel",
        |b| b.iter(|| hedged_path(&mut h, &mut t)),
    );

    // The O(1) delay read, for scale.
    group.bench_function("delay_ns read", |b| {
        b.iter(|| black_box(h.delay_ns(black_box(&()), black_box(t))))
    });
    group.finish();
}

criterion_group!(benches, hedge_paths);
criterion_main!(benches);
