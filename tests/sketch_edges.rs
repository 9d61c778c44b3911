//! The sketch at the edges of its parameters, against exact models: the
//! relative accuracy at both ends of its documented range (from
//! `MIN_RELATIVE_ACCURACY` to just below 1) for all five mappings, on
//! values at the ends of the indexable range, powers of two and their
//! neighbours, subnormals and zeros; integers at the ends of `u64`; counts
//! that saturate rather than wrap; and sketches whose mappings differ,
//! which must refuse to combine and stay as they were.
//!
//! `sketch_exactness.rs` checks the mappings alone at such accuracies,
//! `sketch_accuracy.rs` the sketch on realistic data at the usual ones:
//! here the sketch's own paths (weights, both signs, the zero bucket, a
//! collapsing store, the integer path, merges) meet the extremes.

mod common;

use common::{
    cases, check_quantiles, check_rank, extreme_alpha, feed, place, rank_probes, snapshot, sorted,
    store_model, Place, Side,
};
use proptest::prelude::*;
use tailguard::mapping::{
    CubicMapping, ExponentialMapping, LinearMapping, LogLinearMapping, LogarithmicMapping,
};
use tailguard::store::{Collapse, CollapsingLowestStore};
use tailguard::{DDSketch, FromRelativeAccuracy, IndexMapping, SignedSketch, SketchError, Store};

/// Buckets a side: few enough that samples spread over the whole range
/// collapse at the smaller α, so that the collapsed side is checked too.
const CAPACITY: usize = 512;

type Sketch<M> = SignedSketch<M, CollapsingLowestStore<CAPACITY>>;

/// The mapping of each kind for `alpha`: the four that take every
/// documented α must build, and state at most the α asked for;
/// `ExponentialMapping` builds exactly when its finest scale is fine
/// enough.
fn mappings(
    alpha: f64,
) -> Result<
    (
        LogarithmicMapping,
        CubicMapping,
        LinearMapping,
        LogLinearMapping,
        Option<ExponentialMapping>,
    ),
    TestCaseError,
> {
    fn build<M: IndexMapping + FromRelativeAccuracy>(alpha: f64) -> Result<M, TestCaseError> {
        let m = M::from_relative_accuracy(alpha)
            .map_err(|e| TestCaseError::fail(format!("α = {alpha}: {e:?}")))?;
        prop_assert!(m.relative_accuracy() <= alpha, "{:?} for α = {}", m, alpha);
        Ok(m)
    }
    let finest = ExponentialMapping::new(ExponentialMapping::MAX_SCALE).unwrap();
    let exponential = ExponentialMapping::from_relative_accuracy(alpha).ok();
    prop_assert_eq!(
        exponential.is_some(),
        alpha >= finest.relative_accuracy(),
        "α = {}",
        alpha
    );
    Ok((
        build(alpha)?,
        build(alpha)?,
        build(alpha)?,
        build(alpha)?,
        exponential,
    ))
}

/// Samples: a place, a sign and a weight from 0 to 3.
fn samples() -> impl Strategy<Value = Vec<(Place, bool, u32)>> {
    prop::collection::vec((place(), any::<bool>(), 0u32..=3), 1..40)
}

/// Feeds `samples` to a signed sketch over `m`: each `add_weighted` takes
/// the value or refuses it with the documented error; then count, minimum,
/// maximum and every quantile match the exact model (within α, exactly,
/// one-sided on a collapsed side; within the smallest indexable value in
/// the zero bucket), and `rank` lies within its documented bounds.
fn keeps_alpha<M: IndexMapping>(m: M, samples: &[(Place, bool, u32)]) -> Result<(), TestCaseError> {
    let mut s: Sketch<M> = DDSketch::with_mapping(m);
    let mut data = Vec::new();
    for &(place, negative, weight) in samples {
        let magnitude = place.value(&m);
        let v = if negative { -magnitude } else { magnitude };
        let expected = if magnitude > m.max_indexable_value() {
            Err(SketchError::ValueOutOfRange(v))
        } else {
            Ok(())
        };
        prop_assert_eq!(s.add_weighted(v, weight), expected, "{:e} into {:?}", v, m);
        if expected.is_ok() {
            data.extend(std::iter::repeat_n(v, weight as usize));
        }
    }
    if data.is_empty() {
        prop_assert_eq!(s.count(), 0);
        return Ok(());
    }
    let sorted = sorted(&data);
    check_quantiles(&s, Side::Lowest, &sorted)?;
    for v in rank_probes(&sorted) {
        check_rank(&s, Side::Lowest, &sorted, v)?;
    }
    Ok(())
}

/// Integers at and around the ends of `u64` and the powers of two.
fn integers() -> impl Strategy<Value = Vec<u64>> {
    let integer = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        (0u64..4096).prop_map(|d| u64::MAX - d),
        (0u32..64, -1i64..=1).prop_map(|(e, d)| (1u64 << e).wrapping_add_signed(d)),
        any::<u64>(),
    ];
    prop::collection::vec(integer, 1..30)
}

/// `add_u64` records each integer as documented: in the bucket the
/// mapping's `index_u64` names (the zero bucket for `None`), with the
/// minimum and maximum rounded to `f64` and the sum the exact 128-bit sum
/// rounded once; `LogLinearMapping` takes every `u64`. A mapping that
/// `converts` indexes the integer as a float, recording what `add` would,
/// and refuses, untouched, what `add` refuses.
fn records_integers<M: IndexMapping>(
    m: M,
    converts: bool,
    integers: &[u64],
) -> Result<(), TestCaseError> {
    let (mut by_integer, mut by_float): (Sketch<M>, Sketch<M>) =
        (DDSketch::with_mapping(m), DDSketch::with_mapping(m));
    let mut taken = Vec::new();
    for &v in integers {
        let got = by_integer.add_u64(v);
        if converts {
            prop_assert_eq!(got, by_float.add(v as f64), "{} into {:?}", v, m);
        } else {
            prop_assert_eq!(got, Ok(()), "{} into {:?}", v, m);
        }
        if got.is_ok() {
            taken.push(v);
        }
    }
    let keys: Vec<(i32, u32)> = taken
        .iter()
        .filter_map(|&v| m.index_u64(v))
        .map(|k| (k, 1))
        .collect();
    let model = store_model(Collapse::Lowest, CAPACITY, &keys);
    let bins: Vec<_> = by_integer.positive_store().bins().collect();
    prop_assert_eq!(&bins, &model.bins, "{:?}", m);
    prop_assert_eq!(by_integer.negative_store().total(), 0);
    prop_assert_eq!(by_integer.zero_count(), (taken.len() - keys.len()) as u64);
    prop_assert_eq!(by_integer.count(), taken.len() as u64);
    if converts {
        let as_floats: Vec<_> = by_float.positive_store().bins().collect();
        prop_assert_eq!(&bins, &as_floats, "{:?}", m);
        prop_assert_eq!(by_integer.zero_count(), by_float.zero_count());
    }
    let sum: u128 = taken.iter().map(|&v| u128::from(v)).sum();
    let min = taken.iter().min().map(|&v| v as f64);
    let max = taken.iter().max().map(|&v| v as f64);
    prop_assert_eq!(by_integer.min(), min);
    prop_assert_eq!(by_integer.max(), max);
    prop_assert_eq!(by_integer.sum(), (!taken.is_empty()).then_some(sum as f64));
    Ok(())
}

/// Sketches over `x` and `y`, two mappings that differ, refuse to
/// combine: `merge` and `quantile_with` answer `MappingMismatch` both ways
/// and neither sketch changes.
fn refuse_to_combine<M: IndexMapping>(x: M, y: M, data: &[f64]) -> Result<(), TestCaseError> {
    prop_assert_ne!(x, y);
    let (mut a, mut b): (Sketch<M>, Sketch<M>) =
        (DDSketch::with_mapping(x), DDSketch::with_mapping(y));
    feed(&mut a, data)?;
    feed(&mut b, data)?;
    let (before_a, before_b) = (snapshot(&a), snapshot(&b));
    prop_assert_eq!(a.quantile_with(&b, 0.5), Err(SketchError::MappingMismatch));
    prop_assert_eq!(b.quantile_with(&a, 0.5), Err(SketchError::MappingMismatch));
    prop_assert_eq!(a.merge(&b), Err(SketchError::MappingMismatch));
    prop_assert_eq!(b.merge(&a), Err(SketchError::MappingMismatch));
    prop_assert_eq!(snapshot(&a), before_a);
    prop_assert_eq!(snapshot(&b), before_b);
    Ok(())
}

/// [`refuse_to_combine`] for a log-like mapping at two accuracies (where
/// they give two mappings), and at one γ with two index offsets (where
/// `with_gamma` takes the offset: close to α = 1 it may not).
fn log_like_refuse_to_combine<M: IndexMapping + FromRelativeAccuracy>(
    a: f64,
    b: f64,
    offset: f64,
    with_gamma: impl Fn(f64, f64) -> Result<M, tailguard::mapping::MappingError>,
    data: &[f64],
) -> Result<(), TestCaseError> {
    let (x, y) = (
        M::from_relative_accuracy(a).unwrap(),
        M::from_relative_accuracy(b).unwrap(),
    );
    if x != y {
        refuse_to_combine(x, y, data)?;
    }
    if let Ok(shifted) = with_gamma(x.gamma(), x.index_offset() + offset) {
        refuse_to_combine(x, shifted, data)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Every mapping keeps the α guarantee at both ends of the documented
    /// range of α, on the values at the edges of its buckets and range.
    #[test]
    fn every_mapping_keeps_alpha_at_the_ends_of_its_range(a in extreme_alpha(), samples in samples()) {
        let (log, cubic, linear, log_linear, exponential) = mappings(a)?;
        keeps_alpha(log, &samples)?;
        keeps_alpha(cubic, &samples)?;
        keeps_alpha(linear, &samples)?;
        keeps_alpha(log_linear, &samples)?;
        if let Some(m) = exponential {
            keeps_alpha(m, &samples)?;
        }
    }

    /// Every mapping records integers at the ends of `u64` as documented,
    /// at any α.
    #[test]
    fn every_mapping_records_integers_at_the_ends_of_u64(a in extreme_alpha(), integers in integers()) {
        let (log, cubic, linear, log_linear, exponential) = mappings(a)?;
        records_integers(log, true, &integers)?;
        records_integers(cubic, true, &integers)?;
        records_integers(linear, true, &integers)?;
        records_integers(log_linear, false, &integers)?;
        if let Some(m) = exponential {
            records_integers(m, true, &integers)?;
        }
    }

    /// Sketches whose mappings differ in any parameter (α, index offset,
    /// `LogLinearMapping`'s bits or offset, `ExponentialMapping`'s scale)
    /// refuse to combine and stay unchanged.
    #[test]
    fn sketches_of_different_mappings_refuse_to_combine(
        (a, b) in (extreme_alpha(), extreme_alpha()),
        offset in prop_oneof![Just(0.5), Just(-1.0), -1e4f64..1e4].prop_filter("shifts", |&o| o != 0.0),
        bits in 0u32..23,
        key_offset in prop_oneof![Just(1i32), Just(-(1 << 30)), -1000i32..1000].prop_filter("shifts", |&o| o != 0),
        scale in ExponentialMapping::MIN_SCALE..ExponentialMapping::MAX_SCALE,
        data in prop::collection::vec(prop_oneof![-1e6f64..-1e-3, 1e-3f64..1e6, Just(0.0)], 1..30),
    ) {
        log_like_refuse_to_combine(a, b, offset, LogarithmicMapping::with_gamma, &data)?;
        log_like_refuse_to_combine(a, b, offset, CubicMapping::with_gamma, &data)?;
        log_like_refuse_to_combine(a, b, offset, LinearMapping::with_gamma, &data)?;
        let plain = LogLinearMapping::with_bits(bits, 0).unwrap();
        refuse_to_combine(plain, LogLinearMapping::with_bits(bits, key_offset).unwrap(), &data)?;
        refuse_to_combine(plain, LogLinearMapping::with_bits(bits + 1, 0).unwrap(), &data)?;
        refuse_to_combine(
            ExponentialMapping::new(scale).unwrap(),
            ExponentialMapping::new(scale + 1).unwrap(),
            &data,
        )?;
    }
}

/// Counts saturate, never wrap: a sketch merged into itself doubles every
/// count until a bucket holds `u32::MAX` (the rest reported as saturated,
/// nothing lost) and the zero count and the count reach `u64::MAX`, where
/// they stay.
#[test]
fn counts_saturate_under_repeated_merges() {
    let mut s: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
    let zeros = u32::MAX;
    s.add_weighted(0.0, zeros).unwrap();
    s.add_weighted(-3.0, 2).unwrap();
    s.add_weighted(3.0, 2).unwrap();
    let limit = |n: u128, max: u64| u64::try_from(n).unwrap_or(max).min(max);
    for doublings in 1..=40 {
        let copy = s.clone();
        s.merge(&copy).unwrap();
        // Each bucket's 2 samples are now 2^(doublings + 1).
        let per_bucket = 2u128 << doublings;
        let bucket = limit(per_bucket, u64::from(u32::MAX));
        let zero_count = limit(u128::from(zeros) << doublings, u64::MAX);
        let what = format!("after {doublings} doublings");
        assert_eq!(
            s.positive_store().count_of(s.mapping().index(3.0)),
            bucket as u32,
            "{what}"
        );
        assert_eq!(s.negative_store().total(), bucket, "{what}");
        assert_eq!(s.saturated(), 2 * (per_bucket as u64 - bucket), "{what}");
        assert_eq!(s.zero_count(), zero_count, "{what}");
        assert_eq!(
            s.count(),
            limit(2 * u128::from(bucket) + u128::from(zero_count), u64::MAX),
            "{what}"
        );
        if s.count() < u64::MAX {
            // Ranks hold while the count has not saturated.
            assert_eq!(s.quantile(0.5).unwrap(), Some(0.0), "{what}");
        }
    }
    assert_eq!(s.count(), u64::MAX);
    assert!(s.mean().unwrap().is_finite());
}
