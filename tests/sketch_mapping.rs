//! Index mappings across their whole indexable range: round trip within α
//! (exactly), bucket bounds consistent with `index`, `index` monotonic up
//! to its slack, and mappings rebuilt from their wire parameters equal.

mod common;

use common::{cases, next_down, next_up, within};
use proptest::prelude::*;
use tailguard::mapping::{CubicMapping, LinearMapping, LogLinearMapping, LogarithmicMapping};
use tailguard::{FromRelativeAccuracy, IndexMapping};

const ALPHAS: [f64; 4] = [0.001, 0.01, 0.05, 0.2];
/// Relative slack of the bucket *bounds* (not of the α guarantee, which is
/// exact): a few ulps *of the logarithm*. Keys are computed as
/// `floor(log(v) · multiplier)`, and `log(v)` near ±709 carries an absolute
/// rounding error of about 1e-13, so bucket boundaries (and `lower_bound`)
/// are only that exact in relative terms: measured up to ~1 500 ulps of `v`
/// at the ends of the `f64` range, a few ulps for `v` in `[0.5, 2)`.
fn slack(v: f64) -> f64 {
    4.0 * f64::EPSILON * (2.0 + v.ln().abs())
}

fn round_trip<M: IndexMapping>(m: &M, v: f64) -> Result<(), TestCaseError> {
    let a = m.relative_accuracy();
    let eps = slack(v);
    let k = m.index(v);
    let rep = m.value(k);
    prop_assert!(
        within(rep, v, a),
        "{:?}: v={:e} key={} value={:e} rel err={:e}",
        m,
        v,
        k,
        rep,
        ((rep - v) / v).abs()
    );
    let lo = m.lower_bound(k);
    let hi = m.lower_bound(k.saturating_add(1));
    // lower_bound(k) <= v < lower_bound(k + 1), up to the slack (one ulp
    // near 1.0, see `bounds_are_ulp_exact_near_one`).
    prop_assert!(
        lo <= v * (1.0 + eps) && v < hi * (1.0 + eps),
        "{:?}: v={:e} key={} bounds [{:e}, {:e})",
        m,
        v,
        k,
        lo,
        hi
    );
    // Consecutive bounds are at most γ apart: the representative covers
    // the whole bucket.
    let gamma = (1.0 + a) / (1.0 - a);
    prop_assert!(
        hi <= lo * gamma * (1.0 + 2.0 * eps),
        "{:?}: key {} spans {}",
        m,
        k,
        hi / lo
    );
    Ok(())
}

/// Keys are monotone up to the mapping's slack: `index(x) <= index(y·(1+ρ))`
/// for `x <= y` (the cubic's polynomial can step back an ulp near a bound).
fn monotonic<M: IndexMapping>(m: &M, values: &[f64]) -> Result<(), TestCaseError> {
    let widen = 1.0 + m.key_slack();
    for w in values.windows(2) {
        prop_assert!(w[0] <= w[1]);
        let up = (w[1] * widen).min(m.max_indexable_value());
        prop_assert!(
            m.index(w[0]) <= m.index(up),
            "{:?}: index({:e}) = {} > index({:e}) = {}",
            m,
            w[0],
            m.index(w[0]),
            w[1],
            m.index(w[1])
        );
    }
    Ok(())
}

/// The fixed probes: the range ends, exact powers of two, and one-ulp
/// neighbours of bucket boundaries (every `stride`-th key).
fn fixed_probes<M: IndexMapping>(m: &M) -> Vec<f64> {
    let (lo, hi) = (m.min_indexable_value(), m.max_indexable_value());
    let mut v = vec![lo, next_up(lo), hi, next_down(hi), 1.0];
    let mut p = f64::MIN_POSITIVE;
    while p < f64::INFINITY {
        v.extend([p, next_up(p), next_down(p)]);
        p *= 2.0;
    }
    let (k0, k1) = (m.index(lo), m.index(hi));
    let stride = ((i64::from(k1) - i64::from(k0)) / 20_000).max(1) as usize;
    for k in (k0..=k1).step_by(stride).chain([k0 + 1, k1 - 1, k1]) {
        let b = m.lower_bound(k);
        v.extend([b, next_up(b), next_down(b)]);
    }
    v.retain(|&x| x >= lo && x <= hi);
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

fn check_fixed<M: IndexMapping + FromRelativeAccuracy>() {
    for a in ALPHAS {
        let m = M::from_relative_accuracy(a).unwrap();
        assert!(m.min_indexable_value() <= 1e-300 && m.max_indexable_value() >= 1e300);
        let probes = fixed_probes(&m);
        for &v in &probes {
            round_trip(&m, v).unwrap();
        }
        monotonic(&m, &probes).unwrap();
        // Every key in range maps back to itself through its lower bound
        // (checked on a sample of keys).
        let (k0, k1) = (
            m.index(m.min_indexable_value()),
            m.index(m.max_indexable_value()),
        );
        for k in (k0 + 1..k1).step_by(97) {
            let b = m.lower_bound(k);
            let back = m.index(b);
            assert!(
                (back - k).abs() <= 1,
                "{m:?}: index(lower_bound({k})) = {back}"
            );
            let eps = slack(b);
            assert!(m.index(b * (1.0 + eps)) >= k, "{m:?}: key {k}");
            assert!(m.index(b * (1.0 - eps)) < k, "{m:?}: key {k}");
        }
    }
}

#[test]
fn logarithmic_round_trip_over_whole_range() {
    check_fixed::<LogarithmicMapping>();
}

#[test]
fn cubic_round_trip_over_whole_range() {
    check_fixed::<CubicMapping>();
}

#[test]
fn linear_round_trip_over_whole_range() {
    check_fixed::<LinearMapping>();
}

#[test]
fn log_linear_round_trip_over_whole_range() {
    check_fixed::<LogLinearMapping>();
}

/// Log-uniform over the whole indexable range, from a uniform exponent.
fn log_uniform<M: IndexMapping>(m: &M, u: f64) -> f64 {
    let (lo, hi) = (m.min_indexable_value().ln(), m.max_indexable_value().ln());
    (lo + u * (hi - lo))
        .exp()
        .clamp(m.min_indexable_value(), m.max_indexable_value())
}

fn check_random<M: IndexMapping + FromRelativeAccuracy>(us: &[f64]) -> Result<(), TestCaseError> {
    for a in ALPHAS {
        let m = M::from_relative_accuracy(a).unwrap();
        let mut values: Vec<f64> = us.iter().map(|&u| log_uniform(&m, u)).collect();
        for &v in &values {
            round_trip(&m, v)?;
        }
        values.sort_by(f64::total_cmp);
        monotonic(&m, &values)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn round_trip_log_uniform(us in prop::collection::vec(0.0f64..=1.0, 1..500)) {
        check_random::<LogarithmicMapping>(&us)?;
        check_random::<CubicMapping>(&us)?;
        check_random::<LinearMapping>(&us)?;
        check_random::<LogLinearMapping>(&us)?;
    }

    #[test]
    fn round_trip_any_alpha(a in 1e-4f64..0.5, us in prop::collection::vec(0.0f64..=1.0, 1..100)) {
        // Arbitrary α, not only the listed ones.
        for &u in &us {
            let m = LogarithmicMapping::new(a).unwrap();
            round_trip(&m, log_uniform(&m, u))?;
            let m = CubicMapping::new(a).unwrap();
            round_trip(&m, log_uniform(&m, u))?;
            let m = LinearMapping::new(a).unwrap();
            round_trip(&m, log_uniform(&m, u))?;
            let m = LogLinearMapping::new(a).unwrap();
            round_trip(&m, log_uniform(&m, u))?;
        }
    }
}

/// Near 1.0, where `log(v)` is small, `lower_bound` is the exact boundary
/// of `index` to within a few (eight) ulps.
fn near_one<M: IndexMapping + FromRelativeAccuracy>() {
    for a in ALPHAS {
        let m = M::from_relative_accuracy(a).unwrap();
        for k in m.index(0.5)..=m.index(2.0) {
            let b = m.lower_bound(k);
            let (below, above) = (
                f64::from_bits(b.to_bits() - 8),
                f64::from_bits(b.to_bits() + 8),
            );
            assert!(
                m.index(below) < k && m.index(above) >= k,
                "{m:?}: key {k} bound {b:e}"
            );
        }
    }
}

#[test]
fn bounds_are_ulp_exact_near_one() {
    near_one::<LogarithmicMapping>();
    near_one::<CubicMapping>();
    near_one::<LinearMapping>();
    near_one::<LogLinearMapping>();
}

/// The representative covers the bucket's computed bounds too: within α of
/// `lower_bound(k)` and of `lower_bound(k + 1)`, exactly, over the whole key
/// range and its ends.
fn value_covers_the_bounds<M: IndexMapping + FromRelativeAccuracy>() {
    for a in ALPHAS {
        let m = M::from_relative_accuracy(a).unwrap();
        let alpha = m.relative_accuracy();
        let (k0, k1) = (
            m.index(m.min_indexable_value()),
            m.index(m.max_indexable_value()),
        );
        for k in (k0..k1).step_by(31).chain([k0, k1 - 1]) {
            let (lo, hi, v) = (m.lower_bound(k), m.lower_bound(k + 1), m.value(k));
            assert!(
                within(v, lo, alpha) && within(v, hi, alpha),
                "{m:?}: key {k}: value {v:e} for [{lo:e}, {hi:e})"
            );
        }
    }
}

#[test]
fn value_covers_the_bucket_bounds() {
    value_covers_the_bounds::<LogarithmicMapping>();
    value_covers_the_bounds::<CubicMapping>();
    value_covers_the_bounds::<LinearMapping>();
    value_covers_the_bounds::<LogLinearMapping>();
}

/// A mapping rebuilt from its γ and index offset (what the wire format
/// carries) is equal to it, buckets and representatives alike, and a sketch
/// over it merges with one over the original.
fn wire_round_trip<M: IndexMapping + FromRelativeAccuracy>(rebuild: impl Fn(f64, f64) -> M) {
    for a in [1e-7, 0.001, 0.01, 0.02, 0.05, 0.5] {
        let new = M::from_relative_accuracy(a).unwrap();
        for offset in [0.0, 1.0, -3.5, 1000.25] {
            let m = rebuild(new.gamma(), offset);
            let again = rebuild(m.gamma(), m.index_offset());
            assert_eq!(again, m, "{a} {offset}");
            assert!(again.relative_accuracy() <= a * (1.0 + 1e-6), "{again:?}");
            for x in [1e-300, 1e-3, 0.7, 1.0, 3.0, 1e9, 1e300] {
                let k = m.index(x);
                assert_eq!(again.index(x), k);
                assert_eq!(again.value(k).to_bits(), m.value(k).to_bits());
            }
            let mut s = tailguard::DDSketch::<M>::with_mapping(m);
            s.add_all(&[1.0, 2.0, 1e6]).unwrap();
            let mut t = tailguard::DDSketch::<M>::with_mapping(again);
            t.add_all(&[3.0, 4.0]).unwrap();
            assert_eq!(s.merge(&t), Ok(()), "{m:?} vs {again:?}");
            assert_eq!(s.count(), 5);
            // A different γ or offset is a different mapping.
            assert_ne!(rebuild(next_up(m.gamma()), offset), m);
            assert_ne!(rebuild(m.gamma(), offset + 0.5), m);
        }
        // With offset 0, the rebuilt mapping equals the original itself.
        assert_eq!(rebuild(new.gamma(), new.index_offset()), new, "{a}");
    }
}

#[test]
fn mappings_rebuilt_from_gamma_and_offset_merge() {
    wire_round_trip(|g, o| LogarithmicMapping::with_gamma(g, o).unwrap());
    wire_round_trip(|g, o| CubicMapping::with_gamma(g, o).unwrap());
    wire_round_trip(|g, o| LinearMapping::with_gamma(g, o).unwrap());
}
