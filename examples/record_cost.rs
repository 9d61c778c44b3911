//! Instructions per recorded latency, for callgrind: the integer path
//! (`LogLinearMapping`, `add_u64`), hdrhistogram's `record`, and the
//! default sketch's f64 `add` (cubic mapping), each in its own
//! never-inlined function over the same 100 000 latencies (lognormal in
//! nanoseconds, median 5 ms, σ = 0.5), with `black_box` on every value.
//!
//! ```text
//! cargo build --release --example record_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/record_cost
//! callgrind_annotate --inclusive=yes /tmp/cg.out | grep '=> .*record_cost::'
//! ```
//!
//! Divide each function's inclusive count (the `=>` lines: the calls from
//! `main`) by the number of values the program prints; it also prints each
//! sketch's p99, so that no work is optimized away. A plain `--release`
//! build has 16 codegen units, and hdrhistogram's `record` is then not
//! fully inlined (77 instructions a value instead of the 63 that
//! `benches/instructions.rs` measures with one unit): compare ratios from
//! one build.

use clap::Parser;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use std::hint::black_box;
use tailguard::{DDSketch, LogLinearMapping};

/// Instructions per recorded latency, for callgrind: log-linear `add_u64`
/// and `add`, hdrhistogram's `record` and the cubic `add`, each over the
/// same 100 000 latencies; prints each one's p99. Takes no arguments.
#[derive(Parser)]
#[command(
    name = "record_cost",
    after_help = "Example:\n  valgrind --tool=callgrind target/release/examples/record_cost"
)]
struct Args {}

const N: usize = 100_000;
const ALPHA: f64 = 0.01;

#[inline(never)]
fn log_linear_add_u64(s: &mut DDSketch<LogLinearMapping>, data: &[u64]) {
    for &v in data {
        let _ = s.add_u64(black_box(v));
    }
}

#[inline(never)]
fn log_linear_add_f64(s: &mut DDSketch<LogLinearMapping>, data: &[f64]) {
    for &v in data {
        let _ = s.add(black_box(v));
    }
}

#[inline(never)]
fn hdrhistogram_record(h: &mut hdrhistogram::Histogram<u64>, data: &[u64]) {
    for &v in data {
        let _ = h.record(black_box(v));
    }
}

#[inline(never)]
fn cubic_add_f64(s: &mut DDSketch, data: &[f64]) {
    for &v in data {
        let _ = s.add(black_box(v));
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {} = Args::parse(); // --help, or an error for any argument
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let dist = LogNormal::new(5e6f64.ln(), 0.5)?;
    let floats: Vec<f64> = (0..N).map(|_| dist.sample(&mut rng).round()).collect();
    let ints: Vec<u64> = floats.iter().map(|&v| v as u64).collect();

    let mut a = DDSketch::<LogLinearMapping>::with_accuracy(ALPHA)?;
    log_linear_add_u64(&mut a, &ints);
    let mut b = DDSketch::<LogLinearMapping>::with_accuracy(ALPHA)?;
    log_linear_add_f64(&mut b, &floats);
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2)?;
    hdrhistogram_record(&mut h, &ints);
    let mut c = DDSketch::new(ALPHA)?;
    cubic_add_f64(&mut c, &floats);

    println!("{N} values each");
    println!(
        "p99: log-linear u64 {:?}, f64 {:?}, hdrhistogram {}, cubic {:?}",
        a.quantile(0.99)?,
        b.quantile(0.99)?,
        h.value_at_quantile(0.99),
        c.quantile(0.99)?
    );
    Ok(())
}
