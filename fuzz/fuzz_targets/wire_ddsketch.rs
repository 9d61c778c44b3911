//! DataDog protobuf decoding of arbitrary bytes: never a panic, and what
//! decodes re-encodes (in the same convention) to bytes that decode to the
//! same buckets. Decodes into a wide signed sketch, a small collapsing one
//! and one without a negative store (and an OpenTelemetry-scale one), in
//! both producer conventions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::mapping::{CubicMapping, ExponentialMapping, LinearMapping, LogarithmicMapping};
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore, NoStore, Store};
use tailguard::wire::{
    ddsketch_encoded_len, decode_ddsketch, decode_ddsketch_into, encode_ddsketch, Convention,
    DecodeError, WireMapping,
};

fn bins<S: Store>(s: &S) -> Vec<(i32, u32)> {
    s.bins().collect()
}

fn round_trip<M: WireMapping, P: Store, N: Store>(bytes: &[u8], convention: Convention) {
    let Ok((sketch, _)) = decode_ddsketch::<M, P, N>(bytes, convention) else {
        return;
    };
    // Representatives are kept within the indexable range: never infinite.
    if sketch.count() > 0 {
        for q in [0.0, 1.0] {
            let v = sketch.quantile(q).expect("a valid quantile");
            assert!(v.is_some_and(f64::is_finite), "quantile {q}: {v:?}");
        }
    }
    let len = ddsketch_encoded_len(&sketch, convention).expect("a decoded sketch encodes");
    let mut buf = vec![0u8; len];
    assert_eq!(encode_ddsketch(&sketch, convention, &mut buf), Ok(len));
    match decode_ddsketch::<M, P, N>(&buf, convention) {
        Ok((again, report)) => {
            assert_eq!(report.rounded, 0);
            // A saturated zero count, u64::MAX, is written as the nearest
            // double, 2^64: one more than it holds.
            let saturated = u64::from(sketch.zero_count() == u64::MAX);
            assert_eq!(report.overflow, saturated);
            assert_eq!(again.count(), sketch.count());
            assert_eq!(again.zero_count(), sketch.zero_count());
            assert_eq!(bins(again.positive_store()), bins(sketch.positive_store()));
            assert_eq!(bins(again.negative_store()), bins(sketch.negative_store()));
        }
        // Go/Java bytes carry the mapping's own γ: the same mapping, the
        // same key limits, so every key comes back. Python's carry the
        // textbook γ of its α, a hair wider, whose buckets drift from the
        // decoded ones: a key at an end of the range may then leave it.
        Err(DecodeError::KeyOutOfRange(_)) if convention == Convention::Python => {}
        // Python's bytes carry (1+α)/(1−α) of the proven α: for an α within
        // a hair of 1 (γ in the hundreds of billions) that overshoots the
        // largest γ a mapping accepts. Known, and far from any real sketch.
        Err(DecodeError::Mapping(_))
            if convention == Convention::Python
                && sketch.mapping().relative_accuracy() > 1.0 - 1e-6 => {}
        Err(e) => panic!("re-decoding failed: {e:?}"),
    }
    // Merging the bytes into what they decoded to: checked first, so an
    // error leaves the sketch alone.
    let mut twice = sketch.clone();
    if decode_ddsketch_into(&mut twice, bytes, convention).is_ok() {
        assert_eq!(twice.zero_count(), sketch.zero_count().saturating_mul(2),);
    } else {
        assert_eq!(twice.count(), sketch.count());
    }
}

fuzz_target!(|bytes: &[u8]| {
    for convention in [Convention::GoJava, Convention::Python] {
        type Wide = CollapsingLowestStore<2048>;
        round_trip::<LogarithmicMapping, Wide, Wide>(bytes, convention);
        round_trip::<CubicMapping, CollapsingLowestStore<16>, CollapsingHighestStore<16>>(
            bytes, convention,
        );
        round_trip::<LinearMapping, CollapsingLowestStore<64>, NoStore>(bytes, convention);
        round_trip::<ExponentialMapping, CollapsingLowestStore<256>, CollapsingLowestStore<256>>(
            bytes, convention,
        );
    }
});
