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
use tailguard::mapping::{LinearMapping, LogarithmicMapping};
use tailguard::store::CollapsingLowestStore;
use tailguard::DDSketch;

const N: usize = 10_000;
const ALPHA: f64 = 0.01;

/// splitmix64: a tiny fixed-seed generator, so every run sees the same data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.unit(), self.unit());
        (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Latencies in ns: lognormal, median 5 ms, σ 0.5; 5 % of them ×10.
fn latencies() -> Vec<f64> {
    let mut rng = Rng(0x5eed_1a7e_2c1e_0001);
    (0..N)
        .map(|_| {
            let v = 5e6 * (0.5 * rng.normal()).exp();
            if rng.unit() < 0.05 {
                v * 10.0
            } else {
                v
            }
        })
        .collect()
}

type Log = DDSketch<LogarithmicMapping, CollapsingLowestStore<1024>>;
type Lin = DDSketch<LinearMapping, CollapsingLowestStore<1024>>;

fn peer_config() -> sketches_ddsketch::Config {
    sketches_ddsketch::Config::new(ALPHA, 2048, 1e-9)
}

fn hdr() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).unwrap()
}

/// One pass of `record` over `data`, hidden from the optimiser as a whole
/// (`black_box` on the slice) so that no value is known at compile time.
fn pass<T: Copy>(data: &[T], mut record: impl FnMut(T)) {
    for &v in black_box(data) {
        record(v);
    }
}

/// One pass with `black_box` on every value: each value goes through the
/// stack and, since `black_box` may touch any memory, every field the add
/// reads is reloaded from memory each time, as for an isolated call. A
/// pessimistic bound that costs more for `f64` values than for integers.
fn pass_per_value<T: Copy>(data: &[T], mut record: impl FnMut(T)) {
    for &v in data {
        record(black_box(v));
    }
}

fn add(c: &mut Criterion) {
    let data = latencies();
    let ints: Vec<u64> = data.iter().map(|&v| v as u64).collect();
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
    g.bench_function("hdrhistogram record", |b| {
        b.iter(|| pass_per_value(&ints, |v| h.record(v).unwrap()))
    });
    g.finish();
}

fn quantile(c: &mut Criterion) {
    let data = latencies();
    let mut ours = DDSketch::new(ALPHA).unwrap();
    let mut peer = sketches_ddsketch::DDSketch::new(peer_config());
    for &v in &data {
        ours.add(v).unwrap();
        peer.add(v);
    }
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
    let data = latencies();
    let (first, second) = data.split_at(N / 2);
    let mut a = DDSketch::new(ALPHA).unwrap();
    let mut b2 = DDSketch::new(ALPHA).unwrap();
    let mut pa = sketches_ddsketch::DDSketch::new(peer_config());
    let mut pb = sketches_ddsketch::DDSketch::new(peer_config());
    for &v in first {
        a.add(v).unwrap();
        pa.add(v);
    }
    for &v in second {
        b2.add(v).unwrap();
        pb.add(v);
    }
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
