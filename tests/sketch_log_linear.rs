//! `LogLinearMapping`'s integer keys and the sketch's integer add path:
//! keys equal to the float path's wherever the conversion is exact, buckets
//! that hold the exact integer above 2⁵³, bounds exact to the ulp, α from
//! 10⁻⁷ to 0.999, and `add_u64` equal to `add` on the same samples.

mod common;

use common::{cases, within};
use proptest::prelude::*;
use tailguard::mapping::{IndexMapping, LogLinearMapping, MappingError};
use tailguard::{CollapsingLowestStore, DDSketch, SketchError};

const TWO_53: u64 = 1 << 53;

/// `|rep − v| <= α·v` for an integer `v` and an integer-valued `rep`
/// (`v >= 2^53`, so every key's bounds and representatives are integers),
/// checked without rounding in favour of the mapping: the difference is
/// exact in `u128`, and `α·v` is bounded below.
fn within_integer(rep: f64, v: u64, alpha: f64) -> bool {
    let rep = rep as u128; // an integer-valued double below 2^65: exact
    let diff = rep.abs_diff(u128::from(v));
    // `v as f64` is within a relative 2^-53 of v; the product rounds once.
    let bound = alpha * (v as f64) * (1.0 - 4.0 * f64::EPSILON);
    (diff as f64) <= bound && diff <= bound as u128
}

/// Integers log-uniform over `[1, 2^64)` from a uniform exponent and a
/// uniform mantissa, plus the edges.
fn integer() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u32..64, any::<u64>()).prop_map(|(e, m)| (1u64 << e) | (m >> (63 - e) >> 1)),
        Just(1u64),
        Just(TWO_53 - 1),
        Just(TWO_53),
        Just(TWO_53 + 1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
    ]
}

fn alphas() -> impl Strategy<Value = f64> {
    // Log-uniform over [1e-7, 0.999].
    (0.0f64..=1.0).prop_map(|u| (1e-7f64.ln() + u * (0.999f64.ln() - 1e-7f64.ln())).exp())
}

/// The checks of one integer against one mapping.
fn check_integer(m: &LogLinearMapping, v: u64) -> Result<(), TestCaseError> {
    let k = m.index_u64(v).expect("every nonzero u64 is indexable");
    let f = v as f64;
    let alpha = m.relative_accuracy();
    if f as u128 == u128::from(v) {
        // The conversion is exact: the same key as the float path.
        prop_assert_eq!(m.index(f), k, "{:?} v={}", m, v);
        prop_assert!(within(m.value(k), f, alpha), "{:?} v={}", m, v);
    } else {
        // Rounded: the float's key is the integer's or the next one.
        let d = i64::from(m.index(f)) - i64::from(k);
        prop_assert!(d == 0 || d == 1, "{:?} v={} keys {} {}", m, v, k, d);
        prop_assert!(within_integer(m.value(k), v, alpha), "{:?} v={}", m, v);
    }
    // The bucket holds the exact integer: lower_bound(k) <= v <
    // lower_bound(k + 1), compared exactly: in floats when `v` is one,
    // else in u128 (above 2^53 the exponent exceeds k, so both bounds are
    // integer-valued doubles up to 2^64).
    let (lo, hi) = (m.lower_bound(k), m.lower_bound(k + 1));
    if v <= TWO_53 {
        prop_assert!(lo <= f && f < hi, "{:?} v={} [{}, {})", m, v, lo, hi);
    } else {
        prop_assert!(lo.fract() == 0.0 && hi.fract() == 0.0);
        let (lo, hi) = (lo as u128, hi as u128);
        prop_assert!(
            lo <= u128::from(v) && u128::from(v) < hi,
            "{:?} v={} [{}, {})",
            m,
            v,
            lo,
            hi
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn integer_keys_match_float_keys_and_keep_alpha(a in alphas(), vs in prop::collection::vec(integer(), 1..64)) {
        let m = LogLinearMapping::new(a).unwrap();
        for v in vs {
            check_integer(&m, v)?;
        }
    }

    #[test]
    fn alpha_is_met_with_the_fewest_bits(a in alphas()) {
        let m = LogLinearMapping::new(a).unwrap();
        prop_assert!(m.relative_accuracy() <= a);
        if m.bits() > 0 {
            // One bit fewer would not guarantee α.
            let coarser = LogLinearMapping::with_bits(m.bits() - 1, 0).unwrap();
            prop_assert!(coarser.relative_accuracy() > a);
        }
    }

    #[test]
    fn add_u64_is_add_on_exact_integers(a in alphas(), vs in prop::collection::vec(0u64..TWO_53, 0..200)) {
        type S = DDSketch<LogLinearMapping, CollapsingLowestStore<256>>;
        let m = LogLinearMapping::new(a.max(1e-3)).unwrap();
        let (mut by_int, mut by_float) = (S::with_mapping(m), S::with_mapping(m));
        for &v in &vs {
            by_int.add_u64(v).unwrap();
            by_float.add(v as f64).unwrap();
        }
        prop_assert_eq!(by_int.count(), by_float.count());
        prop_assert_eq!(by_int.zero_count(), by_float.zero_count());
        prop_assert_eq!(by_int.min(), by_float.min());
        prop_assert_eq!(by_int.max(), by_float.max());
        prop_assert_eq!(by_int.collapse(), by_float.collapse());
        // The integer sum is exact; the float one within its roundings.
        let exact: u128 = vs.iter().map(|&v| u128::from(v)).sum();
        if let (Some(si), Some(sf)) = (by_int.sum(), by_float.sum()) {
            prop_assert_eq!(si, exact as f64);
            prop_assert!((si - sf).abs() <= 1e-12 * si);
        }
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
            prop_assert_eq!(by_int.quantile(q).unwrap(), by_float.quantile(q).unwrap());
        }
        for x in [0.0, 1.0, 1e6, 3e12] {
            prop_assert_eq!(by_int.rank(x).unwrap(), by_float.rank(x).unwrap());
        }
    }

    #[test]
    fn integer_quantiles_are_within_alpha_of_exact(a in alphas(), vs in prop::collection::vec(integer(), 1..300)) {
        let m = LogLinearMapping::new(a.max(1e-4)).unwrap();
        let mut s = Box::new(DDSketch::<LogLinearMapping, CollapsingLowestStore<8192>>::with_mapping(m));
        for &v in &vs {
            s.add_u64(v).unwrap();
        }
        let mut sorted = vs.clone();
        sorted.sort_unstable();
        prop_assert_eq!(s.min(), Some(sorted[0] as f64));
        prop_assert_eq!(s.max(), Some(sorted[sorted.len() - 1] as f64));
        prop_assume!(s.collapse().is_none());
        let alpha = m.relative_accuracy();
        for q in [0.0, 0.25, 0.5, 0.75, 0.99, 1.0] {
            let x = sorted[(q * (sorted.len() - 1) as f64) as usize];
            let got = s.quantile(q).unwrap().unwrap();
            // Clamped to the float min/max: for x above 2^53 the answer may
            // be `x as f64`, within 2^-53 of x.
            let ok = if x <= TWO_53 {
                within(got, x as f64, alpha)
            } else {
                within_integer(got, x, alpha) || got == x as f64
            };
            prop_assert!(ok, "q={} x={} got={} α={}", q, x, got, alpha);
        }
    }
}

#[test]
fn integer_edges() {
    for a in [1e-7, 1e-3, 0.01, 0.3, 0.999] {
        let m = LogLinearMapping::new(a).unwrap();
        assert_eq!(m.index_u64(0), None);
        assert_eq!(m.index_u64(1), Some(0));
        for v in [
            1,
            2,
            3,
            TWO_53 - 1,
            TWO_53,
            TWO_53 + 1,
            u64::MAX - 1,
            u64::MAX,
        ] {
            check_integer(&m, v).unwrap();
        }
        // 2^53 + 1 rounds to 2^53 as a float: same bucket unless 2^53 + 1
        // starts one, which needs k = 53.
        assert_eq!(m.index_u64(TWO_53 + 1), m.index_u64(TWO_53));
        // u64::MAX is the last key of exponent 63; as a float it is 2^64,
        // the first key of exponent 64: the one place the paths differ
        // at every k.
        let last = m.index_u64(u64::MAX).unwrap();
        assert_eq!(i64::from(last), (64i64 << m.bits()) - 1);
        assert_eq!(m.index(u64::MAX as f64), last + 1);
    }
}

#[test]
fn keys_are_the_float_bits_shifted() {
    let m = LogLinearMapping::with_bits(3, 0).unwrap();
    // 1.0 = 2^0 · (1 + 0/8): key 0; 1.125 the next; 2.0 is key 8.
    assert_eq!(m.index(1.0), 0);
    assert_eq!(m.index(1.125f64.next_down()), 0);
    assert_eq!(m.index(1.125), 1);
    assert_eq!(m.index(2.0), 8);
    assert_eq!(m.index(0.5), -8);
    assert_eq!(m.index_u64(15), Some(3 * 8 + 7));
    assert_eq!(m.lower_bound(3 * 8 + 7), 15.0);
    let shifted = LogLinearMapping::with_bits(3, -5).unwrap();
    assert_eq!(shifted.index(2.0), 3);
    assert_eq!(shifted.index_u64(2), Some(3));
    assert_eq!(shifted.lower_bound(3), 2.0);
    assert_eq!(shifted.index_offset(), -5.0);
    // The representative of the widest bucket, [1, 1.125), is its centre.
    let c = m.value(0);
    assert!((c - 2.0 * 1.125 / 2.125).abs() <= f64::EPSILON);
}

/// Every bound is exact: `lower_bound(k)` maps to `k` and the float just
/// below it to `k − 1`, over the whole key range, at every `k`.
#[test]
fn bounds_are_exact_to_the_ulp() {
    for bits in 0..=LogLinearMapping::MAX_BITS {
        for offset in [0, 7, -1_000_000] {
            let m = LogLinearMapping::with_bits(bits, offset).unwrap();
            let (k0, k1) = (
                m.index(m.min_indexable_value()),
                m.index(m.max_indexable_value()),
            );
            let stride = ((i64::from(k1) - i64::from(k0)) / 5_000).max(1) as usize;
            for k in (k0 + 1..k1).step_by(stride).chain([k0 + 1, k1 - 1]) {
                let b = m.lower_bound(k);
                assert_eq!(m.index(b), k, "{m:?} key {k}");
                assert_eq!(m.index(b.next_down()), k - 1, "{m:?} key {k}");
                let v = m.value(k);
                let next = m.lower_bound(k + 1);
                let a = m.relative_accuracy();
                assert!(
                    within(v, b, a) && within(v, next.next_down(), a),
                    "{m:?} {k}"
                );
            }
            assert_eq!(m.lower_bound(k0), m.min_indexable_value());
            assert_eq!(m.key_slack(), 0.0);
        }
    }
}

#[test]
fn invalid_configuration_is_refused() {
    for a in [0.0, -1.0, 1.0, 1.5, f64::NAN, f64::INFINITY, 9.9e-8] {
        assert!(
            matches!(
                LogLinearMapping::new(a),
                Err(MappingError::InvalidRelativeAccuracy(_))
            ),
            "{a}"
        );
    }
    assert!(matches!(
        LogLinearMapping::with_bits(24, 0),
        Err(MappingError::InvalidGamma(_))
    ));
    assert_eq!(
        LogLinearMapping::with_bits(3, i32::MAX),
        Err(MappingError::InvalidIndexOffset(f64::from(i32::MAX)))
    );
    // From the wire: γ of a power-of-two multiplier, integer offsets only.
    let m = LogLinearMapping::new(0.01).unwrap();
    assert_eq!(LogLinearMapping::with_gamma(m.gamma(), 0.0), Ok(m));
    for bad in [1.0, 1.02, f64::NAN, f64::INFINITY, 0.5] {
        assert!(LogLinearMapping::with_gamma(bad, 0.0).is_err(), "{bad}");
    }
    assert_eq!(
        LogLinearMapping::with_gamma(m.gamma(), 0.5),
        Err(MappingError::InvalidIndexOffset(0.5))
    );
    // Non-indexable floats give some key, no panic.
    for x in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-310] {
        let _ = m.index(x);
    }
}

#[test]
fn mixed_paths_merge_and_clear() {
    let m = LogLinearMapping::new(0.01).unwrap();
    // 64 buckets per power of two from 0.25 to 2^64: 4 224 buckets.
    type Wide = DDSketch<LogLinearMapping, CollapsingLowestStore<8192>>;
    let mut a = Box::new(Wide::with_mapping(m));
    let mut b = Box::new(Wide::with_mapping(m));
    a.add_u64(5).unwrap();
    a.add(0.25).unwrap();
    b.add_u64(u64::MAX).unwrap();
    b.add_u64(u64::MAX).unwrap();
    b.add(7.5).unwrap();
    a.merge(&b).unwrap();
    assert_eq!((a.count(), a.collapse()), (5, None));
    assert_eq!(a.min(), Some(0.25));
    assert_eq!(a.max(), Some(u64::MAX as f64));
    // Two u64::MAX carry into the sum's high word: exact, then rounded.
    let exact = 5u128 + 2 * u128::from(u64::MAX);
    assert_eq!(a.sum(), Some(exact as f64 + 7.75));
    let top = a.quantile(1.0).unwrap().unwrap();
    assert!(within(top, u64::MAX as f64, m.relative_accuracy()), "{top}");
    let bottom = a.quantile(0.0).unwrap().unwrap();
    assert!(within(bottom, 0.25, m.relative_accuracy()), "{bottom}");
    a.clear();
    assert_eq!(
        (a.count(), a.min(), a.max(), a.sum()),
        (0, None, None, None)
    );
    a.add_u64(0).unwrap();
    assert_eq!(
        (a.zero_count(), a.min(), a.max()),
        (1, Some(0.0), Some(0.0))
    );
    // Other mappings take integers through their float index.
    let mut c = DDSketch::new(0.01).unwrap();
    c.add_u64(1_000).unwrap();
    c.add_u64(0).unwrap();
    assert_eq!((c.count(), c.zero_count(), c.max()), (2, 1, Some(1000.0)));
    let q = c.quantile(1.0).unwrap().unwrap();
    assert!(within(q, 1000.0, 0.01));
    let _: Result<(), SketchError> = c.add_u64(u64::MAX);
}
