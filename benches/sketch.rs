//! Sketch benchmarks on realistic latency data: 10 000 lognormal samples in
//! nanoseconds (median 5 ms, σ = 0.5) with a 5 % tail ten times slower.
//!
//! Peers in the same run: `sketches-ddsketch` 0.4 (α = 1 %, 2048 bins) and
//! `hdrhistogram` 7 (integers, 2 significant digits). Controls that should
//! come out slower: the exact-`ln` mapping, and inserting into a sorted `Vec`.
//!
//! `cargo bench --bench sketch -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use tailguard::mapping::{LinearMapping, LogLinearMapping, LogarithmicMapping};
use tailguard::store::CollapsingLowestStore;
use tailguard::DDSketch;

#[path = "workloads/sketch.rs"]
mod workload;

use workload::{
    filled, hdr, integer_latencies, latencies, merge_halves, pass, pass_per_value, peer_config,
    ALPHA, N,
};

type Log = DDSketch<LogarithmicMapping, CollapsingLowestStore<1024>>;
type Lin = DDSketch<LinearMapping, CollapsingLowestStore<1024>>;
/// The integer record path, like for like with `hdrhistogram`'s `record`.
type Int = DDSketch<LogLinearMapping, CollapsingLowestStore<1024>>;

fn add(c: &mut Criterion) {
    let data = latencies();
    let ints = integer_latencies(&data);
    let mut g = c.benchmark_group("add");
    g.throughput(Throughput::Elements(N as u64));

    let mut cubic = DDSketch::new(ALPHA).unwrap();
    g.bench_function("tailguard cubic (default)", |b| {
        b.iter(|| pass(&data, |v| cubic.add(v).unwrap()))
    });
    let mut batch = DDSketch::new(ALPHA).unwrap();
    g.bench_function("tailguard cubic, add_all", |b| {
        b.iter(|| batch.add_all(black_box(&data)).unwrap())
    });
    let mut lin = Lin::with_accuracy(ALPHA).unwrap();
    g.bench_function("tailguard linear", |b| {
        b.iter(|| pass(&data, |v| lin.add(v).unwrap()))
    });
    let mut log = Log::with_accuracy(ALPHA).unwrap();
    g.bench_function("tailguard logarithmic (control: ln)", |b| {
        b.iter(|| pass(&data, |v| log.add(v).unwrap()))
    });
    let mut peer = sketches_ddsketch::DDSketch::new(peer_config());
    g.bench_function("sketches-ddsketch", |b| {
        b.iter(|| pass(&data, |v| peer.add(v)))
    });
    let mut int = Int::with_accuracy(ALPHA).unwrap();
    g.bench_function("tailguard add_u64, log-linear", |b| {
        b.iter(|| pass(&ints, |v| int.add_u64(v).unwrap()))
    });
    let mut h = hdr();
    g.bench_function("hdrhistogram record", |b| {
        b.iter(|| pass(&ints, |v| h.record(v).unwrap()))
    });
    g.bench_function("control: sorted Vec insert", |b| {
        b.iter_batched_ref(
            || Vec::with_capacity(N),
            |sorted: &mut Vec<f64>| {
                pass(&data, |v| {
                    let at = sorted.partition_point(|&x| x < v);
                    sorted.insert(at, v);
                })
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("add, black_box per value");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("tailguard cubic (default)", |b| {
        b.iter(|| pass_per_value(&data, |v| cubic.add(v).unwrap()))
    });
    g.bench_function("sketches-ddsketch", |b| {
        b.iter(|| pass_per_value(&data, |v| peer.add(v)))
    });
    g.bench_function("tailguard add_u64, log-linear", |b| {
        b.iter(|| pass_per_value(&ints, |v| int.add_u64(v).unwrap()))
    });
    g.bench_function("hdrhistogram record", |b| {
        b.iter(|| pass_per_value(&ints, |v| h.record(v).unwrap()))
    });
    g.finish();
}

fn quantile(c: &mut Criterion) {
    let (ours, peer) = filled();
    let mut g = c.benchmark_group("quantile");
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
        g.bench_function(format!("tailguard {name}"), |b| {
            b.iter(|| ours.quantile(black_box(q)).unwrap())
        });
        g.bench_function(format!("sketches-ddsketch {name}"), |b| {
            b.iter(|| peer.quantile(black_box(q)).unwrap())
        });
    }
    g.bench_function("tailguard quantiles([p50, p90, p99])", |b| {
        b.iter(|| ours.quantiles(black_box(&[0.5, 0.9, 0.99])).unwrap())
    });
    g.finish();
}

fn merge(c: &mut Criterion) {
    let ((a, b2), (pa, pb)) = merge_halves();
    let mut g = c.benchmark_group("merge");
    g.bench_function("tailguard", |b| {
        b.iter_batched_ref(
            || a.clone(),
            |s| s.merge(black_box(&b2)).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("sketches-ddsketch", |b| {
        b.iter_batched_ref(
            || pa.clone(),
            |s| s.merge(black_box(&pb)).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, add, quantile, merge);
criterion_main!(benches);
