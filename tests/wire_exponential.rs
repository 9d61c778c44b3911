//! `ExponentialMapping` against OpenTelemetry's specification: the
//! reference index formulas (data-model.md, "Producer Expectations") on
//! exact powers of two, their float neighbours and subnormals at every scale
//! −10..=20; bucket containment elsewhere; the α guarantee, round trips and
//! quantile accuracy as for the other mappings.

mod common;

use common::{alpha, cases, check_all, dataset, size, sorted, within, Side};
use proptest::prelude::*;
use tailguard::mapping::{ExponentialMapping, LogarithmicMapping};
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore};
use tailguard::wire::{decode_ddsketch, encode_ddsketch, Convention, WireMapping};
use tailguard::{DDSketch, FromRelativeAccuracy, IndexMapping, SignedSketch, Store};

const SCALES: std::ops::RangeInclusive<i32> = -10..=20;

/// The specification's `MapToIndexScale0`: exact, subnormals included.
fn spec_scale0(value: f64) -> i32 {
    const MASK: u64 = (1 << 52) - 1;
    let raw = value.to_bits();
    let mut raw_exponent = ((raw >> 52) & 0x7ff) as i64;
    let raw_fragment = raw & MASK;
    if raw_exponent == 0 {
        raw_exponent -= i64::from((raw_fragment - 1).leading_zeros()) - 12;
    }
    let ieee_exponent = (raw_exponent - 1023) as i32;
    if raw_fragment == 0 {
        return ieee_exponent - 1;
    }
    ieee_exponent
}

/// Go's `math.Frexp`: `(frac, exp)` with `value = frac · 2^exp`, frac in
/// [0.5, 1), subnormals normalised.
fn frexp(value: f64) -> (f64, i32) {
    let (v, bias) = if value < f64::MIN_POSITIVE {
        (value * 2f64.powi(54), -54)
    } else {
        (value, 0)
    };
    let bits = v.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, e + bias)
}

/// The specification's index at any scale: the exponent method at scales
/// `<= 0`; at positive scales the logarithm with the power-of-two special
/// case (`MapToIndex`, "exact for powers of two").
fn spec_index(value: f64, scale: i32) -> i32 {
    if scale <= 0 {
        return spec_scale0(value) >> -scale;
    }
    let (frac, exp) = frexp(value);
    if frac == 0.5 {
        return ((exp - 1) << scale) - 1;
    }
    let scale_factor = std::f64::consts::LOG2_E * 2f64.powi(scale);
    (value.ln() * scale_factor).floor() as i32
}

/// `2^e` exactly, subnormals included.
fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1 << (e + 1074))
    }
}

fn mapping(scale: i32) -> ExponentialMapping {
    ExponentialMapping::new(scale).unwrap()
}

#[test]
fn frexp_is_gos() {
    assert_eq!(frexp(1.0), (0.5, 1));
    assert_eq!(frexp(3.0), (0.75, 2));
    assert_eq!(frexp(f64::from_bits(1)), (0.5, -1073));
    assert_eq!(frexp(f64::MIN_POSITIVE), (0.5, -1021));
}

#[test]
fn powers_of_two_match_the_specification_exactly() {
    for scale in SCALES {
        let m = mapping(scale);
        for e in -1074..=1023 {
            let v = pow2(e);
            assert_eq!(m.index(v), spec_index(v, scale), "2^{e} at scale {scale}");
            // The bucket a power of two closes: `e·2^s − 1` (scales >= 0).
            if scale >= 0 {
                assert_eq!(m.index(v), (e << scale) - 1);
            }
        }
    }
}

#[test]
fn neighbours_of_powers_of_two_are_exact() {
    let mut log_formula_misses = 0;
    for scale in SCALES {
        let m = mapping(scale);
        // Normal neighbours, none a power of two (subnormals: see below).
        for e in -1021..=1023 {
            let p = pow2(e);
            for (v, above) in [(p.next_up(), true), (p.next_down(), false)] {
                // Mathematically: just above 2^e is the first bucket of
                // the octave, just below it the last bucket of the one before.
                let exact = if scale >= 0 {
                    (e << scale) - i32::from(!above)
                } else {
                    // 2^e ± ulp: exponent e (above) or e − 1 (below).
                    (if above { e } else { e - 1 }) >> -scale
                };
                assert_eq!(m.index(v), exact, "{v:e} at scale {scale}");
                let spec = spec_index(v, scale);
                if scale <= 0 {
                    assert_eq!(spec, exact, "the exponent method is exact");
                } else {
                    // The logarithm formula may be off by one here.
                    assert!((spec - exact).abs() <= 1, "{v:e} at scale {scale}");
                    log_formula_misses += usize::from(spec != exact);
                }
            }
        }
    }
    // At high scales `ln(v) · 2^s / ln 2` rounds onto the boundary.
    assert!(log_formula_misses > 0);
    eprintln!("the specification's logarithm formula misses {log_formula_misses} neighbours");
}

#[test]
fn subnormals_match_the_specification() {
    let mut subnormals: Vec<f64> = (0..52).map(|b| f64::from_bits(1 << b)).collect();
    subnormals.extend(
        subnormals
            .clone()
            .iter()
            .flat_map(|v| [v.next_up(), v.next_down()]),
    );
    subnormals
        .extend((1..2000u64).map(|i| f64::from_bits(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 12)));
    subnormals.push(f64::MIN_POSITIVE.next_down());
    subnormals.retain(|&v| v > 0.0 && v < f64::MIN_POSITIVE);
    for scale in SCALES {
        let m = mapping(scale);
        for &v in &subnormals {
            let (ours, spec) = (m.index(v), spec_index(v, scale));
            if scale <= 0 || v.to_bits().is_power_of_two() {
                assert_eq!(ours, spec, "{v:e} at scale {scale}");
            } else {
                assert!(
                    (ours - spec).abs() <= 1,
                    "{v:e} at scale {scale}: {ours} vs {spec}"
                );
            }
        }
    }
}

#[test]
fn every_value_lies_in_its_bucket() {
    // (base^i, base^(i+1)], up to the rounding of the bounds.
    let slack = 1e-14;
    for scale in -9..=20 {
        let m = mapping(scale);
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x >> 2 | 0x0010_0000_0000_0000);
            if !(v.is_finite() && v >= f64::MIN_POSITIVE && v <= m.max_indexable_value()) {
                continue;
            }
            let i = m.index(v);
            let (lo, hi) = (m.lower_bound(i), m.lower_bound(i + 1));
            assert!(
                lo <= v * (1.0 + slack) && v <= hi * (1.0 + slack),
                "{v:e} s={scale}: {lo:e} {hi:e}"
            );
            // Within ±1 of the specification's logarithm formula.
            assert!((i - spec_index(v, scale)).abs() <= 1);
        }
    }
}

#[test]
fn lower_bounds_are_the_specifications() {
    for scale in SCALES {
        let m = mapping(scale);
        for e in -1022..=1023 {
            // Powers of two exactly.
            let i = if scale >= 0 { e << scale } else { e >> -scale };
            if scale < 0 && (e & ((1 << -scale) - 1)) != 0 {
                continue;
            }
            assert_eq!(m.lower_bound(i), pow2(e), "2^{e} at scale {scale}");
        }
        if scale > 0 {
            for i in (-1000..1000).map(|k| k * 7919 % (1000 << scale)) {
                let spec = (f64::from(i) * std::f64::consts::LN_2 / 2f64.powi(scale)).exp();
                let ours = m.lower_bound(i);
                assert!((ours / spec - 1.0).abs() < 1e-13, "{i} at scale {scale}");
            }
        }
    }
}

#[test]
fn scales_and_accuracies() {
    for scale in SCALES {
        let m = mapping(scale);
        let base = 2f64.powf(2f64.powi(-scale));
        assert!(m.base() == base || (m.base() / base - 1.0).abs() < 1e-15);
        if scale > -9 {
            let a = (base - 1.0) / (base + 1.0);
            // α plus the rounding margin 2^-46, at most 1 (α rounds to 1
            // at scales <= −6).
            let excess = m.relative_accuracy() - a;
            let margin = 2f64.powi(-46);
            assert!(m.relative_accuracy() <= 1.0, "scale {scale}");
            assert!(
                (excess - margin).abs() < margin / 64.0 || (a == 1.0 && excess == 0.0),
                "scale {scale}: α' − α = {excess:e}"
            );
            // The base is what a DataDog exact-logarithm γ names.
            assert_eq!(ExponentialMapping::with_base(m.gamma()), Some(m));
        }
    }
    // α at scale s is tanh(2^-s · ln 2 / 2): 1.08 % at 5, 0.54 % at 6.
    for (a, scale) in [
        (0.011, 5),
        (0.01, 6),
        (0.006, 6),
        (0.0054, 7),
        (0.05, 3),
        (0.3, 1),
    ] {
        assert_eq!(
            ExponentialMapping::for_relative_accuracy(a)
                .unwrap()
                .scale(),
            scale,
            "{a}"
        );
    }
    assert!(ExponentialMapping::for_relative_accuracy(1e-8).is_err());
    assert!(ExponentialMapping::from_relative_accuracy(f64::NAN).is_err());
}

/// Within α exactly, with no slack: the stated α covers every rounding,
/// that of the lowest buckets' subnormal representatives included (an
/// absolute 2⁻¹⁰⁷⁵, a relative 2⁻⁵³ of any indexable value).
#[test]
fn representatives_round_trip_and_keep_alpha() {
    for scale in SCALES {
        let m = mapping(scale);
        let a = m.relative_accuracy();
        let first = m.index(f64::MIN_POSITIVE);
        let last = m.index(m.max_indexable_value());
        let step = ((last - first) / 5000).max(1);
        for i in (first..=last).step_by(step as usize) {
            let v = m.value(i);
            assert_eq!(m.index(v), i, "value({i}) at scale {scale}");
        }
        let mut v = f64::MIN_POSITIVE;
        while v < m.max_indexable_value() {
            for w in [v, v.next_up(), v.next_down(), v * 1.37] {
                if w < f64::MIN_POSITIVE || w > m.max_indexable_value() {
                    continue;
                }
                let r = m.value(m.index(w));
                assert!(within(r, w, a), "{w:e} at scale {scale}: {r:e}");
            }
            v *= 1.1e7;
        }
    }
}

#[test]
fn exponential_sketches_travel_as_datadog_exact_log_sketches() {
    let m = mapping(6);
    let mut s = SignedSketch::<ExponentialMapping>::with_mapping(m);
    for i in 0..3000 {
        s.add(1.003f64.powi(i) * if i % 3 == 0 { -1.0 } else { 1.0 })
            .unwrap();
    }
    let mut buf = vec![0u8; 20_000];
    let n = encode_ddsketch(&s, Convention::GoJava, &mut buf).unwrap();
    // Back into the same mapping...
    let (back, _): (SignedSketch<ExponentialMapping>, _) =
        decode_ddsketch(&buf[..n], Convention::GoJava).unwrap();
    assert_eq!(back.mapping(), &m);
    let bins = |s: &SignedSketch<ExponentialMapping>| s.positive_store().bins().collect::<Vec<_>>();
    assert_eq!(bins(&back), bins(&s));
    // ...and as an exact logarithmic mapping of γ = base, whose buckets are
    // the same but for values exactly on a boundary.
    let (log, _): (SignedSketch<LogarithmicMapping>, _) =
        decode_ddsketch(&buf[..n], Convention::GoJava).unwrap();
    assert!((log.mapping().gamma() / m.gamma() - 1.0).abs() < 1e-15);
    for q in [0.01, 0.5, 0.99] {
        let (x, y) = (
            s.quantile(q).unwrap().unwrap(),
            log.quantile(q).unwrap().unwrap(),
        );
        assert!((x - y).abs() <= 1e-12 * x.abs(), "q={q}");
    }
    // Not a scale: refused.
    assert!(ExponentialMapping::from_wire(1.5, 0.0, Convention::GoJava).is_err());
    assert!(ExponentialMapping::from_wire(m.gamma(), 1.0, Convention::GoJava).is_err());
}

const CAP: usize = 8192;

fn check<P: Store>(a: f64, side: Side, data: &[f64], sorted: &[f64]) -> Result<(), TestCaseError> {
    let mut s: Box<SignedSketch<ExponentialMapping, P>> =
        Box::new(SignedSketch::with_accuracy(a).unwrap());
    check_all(&mut s, side, data, sorted)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    /// As `sketch_accuracy.rs` does for the other mappings: every quantile
    /// within α of the exact one, rank bounds, exact count/min/max/sum.
    #[test]
    fn guarantee_holds((shape, data) in dataset(size()), a in alpha()) {
        let _ = shape;
        let sorted = sorted(&data);
        check::<CollapsingLowestStore<CAP>>(a, Side::Lowest, &data, &sorted)?;
        check::<CollapsingHighestStore<CAP>>(a, Side::Highest, &data, &sorted)?;
    }

    #[test]
    fn index_of_value_round_trips(scale in -8i32..=20, i in any::<i32>()) {
        let m = mapping(scale);
        let (lo, hi) = (m.index(f64::MIN_POSITIVE), m.index(m.max_indexable_value()));
        let i = lo + (i.rem_euclid(hi - lo + 1));
        prop_assert_eq!(m.index(m.value(i)), i);
    }

    #[test]
    fn unsigned_default_store_works(v in 1e-300f64..1e300) {
        let mut s = DDSketch::<ExponentialMapping>::with_accuracy(0.02).unwrap();
        s.add(v).unwrap();
        let q = s.quantile(0.5).unwrap().unwrap();
        prop_assert_eq!(q, v); // clamped to the exact min/max
    }
}

/// `f64::MIN_POSITIVE`, an exact power of two, closes the bucket below it,
/// whose representative is subnormal; `max_indexable_value`'s may pass it.
/// Both come back through DataDog's format at every scale it can carry,
/// in either convention, with 1 000 ordinary samples beside them.
#[test]
fn indexable_extremes_decode_at_every_scale() {
    for scale in -9..=20 {
        let m = ExponentialMapping::new(scale).unwrap();
        for v in [f64::MIN_POSITIVE, m.max_indexable_value()] {
            for convention in [Convention::GoJava, Convention::Python] {
                let mut s =
                    SignedSketch::<ExponentialMapping, CollapsingLowestStore<CAP>>::with_mapping(m);
                s.add(v).unwrap();
                s.add(-v).unwrap();
                (1..=1000).for_each(|i| s.add(f64::from(i)).unwrap());
                let mut buf = vec![0u8; tailguard::wire::ddsketch_max_encoded_len(CAP, CAP)];
                let n = encode_ddsketch(&s, convention, &mut buf).unwrap();
                let (back, _): (
                    SignedSketch<ExponentialMapping, CollapsingLowestStore<CAP>>,
                    _,
                ) = decode_ddsketch(&buf[..n], convention)
                    .unwrap_or_else(|e| panic!("scale {scale} {v:e} {convention:?}: {e:?}"));
                assert_eq!(back.count(), 1002, "scale {scale} {v:e}");
                assert_eq!(back.mapping(), &m);
                // The ends: the negative store holds only −v.
                for (q, want) in [(0.0, -v), (1.0, v.max(1000.0))] {
                    let got = back.quantile(q).unwrap().unwrap();
                    let a = m.relative_accuracy();
                    assert!(
                        (got - want).abs() <= a * want.abs(),
                        "scale {scale} q={q}: {got:e}"
                    );
                }
            }
        }
    }
}
