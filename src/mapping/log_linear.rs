//! The integer-only mapping: a value's exponent and the top `k` bits of its
//! mantissa, as one integer.

use super::{build_float, build_float_scaled, IndexMapping, Interpolation, MappingError};
use crate::FromRelativeAccuracy;

/// Buckets `[2^e · (1 + j/2^k), 2^e · (1 + (j+1)/2^k))` keyed
/// `e · 2^k + j + offset`: computed from a float's bits with one shift and
/// one subtraction, and from a `u64` with a leading-zero count and two
/// shifts, without floating-point arithmetic.
///
/// This is DataDog's `LINEAR` interpolation, `⌊2^k · (e + s)⌋` for
/// `v = 2^e · (1 + s)`, with a power-of-two multiplier `2^k`: the key is the
/// float's bit pattern shifted right by `52 − k` (exponent field and top `k`
/// mantissa bits), less a constant. For integers, `e = 63 − leading_zeros`
/// and `j` is the `k` bits below the leading one. hdrhistogram indexes its
/// buckets the same way; the difference is the representative value and
/// its proof.
///
/// ```
/// use tailguard::mapping::{IndexMapping, LogLinearMapping};
///
/// let m = LogLinearMapping::new(0.01)?;
/// assert_eq!(m.bits(), 6); // 64 buckets per power of two
/// assert!(m.relative_accuracy() <= 0.01); // 1/129 ≈ 0.78 %
/// let ns: u64 = 4_000_000;
/// assert_eq!(m.index_u64(ns), Some(m.index(ns as f64)));
/// let v = m.value(m.index(4e6));
/// assert!((v - 4e6).abs() <= m.relative_accuracy() * 4e6);
/// # Ok::<(), tailguard::MappingError>(())
/// ```
///
/// # Accuracy, exactly
/// A bucket's bounds are exact doubles (`j / 2^k` and the power of two are
/// exact), and every value in `[lower, lower · r)` with
/// `r = 1 + 1/(2^k + j)` maps to it, exactly: no rounding decides a key.
/// The widest bucket in relative terms is `j = 0`, `r₀ = 1 + 2^-k`. The
/// representative is `lower · c` with `c = 2r₀ / (1 + r₀)`, the relative
/// centre of that widest bucket, so that for every bucket and every `v` in
/// it, `1 − α' ≤ c / r₀ < value / v ≤ c = 1 + α'` (in reals), with
/// `α' = (r₀ − 1)/(r₀ + 1) = 1 / (2^(k+1) + 1)` (narrower buckets are
/// inside those bounds too: their `r` is smaller).
///
/// In floating point `c` is rounded once (`ĉ = c(1 + δ₁)`) and the product
/// once more (`value = lower · ĉ · (1 + δ₂)`, exactly one rounding: the
/// power of two is folded into `ĉ` first, see `build_float_scaled`), with
/// `|δᵢ| ≤ u = 2⁻⁵³`. So `|value / v − 1| ≤ α' + 2u(1 + α') + u² < α' + 3u`.
/// The stated [`relative_accuracy`](IndexMapping::relative_accuracy) is
/// `fl(1 / (2^(k+1) + 1)) + 8u`, computed: the division is within `u/3` of
/// `α'` (`α' ≤ 1/3`), the sum rounds by at most `u/3` more, so the stated
/// α exceeds `α' + 7u`: the guarantee holds in real arithmetic on the
/// doubles, with room. Two values of one bucket are less than
/// `r₀ = (1 + α')/(1 − α') < (1 + α)/(1 − α)` apart. Keys are exactly
/// monotone ([`key_slack`](IndexMapping::key_slack) is 0): positive floats
/// order as their bits, and integers as their leading one and next bits.
///
/// # Integers above 2⁵³
/// [`index_u64`](IndexMapping::index_u64) truncates: it keys the integer
/// itself, so the bucket holds the exact value and the α bound above holds
/// for every `u64`. [`index`](IndexMapping::index) of `v as f64` keys the
/// rounded float, which for `v > 2^53` may have rounded up across a bucket
/// boundary: the two keys agree whenever `v as f64 == v` exactly (every `v`
/// up to 2⁵³, and above it every `v` with at most 53 significant bits), and
/// otherwise differ by at most one, the float's key being the bucket of the
/// float, within α of it.
///
/// # Which α
/// [`new`](Self::new) picks the smallest `k` (the fewest buckets) whose
/// guarantee is at most the α asked for, and
/// [`relative_accuracy`](IndexMapping::relative_accuracy) reports the
/// guarantee of that `k`, which is tighter: 0.78 % for 1 %, as the
/// power-of-two multiplier only comes in halvings. The bucket count is that
/// of [`LinearMapping`](super::LinearMapping) at the α achieved: 1.44 to
/// 2.9 times the [`LogarithmicMapping`](super::LogarithmicMapping)'s at the
/// α asked for, depending on where α falls between halvings (`k = 6` gives
/// 64 buckets per power of two against 35 for the exact logarithm at 1 %:
/// the default 1024 buckets span a ratio of 2¹⁶, e.g. 64 µs to 4.1 s, before
/// the lowest collapse; give the store 2048 for 1 µs to 10 minutes).
///
/// | α asked | `k` | α achieved | buckets per ×2 |
/// |---|---|---|---|
/// | 5 % | 4 | 3.0 % | 16 |
/// | 2 % | 5 | 1.5 % | 32 |
/// | 1 % | 6 | 0.78 % | 64 |
/// | 0.1 % | 9 | 0.098 % | 512 |
/// | 10⁻⁷ | 23 | 6·10⁻⁸ | 2²³ |
#[derive(Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LogLinearMapping {
    bits: u32,
    index_offset: i32,
    /// `1023 · 2^k − offset`: the float's shifted bits less this are the key.
    float_bias: i64,
    /// `2^k − offset`: `(e << k) + (2^k + j)` less this is the key.
    int_bias: i32,
    relative_accuracy: f64,
    /// `1 + α'`, rounded: the representative over the lower bound.
    center: f64,
    min_indexable: f64,
    max_indexable: f64,
}

/// `2⁻⁵³`, the unit roundoff.
const UNIT_ROUNDOFF: f64 = f64::EPSILON / 2.0;

impl LogLinearMapping {
    /// The most mantissa bits a key takes: `k = 23` guarantees α ≈ 6·10⁻⁸,
    /// below [`MIN_RELATIVE_ACCURACY`](super::MIN_RELATIVE_ACCURACY), and
    /// keeps the keys of `[2^-128, 2^127)` within `i32` at any accepted
    /// offset.
    pub const MAX_BITS: u32 = 23;

    /// The largest index offset magnitude accepted, `2^30`: with
    /// [`MAX_BITS`](Self::MAX_BITS) it leaves every nonzero `u64`
    /// indexable.
    pub const MAX_INDEX_OFFSET: i32 = 1 << 30;

    /// The mapping with the fewest buckets that guarantees relative
    /// accuracy α, index offset 0 (see *Which α*).
    ///
    /// # Errors
    /// [`MappingError::InvalidRelativeAccuracy`] unless
    /// [`MIN_RELATIVE_ACCURACY`](super::MIN_RELATIVE_ACCURACY)` <= α < 1`.
    pub fn new(relative_accuracy: f64) -> Result<Self, MappingError> {
        let a = relative_accuracy;
        if !(super::MIN_RELATIVE_ACCURACY..1.0).contains(&a) {
            return Err(MappingError::InvalidRelativeAccuracy(a));
        }
        let bits = (0..=Self::MAX_BITS)
            .find(|&k| guarantee(k) <= a)
            .ok_or(MappingError::InvalidRelativeAccuracy(a))?;
        Self::with_bits(bits, 0)
    }

    /// The mapping with `2^bits` buckets per power of two and keys shifted
    /// by `index_offset` (bucket `index_offset` starts at 1).
    ///
    /// # Errors
    /// [`MappingError::InvalidGamma`] (with the γ `bits` would give) if
    /// `bits > `[`MAX_BITS`](Self::MAX_BITS);
    /// [`MappingError::InvalidIndexOffset`] if `|index_offset| > `[`MAX_INDEX_OFFSET`](Self::MAX_INDEX_OFFSET).
    pub fn with_bits(bits: u32, index_offset: i32) -> Result<Self, MappingError> {
        if bits > Self::MAX_BITS {
            return Err(MappingError::InvalidGamma(libm::exp2(inverse_power(bits))));
        }
        if index_offset.unsigned_abs() > Self::MAX_INDEX_OFFSET.unsigned_abs() {
            return Err(MappingError::InvalidIndexOffset(f64::from(index_offset)));
        }
        // Exact in i64: 2^23 · 1023 and 2^30 are far from its limits.
        let unit = 1i64.wrapping_shl(bits);
        let offset = i64::from(index_offset);
        let relative_accuracy = guarantee(bits);
        let center = 1.0 + 1.0 / (2.0 * unit as f64 + 1.0);
        // Exponents whose keys all fit i32, within the normal floats.
        let lowest = ceil_div(i64::from(i32::MIN).wrapping_sub(offset), unit).max(-1022);
        let last = unit.wrapping_sub(1);
        let highest = i64::from(i32::MAX)
            .wrapping_sub(offset)
            .wrapping_sub(last)
            .div_euclid(unit);
        let max_indexable = if highest >= 1023 {
            f64::MAX / (1.0 + relative_accuracy)
        } else {
            // The largest double of exponent `highest`.
            libm::scalbn(1.0, highest.wrapping_add(1) as i32).next_down()
        };
        Ok(Self {
            bits,
            index_offset,
            float_bias: unit.wrapping_mul(1023).wrapping_sub(offset),
            int_bias: unit.wrapping_sub(offset) as i32,
            relative_accuracy,
            center,
            min_indexable: libm::scalbn(1.0, lowest as i32),
            max_indexable,
        })
    }

    /// The mapping a DataDog `LINEAR` message with this own γ (Go and Java's
    /// `2^(1/multiplier)`) and index offset describes, if its multiplier is
    /// a power of two.
    ///
    /// # Errors
    /// [`MappingError::InvalidGamma`] unless `γ = 2^(2^-k)` for some `k` in
    /// `0..=`[`MAX_BITS`](Self::MAX_BITS) (within 10⁻⁹ of its logarithm:
    /// other LINEAR mappings decode as [`LinearMapping`](super::LinearMapping));
    /// [`MappingError::InvalidIndexOffset`] unless the offset is an integer
    /// within [`MAX_INDEX_OFFSET`](Self::MAX_INDEX_OFFSET).
    pub fn with_gamma(gamma: f64, index_offset: f64) -> Result<Self, MappingError> {
        if !(gamma > 1.0 && gamma.is_finite()) {
            return Err(MappingError::InvalidGamma(gamma));
        }
        Self::with_multiplier(libm::log2(gamma), gamma, index_offset)
    }

    /// The mapping whose keys are `⌊2^k · (e + s)⌋ + offset`, given
    /// `2^-k` (approximately) as `step`; `gamma` names the wire's value in
    /// errors.
    pub(crate) fn with_multiplier(
        step: f64,
        gamma: f64,
        index_offset: f64,
    ) -> Result<Self, MappingError> {
        let k = libm::round(-libm::log2(step));
        let ok = (0.0..=f64::from(Self::MAX_BITS)).contains(&k)
            && (libm::scalbn(step, k as i32) - 1.0).abs() <= 1e-9;
        if !ok {
            return Err(MappingError::InvalidGamma(gamma));
        }
        let limit = f64::from(Self::MAX_INDEX_OFFSET);
        if !(index_offset.abs() <= limit && libm::trunc(index_offset) == index_offset) {
            return Err(MappingError::InvalidIndexOffset(index_offset));
        }
        Self::with_bits(k as u32, index_offset as i32)
    }

    /// `k`: keys take the top `k` mantissa bits, `2^k` buckets per power of
    /// two.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// `2^-k`: the width of a key in `log2` units (`1 / multiplier`).
    pub(crate) fn step(&self) -> f64 {
        inverse_power(self.bits)
    }
}

/// The α stated for `k` bits: `fl(1 / (2^(k+1) + 1)) + 8u`, at least
/// `α' + 7u` (see [`LogLinearMapping`]'s *Accuracy, exactly*).
fn guarantee(bits: u32) -> f64 {
    let buckets = libm::scalbn(2.0, bits.min(60) as i32);
    1.0 / (buckets + 1.0) + 8.0 * UNIT_ROUNDOFF
}

/// `2^-bits`, exactly (saturating to 0 for absurd `bits`).
fn inverse_power(bits: u32) -> f64 {
    libm::scalbn(1.0, (bits.min(2000) as i32).wrapping_neg())
}

/// `⌈a / b⌉` for `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q.wrapping_add(1)
    }
}

impl IndexMapping for LogLinearMapping {
    const INTERPOLATION: Interpolation = Interpolation::Linear;

    /// The float's bits shifted right by `52 − k` (biased exponent and top
    /// `k` mantissa bits), less `1023 · 2^k − offset`.
    #[inline(always)]
    fn index(&self, value: f64) -> i32 {
        let shift = 52u32.wrapping_sub(self.bits);
        let shifted = value.to_bits().wrapping_shr(shift) as i64;
        shifted.wrapping_sub(self.float_bias) as i32
    }

    /// `(e << k) + (2^k + j) − (2^k − offset)` with `e = 63 − leading
    /// zeros` and `2^k + j` the leading one and the `k` bits after it:
    /// integer operations only. Every nonzero `u64` is indexable (`None`
    /// only for 0).
    #[inline(always)]
    fn index_u64(&self, value: u64) -> Option<i32> {
        if value == 0 {
            return None;
        }
        let zeros = value.leading_zeros();
        let exponent = 63u32.wrapping_sub(zeros);
        // The leading one moved to bit 63, then down to bit k.
        let top = value
            .wrapping_shl(zeros)
            .wrapping_shr(63u32.wrapping_sub(self.bits));
        let key = exponent
            .wrapping_shl(self.bits)
            .wrapping_add(top as u32)
            .cast_signed()
            .wrapping_sub(self.int_bias);
        Some(key)
    }

    /// `2^e · (1 + j / 2^k)`, exactly, for the indexable keys.
    #[inline]
    fn lower_bound(&self, index: i32) -> f64 {
        let (e, s) = self.split(index);
        build_float(e, s)
    }

    /// `lower_bound(index) · (1 + α')`, rounded once: within the stated α
    /// of every value of the bucket (see *Accuracy, exactly*).
    #[inline]
    fn value(&self, index: i32) -> f64 {
        let (e, s) = self.split(index);
        build_float_scaled(e, s, self.center)
    }

    /// `⌊2^e · (2^k + j) · (2^(k+1) + 2) / (2^k · (2^(k+1) + 1))⌋`: the
    /// real `lower · (1 + α')` rounded down, in integers only (64-bit
    /// divisions), saturating at `u64::MAX`.
    #[inline]
    fn value_u64(&self, index: i32) -> u64 {
        let shifted = i64::from(index).wrapping_sub(i64::from(self.index_offset));
        let e = shifted.wrapping_shr(self.bits);
        let mask = 1i64.wrapping_shl(self.bits).wrapping_sub(1);
        let unit = 1u64.wrapping_shl(self.bits);
        // (2^k + j) · (2^(k+1) + 2) < 2^(2k+3) ≤ 2⁴⁹; 2^(k+1) + 1 < 2²⁵.
        let numerator =
            (unit | (shifted & mask) as u64).wrapping_mul(unit.wrapping_mul(2).wrapping_add(2));
        let divisor = unit.wrapping_mul(2) | 1;
        // divisor ≥ 1.
        let whole = numerator.checked_div(divisor).unwrap_or(0);
        let rest = numerator.checked_rem(divisor).unwrap_or(0);
        // value = numerator · 2^t / divisor.
        let t = e.wrapping_sub(i64::from(self.bits));
        let Ok(t) = u32::try_from(t) else {
            // ⌊⌊a / b⌋ / 2^s⌋ = ⌊a / (b · 2^s)⌋.
            let s = u32::try_from(t.unsigned_abs()).unwrap_or(u32::MAX);
            return whole.checked_shr(s).unwrap_or(0);
        };
        // whole ≥ 1 (numerator > divisor): from t = 64 on, past u64.
        if t >= 64 || whole > u64::MAX >> t {
            return u64::MAX;
        }
        // ⌊rest · 2^t / divisor⌋ < 2^t: the high word is below the divisor.
        let high = rest.checked_shr(64u32.wrapping_sub(t)).unwrap_or(0);
        let fraction = crate::wide::div_wide(high, rest.wrapping_shl(t), divisor);
        whole.wrapping_shl(t).saturating_add(fraction)
    }

    fn relative_accuracy(&self) -> f64 {
        self.relative_accuracy
    }

    /// `2^(2^-k)`, as Go and Java write a LINEAR mapping's γ.
    /// (Computed when asked: `exp2` and its table stay out of binaries
    /// that never ask.)
    fn gamma(&self) -> f64 {
        libm::exp2(inverse_power(self.bits))
    }

    fn index_offset(&self) -> f64 {
        f64::from(self.index_offset)
    }

    /// `2^e` for the lowest exponent `e >= −1022` whose keys fit `i32`.
    fn min_indexable_value(&self) -> f64 {
        self.min_indexable
    }

    /// Below `2^(e+1)` for the highest exponent whose keys fit `i32`, and
    /// at most `f64::MAX / (1 + α)`.
    fn max_indexable_value(&self) -> f64 {
        self.max_indexable
    }
}

impl LogLinearMapping {
    /// `(e, j / 2^k)` of a key, exactly; `e` saturated into `±2^11`, where
    /// the float saturates anyway.
    #[inline(always)]
    fn split(&self, index: i32) -> (i32, f64) {
        let shifted = i64::from(index).wrapping_sub(i64::from(self.index_offset));
        let e = shifted.wrapping_shr(self.bits).clamp(-2048, 2048) as i32;
        let mask = 1i64.wrapping_shl(self.bits).wrapping_sub(1);
        // Below 2^23: exact, and the power-of-two scaling too.
        let j = (shifted & mask) as f64;
        (e, j * inverse_power(self.bits))
    }
}

impl core::fmt::Debug for LogLinearMapping {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LogLinearMapping")
            .field("bits", &self.bits)
            .field("index_offset", &self.index_offset)
            .field("relative_accuracy", &self.relative_accuracy)
            .finish()
    }
}

impl FromRelativeAccuracy for LogLinearMapping {
    /// [`LogLinearMapping::new`].
    fn from_relative_accuracy(relative_accuracy: f64) -> Result<Self, MappingError> {
        Self::new(relative_accuracy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_the_guarantee() {
        let k = |a: f64| LogLinearMapping::new(a).unwrap().bits();
        assert_eq!(k(0.999), 0);
        assert_eq!(k(0.05), 4);
        assert_eq!(k(0.01), 6);
        assert_eq!(k(0.001), 9);
        assert_eq!(k(1e-7), 23);
        // The guarantee of `k` is accepted as is, a hair less is not.
        let g = guarantee(6);
        assert_eq!(k(g), 6);
        assert_eq!(k(g.next_down()), 7);
        for a in [0.0, 1.0, 9e-8, f64::NAN, -0.5] {
            assert!(LogLinearMapping::new(a).is_err(), "{a}");
        }
    }

    #[test]
    fn integer_representatives_are_the_real_ones_rounded_down() {
        for bits in [0, 1, 5, 6, 10, LogLinearMapping::MAX_BITS] {
            for offset in [0, -77, 1 << 20] {
                let m = LogLinearMapping::with_bits(bits, offset).unwrap();
                let unit = 1u128 << bits;
                let lo = m.index_u64(1).unwrap();
                let hi = m.index_u64(u64::MAX).unwrap();
                // Every key of 1..=u64::MAX at few bits; a sample of them at many.
                let samples = if cfg!(miri) { 50 } else { 5_000 };
                let stride = ((i64::from(hi) - i64::from(lo)) / samples).max(1) as usize;
                let keys = (lo..=hi).step_by(stride).chain([hi, lo - 3, lo - 1]);
                for key in keys {
                    let shifted = i64::from(key) - i64::from(offset);
                    let (e, j) = (shifted >> bits, (shifted & ((1 << bits) - 1)) as u128);
                    // Exact: (2^k + j)(2^(k+1) + 2) 2^e / (2^k (2^(k+1) + 1)).
                    let num = (unit + j) * (2 * unit + 2);
                    let den = unit * (2 * unit + 1);
                    let want = if e >= 0 {
                        (num << e) / den
                    } else {
                        num / (den << -e)
                    };
                    let want = u64::try_from(want).unwrap_or(u64::MAX);
                    assert_eq!(m.value_u64(key), want, "k {bits} o {offset} key {key}");
                    let float = m.value(key);
                    assert!(
                        (float - want as f64).abs() <= 1.0 + float * 1e-15,
                        "{float} {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_nonzero_u64_is_indexable_at_the_extremes() {
        for bits in [0, 6, LogLinearMapping::MAX_BITS] {
            let limit = LogLinearMapping::MAX_INDEX_OFFSET;
            for o in [-limit, 0, limit] {
                let m = LogLinearMapping::with_bits(bits, o).unwrap();
                assert!(m.min_indexable_value() <= 1.0);
                assert!(m.max_indexable_value() >= 2f64.powi(64), "{bits} {o}");
                let lo = m.index_u64(1).unwrap();
                let hi = m.index_u64(u64::MAX).unwrap();
                assert_eq!(i64::from(lo), i64::from(o));
                let expect = 63 * (1i64 << bits) + (1i64 << bits) - 1 + i64::from(o);
                assert_eq!(i64::from(hi), expect);
                // The range's ends key into i32 without wrapping: their
                // buckets' bounds are where they belong.
                let (a, b) = (m.min_indexable_value(), m.max_indexable_value());
                assert!(m.index(a) <= lo && m.index(b) >= hi);
                assert_eq!(m.lower_bound(m.index(a)), a);
                let top = m.lower_bound(m.index(b));
                assert!(top <= b && b < top * 2.0, "{top} {b}");
                assert!(m.value(m.index(b)).is_finite());
            }
        }
        assert!(LogLinearMapping::with_bits(24, 0).is_err());
        assert!(LogLinearMapping::with_bits(0, (1 << 30) + 1).is_err());
        assert!(LogLinearMapping::with_bits(0, i32::MIN).is_err());
    }
}
