//! The base-2 exponential mapping of OpenTelemetry's exponential histograms
//! and Prometheus' native histograms, bucket for bucket.

use super::{IndexMapping, Interpolation, MappingError};
use crate::FromRelativeAccuracy;
use core::f64::consts::{LN_2, LOG2_E};

/// OpenTelemetry's base-2 exponential buckets at a fixed scale, bucket for
/// bucket, and Prometheus' native histogram buckets (schema = scale).
///
/// At scale `s` the base is `2^(2^-s)` and bucket `i` covers
/// `(base^i, base^(i+1)]`: **upper-inclusive**, where the log-like mappings'
/// buckets are `[lower, lower·γ)`. The two conventions differ only on the
/// boundaries `base^i` themselves, and of those only the exact powers of two
/// are floats at positive scales (`base^i` is irrational otherwise); at
/// scales `<= 0` every boundary is a power of two. So the index starts from
/// the float's bits, as the specification's reference does, and is exact
/// wherever a boundary is a float:
///
/// * `v = 2^e · (1 + f)` with `e` and `f` read off the bits (subnormals
///   normalised first);
/// * an exact power of two (`f = 0`) is in bucket `e · 2^s − 1` (scales
///   `>= 0`) or `(e − 1) >> −s` (scales `< 0`): the bucket it closes;
/// * otherwise, at scales `<= 0`, `e >> −s`, exactly; at positive scales
///   `e · 2^s + ⌊log2(1 + f) · 2^s⌋`, the fraction through `log1p`;
/// * and where that float lands within 2⁻²⁴ of a whole sub-bucket (its
///   error is below 2⁻³¹), the sub-bucket is settled in integers: the
///   exponent of `(1 + f)^(2^s)`, squared `s` times with 128-bit mantissas
///   rounded down and up, which both bounds agree on unless `1 + f` lies
///   within about 2⁻¹²⁶ of a boundary relatively (no double is known to;
///   the float's answer would stand).
///
/// So every value is in the specification's bucket, the ones within an
/// ulp of an irrational boundary too, where the specification's own
/// `⌊ln(v) · 2^s / ln 2⌋` and a plain `log1p` both err (checked against
/// exact big-integer powers, `tests/exponential_boundaries.rs`). The
/// settling costs nothing on the add path but one comparison: about one
/// value in eight million takes it.
///
/// What upper-inclusive buckets cost: nothing on the add path (the power of
/// two test is a mask on bits already in hand). [`lower_bound`](IndexMapping::lower_bound)
/// returns `base^i`, the *excluded* lower boundary as OpenTelemetry defines
/// it, so for a power of two it maps to the bucket below; a
/// [`Collapsed::bound`](crate::Collapsed::bound) of a power of two is then
/// itself in the collapsed bucket, whose representative is still within α of
/// it (`base^(i−1)·(1+α) = base^i·(1−α)`).
///
/// The representative of bucket `i` is the optimal `base^i · (1 + α)`,
/// `α = tanh(ln(base)/2) = (base − 1)/(base + 1)`, whose error is α at both
/// ends: `(base^i·(1+α) − base^i)/base^i = α` at the open one and
/// `(base^(i+1) − base^i·(1+α))/base^(i+1) = 1 − (1+α)/base = α` at the
/// closed one. So rounding alone can take an answer past α, and the buckets
/// are the specification's: they cannot be narrowed to absorb it as the
/// log-like mappings' are. Instead [`relative_accuracy`](IndexMapping::relative_accuracy)
/// states `α' = α + 2⁻⁴⁶` (1 at the scales where α rounds to 1), a
/// relative 4·10⁻⁸ more at scale 20 and less elsewhere, and, as for every
/// mapping, values in `[min_indexable_value, max_indexable_value]` come
/// back within α' exactly: `|value(index(v)) − v| ≤ α'·v` in real
/// arithmetic on the doubles.
///
/// # Implementation notes: why α' is exact
/// Write `u = 2⁻⁵³` and `b = base`, `B_i = b^i` for the exact bounds.
///
/// 1. *Keys.* At scales `<= 0` they are exact. At positive scales the
///    sub-bucket is `log1p(f)` (libm: within 1 ulp, `2u` relatively) times
///    `2^s · log2 e` (the constant rounded once, `u`), rounded once (`u`): a
///    relative error below `4u` of a number below `2^s`, so its floor is
///    wrong only for a value within `4u` of a bound in `log2` space. In
///    `ln` space: a value with key `i` lies in `[B_i·e^−ε, B_(i+1)·e^ε]`
///    with `ε = 4u · ln 2 < 3u`. (Near a bound the key is then settled
///    exactly; the proof needs only this bound, which exact keys meet.)
/// 2. *α and the centre.* `tanh` (libm: `expm1` and two roundings, within
///    3 ulp) of `ln 2 · 2^−s / 2` (the constant rounded once, a relative
///    `u` that `tanh` does not amplify) is α within a relative `7u`, and
///    `1 + α` is rounded once: the stored centre is `(1 + α)(1 + θ_c)`
///    with `|θ_c| <= 7u · α/(1 + α) + u <= 4.5u`.
/// 3. *Representatives.* [`lower_bound`](IndexMapping::lower_bound) is
///    `exp2` of an exact fraction (libm: within 0.503 ulp, below `2u`)
///    scaled by an exact power of two; at scales `<= 0` it is an exact
///    power of two. [`value`](IndexMapping::value) multiplies it by the
///    centre (`u`). At the bottom of the range the lower bound and the
///    representative may be subnormal, which costs an absolute `2⁻¹⁰⁷⁵`
///    each: relatively `2u` for results above `2⁻¹⁰²³` (positive scales),
///    `4u` for the product above `2⁻¹⁰²⁴` (scales `<= 0`, where the lower
///    bound is exact). In all `value(i) = B_i · (1 + α)(1 + θ)` with
///    `|θ| <= 11u`.
/// 4. So for `v` with key `i`, `|value(i)/v − 1|` is at most
///    `(1 + α)(1 + θ)e^ε − 1` at the open end and
///    `1 − (1 − α)(1 − θ)e^−ε` at the closed one (`(1 + α)/b = 1 − α`):
///    at most `α + 2 · 14u + O(u²) < α + 29u`. The double `α'`, `α + 2⁻⁴⁶`
///    rounded once from the `α` of item 2, is at least
///    `α + 128u − 8u − u·2⁻⁴⁶ > α + 119u`: four times what the bound needs.
///    Two values of one key are at most `b · e^(2ε)` apart, below
///    `(1 + α')/(1 − α') > b · (1 + 2(α' − α))`.
/// 5. At scales −10..=−6 (bases `2^1024` down to `2^64`) α rounds to 1,
///    and α' = 1 holds exactly: the lower bound `B_i` is an exact power of
///    two, the representative exactly `2·B_i`, and every value of the
///    bucket is above `B_i`, so the answer lies in `(0, 2v)`.
///
/// | scale | base | α |
/// |---|---|---|
/// | 3 | 1.0905 | 4.3 % |
/// | 5 | 1.0219 | 1.08 % |
/// | 6 | 1.0109 | 0.54 % |
/// | 8 (Prometheus' finest) | 1.0027 | 0.135 % |
/// | 20 (OpenTelemetry's finest) | 1 + 6.6·10⁻⁷ | 3.3052·10⁻⁷ |
///
/// ```
/// use tailguard::mapping::{ExponentialMapping, IndexMapping};
/// use tailguard::DDSketch;
///
/// let mapping = ExponentialMapping::new(5).expect("a valid scale");
/// assert_eq!(mapping.index(1.0), -1); // (2^(-1/32), 1]: upper-inclusive
/// assert_eq!(mapping.index(1.0f64.next_up()), 0);
/// assert_eq!(mapping.index(2.0), 31);
/// let mut sketch = DDSketch::<ExponentialMapping>::with_mapping(mapping);
/// sketch.add(1500.0)?;
/// # Ok::<(), tailguard::SketchError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ExponentialMapping {
    scale: i32,
    /// `2^s / ln 2`: keys per unit of `ln`.
    scale_factor: f64,
    /// `ln 2 / 2^s`.
    inverse_factor: f64,
    base: f64,
    /// `α'`: α plus the rounding margin (see the implementation notes).
    relative_accuracy: f64,
    /// `1 + α`, α unrounded by the margin: the optimal representative of
    /// a bucket over its lower bound.
    center: f64,
    max_indexable: f64,
}

/// `2^52 − 1`: the mantissa bits.
const MANTISSA: u64 = (1 << 52) - 1;

/// `2⁻⁴⁶`: what the stated relative accuracy adds to α to cover every
/// rounding (see the implementation notes of [`ExponentialMapping`]).
const ROUNDING_MARGIN: f64 = 1.0 / (1u64 << 46) as f64;

impl ExponentialMapping {
    /// The coarsest scale OpenTelemetry defines (base `2^1024`).
    pub const MIN_SCALE: i32 = -10;
    /// The finest scale OpenTelemetry defines (base `2^(2^-20)`).
    pub const MAX_SCALE: i32 = 20;

    /// The mapping at `scale`, or `None` outside
    /// [`MIN_SCALE`](Self::MIN_SCALE)`..=`[`MAX_SCALE`](Self::MAX_SCALE).
    ///
    /// At scales −10 (base `2^1024`, infinite as an `f64`) to −6 (base
    /// `2^64`) the relative accuracy rounds to 1: such mappings index, but
    /// promise no more than an answer between 0 and twice the value.
    pub fn new(scale: i32) -> Option<Self> {
        if !(Self::MIN_SCALE..=Self::MAX_SCALE).contains(&scale) {
            return None;
        }
        // Powers of two: exact.
        let step = libm::scalbn(1.0, scale.wrapping_neg());
        let scale_factor = libm::scalbn(LOG2_E, scale);
        let inverse_factor = libm::scalbn(LN_2, scale.wrapping_neg());
        let base = libm::exp2(step);
        // tanh(ln(base) / 2) = (base − 1) / (base + 1), without the
        // cancellation near base = 1.
        let alpha = libm::tanh(inverse_factor / 2.0);
        let center = 1.0 + alpha;
        // At most 1: where α rounds to 1 (scales <= −6), 1 holds exactly.
        let relative_accuracy = (alpha + ROUNDING_MARGIN).min(1.0);
        Some(Self {
            scale,
            scale_factor,
            inverse_factor,
            base,
            relative_accuracy,
            center,
            max_indexable: f64::MAX / center,
        })
    }

    /// The mapping whose base is `base`, to within 10⁻⁹ of its logarithm:
    /// what a DataDog-format `gamma` of an exact-logarithm mapping names.
    /// `None` if no scale in range has that base.
    ///
    /// ```
    /// use tailguard::mapping::ExponentialMapping;
    /// let m = ExponentialMapping::with_base(2f64.sqrt()).unwrap();
    /// assert_eq!(m.scale(), 1);
    /// assert!(ExponentialMapping::with_base(1.5).is_none());
    /// ```
    pub fn with_base(base: f64) -> Option<Self> {
        if !(base > 1.0 && base.is_finite()) {
            return None;
        }
        // base = 2^(2^-s): s = −log2(log2(base)).
        let t = -libm::log2(libm::log2(base));
        let s = libm::round(t);
        if !(f64::from(Self::MIN_SCALE)..=f64::from(Self::MAX_SCALE)).contains(&s) {
            return None;
        }
        let m = Self::new(s as i32)?;
        let ratio = libm::log(base) / m.inverse_factor;
        // Scale −10's base is infinite: no finite `base` names it.
        ((ratio - 1.0).abs() <= 1e-9 && m.base.is_finite()).then_some(m)
    }

    /// The coarsest scale whose stated relative accuracy (α', see the
    /// type's docs) is at most `relative_accuracy`: scale 6 (α ≈ 0.54 %)
    /// for 1 %, 5 (α ≈ 1.08 %) for 1.1 %.
    ///
    /// # Errors
    /// [`MappingError::InvalidRelativeAccuracy`] unless `0 < α < 1` and some
    /// scale up to 20 (α ≈ 3.3·10⁻⁷) is fine enough.
    ///
    /// ```
    /// use tailguard::mapping::{ExponentialMapping, IndexMapping};
    /// let m = ExponentialMapping::for_relative_accuracy(0.01)?;
    /// assert_eq!(m.scale(), 6);
    /// assert!(m.relative_accuracy() <= 0.01);
    /// # Ok::<(), tailguard::MappingError>(())
    /// ```
    pub fn for_relative_accuracy(relative_accuracy: f64) -> Result<Self, MappingError> {
        let a = relative_accuracy;
        if !(a > 0.0 && a < 1.0) {
            return Err(MappingError::InvalidRelativeAccuracy(a));
        }
        (Self::MIN_SCALE..=Self::MAX_SCALE)
            .filter_map(Self::new)
            .find(|m| m.relative_accuracy <= a)
            .ok_or(MappingError::InvalidRelativeAccuracy(a))
    }

    /// The scale: `2^scale` buckets between consecutive powers of two.
    pub fn scale(&self) -> i32 {
        self.scale
    }

    /// The base `2^(2^-scale)`: each bucket's upper bound over its lower.
    pub fn base(&self) -> f64 {
        self.base
    }
}

/// `(e, f)` with `v = 2^e · (1 + f · 2^-52)`, `f` in `[0, 2^52)`, for a
/// positive finite `v`, subnormals included (their leading bit becomes the
/// implicit one). Zero gives `(-1075, 0)`, which maps below every bucket.
#[inline(always)]
fn normalise(v: f64) -> (i32, u64) {
    let bits = v.to_bits();
    let raw_exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & MANTISSA;
    if raw_exponent != 0 {
        return (raw_exponent.wrapping_sub(1023), fraction);
    }
    // Subnormal: `v = fraction · 2^-1074`, leading bit at `p` in 0..=51.
    let p = 63i32.wrapping_sub(fraction.leading_zeros() as i32);
    let shifted = fraction
        .checked_shl(52u32.wrapping_sub(p as u32))
        .unwrap_or(0);
    (p.wrapping_sub(1074), shifted & MANTISSA)
}

/// How close (in sub-buckets) the float estimate of a sub-bucket must come
/// to a boundary for [`sub_bucket`] to settle it.
const NEAR: f64 = 1.0 / (1u64 << 24) as f64;

/// `⌊log2((1 + f·2⁻⁵²)^(2^s))⌋` exactly, the sub-bucket of a mantissa
/// fraction `f > 0` at scale `s` (1 to 20): `x = 1 + f·2⁻⁵²` is squared `s`
/// times with 128-bit mantissas, once rounded down and once up, and the
/// exponent of `x^(2^s)` is the answer when both bounds agree on it. It
/// is never a power of two (`x` is not one), so that exponent's bucket,
/// `(2^j, 2^(j+1)]`, is the value's. `None` when the bounds straddle a
/// power of two: `x` within about 2⁻¹²⁶ of a boundary relatively, closer
/// than any double is known to come.
fn sub_bucket(f: u64, s: u32) -> Option<i32> {
    let mantissa = u128::from(f | (1 << 52)) << 75;
    let (mut low, mut high) = ((mantissa, 0i32), (mantissa, 0i32));
    for _ in 0..s {
        low = square(low, false);
        high = square(high, true);
    }
    (low.1 == high.1).then_some(low.1)
}

/// `(m · 2^(e − 127))²` as the same normalised pair (`m` in
/// `[2¹²⁷, 2¹²⁸)`), its mantissa rounded down, or up when `up`.
fn square((m, e): (u128, i32), up: bool) -> (u128, i32) {
    const LOW: u128 = u64::MAX as u128;
    let (m1, m0) = (m >> 64, m & LOW);
    let (p00, p01, p11) = (
        m0.wrapping_mul(m0),
        m0.wrapping_mul(m1),
        m1.wrapping_mul(m1),
    );
    // m² = p11·2¹²⁸ + 2·p01·2⁶⁴ + p00; `mid` < 3·2⁶⁴.
    let mid = (p00 >> 64).wrapping_add((p01 & LOW) << 1);
    let lo = (p00 & LOW) | (mid << 64);
    let hi = p11.wrapping_add((p01 >> 64) << 1).wrapping_add(mid >> 64);
    // hi in [2¹²⁶, 2¹²⁸): keep its top 128 bits with the leading one on top.
    let (mut top, exponent, rest) = if hi >> 127 == 1 {
        (hi, e.wrapping_mul(2).wrapping_add(1), lo != 0)
    } else {
        ((hi << 1) | (lo >> 127), e.wrapping_mul(2), lo << 1 != 0)
    };
    if up && rest {
        top = top.wrapping_add(1);
        if top == 0 {
            return (1 << 127, exponent.wrapping_add(1));
        }
    }
    (top, exponent)
}

impl IndexMapping for ExponentialMapping {
    /// Travels in DataDog's format as an exact logarithm of γ = base.
    const INTERPOLATION: Interpolation = Interpolation::None;

    #[inline]
    fn index(&self, value: f64) -> i32 {
        let (e, f) = normalise(value);
        let s = self.scale;
        if s <= 0 {
            let shift = s.unsigned_abs();
            // An exact power of two closes the bucket below its exponent's.
            let e = if f == 0 { e.wrapping_sub(1) } else { e };
            return e.checked_shr(shift).unwrap_or(if e < 0 { -1 } else { 0 });
        }
        let shift = s.unsigned_abs();
        let first = e.wrapping_shl(shift);
        if f == 0 {
            return first.wrapping_sub(1);
        }
        // log2(1 + f) · 2^s, in [0, 2^s): its floor is the sub-bucket.
        let x = (f as f64) * (1.0 / (1u64 << 52) as f64);
        let sub = libm::log1p(x) * self.scale_factor;
        let last = (1i32 << shift).wrapping_sub(1);
        // `as` saturates; the clamp covers rounding up to 2^s.
        let whole = (sub as i32).clamp(0, last);
        // Within 2⁻²⁴ of a boundary (the float is within 2⁻³¹ of the real
        // value at scale 20), settle it exactly: rare, off the fast path.
        let part = sub - f64::from(whole);
        if !(NEAR..=1.0 - NEAR).contains(&part) {
            if let Some(exact) = sub_bucket(f, shift) {
                return first.wrapping_add(exact);
            }
        }
        first.wrapping_add(whole)
    }

    /// `base^index`: the bucket's lower boundary, which OpenTelemetry
    /// excludes (see the module docs). Exact when it is a power of two,
    /// within 0.503 ulp otherwise (a subnormal one rounds once more).
    fn lower_bound(&self, index: i32) -> f64 {
        let s = self.scale;
        if s <= 0 {
            // 2^(index · 2^-s): an integer exponent, scalbn saturates.
            let e = i64::from(index).saturating_mul(1i64 << s.unsigned_abs());
            let e = e.clamp(-2000, 2000) as i32;
            return libm::scalbn(1.0, e);
        }
        let shift = s.unsigned_abs();
        let whole = index >> shift;
        let part = index & ((1i32 << shift).wrapping_sub(1));
        // `part / 2^s` is exact: a power-of-two scaling.
        let fraction = libm::scalbn(f64::from(part), s.wrapping_neg());
        libm::scalbn(libm::exp2(fraction), whole)
    }

    /// `lower_bound(index) · (1 + α)`: the optimal representative, within
    /// α' of the bucket exactly (see the implementation notes).
    #[inline]
    fn value(&self, index: i32) -> f64 {
        self.lower_bound(index) * self.center
    }

    /// `α' = α + 2⁻⁴⁶` (at most 1): the guaranteed relative accuracy, a
    /// rounding margin above the representatives' ideal α.
    fn relative_accuracy(&self) -> f64 {
        self.relative_accuracy
    }

    /// The base `2^(2^-scale)` (infinite at scale −10).
    fn gamma(&self) -> f64 {
        self.base
    }

    /// Always 0: bucket 0 is `(1, base]`.
    fn index_offset(&self) -> f64 {
        0.0
    }

    /// The smallest normal float: subnormals go to the zero bucket, as for
    /// the other mappings ([`index`](Self::index) handles them all the
    /// same, as the specification does).
    fn min_indexable_value(&self) -> f64 {
        f64::MIN_POSITIVE
    }

    /// `f64::MAX / (1 + α)`, so that every representative is finite.
    fn max_indexable_value(&self) -> f64 {
        self.max_indexable
    }
}

impl FromRelativeAccuracy for ExponentialMapping {
    /// [`ExponentialMapping::for_relative_accuracy`].
    fn from_relative_accuracy(relative_accuracy: f64) -> Result<Self, MappingError> {
        Self::for_relative_accuracy(relative_accuracy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use proptest::prelude::*;

    proptest! {
        /// One squaring against the exact 256-bit square: the mantissa
        /// rounded down and up, the leading one on top, the exponent
        /// doubled (plus one when the square reaches 2).
        #[test]
        fn square_brackets_the_exact_square(m in (1u128 << 127)..=u128::MAX, e in -1000i32..1000) {
            let exact = BigUint::from(m).pow(2);
            for up in [false, true] {
                let (top, exponent) = square((m, e), up);
                prop_assert!(top >> 127 == 1);
                // m² · 2^(2e − 254) = top · 2^(exponent − 127), within rounding:
                // scale both to integers at 2^(2e − 254).
                let shift = exponent - 2 * e + 127;
                prop_assert!((0..=129).contains(&shift), "{shift}");
                let got = BigUint::from(top) << shift as usize;
                let ulp = BigUint::from(1u8) << shift as usize;
                if up {
                    prop_assert!(got >= exact && got < exact.clone() + ulp);
                } else {
                    prop_assert!(got <= exact && got + ulp > exact);
                }
            }
        }

        /// At the finest scales, away from boundaries the exact sub-bucket is
        /// the float's, and near them it is one of the float's neighbours.
        #[test]
        fn sub_buckets_agree_with_the_logarithm(f in 1u64..(1 << 52), s in 10u32..=20) {
            let x = (f as f64) * (1.0 / (1u64 << 52) as f64);
            let sub = libm::log1p(x) * libm::scalbn(LOG2_E, s as i32);
            let exact = sub_bucket(f, s).expect("no double this close to a boundary");
            let whole = sub.floor() as i32;
            if (sub - sub.floor()) > 1e-6 && (sub - sub.floor()) < 1.0 - 1e-6 {
                prop_assert_eq!(exact, whole);
            } else {
                prop_assert!((exact - whole).abs() <= 1);
            }
        }
    }

    #[test]
    fn normalise_reads_subnormals() {
        assert_eq!(normalise(1.0), (0, 0));
        assert_eq!(normalise(f64::from_bits(1)), (-1074, 0));
        assert_eq!(normalise(f64::MIN_POSITIVE / 2.0), (-1023, 0));
        assert_eq!(normalise(f64::from_bits(3)), (-1073, 1 << 51));
    }

    #[test]
    fn scales_out_of_range_are_refused() {
        assert!(ExponentialMapping::new(21).is_none());
        assert!(ExponentialMapping::new(-11).is_none());
        assert!(ExponentialMapping::new(-10).unwrap().gamma().is_infinite());
    }
}
