//! The α guarantee exactly, in floating point: every answer `x̂` for an
//! exact value `x` satisfies `|x̂ − x| <= α·|x|` in real arithmetic on the
//! doubles involved (the product's error split off by a fused
//! multiply-add, the sums kept exact), with no epsilon. Checked on bucket
//! bounds and their neighbours, powers of two, the range ends and the
//! reported cases, for every mapping and several α; and likewise the
//! `rank` bound `x < v·γ` for two values that share a bucket.

mod common;

use common::{below_gamma, next_down, next_up, within};
use tailguard::mapping::{
    CubicMapping, ExponentialMapping, LinearMapping, LogLinearMapping, LogarithmicMapping,
};
use tailguard::store::CollapsingLowestStore;
use tailguard::{DDSketch, FromRelativeAccuracy, IndexMapping, SignedSketch};

const ALPHAS: [f64; 10] = [1e-7, 1e-4, 0.001, 0.01, 0.02, 0.05, 0.2, 0.5, 0.9, 0.999];

#[test]
fn the_exact_checks_are_exact() {
    // 1.01 as a double is 1.0100000000000000088…; 0.01 is 0.0100000000000000002…
    assert!(!within(1.01, 1.0, 0.01));
    assert!(within(next_down(1.01), 1.0, 0.01));
    assert!(!within(0.99, 1.0, 0.01) && within(next_up(0.99), 1.0, 0.01));
    assert!(within(1.0, 1.0, 1e-7));
    assert!(!within(-1.0, 1.0, 0.5));
    assert!(within(-1.005, -1.0, 0.01));
    assert!(within(1.8, 1.0, 0.9) && within(0.2, 1.0, 0.9) && !within(0.09, 1.0, 0.9));
    // Far below and above 1, where a·x is subnormal or huge.
    let tiny = 3.0 * f64::MIN_POSITIVE;
    assert!(within(tiny * 1.01, tiny, 0.0101) && !within(tiny * 1.02, tiny, 0.0101));
    let huge = f64::MAX / 4.0;
    assert!(within(huge * 1.01, huge, 0.0101) && !within(huge * 1.02, huge, 0.0101));
    // γ = 1.01 / 0.99 = 1.0202…: 1.0202 is below it, 1.0203 is not.
    assert!(below_gamma(1.0202, 1.0, 0.01) && !below_gamma(1.0203, 1.0, 0.01));
    assert!(below_gamma(1.0, 1.0, 0.01) && below_gamma(0.5, 1.0, 0.01));
}

/// The values just around every `stride`-th bucket bound (a few ulps, and a
/// few 2^-44 relative steps, beyond the rounding of the bound itself),
/// powers of two, the range ends and 1: everything in range, sorted.
fn probes<M: IndexMapping>(m: &M, keys: usize) -> Vec<f64> {
    let (lo, hi) = (m.min_indexable_value(), m.max_indexable_value());
    let mut v = vec![1.0];
    for x in [lo, hi] {
        let mut y = x;
        for _ in 0..4 {
            v.extend([y, next_down(y), next_up(y)]);
            y = next_up(y);
        }
    }
    let mut p = f64::MIN_POSITIVE;
    while p < f64::INFINITY {
        v.extend([p, next_up(p), next_down(p), next_up(next_up(p))]);
        p *= 2.0;
    }
    let (k0, k1) = (m.index(lo), m.index(hi));
    let stride = ((i64::from(k1) - i64::from(k0)) / keys as i64).max(1) as usize;
    let step = 2f64.powi(-44);
    for k in (k0..=k1).step_by(stride).chain([k0, k0 + 1, k1 - 1, k1]) {
        let b = m.lower_bound(k);
        let mut up = b;
        let mut down = b;
        for _ in 0..6 {
            v.extend([up, down]);
            up = next_up(up);
            down = next_down(down);
        }
        for j in 1..4 {
            let r = f64::from(j) * step;
            v.extend([b * (1.0 + r), b * (1.0 - r)]);
        }
    }
    v.retain(|&x| x >= lo && x <= hi);
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// Every probe's bucket representative is within α of it, exactly; two
/// probes that share a bucket are less than γ apart, exactly; and a sketch
/// of `{x / f, x, x · f}` answers its median within α of `x`, exactly, for
/// `f` a few dozen buckets and, where an octave is a dozen buckets or more
/// but not so many that the store would collapse, for `f = 2`.
fn exact_for<M: IndexMapping>(m: M) -> Vec<String> {
    // Fewer keys in debug builds (`cargo test`), all of them in release.
    let keys = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    let alpha = m.relative_accuracy();
    let probes = probes(&m, keys);
    let mut failures = vec![];
    for (i, &x) in probes.iter().enumerate() {
        let k = m.index(x);
        let rep = m.value(k);
        if !within(rep, x, alpha) {
            failures.push(format!("x={x:e} key={k} value={rep:e}"));
        }
        // The next probes in the same bucket (the bucket's span).
        for &y in probes[i + 1..].iter().take(16) {
            if m.index(y) == k && !below_gamma(y, x, alpha) {
                failures.push(format!("x={x:e} and y={y:e} share key {k}"));
            }
        }
    }
    let mut factors = vec![1.0 + 50.0 * alpha];
    // An octave of a dozen to a few thousand buckets: `{x / 2, x, 2x}`
    // then fits the store.
    if (12..4096).contains(&(m.index(2.0) - m.index(1.0))) {
        factors.push(2.0);
    }
    for f in factors {
        for &x in probes.iter().step_by(97) {
            if x / f < m.min_indexable_value() || x * f > m.max_indexable_value() {
                continue;
            }
            let mut s = DDSketch::<M, CollapsingLowestStore<8192>>::with_mapping(m);
            s.add_all(&[x / f, x, x * f]).unwrap();
            assert_eq!(s.collapse(), None);
            let q = s.quantile(0.5).unwrap().unwrap();
            if !within(q, x, alpha) {
                failures.push(format!("median of x/{f}, x, x·{f}: x={x:e} answer={q:e}"));
            }
        }
    }
    failures
}

/// [`exact_for`] at every α of [`ALPHAS`], the mapping stating at most it.
fn exact_everywhere<M: IndexMapping + FromRelativeAccuracy>() {
    for a in ALPHAS {
        let m = M::from_relative_accuracy(a).unwrap();
        let alpha = m.relative_accuracy();
        assert!(alpha <= a, "{m:?}: reports α = {alpha} for {a}");
        let failures = exact_for(m);
        assert!(
            failures.is_empty(),
            "{m:?}: {} probes fail, e.g. {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
    }
}

#[test]
fn logarithmic_is_exact_at_every_boundary() {
    exact_everywhere::<LogarithmicMapping>();
}

#[test]
fn cubic_is_exact_at_every_boundary() {
    exact_everywhere::<CubicMapping>();
}

#[test]
fn linear_is_exact_at_every_boundary() {
    exact_everywhere::<LinearMapping>();
}

#[test]
fn log_linear_is_exact_at_every_boundary() {
    exact_everywhere::<LogLinearMapping>();
}

/// OpenTelemetry's buckets at every scale: fixed by the specification, so
/// the margin is in the stated α, not in the buckets. Scales −10..=−6 state
/// α = 1 (their true α rounds to 1), which still bounds every answer.
#[test]
fn exponential_is_exact_at_every_boundary() {
    let mut failing = vec![];
    for scale in ExponentialMapping::MIN_SCALE..=ExponentialMapping::MAX_SCALE {
        let m = ExponentialMapping::new(scale).unwrap();
        let failures = exact_for(m);
        if !failures.is_empty() {
            eprintln!(
                "scale {scale} (α = {:e}): {} probes fail, e.g. {:?}",
                m.relative_accuracy(),
                failures.len(),
                &failures[..failures.len().min(3)]
            );
            failing.push(scale);
        }
    }
    assert!(failing.is_empty(), "scales {failing:?} are not exact");
    // By relative accuracy, as `with_accuracy` builds them.
    for a in ALPHAS.into_iter().filter(|&a| a >= 1e-6) {
        let m = ExponentialMapping::from_relative_accuracy(a).unwrap();
        assert!(m.relative_accuracy() <= a, "{m:?} for {a}");
    }
}

fn reported_quantiles<M: IndexMapping + FromRelativeAccuracy>() {
    let median = |a: f64, data: &[f64], q: f64| {
        let mut s: SignedSketch<M> = SignedSketch::with_accuracy(a).unwrap();
        s.add_all(data).unwrap();
        let alpha = s.mapping().relative_accuracy();
        (s.quantile(q).unwrap().unwrap(), alpha)
    };
    // α = 0.01: 1.01 (0x3ff028f5c28f5c29) is above 1 + α.
    let (q, a) = median(0.01, &[0.25, 1.0, 4.0], 0.5);
    assert!(within(q, 1.0, a), "{q:e} ({:#x})", q.to_bits());
    let (q, a) = median(0.01, &[1.0, 2.0], 0.0);
    assert!(within(q, 1.0, a), "{q:e}");
    let (q, a) = median(0.01, &[-4.0, -1.0, -0.25], 0.5);
    assert!(within(q, -1.0, a), "{q:e}");
    // α = 0.05, the linear case 1.83 ulp over.
    let data = [450173.5791120575, 1800694.31644823, 7202777.26579292];
    let (q, a) = median(0.05, &data, 0.5);
    assert!(within(q, data[1], a), "{q:e}");
}

#[test]
fn reported_quantile_cases_are_within_alpha() {
    reported_quantiles::<LogarithmicMapping>();
    reported_quantiles::<CubicMapping>();
    reported_quantiles::<LinearMapping>();
    reported_quantiles::<LogLinearMapping>();
}

/// The audit's cases for `ExponentialMapping`: powers of two at scales
/// 0 and 3, a median at scale 6, an exact power of two at several scales.
#[test]
fn reported_exponential_cases_are_within_alpha() {
    let median = |scale: i32, data: &[f64]| {
        let m = ExponentialMapping::new(scale).unwrap();
        let mut s = SignedSketch::<ExponentialMapping>::with_mapping(m);
        s.add_all(data).unwrap();
        (s.quantile(0.5).unwrap().unwrap(), m.relative_accuracy())
    };
    // Scale 3: 0.956705382500610768, 4.32946174993892319e-2 from 1.
    let (q, a) = median(3, &[0.5, 1.0, 3.0]);
    assert!(within(q, 1.0, a), "{q:e} ({:#x}), α = {a:e}", q.to_bits());
    let (q, a) = median(0, &[0.25, 1.0, 4.0]);
    assert!(within(q, 1.0, a), "{q:e}, α = {a:e}");
    // Scale 6: 1.00000000000000044·α off.
    let v = 1.4144738197962843e-5;
    let (q, a) = median(6, &[v / 2.0, v, 2.0 * v]);
    assert!(within(q, v, a), "{q:e}, α = {a:e}");
    for scale in [0, 2, 3, 4, 7, 10, 15, 16, 17, 19, 20] {
        let m = ExponentialMapping::new(scale).unwrap();
        let a = m.relative_accuracy();
        for v in [1.0, 2.0, 0.5, 1024.0, 2f64.powi(-1000)] {
            let r = m.value(m.index(v));
            assert!(within(r, v, a), "{v:e} at scale {scale}: {r:e}, α = {a:e}");
        }
    }
}

#[test]
fn reported_rank_case_is_within_its_bounds() {
    let data = [16.7784278648626, 17.11738600354669, 68.46954401418677];
    let mut s: DDSketch<LogarithmicMapping> = DDSketch::with_accuracy(0.01).unwrap();
    s.add_all(&data).unwrap();
    let alpha = s.mapping().relative_accuracy();
    for &v in &data {
        let r = s.rank(v).unwrap().unwrap();
        // At least the samples <= v, at most those < v·γ (exactly).
        let at_most = data.iter().filter(|&&x| below_gamma(x, v, alpha)).count();
        let at_least = data.iter().filter(|&&x| x <= v).count();
        let n = data.len() as f64;
        assert!(
            r >= at_least as f64 / n && r <= at_most.max(at_least) as f64 / n,
            "rank({v}) = {r}, bounds {at_least}/3 ..= {at_most}/3"
        );
    }
    assert_eq!(s.rank(16.7784278648626).unwrap(), Some(1.0 / 3.0));
}

/// Where `index` is not monotone at the ulp level (the cubic's polynomial),
/// `rank` still counts every sample `<= v`.
/// Returns how many such pairs it met.
fn rank_counts_every_smaller_sample<M: IndexMapping + FromRelativeAccuracy>() -> usize {
    let mut met = 0;
    for a in ALPHAS {
        let m = M::from_relative_accuracy(a).unwrap();
        // Every ulp within 48 of 20 000 bucket bounds.
        let (k0, k1) = (
            m.index(m.min_indexable_value()),
            m.index(m.max_indexable_value()),
        );
        let stride = ((i64::from(k1) - i64::from(k0)) / 20_000).max(1) as usize;
        let mut probes = vec![];
        for k in (k0 + 1..k1).step_by(stride) {
            let b = m.lower_bound(k).to_bits();
            probes.extend((b - 48..=b + 48).map(f64::from_bits));
        }
        for w in probes.windows(2).filter(|w| w[0] < w[1]) {
            let (x, y) = (w[0], w[1]);
            if m.index(x) <= m.index(y) {
                continue;
            }
            // x < y, yet x's key is above y's.
            met += 1;
            let mut s = DDSketch::<M, CollapsingLowestStore<8192>>::with_mapping(m);
            s.add_all(&[x, y, y * 4.0]).unwrap();
            let r = s.rank(y).unwrap().unwrap();
            assert!(r >= 2.0 / 3.0, "{m:?}: rank({y:e}) = {r} misses {x:e}");
        }
    }
    met
}

#[test]
fn rank_is_monotone_enough() {
    rank_counts_every_smaller_sample::<LogarithmicMapping>();
    rank_counts_every_smaller_sample::<LinearMapping>();
    // Exactly monotone: never met.
    assert_eq!(rank_counts_every_smaller_sample::<LogLinearMapping>(), 0);
    // The cubic's key does go backwards here and there: the test bites.
    let met = rank_counts_every_smaller_sample::<CubicMapping>();
    println!("cubic: {met} adjacent probes whose keys go backwards");
    assert!(met > 0);
}

/// Zeros are recorded as `+0.0` in `min` and `max`, whatever their sign
/// and order, so that those do not depend on the insertion order (negative
/// subnormals, counted as zeros too, keep their value).
#[test]
fn zero_min_and_max_are_positive_whatever_the_order() {
    let bits = |x: Option<f64>| x.map(f64::to_bits);
    let zero = Some(0f64.to_bits());
    for data in [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [0.0, 0.0]] {
        let mut s = SignedSketch::<CubicMapping>::with_accuracy(0.01).unwrap();
        s.add_all(&data).unwrap();
        assert_eq!((bits(s.min()), bits(s.max())), (zero, zero), "{data:?}");
        let mut w = SignedSketch::<CubicMapping>::with_accuracy(0.01).unwrap();
        w.add_weighted(data[0], 3).unwrap();
        w.add_weighted(data[1], 2).unwrap();
        assert_eq!((bits(w.min()), bits(w.max())), (zero, zero), "{data:?}");
        // Merged either way round.
        let (mut a, mut b) = (
            SignedSketch::<CubicMapping>::with_accuracy(0.01).unwrap(),
            SignedSketch::<CubicMapping>::with_accuracy(0.01).unwrap(),
        );
        a.add(data[0]).unwrap();
        b.add(data[1]).unwrap();
        let mut ab = a.clone();
        ab.merge(&b).unwrap();
        b.merge(&a).unwrap();
        for m in [&ab, &b] {
            assert_eq!((bits(m.min()), bits(m.max())), (zero, zero), "{data:?}");
        }
        let mut u = DDSketch::<CubicMapping>::with_accuracy(0.01).unwrap();
        u.add_all(&data).unwrap();
        assert_eq!((bits(u.min()), bits(u.max())), (zero, zero), "{data:?}");
    }
    // A negative subnormal is a negative sample: it stays the minimum.
    let tiny = -f64::from_bits(7);
    let mut s = SignedSketch::<CubicMapping>::with_accuracy(0.01).unwrap();
    s.add_all(&[0.0, tiny, -0.0]).unwrap();
    assert_eq!((bits(s.min()), bits(s.max())), (Some(tiny.to_bits()), zero));
    assert_eq!(s.zero_count(), 3);
}
