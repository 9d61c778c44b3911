//! OTLP export of arbitrary sketches: never a panic; the exact length
//! functions match what the encoders write; a buffer one byte short is
//! refused and left untouched; the data point's counts add up, and unless
//! it reports misplaced samples each sample is counted in the bucket its
//! value indexes to at the point's scale.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use tailguard::mapping::ExponentialMapping;
use tailguard::store::CollapsingLowestStore;
use tailguard::wire::{
    encode_otlp_data_point, encode_otlp_metrics_request, otlp_data_point_len,
    otlp_metrics_request_len, EncodeError, ExponentialHistogram, OtlpMetric, OtlpPoint,
    Temporality,
};
use tailguard::DDSketch;
use tailguard::IndexMapping;

type Sketch = DDSketch<ExponentialMapping, CollapsingLowestStore<64>, CollapsingLowestStore<64>>;

fuzz_target!(|input: (i8, Vec<(f64, u16)>, String, u64)| {
    let (scale, values, name, time) = input;
    let Some(mapping) = ExponentialMapping::new(i32::from(scale) % 21) else {
        return;
    };
    let mut sketch = Sketch::with_mapping(mapping);
    let mut kept = Vec::new();
    for (v, w) in values.into_iter().take(256) {
        // Bad values are refused.
        if sketch.add_weighted(v, u32::from(w)).is_ok() && w > 0 {
            kept.push((v, u64::from(w)));
        }
    }
    let h = ExponentialHistogram::new(&sketch);
    let buckets: u64 = h.positive().counts().chain(h.negative().counts()).sum();
    assert_eq!(buckets.saturating_add(h.zero_count()), h.count());
    if let Some(at) = ExponentialMapping::new(h.scale()).filter(|_| h.misplaced() == 0) {
        let mut expected = [BTreeMap::new(), BTreeMap::new()];
        for &(v, w) in &kept {
            if v.abs() >= f64::MIN_POSITIVE {
                *expected[usize::from(v < 0.0)]
                    .entry(at.index(v.abs()))
                    .or_insert(0u64) += w;
            }
        }
        for (side, b) in expected.iter().zip([h.positive(), h.negative()]) {
            let got: BTreeMap<i32, u64> = (b.offset()..)
                .zip(b.counts())
                .filter(|&(_, c)| c > 0)
                .collect();
            assert_eq!(&got, side, "scale {}", h.scale());
        }
    }

    let point = OtlpPoint {
        attributes: &[("k", name.as_str())],
        start_time_unix_nano: time / 2,
        time_unix_nano: time,
    };
    let metric = OtlpMetric {
        name: &name,
        unit: "ns",
        temporality: if time % 2 == 0 {
            Temporality::Delta
        } else {
            Temporality::Cumulative
        },
        ..Default::default()
    };
    let len = otlp_data_point_len(&h, &point);
    let mut buf = vec![0u8; len];
    assert_eq!(encode_otlp_data_point(&h, &point, &mut buf), Ok(len));
    let len = otlp_metrics_request_len(&h, &point, &metric);
    let mut buf = vec![0xAAu8; len];
    assert_eq!(
        encode_otlp_metrics_request(&h, &point, &metric, &mut buf),
        Ok(len)
    );
    if len > 0 {
        let mut short = vec![0xAAu8; len - 1];
        assert!(matches!(
            encode_otlp_metrics_request(&h, &point, &metric, &mut short),
            Err(EncodeError::BufferTooSmall { .. })
        ));
        assert!(short.iter().all(|&b| b == 0xAA), "a refused encoding wrote");
    }
});
