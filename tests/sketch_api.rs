//! Merge, bad input, saturation, empty sketches, configuration, size.

mod common;

use common::{cases, dataset, size, snapshot};
use proptest::prelude::*;
use tailguard::mapping::{CubicMapping, LinearMapping, LogarithmicMapping, MappingError};
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore};
use tailguard::{
    DDSketch, FromRelativeAccuracy, IndexMapping, NoStore, SignedSketch, SketchError, Store,
};

fn check_merge<M, S>(a: &[f64], b: &[f64]) -> Result<(), TestCaseError>
where
    M: IndexMapping + FromRelativeAccuracy,
    S: Store,
{
    let new = || SignedSketch::<M, S>::with_accuracy(0.01).unwrap();
    let (mut sa, mut sb, mut union) = (new(), new(), new());
    common::feed(&mut sa, a)?;
    common::feed(&mut sb, b)?;
    common::feed(&mut union, a)?;
    common::feed(&mut union, b)?;
    let sum_b = sb.sum();
    prop_assert_eq!(sa.merge(&sb), Ok(()));
    let (pm, nm, zm, cm, minm, maxm, summ) = snapshot(&sa);
    let (pu, nu, zu, cu, minu, maxu, _) = snapshot(&union);
    prop_assert_eq!(pm, pu, "positive bins differ");
    prop_assert_eq!(nm, nu, "negative bins differ");
    prop_assert_eq!((zm, cm, minm, maxm), (zu, cu, minu, maxu));
    // The sum adds the two partial sums (float addition is not associative).
    let expected = match (a.is_empty(), sum_b) {
        (true, s) => s.map(f64::to_bits),
        (false, Some(sb)) => Some((a.iter().fold(0.0, |s, &v| s + v) + sb).to_bits()),
        (false, None) => Some(a.iter().fold(0.0, |s, &v| s + v).to_bits()),
    };
    prop_assert_eq!(summ, expected);
    if let Some(c) = sa.collapse() {
        prop_assert!(c.samples <= sa.count(), "{:?} of {}", c, sa.count());
    }
    // Collapsed or not, at the same bound and with the same samples
    // folded: a store's contents depend only on the keys it was given.
    prop_assert_eq!(sa.collapse(), union.collapse());
    prop_assert_eq!(sa.negative_collapse(), union.negative_collapse());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn merge_equals_sketch_of_both_streams(
        (_s1, a) in dataset(size()),
        (_s2, b) in dataset(0usize..500),
    ) {
        // Without collapse (4096 buckets) and with (16 and 64 buckets).
        check_merge::<CubicMapping, CollapsingLowestStore<4096>>(&a, &b)?;
        check_merge::<CubicMapping, CollapsingLowestStore<16>>(&a, &b)?;
        check_merge::<LogarithmicMapping, CollapsingHighestStore<64>>(&a, &b)?;
        check_merge::<LinearMapping, CollapsingLowestStore<64>>(&a, &b)?;
        check_merge::<LinearMapping, CollapsingHighestStore<4096>>(&a, &b)?;
    }

    #[test]
    fn mapping_mismatch_leaves_sketch_unchanged((_s, a) in dataset(0usize..300)) {
        let mut s: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
        common::feed(&mut s, &a)?;
        let before = snapshot(&s);
        let mut other: SignedSketch = SignedSketch::with_accuracy(0.02).unwrap();
        other.add(1.0).unwrap();
        prop_assert_eq!(s.merge(&other), Err(SketchError::MappingMismatch));
        // Same α, different index offset: also a mismatch.
        let shifted = CubicMapping::with_gamma(s.mapping().gamma(), 1.0).unwrap();
        let other = SignedSketch::with_mapping(shifted);
        prop_assert_eq!(s.merge(&other), Err(SketchError::MappingMismatch));
        prop_assert_eq!(snapshot(&s), before);
    }
}

#[test]
fn merge_of_collapsed_sketches_is_exact_deterministic_case() {
    // Disjoint ranges, each fitting 64 buckets alone, together not.
    let a: Vec<f64> = (0..500).map(|i| 1.0 + f64::from(i) * 0.001).collect();
    let b: Vec<f64> = (0..500).map(|i| 1e6 + f64::from(i)).collect();
    let mut s1 = DDSketch::<CubicMapping, CollapsingLowestStore<64>>::with_accuracy(0.01).unwrap();
    let mut s2 = s1.clone();
    common::feed(&mut s1, &a).unwrap();
    common::feed(&mut s2, &b).unwrap();
    assert!(s1.collapse().is_none() && s2.collapse().is_none());
    s1.merge(&s2).unwrap();
    assert!(s1.collapse().is_some());
    check_merge::<CubicMapping, CollapsingLowestStore<64>>(&a, &b).unwrap();
    check_merge::<CubicMapping, CollapsingHighestStore<64>>(&b, &a).unwrap();
}

#[test]
fn bad_values_are_rejected_and_change_nothing() {
    let mut s = DDSketch::new(0.01).unwrap();
    s.add(5.0).unwrap();
    let before = snapshot(&s);
    assert_eq!(s.add(f64::NAN), Err(SketchError::NotANumber));
    assert_eq!(s.add(-f64::NAN), Err(SketchError::NotANumber));
    assert_eq!(
        s.add(f64::INFINITY),
        Err(SketchError::ValueOutOfRange(f64::INFINITY))
    );
    assert_eq!(
        s.add(f64::NEG_INFINITY),
        Err(SketchError::ValueOutOfRange(f64::NEG_INFINITY))
    );
    assert_eq!(s.add(f64::MAX), Err(SketchError::ValueOutOfRange(f64::MAX)));
    let beyond = common::next_up(s.mapping().max_indexable_value());
    assert_eq!(s.add(beyond), Err(SketchError::ValueOutOfRange(beyond)));
    assert_eq!(s.add(-1.0), Err(SketchError::NegativeValue(-1.0)));
    assert_eq!(s.add_weighted(f64::NAN, 3), Err(SketchError::NotANumber));
    assert_eq!(s.add_weighted(f64::NAN, 0), Err(SketchError::NotANumber));
    assert_eq!(
        s.add_weighted(-2.0, 7),
        Err(SketchError::NegativeValue(-2.0))
    );
    // Weight 0 adds nothing, and validates the value as `add` would.
    assert_eq!(s.add_weighted(3.0, 0), Ok(()));
    assert_eq!(
        s.add_weighted(f64::INFINITY, 0),
        Err(SketchError::ValueOutOfRange(f64::INFINITY))
    );
    assert_eq!(snapshot(&s), before);
    // The largest indexable value itself is fine, and answers within α.
    let top = s.mapping().max_indexable_value();
    assert_eq!(s.add(top), Ok(()));
    let q = s.quantile(1.0).unwrap().unwrap();
    assert!(q.is_finite() && (q - top).abs() <= 0.01 * top);

    let mut signed: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
    assert_eq!(
        signed.add(-f64::MAX),
        Err(SketchError::ValueOutOfRange(-f64::MAX))
    );
    assert_eq!(signed.add(-1.0), Ok(()));
    let bottom = -signed.mapping().max_indexable_value();
    assert_eq!(signed.add(bottom), Ok(()));
    let q = signed.quantile(0.0).unwrap().unwrap();
    assert!(q.is_finite() && (q - bottom).abs() <= 0.01 * -bottom);
}

#[test]
fn zeros_and_subnormals_go_to_the_zero_bucket() {
    let mut s = DDSketch::new(0.01).unwrap();
    for v in [0.0, -0.0, 5e-324, f64::MIN_POSITIVE / 2.0] {
        assert_eq!(s.add(v), Ok(()), "{v:e}");
    }
    // Negative magnitudes too small to index are still negative: an
    // unsigned sketch refuses them (a signed one counts them as zero).
    for v in [-5e-324, -f64::MIN_POSITIVE] {
        assert_eq!(s.add(v), Err(SketchError::NegativeValue(v)), "{v:e}");
    }
    assert_eq!(s.zero_count(), 4);
    assert_eq!(s.count(), 4);
    assert_eq!(s.min().map(f64::to_bits), Some(0.0f64.to_bits()));
    assert_eq!(s.max(), Some(f64::MIN_POSITIVE / 2.0));
    let mut signed: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
    for v in [-5e-324, -f64::MIN_POSITIVE, 5e-324] {
        assert_eq!(signed.add(v), Ok(()), "{v:e}");
    }
    assert_eq!(signed.zero_count(), 3);
    assert_eq!(signed.min(), Some(-f64::MIN_POSITIVE));
    let min_idx = s.mapping().min_indexable_value();
    for q in [0.0, 0.5, 1.0] {
        let v = s.quantile(q).unwrap().unwrap();
        assert!(v.abs() <= min_idx, "{q}: {v:e}");
    }
    // Only -0.0: an unsigned sketch takes it as 0.0 (its minimum and
    // maximum are never negative) and every answer is zero.
    let mut z = DDSketch::new(0.01).unwrap();
    z.add(-0.0).unwrap();
    assert_eq!(z.min().map(f64::to_bits), Some(0.0f64.to_bits()));
    assert_eq!(z.max().map(f64::to_bits), Some(0.0f64.to_bits()));
    assert_eq!(z.quantile(0.5).unwrap(), Some(0.0));
    assert_eq!(z.rank(0.0).unwrap(), Some(1.0));
    assert_eq!(z.rank(-1.0).unwrap(), Some(0.0));
}

/// Everything `add` refuses, and a few values it takes.
fn probe_values(max_idx: f64) -> [f64; 12] {
    [
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        -f64::MAX,
        common::next_up(max_idx),
        -1.0,
        -2.27e-308,
        -5e-324,
        3.0,
        0.0,
    ]
}

/// `add_weighted(v, 0)` accepts and refuses exactly what `add(v)` does, and
/// changes nothing either way.
fn weight_zero_like_add<M: IndexMapping, P: Store, N: Store>(s: &DDSketch<M, P, N>) {
    let mut s = s.clone();
    for v in probe_values(s.mapping().max_indexable_value()) {
        let before = snapshot(&s);
        let zero = s.add_weighted(v, 0);
        assert_eq!(
            snapshot(&s),
            before,
            "add_weighted({v:e}, 0) changed the sketch"
        );
        let mut fresh = s.clone();
        let one = fresh.add(v);
        // NaN payloads aside, the same verdict.
        assert_eq!(format!("{zero:?}"), format!("{one:?}"), "{v:e}");
    }
}

#[test]
fn weight_zero_validates_like_add() {
    let mut s = DDSketch::new(0.01).unwrap();
    weight_zero_like_add(&s);
    s.add(5.0).unwrap();
    weight_zero_like_add(&s);
    let mut signed: SignedSketch = SignedSketch::with_accuracy(0.05).unwrap();
    weight_zero_like_add(&signed);
    signed.add(-5.0).unwrap();
    weight_zero_like_add(&signed);
    assert_eq!(
        DDSketch::new(0.01).unwrap().add_weighted(f64::NAN, 0),
        Err(SketchError::NotANumber)
    );
}

#[test]
fn unsigned_sketch_refuses_every_negative_value() {
    let mut s = DDSketch::new(0.01).unwrap();
    for v in [-2.27e-308, -1e-310, -5e-324, -f64::MIN_POSITIVE, -1e-300] {
        assert_eq!(s.add(v), Err(SketchError::NegativeValue(v)), "{v:e}");
        assert_eq!(s.add_weighted(v, 3), Err(SketchError::NegativeValue(v)));
        assert_eq!(
            s.add_all(&[1.0, v]),
            Err((1, SketchError::NegativeValue(v)))
        );
    }
    // Only the 1.0s of the batches went in, and the minimum is not negative.
    assert_eq!(s.count(), 5);
    assert_eq!(s.min(), Some(1.0));
    s.add(-0.0).unwrap();
    assert!(s.min().is_some_and(|m| m.to_bits() == 0), "{:?}", s.min());
    assert!(s.quantile(0.0).unwrap().is_some_and(|q| q >= 0.0));
}

#[test]
fn relative_accuracy_below_the_documented_limit_is_refused() {
    use tailguard::mapping::MIN_RELATIVE_ACCURACY;
    assert_eq!(MIN_RELATIVE_ACCURACY, 1e-7);
    for a in [1e-8, 1e-9, 9.9e-8, 1e-12] {
        let refused = MappingError::InvalidRelativeAccuracy(a);
        assert_eq!(LogarithmicMapping::new(a).unwrap_err(), refused, "{a}");
        assert_eq!(CubicMapping::new(a).unwrap_err(), refused, "{a}");
        assert_eq!(LinearMapping::new(a).unwrap_err(), refused, "{a}");
        assert_eq!(
            DDSketch::new(a).unwrap_err(),
            SketchError::Mapping(MappingError::InvalidRelativeAccuracy(a))
        );
    }
    // At the limit every mapping still indexes far beyond any latency, and
    // small values are never counted as zero.
    fn wide<M: IndexMapping + FromRelativeAccuracy>() {
        let m = M::from_relative_accuracy(MIN_RELATIVE_ACCURACY).unwrap();
        assert!(m.min_indexable_value() <= 1e-100, "{m:?}");
        assert!(m.max_indexable_value() >= 1e100, "{m:?}");
        let mut s: DDSketch<M> = DDSketch::with_mapping(m);
        s.add(1e-3).unwrap();
        assert_eq!(s.zero_count(), 0);
    }
    wide::<LogarithmicMapping>();
    wide::<CubicMapping>();
    wide::<LinearMapping>();
    // So is a γ so close to 1 that it implies such an α.
    for g in [1.0 + 2e-9, 1.0 + 1e-12] {
        assert_eq!(
            CubicMapping::with_gamma(g, 0.0),
            Err(MappingError::InvalidGamma(g))
        );
        assert_eq!(
            LogarithmicMapping::with_gamma(g, 0.0),
            Err(MappingError::InvalidGamma(g))
        );
    }
    let e = MappingError::InvalidRelativeAccuracy(1e-9).to_string();
    assert!(e.contains("1e-7"), "{e}");
}

#[test]
fn invalid_quantiles_are_errors() {
    let mut s = DDSketch::new(0.01).unwrap();
    for q in [
        -0.01,
        1.01,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1e-300,
    ] {
        let err = s.quantile(q).unwrap_err();
        assert!(matches!(err, SketchError::InvalidQuantile(x) if x.to_bits() == q.to_bits()));
        assert!(s.quantiles(&[0.5, q]).is_err());
    }
    s.add(1.0).unwrap();
    assert!(s.quantile(1.5).is_err());
    assert!(s.quantiles(&[0.5, f64::NAN]).is_err());
    assert_eq!(s.quantile(-0.0).unwrap(), Some(1.0));
    assert_eq!(s.rank(f64::NAN), Err(SketchError::NotANumber));
}

#[test]
fn empty_sketch_answers_none() {
    let s: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
    assert!(s.is_empty());
    assert_eq!(s.count(), 0);
    assert_eq!(s.quantile(0.5), Ok(None));
    assert_eq!(s.quantiles(&[0.0, 1.0]), Ok(None));
    assert_eq!(s.quantiles(&[]), Ok(None));
    assert_eq!(s.rank(1.0), Ok(None));
    assert_eq!(
        (s.min(), s.max(), s.sum(), s.mean()),
        (None, None, None, None)
    );
    assert_eq!(s.collapse(), None);
    assert_eq!(s.negative_collapse(), None);
    // Cleared sketches are empty again, and forget their collapse.
    let mut c = DDSketch::<CubicMapping, CollapsingLowestStore<16>>::with_accuracy(0.01).unwrap();
    c.add(1.0).unwrap();
    c.add(1e9).unwrap();
    assert!(c.collapse().is_some());
    c.clear();
    assert!(c.is_empty() && c.collapse().is_none() && c.quantile(0.5) == Ok(None));
    c.add(2.0).unwrap();
    assert_eq!(c.quantile(0.5).unwrap(), Some(2.0));
}

#[test]
fn saturated_buckets_stay_consistent() {
    let mut s: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
    let max = u64::from(u32::MAX);
    s.add_weighted(10.0, u32::MAX).unwrap();
    assert_eq!((s.count(), s.saturated()), (max, 0));
    s.add_weighted(10.0, u32::MAX).unwrap();
    s.add_weighted(10.0, 5).unwrap();
    assert_eq!(s.count(), max);
    assert_eq!(s.saturated(), max + 5);
    s.add_weighted(-3.0, u32::MAX).unwrap();
    s.add_weighted(-3.0, 1).unwrap();
    s.add_weighted(0.0, u32::MAX).unwrap();
    s.add_weighted(0.0, u32::MAX).unwrap();
    s.add_weighted(1000.0, 7).unwrap();
    assert_eq!(s.saturated(), max + 6);
    let bins: u64 = s
        .positive_store()
        .bins()
        .chain(s.negative_store().bins())
        .map(|(_, c)| u64::from(c))
        .sum();
    assert_eq!(s.count(), bins + s.zero_count());
    assert_eq!(s.zero_count(), 2 * max);
    assert_eq!(s.count(), 4 * max + 7);
    let [lo, mid, hi, top] = s.quantiles(&[0.0, 0.5, 0.99, 1.0]).unwrap().unwrap();
    assert!((lo + 3.0).abs() <= 0.03, "{lo}");
    assert_eq!(mid, 0.0);
    assert!((hi - 10.0).abs() <= 0.1, "{hi}");
    assert!((top - 1000.0).abs() <= 10.0, "{top}");
    for q in [0.0, 0.25, 0.5, 0.75, 0.99, 1.0] {
        assert!(s.quantile(q).unwrap().is_some());
    }
    let r = s.rank(10.0).unwrap().unwrap();
    assert!((0.0..=1.0).contains(&r));
    // Saturating the collapsed edge bucket through a collapse.
    let mut c = DDSketch::<CubicMapping, CollapsingLowestStore<16>>::with_accuracy(0.01).unwrap();
    c.add_weighted(1.0, u32::MAX).unwrap();
    c.add_weighted(1.001, u32::MAX).unwrap();
    c.add_weighted(1e9, 1).unwrap();
    assert!(c.collapse().is_some());
    let bins: u64 = c.positive_store().bins().map(|(_, n)| u64::from(n)).sum();
    assert_eq!(c.count(), bins);
    assert_eq!(c.count() + c.saturated(), 2 * max + 1);
    assert!(c.quantile(1.0).unwrap().is_some());
    // Merging saturates the same way, in the window fast path or not.
    for far in [11.0, 1e12] {
        let mut a = DDSketch::new(0.01).unwrap();
        a.add_weighted(10.0, u32::MAX - 1).unwrap();
        let mut b = a.clone();
        b.add(far).unwrap();
        a.merge(&b).unwrap();
        let bins: u64 = a.positive_store().bins().map(|(_, n)| u64::from(n)).sum();
        assert_eq!(a.count(), bins);
        assert_eq!(a.count() + a.saturated(), 2 * (max - 1) + 1, "{far}");
        assert_eq!(a.saturated(), max - 2);
    }
    // The unsigned default counts refused negatives nowhere.
    let d = DDSketch::new(0.01).unwrap();
    assert_eq!(d.saturated(), 0);
}

#[test]
fn invalid_relative_accuracy_is_a_typed_error() {
    for a in [0.0, 1.0, -0.01, 1.5, f64::NAN, f64::INFINITY, -0.0, 1e-300] {
        match DDSketch::new(a) {
            Err(SketchError::Mapping(MappingError::InvalidRelativeAccuracy(x))) => {
                assert!(x.to_bits() == a.to_bits(), "{a}")
            }
            other => panic!("{a}: {other:?}"),
        }
        assert!(SignedSketch::<LinearMapping>::with_accuracy(a).is_err());
        assert!(
            DDSketch::<LogarithmicMapping, CollapsingLowestStore<8>, NoStore>::with_accuracy(a)
                .is_err()
        );
    }
    let e = DDSketch::new(2.0).unwrap_err();
    assert!(!e.to_string().is_empty());
    assert!(core::error::Error::source(&e).is_some());
    assert!(!SketchError::MappingMismatch.to_string().is_empty());
}

#[test]
fn default_sketch_takes_4_kib_plus_200() {
    // As the `DDSketch` docs say: 4 KiB of counters, 32 bytes of store
    // state, 88 of mapping, 16 of its indexable range kept ready, 32 of
    // count, min, max and sum, 32 of the integer path's min, max and
    // 128-bit sum.
    let size = core::mem::size_of::<DDSketch>();
    println!("size_of::<DDSketch>() = {size}");
    assert_eq!(size, 4096 + 200, "{size}");
    let signed = core::mem::size_of::<SignedSketch>();
    println!("size_of::<SignedSketch>() = {signed}");
    assert!(signed <= 2 * 4096 + 256, "{signed}");
}

#[test]
fn store_size_is_as_documented() {
    // `CollapsingStore` docs: 4 · N + 32 bytes.
    assert_eq!(
        core::mem::size_of::<CollapsingLowestStore<1024>>(),
        4 * 1024 + 32
    );
    assert_eq!(
        core::mem::size_of::<CollapsingHighestStore<16>>(),
        4 * 16 + 32
    );
}

#[test]
fn the_exponential_mapping_s_finest_accuracy_is_the_documented_one() {
    // "3.30519·10⁻⁷ at least": scale 20's α is 3.3051835…·10⁻⁷.
    use tailguard::mapping::ExponentialMapping;
    type Exp = DDSketch<ExponentialMapping>;
    assert!(Exp::with_accuracy(3.30519e-7).is_ok());
    for a in [3.30518e-7, 3.3e-7, 1e-7] {
        assert_eq!(
            Exp::with_accuracy(a).unwrap_err(),
            SketchError::Mapping(MappingError::InvalidRelativeAccuracy(a)),
            "{a}"
        );
    }
}

#[test]
fn a_window_answer_is_within_alpha_plus_one_nanosecond() {
    // The documented bound of whole-nanosecond answers: the float
    // representative (1.98 for the bucket of 2 at α = 1 %) rounded down.
    use tailguard::window::LatencyWindow;
    let mut w: LatencyWindow = LatencyWindow::new(0.01, 30_000_000_000, 0.5).unwrap();
    for l in [1u64, 2, 100] {
        w.record(0, l).unwrap();
    }
    // 1 is 50 % below the exact 2: past α, within α·x + 1 ns.
    let p50 = w.quantile(0.5).unwrap().unwrap();
    assert_eq!(p50, 1, "the float representative rounded down");
}

#[test]
fn the_rank_rule_takes_q_times_n_minus_one_in_f64() {
    // 1/3 as a double (0x3FD5555555555555) is just below a third, yet
    // `q·3` rounds to 1.0: rank 1, as documented, not the real product's
    // rank 0.
    let q = 1.0f64 / 3.0;
    assert_eq!(q.to_bits(), 0x3FD5_5555_5555_5555);
    assert_eq!(q * 3.0, 1.0);
    let mut s = DDSketch::new(0.01).unwrap();
    for v in [1.0, 1e3, 1e6, 1e9] {
        s.add(v).unwrap();
    }
    let x = s.quantile(q).unwrap().unwrap();
    assert!((x - 1e3).abs() <= 0.01 * 1e3, "{x}");
}
