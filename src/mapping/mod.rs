//! Index mappings: how a value becomes a bucket key, and back.
//!
//! A mapping turns a positive value `v` into an integer key
//! `floor(log(v) · multiplier + index_offset)`, where `log` is the natural
//! logarithm or a cheaper approximation of a logarithm, and the multiplier is
//! chosen so that consecutive bucket bounds are never more than
//! `γ = (1 + α) / (1 − α)` apart. The representative value of a bucket,
//! near `lower · (1 + α)`, is then within relative distance α of every value
//! the bucket covers.
//!
//! # Exactly, in floating point
//! Keys and bounds are computed in `f64`, so the values that map to a key
//! are those of the ideal bucket only up to rounding (relatively, a few
//! ulps of the logarithm: up to ~10⁻¹³ at the ends of the range), and the
//! cubic's key is not even monotone at the ulp level. The log-like mappings
//! keep the guarantee exactly all the same: `|value(index(v)) − v| ≤ α · v`
//! holds in real arithmetic on the doubles `v`, `value(…)` and
//! `relative_accuracy()`, for every indexable `v`. They make the buckets
//! narrower than `γ` by a margin `μ` (in `ln` space) that bounds every
//! rounding on the way, and take as representative the bucket's centre,
//! `lower · 2γ'/(1 + γ')` for the narrower `γ'`. The margin is proven below
//! ([`LogLikeMapping`]'s implementation notes) and is about 9·10⁻¹² for the
//! mappings [`new`](LogLikeMapping::new) builds: the bucket count grows by
//! 1.8·10⁻⁹ at α = 1 % (1.8·10⁻⁴ at α = 10⁻⁷), and `gamma()` is below the
//! textbook `(1 + α) / (1 − α)` by a relative 3.5·10⁻¹¹.
//!
//! | mapping | `log` | buckets vs exact | cost of `index` |
//! |---|---|---|---|
//! | [`LogarithmicMapping`] | `ln` (libm) | 1× (memory-optimal) | one `ln` call |
//! | [`CubicMapping`] | exponent + cubic in the mantissa | ≈ 1.01× | a few multiply-adds |
//! | [`LinearMapping`] | exponent + mantissa | ≈ 1.44× | one add |
//! | [`LogLinearMapping`] | exponent + top `k` mantissa bits | 1.44× to 2.9× (α a power of two) | one shift, no float arithmetic |
//!
//! # Which mapping
//! * [`CubicMapping`], the default: the fewest buckets for the least work on
//!   a machine with a double-precision FPU (servers, Cortex-A, Cortex-M7 with
//!   FPv5-D). Its keys and representatives are `f64` arithmetic.
//! * [`LogLinearMapping`] for targets without double-precision hardware
//!   (Cortex-M4F and M33: single precision only; Cortex-M0/M3, RISC-V
//!   `imc`: none), where every `f64` operation is a software routine: its
//!   [`index_u64`](IndexMapping::index_u64) and
//!   [`value_u64`](IndexMapping::value_u64) are integer operations only, so
//!   a [`LatencyWindow`](crate::window::LatencyWindow) or
//!   [`Hedger`](crate::hedge::Hedger) built on it records and refreshes
//!   without floats. It needs more buckets: at α = 1 % (64 a power of two)
//!   give the store 2048 to span 1 µs to 10 minutes, or take α = 2 % (32).
//! * [`LogarithmicMapping`] when memory matters more than the `ln` call.
//!
//! The conventions (floor keys, `γ` and index offset per mapping, relative
//! accuracy derived from them) follow DataDog's Go and Java libraries so that a
//! wire format can interoperate.

mod cubic;
mod exponential;
mod linear;
mod log_linear;
mod logarithmic;

use core::fmt;
use core::marker::PhantomData;

pub use cubic::CubicLog;
pub use exponential::ExponentialMapping;
pub use linear::LinearLog;
pub use log_linear::LogLinearMapping;
pub use logarithmic::NaturalLog;

/// The memory-optimal mapping: exact natural logarithm through `libm`.
pub type LogarithmicMapping = LogLikeMapping<NaturalLog>;
/// The fast mapping: the float's exponent plus a cubic in its mantissa; about
/// 1 % more buckets than [`LogarithmicMapping`], no `ln` call. The default.
pub type CubicMapping = LogLikeMapping<CubicLog>;
/// The fastest mapping: the float's exponent plus its mantissa, linearly;
/// about 44 % more buckets than [`LogarithmicMapping`].
pub type LinearMapping = LogLikeMapping<LinearLog>;

/// How a mapping interpolates between powers of its base, as DataDog's
/// `ddsketch.proto` numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum Interpolation {
    /// Exact logarithm.
    None = 0,
    /// Linear interpolation of `log2` between powers of two.
    Linear = 1,
    /// Quadratic interpolation (not offered by this crate; listed for the wire format).
    Quadratic = 2,
    /// Cubic interpolation of `log2` between powers of two.
    Cubic = 3,
}

/// Maps positive values to integer bucket keys and keys back to values.
///
/// Every implementation keeps the relative-accuracy guarantee exactly: for
/// every `v` in `[min_indexable_value, max_indexable_value]`,
/// `|value(index(v)) − v| ≤ relative_accuracy · v` in real arithmetic on
/// those doubles, with no rounding slack; and two values that share a key
/// are less than `γ = (1 + α) / (1 − α)` apart (`α` the relative accuracy),
/// also exactly. Keys are monotone up to [`key_slack`](Self::key_slack).
///
/// Two mappings are equal when they put every value in the same bucket and
/// represent it by the same value: the log-like mappings compare their γ
/// and index offset (what the wire format carries), not the relative
/// accuracy, which a rebuilt mapping may state differently.
pub trait IndexMapping: Copy + fmt::Debug + PartialEq {
    /// The interpolation, for the wire format.
    const INTERPOLATION: Interpolation;

    /// The key of the bucket that holds `value`.
    ///
    /// `value` must lie in `[min_indexable_value, max_indexable_value]`; the
    /// sketch checks this before calling. Outside that range (NaN and
    /// infinities included) the result is an unspecified `i32`, never a
    /// panic.
    fn index(&self, value: f64) -> i32;

    /// The key of the integer `value`, or `None` when `value` is not in
    /// `[min_indexable_value, max_indexable_value]` (0 always gives `None`):
    /// what [`DDSketch::add_u64`](crate::DDSketch::add_u64) records
    /// latencies in nanoseconds through.
    ///
    /// This default converts to `f64` (rounding to nearest above 2⁵³) and
    /// calls [`index`](Self::index). [`LogLinearMapping`] overrides it with
    /// integer operations only, keying the exact integer.
    #[inline]
    fn index_u64(&self, value: u64) -> Option<i32> {
        let v = u64_to_f64(value);
        (v >= self.min_indexable_value() && v <= self.max_indexable_value()).then(|| self.index(v))
    }

    /// The smallest value that maps to `index`, up to rounding (a few ulps
    /// near 1, relatively ~10⁻¹³ at the ends of the range).
    fn lower_bound(&self, index: i32) -> f64;

    /// The value that represents bucket `index`: within relative accuracy
    /// α of every value that maps to `index`, exactly (see the trait docs).
    /// This default, `lower_bound(index) · (1 + α)`, is right only for a
    /// mapping whose bounds are exact; the log-like mappings compute theirs.
    #[inline]
    fn value(&self, index: i32) -> f64 {
        self.lower_bound(index) * (1.0 + self.relative_accuracy())
    }

    /// The value that represents bucket `index` in whole units (nanoseconds
    /// for a latency), rounded down and saturating at `0` and `u64::MAX`:
    /// what a latency window's cached estimate reports. This default
    /// converts [`value`](Self::value) (`as u64`); [`LogLinearMapping`]
    /// overrides it with integer operations only, the real
    /// `lower · (1 + α')` rounded down. Rounding down adds up to one unit
    /// to the relative error: the answer is within `α·x + 1` of any
    /// integer `x` in the bucket.
    #[inline]
    fn value_u64(&self, index: i32) -> u64 {
        self.value(index) as u64
    }

    /// A relative slack `ρ >= 0` up to which keys are monotone: for
    /// indexable `x <= y`, `index(x) <= index(y · (1 + ρ))` and
    /// `index(x / (1 + ρ)) <= index(y)` (where those are indexable). What
    /// [`DDSketch::rank`](crate::DDSketch::rank) widens its query by, so
    /// that it counts every sample at or below the value. This default, 0,
    /// claims exactly monotone keys.
    fn key_slack(&self) -> f64 {
        0.0
    }

    /// The guaranteed relative accuracy α.
    fn relative_accuracy(&self) -> f64;

    /// The mapping's own γ: the base whose logarithm the mapping approximates
    /// (`multiplier = ln(base) / ln(γ)`), as the wire format stores it.
    fn gamma(&self) -> f64;

    /// The index offset: the key of the bucket whose lower bound is 1,
    /// as the wire format stores it.
    fn index_offset(&self) -> f64;

    /// The smallest positive value that gets its own bucket; smaller
    /// magnitudes are counted in the zero bucket.
    fn min_indexable_value(&self) -> f64;

    /// The largest value that can be added.
    fn max_indexable_value(&self) -> f64;
}

/// The smallest relative accuracy a mapping accepts. Below it the keys of
/// ordinary values would not fit `i32`: at `10⁻⁹` the indexable range would
/// shrink to about `[0.014, 73]`.
pub const MIN_RELATIVE_ACCURACY: f64 = 1e-7;

/// Why a mapping could not be built.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum MappingError {
    /// The relative accuracy must lie in
    /// `[`[`MIN_RELATIVE_ACCURACY`]`, 1)`.
    InvalidRelativeAccuracy(f64),
    /// γ must be finite, greater than 1, and not so close to 1 that the
    /// relative accuracy it implies is below [`MIN_RELATIVE_ACCURACY`].
    InvalidGamma(f64),
    /// The index offset must be finite and small enough that keys fit `i32`.
    InvalidIndexOffset(f64),
}

impl fmt::Display for MappingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRelativeAccuracy(a) => write!(
                f,
                "relative accuracy {a} is not in [1e-7, 1); pick e.g. 0.01 for 1 % error"
            ),
            Self::InvalidGamma(g) => write!(
                f,
                "gamma {g} is not a finite number far enough above 1 (relative accuracy at least 1e-7); derive it from a relative accuracy instead"
            ),
            Self::InvalidIndexOffset(o) => write!(
                f,
                "index offset {o} is not finite or pushes keys out of i32; use 0 unless decoding a foreign sketch"
            ),
        }
    }
}

impl core::error::Error for MappingError {}

/// An approximation of a logarithm, and its exact inverse: what tells the
/// three log-like mappings apart.
///
/// Implemented by the zero-sized markers [`NaturalLog`], [`CubicLog`] and
/// [`LinearLog`]; not meant to be implemented outside this crate, since the
/// accuracy guarantee rests on [`CORRECTING_FACTOR`](Self::CORRECTING_FACTOR)
/// being right.
pub trait LogApproximation: Copy + fmt::Debug + PartialEq {
    /// The interpolation, for the wire format.
    const INTERPOLATION: Interpolation;
    /// `ln` of the base this approximates the logarithm of.
    const LN_BASE: f64;
    /// The infimum over `v` of `d log(v) / d ln(v) / ln(base)`, times `1/ln(base)`:
    /// how much less than the exact logarithm this one can pull two values
    /// apart. Scales the multiplier so the α guarantee holds everywhere.
    const CORRECTING_FACTOR: f64;
    /// Whatever [`scaled_log`](Self::scaled_log) precomputes from the
    /// multiplier (nothing, `()`, for most approximations).
    type Scaled: Copy + fmt::Debug + PartialEq;
    /// Precomputes [`Scaled`](Self::Scaled) for a multiplier.
    fn scale(multiplier: f64) -> Self::Scaled;
    /// `log(v) · multiplier + offset`, the un-floored key of `v`: the hot
    /// path of every add. An approximation may fold the multiplier into its
    /// own arithmetic to shorten the dependency chain.
    #[inline(always)]
    fn scaled_log(v: f64, scaled: &Self::Scaled, multiplier: f64, offset: f64) -> f64 {
        let _ = scaled;
        Self::log(v) * multiplier + offset
    }
    /// Approximate logarithm of a positive normal `v`.
    fn log(v: f64) -> f64;
    /// The exact inverse of [`log`](Self::log).
    fn exp(x: f64) -> f64;
    /// `exp(x) · factor`, rounded exactly as that product: what a bucket's
    /// representative value needs. An approximation that builds its result
    /// from a power of two may fold `factor` into it, off the dependency
    /// chain (scaling by a power of two is exact).
    #[inline(always)]
    fn exp_scaled(x: f64, factor: f64) -> f64 {
        Self::exp(x) * factor
    }
}

/// A mapping built from a [`LogApproximation`]: see the module docs.
///
/// # Implementation notes: why the guarantee is exact
/// Write `u = 2⁻⁵³`, `m` for the multiplier and `o` for the offset, `log`
/// for the approximated logarithm and `t(v) = m · log(v) + o` for the ideal
/// key, computed as `t̃(v)`; `index(v) = ⌊t̃(v)⌋`. Let
/// `R = 1104 + (2|o| + 1) / m`, so that every indexable key, offset and
/// intermediate of the key's computation is below `m · R` in magnitude
/// (`|log v| <= 1100` for every positive normal `v`, in either base). Let
/// `D = CORRECTING_FACTOR · ln(base)` bound `d ln(v) / d log(v)` (1 for
/// `ln` and the linear approximation, 7/10 for the cubic), so that a key's
/// width in `ln` space is at most `w = D / m = CORRECTING_FACTOR · ln(γ_own)`.
///
/// 1. *Keys.* `t̃(v)` is `t(v)` after at most a dozen roundings (`ln`
///    through libm, within 1 ulp; the cubic's coefficients and its Estrin
///    steps; the product by `m` and the sum with `o`), each of an
///    intermediate below `m · R`, so `|t̃ − t| <= 32 u · m · R`: a value
///    that maps to key `k` lies, in `ln` space, within `32 u R` of the ideal
///    bucket `[k, k + 1)` (the ideal `t` grows by at least `m` per unit of
///    `ln v`, as `D <= 1`).
/// 2. *Representatives.* `value(k)` evaluates the inverse of `log` at
///    `(k − o) · (1/m)` (three roundings of a number below `R`: an error
///    below `4 u R` in `ln` space), then the inverse itself (libm's `exp`
///    within 1 ulp; the linear one within 2 roundings; the cubic's
///    Halley-refined polynomial within 4.5·10⁻¹⁶ in `s`, tested densely in
///    `cubic.rs` to be within 2⁻⁴⁸), then one product by the centre factor
///    `c`, and a subnormal lower bound near the bottom of the range loses
///    at most 2⁻⁵¹ relatively: all below `2⁻⁴⁰` together.
/// 3. So with `μ = 64 u R + 2⁻⁴⁰`, every value `v` that maps to `k` and
///    its representative satisfy
///    `ln c − w − μ <= ln(value(k) / v) <= ln c + μ`. The centre is
///    `c = 2γ' / (1 + γ')` with `γ' = e^w`, so that `c − 1 = 1 − c / γ' = α'`
///    and `|value(k) / v − 1| <= c · e^μ − 1 <= α' + c · (e^{2μ} − 1)`: the
///    guaranteed α (the extra μ absorbs the rounding of these formulas
///    themselves). For two values `x <= y` of one key,
///    `ln(y / x) <= w + 2 · 32 u R < ln((1 + α) / (1 − α))`, which is at
///    least `w + 4μ` for that α.
/// 4. *Rank.* [`key_slack`](IndexMapping::key_slack) is `2μ`: twice the
///    error of item 1, so `index(y · (1 + 2μ)) >= index(x)` for `x <= y`;
///    and a value that shares a key with `y · (1 + 2μ)` is still below
///    `y · e^{w + 3μ} < y · γ`.
///
/// [`new`](Self::new) picks γ so that this α is at most the one asked
/// for, and reports the one asked for; [`with_gamma`](Self::with_gamma)
/// reports this α.
#[derive(Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LogLikeMapping<L: LogApproximation> {
    scaled: L::Scaled,
    multiplier: f64,
    /// `1 / multiplier`: `lower_bound` multiplies instead of dividing.
    inverse_multiplier: f64,
    index_offset: f64,
    /// The mapping's own γ, which fixes the multiplier and, with the
    /// offset, every bucket.
    gamma: f64,
    relative_accuracy: f64,
    /// `1 + α'`: the representative of a bucket over its lower bound.
    center: f64,
    min_indexable: f64,
    max_indexable: f64,
    approximation: PhantomData<L>,
}

/// `2⁻⁵³`, the unit roundoff.
const UNIT_ROUNDOFF: f64 = f64::EPSILON / 2.0;

/// Bounds the approximated logarithm, in either base, of every positive
/// normal double (`|ln v| < 710`, `|log2 v| <= 1024`), plus room for the
/// few units the margin's proof adds.
const LOG_REACH: f64 = 1104.0;

/// `2⁻⁴⁰`: what the margin allows, relatively, for the inverse of the
/// approximated logarithm and the final product (see [`LogLikeMapping`]).
const INVERSE_ALLOWANCE: f64 = 1.0 / (1u64 << 40) as f64;

/// The margin `μ`, in `ln` space, that bounds every rounding between a
/// value, its key and the key's representative (see [`LogLikeMapping`]).
fn margin(multiplier: f64, index_offset: f64) -> f64 {
    let reach = LOG_REACH + (2.0 * index_offset.abs() + 1.0) / multiplier;
    64.0 * UNIT_ROUNDOFF * reach + INVERSE_ALLOWANCE
}

/// Two mappings are equal when their buckets and representatives are: same
/// approximation (the type), γ and index offset. The relative accuracy is
/// left out: a mapping rebuilt from its γ states the one γ guarantees.
impl<L: LogApproximation> PartialEq for LogLikeMapping<L> {
    fn eq(&self, other: &Self) -> bool {
        self.gamma.to_bits() == other.gamma.to_bits() && self.index_offset == other.index_offset
    }
}

impl<L: LogApproximation> LogLikeMapping<L> {
    /// A mapping that guarantees relative accuracy `relative_accuracy` (α),
    /// with index offset 0.
    ///
    /// # Errors
    /// [`MappingError::InvalidRelativeAccuracy`] unless
    /// [`MIN_RELATIVE_ACCURACY`]` <= α < 1`.
    pub fn new(relative_accuracy: f64) -> Result<Self, MappingError> {
        let a = relative_accuracy;
        let refused = MappingError::InvalidRelativeAccuracy(a);
        // The negated form also rejects NaN.
        if !(MIN_RELATIVE_ACCURACY..1.0).contains(&a) {
            return Err(refused);
        }
        // The margin for the textbook multiplier; the narrower buckets have a
        // larger multiplier and so a margin no larger.
        let textbook = L::CORRECTING_FACTOR * L::LN_BASE / libm::log1p(2.0 * a / (1.0 - a));
        let mu = margin(textbook, 0.0);
        // The widest half-width `α'` whose guaranteed α, `α' + (1 + α') ·
        // (e^{2μ} − 1)`, is `a`; then the γ of those buckets.
        // `(1 + a) · e^{−2μ} − 1`, without cancellation.
        let half = a * libm::exp(-2.0 * mu) + libm::expm1(-2.0 * mu);
        let mut ln_gamma = libm::log1p(2.0 * half / (1.0 - half)) / L::CORRECTING_FACTOR;
        // Rounding may leave the guarantee a hair above `a`: narrow further,
        // by steps that double from a relative 2⁻⁴⁰.
        let mut step = INVERSE_ALLOWANCE;
        for _ in 0..16 {
            let narrower = Self::build(libm::exp(ln_gamma), 0.0)
                .filter(|m| m.relative_accuracy <= a)
                .map(|m| Self {
                    relative_accuracy: a,
                    ..m
                });
            if let Some(m) = narrower {
                // The range depends on the α stated: rebuild it for `a`.
                return m.with_range().ok_or(refused);
            }
            ln_gamma *= 1.0 - step;
            step *= 2.0;
        }
        Err(refused)
    }

    /// The mapping with the given own γ and index offset, as a wire format
    /// carries them: `multiplier = ln(base) / ln(γ)`, and the relative
    /// accuracy follows from γ.
    ///
    /// # Errors
    /// [`MappingError::InvalidGamma`] unless γ is finite and `> 1`, and far
    /// enough above 1 that the relative accuracy it implies is at least
    /// [`MIN_RELATIVE_ACCURACY`] (less 1 %, so that every mapping's own γ
    /// is taken back), and near enough that the accuracy, with the margin
    /// a fractional offset adds, stays below 1;
    /// [`MappingError::InvalidIndexOffset`] unless the offset is finite and
    /// leaves the indexable range non-empty.
    pub fn with_gamma(gamma: f64, index_offset: f64) -> Result<Self, MappingError> {
        if !(gamma > 1.0 && gamma.is_finite()) {
            return Err(MappingError::InvalidGamma(gamma));
        }
        if !index_offset.is_finite() || index_offset.abs() > f64::from(i32::MAX) / 2.0 {
            return Err(MappingError::InvalidIndexOffset(index_offset));
        }
        let m = Self::build(gamma, index_offset).ok_or(MappingError::InvalidGamma(gamma))?;
        if !(0.99 * MIN_RELATIVE_ACCURACY..1.0).contains(&m.relative_accuracy) {
            return Err(MappingError::InvalidGamma(gamma));
        }
        m.with_range()
            .ok_or(MappingError::InvalidIndexOffset(index_offset))
    }

    /// The mapping of γ and offset, with the relative accuracy they
    /// guarantee (see the implementation notes) and no range yet.
    fn build(gamma: f64, index_offset: f64) -> Option<Self> {
        let ln_gamma = libm::log(gamma);
        let multiplier = L::LN_BASE / ln_gamma;
        // The widest bucket in `ln` space, its half-width as a relative
        // accuracy (`tanh(w / 2)`), and the margin.
        let width = L::CORRECTING_FACTOR * ln_gamma;
        let grown = libm::expm1(width);
        let half = grown / (grown + 2.0);
        let center = 1.0 + half;
        let mu = margin(multiplier, index_offset);
        let relative_accuracy = half + center * libm::expm1(2.0 * mu);
        let valid = multiplier.is_finite() && multiplier > 0.0 && relative_accuracy.is_finite();
        valid.then_some(Self {
            scaled: L::scale(multiplier),
            multiplier,
            inverse_multiplier: 1.0 / multiplier,
            index_offset,
            gamma,
            relative_accuracy,
            center,
            min_indexable: f64::NAN,
            max_indexable: f64::NAN,
            approximation: PhantomData,
        })
    }

    /// This mapping with its indexable range set, or `None` if it is empty.
    fn with_range(self) -> Option<Self> {
        let a = self.relative_accuracy;
        let gamma_exact = (1.0 + a) / (1.0 - a);
        // Keep one base-unit of margin from the i32 key limits, and stay on
        // normal floats so the bit-level logs are valid.
        let lowest = (f64::from(i32::MIN) - self.index_offset) / self.multiplier + 1.0;
        let highest = (f64::from(i32::MAX) - self.index_offset) / self.multiplier - 1.0;
        let min_indexable = (f64::MIN_POSITIVE * gamma_exact).max(L::exp(lowest));
        let max_indexable = (f64::MAX / (1.0 + a)).min(L::exp(highest));
        let valid = min_indexable.is_finite()
            && max_indexable.is_finite()
            && min_indexable < 1.0
            && max_indexable > 1.0;
        valid.then_some(Self {
            min_indexable,
            max_indexable,
            ..self
        })
    }

    /// The approximated logarithm of `lower_bound(index)`.
    #[inline(always)]
    fn exponent(&self, index: i32) -> f64 {
        (f64::from(index) - self.index_offset) * self.inverse_multiplier
    }

    /// Keys per unit of the approximated logarithm.
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// How many buckets cover `[low, high]` (both positive): the capacity a
    /// store needs so that this range never collapses. Returns `None` for an
    /// invalid range.
    ///
    /// ```
    /// use tailguard::mapping::{CubicMapping, LogarithmicMapping};
    /// let exact = LogarithmicMapping::new(0.01).unwrap();
    /// // 1 µs to 100 s in nanoseconds at α = 1 %:
    /// assert_eq!(exact.buckets_for_range(1e3, 1e11), Some(922));
    /// let cubic = CubicMapping::new(0.01).unwrap();
    /// assert_eq!(cubic.buckets_for_range(1e3, 1e11), Some(931));
    /// ```
    pub fn buckets_for_range(&self, low: f64, high: f64) -> Option<u32> {
        let ok = low >= self.min_indexable && high <= self.max_indexable && low <= high;
        let span = i64::from(self.index(high))
            .saturating_sub(i64::from(self.index(low)))
            .saturating_add(1);
        ok.then(|| u32::try_from(span).ok()).flatten()
    }
}

impl<L: LogApproximation> IndexMapping for LogLikeMapping<L> {
    const INTERPOLATION: Interpolation = L::INTERPOLATION;

    #[inline(always)]
    fn index(&self, value: f64) -> i32 {
        floor_key(L::scaled_log(
            value,
            &self.scaled,
            self.multiplier,
            self.index_offset,
        ))
    }

    #[inline]
    fn lower_bound(&self, index: i32) -> f64 {
        L::exp(self.exponent(index))
    }

    /// `lower_bound(index) · c`, bit for bit, with the centre factor `c`
    /// folded into the power of two: within α of the bucket, exactly (see
    /// the implementation notes).
    #[inline]
    fn value(&self, index: i32) -> f64 {
        L::exp_scaled(self.exponent(index), self.center)
    }

    /// `2μ` (see the implementation notes), computed: a few operations.
    fn key_slack(&self) -> f64 {
        2.0 * margin(self.multiplier, self.index_offset)
    }

    fn relative_accuracy(&self) -> f64 {
        self.relative_accuracy
    }

    fn gamma(&self) -> f64 {
        self.gamma
    }

    fn index_offset(&self) -> f64 {
        self.index_offset
    }

    fn min_indexable_value(&self) -> f64 {
        self.min_indexable
    }

    fn max_indexable_value(&self) -> f64 {
        self.max_indexable
    }
}

impl<L: LogApproximation> fmt::Debug for LogLikeMapping<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogLikeMapping")
            .field("interpolation", &L::INTERPOLATION)
            .field("relative_accuracy", &self.relative_accuracy)
            .field("gamma", &self.gamma)
            .field("multiplier", &self.multiplier)
            .field("index_offset", &self.index_offset)
            .finish()
    }
}

/// `value as f64`, bit for bit, cheaper where it matters: below `2^63` the
/// signed conversion rounds the same integer the same way, in one
/// instruction on x86-64 against about six for the unsigned one.
#[inline(always)]
pub(crate) fn u64_to_f64(value: u64) -> f64 {
    match i64::try_from(value) {
        Ok(signed) => signed as f64,
        Err(_) => {
            // At or above 2^63: halve, keeping the lost bit as a sticky low
            // bit (it lies far below the 53 kept, so the rounding is that of
            // `value`), convert signed, and double exactly. Written out, not
            // `value as f64`, which the compiler would merge with the branch
            // above into the unsigned conversion again.
            let half = (value >> 1) | (value & 1);
            (half as i64 as f64) * 2.0
        }
    }
}

/// `1.5 · 2^52`: sums with it lie in `[2^52, 2^53)`, where the ulp is 1.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// `floor(x)` as `i32` for `|x| < 2^31`, the range keys of indexable values
/// lie in; an unspecified `i32` (never a panic) outside it or for NaN.
///
/// Five branch-free instructions on x86-64 against about twenty for a
/// saturating `as` conversion and correction: adding `1.5 · 2^52` rounds `x`
/// to the nearest integer and leaves it, in two's complement, in the low
/// mantissa bits; one comparison turns round-to-nearest into floor.
// The negated comparison is the point: it is the unordered `x < nearest`.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
#[inline(always)]
fn floor_key(x: f64) -> i32 {
    let shifted = x + ROUND;
    let nearest = shifted - ROUND;
    // The low 32 mantissa bits are `nearest mod 2^32`.
    let key = shifted.to_bits() as i32;
    // `!(x >= nearest)` is `x < nearest` for every non-NaN `x`, and as an
    // unordered comparison it is the carry flag of one `ucomisd`, which the
    // subtraction takes with `sbb`: two instructions against four.
    key.wrapping_sub(i32::from(!(x >= nearest)))
}

/// Splits a positive normal float into `(exponent, significand − 1)`, the
/// latter in `[0, 1)`.
#[inline(always)]
fn split_float(v: f64) -> (f64, f64) {
    let (e, mantissa) = split_mantissa(v);
    (e, mantissa * MANTISSA_UNIT)
}

/// `2^-52`: the weight of the mantissa's last bit.
const MANTISSA_UNIT: f64 = 1.0 / (1u64 << 52) as f64;

/// Splits a positive normal float into `(exponent, mantissa)`, the mantissa
/// as the integer `(significand − 1) · 2^52` in `[0, 2^52)`, exactly.
///
/// Cheaper than the significand itself on the add path: one conversion from
/// integer replaces a move back to a float register and a subtraction of 1,
/// and the power of two it leaves out folds exactly into the coefficients.
/// Other inputs (negative, NaN, subnormal) give unspecified numbers, never
/// a panic.
#[inline(always)]
fn split_mantissa(v: f64) -> (f64, f64) {
    const MASK: u64 = (1 << 52) - 1;
    let bits = v.to_bits();
    // A positive float's bits shifted right by 52 are its biased exponent,
    // 0..=2047: the subtraction never wraps.
    let exponent = ((bits >> 52) as i32).wrapping_sub(1023);
    // Below `2^52`, so the conversion is exact (and signed, which is cheaper).
    let mantissa = (bits & MASK) as i64 as f64;
    (f64::from(exponent), mantissa)
}

/// `(1 + s) · 2^exponent` for `s` in `[0, 1]`, any exponent (saturates to 0
/// or infinity).
#[inline]
fn build_float(exponent: i32, s: f64) -> f64 {
    build_float_scaled(exponent, s, 1.0)
}

/// `build_float(exponent, s) · factor` (`factor` in `[1, 2)`), rounded as
/// that product. For a normal power of two, `2^exponent · factor` is exact,
/// so it is formed beside the computation of `s` and costs no latency.
#[inline]
fn build_float_scaled(exponent: i32, s: f64, factor: f64) -> f64 {
    if (-1022..=1023).contains(&exponent) {
        // A normal power of two, built from its bits: exact, and far cheaper
        // than `scalbn`. The biased exponent is in 1..=2046.
        let biased = exponent.wrapping_add(1023) as u64;
        (1.0 + s) * (f64::from_bits(biased << 52) * factor)
    } else {
        // Subnormal or overflowing results: let scalbn round them.
        libm::scalbn(1.0 + s, exponent) * factor
    }
}

/// `x` split into `(floor(x), x − floor(x))`, the integer part saturated
/// into `±2^30` (exponents that large overflow to 0 or infinity anyway). The
/// fraction is in `[0, 1]` (1 only when rounding `x − floor(x)` reaches
/// it), 0 for NaN, so the inverses never evaluate a polynomial far outside
/// its interval.
#[inline(always)]
fn split_integer(x: f64) -> (i32, f64) {
    const LIMIT: f64 = (1 << 30) as f64;
    // Comparisons, not `clamp`: NaN goes to 0 instead of a panic path.
    let x = if (-LIMIT..=LIMIT).contains(&x) {
        x
    } else if x > LIMIT {
        LIMIT
    } else if x < -LIMIT {
        -LIMIT
    } else {
        0.0
    };
    // As in `floor_key`, but the fraction comes straight from the nearest
    // integer, without converting the integer part back to a float.
    let shifted = x + ROUND;
    let nearest = shifted - ROUND;
    let key = shifted.to_bits() as i32;
    // Exact: `x` and the integer nearest to it are within one half.
    let t = x - nearest;
    if t < 0.0 {
        (key.wrapping_sub(1), t + 1.0)
    } else {
        (key, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_key_is_floor_in_range() {
        let check = |x: f64| assert_eq!(f64::from(floor_key(x)), libm::floor(x), "{x}");
        let edge = f64::from(i32::MAX);
        for x in [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.5, -3.5] {
            check(x);
        }
        for x in [1e9 + 0.5, -1e9 - 0.5, edge, edge - 0.5, -edge - 1.0] {
            check(x);
        }
        // Just below and above integers, where rounding and floor differ.
        for k in -1000..1000 {
            let f = libm::floor(f64::from(k) * 1234.567);
            for x in [f, f.next_down(), f.next_up(), f + 0.5, f - 0.5] {
                check(x);
            }
        }
        // Outside the range: some `i32`, no panic.
        for x in [f64::NAN, f64::INFINITY, -f64::INFINITY, 1e300, -1e300] {
            let _ = floor_key(x);
        }
    }

    /// `floor_key` as it was before it took the comparison's carry: keys
    /// must stay bit-identical to it.
    fn reference_floor_key(x: f64) -> i32 {
        let shifted = x + ROUND;
        let nearest = shifted - ROUND;
        (shifted.to_bits() as i32).wrapping_sub(i32::from(x < nearest))
    }

    /// splitmix64: reproducible bit patterns.
    fn mix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn floor_key_matches_the_reference_for_every_number() {
        let check = |x: f64| assert_eq!(floor_key(x), reference_floor_key(x), "{x:e}");
        for x in [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
        ] {
            check(x);
        }
        // Integers, half-integers and their neighbours, up to 2^31 and past
        // (every 61st under Miri, where the whole run takes minutes).
        for k in (-4000..4000).step_by(if cfg!(miri) { 61 } else { 1 }) {
            let base = f64::from(k) * 536_870.911;
            for x in [libm::floor(base), base, libm::floor(base) + 0.5] {
                for y in [x, x.next_up(), x.next_down()] {
                    check(y);
                }
            }
        }
        // Any bit pattern but NaN's (NaN gives some `i32` either way).
        let mut state = 7;
        let n = if cfg!(miri) { 1_000 } else { 1_000_000 };
        for _ in 0..n {
            let x = f64::from_bits(mix(&mut state));
            if !x.is_nan() {
                check(x);
            }
        }
    }

    /// `index` against the reference arithmetic: the mapping's scaled log
    /// floored by `reference_floor_key`, over the ends of the indexable
    /// range, powers of two, bucket bounds and their neighbours, and random
    /// indexable bit patterns.
    fn keys_match_the_reference<L: LogApproximation>(m: LogLikeMapping<L>) {
        let reference =
            |v: f64| reference_floor_key(L::scaled_log(v, &m.scaled, m.multiplier, m.index_offset));
        let (lo, hi) = (m.min_indexable, m.max_indexable);
        let check = |v: f64| {
            if (lo..=hi).contains(&v) {
                assert_eq!(m.index(v), reference(v), "{v:e} in {m:?}");
            }
        };
        for v in [
            lo,
            lo.next_up(),
            hi,
            hi.next_down(),
            1.0,
            1.0f64.next_down(),
        ] {
            check(v);
        }
        // Miri interprets every float operation: a sample of the sweeps there.
        for e in (-1022..=1023).step_by(if cfg!(miri) { 97 } else { 1 }) {
            let p = libm::scalbn(1.0, e);
            for v in [p, p.next_up(), p.next_down()] {
                check(v);
            }
        }
        let (first, last) = (m.index(lo), m.index(hi));
        let keys = if cfg!(miri) { 50 } else { 20_000 };
        let step = usize::try_from((i64::from(last) - i64::from(first)) / keys).unwrap_or(1);
        for k in (first..=last).step_by(step.max(1)) {
            let b = m.lower_bound(k);
            for v in [b, b.next_up(), b.next_down(), m.value(k)] {
                check(v);
            }
        }
        let (low, high) = (lo.to_bits(), hi.to_bits());
        let mut state = 11;
        for _ in 0..if cfg!(miri) { 50 } else { 200_000 } {
            check(f64::from_bits(low + mix(&mut state) % (high - low + 1)));
        }
    }

    #[test]
    fn keys_are_bit_identical_to_the_reference() {
        for a in [1e-7, 0.001, 0.01, 0.05, 0.5] {
            keys_match_the_reference(CubicMapping::new(a).unwrap());
            keys_match_the_reference(LinearMapping::new(a).unwrap());
            keys_match_the_reference(LogarithmicMapping::new(a).unwrap());
        }
        for o in [-1e6, -0.5, 0.25, 7.0, 3e5] {
            keys_match_the_reference(CubicMapping::with_gamma(1.02, o).unwrap());
            keys_match_the_reference(LinearMapping::with_gamma(1.05, o).unwrap());
        }
    }

    #[test]
    fn u64_conversion_is_bit_identical() {
        let cubic = CubicMapping::new(0.01).unwrap();
        let linear = LinearMapping::new(0.02).unwrap();
        let exact = LogarithmicMapping::new(0.01).unwrap();
        let shifted = CubicMapping::with_gamma(1.5, -20.0).unwrap();
        // The float mappings' keys of integers, against the conversion by `as`.
        fn key<M: IndexMapping>(m: &M, v: u64) {
            let f = v as f64;
            let (lo, hi) = (m.min_indexable_value(), m.max_indexable_value());
            let expected = (f >= lo && f <= hi).then(|| m.index(f));
            assert_eq!(m.index_u64(v), expected, "{v}");
        }
        let check = |v: u64| {
            assert_eq!(u64_to_f64(v).to_bits(), (v as f64).to_bits(), "{v}");
            key(&cubic, v);
            key(&linear, v);
            key(&exact, v);
            key(&shifted, v);
        };
        for v in [0, 1, 2, 3, u64::MAX, i64::MAX as u64] {
            check(v);
        }
        for k in 0..64 {
            let p = 1u64 << k;
            for d in 0..=3 {
                check(p.wrapping_add(d));
                check(p.wrapping_sub(d));
            }
        }
        // Around 2^63, where the conversion changes, and below 2^64, where
        // it rounds up to 2^64; ties to even on both sides of 2^53.
        for d in (0..=2048).step_by(if cfg!(miri) { 31 } else { 1 }) {
            for v in [(1 << 63) + d, (1 << 63) - d, u64::MAX - d] {
                check(v);
            }
            for v in [(1 << 53) + d, (1 << 54) + d, (1 << 62) + (d << 8)] {
                check(v);
            }
        }
        let mut state = 3;
        for _ in 0..if cfg!(miri) { 1_000 } else { 100_000 } {
            let v = mix(&mut state);
            check(v);
            check(v >> (mix(&mut state) % 64));
        }
    }

    #[test]
    fn split_integer_keeps_the_fraction_in_the_unit_interval() {
        assert_eq!(split_integer(2.25), (2, 0.25));
        assert_eq!(split_integer(-2.25), (-3, 0.75));
        assert_eq!(split_integer(-0.0), (0, 0.0));
        let limit = 1 << 30;
        assert_eq!(split_integer(f64::NAN), (0, 0.0));
        assert_eq!(split_integer(f64::INFINITY), (limit, 0.0));
        assert_eq!(split_integer(-1e300), (-limit, 0.0));
        for i in -2000..2000 {
            let x = f64::from(i) * 0.7311;
            let (e, t) = split_integer(x);
            assert!((0.0..1.0).contains(&t) && f64::from(e) + t == x, "{x}");
            assert_eq!(f64::from(e), libm::floor(x), "{x}");
        }
    }

    #[test]
    fn rejects_invalid_configuration() {
        for a in [0.0, 1.0, -0.1, f64::NAN, f64::INFINITY, 1e-300] {
            assert!(CubicMapping::new(a).is_err(), "{a}");
        }
        assert_eq!(
            CubicMapping::with_gamma(1.0, 0.0),
            Err(MappingError::InvalidGamma(1.0))
        );
        assert!(CubicMapping::with_gamma(1.02, f64::NAN).is_err());
        assert!(CubicMapping::with_gamma(1.02, 3e9).is_err());
    }

    fn round_trip<L: LogApproximation>(m: LogLikeMapping<L>) {
        let again = LogLikeMapping::<L>::with_gamma(m.gamma(), m.index_offset()).unwrap();
        assert_eq!(again, m);
        assert_eq!(again.multiplier().to_bits(), m.multiplier().to_bits());
        assert_eq!(again.center.to_bits(), m.center.to_bits());
        // It states the α its γ guarantees: at most the one asked for.
        assert!(again.relative_accuracy() <= m.relative_accuracy());
        assert!(again.relative_accuracy() >= m.relative_accuracy() * (1.0 - 1e-8));
    }

    #[test]
    fn gamma_and_offset_rebuild_the_same_mapping() {
        for a in [0.001, 0.01, 0.05, 0.5] {
            round_trip(LogarithmicMapping::new(a).unwrap());
            round_trip(CubicMapping::new(a).unwrap());
            round_trip(LinearMapping::new(a).unwrap());
        }
    }

    #[test]
    fn exact_mapping_gamma_is_the_textbook_one() {
        // Narrower by the margin that makes the guarantee exact.
        let m = LogarithmicMapping::new(0.01).unwrap();
        assert!(m.gamma() < 1.01 / 0.99);
        assert!((m.gamma() - 1.01 / 0.99).abs() < 1e-9);
        assert_eq!(m.relative_accuracy(), 0.01);
    }
}
