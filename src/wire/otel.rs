//! A sketch over an [`ExponentialMapping`] read as an OpenTelemetry
//! exponential-histogram data point (and a Prometheus native histogram).

use crate::mapping::{ExponentialMapping, IndexMapping};
use crate::store::{Collapse, Store, StoreCollapse};
use crate::DDSketch;
use core::fmt;

/// A sketch over an [`ExponentialMapping`], read as OpenTelemetry's
/// `ExponentialHistogramDataPoint`: same scale, same buckets, the same
/// index for every value (see the mapping's boundary convention), so
/// nothing is converted or approximated, unless a store has collapsed
/// (below). Borrowing, allocation-free.
///
/// * `positive` and `negative` hold each store's occupied key range as a
///   dense run of counts, empty buckets included: OpenTelemetry's bucket
///   `offset + i` is the sketch's key `offset + i`.
/// * `zero_count` counts the sketch's zero bucket: zero and magnitudes
///   below the smallest normal float, so
///   [`zero_threshold`](Self::zero_threshold) is the largest subnormal.
/// * `count` is the sum of every bucket and the zero count; `min` and `max`
///   are exact; `sum` is left out when a sample was negative, as the OTLP
///   definition asks, and is that of the counted samples: if a bucket
///   saturated, the sketch's sum less the dropped samples' share, so that
///   `sum / count` is the sketch's [`mean`](DDSketch::mean) (see
///   [`sum`](Self::sum)).
/// * A collapsed store folded samples into its edge bucket that are not
///   values of that bucket (see [`DDSketch::collapse`]): a consumer would
///   read them as the edge's values, far off (20 times at the median, once
///   seen). The point is then *downscaled*, as OpenTelemetry SDKs do when
///   the range outgrows their buckets: the scale is lowered by
///   [`downscaled`](Self::downscaled) steps, each merging pairs of
///   buckets (index `i` becomes `i >> 1`), until the edge bucket also
///   holds the most extreme value a folded sample can have (`min` for a
///   lowest-collapsed positive store, `max` for a highest-collapsed one;
///   by magnitude for the negative store, and the smallest normal float
///   where `min` or `max` is on the other side of zero). Every count is
///   then in a bucket that contains its value, at a coarser scale. Where
///   no scale down to −10, OpenTelemetry's least, can do that (folded
///   values on both sides of 1, which every scale keeps apart; or zeros
///   or negative samples beside a collapsed positive store, whose
///   smallest positive value the sketch does not know), that side is left
///   as the sketch has it and its folded samples are counted in
///   [`misplaced`](Self::misplaced).
///
/// Prometheus native histograms use the same buckets with schema = scale
/// (schemas −4 to 8); its OTLP receiver takes these data points as they are
/// (and reduces finer scales to 8), but not a point downscaled below −4,
/// and only with cumulative temporality
/// ([`Temporality::Cumulative`](crate::wire::Temporality::Cumulative)).
///
/// ```
/// use tailguard::mapping::ExponentialMapping;
/// use tailguard::wire::ExponentialHistogram;
/// use tailguard::DDSketch;
///
/// let mut sketch = DDSketch::<ExponentialMapping>::with_mapping(ExponentialMapping::new(3).unwrap());
/// sketch.add_all(&[1.5, 1.6, 3.0, 0.0]).map_err(|(_, e)| e)?;
/// let point = ExponentialHistogram::new(&sketch);
/// assert_eq!(point.scale(), 3);
/// assert_eq!((point.count(), point.zero_count()), (4, 1));
/// let positive = point.positive();
/// assert_eq!(positive.offset(), 4); // 1.5 is in (2^(4/8), 2^(5/8)]
/// let counts: Vec<u64> = positive.counts().collect(); // indexes 4 to 12
/// assert_eq!(counts, [1, 1, 0, 0, 0, 0, 0, 0, 1]);
/// # Ok::<(), tailguard::SketchError>(())
/// ```
pub struct ExponentialHistogram<'a, P, N> {
    sketch: &'a DDSketch<ExponentialMapping, P, N>,
    /// Halvings of the sketch's scale (see *collapsed store*).
    shift: u32,
    /// Folded samples no downscaling could place.
    misplaced: u64,
}

// By hand: derives would ask `P` and `N` for what a reference does not need.
impl<P, N> Clone for ExponentialHistogram<'_, P, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, N> Copy for ExponentialHistogram<'_, P, N> {}

impl<P: Store, N: Store> fmt::Debug for ExponentialHistogram<'_, P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExponentialHistogram")
            .field("scale", &self.scale())
            .field("downscaled", &self.shift)
            .field("count", &self.count())
            .field("zero_count", &self.zero_count())
            .field("positive", &self.positive())
            .field("negative", &self.negative())
            .finish()
    }
}

impl<'a, P: Store, N: Store> ExponentialHistogram<'a, P, N> {
    /// The data point of `sketch`, downscaled if a store has collapsed.
    pub fn new(sketch: &'a DDSketch<ExponentialMapping, P, N>) -> Self {
        let mapping = sketch.mapping();
        // Where the samples folded into a collapsed edge may lie, by
        // magnitude: what `min` and `max` say of each side, else the
        // smallest normal float (below it is the zero bucket).
        let (min, max) = (sketch.min().unwrap_or(0.0), sketch.max().unwrap_or(0.0));
        let smallest = mapping.min_indexable_value();
        let positive_low = if min > 0.0 { min } else { smallest };
        let negative_low = if max < 0.0 { -max } else { smallest };
        let most = u32::try_from(
            mapping
                .scale()
                .saturating_sub(ExponentialMapping::MIN_SCALE),
        )
        .unwrap_or(0);
        let (positive, negative) = (
            sketch.positive_store().collapse(),
            sketch.negative_store().collapse(),
        );
        // A side no downscaling can place is left as it is, and counted.
        let place = |c: Option<StoreCollapse>, low: f64, high: f64| match shift_for(
            mapping, c, low, high,
        ) {
            Some(k) if k <= most => (k, 0),
            _ => (0, c.map_or(0, |c| c.samples)),
        };
        let (positive, misplaced_positive) = place(positive, positive_low, max);
        let (negative, misplaced_negative) = place(negative, negative_low, -min);
        Self {
            sketch,
            shift: positive.max(negative),
            misplaced: misplaced_positive.saturating_add(misplaced_negative),
        }
    }

    /// The scale: `2^scale` buckets between consecutive powers of two. The
    /// sketch's, less [`downscaled`](Self::downscaled).
    pub fn scale(&self) -> i32 {
        self.sketch
            .mapping()
            .scale()
            .saturating_sub_unsigned(self.shift)
    }

    /// How many times the sketch's scale was halved so that the samples a
    /// collapsed store folded lie in the buckets that count them: 0 unless
    /// a store has collapsed.
    pub fn downscaled(&self) -> u32 {
        self.shift
    }

    /// Samples counted in a collapsed edge bucket that may not contain
    /// their values, because no downscaling (down to scale −10) brings
    /// the edge and the most extreme folded value into one bucket: every
    /// scale puts 1 and what lies above it in different buckets, and a
    /// sketch holding zeros or negative values does not know its smallest
    /// positive value. 0 whenever the point is exact; check it before
    /// exporting a collapsed sketch, or give the sketch more buckets.
    pub fn misplaced(&self) -> u64 {
        self.misplaced
    }

    /// Samples in the data point: every bucket and the zero count.
    pub fn count(&self) -> u64 {
        self.sketch.count()
    }

    /// The sum of the samples counted in [`count`](Self::count); `None`
    /// when empty, when a sample was negative (OTLP: "sum should not be
    /// filled out" then), or when the sum is not finite (samples near
    /// `f64::MAX` overflow it to infinity, which would make a consumer's
    /// mean infinite for every later point of a cumulative series).
    ///
    /// Without saturation this is [`DDSketch::sum`], bit for bit, when
    /// finite. Samples
    /// that a full bucket dropped ([`DDSketch::saturated`]) are in the
    /// sketch's sum but in no bucket, and OTLP's `count` must be the zero
    /// count plus the buckets; so once a bucket has saturated, the sum of
    /// the counted samples is estimated as `count ·`
    /// [`DDSketch::mean`], i.e. `sum · count / (count + saturated)`
    /// clamped to `[count · min, count · max]`: the dropped samples are
    /// taken at the mean of all. A consumer's `sum / count` is then the
    /// sketch's mean, up to rounding; `min` and `max` are exact as ever.
    ///
    /// ```
    /// use tailguard::mapping::ExponentialMapping;
    /// use tailguard::wire::ExponentialHistogram;
    /// use tailguard::DDSketch;
    ///
    /// let mut s = DDSketch::<ExponentialMapping>::with_accuracy(0.01)?;
    /// s.add(4.2e6)?;
    /// s.add_weighted(1.0, u32::MAX)?;
    /// s.add_weighted(1.0, u32::MAX)?; // the bucket is full: dropped
    /// assert_eq!(s.saturated(), u64::from(u32::MAX));
    /// let h = ExponentialHistogram::new(&s);
    /// assert_eq!(h.count(), 1 << 32);
    /// let mean = h.sum().unwrap() / h.count() as f64;
    /// assert!((mean - s.mean().unwrap()).abs() < 1e-15);
    /// # Ok::<(), tailguard::SketchError>(())
    /// ```
    pub fn sum(&self) -> Option<f64> {
        let no_negatives = self.sketch.min().is_some_and(|m| m >= 0.0);
        if !no_negatives {
            return None;
        }
        let sum = if self.sketch.saturated() == 0 {
            self.sketch.sum()
        } else {
            // `mean` is `sum / (count + saturated)`, clamped into `[min, max]`.
            self.sketch.mean().map(|m| m * self.sketch.count() as f64)
        };
        sum.filter(|s| s.is_finite())
    }

    /// The exact smallest sample, `None` when empty.
    pub fn min(&self) -> Option<f64> {
        self.sketch.min()
    }

    /// The exact largest sample, `None` when empty.
    pub fn max(&self) -> Option<f64> {
        self.sketch.max()
    }

    /// Samples in the zero bucket.
    pub fn zero_count(&self) -> u64 {
        self.sketch.zero_count()
    }

    /// The largest magnitude counted in the zero bucket: the largest
    /// subnormal float, since the mapping indexes every normal one.
    pub fn zero_threshold(&self) -> f64 {
        self.sketch.mapping().min_indexable_value().next_down()
    }

    /// The buckets of positive values.
    pub fn positive(&self) -> Buckets<'a, P> {
        Buckets::of(self.sketch.positive_store(), self.shift)
    }

    /// The buckets of negative values, by magnitude.
    pub fn negative(&self) -> Buckets<'a, N> {
        Buckets::of(self.sketch.negative_store(), self.shift)
    }
}

/// Halvings of the scale after which a store's collapsed edge bucket
/// holds the most extreme magnitude its folded samples may have: `low`
/// for a collapse of the lowest keys, `high` for one of the highest.
fn shift_for(
    mapping: &ExponentialMapping,
    collapse: Option<StoreCollapse>,
    low: f64,
    high: f64,
) -> Option<u32> {
    let Some(c) = collapse else {
        return Some(0);
    };
    let (edge, extreme) = match c.side {
        Collapse::Lowest => (c.boundary.saturating_sub(1), low),
        Collapse::Highest => (c.boundary, high),
    };
    let clamped = extreme.clamp(mapping.min_indexable_value(), mapping.max_indexable_value());
    let far = mapping.index(clamped);
    // Keys of both signs (values on both sides of 1) never meet.
    (0..32u32).find(|&k| edge.wrapping_shr(k) == far.wrapping_shr(k))
}

/// One side of a data point: bucket counts for the indexes `offset ..
/// offset + len`, dense.
pub struct Buckets<'a, S> {
    store: &'a S,
    /// The store's keys.
    keys: Option<(i32, i32)>,
    /// Halvings of the store's scale: bucket `i` holds keys `i << shift`
    /// to `((i + 1) << shift) − 1`.
    shift: u32,
}

impl<S> Clone for Buckets<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Buckets<'_, S> {}

impl<S: Store> fmt::Debug for Buckets<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buckets")
            .field("offset", &self.offset())
            .field("len", &self.len())
            .finish()
    }
}

impl<'a, S: Store> Buckets<'a, S> {
    fn of(store: &'a S, shift: u32) -> Self {
        Self {
            store,
            keys: store.key_range(),
            shift,
        }
    }

    /// The bucket indexes, first and last (shifts of negative keys round
    /// down, as OpenTelemetry's downscaling does).
    fn range(&self) -> Option<(i32, i32)> {
        let k = self.shift;
        self.keys.map(|(lo, hi)| {
            (
                lo.checked_shr(k).unwrap_or(lo >> 31),
                hi.checked_shr(k).unwrap_or(hi >> 31),
            )
        })
    }

    /// The index of the first bucket (0 when there is none).
    pub fn offset(&self) -> i32 {
        self.range().map_or(0, |r| r.0)
    }

    /// The number of buckets, from the lowest non-empty to the highest.
    pub fn len(&self) -> usize {
        self.range().map_or(0, |(lo, hi)| {
            let span = i64::from(hi)
                .saturating_sub(i64::from(lo))
                .saturating_add(1);
            usize::try_from(span).unwrap_or(0)
        })
    }

    /// Whether there are no buckets.
    pub fn is_empty(&self) -> bool {
        self.keys.is_none()
    }

    /// The counts of buckets `offset, offset + 1, …`; the first and the
    /// last are non-zero.
    pub fn counts(&self) -> impl Iterator<Item = u64> + 'a {
        let (store, shift) = (self.store, self.shift);
        let keys = self.keys;
        self.range()
            .into_iter()
            .flat_map(|(lo, hi)| lo..=hi)
            .map(move |i| {
                let Some((first, last)) = keys else {
                    return 0;
                };
                // The store's keys in bucket `i`, within its range.
                let from = (i128::from(i) << shift).max(i128::from(first));
                let to = (i128::from(i).saturating_add(1) << shift)
                    .saturating_sub(1)
                    .min(i128::from(last));
                (from..=to)
                    .filter_map(|k| i32::try_from(k).ok())
                    .map(|k| u64::from(store.count_of(k)))
                    .sum()
            })
    }
}
