//! The sketch against an exact model of every field it reports, with
//! saturating weights and collapsing stores, fed in one stream or merged
//! from two: count, saturated, zero count, min, max, bins, collapse, the
//! mean (within `[min, max]`) and the documented `rank` bounds.

mod common;

use common::{cases, check_rank, rank_probes, sorted, store_model, Side, StoreModel};
use proptest::prelude::*;
use tailguard::mapping::{CubicMapping, LinearMapping, LogarithmicMapping};
use tailguard::store::{Collapse, CollapsingHighestStore, CollapsingLowestStore};
use tailguard::{
    Collapsed, DDSketch, FromRelativeAccuracy, IndexMapping, SignedSketch, SketchError, Store,
};

/// Values from a small pool (so buckets coincide and saturate together),
/// zeros and subnormals of both signs, and log-uniform magnitudes.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => proptest::sample::select(
            &[1.0, 2.0, 3.0, 4.0, 10.0, 1e6, -1.0, -5.0, -1e4, 0.0, -0.0, 1e-310, -1e-310][..]
        ),
        3 => (-9.0..12.0f64).prop_map(|e| 10f64.powf(e)),
        1 => (-9.0..12.0f64).prop_map(|e| -(10f64.powf(e))),
    ]
}

fn weight(heavy: bool) -> BoxedStrategy<u32> {
    if heavy {
        prop_oneof![
            6 => 0u32..5,
            1 => Just(u32::MAX),
            1 => Just(u32::MAX / 2 + 1),
            1 => any::<u32>(),
        ]
        .boxed()
    } else {
        (0u32..4).boxed()
    }
}

fn ops() -> impl Strategy<Value = (Vec<(f64, u32)>, usize)> {
    any::<bool>().prop_flat_map(|heavy| {
        (
            prop::collection::vec((value(), weight(heavy)), 0..150),
            0usize..150,
        )
    })
}

/// Everything the sketch reports must follow from the samples alone.
fn agrees<M: IndexMapping, S: Store>(
    s: &SignedSketch<M, S>,
    side: Collapse,
    samples: &[(f64, u32)],
) -> Result<(), TestCaseError> {
    let m = s.mapping();
    let min_idx = m.min_indexable_value();
    let (mut pos, mut neg, mut zero) = (vec![], vec![], 0u64);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut sum, mut abs_sum, mut weight) = (0.0f64, 0.0f64, 0u64);
    for &(v, w) in samples.iter().filter(|x| x.1 > 0) {
        if v >= min_idx {
            pos.push((m.index(v), w));
        } else if v <= -min_idx {
            neg.push((m.index(-v), w));
        } else {
            zero += u64::from(w);
        }
        // A zero bucket's `-0.0` is noted as `+0.0`.
        let noted = if v.abs() < min_idx { v + 0.0 } else { v };
        min = min.min(noted);
        max = max.max(noted);
        sum += v * f64::from(w);
        abs_sum += v.abs() * f64::from(w);
        weight += u64::from(w);
    }
    let (p, n): (StoreModel, StoreModel) = (
        store_model(side, S::CAPACITY, &pos),
        store_model(side, S::CAPACITY, &neg),
    );
    let count = p.total() + n.total() + zero;
    prop_assert_eq!(s.count(), count);
    prop_assert_eq!(s.saturated(), p.saturated + n.saturated);
    prop_assert_eq!(s.zero_count(), zero);
    prop_assert_eq!(s.positive_store().bins().collect::<Vec<_>>(), p.bins);
    prop_assert_eq!(s.negative_store().bins().collect::<Vec<_>>(), n.bins);
    let collapsed = |c: Option<tailguard::store::StoreCollapse>| {
        c.map(|c| Collapsed {
            samples: c.samples,
            bound: m.lower_bound(c.boundary),
        })
    };
    prop_assert_eq!(s.collapse(), collapsed(p.collapse));
    prop_assert_eq!(s.negative_collapse(), collapsed(n.collapse));
    for c in [s.collapse(), s.negative_collapse()].into_iter().flatten() {
        prop_assert!(c.samples <= count, "{:?} of {}", c, count);
    }
    if count == 0 {
        prop_assert_eq!((s.min(), s.max(), s.mean()), (None, None, None));
        return Ok(());
    }
    prop_assert_eq!(s.min().map(f64::to_bits), Some(min.to_bits()));
    prop_assert_eq!(s.max().map(f64::to_bits), Some(max.to_bits()));
    // The sum and mean are of every sample added, saturated ones too (in
    // float arithmetic, so up to rounding); the mean is in [min, max].
    let (got_sum, mean) = (s.sum().unwrap(), s.mean().unwrap());
    prop_assert!(
        (got_sum - sum).abs() <= 1e-12 * abs_sum,
        "sum {} vs {}",
        got_sum,
        sum
    );
    prop_assert!(
        (min..=max).contains(&mean),
        "mean {} outside [{}, {}]",
        mean,
        min,
        max
    );
    let exact_mean = sum / weight as f64;
    prop_assert!(
        (mean - exact_mean).abs() <= 1e-12 * abs_sum / weight as f64 + f64::MIN_POSITIVE,
        "mean {} vs {}",
        mean,
        exact_mean
    );
    // `rank` within its documented bounds, collapsed or not (while nothing
    // saturated: the fractions are then of the samples stored; and while
    // the samples are few enough to list).
    if s.saturated() == 0 && weight <= 10_000 {
        let expanded: Vec<f64> = samples
            .iter()
            .flat_map(|&(v, w)| std::iter::repeat_n(v, w as usize))
            .collect();
        let sorted = sorted(&expanded);
        let side = match side {
            Collapse::Lowest => Side::Lowest,
            Collapse::Highest => Side::Highest,
        };
        for v in rank_probes(&sorted) {
            check_rank(s, side, &sorted, v)?;
        }
    }
    Ok(())
}

fn check<M, S>(
    side: Collapse,
    a: f64,
    samples: &[(f64, u32)],
    split: usize,
) -> Result<(), TestCaseError>
where
    M: IndexMapping + FromRelativeAccuracy,
    S: Store,
{
    let new = || SignedSketch::<M, S>::with_accuracy(a).unwrap();
    let mut one = new();
    for &(v, w) in samples {
        prop_assert_eq!(one.add_weighted(v, w), Ok(()));
    }
    agrees(&one, side, samples)?;
    let (x, y) = samples.split_at(split.min(samples.len()));
    let (mut sa, mut sb) = (new(), new());
    x.iter().for_each(|&(v, w)| sa.add_weighted(v, w).unwrap());
    y.iter().for_each(|&(v, w)| sb.add_weighted(v, w).unwrap());
    prop_assert_eq!(sa.merge(&sb), Ok(()));
    agrees(&sa, side, samples)?;
    // The merge and the single stream answer alike, bit for bit.
    let qs = common::qs();
    let (qa, qo) = (sa.quantiles(&qs).unwrap(), one.quantiles(&qs).unwrap());
    prop_assert_eq!(
        qa.map(|q| q.map(f64::to_bits)),
        qo.map(|q| q.map(f64::to_bits))
    );
    for v in [0.5, 1.0, 3.5, 1e6, -1.0, -3.5, 0.0] {
        prop_assert_eq!(sa.rank(v), one.rank(v));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn sketch_reports_what_its_samples_determine((samples, split) in ops()) {
        check::<CubicMapping, CollapsingLowestStore<16>>(Collapse::Lowest, 0.01, &samples, split)?;
        check::<CubicMapping, CollapsingHighestStore<16>>(Collapse::Highest, 0.01, &samples, split)?;
        check::<LogarithmicMapping, CollapsingLowestStore<64>>(Collapse::Lowest, 0.05, &samples, split)?;
        check::<LinearMapping, CollapsingHighestStore<64>>(Collapse::Highest, 0.02, &samples, split)?;
        check::<CubicMapping, CollapsingLowestStore<4096>>(Collapse::Lowest, 0.01, &samples, split)?;
    }
}

#[test]
fn merge_keeps_the_other_sketch_saturation() {
    let max = u64::from(u32::MAX);
    let mut a = DDSketch::new(0.01).unwrap();
    a.add(5.0).unwrap();
    let mut b = DDSketch::new(0.01).unwrap();
    b.add_weighted(1.0, u32::MAX).unwrap();
    b.add_weighted(1.0, u32::MAX).unwrap();
    assert_eq!(b.saturated(), max);
    let mut both = a.clone();
    both.add_weighted(1.0, u32::MAX).unwrap();
    both.add_weighted(1.0, u32::MAX).unwrap();
    a.merge(&b).unwrap();
    assert_eq!(a.saturated(), max);
    assert_eq!((a.count(), a.saturated()), (both.count(), both.saturated()));
}

#[test]
fn collapsed_samples_never_exceed_the_count() {
    let max = u64::from(u32::MAX);
    // Collapse first, then two saturating weights below the kept range.
    let mut s = DDSketch::<CubicMapping, CollapsingLowestStore<16>>::with_accuracy(0.01).unwrap();
    s.add(1e9).unwrap();
    s.add_weighted(1.0, u32::MAX).unwrap();
    s.add_weighted(1.0, u32::MAX).unwrap();
    let c = s.collapse().unwrap();
    assert_eq!(s.count(), max + 1);
    assert!(c.samples <= s.count(), "{c:?} of {}", s.count());
    // The other order reports the same.
    let mut t = DDSketch::<CubicMapping, CollapsingLowestStore<16>>::with_accuracy(0.01).unwrap();
    t.add_weighted(1.0, u32::MAX).unwrap();
    t.add_weighted(1.0, u32::MAX).unwrap();
    t.add(1e9).unwrap();
    assert_eq!(t.collapse(), Some(c));
    assert_eq!(c.samples, max);
}

#[test]
fn mean_stays_within_min_and_max() {
    let mut s = DDSketch::new(0.01).unwrap();
    s.add_weighted(1.0, u32::MAX).unwrap();
    s.add_weighted(1.0, u32::MAX).unwrap();
    assert_eq!(s.mean(), Some(1.0));
    // Rounding of the sum alone must not push it out either.
    let mut r = DDSketch::new(0.01).unwrap();
    for _ in 0..10 {
        r.add(0.1).unwrap();
    }
    let mean = r.mean().unwrap();
    assert_eq!(mean, 0.1);
}

#[test]
fn rank_after_a_collapse_counts_the_collapsed_bucket() {
    // {1, 2, 3, 4} fold into the edge bucket of a 16-bucket store.
    let mut s = DDSketch::<CubicMapping, CollapsingLowestStore<16>>::with_accuracy(0.01).unwrap();
    for v in [1.0, 2.0, 3.0, 4.0, 1e6] {
        s.add(v).unwrap();
    }
    let c = s.collapse().unwrap();
    assert!(c.bound > 4.0, "{c:?}");
    let sorted = [1.0, 2.0, 3.0, 4.0, 1e6];
    // 3 of 5 samples are <= 3.5: the answer may not be below 0.6.
    let r = s.rank(3.5).unwrap().unwrap();
    assert!(r >= 0.6, "rank(3.5) = {r}");
    for v in [0.5, 1.0, 2.5, 3.5, 4.0, c.bound, 5e5, 1e6] {
        check_rank(&s, Side::Lowest, &sorted, v).unwrap();
    }
    // The highest buckets, and magnitudes of negative values, likewise.
    let mut h =
        SignedSketch::<CubicMapping, CollapsingHighestStore<16>>::with_accuracy(0.01).unwrap();
    let data = [-1e6, -4e5, -1.0, 1.0, 2.0, 1e5, 1e6];
    for v in data {
        h.add(v).unwrap();
    }
    assert!(h.collapse().is_some() && h.negative_collapse().is_some());
    for v in [-1e6, -5e5, -4e5, -2.0, -1.0, 0.0, 1.0, 1.5, 5e4, 2e5, 1e6] {
        check_rank(&h, Side::Highest, &data, v).unwrap();
    }
    let r = h.rank(-5e5).unwrap().unwrap();
    assert!(r >= 1.0 / 7.0, "rank(-5e5) = {r}");
}

/// One step of a sketch's life, for the sequence model below.
#[derive(Clone, Debug)]
enum Step {
    Add(Value),
    Weighted(Value, u32),
    All(Vec<Value>),
    Integer(u64),
    Merge(Vec<Value>),
    Clear,
}

/// A value from a pool built on the mapping (the ends of its indexable
/// range and their neighbours, zeros, subnormals, ±1 and its neighbours,
/// NaN, infinities), so that new minima, maxima and repeats of them come
/// often, or a log-uniform magnitude of either sign.
#[derive(Clone, Copy, Debug)]
enum Value {
    Pool(usize),
    Magnitude(f64),
}

impl Value {
    fn get(self, m: &CubicMapping) -> f64 {
        let (lo, hi) = (m.min_indexable_value(), m.max_indexable_value());
        let pool = [
            0.0,
            -0.0,
            1e-310,
            -1e-310,
            lo,
            lo.next_up(),
            lo.next_down(),
            -lo,
            hi,
            hi.next_down(),
            hi.next_up(),
            1.0,
            1.0f64.next_up(),
            1.0f64.next_down(),
            3.0,
            1e6,
            -1.0,
            -1e6,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        match self {
            Self::Pool(i) => pool[i % pool.len()],
            Self::Magnitude(v) => v,
        }
    }
}

fn step_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0usize..64).prop_map(Value::Pool),
        2 => (-9.0..12.0f64).prop_map(|e| Value::Magnitude(10f64.powf(e))),
        1 => (-9.0..12.0f64).prop_map(|e| Value::Magnitude(-(10f64.powf(e)))),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        6 => step_value().prop_map(Step::Add),
        2 => (step_value(), 0u32..4).prop_map(|(v, w)| Step::Weighted(v, w)),
        1 => prop::collection::vec(step_value(), 0..6).prop_map(Step::All),
        1 => prop_oneof![Just(0u64), Just(1), Just(u64::MAX), any::<u64>()].prop_map(Step::Integer),
        1 => prop::collection::vec(step_value(), 0..6).prop_map(Step::Merge),
        1 => Just(Step::Clear),
    ];
    prop::collection::vec(step, 0..80)
}

/// What a sketch's minimum, maximum, sum, count and zero count must be,
/// kept by the rules the documentation states.
#[derive(Clone, Copy, Debug)]
struct Extremes {
    min: f64,
    max: f64,
    sum: f64,
    integer_min: u64,
    integer_max: u64,
    integer_sum: u128,
    count: u64,
    zeros: u64,
}

impl Extremes {
    const EMPTY: Self = Self {
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        sum: 0.0,
        integer_min: u64::MAX,
        integer_max: 0,
        integer_sum: 0,
        count: 0,
        zeros: 0,
    };

    /// What `add_weighted(v, w)` answers, noting `v` when it is taken.
    fn add(&mut self, m: &CubicMapping, signed: bool, v: f64, w: u32) -> Result<(), SketchError> {
        let (lo, hi) = (m.min_indexable_value(), m.max_indexable_value());
        if v.is_nan() {
            return Err(SketchError::NotANumber);
        }
        if v.abs() > hi {
            return Err(SketchError::ValueOutOfRange(v));
        }
        if v < 0.0 && !signed {
            return Err(SketchError::NegativeValue(v));
        }
        if w == 0 {
            return Ok(());
        }
        let zero = v.abs() < lo;
        // Zeros are noted as `+0.0`, whatever their sign and order.
        let noted = if zero { v + 0.0 } else { v };
        if noted < self.min {
            self.min = noted;
        }
        if noted > self.max {
            self.max = noted;
        }
        self.sum += noted * f64::from(w);
        self.count += u64::from(w);
        self.zeros += if zero { u64::from(w) } else { 0 };
        Ok(())
    }

    fn add_u64(&mut self, v: u64) {
        self.integer_min = self.integer_min.min(v);
        self.integer_max = self.integer_max.max(v);
        self.integer_sum += u128::from(v);
        self.count += 1;
        self.zeros += u64::from(v == 0);
    }

    fn merge(&mut self, o: &Self) {
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.integer_min = self.integer_min.min(o.integer_min);
        self.integer_max = self.integer_max.max(o.integer_max);
        self.integer_sum += o.integer_sum;
        self.count += o.count;
        self.zeros += o.zeros;
    }

    fn check<N: Store>(
        &self,
        s: &DDSketch<CubicMapping, CollapsingLowestStore<16>, N>,
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!((s.count(), s.zero_count()), (self.count, self.zeros));
        if self.count == 0 {
            prop_assert_eq!((s.min(), s.max(), s.sum()), (None, None, None));
            return Ok(());
        }
        let integers = self.integer_min <= self.integer_max;
        let (imin, imax) = (self.integer_min as f64, self.integer_max as f64);
        let min = if integers && imin < self.min {
            imin
        } else {
            self.min
        };
        let max = if integers && imax > self.max {
            imax
        } else {
            self.max
        };
        prop_assert_eq!(s.min().map(f64::to_bits), Some(min.to_bits()));
        prop_assert_eq!(s.max().map(f64::to_bits), Some(max.to_bits()));
        let sum = self.sum + self.integer_sum as f64;
        prop_assert_eq!(s.sum().map(f64::to_bits), Some(sum.to_bits()));
        Ok(())
    }
}

/// Runs `steps` on a sketch with negative store `N`, checking it against
/// the model after every step.
fn follow<N: Store>(steps: &[Step]) -> Result<(), TestCaseError> {
    type S<N> = DDSketch<CubicMapping, CollapsingLowestStore<16>, N>;
    let signed = N::CAPACITY > 0;
    let mut s = S::<N>::with_accuracy(0.01).unwrap();
    let m = *s.mapping();
    let mut model = Extremes::EMPTY;
    for step in steps {
        match step {
            Step::Add(v) => {
                let v = v.get(&m);
                prop_assert_eq!(s.add(v), model.add(&m, signed, v, 1), "add({})", v);
            }
            Step::Weighted(v, w) => {
                let v = v.get(&m);
                let expected = model.add(&m, signed, v, *w);
                prop_assert_eq!(
                    s.add_weighted(v, *w),
                    expected,
                    "add_weighted({}, {})",
                    v,
                    w
                );
            }
            Step::All(vs) => {
                let vs: Vec<f64> = vs.iter().map(|v| v.get(&m)).collect();
                let expected = vs
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, &v)| model.add(&m, signed, v, 1).map_err(|e| (i, e)));
                prop_assert_eq!(s.add_all(&vs), expected);
            }
            Step::Integer(v) => {
                prop_assert_eq!(s.add_u64(*v), Ok(()));
                model.add_u64(*v);
            }
            Step::Merge(vs) => {
                let mut other = S::<N>::with_accuracy(0.01).unwrap();
                let mut o = Extremes::EMPTY;
                for v in vs.iter().map(|v| v.get(&m)) {
                    prop_assert_eq!(other.add(v), o.add(&m, signed, v, 1));
                }
                prop_assert_eq!(s.merge(&other), Ok(()));
                model.merge(&o);
            }
            Step::Clear => {
                s.clear();
                model = Extremes::EMPTY;
            }
        }
        model.check(&s)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// The add path skips the minimum and maximum for values between them:
    /// whatever the order of adds, merges and clears, the extremes, the sum
    /// and every answer are those the documented rules give.
    #[test]
    fn extremes_follow_every_step(steps in steps()) {
        follow::<tailguard::store::NoStore>(&steps)?;
        follow::<CollapsingLowestStore<16>>(&steps)?;
    }
}
