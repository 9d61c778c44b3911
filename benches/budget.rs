//! Hedge budget benchmarks, with `governor`'s direct rate limiter measured
//! in the same run as the peer.
//!
//! `cargo bench --bench budget -- --warm-up-time 1 --measurement-time 3`
//!
//! Our budgets take the caller's timestamp; governor reads its own clock
//! (quanta) inside `check()`. `governor/check fake-clock` removes that read,
//! so it is the like-for-like algorithmic peer.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};
use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket};

#[path = "workloads/budget.rs"]
mod workload;

use workload::{always_granting_bucket, governor, governor_fake_clock};

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");

    let bucket = always_granting_bucket();
    let mut now = 0_u64;
    g.bench_function("bucket/try_acquire grant", |b| {
        b.iter(|| {
            now += 1;
            black_box(bucket.try_acquire(black_box(now)))
        })
    });

    let empty = TokenBucket::new(1, 1).expect("valid");
    let _ = empty.try_acquire(0);
    g.bench_function("bucket/try_acquire deny", |b| {
        b.iter(|| black_box(empty.try_acquire(black_box(1))))
    });

    let ratio = RatioBudget::fixed_cap(1, u32::MAX).expect("valid"); // never full
    g.bench_function("ratio/on_request", |b| {
        b.iter(|| ratio.on_request(black_box(0)))
    });

    // Traffic-scaled bank: one more compare-and-swap, on the window counter.
    let scaled = RatioBudget::new(1, u32::MAX).expect("valid"); // never full
    let mut now = 0_u64;
    g.bench_function("ratio-scaled/on_request", |b| {
        b.iter(|| {
            now += 1_000; // a window change every 10⁶ deposits
            scaled.on_request(black_box(now))
        })
    });

    // Grant path: a balance prefilled (untimed) with one token per iteration.
    g.bench_function("ratio/try_acquire grant", |b| {
        b.iter_custom(|iters| {
            let ratio = RatioBudget::fixed_cap(10_000, u32::MAX).expect("valid");
            for _ in 0..iters {
                ratio.on_request(0);
            }
            let start = Instant::now();
            for _ in 0..iters {
                black_box(ratio.try_acquire(black_box(0)));
            }
            start.elapsed()
        })
    });

    let empty = RatioBudget::fixed_cap(1_000, 1).expect("valid");
    g.bench_function("ratio/try_acquire deny", |b| {
        b.iter(|| black_box(empty.try_acquire(black_box(0))))
    });

    let gov = governor();
    g.bench_function("governor/check quanta-clock", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });

    // Frozen clock: the burst of 2³² − 1 cells outlasts the run, so every
    // check is a grant, as in `bucket/try_acquire grant`.
    let gov_fake = governor_fake_clock();
    g.bench_function("governor/check fake-clock", |b| {
        b.iter(|| black_box(gov_fake.check().is_ok()))
    });
    g.finish();
}

/// Two threads hammering one budget; reports wall time per operation per
/// thread (each thread runs `iters` operations).
fn two_threads(iters: u64, op: impl Fn(u64) + Sync) -> Duration {
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..2_u64 {
            let op = &op;
            s.spawn(move || {
                for i in 0..iters {
                    op(i * 2 + t);
                }
            });
        }
    });
    start.elapsed()
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("contended-2-threads");

    let bucket = always_granting_bucket();
    g.bench_function("bucket/try_acquire", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |now| {
                black_box(bucket.try_acquire(now));
            })
        })
    });

    let ratio = RatioBudget::fixed_cap(5_000, u32::MAX).expect("valid");
    g.bench_function("ratio/on_request+try_acquire", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |now| {
                if now & 2 == 0 {
                    ratio.on_request(now);
                } else {
                    black_box(ratio.try_acquire(now));
                }
            })
        })
    });

    let scaled = RatioBudget::new(5_000, u32::MAX).expect("valid");
    g.bench_function("ratio-scaled/on_request+try_acquire", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |now| {
                if now & 2 == 0 {
                    scaled.on_request(now * 1_000);
                } else {
                    black_box(scaled.try_acquire(now * 1_000));
                }
            })
        })
    });

    let gov = governor();
    g.bench_function("governor/check quanta-clock", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(gov.check().is_ok());
            })
        })
    });
    g.finish();
}

criterion_group!(benches, uncontended, contended);
criterion_main!(benches);
