//! Instruction counts (gungraun, Callgrind) for every row of the README's
//! performance table, each peer in the same suite on the same workload as
//! the criterion benches (`workloads/`). CI checks the ratios and absolute
//! counts against `benches/instruction_gates.toml` with
//! `.ci/instruction_gates.py`.
//!
//! ```sh
//! cargo bench --bench instructions -- --output-format=json > counts.jsonl
//! python3 .ci/instruction_gates.py benches/instruction_gates.toml counts.jsonl
//! ```
//!
//! (needs `valgrind` and `cargo install gungraun-runner --version 0.20.0`).
//!
//! # What a count is, exactly
//!
//! Gungraun runs each benchmark once under Callgrind and counts only the
//! instructions inside the benchmark function (setup functions and dropping
//! the returned state happen outside it). Each benchmark runs its operation
//! `ops` times, taking `ops` from its id `ops_<ops>`, and each comes twice,
//! with `ops = R` and `ops = 2R`, on states built the same way. The checker
//! reports `(I(2R) − I(R)) / R`: the fixed cost of the call, the loop set-up
//! and the return cancels exactly, and what remains is the mean cost of the
//! operations `R + 1 ..= 2R` of a run. For the sketch adds that is one pass
//! over the 10 000 latencies on a sketch that has already seen them twice
//! (the setup feeds one pass), the steady state criterion measures; for the
//! hedge paths it is 1000 requests, rotations of the latency windows
//! included at their real rate; for the budgets, quantiles and merges, every
//! operation costs the same and the division is exact. Counts are
//! deterministic: the same binary gives the same counts run to run.

use gungraun::{library_benchmark, library_benchmark_group, main, LibraryBenchmarkConfig};
use std::hint::black_box;
use tailguard::budget::{HedgeBudget, TokenBucket};
use tailguard::hedge::Hedger;
use tailguard::mapping::LogLinearMapping;
use tailguard::store::CollapsingLowestStore;
use tailguard::DDSketch;

#[path = "workloads/budget.rs"]
mod budget_workload;
#[path = "workloads/hedge.rs"]
mod hedge_workload;
#[path = "workloads/sketch.rs"]
mod sketch_workload;

use sketch_workload::{
    hdr, integer_latencies, latencies, merge_halves, pass, pass_per_value, peer_config, ALPHA, N,
};

/// A structure to run `ops` operations on, built outside the count.
struct Run<T> {
    ops: usize,
    state: T,
}

impl<T> Run<T> {
    fn new(ops: usize, state: T) -> Self {
        Self { ops, state }
    }

    /// `black_box` on the count, so that the loop is the same machine code
    /// for `R` and `2R`.
    fn ops(&self) -> usize {
        black_box(self.ops)
    }
}

// ---------------------------------------------------------------- sketch add

/// A sketch (or histogram) fed one pass of the data, and the data.
type Fed<S, T> = Run<(S, Vec<T>)>;

/// Passes over the data for `ops` adds (a whole number of passes).
fn passes(ops: usize) -> usize {
    assert_eq!(ops % N, 0, "add benchmarks run whole passes");
    ops / N
}

/// Our default sketch after one pass of the data, and the data.
fn ours_fed(ops: usize) -> Ours {
    let data = latencies();
    let mut s = DDSketch::new(ALPHA).unwrap();
    pass(&data, |v| s.add(v).unwrap());
    Run::new(ops, (s, data))
}

/// The peer after one pass of the data, and the data.
fn ddsketch_fed(ops: usize) -> Peer {
    let data = latencies();
    let mut s = sketches_ddsketch::DDSketch::new(peer_config());
    pass(&data, |v| s.add(v));
    Run::new(ops, (s, data))
}

/// `hdrhistogram` after one pass of the integer data, and the data.
fn hdr_fed(ops: usize) -> Hdr {
    let data = integer_latencies(&latencies());
    let mut h = hdr();
    pass(&data, |v| h.record(v).unwrap());
    Run::new(ops, (h, data))
}

/// Runs `ops / N` passes of `one` over the data.
fn each_pass<S, T>(mut run: Fed<S, T>, mut one: impl FnMut(&mut S, &[T])) -> Fed<S, T> {
    let passes = passes(run.ops());
    let (s, data) = &mut run.state;
    for _ in 0..passes {
        one(s, data);
    }
    run
}

type Ours = Fed<DDSketch, f64>;
type Peer = Fed<sketches_ddsketch::DDSketch, f64>;
type Hdr = Fed<hdrhistogram::Histogram<u64>, u64>;

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = ours_fed)]
#[bench::ops_20000(args = (20_000), setup = ours_fed)]
fn add_tailguard(run: Ours) -> Ours {
    each_pass(run, |s, data| pass(data, |v| s.add(v).unwrap()))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = ddsketch_fed)]
#[bench::ops_20000(args = (20_000), setup = ddsketch_fed)]
fn add_ddsketch(run: Peer) -> Peer {
    each_pass(run, |s, data| pass(data, |v| s.add(v)))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = hdr_fed)]
#[bench::ops_20000(args = (20_000), setup = hdr_fed)]
fn add_hdrhistogram(run: Hdr) -> Hdr {
    each_pass(run, |h, data| pass(data, |v| h.record(v).unwrap()))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = ours_fed)]
#[bench::ops_20000(args = (20_000), setup = ours_fed)]
fn add_per_value_tailguard(run: Ours) -> Ours {
    each_pass(run, |s, data| pass_per_value(data, |v| s.add(v).unwrap()))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = ddsketch_fed)]
#[bench::ops_20000(args = (20_000), setup = ddsketch_fed)]
fn add_per_value_ddsketch(run: Peer) -> Peer {
    each_pass(run, |s, data| pass_per_value(data, |v| s.add(v)))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = hdr_fed)]
#[bench::ops_20000(args = (20_000), setup = hdr_fed)]
fn add_per_value_hdrhistogram(run: Hdr) -> Hdr {
    each_pass(run, |h, data| {
        pass_per_value(data, |v| h.record(v).unwrap())
    })
}

/// The integer record path: nanoseconds as `u64`, keyed by the
/// log-linear mapping with integer operations only — the like-for-like
/// peer of `hdrhistogram`'s `record`, which also takes integers.
type Integer = Fed<DDSketch<LogLinearMapping, CollapsingLowestStore<1024>>, u64>;

/// Our log-linear sketch after one pass of the integer data, and the data.
fn integer_fed(ops: usize) -> Integer {
    let data = integer_latencies(&latencies());
    let mut s = DDSketch::with_accuracy(ALPHA).unwrap();
    pass(&data, |v| s.add_u64(v).unwrap());
    Run::new(ops, (s, data))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = integer_fed)]
#[bench::ops_20000(args = (20_000), setup = integer_fed)]
fn add_u64_tailguard(run: Integer) -> Integer {
    each_pass(run, |s, data| pass(data, |v| s.add_u64(v).unwrap()))
}

#[library_benchmark]
#[bench::ops_10000(args = (10_000), setup = integer_fed)]
#[bench::ops_20000(args = (20_000), setup = integer_fed)]
fn add_u64_per_value_tailguard(run: Integer) -> Integer {
    each_pass(run, |s, data| {
        pass_per_value(data, |v| s.add_u64(v).unwrap())
    })
}

library_benchmark_group!(
    name = add;
    benchmarks =
        add_tailguard,
        add_ddsketch,
        add_hdrhistogram,
        add_per_value_tailguard,
        add_per_value_ddsketch,
        add_per_value_hdrhistogram,
        add_u64_tailguard,
        add_u64_per_value_tailguard
);

// ----------------------------------------------------------------- quantile

/// Both sketches holding the 10 000 latencies.
fn filled(ops: usize) -> Run<(DDSketch, sketches_ddsketch::DDSketch)> {
    Run::new(ops, sketch_workload::filled())
}

type Filled = Run<(DDSketch, sketches_ddsketch::DDSketch)>;

fn quantile_ours(run: Filled, q: f64) -> Filled {
    for _ in 0..run.ops() {
        black_box(run.state.0.quantile(black_box(q)).unwrap());
    }
    run
}

fn quantile_peer(run: Filled, q: f64) -> Filled {
    for _ in 0..run.ops() {
        black_box(run.state.1.quantile(black_box(q)).unwrap());
    }
    run
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantile_p50_tailguard(run: Filled) -> Filled {
    quantile_ours(run, 0.5)
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantile_p50_ddsketch(run: Filled) -> Filled {
    quantile_peer(run, 0.5)
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantile_p90_tailguard(run: Filled) -> Filled {
    quantile_ours(run, 0.9)
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantile_p90_ddsketch(run: Filled) -> Filled {
    quantile_peer(run, 0.9)
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantile_p99_tailguard(run: Filled) -> Filled {
    quantile_ours(run, 0.99)
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantile_p99_ddsketch(run: Filled) -> Filled {
    quantile_peer(run, 0.99)
}

#[library_benchmark]
#[bench::ops_100(args = (100), setup = filled)]
#[bench::ops_200(args = (200), setup = filled)]
fn quantiles_3_tailguard(run: Filled) -> Filled {
    for _ in 0..run.ops() {
        black_box(run.state.0.quantiles(black_box(&[0.5, 0.9, 0.99])).unwrap());
    }
    run
}

library_benchmark_group!(
    name = quantile;
    benchmarks =
        quantile_p50_tailguard,
        quantile_p50_ddsketch,
        quantile_p90_tailguard,
        quantile_p90_ddsketch,
        quantile_p99_tailguard,
        quantile_p99_ddsketch,
        quantiles_3_tailguard
);

// -------------------------------------------------------------------- merge

/// Copies of the first half's sketch, and the second half's to merge into each.
type Merges<S> = Run<(Vec<S>, S)>;
type PeerSketch = sketches_ddsketch::DDSketch;

/// `ops` copies of the first half's sketch, and the second half's to merge
/// into each: every merge starts from the same state.
fn merge_ours(ops: usize) -> Merges<DDSketch> {
    let ((a, b), _) = merge_halves();
    Run::new(ops, (vec![a; ops], b))
}

/// The same for the peer.
fn merge_peer(ops: usize) -> Merges<PeerSketch> {
    let (_, (a, b)) = merge_halves();
    Run::new(ops, (vec![a; ops], b))
}

#[library_benchmark]
#[bench::ops_10(args = (10), setup = merge_ours)]
#[bench::ops_20(args = (20), setup = merge_ours)]
fn merge_tailguard(mut run: Merges<DDSketch>) -> Merges<DDSketch> {
    let (copies, other) = &mut run.state;
    for s in black_box(copies.as_mut_slice()) {
        s.merge(black_box(&*other)).unwrap();
    }
    run
}

#[library_benchmark]
#[bench::ops_10(args = (10), setup = merge_peer)]
#[bench::ops_20(args = (20), setup = merge_peer)]
fn merge_ddsketch(mut run: Merges<PeerSketch>) -> Merges<PeerSketch> {
    let (copies, other) = &mut run.state;
    for s in black_box(copies.as_mut_slice()) {
        s.merge(black_box(&*other)).unwrap();
    }
    run
}

library_benchmark_group!(
    name = merge;
    benchmarks = merge_tailguard, merge_ddsketch
);

// ------------------------------------------------------------------- budget

fn bucket(ops: usize) -> Run<TokenBucket> {
    Run::new(ops, budget_workload::always_granting_bucket())
}

fn governor(ops: usize) -> Run<governor::DefaultDirectRateLimiter> {
    Run::new(ops, budget_workload::governor())
}

use budget_workload::FakeClockLimiter;

fn governor_fake_clock(ops: usize) -> Run<FakeClockLimiter> {
    Run::new(ops, budget_workload::governor_fake_clock())
}

// Grants from a bucket whose caller clock steps 1 ns a call.
#[library_benchmark]
#[bench::ops_1000(args = (1000), setup = bucket)]
#[bench::ops_2000(args = (2000), setup = bucket)]
fn token_bucket_grant(run: Run<TokenBucket>) -> Run<TokenBucket> {
    // The peers' loop shape (`0..ops`), plus the caller's clock.
    let mut now = 0u64;
    for _ in 0..run.ops() {
        now += 1;
        assert!(run.state.try_acquire(black_box(now)));
    }
    run
}

// `check()` on governor's default clock: the clock read is part of it.
#[library_benchmark]
#[bench::ops_1000(args = (1000), setup = governor)]
#[bench::ops_2000(args = (2000), setup = governor)]
fn governor_check(
    run: Run<governor::DefaultDirectRateLimiter>,
) -> Run<governor::DefaultDirectRateLimiter> {
    for _ in 0..run.ops() {
        assert!(run.state.check().is_ok());
    }
    run
}

// `check()` on a frozen fake clock: the algorithm alone.
#[library_benchmark]
#[bench::ops_1000(args = (1000), setup = governor_fake_clock)]
#[bench::ops_2000(args = (2000), setup = governor_fake_clock)]
fn governor_check_fake_clock(run: Run<FakeClockLimiter>) -> Run<FakeClockLimiter> {
    for _ in 0..run.ops() {
        assert!(run.state.check().is_ok());
    }
    run
}

library_benchmark_group!(
    name = budget;
    benchmarks = token_bucket_grant, governor_check, governor_check_fake_clock
);

// -------------------------------------------------------------------- hedge

/// A warmed hedger, its clock, and the request counter.
type Warm = Run<(Hedger, u64, u64)>;

fn common_hedger(ops: usize) -> Warm {
    let (h, t) = hedge_workload::common_hedger();
    Run::new(ops, (h, t, 0))
}

fn hedged_hedger(ops: usize) -> Warm {
    let (h, t) = hedge_workload::hedged_hedger();
    Run::new(ops, (h, t, 0))
}

#[library_benchmark]
#[bench::ops_1000(args = (1000), setup = common_hedger)]
#[bench::ops_2000(args = (2000), setup = common_hedger)]
fn hedge_common_path(mut run: Warm) -> Warm {
    let ops = run.ops();
    let (h, t, i) = &mut run.state;
    for _ in 0..ops {
        hedge_workload::common_path(h, t, i);
    }
    run
}

#[library_benchmark]
#[bench::ops_1000(args = (1000), setup = hedged_hedger)]
#[bench::ops_2000(args = (2000), setup = hedged_hedger)]
fn hedge_hedged_path(mut run: Warm) -> Warm {
    let ops = run.ops();
    let (h, t, _) = &mut run.state;
    for _ in 0..ops {
        hedge_workload::hedged_path(h, t);
    }
    run
}

library_benchmark_group!(
    name = hedge;
    benchmarks = hedge_common_path, hedge_hedged_path
);

main!(
    config = LibraryBenchmarkConfig::default();
    library_benchmark_groups = add, quantile, merge, budget, hedge
);
