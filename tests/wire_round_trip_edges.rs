//! DataDog's `ddsketch.proto` round trips at the edges of every mapping's
//! parameters: relative accuracies from `MIN_RELATIVE_ACCURACY` to just
//! below 1, index offsets (fractional and up to ±10⁶ for the log-like
//! mappings, up to ±2³⁰ keys for `LogLinearMapping`), values on the edges
//! of the indexable range in both signs, weights, and zero counts of any
//! `u32` size.
//!
//! Encoded for either convention, the stated length is exact and a
//! buffer one byte short is refused and left untouched; the bytes decode
//! cleanly to the same buckets, zero count and count. Go/Java bytes give
//! an equal mapping back and merge into the original. Only a key that
//! Python's convention shifts past `i32::MAX` (a `LogLinearMapping` at the
//! smallest α) is refused, on encoding, as documented.
//! `wire_ddsketch.rs` covers the format itself at the usual accuracies.

mod common;

use common::{cases, extreme_alpha, place, wire_contents, Place};
use proptest::prelude::*;
use tailguard::mapping::{
    CubicMapping, ExponentialMapping, LinearMapping, LogLinearMapping, LogarithmicMapping,
};
use tailguard::store::CollapsingLowestStore;
use tailguard::wire::{
    ddsketch_encoded_len, decode_ddsketch, decode_ddsketch_into, encode_ddsketch, Convention,
    DecodeReport, EncodeError, WireMapping,
};
use tailguard::{FromRelativeAccuracy, IndexMapping, SignedSketch};

type Sketch<M> = SignedSketch<M, CollapsingLowestStore<64>>;

/// A sketch over `m` of `samples` (those in range) and `zeros` zeros,
/// through both conventions.
fn round_trips<M: WireMapping>(
    m: M,
    samples: &[(Place, bool, u32)],
    zeros: u32,
) -> Result<(), TestCaseError> {
    let mut s = Sketch::with_mapping(m);
    for &(place, negative, weight) in samples {
        let v = place.value(&m);
        // Values beyond the range are refused, as `sketch_edges.rs` checks.
        let _ = s.add_weighted(if negative { -v } else { v }, weight);
    }
    s.add_weighted(0.0, zeros).unwrap();
    for convention in [Convention::GoJava, Convention::Python] {
        let what = format!("{m:?} {convention:?}");
        let len = match ddsketch_encoded_len(&s, convention) {
            Ok(len) => len,
            Err(EncodeError::KeyOutOfRange(k)) if convention == Convention::Python => {
                prop_assert_eq!(k, i64::from(i32::MAX) + 1, "{}", what);
                continue;
            }
            Err(e) => return Err(TestCaseError::fail(format!("{what}: {e:?}"))),
        };
        let mut short = vec![0x5a; len - 1];
        prop_assert_eq!(
            encode_ddsketch(&s, convention, &mut short),
            Err(EncodeError::BufferTooSmall {
                needed: len,
                available: len - 1
            })
        );
        prop_assert!(
            short.iter().all(|&b| b == 0x5a),
            "{}: a refused encoding wrote",
            what
        );
        let mut bytes = vec![0; len];
        prop_assert_eq!(encode_ddsketch(&s, convention, &mut bytes), Ok(len));
        let (back, report): (Sketch<M>, _) = decode_ddsketch(&bytes, convention)
            .map_err(|e| TestCaseError::fail(format!("{what}: {e:?}")))?;
        prop_assert_eq!(report, DecodeReport::default(), "{}", what);
        prop_assert_eq!(wire_contents(&back), wire_contents(&s), "{}", what);
        if convention == Convention::GoJava {
            prop_assert_eq!(*back.mapping(), m);
            let mut twice = s.clone();
            prop_assert!(decode_ddsketch_into(&mut twice, &bytes, convention).is_ok());
            prop_assert_eq!(twice.count(), 2 * s.count(), "{}", what);
            prop_assert_eq!(twice.zero_count(), 2 * s.zero_count(), "{}", what);
        }
    }
    Ok(())
}

/// `M` at `alpha`, moved by `offset` where `with_gamma` takes it (close to
/// α = 1 it may not).
fn shifted<M: IndexMapping + FromRelativeAccuracy>(
    alpha: f64,
    offset: f64,
    with_gamma: impl Fn(f64, f64) -> Result<M, tailguard::mapping::MappingError>,
) -> M {
    let m = M::from_relative_accuracy(alpha).unwrap();
    with_gamma(m.gamma(), offset).unwrap_or(m)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Every mapping round trips at the edges of its parameters.
    #[test]
    fn every_mapping_round_trips_at_its_edges(
        a in extreme_alpha(),
        offset in prop_oneof![Just(0.0), Just(0.5), Just(-0.25), Just(1e6), Just(-1e6), -1e4f64..1e4],
        bits in 0u32..=23,
        key_offset in prop_oneof![Just(0i32), Just(1 << 30), Just(-(1 << 30)), -(1 << 30)..1 << 30],
        samples in prop::collection::vec((place(), any::<bool>(), 1u32..=255), 1..40),
        zeros in any::<u32>(),
    ) {
        round_trips(shifted(a, offset, LogarithmicMapping::with_gamma), &samples, zeros)?;
        round_trips(shifted(a, offset, CubicMapping::with_gamma), &samples, zeros)?;
        round_trips(shifted(a, offset, LinearMapping::with_gamma), &samples, zeros)?;
        round_trips(LogLinearMapping::new(a).unwrap(), &samples, zeros)?;
        round_trips(LogLinearMapping::with_bits(bits, key_offset).unwrap(), &samples, zeros)?;
        if let Ok(m) = ExponentialMapping::from_relative_accuracy(a) {
            round_trips(m, &samples, zeros)?;
        }
    }
}
