//! OTLP protobuf, without allocation: an `ExponentialHistogramDataPoint`,
//! and the `ExportMetricsServiceRequest` that carries one to a collector.
//!
//! Field numbers from opentelemetry-proto's `metrics.proto`,
//! `common.proto`, `resource.proto` and `metrics_service.proto`.

use super::otel::{Buckets, ExponentialHistogram};
use super::protobuf::{len_field_len, tag_len, varint_len, zigzag32, Sink, SliceWriter};
use super::EncodeError;
use crate::store::Store;

// ExponentialHistogramDataPoint.
const POINT_ATTRIBUTES: u32 = 1;
const POINT_START_TIME: u32 = 2;
const POINT_TIME: u32 = 3;
const POINT_COUNT: u32 = 4;
const POINT_SUM: u32 = 5;
const POINT_SCALE: u32 = 6;
const POINT_ZERO_COUNT: u32 = 7;
const POINT_POSITIVE: u32 = 8;
const POINT_NEGATIVE: u32 = 9;
const POINT_MIN: u32 = 12;
const POINT_MAX: u32 = 13;
const POINT_ZERO_THRESHOLD: u32 = 14;
// ExponentialHistogramDataPoint.Buckets.
const BUCKETS_OFFSET: u32 = 1;
const BUCKETS_COUNTS: u32 = 2;
// KeyValue and AnyValue.
const KEY_VALUE_KEY: u32 = 1;
const KEY_VALUE_VALUE: u32 = 2;
const ANY_VALUE_STRING: u32 = 1;
// ExponentialHistogram, Metric, InstrumentationScope, ScopeMetrics,
// Resource, ResourceMetrics, ExportMetricsServiceRequest.
const HISTOGRAM_DATA_POINTS: u32 = 1;
const HISTOGRAM_TEMPORALITY: u32 = 2;
const METRIC_NAME: u32 = 1;
const METRIC_DESCRIPTION: u32 = 2;
const METRIC_UNIT: u32 = 3;
const METRIC_EXPONENTIAL_HISTOGRAM: u32 = 10;
const SCOPE_NAME: u32 = 1;
const SCOPE_VERSION: u32 = 2;
const SCOPE_METRICS_SCOPE: u32 = 1;
const SCOPE_METRICS_METRICS: u32 = 2;
const RESOURCE_ATTRIBUTES: u32 = 1;
const RESOURCE_METRICS_RESOURCE: u32 = 1;
const RESOURCE_METRICS_SCOPE_METRICS: u32 = 2;
const REQUEST_RESOURCE_METRICS: u32 = 1;

/// What a data point carries besides the histogram: its attributes (string
/// values only) and its time window, in nanoseconds since the Unix epoch
/// (0 leaves a time out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OtlpPoint<'a> {
    /// `(key, value)` attributes of the time series.
    pub attributes: &'a [(&'a str, &'a str)],
    /// Start of the window the samples cover (for cumulative data, when
    /// the sketch was created or last cleared).
    pub start_time_unix_nano: u64,
    /// End of the window: when the data point was taken.
    pub time_unix_nano: u64,
}

/// OTLP's `AggregationTemporality`: how consecutive data points of a series
/// relate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Temporality {
    /// Each point covers only its own window: the sketch is cleared after
    /// each export. What DataDog's OTLP intake prefers.
    #[default]
    Delta = 1,
    /// Each point covers everything since the start time: the sketch is
    /// never cleared. What Prometheus's OTLP receiver needs for histograms
    /// (it drops delta ones unless they are converted first).
    Cumulative = 2,
}

/// The metric, instrumentation scope and resource an exported data point
/// belongs to. Empty strings are left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OtlpMetric<'a> {
    /// The metric's name, e.g. `"http.server.request.duration"`.
    pub name: &'a str,
    /// A description.
    pub description: &'a str,
    /// The unit, UCUM: `"ns"`, `"ms"`, `"s"`.
    pub unit: &'a str,
    /// Delta or cumulative.
    pub temporality: Temporality,
    /// Attributes of the resource (`service.name` and the like).
    pub resource_attributes: &'a [(&'a str, &'a str)],
    /// The instrumentation scope's name (e.g. the crate producing it).
    pub scope_name: &'a str,
    /// The instrumentation scope's version.
    pub scope_version: &'a str,
}

fn string_len(field: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        len_field_len(field, s.len())
    }
}

fn write_string<K: Sink>(sink: &mut K, field: u32, s: &str) {
    if !s.is_empty() {
        sink.bytes_field(field, s.as_bytes());
    }
}

/// A `KeyValue` with a string `AnyValue`: its body's length.
fn key_value_len(key: &str, value: &str) -> usize {
    // The value is a oneof: written even when empty.
    let any = len_field_len(ANY_VALUE_STRING, value.len());
    len_field_len(KEY_VALUE_KEY, key.len()).saturating_add(len_field_len(KEY_VALUE_VALUE, any))
}

fn attributes_len(field: u32, attributes: &[(&str, &str)]) -> usize {
    attributes.iter().fold(0usize, |n, (k, v)| {
        n.saturating_add(len_field_len(field, key_value_len(k, v)))
    })
}

fn write_attributes<K: Sink>(sink: &mut K, field: u32, attributes: &[(&str, &str)]) {
    for (key, value) in attributes {
        sink.len_header(field, key_value_len(key, value));
        sink.bytes_field(KEY_VALUE_KEY, key.as_bytes());
        sink.len_header(
            KEY_VALUE_VALUE,
            len_field_len(ANY_VALUE_STRING, value.len()),
        );
        sink.bytes_field(ANY_VALUE_STRING, value.as_bytes());
    }
}

/// One side's lengths: `(body, packed counts)`, `None` when empty.
fn buckets_lens<S: Store>(b: &Buckets<'_, S>) -> Option<(usize, usize)> {
    if b.is_empty() {
        return None;
    }
    let packed = b
        .counts()
        .fold(0usize, |n, c| n.saturating_add(varint_len(c)));
    let offset = if b.offset() == 0 {
        0
    } else {
        tag_len(BUCKETS_OFFSET).saturating_add(varint_len(zigzag32(b.offset())))
    };
    Some((
        offset.saturating_add(len_field_len(BUCKETS_COUNTS, packed)),
        packed,
    ))
}

fn write_buckets<S: Store, K: Sink>(
    sink: &mut K,
    field: u32,
    b: &Buckets<'_, S>,
    lens: Option<(usize, usize)>,
) {
    let Some((body, packed)) = lens else { return };
    sink.len_header(field, body);
    if b.offset() != 0 {
        sink.varint_field(BUCKETS_OFFSET, zigzag32(b.offset()));
    }
    sink.len_header(BUCKETS_COUNTS, packed);
    for c in b.counts() {
        sink.varint(c);
    }
}

/// A data point's lengths, computed once.
struct PointPlan {
    body: usize,
    positive: Option<(usize, usize)>,
    negative: Option<(usize, usize)>,
}

impl PointPlan {
    fn of<P: Store, N: Store>(h: &ExponentialHistogram<'_, P, N>, point: &OtlpPoint<'_>) -> Self {
        let positive = buckets_lens(&h.positive());
        let negative = buckets_lens(&h.negative());
        let fixed = tag_len(POINT_TIME).saturating_add(8);
        let some = |present: bool| if present { fixed } else { 0 };
        let scale = if h.scale() == 0 {
            0
        } else {
            tag_len(POINT_SCALE).saturating_add(varint_len(zigzag32(h.scale())))
        };
        let side = |field: u32, lens: Option<(usize, usize)>| {
            lens.map_or(0, |(body, _)| len_field_len(field, body))
        };
        let body = [
            attributes_len(POINT_ATTRIBUTES, point.attributes),
            some(point.start_time_unix_nano != 0),
            some(point.time_unix_nano != 0),
            some(h.count() != 0),
            some(h.sum().is_some()),
            scale,
            some(h.zero_count() != 0),
            side(POINT_POSITIVE, positive),
            side(POINT_NEGATIVE, negative),
            some(h.min().is_some()),
            some(h.max().is_some()),
            some(h.zero_threshold() != 0.0),
        ]
        .iter()
        .fold(0usize, |n, &x| n.saturating_add(x));
        Self {
            body,
            positive,
            negative,
        }
    }

    fn write<P: Store, N: Store, K: Sink>(
        &self,
        sink: &mut K,
        h: &ExponentialHistogram<'_, P, N>,
        point: &OtlpPoint<'_>,
    ) {
        write_attributes(sink, POINT_ATTRIBUTES, point.attributes);
        if point.start_time_unix_nano != 0 {
            sink.fixed64(POINT_START_TIME, point.start_time_unix_nano);
        }
        if point.time_unix_nano != 0 {
            sink.fixed64(POINT_TIME, point.time_unix_nano);
        }
        if h.count() != 0 {
            sink.fixed64(POINT_COUNT, h.count());
        }
        if let Some(sum) = h.sum() {
            sink.double(POINT_SUM, sum);
        }
        if h.scale() != 0 {
            sink.varint_field(POINT_SCALE, zigzag32(h.scale()));
        }
        if h.zero_count() != 0 {
            sink.fixed64(POINT_ZERO_COUNT, h.zero_count());
        }
        write_buckets(sink, POINT_POSITIVE, &h.positive(), self.positive);
        write_buckets(sink, POINT_NEGATIVE, &h.negative(), self.negative);
        if let Some(min) = h.min() {
            sink.double(POINT_MIN, min);
        }
        if let Some(max) = h.max() {
            sink.double(POINT_MAX, max);
        }
        if h.zero_threshold() != 0.0 {
            sink.double(POINT_ZERO_THRESHOLD, h.zero_threshold());
        }
    }
}

/// The largest `ExponentialHistogramDataPoint` without attributes for
/// stores of these capacities: a buffer this long always suffices for
/// [`encode_otlp_data_point`] when `point.attributes` is empty (each
/// attribute adds its own few bytes, see [`otlp_data_point_len`]).
///
/// ```
/// use tailguard::wire::otlp_data_point_max_len;
/// // The default store: 1024 buckets, at most 10 bytes a count.
/// assert_eq!(otlp_data_point_max_len(1024, 0), 10_330);
/// ```
pub const fn otlp_data_point_max_len(positive_capacity: usize, negative_capacity: usize) -> usize {
    // Eight 9-byte fixed64 and double fields, and the scale (6 bytes).
    let fixed: usize = 8 * 9 + 6;
    fixed
        .saturating_add(max_buckets_len(POINT_POSITIVE, positive_capacity))
        .saturating_add(max_buckets_len(POINT_NEGATIVE, negative_capacity))
}

const fn max_buckets_len(field: u32, capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    // Offset: tag and a 5-byte zigzag varint; counts: up to 10 bytes each.
    let body = 6usize.saturating_add(len_field_len(BUCKETS_COUNTS, capacity.saturating_mul(10)));
    len_field_len(field, body)
}

/// The exact length of [`encode_otlp_data_point`]'s output.
pub fn otlp_data_point_len<P: Store, N: Store>(
    histogram: &ExponentialHistogram<'_, P, N>,
    point: &OtlpPoint<'_>,
) -> usize {
    PointPlan::of(histogram, point).body
}

/// Encodes the data point as an OTLP `ExponentialHistogramDataPoint`
/// message (its body, as embedded in `ExponentialHistogram.data_points`)
/// into `buffer`; returns the bytes written. Counts are written as the
/// packed `uint64` varints OTLP declares; zero-valued fields are left out;
/// `sum`, `min` and `max` are present whenever the point is non-empty
/// (`sum` only without negative samples and when finite, and as
/// [`ExponentialHistogram::sum`] gives it: the sum of the counted samples,
/// so that `sum / count` is the sketch's mean even once a bucket has
/// saturated).
///
/// ```
/// use tailguard::mapping::ExponentialMapping;
/// use tailguard::wire::{encode_otlp_data_point, otlp_data_point_len, ExponentialHistogram, OtlpPoint};
/// use tailguard::DDSketch;
///
/// let mut sketch = DDSketch::<ExponentialMapping>::with_accuracy(0.01)?; // scale 6
/// sketch.add_all(&[12e6, 15e6, 40e6]).map_err(|(_, e)| e)?;
/// let point = OtlpPoint {
///     attributes: &[("http.route", "/checkout")],
///     start_time_unix_nano: 1_700_000_000_000_000_000,
///     time_unix_nano: 1_700_000_010_000_000_000,
/// };
/// let mut buffer = [0u8; 512];
/// let histogram = ExponentialHistogram::new(&sketch);
/// let n = encode_otlp_data_point(&histogram, &point, &mut buffer)?;
/// assert_eq!(n, otlp_data_point_len(&histogram, &point));
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// # Errors
/// [`EncodeError::BufferTooSmall`], writing nothing.
pub fn encode_otlp_data_point<P: Store, N: Store>(
    histogram: &ExponentialHistogram<'_, P, N>,
    point: &OtlpPoint<'_>,
    buffer: &mut [u8],
) -> Result<usize, EncodeError> {
    let plan = PointPlan::of(histogram, point);
    write_checked(buffer, plan.body, |sink| plan.write(sink, histogram, point))
}

fn write_checked(
    buffer: &mut [u8],
    needed: usize,
    write: impl FnOnce(&mut SliceWriter<'_>),
) -> Result<usize, EncodeError> {
    if needed > buffer.len() {
        return Err(EncodeError::BufferTooSmall {
            needed,
            available: buffer.len(),
        });
    }
    let mut writer = SliceWriter::new(buffer);
    write(&mut writer);
    Ok(writer.written)
}

/// The nested lengths of a request, innermost first.
struct RequestPlan {
    point: PointPlan,
    histogram: usize,
    metric: usize,
    scope: usize,
    scope_metrics: usize,
    resource: usize,
    resource_metrics: usize,
    request: usize,
}

impl RequestPlan {
    fn of<P: Store, N: Store>(
        h: &ExponentialHistogram<'_, P, N>,
        point: &OtlpPoint<'_>,
        metric: &OtlpMetric<'_>,
    ) -> Self {
        let point_plan = PointPlan::of(h, point);
        let histogram = len_field_len(HISTOGRAM_DATA_POINTS, point_plan.body)
            .saturating_add(tag_len(HISTOGRAM_TEMPORALITY))
            .saturating_add(1);
        let metric_len = string_len(METRIC_NAME, metric.name)
            .saturating_add(string_len(METRIC_DESCRIPTION, metric.description))
            .saturating_add(string_len(METRIC_UNIT, metric.unit))
            .saturating_add(len_field_len(METRIC_EXPONENTIAL_HISTOGRAM, histogram));
        let scope = string_len(SCOPE_NAME, metric.scope_name)
            .saturating_add(string_len(SCOPE_VERSION, metric.scope_version));
        let scope_field = if scope == 0 {
            0
        } else {
            len_field_len(SCOPE_METRICS_SCOPE, scope)
        };
        let scope_metrics =
            scope_field.saturating_add(len_field_len(SCOPE_METRICS_METRICS, metric_len));
        let resource = attributes_len(RESOURCE_ATTRIBUTES, metric.resource_attributes);
        let resource_field = if resource == 0 {
            0
        } else {
            len_field_len(RESOURCE_METRICS_RESOURCE, resource)
        };
        let resource_metrics = resource_field
            .saturating_add(len_field_len(RESOURCE_METRICS_SCOPE_METRICS, scope_metrics));
        Self {
            point: point_plan,
            histogram,
            metric: metric_len,
            scope,
            scope_metrics,
            resource,
            resource_metrics,
            request: len_field_len(REQUEST_RESOURCE_METRICS, resource_metrics),
        }
    }

    fn write<P: Store, N: Store, K: Sink>(
        &self,
        sink: &mut K,
        h: &ExponentialHistogram<'_, P, N>,
        point: &OtlpPoint<'_>,
        metric: &OtlpMetric<'_>,
    ) {
        sink.len_header(REQUEST_RESOURCE_METRICS, self.resource_metrics);
        if self.resource != 0 {
            sink.len_header(RESOURCE_METRICS_RESOURCE, self.resource);
            write_attributes(sink, RESOURCE_ATTRIBUTES, metric.resource_attributes);
        }
        sink.len_header(RESOURCE_METRICS_SCOPE_METRICS, self.scope_metrics);
        if self.scope != 0 {
            sink.len_header(SCOPE_METRICS_SCOPE, self.scope);
            write_string(sink, SCOPE_NAME, metric.scope_name);
            write_string(sink, SCOPE_VERSION, metric.scope_version);
        }
        sink.len_header(SCOPE_METRICS_METRICS, self.metric);
        write_string(sink, METRIC_NAME, metric.name);
        write_string(sink, METRIC_DESCRIPTION, metric.description);
        write_string(sink, METRIC_UNIT, metric.unit);
        sink.len_header(METRIC_EXPONENTIAL_HISTOGRAM, self.histogram);
        sink.len_header(HISTOGRAM_DATA_POINTS, self.point.body);
        self.point.write(sink, h, point);
        sink.varint_field(HISTOGRAM_TEMPORALITY, metric.temporality as u64);
    }
}

/// The exact length of [`encode_otlp_metrics_request`]'s output.
pub fn otlp_metrics_request_len<P: Store, N: Store>(
    histogram: &ExponentialHistogram<'_, P, N>,
    point: &OtlpPoint<'_>,
    metric: &OtlpMetric<'_>,
) -> usize {
    RequestPlan::of(histogram, point, metric).request
}

/// Encodes an OTLP `ExportMetricsServiceRequest` holding one resource, one
/// scope, one exponential-histogram metric and this one data point: the
/// body of an OTLP/HTTP `POST /v1/metrics` with
/// `Content-Type: application/x-protobuf`, or of the gRPC
/// `MetricsService/Export` call. Returns the bytes written.
///
/// ```
/// use tailguard::mapping::ExponentialMapping;
/// use tailguard::wire::{
///     encode_otlp_metrics_request, ExponentialHistogram, OtlpMetric, OtlpPoint, Temporality,
/// };
/// use tailguard::DDSketch;
///
/// let mut sketch = DDSketch::<ExponentialMapping>::with_accuracy(0.01)?;
/// sketch.add(12e6)?;
/// let metric = OtlpMetric {
///     name: "rpc.client.duration",
///     unit: "ns",
///     temporality: Temporality::Delta,
///     resource_attributes: &[("service.name", "checkout")],
///     ..OtlpMetric::default()
/// };
/// let point = OtlpPoint { time_unix_nano: 1_700_000_010_000_000_000, ..OtlpPoint::default() };
/// let mut body = [0u8; 1024];
/// let n = encode_otlp_metrics_request(&ExponentialHistogram::new(&sketch), &point, &metric, &mut body)?;
/// // POST &body[..n] to http://collector:4318/v1/metrics
/// # assert!(n > 0);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// # Errors
/// [`EncodeError::BufferTooSmall`], writing nothing.
pub fn encode_otlp_metrics_request<P: Store, N: Store>(
    histogram: &ExponentialHistogram<'_, P, N>,
    point: &OtlpPoint<'_>,
    metric: &OtlpMetric<'_>,
    buffer: &mut [u8],
) -> Result<usize, EncodeError> {
    let plan = RequestPlan::of(histogram, point, metric);
    write_checked(buffer, plan.request, |sink| {
        plan.write(sink, histogram, point, metric)
    })
}

/// The length of what a plan writes, measured by writing it to a counter:
/// what the tests hold the computed lengths against.
#[cfg(test)]
fn measured<P: Store, N: Store>(
    h: &ExponentialHistogram<'_, P, N>,
    point: &OtlpPoint<'_>,
    metric: &OtlpMetric<'_>,
) -> (usize, usize) {
    let plan = RequestPlan::of(h, point, metric);
    let mut a = super::protobuf::Counter::default();
    plan.point.write(&mut a, h, point);
    let mut b = super::protobuf::Counter::default();
    plan.write(&mut b, h, point, metric);
    (a.0, b.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::ExponentialMapping;
    use crate::{DDSketch, SignedSketch};

    #[test]
    fn computed_lengths_are_what_is_written() {
        let mut s =
            SignedSketch::<ExponentialMapping>::with_mapping(ExponentialMapping::new(4).unwrap());
        let metric = OtlpMetric {
            name: "m",
            scope_name: "s",
            resource_attributes: &[("a", ""), ("", "b")],
            ..OtlpMetric::default()
        };
        let point = OtlpPoint {
            attributes: &[("k", "v")],
            ..OtlpPoint::default()
        };
        for v in [0.0, 1.0, -3.0, 1e300, -1e-300, 5e-324] {
            s.add(v).unwrap();
            let h = ExponentialHistogram::new(&s);
            let (p, r) = measured(&h, &point, &metric);
            assert_eq!(p, otlp_data_point_len(&h, &point));
            assert_eq!(r, otlp_metrics_request_len(&h, &point, &metric));
        }
        let empty =
            DDSketch::<ExponentialMapping>::with_mapping(ExponentialMapping::new(0).unwrap());
        let h = ExponentialHistogram::new(&empty);
        let (p, r) = measured(&h, &OtlpPoint::default(), &OtlpMetric::default());
        assert_eq!(p, otlp_data_point_len(&h, &OtlpPoint::default()));
        assert_eq!(
            r,
            otlp_metrics_request_len(&h, &OtlpPoint::default(), &OtlpMetric::default())
        );
    }
}
