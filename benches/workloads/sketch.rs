//! The sketch workload shared by `benches/sketch.rs` (criterion, time) and
//! `benches/instructions.rs` (gungraun, instruction counts): 10 000
//! lognormal latencies in nanoseconds (median 5 ms, σ = 0.5) with a 5 % tail
//! ten times slower, α = 1 %, and the peers' configurations.

use std::hint::black_box;

pub const N: usize = 10_000;
pub const ALPHA: f64 = 0.01;

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
pub fn latencies() -> Vec<f64> {
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

/// The same latencies as integers, for `hdrhistogram`.
pub fn integer_latencies(data: &[f64]) -> Vec<u64> {
    data.iter().map(|&v| v as u64).collect()
}

/// `sketches-ddsketch` 0.4 at the same α, 2048 bins.
pub fn peer_config() -> sketches_ddsketch::Config {
    sketches_ddsketch::Config::new(ALPHA, 2048, 1e-9)
}

/// `hdrhistogram` 7: 1 ns to one hour, 2 significant digits.
pub fn hdr() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 2).unwrap()
}

/// One pass of `record` over `data`, hidden from the optimiser as a whole
/// (`black_box` on the slice) so that no value is known at compile time.
pub fn pass<T: Copy>(data: &[T], mut record: impl FnMut(T)) {
    for &v in black_box(data) {
        record(v);
    }
}

/// One pass with `black_box` on every value: each value goes through the
/// stack and, since `black_box` may touch any memory, every field the add
/// reads is reloaded from memory each time, as for an isolated call. A
/// pessimistic bound that costs more for `f64` values than for integers.
pub fn pass_per_value<T: Copy>(data: &[T], mut record: impl FnMut(T)) {
    for &v in data {
        record(black_box(v));
    }
}

/// Our sketch and the peer's, each holding the 10 000 latencies.
pub fn filled() -> (tailguard::DDSketch, sketches_ddsketch::DDSketch) {
    let mut ours = tailguard::DDSketch::new(ALPHA).unwrap();
    let mut peer = sketches_ddsketch::DDSketch::new(peer_config());
    for &v in &latencies() {
        ours.add(v).unwrap();
        peer.add(v);
    }
    (ours, peer)
}

/// The two halves of [`latencies`], each in a sketch of its own, as the
/// merge benchmarks merge them: ours, then the peer's.
#[allow(clippy::type_complexity)]
pub fn merge_halves() -> (
    (tailguard::DDSketch, tailguard::DDSketch),
    (sketches_ddsketch::DDSketch, sketches_ddsketch::DDSketch),
) {
    let data = latencies();
    let (first, second) = data.split_at(N / 2);
    let mut a = tailguard::DDSketch::new(ALPHA).unwrap();
    let mut b = tailguard::DDSketch::new(ALPHA).unwrap();
    let mut pa = sketches_ddsketch::DDSketch::new(peer_config());
    let mut pb = sketches_ddsketch::DDSketch::new(peer_config());
    for &v in first {
        a.add(v).unwrap();
        pa.add(v);
    }
    for &v in second {
        b.add(v).unwrap();
        pb.add(v);
    }
    ((a, b), (pa, pb))
}
