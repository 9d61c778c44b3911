//! One hedger shared by threads: the common path (start + commit, no
//! hedge) of `SharedHedger` on one thread and on two threads contending,
//! against `std::sync::Mutex<Hedger>` doing the same, and a control: one
//! `SharedHedger` per thread, nothing shared, which shows what the machine
//! itself loses when both cores work (a VM whose two vCPUs share a
//! physical core, or another process on the other core, slows the control
//! as much as contention would).
//!
//! Each measurement runs `iters` requests on every thread at once (after a
//! barrier) and reports the slowest thread's time: criterion's "time" is
//! then the time a thread spends per request while the others work too.
//!
//! Run: `cargo bench --bench shared` (on a machine with at least two idle
//! cores; pin with `taskset -c 0,1` to keep the threads apart).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};
use tailguard::hedge::{Attempt, HedgeConfig, Hedger, Idempotency, SharedHedger};

const MS: u64 = 1_000_000;

/// What one request does on the common path, whoever holds the state.
trait Common: Sync {
    fn request(&self, now: u64, latency: u64);
}

impl Common for SharedHedger {
    #[inline]
    fn request(&self, now: u64, latency: u64) {
        let mut r = self.start(0, now, Idempotency::Idempotent);
        let out = self.on_commit(&mut r, Attempt::PRIMARY, now + latency);
        let _ = black_box((r.plan(), out));
    }
}

impl Common for Mutex<Hedger> {
    #[inline]
    fn request(&self, now: u64, latency: u64) {
        // One lock per event, as a caller would take it around each call.
        let mut r = self.lock().unwrap().start((), now, Idempotency::Idempotent);
        let out = self
            .lock()
            .unwrap()
            .on_commit(&mut r, Attempt::PRIMARY, now + latency);
        let _ = black_box((r.plan(), out));
    }
}

/// Latencies of ~4-6 ms, before the ~6 ms p90 delay: no hedge.
fn latency(i: u64) -> u64 {
    4 * MS + (i % 100) * 20_000
}

/// Runs `iters` requests on each of `threads` threads at once, thread `t`
/// on `state(t)`; the slowest thread's time. `clock` keeps time moving
/// across batches.
fn run<'a, C: Common + 'a>(
    state: impl Fn(u64) -> &'a C + Sync,
    clock: &AtomicU64,
    threads: u64,
    iters: u64,
) -> Duration {
    // 1 µs between a thread's requests; threads 100 ns apart.
    let base = clock.fetch_add(iters * 1_000 + 1_000, Ordering::Relaxed);
    let barrier = Barrier::new(threads as usize);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, h) = (&barrier, state(t));
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..iters {
                        h.request(base + i * 1_000 + t * 100, latency(i));
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|j| j.join().unwrap())
            .max()
            .unwrap_or_default()
    })
}

/// A state warmed with 1000 samples of ~5 ms.
fn warm(h: &impl Common, clock: &AtomicU64) {
    for i in 0..1_000u64 {
        h.request(clock.fetch_add(10_000, Ordering::Relaxed), latency(i));
    }
}

fn shared_paths(c: &mut Criterion) {
    let mut group = c.benchmark_group("shared");
    for threads in [1u64, 2] {
        let clock = AtomicU64::new(0);
        let h = SharedHedger::new(HedgeConfig::DEFAULT).unwrap();
        warm(&h, &clock);
        group.bench_function(
            format!("SharedHedger common path, {threads} thread(s)"),
            |b| b.iter_custom(|iters| run(|_| &h, &clock, threads, iters)),
        );
        let clock = AtomicU64::new(0);
        let m = Mutex::new(Hedger::new(HedgeConfig::DEFAULT).unwrap());
        warm(&m, &clock);
        group.bench_function(
            format!("Mutex<Hedger> common path, {threads} thread(s)"),
            |b| b.iter_custom(|iters| run(|_| &m, &clock, threads, iters)),
        );
        // The control: nothing shared.
        let clock = AtomicU64::new(0);
        let own: Vec<SharedHedger> = (0..threads)
            .map(|_| SharedHedger::new(HedgeConfig::DEFAULT).unwrap())
            .collect();
        own.iter().for_each(|h| warm(h, &clock));
        group.bench_function(
            format!("control: a SharedHedger per thread, {threads} thread(s)"),
            |b| b.iter_custom(|iters| run(|t| &own[t as usize], &clock, threads, iters)),
        );
    }
    group.finish();
}

criterion_group!(benches, shared_paths);
criterion_main!(benches);
