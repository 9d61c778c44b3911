//! `LogLinearMapping`'s integer path against exact answers: for any `k`,
//! offset and `u64`, the integer key equals the float key wherever
//! `v as f64` is exact (else it is at most one below), its bucket holds the
//! exact integer, and the representative is within α of it, exactly; and
//! a sketch fed through `add_u64` (and, for exact values, `add`) keeps
//! count, min, max and the 128-bit sum exact and every quantile within α
//! of the exact lower quantile of the integers.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tailguard::mapping::{IndexMapping, LogLinearMapping};
use tailguard::store::CollapsingLowestStore;
use tailguard::DDSketch;

mod exact;
use exact::within;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Any integer.
    Add(u64),
    /// `mantissa << shift`: powers of two, bucket boundaries and their
    /// neighbours, the region above 2^53.
    AddShifted(u16, u8, i8),
    /// Through the float path, for values the conversion keeps exact.
    AddAsFloat(u64),
    Merge(Vec<u64>),
    Clear,
}

/// `k <= 8`: 64 · 2^8 keys cover every nonzero `u64`, so this never
/// collapses.
type Sketch = DDSketch<LogLinearMapping, CollapsingLowestStore<16384>>;

const TWO_53: u64 = 1 << 53;

/// `|rep − v| <= α·v` exactly, for an integer `v`: through the float check
/// when `v` is a double, else in integers (above 2^53 every bound and
/// representative is an integer, and `α = A · 2^F` makes `⌊α·v⌋` a shift
/// of the exact product `A·v < 2^117`).
fn within_u64(rep: f64, v: u64, alpha: f64) -> bool {
    if v <= TWO_53 {
        return within(rep, v as f64, alpha);
    }
    assert_eq!(rep.fract(), 0.0, "{rep}");
    let diff = (rep as u128).abs_diff(u128::from(v));
    let bits = alpha.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let significand = u128::from((bits & ((1 << 52) - 1)) | (1 << 52));
    let product = significand * u128::from(v);
    assert!(exponent < 0);
    diff <= product >> exponent.unsigned_abs()
}

fn check_value(m: &LogLinearMapping, v: u64) {
    let Some(k) = m.index_u64(v) else {
        assert_eq!(v, 0);
        return;
    };
    let f = v as f64;
    let d = i64::from(m.index(f)) - i64::from(k);
    if f as u128 == u128::from(v) {
        assert_eq!(d, 0, "{m:?} v={v}");
    } else {
        assert!(d == 0 || d == 1, "{m:?} v={v}");
    }
    let (lo, hi) = (m.lower_bound(k), m.lower_bound(k + 1));
    if v <= TWO_53 {
        assert!(lo <= f && f < hi, "{m:?} v={v} [{lo}, {hi})");
    } else {
        let (lo, hi) = (lo as u128, hi as u128);
        assert!(lo <= u128::from(v) && u128::from(v) < hi, "{m:?} v={v}");
    }
    assert!(
        within_u64(m.value(k), v, m.relative_accuracy()),
        "{m:?} v={v}"
    );
}

/// `floats`: whether some sample came through `add`, whose float sum
/// rounds at each addition.
fn check_sketch(s: &Sketch, model: &[u64], floats: bool) {
    assert_eq!(s.count(), model.len() as u64);
    assert!(s.collapse().is_none());
    if model.is_empty() {
        assert_eq!((s.min(), s.max(), s.sum()), (None, None, None));
        return;
    }
    let mut sorted = model.to_vec();
    sorted.sort_unstable();
    assert_eq!(s.min(), Some(sorted[0] as f64));
    assert_eq!(s.max(), Some(sorted[sorted.len() - 1] as f64));
    let exact: u128 = model.iter().map(|&v| u128::from(v)).sum();
    let sum = s.sum().unwrap();
    if floats {
        let n = model.len() as f64;
        let exact = exact as f64;
        assert!(
            (sum - exact).abs() <= (n + 2.0) * f64::EPSILON * exact,
            "{sum} vs {exact}"
        );
    } else {
        // Exact in 128 bits, rounded once.
        assert_eq!(sum, exact as f64);
    }
    let alpha = s.mapping().relative_accuracy();
    for i in 0..=50 {
        let q = f64::from(i) / 50.0;
        let n = sorted.len() as u64;
        let x = sorted[((q * (n - 1) as f64) as u64).min(n - 1) as usize];
        let est = s.quantile(q).unwrap().unwrap();
        // Answers are clamped to the float min and max, which are the
        // integers rounded: for an extreme above 2^53 that may be `x as f64`.
        let ok = if x == 0 {
            est == 0.0
        } else {
            within_u64(est, x, alpha) || (x > TWO_53 && est == x as f64)
        };
        assert!(ok, "q={q} x={x} est={est}");
    }
}

fuzz_target!(|input: (u8, i32, Vec<Op>)| {
    let (bits, offset, ops) = input;
    // Any `k` and offset for the mapping alone; the sketch takes k <= 8.
    let limit = LogLinearMapping::MAX_INDEX_OFFSET;
    let m = LogLinearMapping::with_bits(u32::from(bits) % 24, offset.clamp(-limit, limit))
        .expect("in range");
    let small = LogLinearMapping::with_bits(u32::from(bits) % 9, offset.clamp(-limit, limit))
        .expect("in range");
    let mut s: Box<Sketch> = Box::new(Sketch::with_mapping(small));
    let mut model: Vec<u64> = Vec::new();
    let mut floats = false;
    for op in ops.into_iter().take(128) {
        match op {
            Op::Add(v) => {
                check_value(&m, v);
                s.add_u64(v).unwrap();
                model.push(v);
            }
            Op::AddShifted(mantissa, shift, delta) => {
                let v = u64::from(mantissa)
                    .checked_shl(u32::from(shift % 64))
                    .unwrap_or(0)
                    .wrapping_add_signed(i64::from(delta));
                check_value(&m, v);
                check_value(&small, v);
                s.add_u64(v).unwrap();
                model.push(v);
            }
            Op::AddAsFloat(v) => {
                let v = v % (TWO_53 + 1);
                s.add(v as f64).unwrap();
                model.push(v);
                floats = true;
            }
            Op::Merge(values) => {
                let mut other: Box<Sketch> = Box::new(Sketch::with_mapping(small));
                for v in values.into_iter().take(64) {
                    other.add_u64(v).unwrap();
                    model.push(v);
                }
                s.merge(&other).unwrap();
            }
            Op::Clear => {
                s.clear();
                model.clear();
                floats = false;
            }
        }
        check_sketch(&s, &model, floats);
    }
});
