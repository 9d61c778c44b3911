//! Hostile `ddsketch.proto` messages: hand-built messages whose every field
//! may be wrong — γ of NaN, infinity, 1 or a hair above it, offsets of NaN
//! or 10³⁰⁰, unknown interpolations, keys at both ends of `i32`, counts
//! negative, NaN, infinite, fractional or beyond `u64`, contiguous runs
//! that cross `i32::MAX` — whole or cut anywhere, decoded as every mapping
//! type in either convention, into a fresh sketch, one without a negative
//! store, and one over the message's own mapping that already holds data.
//!
//! Whatever the bytes, decoding answers a typed error or a sketch, never a
//! panic; a sketch that an error comes back from is unchanged (the bytes
//! are checked before anything is added); decoding into a sketch adds
//! exactly what decoding alone gives; negative data without a negative
//! store is `NegativeValues`; and what decodes answers finite quantiles and
//! encodes to bytes that decode to the same buckets. `wire_ddsketch.rs`
//! names the error each single defect of a valid message gets.

mod common;
mod protobuf;

use common::{cases, snapshot, wire_contents};
use proptest::prelude::*;
use protobuf::{double, entry, len, mapping_msg, packed, sint, tag, varint};
use tailguard::mapping::{
    CubicMapping, ExponentialMapping, LinearMapping, LogLinearMapping, LogarithmicMapping,
};
use tailguard::store::{CollapsingLowestStore, NoStore};
use tailguard::wire::{
    ddsketch_encoded_len, decode_ddsketch, decode_ddsketch_into, encode_ddsketch, Convention,
    DecodeError, EncodeError, WireMapping,
};
use tailguard::{DDSketch, FromRelativeAccuracy, IndexMapping, SignedSketch, Store};

type Sketch<M> = SignedSketch<M, CollapsingLowestStore<64>>;
type Unsigned<M> = DDSketch<M, CollapsingLowestStore<64>, NoStore>;

/// One store: sparse `(key, count)` entries, then contiguous counts from
/// an offset.
#[derive(Clone, Debug)]
struct StoreMsg {
    sparse: Vec<(i32, f64)>,
    offset: i32,
    contiguous: Vec<f64>,
}

impl StoreMsg {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for &(key, count) in &self.sparse {
            len(&mut out, 1, &entry(key, count));
        }
        len(&mut out, 2, &packed(&self.contiguous));
        sint(&mut out, 3, self.offset);
        out
    }
}

/// A whole message; `mapping: None` names the mapping the test decodes
/// into, as its convention writes it.
#[derive(Clone, Debug)]
struct Message {
    mapping: Option<(f64, f64, u64)>,
    positive: StoreMsg,
    negative: StoreMsg,
    zero_count: Option<f64>,
}

impl Message {
    fn bytes<M: WireMapping>(&self, own: &M, convention: Convention) -> Vec<u8> {
        let (gamma, offset, interpolation) = self.mapping.unwrap_or((
            own.wire_gamma(convention),
            own.index_offset(),
            M::INTERPOLATION as u64,
        ));
        let mut out = Vec::new();
        len(&mut out, 1, &mapping_msg(gamma, offset, interpolation));
        len(&mut out, 2, &self.positive.bytes());
        len(&mut out, 3, &self.negative.bytes());
        if let Some(zeros) = self.zero_count {
            double(&mut out, 4, zeros);
        }
        out
    }
}

/// Doubles a count, γ or offset must not be, or is only just.
fn special() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        -0.0,
        0.4,
        0.5,
        1.0 + f64::EPSILON,
        1e300,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        2f64.powi(32),
        2f64.powi(53) + 2.0,
        2f64.powi(64),
    ])
}

/// Counts: mostly valid, so that a message usually has at most one bad
/// field; sometimes special, sometimes any double.
fn count() -> impl Strategy<Value = f64> {
    prop_oneof![
        24 => (0u32..100).prop_map(f64::from),
        1 => special(),
        1 => any::<f64>(),
    ]
}

/// Keys: mostly within the usual mappings' indexable range; sometimes at
/// either end of `i32`, or any.
fn key() -> impl Strategy<Value = i32> {
    prop_oneof![
        16 => -3_000i32..3_000,
        1 => prop::sample::select(vec![i32::MIN, i32::MIN + 1, i32::MAX - 1, i32::MAX]),
        1 => any::<i32>(),
    ]
}

fn store() -> impl Strategy<Value = StoreMsg> {
    (
        prop::collection::vec((key(), count()), 0..6),
        key(),
        prop::collection::vec(count(), 0..6),
    )
        .prop_map(|(sparse, offset, contiguous)| StoreMsg {
            sparse,
            offset,
            contiguous,
        })
}

/// A foreign or invalid mapping: γ, offset and interpolation.
fn hostile_mapping() -> impl Strategy<Value = (f64, f64, u64)> {
    let gamma = prop_oneof![
        special(),
        prop::sample::select(vec![
            1.0,
            1.0 + 1e-9,
            1.0 + 2e-7,
            1.02,
            2f64.sqrt(),
            2.0,
            2f64.powf(1.0 / 64.0)
        ]),
        1.0f64..3.0,
    ];
    let offset = prop_oneof![
        Just(0.0),
        special(),
        Just(f64::from(i32::MAX)),
        Just(-f64::from(1 << 30)),
        -100.0f64..100.0,
    ];
    let interpolation = prop_oneof![0u64..4, Just(1 << 32), Just(u64::MAX)];
    (gamma, offset, interpolation)
}

fn message() -> impl Strategy<Value = Message> {
    (
        prop_oneof![3 => Just(None), 1 => hostile_mapping().prop_map(Some)],
        store(),
        store(),
        prop::option::of(count()),
    )
        .prop_map(|(mapping, positive, negative, zero_count)| Message {
            mapping,
            positive,
            negative,
            zero_count,
        })
}

/// Everything promised of `bytes` decoded as `M` in `convention`;
/// `holding` is a sketch over the mapping `M` the message may name.
fn survives<M: WireMapping>(
    bytes: &[u8],
    convention: Convention,
    holding: &Sketch<M>,
) -> Result<(), TestCaseError> {
    let what = format!("{:?} {convention:?}", holding.mapping());
    let decoded: Result<(Sketch<M>, _), _> = decode_ddsketch(bytes, convention);
    // Without a negative store: the same, or refused for negative data.
    let unsigned: Result<(Unsigned<M>, _), _> = decode_ddsketch(bytes, convention);
    match &decoded {
        Ok((s, _)) if s.negative_store().total() > 0 => {
            prop_assert_eq!(
                unsigned.err(),
                Some(DecodeError::NegativeValues),
                "{}",
                what
            );
        }
        Ok((s, _)) => {
            let (u, _): (Unsigned<M>, _) =
                unsigned.map_err(|e| TestCaseError::fail(format!("{what}: {e:?}")))?;
            prop_assert_eq!(wire_contents(&u), wire_contents(s), "{}", what);
        }
        Err(_) => prop_assert!(unsigned.is_err(), "{}", what),
    }
    // Into a sketch that holds data: all of it added, or nothing.
    let mut into = holding.clone();
    match decode_ddsketch_into(&mut into, bytes, convention) {
        Ok(_) => {
            let (s, _) = decoded
                .as_ref()
                .map_err(|e| TestCaseError::fail(format!("{what}: decoded into, alone {e:?}")))?;
            let mut merged = holding.clone();
            merged.merge(s).unwrap();
            prop_assert_eq!(wire_contents(&into), wire_contents(&merged), "{}", what);
        }
        Err(_) => prop_assert_eq!(
            snapshot(&into),
            snapshot(holding),
            "{}: an error changed the sketch",
            what
        ),
    }
    let Ok((s, _)) = decoded else {
        return Ok(());
    };
    if s.count() > 0 {
        for q in [0.0, 0.5, 1.0] {
            let v = s.quantile(q).unwrap().unwrap();
            prop_assert!(v.is_finite(), "{}: q = {} gives {}", what, q, v);
        }
    }
    let len = match ddsketch_encoded_len(&s, convention) {
        Ok(len) => len,
        // Python's convention shifts keys up by one.
        Err(EncodeError::KeyOutOfRange(_)) if convention == Convention::Python => return Ok(()),
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "{what}: decoded, not encoded: {e:?}"
            )))
        }
    };
    let mut again = vec![0; len];
    prop_assert_eq!(encode_ddsketch(&s, convention, &mut again), Ok(len));
    let (back, _): (Sketch<M>, _) = decode_ddsketch(&again, convention)
        .map_err(|e| TestCaseError::fail(format!("{what}: re-encoded, not decoded: {e:?}")))?;
    prop_assert_eq!(wire_contents(&back), wire_contents(&s), "{}", what);
    Ok(())
}

/// [`survives`] for the message built for `M` at α = 1 %, whole and cut
/// at `cut`, in both conventions.
fn every_way<M: WireMapping + FromRelativeAccuracy>(
    message: &Message,
    cut: prop::sample::Index,
) -> Result<(), TestCaseError> {
    let mut holding = Sketch::<M>::with_accuracy(0.01).unwrap();
    holding.add_all(&[-3.0, 0.0, 3.0, 3.0]).unwrap();
    for convention in [Convention::GoJava, Convention::Python] {
        let bytes = message.bytes(holding.mapping(), convention);
        survives(&bytes, convention, &holding)?;
        survives(&bytes[..cut.index(bytes.len())], convention, &holding)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Any message, whole or cut, decoded every way, keeps every promise.
    #[test]
    fn hostile_messages_get_typed_errors_and_change_nothing(
        message in message(),
        cut in any::<prop::sample::Index>(),
    ) {
        every_way::<LogarithmicMapping>(&message, cut)?;
        every_way::<CubicMapping>(&message, cut)?;
        every_way::<LinearMapping>(&message, cut)?;
        every_way::<LogLinearMapping>(&message, cut)?;
        every_way::<ExponentialMapping>(&message, cut)?;
    }
}

/// A length prefix past the end of the message is `Truncated`, however
/// large: no position arithmetic wraps, nothing is allocated for it.
#[test]
fn a_length_past_the_end_is_truncated_however_large() {
    let m = LogarithmicMapping::new(0.01).unwrap();
    let mut valid = Vec::new();
    len(&mut valid, 1, &mapping_msg(m.gamma(), 0.0, 0));
    // The fields whose length is given: the mapping, either store, and in
    // the positive store its sparse entries and its packed counts.
    let fields = [(None, 1), (None, 2), (None, 3), (Some(2), 1), (Some(2), 2)];
    for length in [5, 1 << 31, 1 << 32, 1 << 63, u64::MAX] {
        for (store, field) in fields {
            let mut body = Vec::new();
            tag(&mut body, field, 2);
            varint(&mut body, length);
            body.push(0);
            if let Some(store) = store {
                // Inside a store field of exactly its length.
                let mut wrapped = Vec::new();
                len(&mut wrapped, store, &body);
                body = wrapped;
            }
            let bytes = [valid.as_slice(), &body].concat();
            let r = decode_ddsketch::<LogarithmicMapping, CollapsingLowestStore<64>, NoStore>(
                &bytes,
                Convention::GoJava,
            );
            assert_eq!(
                r.err(),
                Some(DecodeError::Truncated),
                "field {field} in {store:?}, length {length}"
            );
        }
    }
}
