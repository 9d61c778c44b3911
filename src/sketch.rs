//! The DDSketch: a quantile sketch with a relative-error guarantee.

use crate::mapping::{CubicMapping, IndexMapping, MappingError};
use crate::store::{CollapsingLowestStore, NoStore, Store, StoreCollapse};
use core::fmt;

/// A DDSketch of `f64` samples (Masson, Rim & Lee, PVLDB 2019) in fixed
/// memory.
///
/// * `M` maps values to bucket keys: [`CubicMapping`] (default),
///   [`LogarithmicMapping`](crate::mapping::LogarithmicMapping),
///   [`LinearMapping`](crate::mapping::LinearMapping), or
///   [`LogLinearMapping`](crate::mapping::LogLinearMapping) for integer
///   samples without float arithmetic ([`add_u64`](Self::add_u64)).
/// * `P` stores positive values: [`CollapsingLowestStore<1024>`] by default,
///   which covers a dynamic range of `2^(1024 / 35)` ≈ 6·10⁸ (1 µs to
///   10 minutes in nanoseconds) at α = 1 % before it collapses.
/// * `N` stores negative values, keyed on `−v`: [`NoStore`] by default, so
///   the default sketch rejects negative values and takes 4 KiB plus 200 bytes;
///   use [`SignedSketch`] for data of both signs.
///
/// Zero, and magnitudes below the mapping's
/// [`min_indexable_value`](IndexMapping::min_indexable_value) (≈ 2·10⁻³⁰⁸
/// at α = 1 %, subnormals and `-0.0` included), are counted in a zero
/// bucket and answered as 0 (clamped into `[min, max]` like every answer:
/// the smallest sample itself when no sample is 0 or negative), without an
/// error. That limit rises as α
/// shrinks, since the keys must fit `i32`: at α = 10⁻⁷ it is 8.7·10⁻¹⁸⁷ for
/// the logarithmic mapping, 4.3·10⁻¹⁸⁵ for the cubic, 1.1·10⁻¹²⁹ for the
/// linear and 8.6·10⁻⁷⁸ for the log-linear (and the largest value falls
/// alike: see [`SketchError::ValueOutOfRange`]). A sketch without a negative store refuses every negative
/// value, however small. Every sketch takes `-0.0` as `0.0` (also in
/// [`min`](Self::min) and [`max`](Self::max), so that they do not depend on
/// the order of the adds).
///
/// # Accuracy
/// For every `q`, [`quantile(q)`](Self::quantile) returns a value `x̂`
/// within relative distance α of the exact lower quantile
/// `x = sorted[⌊q·(n−1)⌋]` (the product `q·(n−1)` taken in `f64`, as
/// `(q * (n − 1) as f64) as u64`: a `q` just below `1/3` of 4 samples is
/// rank 1): `|x̂ − x| ≤ α·|x|` exactly, in real arithmetic
/// on the doubles `x̂`, `x` and α (`mapping().relative_accuracy()`), with
/// no rounding slack (the log-like mappings' buckets are narrower than `γ`
/// by a margin that covers every rounding, see
/// [`LogLikeMapping`](crate::mapping::LogLikeMapping); OpenTelemetry's
/// fixed buckets state an α that margin above theirs, see
/// [`ExponentialMapping`](crate::mapping::ExponentialMapping)). The exceptions are
/// documented: `x` in the zero bucket is answered 0 (or the minimum, when
/// that is above 0), and after a collapse
/// of the lowest buckets, quantiles whose exact value lies at or above
/// [`collapse`](Self::collapse)`().bound` keep the guarantee and those below
/// it may be over-estimated by any amount, and under-estimated by α at most
/// (the edge bucket holds its own values too); after a collapse of the
/// highest, the mirror image. Answers are clamped into
/// the exact `[min, max]`.
///
/// # Example
/// ```
/// use tailguard::DDSketch;
///
/// let mut sketch = DDSketch::new(0.01)?; // α = 1 %, 4 KiB, cubic mapping
/// for latency_ns in 1_000..=100_000u32 {
///     sketch.add(f64::from(latency_ns))?; // a few ns each, no allocation
/// }
/// let p99 = sketch.quantile(0.99)?.expect("not empty");
/// assert!((p99 - 99_010.0).abs() <= 0.01 * 99_010.0);
/// # Ok::<(), tailguard::SketchError>(())
/// ```
#[derive(Clone)]
pub struct DDSketch<M = CubicMapping, P = CollapsingLowestStore<1024>, N = NoStore> {
    mapping: M,
    /// The values an add takes by its short path: indexable and within
    /// `[min, max]`, so that only the store and the sum change. Such values
    /// are positive, and positive floats order as their bits: their bits
    /// are the interval `inner_low .. inner_low + inner_span`, one
    /// comparison (see `inner`), re-derived whenever `min` or `max` change.
    inner_low: u64,
    inner_span: u64,
    positive: P,
    negative: N,
    zero_count: u64,
    min: f64,
    max: f64,
    sum: f64,
    /// Minimum, maximum and sum of the samples [`add_u64`](Self::add_u64)
    /// took, in integers: that path does no float arithmetic, and the f64
    /// fields above are combined with these when read.
    integers: Integers,
}

/// Exact minimum, maximum and 128-bit sum of integer samples.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Integers {
    /// `u64::MAX` and 0 when empty: `min > max` says no sample.
    min: u64,
    max: u64,
    /// The sum's low and high 64 bits (two `u64`s rather than a `u128`,
    /// whose 16-byte alignment would pad the sketch). The high word counts
    /// carries, one at most per sample: it cannot overflow.
    sum_low: u64,
    sum_high: u64,
}

impl Integers {
    const EMPTY: Self = Self {
        min: u64::MAX,
        max: 0,
        sum_low: 0,
        sum_high: 0,
    };

    #[inline(always)]
    fn note(&mut self, value: u64) {
        if value < self.min {
            self.min = value;
        }
        if value > self.max {
            self.max = value;
        }
        let (low, carry) = self.sum_low.overflowing_add(value);
        self.sum_low = low;
        self.sum_high = self.sum_high.wrapping_add(u64::from(carry));
    }

    fn merge(&mut self, other: &Self) {
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        let (low, carry) = self.sum_low.overflowing_add(other.sum_low);
        self.sum_low = low;
        // Each high word is below the number of samples: no overflow.
        self.sum_high = self
            .sum_high
            .saturating_add(other.sum_high)
            .saturating_add(u64::from(carry));
    }

    /// `(min, max)` as floats (rounded to nearest above 2^53), if any
    /// sample was noted.
    fn extremes(&self) -> Option<(f64, f64)> {
        (self.min <= self.max).then_some((self.min as f64, self.max as f64))
    }

    /// The sum, rounded once to a float.
    fn sum(&self) -> f64 {
        ((u128::from(self.sum_high) << 64) | u128::from(self.sum_low)) as f64
    }
}

/// A sketch that takes values of both signs: the same store type for both.
pub type SignedSketch<M = CubicMapping, S = CollapsingLowestStore<1024>> = DDSketch<M, S, S>;

/// Why a sketch operation could not be carried out.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SketchError {
    /// The value was NaN; nothing was added.
    NotANumber,
    /// The value's magnitude exceeds the mapping's
    /// [`max_indexable_value`](IndexMapping::max_indexable_value) (≈ 1.7·10³⁰⁸
    /// at α = 1 %, less at finer accuracies), or is infinite; nothing was
    /// added.
    ValueOutOfRange(f64),
    /// The value was negative and the sketch has no negative store
    /// ([`NoStore`]); nothing was added. Use [`SignedSketch`] for signed data.
    NegativeValue(f64),
    /// The quantile was NaN or outside `[0, 1]`.
    InvalidQuantile(f64),
    /// The two sketches use different mappings, so their buckets do not
    /// line up; nothing was merged.
    MappingMismatch,
    /// The mapping could not be built.
    Mapping(MappingError),
}

impl fmt::Display for SketchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotANumber => f.write_str("the value is NaN; filter NaNs before adding"),
            Self::ValueOutOfRange(v) => write!(
                f,
                "the value {v} is beyond the largest indexable magnitude; clamp it or use a larger relative accuracy"
            ),
            Self::NegativeValue(v) => write!(
                f,
                "the value {v} is negative and this sketch has no negative store; use SignedSketch"
            ),
            Self::InvalidQuantile(q) => write!(f, "the quantile {q} is not in [0, 1]"),
            Self::MappingMismatch => f.write_str(
                "the sketches use different index mappings; merge only sketches built with the same mapping",
            ),
            Self::Mapping(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for SketchError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Mapping(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MappingError> for SketchError {
    fn from(e: MappingError) -> Self {
        Self::Mapping(e)
    }
}

/// What collapsing has cost one of the sketch's stores.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Collapsed {
    /// Samples counted in the collapsed bucket although they belonged to
    /// another one.
    pub samples: u64,
    /// The magnitude that separates exact buckets from the collapsed one:
    /// for a collapsing-lowest store, quantiles whose exact magnitude is
    /// `>= bound` keep the α guarantee and smaller ones may be
    /// over-estimated by any amount (under-estimated by α at most: the
    /// edge bucket also holds values of its own); for a collapsing-highest
    /// store, magnitudes `< bound` keep it and larger ones may be
    /// under-estimated by any amount (over-estimated by α at most).
    pub bound: f64,
}

impl DDSketch {
    /// An empty default sketch (cubic mapping, 1024 collapsing-lowest
    /// buckets, no negative values) with relative accuracy α.
    ///
    /// # Errors
    /// [`SketchError::Mapping`] if α is not in `[1e-7, 1)`
    /// ([`MIN_RELATIVE_ACCURACY`](crate::mapping::MIN_RELATIVE_ACCURACY));
    /// [`ExponentialMapping`](crate::mapping::ExponentialMapping) needs
    /// 3.30519·10⁻⁷ at least (its finest scale, 20).
    pub fn new(relative_accuracy: f64) -> Result<Self, SketchError> {
        Self::with_accuracy(relative_accuracy)
    }
}

impl<M: IndexMapping, P: Store, N: Store> DDSketch<M, P, N> {
    /// An empty sketch of any configuration with relative accuracy α; name
    /// the type, e.g. `let s: SignedSketch = SignedSketch::with_accuracy(0.01)?;`.
    ///
    /// # Errors
    /// [`SketchError::Mapping`] if α is not in `[1e-7, 1)`
    /// ([`MIN_RELATIVE_ACCURACY`](crate::mapping::MIN_RELATIVE_ACCURACY));
    /// [`ExponentialMapping`](crate::mapping::ExponentialMapping) needs
    /// 3.30519·10⁻⁷ at least (its finest scale, 20).
    pub fn with_accuracy(relative_accuracy: f64) -> Result<Self, SketchError>
    where
        M: FromRelativeAccuracy,
    {
        Ok(Self::with_mapping(M::from_relative_accuracy(
            relative_accuracy,
        )?))
    }

    /// An empty sketch over a given mapping.
    // One copy on 32-bit targets, where flash is scarce (a window makes
    // four); inlined at the compiler's choice elsewhere.
    #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
    pub fn with_mapping(mapping: M) -> Self {
        // A positive store that holds nothing would take positive values
        // with `Ok` and count none of them: refused when the type is built.
        const {
            assert!(
                P::CAPACITY > 0,
                "the positive store must hold buckets (NoStore is for the negative side)"
            )
        };
        let mut sketch = Self {
            mapping,
            inner_low: 0,
            inner_span: 0,
            positive: P::default(),
            negative: N::default(),
            zero_count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
            integers: Integers::EMPTY,
        };
        sketch.set_inner();
        sketch
    }

    /// Adds one sample.
    ///
    /// A value between the smallest and the largest so far (the common
    /// case) changes only its bucket and the sum: one range test covers
    /// both bounds (about 46 instructions a value on x86-64). A new minimum
    /// or maximum takes a longer path, about 20 instructions more: a stream
    /// that only rises pays that on every value.
    ///
    /// # Errors
    /// [`NotANumber`](SketchError::NotANumber),
    /// [`ValueOutOfRange`](SketchError::ValueOutOfRange) (±infinity
    /// included) or [`NegativeValue`](SketchError::NegativeValue) (any
    /// value below zero, subnormals included, when the sketch has no
    /// negative store); the sketch is unchanged.
    #[inline]
    pub fn add(&mut self, value: f64) -> Result<(), SketchError> {
        self.insert(value, 1)
    }

    /// Adds one sample given as an integer — a latency in nanoseconds, say —
    /// through the mapping's [`index_u64`](IndexMapping::index_u64).
    ///
    /// With [`LogLinearMapping`](crate::LogLinearMapping) no float
    /// arithmetic runs: the key comes from a leading-zero count and shifts,
    /// and the minimum, maximum and sum are kept in integers (exact, the sum
    /// in 128 bits) and combined with the float ones when read. On a
    /// single-precision FPU (Cortex-M4F) that avoids every software
    /// double-precision routine; on x86-64 it costs about what
    /// hdrhistogram's `record` does. Other mappings convert to `f64` and
    /// index that.
    ///
    /// The sample is `value` exactly: [`min`](Self::min) and
    /// [`max`](Self::max) report it rounded to the nearest `f64` (exact up
    /// to 2⁵³), and the α guarantee holds for the integer itself (see
    /// *Integers above 2⁵³* in [`LogLinearMapping`](crate::LogLinearMapping)).
    ///
    /// ```
    /// use tailguard::{DDSketch, LogLinearMapping};
    ///
    /// let mut s = DDSketch::<LogLinearMapping>::with_accuracy(0.01)?;
    /// for ns in [1_200u64, 0, 5_000_000, u64::MAX] {
    ///     s.add_u64(ns)?;
    /// }
    /// assert_eq!((s.count(), s.zero_count()), (4, 1));
    /// assert_eq!(s.max(), Some(u64::MAX as f64));
    /// # Ok::<(), tailguard::SketchError>(())
    /// ```
    ///
    /// # Errors
    /// [`ValueOutOfRange`](SketchError::ValueOutOfRange) if the mapping
    /// cannot index `value` (never for [`LogLinearMapping`](crate::LogLinearMapping),
    /// which indexes every `u64`); the sketch is unchanged. 0, and values
    /// below the mapping's smallest indexable one, go to the zero bucket.
    // Always inlined on 64-bit targets, where a loop of adds keeps the
    // sketch's fields in registers (when compared: 43 instructions a value
    // against 61 as a call); on 32-bit targets (microcontrollers, where flash is scarce)
    // the compiler decides: a window's two call sites cost 1 KiB inlined.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    pub fn add_u64(&mut self, value: u64) -> Result<(), SketchError> {
        match self.mapping.index_u64(value) {
            Some(key) => self.positive.add(key, 1),
            None => self.add_u64_unindexed(value)?,
        }
        self.integers.note(value);
        Ok(())
    }

    /// 0, and what the mapping does not index. For a mapping whose
    /// `index_u64` returns `None` only for 0 (inlined), the compiler drops
    /// the float conversion below from the add path.
    #[inline(always)]
    fn add_u64_unindexed(&mut self, value: u64) -> Result<(), SketchError> {
        if value != 0 {
            let v = value as f64;
            if v >= self.mapping.min_indexable_value() {
                return Err(SketchError::ValueOutOfRange(v));
            }
        }
        self.zero_count = self.zero_count.saturating_add(1);
        Ok(())
    }

    /// Adds every value of `values`, with exactly the result of calling
    /// [`add`](Self::add) on each in turn, and as fast: the add path is
    /// inlined whole and makes no call, so a loop of `add`s compiles to the
    /// same code.
    ///
    /// ```
    /// # use tailguard::{DDSketch, SketchError};
    /// let mut s = DDSketch::new(0.01)?;
    /// s.add_all(&[3.0, 1.0, 2.0]).map_err(|(_, e)| e)?;
    /// assert_eq!(s.count(), 3);
    /// // The first value `add` would refuse stops the batch.
    /// assert_eq!(s.add_all(&[4.0, f64::NAN, 5.0]), Err((1, SketchError::NotANumber)));
    /// assert_eq!(s.count(), 4);
    /// # Ok::<(), SketchError>(())
    /// ```
    ///
    /// # Errors
    /// At the first value that `add` would refuse: its index and the error.
    /// The values before it were added, the rest were not.
    pub fn add_all(&mut self, values: &[f64]) -> Result<(), (usize, SketchError)> {
        values
            .iter()
            .enumerate()
            .try_for_each(|(i, &value)| self.insert(value, 1).map_err(|e| (i, e)))
    }

    /// Adds `weight` samples of the same value. A weight of 0 adds nothing,
    /// but the value is checked as [`add`](Self::add) checks it.
    ///
    /// # Errors
    /// As [`add`](Self::add), whatever the weight.
    #[inline]
    pub fn add_weighted(&mut self, value: f64, weight: u32) -> Result<(), SketchError> {
        if weight == 0 {
            return self.check(value);
        }
        self.insert(value, weight)
    }

    /// What [`add`](Self::add) would answer for `value`, without adding it.
    fn check(&self, value: f64) -> Result<(), SketchError> {
        if value.is_nan() {
            Err(SketchError::NotANumber)
        } else if value.abs() > self.mapping.max_indexable_value() {
            Err(SketchError::ValueOutOfRange(value))
        } else if value < 0.0 && N::CAPACITY == 0 {
            Err(SketchError::NegativeValue(value))
        } else {
            Ok(())
        }
    }

    #[inline(always)]
    fn insert(&mut self, value: f64, weight: u32) -> Result<(), SketchError> {
        if !self.inner(value) {
            if !self.indexable(value) {
                return self.insert_other(value, weight);
            }
            // A new minimum or maximum. `value` is positive, so these
            // comparisons give what `note`'s do (the same value when equal),
            // without branches.
            self.min = if self.min < value { self.min } else { value };
            self.max = if self.max > value { self.max } else { value };
            self.set_inner();
        }
        // One store add for both cases: its code is inlined once, not twice.
        self.positive.add(self.mapping.index(value), weight);
        self.sum += value * f64::from(weight);
        Ok(())
    }

    /// Whether `value` is indexable and within `[min, max]`: the common case,
    /// in one integer comparison (see `inner_low`). Negative floats (`-0.0`
    /// included) and NaNs have bits above every positive value's, and
    /// smaller ones wrap around to above the interval.
    #[inline(always)]
    fn inner(&self, value: f64) -> bool {
        value.to_bits().wrapping_sub(self.inner_low) < self.inner_span
    }

    /// Whether `value` is a positive value the mapping indexes (NaN is not).
    #[inline(always)]
    fn indexable(&self, value: f64) -> bool {
        value >= self.mapping.min_indexable_value() && value <= self.mapping.max_indexable_value()
    }

    /// Derives `inner_low` and `inner_span` from `min` and `max`: what every
    /// change of either must call.
    #[inline(always)]
    fn set_inner(&mut self) {
        let low = self.mapping.min_indexable_value().to_bits();
        let high = self.mapping.max_indexable_value().to_bits();
        // Compared as signed integers, floats order as their bits when
        // positive, and negative ones (`-0.0` included) are below every
        // positive one: so a negative minimum leaves `low`, and a negative
        // maximum (`-inf` when empty) makes `to` negative, the range empty.
        let from = (low as i64).max(self.min.to_bits() as i64);
        let to = (high as i64).min(self.max.to_bits() as i64);
        // `from >= low > 0`, so `from` is a positive float's bits.
        self.inner_low = from as u64;
        // `0 < from <= to < 2^63`: neither operation wraps.
        self.inner_span = if from <= to {
            (to as u64).wrapping_sub(from as u64).wrapping_add(1)
        } else {
            0
        };
    }

    /// Notes `value` in the minimum, maximum and sum.
    #[inline(always)]
    fn note(&mut self, value: f64, weight: u32) {
        if value < self.min {
            self.min = value;
        }
        if value > self.max {
            self.max = value;
        }
        self.set_inner();
        self.sum += value * f64::from(weight);
    }

    /// Zero, negative and rejected values. Inlined and free of calls like
    /// the store's slow path, for the same reason (see `CollapsingStore`).
    #[inline(always)]
    fn insert_other(&mut self, value: f64, weight: u32) -> Result<(), SketchError> {
        let magnitude = value.abs();
        if value.is_nan() {
            return Err(SketchError::NotANumber);
        }
        if magnitude > self.mapping.max_indexable_value() {
            return Err(SketchError::ValueOutOfRange(value));
        }
        if value < 0.0 && N::CAPACITY == 0 {
            // Even one too small to index: it is still negative.
            return Err(SketchError::NegativeValue(value));
        }
        if magnitude < self.mapping.min_indexable_value() {
            self.zero_count = self.zero_count.saturating_add(u64::from(weight));
            // Zeros are recorded as `+0.0` (`-0.0 + 0.0` is `+0.0`), so
            // that the sign of a zero minimum or maximum does not depend on
            // the order of the adds; a negative subnormal keeps its value.
            // An unsigned sketch's minimum and maximum are never negative.
            self.note(value + 0.0, weight);
            return Ok(());
        }
        if value < 0.0 {
            self.negative.add(self.mapping.index(magnitude), weight);
        } else {
            self.positive.add(self.mapping.index(value), weight);
        }
        self.note(value, weight);
        Ok(())
    }

    /// Samples stored, saturating at `u64::MAX`. Ranks and quantiles
    /// assume it has not saturated: 2^64 samples, which only merges or
    /// decoded counts reach.
    pub fn count(&self) -> u64 {
        self.negative
            .total()
            .saturating_add(self.zero_count)
            .saturating_add(self.positive.total())
    }

    /// Whether no sample has been stored.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Sum of the samples added, those [`saturated`](Self::saturated)
    /// dropped from their bucket included (it may reach ±infinity for huge
    /// values). Float additions in the order the samples came: a merge adds
    /// the two sums, so it equals a single stream's sum up to rounding.
    pub fn sum(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.sum + self.integers.sum())
    }

    /// The exact smallest sample, or `None` when empty.
    pub fn min(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.lowest())
    }

    /// The exact largest sample, or `None` when empty.
    pub fn max(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.highest())
    }

    /// The smallest sample of either add path (infinity when empty).
    #[inline]
    fn lowest(&self) -> f64 {
        match self.integers.extremes() {
            Some((min, _)) if min < self.min => min,
            _ => self.min,
        }
    }

    /// The largest sample of either add path (−infinity when empty).
    #[inline]
    fn highest(&self) -> f64 {
        match self.integers.extremes() {
            Some((_, max)) if max > self.max => max,
            _ => self.max,
        }
    }

    /// The mean of every sample added ([`sum`](Self::sum) over
    /// [`count`](Self::count) plus [`saturated`](Self::saturated)), clamped
    /// into `[min, max]` against the rounding of the sum; `None` when empty.
    pub fn mean(&self) -> Option<f64> {
        let all = self.count().saturating_add(self.saturated());
        self.sum()
            .map(|s| clamp(s / all as f64, self.lowest(), self.highest()))
    }

    /// Samples counted in the zero bucket.
    pub fn zero_count(&self) -> u64 {
        self.zero_count
    }

    /// Samples dropped because a bucket counter was full (`u32::MAX`); they
    /// are not in [`count`](Self::count). Zero unless one bucket received
    /// over four billion samples.
    pub fn saturated(&self) -> u64 {
        self.positive
            .saturated()
            .saturating_add(self.negative.saturated())
    }

    /// Whether, and how much, the positive store has collapsed.
    pub fn collapse(&self) -> Option<Collapsed> {
        self.collapsed(self.positive.collapse())
    }

    /// Whether, and how much, the negative store has collapsed (magnitudes
    /// of negative values).
    pub fn negative_collapse(&self) -> Option<Collapsed> {
        self.collapsed(self.negative.collapse())
    }

    fn collapsed(&self, c: Option<StoreCollapse>) -> Option<Collapsed> {
        c.map(|c| Collapsed {
            samples: c.samples,
            bound: self.mapping.lower_bound(c.boundary),
        })
    }

    /// The mapping.
    pub fn mapping(&self) -> &M {
        &self.mapping
    }

    /// The smallest and largest sample [`add_u64`](Self::add_u64) took,
    /// exactly; `None` if it took none.
    pub(crate) fn integer_extremes(&self) -> Option<(u64, u64)> {
        let i = &self.integers;
        (i.min <= i.max).then_some((i.min, i.max))
    }

    /// The store of positive values.
    pub fn positive_store(&self) -> &P {
        &self.positive
    }

    /// The store of negative values (keyed on their magnitude).
    pub fn negative_store(&self) -> &N {
        &self.negative
    }

    /// The estimated `q`-quantile, `None` for an empty sketch.
    ///
    /// Cost: a walk over the occupied buckets from the nearer end, sixteen
    /// counters a step, then one inverse mapping; no allocation.
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] if `q` is NaN or outside `[0, 1]`.
    pub fn quantile(&self, q: f64) -> Result<Option<f64>, SketchError> {
        let n = self.count();
        let rank = rank_of(q, n)?;
        Ok((n > 0).then(|| self.value_at_rank(rank)))
    }

    /// The value of the sample of 0-based `rank` in ascending order.
    fn value_at_rank(&self, rank: u64) -> f64 {
        let negatives = self.negative.total();
        // The subtractions below cannot wrap: each runs only where the branch
        // conditions put `rank` at or above what is subtracted.
        let value = if rank < negatives {
            // Negative keys ascend with magnitude: most negative last.
            self.negative
                .key_at_rank(negatives.wrapping_sub(1).wrapping_sub(rank))
                .map_or(self.lowest(), |k| -self.mapping.value(k))
        } else if rank.wrapping_sub(negatives) < self.zero_count {
            0.0
        } else {
            let rank = rank.wrapping_sub(negatives).wrapping_sub(self.zero_count);
            self.positive
                .key_at_rank(rank)
                .map_or(self.highest(), |k| self.mapping.value(k))
        };
        clamp(value, self.lowest(), self.highest())
    }

    /// Several quantiles, each exactly what [`quantile`](Self::quantile)
    /// answers, at the cost of that many `quantile` calls (no pass over all
    /// the buckets); `None` for an empty sketch. The `qs` need not be sorted.
    ///
    /// ```
    /// # use tailguard::DDSketch;
    /// let mut s = DDSketch::new(0.01)?;
    /// (1..=1000).try_for_each(|v| s.add(f64::from(v)))?;
    /// let [p50, p99] = s.quantiles(&[0.5, 0.99])?.unwrap();
    /// assert!((p50 - 500.0).abs() <= 5.0 && (p99 - 990.0).abs() <= 9.9);
    /// # Ok::<(), tailguard::SketchError>(())
    /// ```
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] for the first invalid `q`.
    pub fn quantiles<const K: usize>(
        &self,
        qs: &[f64; K],
    ) -> Result<Option<[f64; K]>, SketchError> {
        let n = self.count();
        let mut ranks = [0u64; K];
        // Validate every `q` first: an invalid one is an error even when
        // the sketch is empty.
        for (r, &q) in ranks.iter_mut().zip(qs) {
            *r = rank_of(q, n)?;
        }
        if n == 0 {
            return Ok(None);
        }
        // One walk per rank from the nearer end of the occupied buckets,
        // as `quantile` does: a few sixteen-counter steps each.
        Ok(Some(ranks.map(|r| self.value_at_rank(r))))
    }

    /// The estimated fraction of samples `<= value` (the cumulative
    /// distribution), `None` for an empty sketch.
    ///
    /// Samples are counted by bucket: all of `value`'s bucket counts as
    /// `<= value`, so the answer lies between the exact fractions of samples
    /// `<= value` and `< value · γ` (`< value / γ` for a negative `value`;
    /// `< min_indexable_value` inside the zero bucket), with
    /// `γ = (1 + α) / (1 − α)`; both bounds hold exactly, in real
    /// arithmetic on the doubles (the query is widened by the mapping's
    /// [`key_slack`](IndexMapping::key_slack), which the margin covers).
    /// Exactly 0 below the minimum and 1 at or above the maximum.
    ///
    /// After a collapse, the collapsed bucket counts whole for every value
    /// it may stand for, so the lower bound holds still and the upper one
    /// widens on the collapsed side (`bound` from [`collapse`](Self::collapse)
    /// or [`negative_collapse`](Self::negative_collapse)): for a
    /// collapsing-lowest store, to `< max(value, bound) · γ`, and to `< 0`
    /// for a negative `value > −bound · γ`; for a collapsing-highest store,
    /// to every sample (1) for `value >= bound / γ`, and to
    /// `< max(value, −bound) / γ` for a negative `value`.
    ///
    /// # Errors
    /// [`SketchError::NotANumber`] if `value` is NaN.
    pub fn rank(&self, value: f64) -> Result<Option<f64>, SketchError> {
        if value.is_nan() {
            return Err(SketchError::NotANumber);
        }
        let n = self.count();
        if n == 0 {
            return Ok(None);
        }
        if value >= self.highest() {
            return Ok(Some(1.0));
        }
        if value < self.lowest() {
            return Ok(Some(0.0));
        }
        let negatives = self.negative.total();
        let (low, high) = (
            self.mapping.min_indexable_value(),
            self.mapping.max_indexable_value(),
        );
        // Keys are monotone only up to the mapping's slack: widen the query
        // by it, so that every sample at or below `value` is counted. A
        // collapsed bucket counts whole for every key it stands for.
        let widen = 1.0 + self.mapping.key_slack();
        let below = if value >= low {
            let up = value * widen;
            let positives = if up > high {
                self.positive.total()
            } else {
                self.positive
                    .count_covering_at_or_below(self.mapping.index(up))
            };
            negatives
                .saturating_add(self.zero_count)
                .saturating_add(positives)
        } else if value > -low {
            negatives.saturating_add(self.zero_count)
        } else {
            let down = -value / widen;
            if down < low {
                negatives
            } else {
                self.negative
                    .count_covering_at_or_above(self.mapping.index(down))
            }
        };
        Ok(Some((below as f64 / n as f64).min(1.0)))
    }

    /// Adds every sample of `other` to this sketch. Bucket counts add
    /// exactly, so the result equals the sketch of both streams in every
    /// field (counts, saturated samples, collapse, minimum and maximum), the
    /// float [`sum`](Self::sum) up to the rounding of its additions.
    ///
    /// # Errors
    /// [`SketchError::MappingMismatch`] if the mappings differ; this sketch
    /// is unchanged.
    pub fn merge(&mut self, other: &Self) -> Result<(), SketchError> {
        if self.mapping != other.mapping {
            return Err(SketchError::MappingMismatch);
        }
        self.positive.merge(&other.positive);
        self.negative.merge(&other.negative);
        self.zero_count = self.zero_count.saturating_add(other.zero_count);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.set_inner();
        self.sum += other.sum;
        self.integers.merge(&other.integers);
        Ok(())
    }

    /// The estimated `q`-quantile of the union of this sketch and `other`,
    /// without merging or copying them: what a rotating window asks of its
    /// two halves. `None` when both are empty.
    ///
    /// The two sketches' buckets are counted together as they stand: the
    /// answer is the [`quantile`](Self::quantile) of their merge whenever
    /// the merge collapses no further, and a union wider than a store is
    /// not collapsed (it stays as exact as its two parts).
    ///
    /// Cost: a walk over the occupied buckets of both sketches, never over
    /// the empty keys between them, however far apart their values are.
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] for a bad `q`;
    /// [`SketchError::MappingMismatch`] if the mappings differ.
    pub fn quantile_with(&self, other: &Self, q: f64) -> Result<Option<f64>, SketchError> {
        if self.mapping != other.mapping {
            return Err(SketchError::MappingMismatch);
        }
        let n = self.count().saturating_add(other.count());
        let rank = rank_of(q, n)?;
        if n == 0 {
            return Ok(None);
        }
        let min = self.lowest().min(other.lowest());
        let max = self.highest().max(other.highest());
        let negatives = self.negative.total().saturating_add(other.negative.total());
        let zeros = self.zero_count.saturating_add(other.zero_count);
        // As in `value_at_rank`, the branch conditions keep the
        // subtractions from wrapping.
        let value = if rank < negatives {
            let rank = negatives.wrapping_sub(1).wrapping_sub(rank);
            self.negative
                .key_at_rank_with(&other.negative, rank)
                .map_or(min, |k| -self.mapping.value(k))
        } else if rank.wrapping_sub(negatives) < zeros {
            0.0
        } else {
            let rank = rank.wrapping_sub(negatives).wrapping_sub(zeros);
            self.positive
                .key_at_rank_with(&other.positive, rank)
                .map_or(max, |k| self.mapping.value(k))
        };
        Ok(Some(clamp(value, min, max)))
    }

    /// Empties the sketch, keeping its mapping.
    // One copy on 32-bit targets, as `with_mapping`.
    #[cfg_attr(not(target_pointer_width = "64"), inline(never))]
    pub fn clear(&mut self) {
        self.positive.clear();
        self.negative.clear();
        self.zero_count = 0;
        self.min = f64::INFINITY;
        self.max = f64::NEG_INFINITY;
        self.set_inner();
        self.sum = 0.0;
        self.integers = Integers::EMPTY;
    }
}

/// `value` clamped into `[min, max]` by comparisons: cheaper than
/// `f64::max`/`min`, which also handle NaN (never met here), and free of
/// `f64::clamp`'s assertion.
#[inline(always)]
fn clamp(value: f64, min: f64, max: f64) -> f64 {
    if value < min {
        min
    } else if value > max {
        max
    } else {
        value
    }
}

/// `⌊q · (n − 1)⌋`, validated.
#[inline]
fn rank_of(q: f64, n: u64) -> Result<u64, SketchError> {
    if !(0.0..=1.0).contains(&q) {
        return Err(SketchError::InvalidQuantile(q));
    }
    let last = n.saturating_sub(1);
    // `as` saturates; the product never exceeds `last` but clamp anyway.
    Ok(((q * last as f64) as u64).min(last))
}

impl<M: IndexMapping, P: Store, N: Store> fmt::Debug for DDSketch<M, P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DDSketch")
            .field("mapping", &self.mapping)
            .field("count", &self.count())
            .field("min", &self.min())
            .field("max", &self.max())
            .field("zero_count", &self.zero_count)
            .field("collapsed", &self.collapse())
            .finish()
    }
}

/// Mappings that can be built from a relative accuracy alone, so that
/// [`DDSketch::new`] can build them.
pub trait FromRelativeAccuracy: Sized {
    /// The mapping for relative accuracy α.
    ///
    /// # Errors
    /// [`MappingError::InvalidRelativeAccuracy`] unless
    /// [`MIN_RELATIVE_ACCURACY`](crate::mapping::MIN_RELATIVE_ACCURACY)` <= α < 1`.
    fn from_relative_accuracy(relative_accuracy: f64) -> Result<Self, MappingError>;
}

impl<L: crate::mapping::LogApproximation> FromRelativeAccuracy
    for crate::mapping::LogLikeMapping<L>
{
    fn from_relative_accuracy(relative_accuracy: f64) -> Result<Self, MappingError> {
        Self::new(relative_accuracy)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::probe;
    use crate::{DDSketch, IndexMapping, LogarithmicMapping};

    #[test]
    fn quantile_with_walks_occupied_buckets_not_the_keys_between() {
        // At α = 1e-7 the smallest and largest indexable values are about
        // 10⁹ keys apart; the union walk must not visit the keys between.
        let m = LogarithmicMapping::new(1e-7).unwrap();
        let mut x: DDSketch<LogarithmicMapping> = DDSketch::with_mapping(m);
        let mut y: DDSketch<LogarithmicMapping> = DDSketch::with_mapping(m);
        x.add(m.min_indexable_value()).unwrap();
        x.add(1.0).unwrap();
        y.add(m.max_indexable_value()).unwrap();
        for q in [0.0, 0.25, 0.5, 0.75, 1.0] {
            probe::take();
            let v = x.quantile_with(&y, q).unwrap().unwrap();
            let reads = probe::take();
            assert!(reads <= 8 * 1024, "q {q}: {reads} counters read");
            assert!(v.is_finite() && v > 0.0, "q {q}: {v}");
        }
    }
}
