//! Shared helpers for the sketch property tests: data shapes built from
//! proptest's own uniform samples, and exact-oracle checks.
#![allow(dead_code)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use tailguard::mapping::MIN_RELATIVE_ACCURACY;
use tailguard::store::{Collapse, CollapseSide, CollapsingStore, StoreCollapse};
use tailguard::{DDSketch, IndexMapping, Store};

/// Proptest cases: `PROPTEST_CASES` if set, otherwise `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Data shapes for the accuracy tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Uniform,
    Normal,
    LogNormal,
    Exponential,
    Pareto,
    Constant,
    Bimodal,
    MixedSign,
    AroundZero,
    NearMinIndexable,
    WideRange,
}

pub const SHAPES: [Shape; 11] = [
    Shape::Uniform,
    Shape::Normal,
    Shape::LogNormal,
    Shape::Exponential,
    Shape::Pareto,
    Shape::Constant,
    Shape::Bimodal,
    Shape::MixedSign,
    Shape::AroundZero,
    Shape::NearMinIndexable,
    Shape::WideRange,
];

/// A standard normal deviate from two uniforms in `[0, 1)` (Box–Muller).
fn normal(u1: f64, u2: f64) -> f64 {
    (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * core::f64::consts::PI * u2).cos()
}

/// One value of `shape` at scale `s` with shape parameter `p` in `[0, 1)`,
/// from three uniforms in `[0, 1)`.
pub fn sample(shape: Shape, s: f64, p: f64, u: [f64; 3]) -> f64 {
    let [u1, u2, u3] = u;
    match shape {
        Shape::Uniform => s * u1,
        Shape::Normal => s * (1.0 + 0.25 * normal(u1, u2)),
        Shape::LogNormal => s * (((0.1 + 2.0 * p) * normal(u1, u2)).exp()),
        Shape::Exponential => -s * (1.0 - u1).ln(),
        Shape::Pareto => {
            // Tail index 1..3; u capped so the range stays within 10^12.
            let a = 1.0 + 2.0 * p;
            s / (1.0 - u1 * (1.0 - 1e-12)).powf(1.0 / a)
        }
        Shape::Constant => s * (1.0 + p),
        Shape::Bimodal => {
            let base = if u3 < 0.7 { s } else { 1000.0 * s };
            base * (0.3 * normal(u1, u2)).exp()
        }
        Shape::MixedSign => {
            let v = s * (normal(u1, u2)).exp();
            if u3 < 0.5 {
                -v
            } else {
                v
            }
        }
        Shape::AroundZero => {
            let sign = if u2 < 0.5 { -1.0 } else { 1.0 };
            match (u3 * 5.0) as u32 {
                0 => 0.0,
                1 => -0.0,
                // Subnormals (and the smallest normal).
                2 => sign * u1 * f64::MIN_POSITIVE,
                3 => sign * f64::from_bits(1 + (u1 * 1000.0) as u64),
                _ => sign * 1e-6 * 10f64.powf(3.0 * u1),
            }
        }
        Shape::NearMinIndexable => {
            let sign = if u2 < 0.5 { -1.0 } else { 1.0 };
            sign * f64::MIN_POSITIVE * 2f64.powf(8.0 * u1)
        }
        Shape::WideRange => s * 10f64.powf(12.0 * u1),
    }
}

/// Sizes: mostly small, a few large (up to 10^5).
pub fn size() -> impl Strategy<Value = usize> {
    // Under miri, which interprets every instruction, keep sizes small.
    let (medium, large) = if cfg!(miri) {
        (300, 1_000)
    } else {
        (3_000, 100_000)
    };
    prop_oneof![
        24 => 1usize..100,
        6 => 100usize..medium,
        1 => medium..=large,
    ]
}

/// A data set: `(shape, values)`.
pub fn dataset(size: impl Strategy<Value = usize>) -> impl Strategy<Value = (Shape, Vec<f64>)> {
    let scale = prop_oneof![4 => -3i32..=9, 1 => -290i32..=290];
    (
        proptest::sample::select(&SHAPES[..]),
        scale,
        0.0f64..1.0,
        size,
    )
        .prop_flat_map(|(shape, e, p, n)| {
            let s = 10f64.powi(e);
            prop::collection::vec((0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0), n).prop_map(move |us| {
                let values = us
                    .into_iter()
                    .map(|(a, b, c)| sample(shape, s, p, [a, b, c]))
                    .collect();
                (shape, values)
            })
        })
}

/// Relative accuracies the accuracy tests pick from.
pub fn alpha() -> impl Strategy<Value = f64> {
    proptest::sample::select(&[0.005, 0.01, 0.02, 0.05][..])
}

/// Relative accuracies at both ends of the documented range
/// `[MIN_RELATIVE_ACCURACY, 1)`, the finest `ExponentialMapping` takes
/// (about 3.3·10⁻⁷), and anything between.
pub fn extreme_alpha() -> impl Strategy<Value = f64> {
    prop_oneof![
        proptest::sample::select(vec![
            MIN_RELATIVE_ACCURACY,
            MIN_RELATIVE_ACCURACY.next_up(),
            3.4e-7,
            0.5,
            0.999_999,
            0.999_999_9,
            1.0 - 1e-12,
            1.0 - f64::EPSILON,
        ]),
        MIN_RELATIVE_ACCURACY..1.0,
    ]
}

/// A magnitude placed relative to a mapping's buckets and range.
#[derive(Clone, Copy, Debug)]
pub enum Place {
    /// The smallest indexable value, moved by −1, 0 or 1 ulp.
    Lowest(i8),
    /// The largest indexable value, moved by −1, 0 or 1 ulp.
    Highest(i8),
    /// `2^e`, moved by −1, 0 or 1 ulp.
    PowerOfTwo(i32, i8),
    /// A subnormal number, or zero: these bits below 2⁵².
    Subnormal(u64),
    One,
    /// `u64::MAX` as a float: 2⁶⁴.
    U64Max,
    /// Any normal number.
    Any(f64),
}

impl Place {
    pub fn value<M: IndexMapping>(self, m: &M) -> f64 {
        let moved = |x: f64, ulps: i8| match ulps {
            -1 => x.next_down(),
            0 => x,
            _ => x.next_up(),
        };
        match self {
            Self::Lowest(ulps) => moved(m.min_indexable_value(), ulps),
            Self::Highest(ulps) => moved(m.max_indexable_value(), ulps),
            Self::PowerOfTwo(e, ulps) => moved(2f64.powi(e), ulps),
            Self::Subnormal(bits) => f64::from_bits(bits),
            Self::One => 1.0,
            Self::U64Max => u64::MAX as f64,
            Self::Any(v) => v,
        }
    }
}

/// Every kind of [`Place`], the normal numbers uniform in their bits.
pub fn place() -> impl Strategy<Value = Place> {
    let ulps = -1i8..=1;
    prop_oneof![
        ulps.clone().prop_map(Place::Lowest),
        ulps.clone().prop_map(Place::Highest),
        (-1022i32..=1023, ulps).prop_map(|(e, u)| Place::PowerOfTwo(e, u)),
        (0u64..1 << 52).prop_map(Place::Subnormal),
        Just(Place::One),
        Just(Place::U64Max),
        prop::num::f64::POSITIVE
            .prop_filter("normal", |v| v.is_normal())
            .prop_map(Place::Any),
    ]
}

/// The side a store collapses on, for the oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Lowest,
    Highest,
}

/// Exact lower quantile, with the same rank arithmetic the sketch documents:
/// `sorted[floor(q·(n−1))]`.
pub fn exact_quantile(sorted: &[f64], q: f64) -> f64 {
    let last = sorted.len() - 1;
    sorted[((q * last as f64).floor() as usize).min(last)]
}

/// The 101 quantiles 0, 0.01, …, 1.
pub fn qs() -> [f64; 101] {
    core::array::from_fn(|i| i as f64 / 100.0)
}

pub fn sorted(data: &[f64]) -> Vec<f64> {
    let mut s = data.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// Bucket keys and counts, ascending.
pub type Bins = Vec<(i32, u32)>;

/// Everything that defines a sketch's contents: positive and negative
/// buckets, zero count, count, minimum, maximum and the sum's bits.
pub fn snapshot<M: IndexMapping, P: Store, N: Store>(
    s: &DDSketch<M, P, N>,
) -> (Bins, Bins, u64, u64, Option<f64>, Option<f64>, Option<u64>) {
    (
        s.positive_store().bins().collect(),
        s.negative_store().bins().collect(),
        s.zero_count(),
        s.count(),
        s.min(),
        s.max(),
        s.sum().map(f64::to_bits),
    )
}

/// What a sketch's wire format carries: positive and negative buckets,
/// zero count and count (not the minimum, maximum nor sum).
pub fn wire_contents<M: IndexMapping, P: Store, N: Store>(
    s: &DDSketch<M, P, N>,
) -> (Bins, Bins, u64, u64) {
    (
        s.positive_store().bins().collect(),
        s.negative_store().bins().collect(),
        s.zero_count(),
        s.count(),
    )
}

/// Feeds `data` one by one.
pub fn feed<M: IndexMapping, P: Store, N: Store>(
    sketch: &mut DDSketch<M, P, N>,
    data: &[f64],
) -> Result<(), TestCaseError> {
    for &v in data {
        prop_assert_eq!(sketch.add(v), Ok(()), "add({:e})", v);
    }
    Ok(())
}

/// Whether `e >= x · (1 − a)`, exactly (`x` positive normal).
pub fn not_below(e: f64, x: f64, a: f64) -> bool {
    e >= x || within(e, x, a)
}

/// Whether `e <= x · (1 + a)`, exactly (`x` positive normal).
pub fn not_above(e: f64, x: f64, a: f64) -> bool {
    e <= x || within(e, x, a)
}

/// Checks one estimate `est` of the exact quantile `x` against the α
/// guarantee, exactly (no rounding slack), relaxed on the collapsed side of
/// a collapsed store as documented.
pub fn check_estimate<M: IndexMapping, P: Store, N: Store>(
    sketch: &DDSketch<M, P, N>,
    side: Side,
    q: f64,
    x: f64,
    est: f64,
) -> Result<(), TestCaseError> {
    let m = sketch.mapping();
    let alpha = m.relative_accuracy();
    let min_idx = m.min_indexable_value();
    let mag = x.abs();
    if mag < min_idx {
        // The zero bucket: reported as 0 (then clamped into [min, max]).
        prop_assert!(
            (est - x).abs() <= min_idx,
            "q={} exact={:e} est={:e} (zero bucket)",
            q,
            x,
            est
        );
        return Ok(());
    }
    let collapse = if x > 0.0 {
        sketch.collapse()
    } else {
        sketch.negative_collapse()
    };
    let exact_side = match collapse {
        None => true,
        Some(c) => match side {
            Side::Lowest => mag >= c.bound,
            Side::Highest => mag < c.bound,
        },
    };
    if exact_side {
        prop_assert!(
            within(est, x, alpha),
            "q={} exact={:e} est={:e} rel err={:e} alpha={} collapse={:?}",
            q,
            x,
            est,
            ((est - x) / x).abs(),
            alpha,
            collapse
        );
        return Ok(());
    }
    // On the collapsed side: same sign, and the magnitude errs only one way.
    let bound = collapse.map_or(0.0, |c| c.bound);
    prop_assert!(
        est.signum() == x.signum(),
        "q={} exact={:e} est={:e}",
        q,
        x,
        est
    );
    let e = est.abs();
    match side {
        Side::Lowest => {
            // Over-estimated in magnitude, never under beyond α, and at most
            // up to the collapsed bucket's representative.
            prop_assert!(
                not_below(e, mag, alpha),
                "collapsed low: q={} exact={:e} est={:e} bound={:e}",
                q,
                x,
                est,
                bound
            );
            prop_assert!(
                not_above(e, mag.max(bound), alpha),
                "collapsed low too high: q={} exact={:e} est={:e} bound={:e}",
                q,
                x,
                est,
                bound
            );
        }
        Side::Highest => {
            prop_assert!(
                not_above(e, mag, alpha),
                "collapsed high: q={} exact={:e} est={:e} bound={:e}",
                q,
                x,
                est,
                bound
            );
            prop_assert!(
                not_below(e, mag.min(bound), alpha),
                "collapsed high too low: q={} exact={:e} est={:e} bound={:e}",
                q,
                x,
                est,
                bound
            );
        }
    }
    Ok(())
}

/// Every quantile 0..=1 step 0.01 against the exact oracle; `quantiles`
/// agrees with `quantile`; min/max/count exact.
pub fn check_quantiles<M: IndexMapping, P: Store, N: Store>(
    sketch: &DDSketch<M, P, N>,
    side: Side,
    sorted: &[f64],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(sketch.count(), sorted.len() as u64);
    prop_assert_eq!(sketch.saturated(), 0);
    prop_assert_eq!(sketch.min(), sorted.first().copied());
    prop_assert_eq!(sketch.max(), sorted.last().copied());
    let qs = qs();
    let all = sketch.quantiles(&qs).expect("valid qs").expect("not empty");
    for (&q, &from_all) in qs.iter().zip(&all) {
        let est = sketch.quantile(q).expect("valid q").expect("not empty");
        prop_assert_eq!(
            est.to_bits(),
            from_all.to_bits(),
            "quantile({}) = {:e} but quantiles() gave {:e}",
            q,
            est,
            from_all
        );
        check_estimate(sketch, side, q, exact_quantile(sorted, q), est)?;
    }
    Ok(())
}

/// Whether sample `x` lies below the exclusive upper limit the documented
/// `rank(v)` bounds give (`rank(v)` is at most the fraction of samples for
/// which this holds), decided exactly. True for a prefix of the sorted
/// samples. Without a collapse the limit is
/// `v·γ` for positive `v` (`v/γ` for negative `v`, `min_indexable` inside
/// the zero bucket). After a collapse the collapsed bucket counts whole: for
/// a collapsing-lowest store `max(v, bound)·γ` (0 for negative `v` above
/// `−bound·γ`); for a collapsing-highest store `+∞` for `v >= bound/γ`
/// (`max(v, −bound)/γ` for negative `v`).
pub fn under_rank_limit<M: IndexMapping, P: Store, N: Store>(
    sketch: &DDSketch<M, P, N>,
    side: Side,
    v: f64,
    x: f64,
) -> bool {
    let m = sketch.mapping();
    let a = m.relative_accuracy();
    let min_idx = m.min_indexable_value();
    // `x < base · γ` for positive `base`.
    let below_times = |base: f64| x < min_idx || below_gamma(x, base, a);
    // `x < −base / γ` for positive `base`: `x` negative and `base < |x|·γ`.
    let below_over = |base: f64| x < 0.0 && x.abs() >= min_idx && below_gamma(base, -x, a);
    if v >= min_idx {
        match (side, sketch.collapse()) {
            (_, None) => below_times(v),
            (Side::Lowest, Some(c)) => below_times(v.max(c.bound)),
            (Side::Highest, Some(c)) => below_gamma(c.bound, v, a) || below_times(v),
        }
    } else if v <= -min_idx {
        let mag = -v;
        match (side, sketch.negative_collapse()) {
            (_, None) => below_over(mag),
            (Side::Lowest, Some(c)) if below_gamma(mag, c.bound, a) => x < 0.0,
            (Side::Lowest, Some(_)) => below_over(mag),
            (Side::Highest, Some(c)) => below_over(mag.min(c.bound)),
        }
    } else {
        x < min_idx
    }
}

/// `rank(v)` lies between the exact fractions of samples `<= v` and of
/// samples under the documented limit (see `under_rank_limit`).
pub fn check_rank<M: IndexMapping, P: Store, N: Store>(
    sketch: &DDSketch<M, P, N>,
    side: Side,
    sorted: &[f64],
    v: f64,
) -> Result<(), TestCaseError> {
    let n = sorted.len() as f64;
    let est = sketch.rank(v).expect("not NaN").expect("not empty");
    let at_or_below = sorted.partition_point(|&x| x <= v) as f64 / n;
    // The predicate holds for a prefix of the sorted samples.
    let under = sorted.partition_point(|&x| under_rank_limit(sketch, side, v, x)) as f64 / n;
    // The fractions themselves are compared with a little float slack.
    prop_assert!(
        est >= at_or_below - 1e-12 && est <= under.max(at_or_below) + 1e-12,
        "rank({:e}) = {} not in [{}, {}] (collapse {:?} / {:?})",
        v,
        est,
        at_or_below,
        under,
        sketch.collapse(),
        sketch.negative_collapse()
    );
    Ok(())
}

/// Probes for `rank`: every sample (up to 200 of them) and its one-ulp
/// neighbours, plus values between and beyond.
pub fn rank_probes(sorted: &[f64]) -> Vec<f64> {
    let step = (sorted.len() / 200).max(1);
    let mut probes = Vec::new();
    for &x in sorted.iter().step_by(step) {
        probes.push(x);
        probes.push(next_up(x));
        probes.push(next_down(x));
        probes.push(x * 1.5);
        probes.push(x * 0.75);
    }
    probes.extend([
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        -f64::MAX,
    ]);
    probes
}

pub fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

pub fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

/// Everything the accuracy tests assert about one sketch fed `data`.
pub fn check_all<M: IndexMapping, P: Store, N: Store>(
    sketch: &mut DDSketch<M, P, N>,
    side: Side,
    data: &[f64],
    sorted: &[f64],
) -> Result<(), TestCaseError> {
    feed(sketch, data)?;
    prop_assert_eq!(sketch.collapse(), None, "capacity too small for this test");
    prop_assert_eq!(sketch.negative_collapse(), None);
    check_quantiles(sketch, side, sorted)?;
    let sum = data.iter().fold(0.0, |s, &v| s + v);
    prop_assert_eq!(sketch.sum().map(f64::to_bits), Some(sum.to_bits()));
    // The mean, clamped into [min, max] against the rounding of the sum.
    let mean = (sum / data.len() as f64).clamp(sorted[0], sorted[sorted.len() - 1]);
    prop_assert_eq!(sketch.mean().map(f64::to_bits), Some(mean.to_bits()));
    for v in rank_probes(sorted) {
        check_rank(sketch, side, sorted, v)?;
    }
    Ok(())
}

/// What a collapsing store must hold after taking some `(key, weight)`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreModel {
    /// Non-empty buckets, ascending, each holding `min(weight, u32::MAX)`.
    pub bins: Vec<(i32, u32)>,
    /// The weight that did not fit its bucket's counter.
    pub saturated: u64,
    pub collapse: Option<StoreCollapse>,
}

impl StoreModel {
    pub fn total(&self) -> u64 {
        self.bins.iter().map(|&(_, c)| u64::from(c)).sum()
    }
}

/// The exact contents of a collapsing store, from the multiset of keys alone.
///
/// With `lo` and `hi` the smallest and largest keys, nothing folds while
/// `hi − lo < N`; otherwise collapsing-lowest keeps `hi − N + 1 ..= hi` and
/// folds every smaller key into `hi − N + 1`, and collapsing-highest keeps
/// `lo ..= lo + N − 1` and folds every larger key into `lo + N − 1`. A
/// bucket whose weight `W` passes `u32::MAX` holds `u32::MAX` and
/// `W − u32::MAX` is saturated. The collapse counts the folded weight, but
/// never more than the edge bucket holds.
pub fn store_model(side: Collapse, capacity: usize, adds: &[(i32, u32)]) -> StoreModel {
    let mut keys: BTreeMap<i32, u64> = BTreeMap::new();
    for &(k, c) in adds.iter().filter(|a| a.1 > 0) {
        *keys.entry(k).or_default() += u64::from(c);
    }
    let (Some((&lo, _)), Some((&hi, _))) = (keys.first_key_value(), keys.last_key_value()) else {
        return StoreModel {
            bins: vec![],
            saturated: 0,
            collapse: None,
        };
    };
    let n = capacity as i64;
    let mut folded: BTreeMap<i32, u64> = BTreeMap::new();
    let mut collapse = None;
    if i64::from(hi) - i64::from(lo) < n {
        folded = keys;
    } else {
        let (edge, boundary) = match side {
            Collapse::Lowest => {
                let edge = (i64::from(hi) - n + 1) as i32;
                // Saturating, as the store reports it: a store of one
                // bucket collapsing at `i32::MAX` has no key above it.
                (edge, edge.saturating_add(1))
            }
            Collapse::Highest => {
                let edge = (i64::from(lo) + n - 1) as i32;
                (edge, edge)
            }
        };
        let mut samples = 0;
        for (&k, &c) in &keys {
            let kept = match side {
                Collapse::Lowest => k.max(edge),
                Collapse::Highest => k.min(edge),
            };
            if kept != k {
                samples += c;
            }
            *folded.entry(kept).or_default() += c;
        }
        let at_edge = folded[&edge].min(u64::from(u32::MAX));
        collapse = Some(StoreCollapse {
            samples: samples.min(at_edge),
            boundary,
            side,
        });
    }
    let max = u64::from(u32::MAX);
    StoreModel {
        bins: folded
            .iter()
            .map(|(&k, &c)| (k, c.min(max) as u32))
            .collect(),
        saturated: folded.values().map(|&c| c.saturating_sub(max)).sum(),
        collapse,
    }
}

/// Every read of `store` agrees with [`store_model`] of `adds`: buckets in
/// either order, totals, saturation, collapse, key range, counts at and
/// around every bucket, and ranks.
pub fn store_agrees_with_model<const N: usize, S: CollapseSide>(
    store: &CollapsingStore<N, S>,
    adds: &[(i32, u32)],
) -> Result<(), TestCaseError> {
    let m = store_model(S::SIDE, N, adds);
    let bins: Vec<_> = store.bins().collect();
    prop_assert_eq!(&bins, &m.bins);
    prop_assert_eq!(store.collapse(), m.collapse);
    prop_assert_eq!(store.total(), m.total());
    prop_assert_eq!(store.saturated(), m.saturated);
    if let Some(c) = store.collapse() {
        prop_assert!(c.samples <= store.total(), "{:?} of {}", c, store.total());
    }
    prop_assert_eq!(
        store.key_range(),
        m.bins.first().zip(m.bins.last()).map(|(a, b)| (a.0, b.0))
    );
    // Reversed iteration, `count_of` and `count_at_or_below` at every bin
    // and just around it.
    let mut rev: Vec<_> = store.bins().rev().collect();
    rev.reverse();
    prop_assert_eq!(&rev, &m.bins);
    let mut below = 0u64;
    for &(k, c) in &m.bins {
        prop_assert_eq!(store.count_of(k), c);
        if k > i32::MIN {
            prop_assert_eq!(store.count_at_or_below(k - 1), below);
        }
        below += u64::from(c);
        prop_assert_eq!(store.count_at_or_below(k), below);
        if m.bins
            .binary_search_by_key(&k.wrapping_add(1), |b| b.0)
            .is_err()
            && k < i32::MAX
        {
            prop_assert_eq!(store.count_of(k + 1), 0);
        }
    }
    // Each bucket's first, middle and last rank, against the model (all
    // ranks would take a bucket's count of steps).
    let mut rank = 0u64;
    for &(k, c) in &m.bins {
        for r in [rank, rank + u64::from(c) / 2, rank + u64::from(c) - 1] {
            prop_assert_eq!(store.key_at_rank(r), Some(k), "rank {}", r);
        }
        rank += u64::from(c);
    }
    prop_assert_eq!(store.key_at_rank(rank), None);
    Ok(())
}

// Exact arithmetic on doubles, for checking the α guarantee without slack.

/// `(s, e)` with `s + e == a + b` exactly (Knuth's TwoSum; no overflow).
pub fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// `(p, e)` with `p + e == a · b` exactly: the error of the product, split
/// by a fused multiply-add (exact while `a · b` is far from underflow).
pub fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    (p, a.mul_add(b, -p))
}

/// The sign of the exact sum of `terms` (finite, far from overflow and
/// underflow), by Shewchuk's expansion: the sum becomes non-overlapping
/// components whose largest decides the sign.
pub fn sign_of_sum(terms: &[f64]) -> core::cmp::Ordering {
    let mut expansion: Vec<f64> = Vec::new();
    for &t in terms {
        let mut q = t;
        let mut next = Vec::with_capacity(expansion.len() + 1);
        for &e in &expansion {
            let (s, err) = two_sum(q, e);
            if err != 0.0 {
                next.push(err);
            }
            q = s;
        }
        next.push(q);
        expansion = next;
    }
    let top = expansion.iter().rev().find(|&&x| x != 0.0).copied();
    top.map_or(core::cmp::Ordering::Equal, |t| {
        t.partial_cmp(&0.0).expect("finite")
    })
}

/// `2^k` for `|k| <= 1000`, exactly.
fn pow2(k: i32) -> f64 {
    f64::from_bits(((1023 + k) as u64) << 52)
}

/// `x` and `y` scaled by one power of two so that the larger magnitude is
/// in `[1, 2)`: exact for normal numbers, and keeps products of them with
/// factors above `2^-500` far from underflow.
fn normalized(x: f64, y: f64) -> (f64, f64) {
    let big = x.abs().max(y.abs());
    let e = ((big.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    // Two steps: each factor stays a normal power of two.
    let (h, l) = (-e / 2, -e - (-e / 2));
    (x * pow2(h) * pow2(l), y * pow2(h) * pow2(l))
}

/// Whether `|est − x| <= a · |x|` holds exactly, in real arithmetic on the
/// doubles given (`0 < a < 1`, `x` normal or zero, `est` finite).
pub fn within(est: f64, x: f64, a: f64) -> bool {
    if x == 0.0 {
        return est == 0.0;
    }
    // With a < 1, the answer is no unless est has x's sign and lies below
    // twice x.
    let (e, m) = (est * x.signum(), x.abs());
    if !(e > 0.0 && e < 2.0 * m) {
        return false;
    }
    let (e, m) = normalized(e, m);
    let (p, pe) = two_prod(a, m);
    // a·m − |e − m| >= 0, with the sign of e − m known.
    let terms = if e >= m {
        [p, pe, -e, m]
    } else {
        [p, pe, e, -m]
    };
    sign_of_sum(&terms) != core::cmp::Ordering::Less
}

/// Whether `x < v · (1 + a) / (1 − a)` holds exactly, for positive `x` and
/// `v` (normal, or `x` infinite): `x − a·x − v − a·v < 0`.
pub fn below_gamma(x: f64, v: f64, a: f64) -> bool {
    if x <= v {
        return true;
    }
    // The bound may overflow for `v` near `f64::MAX`; infinity is above it.
    if x == f64::INFINITY || x > 4.0 * v / (1.0 - a) {
        return false;
    }
    let (x, v) = normalized(x, v);
    let (ax, axe) = two_prod(a, x);
    let (av, ave) = two_prod(a, v);
    sign_of_sum(&[x, -v, -ax, -axe, -av, -ave]) == core::cmp::Ordering::Less
}
