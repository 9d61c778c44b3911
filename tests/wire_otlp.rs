//! Sketches over `ExponentialMapping` as OpenTelemetry exponential-histogram
//! data points: our OTLP bytes decoded by `opentelemetry-proto`'s generated
//! types, every field compared with the sketch, and every bucket with an
//! independent count of the samples by the specification's index formula.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point::Buckets as PbBuckets, metric, AggregationTemporality,
    ExponentialHistogramDataPoint,
};
use proptest::prelude::*;
use prost::Message;
use std::collections::BTreeMap;
use tailguard::mapping::ExponentialMapping;
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore, NoStore, Store};
use tailguard::wire::{
    encode_otlp_data_point, encode_otlp_metrics_request, otlp_data_point_len,
    otlp_data_point_max_len, otlp_metrics_request_len, EncodeError, ExponentialHistogram,
    OtlpMetric, OtlpPoint, Temporality,
};
use tailguard::{DDSketch, SignedSketch};

/// The specification's index: exponent method at scales <= 0, logarithm
/// with the power-of-two case above (exact for the data used here).
fn spec_index(v: f64, scale: i32) -> i32 {
    let bits = v.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let power = bits & ((1 << 52) - 1) == 0;
    if scale <= 0 {
        return (if power { e - 1 } else { e }) >> -scale;
    }
    if power {
        return (e << scale) - 1;
    }
    (v.ln() * std::f64::consts::LOG2_E * 2f64.powi(scale)).floor() as i32
}

/// Samples of both signs over twelve decades, powers of two among them,
/// zeros and subnormals (counted as zeros).
fn data() -> Vec<f64> {
    let mut d: Vec<f64> = (0..4000)
        .map(|i| {
            let m = 1.0071f64.powi(i % 3900) * 1e-6;
            if i % 5 == 0 {
                -m
            } else {
                m
            }
        })
        .collect();
    d.extend((-20..40).map(|e| 2f64.powi(e)));
    d.extend([0.0, 0.0, -0.0, 1e-310, -3e-320]);
    d
}

fn attrs(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("not a string: {other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn dense(b: &Option<PbBuckets>) -> BTreeMap<i32, u64> {
    let Some(b) = b else { return BTreeMap::new() };
    assert!(b.bucket_counts.first().is_some_and(|&c| c > 0));
    assert!(b.bucket_counts.last().is_some_and(|&c| c > 0));
    b.bucket_counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| (b.offset + i as i32, c))
        .collect()
}

fn check_point<P: Store, N: Store>(
    pb: &ExponentialHistogramDataPoint,
    sketch: &DDSketch<ExponentialMapping, P, N>,
    point: &OtlpPoint<'_>,
) {
    let shift = ExponentialHistogram::new(sketch).downscaled();
    assert_eq!(pb.scale, sketch.mapping().scale() - shift as i32);
    assert_eq!(pb.count, sketch.count());
    assert_eq!(pb.zero_count, sketch.zero_count());
    assert_eq!(pb.zero_threshold, f64::MIN_POSITIVE.next_down());
    assert_eq!(pb.min, sketch.min());
    assert_eq!(pb.max, sketch.max());
    let signed = sketch.min().is_some_and(|m| m < 0.0);
    assert_eq!(pb.sum, if signed { None } else { sketch.sum() });
    assert_eq!(pb.start_time_unix_nano, point.start_time_unix_nano);
    assert_eq!(pb.time_unix_nano, point.time_unix_nano);
    let expected: Vec<(String, String)> = point
        .attributes
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(attrs(&pb.attributes), expected);
    assert_eq!(pb.flags, 0);
    assert!(pb.exemplars.is_empty());
    // The sketch's buckets, merged in pairs `shift` times.
    let store = |s: &dyn Fn() -> Vec<(i32, u32)>| -> BTreeMap<i32, u64> {
        let mut merged = BTreeMap::new();
        for (k, c) in s() {
            *merged.entry(k >> shift).or_default() += u64::from(c);
        }
        merged
    };
    assert_eq!(
        dense(&pb.positive),
        store(&|| sketch.positive_store().bins().collect())
    );
    assert_eq!(
        dense(&pb.negative),
        store(&|| sketch.negative_store().bins().collect())
    );
    // OTLP's invariant: count = zero count + every bucket.
    let buckets: u64 = [&pb.positive, &pb.negative]
        .iter()
        .filter_map(|b| b.as_ref())
        .flat_map(|b| b.bucket_counts.iter())
        .sum();
    assert_eq!(pb.count, pb.zero_count + buckets);
}

/// 16 384 buckets a side: no collapse for either data set (60 octaves at scale 8).
type Wide = SignedSketch<ExponentialMapping, CollapsingLowestStore<{ 1 << 14 }>>;

#[test]
fn data_points_decode_field_by_field_and_bucket_by_bucket() {
    let point = OtlpPoint {
        attributes: &[
            ("http.route", "/checkout"),
            ("region", "eu-west-1"),
            ("empty", ""),
        ],
        start_time_unix_nano: 1_700_000_000_000_000_000,
        time_unix_nano: 1_700_000_060_000_000_000,
    };
    // Twelve decades at scales up to 8; a narrow range at the finest.
    let narrow: Vec<f64> = (0..3000)
        .map(|i| (1.0 + f64::from(i % 1500) * 1.3e-6) * if i % 4 == 0 { -1.0 } else { 1.0 })
        .chain([1.0, 1.0, -1.0, 0.0])
        .collect();
    let cases = [-4, -1, 0, 1, 3, 5, 8]
        .map(|s| (s, data()))
        .into_iter()
        .chain([12, 16, 20].map(|s| (s, narrow.clone())));
    for (scale, values) in cases {
        let m = ExponentialMapping::new(scale).unwrap();
        let mut s = Box::new(Wide::with_mapping(m));
        s.add_all(&values).unwrap();
        assert!(s.collapse().is_none() && s.negative_collapse().is_none());
        let h = ExponentialHistogram::new(&*s);
        let len = otlp_data_point_len(&h, &point);
        let mut buf = vec![0u8; len];
        assert_eq!(encode_otlp_data_point(&h, &point, &mut buf), Ok(len));
        let pb = ExponentialHistogramDataPoint::decode(buf.as_slice()).unwrap();
        check_point(&pb, &s, &point);
        // Independently: the samples counted by the specification's index.
        let mut by_spec: [BTreeMap<i32, u64>; 2] = Default::default();
        let mut zeros = 0;
        for &v in &values {
            if v.abs() >= f64::MIN_POSITIVE {
                *by_spec[usize::from(v < 0.0)]
                    .entry(spec_index(v.abs(), scale))
                    .or_default() += 1;
            } else {
                zeros += 1;
            }
        }
        assert_eq!(dense(&pb.positive), by_spec[0], "scale {scale}");
        assert_eq!(dense(&pb.negative), by_spec[1], "scale {scale}");
        assert_eq!(pb.zero_count, zeros);
    }
}

#[test]
fn unsigned_empty_and_collapsed_sketches() {
    // Positive only: the sum is there.
    let mut s = DDSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    s.add_all(&[3e6, 4e6, 5e9]).unwrap();
    let point = OtlpPoint::default();
    let h = ExponentialHistogram::new(&s);
    let mut buf = vec![0u8; otlp_data_point_max_len(1024, 0)];
    let n = encode_otlp_data_point(&h, &point, &mut buf).unwrap();
    let pb = ExponentialHistogramDataPoint::decode(&buf[..n]).unwrap();
    check_point(&pb, &s, &point);
    assert_eq!(pb.sum, Some(3e6 + 4e6 + 5e9));
    assert!(pb.negative.is_none());
    // Empty: nothing but the scale and the zero threshold.
    let e = DDSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    let n = encode_otlp_data_point(&ExponentialHistogram::new(&e), &point, &mut buf).unwrap();
    let pb = ExponentialHistogramDataPoint::decode(&buf[..n]).unwrap();
    check_point(&pb, &e, &point);
    assert_eq!(
        (pb.count, pb.sum, pb.min, pb.positive.is_none()),
        (0, None, None, true)
    );
    // Collapsed: downscaled until every sample is counted in its own
    // bucket, and the counts still add up.
    let mut c =
        DDSketch::<ExponentialMapping, CollapsingLowestStore<16>, NoStore>::with_accuracy(0.05)
            .unwrap();
    // Above 1: within the reach of scale −10, whose two buckets hold the
    // values up to 1 and those above.
    let values: Vec<f64> = data().into_iter().filter(|v| *v > 1.0).collect();
    c.add_all(&values).unwrap();
    assert!(c.collapse().is_some());
    let h = ExponentialHistogram::new(&c);
    assert!(h.downscaled() > 0 && h.misplaced() == 0);
    let n = encode_otlp_data_point(&h, &point, &mut buf).unwrap();
    let pb = ExponentialHistogramDataPoint::decode(&buf[..n]).unwrap();
    check_point(&pb, &c, &point);
    assert_eq!(
        counted_by_spec(&values, pb.scale),
        [dense(&pb.positive), dense(&pb.negative)]
    );
    // With a zero beside them the smallest positive value is unknown: the
    // point is left at the sketch's scale, its folded samples reported.
    c.add(0.0).unwrap();
    let h = ExponentialHistogram::new(&c);
    assert_eq!(
        (h.downscaled(), h.misplaced()),
        (0, c.collapse().unwrap().samples)
    );
}

/// The samples counted by the specification's index at `scale`, positive
/// and negative (by magnitude); zeros and subnormals left out.
fn counted_by_spec(values: &[f64], scale: i32) -> [BTreeMap<i32, u64>; 2] {
    let mut by_spec: [BTreeMap<i32, u64>; 2] = Default::default();
    for &v in values {
        if v.abs() >= f64::MIN_POSITIVE {
            *by_spec[usize::from(v < 0.0)]
                .entry(spec_index(v.abs(), scale))
                .or_default() += 1;
        }
    }
    by_spec
}

#[test]
fn lengths_are_exact_and_bounded() {
    type Small = DDSketch<ExponentialMapping, CollapsingLowestStore<64>, CollapsingLowestStore<32>>;
    let mut s = Small::with_accuracy(0.02).unwrap();
    // Large counts make the longest varints.
    for v in data() {
        s.add_weighted(v, u32::MAX).unwrap();
    }
    let h = ExponentialHistogram::new(&s);
    let point = OtlpPoint {
        start_time_unix_nano: u64::MAX,
        time_unix_nano: 1,
        attributes: &[],
    };
    let len = otlp_data_point_len(&h, &point);
    assert!(len <= otlp_data_point_max_len(64, 32), "{len}");
    let mut buf = vec![0x5au8; len - 1];
    assert_eq!(
        encode_otlp_data_point(&h, &point, &mut buf),
        Err(EncodeError::BufferTooSmall {
            needed: len,
            available: len - 1
        })
    );
    assert!(buf.iter().all(|&b| b == 0x5a));
    let metric = OtlpMetric {
        name: "x",
        ..OtlpMetric::default()
    };
    let len = otlp_metrics_request_len(&h, &point, &metric);
    let mut buf = vec![0u8; len + 10];
    assert_eq!(
        encode_otlp_metrics_request(&h, &point, &metric, &mut buf),
        Ok(len)
    );
    assert_eq!(
        encode_otlp_metrics_request(&h, &point, &metric, &mut buf[..len - 1]),
        Err(EncodeError::BufferTooSmall {
            needed: len,
            available: len - 1
        })
    );
    assert_eq!(otlp_data_point_max_len(1024, 0), 10_330);
}

#[test]
fn export_requests_decode_as_opentelemetry_would() {
    let mut s = SignedSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    s.add_all(&[-2.0, 1.0, 3.5, 1e-9, 7e9]).unwrap();
    let h = ExponentialHistogram::new(&s);
    let point = OtlpPoint {
        attributes: &[("peer", "db-1")],
        start_time_unix_nano: 10,
        time_unix_nano: 20,
    };
    for temporality in [Temporality::Delta, Temporality::Cumulative] {
        let metric = OtlpMetric {
            name: "rpc.client.duration",
            description: "Latency of outgoing calls",
            unit: "ns",
            temporality,
            resource_attributes: &[("service.name", "checkout"), ("host.name", "h1")],
            scope_name: "tailguard",
            scope_version: "0.1.0",
        };
        let mut buf = vec![0u8; otlp_metrics_request_len(&h, &point, &metric)];
        let n = encode_otlp_metrics_request(&h, &point, &metric, &mut buf).unwrap();
        let request = ExportMetricsServiceRequest::decode(&buf[..n]).unwrap();
        assert_eq!(request.resource_metrics.len(), 1);
        let rm = &request.resource_metrics[0];
        assert_eq!(
            attrs(&rm.resource.as_ref().unwrap().attributes),
            [
                ("service.name".into(), "checkout".into()),
                ("host.name".into(), "h1".into())
            ]
        );
        assert_eq!(rm.scope_metrics.len(), 1);
        let sm = &rm.scope_metrics[0];
        let scope = sm.scope.as_ref().unwrap();
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("tailguard", "0.1.0")
        );
        assert_eq!(sm.metrics.len(), 1);
        let m = &sm.metrics[0];
        assert_eq!(
            (m.name.as_str(), m.description.as_str(), m.unit.as_str()),
            ("rpc.client.duration", "Latency of outgoing calls", "ns")
        );
        let Some(metric::Data::ExponentialHistogram(eh)) = &m.data else {
            panic!("not an exponential histogram: {:?}", m.data)
        };
        let expected = match temporality {
            Temporality::Delta => AggregationTemporality::Delta,
            Temporality::Cumulative => AggregationTemporality::Cumulative,
        };
        assert_eq!(eh.aggregation_temporality, expected as i32);
        assert_eq!(eh.data_points.len(), 1);
        check_point(&eh.data_points[0], &s, &point);
        // The embedded point is byte for byte the standalone encoding.
        let mut alone = vec![0u8; otlp_data_point_len(&h, &point)];
        encode_otlp_data_point(&h, &point, &mut alone).unwrap();
        assert_eq!(eh.data_points[0].encode_to_vec(), alone);
    }
    // A bare request: no resource, no scope.
    let metric = OtlpMetric {
        name: "m",
        ..OtlpMetric::default()
    };
    let mut buf = vec![0u8; 4096];
    let n = encode_otlp_metrics_request(&h, &OtlpPoint::default(), &metric, &mut buf).unwrap();
    let request = ExportMetricsServiceRequest::decode(&buf[..n]).unwrap();
    let rm = &request.resource_metrics[0];
    assert!(rm.resource.is_none() && rm.scope_metrics[0].scope.is_none());
}

/// Samples that saturation dropped are in the sketch's sum and not in its
/// count: the exported sum is that of the counted samples, so that
/// `sum / count` is the sketch's mean. Without saturation it is the
/// sketch's sum, bit for bit.
#[test]
fn a_saturated_bucket_leaves_sum_over_count_at_the_mean() {
    let decoded = |h: &ExponentialHistogram<'_, _, _>| {
        let mut buf = vec![0u8; otlp_data_point_len(h, &OtlpPoint::default())];
        encode_otlp_data_point(h, &OtlpPoint::default(), &mut buf).unwrap();
        ExponentialHistogramDataPoint::decode(buf.as_slice()).unwrap()
    };
    let mut s = DDSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    s.add(4.2e6).unwrap();
    s.add_weighted(1.0, u32::MAX).unwrap();
    s.add_weighted(1.0, u32::MAX).unwrap();
    assert_eq!(s.saturated(), u64::from(u32::MAX));
    let h = ExponentialHistogram::new(&s);
    assert_eq!(h.count(), 1 << 32);
    let sum = h.sum().unwrap();
    let consumer = sum / h.count() as f64;
    let mean = s.mean().unwrap();
    assert!(
        (consumer - mean).abs() <= 2.0 * f64::EPSILON * mean,
        "sum {sum}, count {}: mean {consumer}, the sketch's {mean}",
        h.count()
    );
    assert!((consumer - 1.0).abs() < 1e-3, "{consumer}");
    let pb = decoded(&h);
    assert_eq!(pb.count, h.count());
    assert_eq!(pb.sum.map(f64::to_bits), Some(sum.to_bits()));
    assert_eq!((pb.min, pb.max), (Some(1.0), Some(4.2e6)));
    let buckets: u64 = pb.positive.iter().flat_map(|b| &b.bucket_counts).sum();
    assert_eq!(pb.count, pb.zero_count + buckets);

    // No saturation: the sketch's sum, unchanged.
    let mut t = DDSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    t.add(4.2e6).unwrap();
    t.add_weighted(1e5, u32::MAX).unwrap();
    t.add_all(&[7e4, 3e5, 2e6]).unwrap();
    assert!(t.collapse().is_none());
    assert_eq!(t.saturated(), 0);
    let h = ExponentialHistogram::new(&t);
    assert_eq!(h.sum().map(f64::to_bits), t.sum().map(f64::to_bits));
    assert_eq!(decoded(&h).sum.map(f64::to_bits), t.sum().map(f64::to_bits));
}

/// A reviewer's case: the README's scale 6 over 1 024 buckets (a 2¹⁶
/// range) fed 90 % of samples near 1 µs and 10 % near 1 s. The store folds
/// the fast ones into its lowest bucket, (2.01e4, 2.04e4]; read at scale 6
/// a consumer took their median for 2·10⁴, twenty times the true one. The
/// point is downscaled until that bucket holds `min` too.
#[test]
fn a_collapsed_point_counts_every_sample_in_its_own_bucket() {
    let values: Vec<f64> = (0..3_000u32)
        .map(|i| {
            let jitter = 1.0 + f64::from(i % 97) / 100.0;
            if i % 10 == 9 {
                1e9 * jitter
            } else {
                1e3 * jitter
            }
        })
        .collect();
    let mut s = DDSketch::<ExponentialMapping, CollapsingLowestStore<1024>, NoStore>::with_mapping(
        ExponentialMapping::new(6).unwrap(),
    );
    s.add_all(&values).unwrap();
    assert!(s.collapse().is_some());
    let h = ExponentialHistogram::new(&s);
    let point = OtlpPoint::default();
    let mut buf = vec![0u8; otlp_data_point_len(&h, &point)];
    encode_otlp_data_point(&h, &point, &mut buf).unwrap();
    let pb = ExponentialHistogramDataPoint::decode(buf.as_slice()).unwrap();
    check_point(&pb, &s, &point);
    assert!(pb.scale < 6, "scale {}", pb.scale);
    assert_eq!(
        counted_by_spec(&values, pb.scale),
        [dense(&pb.positive), dense(&pb.negative)]
    );
    // The consumer's median bucket now holds the true median.
    let mut sorted = values.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[(sorted.len() - 1) / 2];
    let (mut seen, mut bucket) = (0, None);
    for (&i, &c) in &dense(&pb.positive) {
        seen += c;
        if seen > (pb.count - 1) / 2 {
            bucket = Some(i);
            break;
        }
    }
    assert_eq!(bucket, Some(spec_index(median, pb.scale)));
}

/// Decodes the OTLP bytes of `h`.
fn decoded<P: Store, N: Store>(
    h: &ExponentialHistogram<'_, P, N>,
) -> ExponentialHistogramDataPoint {
    let point = OtlpPoint::default();
    let mut buf = vec![0u8; otlp_data_point_len(h, &point)];
    encode_otlp_data_point(h, &point, &mut buf).unwrap();
    ExponentialHistogramDataPoint::decode(buf.as_slice()).unwrap()
}

proptest! {
    /// Any data, either sign, stores of 8 and 64 buckets collapsing on
    /// either side: unless it reports misplaced samples, the point counts
    /// every sample in the bucket the specification gives it at the
    /// point's scale; and it reports none where every sample is above 1.
    #[test]
    fn every_sample_is_counted_in_its_own_bucket(
        values in proptest::collection::vec(
            prop_oneof![
                (-300.0f64..300.0).prop_map(|e| 10f64.powf(e)),
                (-300.0f64..300.0).prop_map(|e| -(10f64.powf(e))),
                0.5f64..2.0,
            ],
            1..200,
        ),
        scale in -3i32..=8,
    ) {
        let m = ExponentialMapping::new(scale).unwrap();
        let mut low = SignedSketch::<ExponentialMapping, CollapsingLowestStore<8>>::with_mapping(m);
        let mut high =
            SignedSketch::<ExponentialMapping, CollapsingHighestStore<64>>::with_mapping(m);
        low.add_all(&values).unwrap();
        high.add_all(&values).unwrap();
        let above_one = values.iter().all(|&v| v > 1.0);
        for (pb, misplaced) in [
            (decoded(&ExponentialHistogram::new(&low)), ExponentialHistogram::new(&low).misplaced()),
            (decoded(&ExponentialHistogram::new(&high)), ExponentialHistogram::new(&high).misplaced()),
        ] {
            if misplaced == 0 {
                prop_assert_eq!(
                    counted_by_spec(&values, pb.scale),
                    [dense(&pb.positive), dense(&pb.negative)]
                );
            } else {
                prop_assert!(!above_one);
            }
        }
    }
}

#[test]
fn a_sum_that_overflowed_is_left_out_not_exported_as_infinity() {
    let mut s = DDSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    s.add(1.7e308).unwrap();
    s.add(1.7e308).unwrap();
    assert_eq!(s.sum(), Some(f64::INFINITY));
    let h = ExponentialHistogram::new(&s);
    assert_eq!(h.sum(), None);
    let p = decoded(&h);
    assert_eq!(p.sum, None);
    assert_eq!((p.count, p.max), (2, Some(1.7e308)));
    // A finite sum is kept.
    let mut s = DDSketch::<ExponentialMapping>::with_accuracy(0.01).unwrap();
    s.add(1.7e308).unwrap();
    assert_eq!(decoded(&ExponentialHistogram::new(&s)).sum, Some(1.7e308));
}
