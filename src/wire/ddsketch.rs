//! DataDog's `ddsketch.proto`, encoded into and decoded from caller slices.
//!
//! ```text
//! message DDSketch     { IndexMapping mapping = 1; Store positiveValues = 2;
//!                        Store negativeValues = 3; double zeroCount = 4; }
//! message IndexMapping { double gamma = 1; double indexOffset = 2;
//!                        Interpolation interpolation = 3; }  // NONE LINEAR QUADRATIC CUBIC
//! message Store        { map<sint32, double> binCounts = 1;
//!                        repeated double contiguousBinCounts = 2 [packed = true];
//!                        sint32 contiguousBinIndexOffset = 3; }
//! ```

use super::protobuf::{
    len_field_len, packed_fixed64, tag_len, unzigzag32, varint_len, zigzag32, Counter, Reader,
    Sink, SliceWriter, Value,
};
use super::{Convention, DecodeError, EncodeError, WireMapping};
use crate::mapping::{IndexMapping, MappingError};
use crate::store::Store;
use crate::DDSketch;

// Field numbers.
const SKETCH_MAPPING: u32 = 1;
const SKETCH_POSITIVE: u32 = 2;
const SKETCH_NEGATIVE: u32 = 3;
const SKETCH_ZERO_COUNT: u32 = 4;
const MAPPING_GAMMA: u32 = 1;
const MAPPING_OFFSET: u32 = 2;
const MAPPING_INTERPOLATION: u32 = 3;
const STORE_BIN_COUNTS: u32 = 1;
const STORE_CONTIGUOUS: u32 = 2;
const STORE_CONTIGUOUS_OFFSET: u32 = 3;
const ENTRY_KEY: u32 = 1;
const ENTRY_VALUE: u32 = 2;

/// The largest encoding of a sketch whose stores hold at most
/// `positive_capacity` and `negative_capacity` buckets (their
/// [`Store::CAPACITY`]), in either [`Convention`]: a buffer this long always
/// suffices for [`encode_ddsketch`].
///
/// About `8 · (positive_capacity + negative_capacity) + 60` bytes: each
/// bucket of the occupied range is one packed `double`.
///
/// ```
/// use tailguard::store::{CollapsingLowestStore, NoStore, Store};
/// use tailguard::wire::ddsketch_max_encoded_len;
///
/// const MAX: usize =
///     ddsketch_max_encoded_len(CollapsingLowestStore::<1024>::CAPACITY, NoStore::CAPACITY);
/// assert_eq!(MAX, 8_235);
/// let buffer = [0u8; MAX]; // enough for any default sketch
/// # let _ = buffer;
/// ```
pub const fn ddsketch_max_encoded_len(positive_capacity: usize, negative_capacity: usize) -> usize {
    // gamma (9) + indexOffset (9) + interpolation (2), in a 2-byte header.
    let mapping = len_field_len(SKETCH_MAPPING, 20);
    let zero_count = tag_len(SKETCH_ZERO_COUNT).saturating_add(8);
    mapping
        .saturating_add(zero_count)
        .saturating_add(max_store_len(SKETCH_POSITIVE, positive_capacity))
        .saturating_add(max_store_len(SKETCH_NEGATIVE, negative_capacity))
}

/// The largest `Store` field of `capacity` buckets (0: omitted).
const fn max_store_len(field: u32, capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    // The offset's zigzag varint takes at most 5 bytes.
    let body = store_body_len(capacity, u32::MAX as u64);
    len_field_len(field, body)
}

/// A `Store` body: `n` packed doubles and the zigzagged offset `offset`.
const fn store_body_len(n: usize, zigzag_offset: u64) -> usize {
    let doubles = n.saturating_mul(8);
    let offset = if zigzag_offset == 0 {
        0
    } else {
        tag_len(STORE_CONTIGUOUS_OFFSET).saturating_add(varint_len(zigzag_offset))
    };
    len_field_len(STORE_CONTIGUOUS, doubles).saturating_add(offset)
}

/// What one store contributes: its occupied key range, shifted.
#[derive(Clone, Copy)]
struct StorePlan {
    /// The first key, in this crate's convention.
    low: i32,
    /// Keys in the range.
    len: usize,
    /// The first key as the consumer's convention writes it.
    wire_offset: i32,
}

impl StorePlan {
    fn of<S: Store>(store: &S, convention: Convention) -> Result<Option<Self>, EncodeError> {
        let Some((low, high)) = store.key_range() else {
            return Ok(None);
        };
        // Consumers add the shift: subtract it going out.
        let shifted = i64::from(low).saturating_sub(convention.key_shift());
        let high_shifted = i64::from(high).saturating_sub(convention.key_shift());
        let wire_offset =
            i32::try_from(shifted).map_err(|_| EncodeError::KeyOutOfRange(shifted))?;
        i32::try_from(high_shifted).map_err(|_| EncodeError::KeyOutOfRange(high_shifted))?;
        let span = i64::from(high)
            .saturating_sub(i64::from(low))
            .saturating_add(1);
        let len = usize::try_from(span).map_err(|_| EncodeError::KeyOutOfRange(span))?;
        Ok(Some(Self {
            low,
            len,
            wire_offset,
        }))
    }

    fn body_len(&self) -> usize {
        store_body_len(self.len, zigzag32(self.wire_offset))
    }

    fn write<S: Store, K: Sink>(&self, field: u32, store: &S, sink: &mut K) {
        sink.len_header(field, self.body_len());
        sink.len_header(STORE_CONTIGUOUS, self.len.saturating_mul(8));
        let mut key = self.low;
        for _ in 0..self.len {
            sink.put(&f64::from(store.count_of(key)).to_le_bytes());
            key = key.saturating_add(1);
        }
        if self.wire_offset != 0 {
            sink.varint_field(STORE_CONTIGUOUS_OFFSET, zigzag32(self.wire_offset));
        }
    }
}

/// Everything an encoding needs, checked.
struct Plan {
    gamma: f64,
    index_offset: f64,
    interpolation: u64,
    positive: Option<StorePlan>,
    negative: Option<StorePlan>,
    zero_count: f64,
}

impl Plan {
    fn of<M: WireMapping, P: Store, N: Store>(
        sketch: &DDSketch<M, P, N>,
        convention: Convention,
    ) -> Result<Self, EncodeError> {
        let gamma = sketch.mapping().wire_gamma(convention);
        if !gamma.is_finite() {
            return Err(EncodeError::UnencodableMapping(gamma));
        }
        Ok(Self {
            gamma,
            index_offset: sketch.mapping().index_offset(),
            interpolation: M::INTERPOLATION as u64,
            positive: StorePlan::of(sketch.positive_store(), convention)?,
            negative: StorePlan::of(sketch.negative_store(), convention)?,
            zero_count: sketch.zero_count() as f64,
        })
    }

    fn mapping_body_len(&self) -> usize {
        // Each term is at most 11 bytes.
        let gamma = tag_len(MAPPING_GAMMA).wrapping_add(8);
        let offset = if self.index_offset != 0.0 {
            tag_len(MAPPING_OFFSET).wrapping_add(8)
        } else {
            0
        };
        let interpolation = if self.interpolation != 0 {
            tag_len(MAPPING_INTERPOLATION).wrapping_add(varint_len(self.interpolation))
        } else {
            0
        };
        gamma.wrapping_add(offset).wrapping_add(interpolation)
    }

    fn write<M: IndexMapping, P: Store, N: Store, K: Sink>(
        &self,
        sketch: &DDSketch<M, P, N>,
        sink: &mut K,
    ) {
        sink.len_header(SKETCH_MAPPING, self.mapping_body_len());
        sink.double(MAPPING_GAMMA, self.gamma);
        if self.index_offset != 0.0 {
            sink.double(MAPPING_OFFSET, self.index_offset);
        }
        if self.interpolation != 0 {
            sink.varint_field(MAPPING_INTERPOLATION, self.interpolation);
        }
        if let Some(p) = &self.positive {
            p.write(SKETCH_POSITIVE, sketch.positive_store(), sink);
        }
        if let Some(p) = &self.negative {
            p.write(SKETCH_NEGATIVE, sketch.negative_store(), sink);
        }
        if self.zero_count != 0.0 {
            sink.double(SKETCH_ZERO_COUNT, self.zero_count);
        }
    }

    fn len<M: IndexMapping, P: Store, N: Store>(&self, sketch: &DDSketch<M, P, N>) -> usize {
        let mut counter = Counter::default();
        self.write(sketch, &mut counter);
        counter.0
    }
}

/// The exact length of [`encode_ddsketch`]'s output for this sketch, or the
/// error it would return other than
/// [`BufferTooSmall`](EncodeError::BufferTooSmall).
///
/// ```
/// use tailguard::DDSketch;
/// use tailguard::wire::{ddsketch_encoded_len, encode_ddsketch, Convention};
///
/// let mut sketch = DDSketch::new(0.01)?;
/// sketch.add_all(&[1.0, 2.0, 3.0]).map_err(|(_, e)| e)?;
/// let len = ddsketch_encoded_len(&sketch, Convention::GoJava)?;
/// let mut buffer = [0u8; 512];
/// assert_eq!(encode_ddsketch(&sketch, Convention::GoJava, &mut buffer)?, len);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// # Errors
/// As [`encode_ddsketch`].
pub fn ddsketch_encoded_len<M: WireMapping, P: Store, N: Store>(
    sketch: &DDSketch<M, P, N>,
    convention: Convention,
) -> Result<usize, EncodeError> {
    Ok(Plan::of(sketch, convention)?.len(sketch))
}

/// Encodes a sketch as DataDog's `DDSketch` protobuf message into `buffer`,
/// for consumers of `convention`, and returns the bytes written.
///
/// Each store is written as `contiguousBinCounts` over its occupied key
/// range, zeros included (empty stores are left out): 8 bytes a key of
/// the range. The sparse `binCounts` would be smaller for scattered keys,
/// but sketches-py and libdd-ddsketch read only `contiguousBinCounts`. The
/// mapping is written as its [`wire_gamma`](WireMapping::wire_gamma), index
/// offset and interpolation.
/// Default values are left out, as protobuf's canonical encoding does. The
/// format has no minimum, maximum or sum: they do not travel. Nor does a
/// collapse ([`DDSketch::collapse`]): the receiver's sketch reports none,
/// and answers the folded samples' quantiles as if they were the edge
/// bucket's values (once seen: a median 3.8 times the true one, with a
/// clean [`DecodeReport`]). Send the sender's `collapse()` beside the
/// bytes if the receiver must know, or give the sender room to not
/// collapse.
/// Counts are doubles: bucket counts (`u32`) are exact, but a zero count
/// above 2^53 is written as the nearest double (off by up to 1 024), and
/// a saturated one, `u64::MAX`, as 2^64, which decodes back to
/// `u64::MAX` with a [`DecodeReport::overflow`] of 1.
/// [`ddsketch_encoded_len`] gives the exact length,
/// [`ddsketch_max_encoded_len`] a bound for a sketch type.
///
/// ```
/// use tailguard::DDSketch;
/// use tailguard::wire::{decode_ddsketch, encode_ddsketch, Convention};
///
/// let mut sketch = DDSketch::new(0.01)?;
/// (1..=1000).try_for_each(|v| sketch.add(f64::from(v)))?;
/// let mut buffer = [0u8; 4096];
/// let n = encode_ddsketch(&sketch, Convention::GoJava, &mut buffer)?;
/// let (back, _report): (DDSketch, _) = decode_ddsketch(&buffer[..n], Convention::GoJava)?;
/// assert_eq!(back.count(), 1000);
/// let (p99, was) = (back.quantile(0.99)?.unwrap(), sketch.quantile(0.99)?.unwrap());
/// assert!((p99 - was).abs() <= 1e-12 * was); // the same bucket
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// # Errors
/// [`EncodeError::BufferTooSmall`] (nothing written);
/// [`EncodeError::KeyOutOfRange`] if a key shifted for
/// [`Convention::Python`] leaves `i32`;
/// [`EncodeError::UnencodableMapping`] if the mapping's γ is infinite.
pub fn encode_ddsketch<M: WireMapping, P: Store, N: Store>(
    sketch: &DDSketch<M, P, N>,
    convention: Convention,
    buffer: &mut [u8],
) -> Result<usize, EncodeError> {
    let plan = Plan::of(sketch, convention)?;
    let needed = plan.len(sketch);
    if needed > buffer.len() {
        return Err(EncodeError::BufferTooSmall {
            needed,
            available: buffer.len(),
        });
    }
    let mut writer = SliceWriter::new(buffer);
    plan.write(sketch, &mut writer);
    Ok(writer.written)
}

/// What decoding had to approximate.
///
/// Counts are doubles on the wire, so a count above 2^53 is whatever
/// double the producer rounded it to: such counts do not survive the
/// format exactly, and nothing here can tell. (This crate's bucket counts
/// are `u32` and travel exactly; its zero count, a `u64`, is written as
/// the nearest double, see [`encode_ddsketch`].)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DecodeReport {
    /// Counts that were not integers and were rounded to the nearest
    /// (half away from zero); a count below one half is dropped.
    pub rounded: u64,
    /// Samples that were dropped because their count does not fit, exactly
    /// (`u64::MAX` when more):
    ///
    /// * beyond `u32::MAX` in single bucket counts of the input: such a
    ///   count fills its bucket and the rest is dropped, as the store drops
    ///   what would overflow a counter. Not part of the sketch's
    ///   [`saturated`](DDSketch::saturated), which counts what overflowed
    ///   while adding (e.g. a key present in both encodings);
    /// * beyond `u64::MAX` in the zero count, a `u64`: the input's
    ///   `zeroCount` (1e30 reports `u64::MAX`, exactly 2^64 reports 1) and,
    ///   for [`decode_ddsketch_into`], what the sketch's zero count had no
    ///   room left for (the sketch keeps no tally of that).
    pub overflow: u64,
}

/// One value of interest met while walking a message.
#[derive(Clone, Copy)]
enum Event {
    Mapping,
    Gamma(f64),
    IndexOffset(f64),
    Interpolation(i32),
    ZeroCount(f64),
    Contiguous {
        negative: bool,
        count: f64,
    },
    ContiguousOffset {
        negative: bool,
        offset: i32,
    },
    Sparse {
        negative: bool,
        key: i32,
        count: f64,
    },
}

fn wrong(field: u32, value: &Value<'_>) -> DecodeError {
    DecodeError::WrongWireType {
        field,
        wire_type: value.wire_type(),
    }
}

/// Walks a `DDSketch` message, in wire order, handing every field of
/// interest to `visit`. Embedded messages repeated on the wire are walked
/// in turn, which merges them as protobuf does once the visitor keeps the
/// last scalar and concatenates repeated values.
fn walk(
    bytes: &[u8],
    visit: &mut impl FnMut(Event) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let mut reader = Reader::new(bytes);
    while let Some(field) = reader.next_field() {
        let field = field?;
        match (field.number, field.value) {
            (SKETCH_MAPPING, Value::Len(body)) => walk_mapping(body, visit)?,
            (SKETCH_POSITIVE, Value::Len(body)) => walk_store(body, false, visit)?,
            (SKETCH_NEGATIVE, Value::Len(body)) => walk_store(body, true, visit)?,
            (SKETCH_ZERO_COUNT, Value::I64(bits)) => visit(Event::ZeroCount(f64::from_bits(bits)))?,
            (SKETCH_MAPPING..=SKETCH_ZERO_COUNT, value) => return Err(wrong(field.number, &value)),
            _ => {}
        }
    }
    Ok(())
}

fn walk_mapping(
    bytes: &[u8],
    visit: &mut impl FnMut(Event) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    visit(Event::Mapping)?;
    let mut reader = Reader::new(bytes);
    while let Some(field) = reader.next_field() {
        let field = field?;
        match (field.number, field.value) {
            (MAPPING_GAMMA, Value::I64(bits)) => visit(Event::Gamma(f64::from_bits(bits)))?,
            (MAPPING_OFFSET, Value::I64(bits)) => visit(Event::IndexOffset(f64::from_bits(bits)))?,
            // An enum is an int32: the varint's low 32 bits.
            (MAPPING_INTERPOLATION, Value::Varint(v)) => visit(Event::Interpolation(v as i32))?,
            (MAPPING_GAMMA..=MAPPING_INTERPOLATION, value) => {
                return Err(wrong(field.number, &value))
            }
            _ => {}
        }
    }
    Ok(())
}

fn walk_store(
    bytes: &[u8],
    negative: bool,
    visit: &mut impl FnMut(Event) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let mut reader = Reader::new(bytes);
    while let Some(field) = reader.next_field() {
        let field = field?;
        match (field.number, field.value) {
            (STORE_BIN_COUNTS, Value::Len(entry)) => {
                let (key, count) = map_entry(entry)?;
                visit(Event::Sparse {
                    negative,
                    key,
                    count,
                })?;
            }
            // Packed, as proto3 writes it...
            (STORE_CONTIGUOUS, Value::Len(payload)) => {
                for bits in packed_fixed64(payload)? {
                    visit(Event::Contiguous {
                        negative,
                        count: f64::from_bits(bits),
                    })?;
                }
            }
            // ...or one value a field, which parsers must accept too.
            (STORE_CONTIGUOUS, Value::I64(bits)) => visit(Event::Contiguous {
                negative,
                count: f64::from_bits(bits),
            })?,
            (STORE_CONTIGUOUS_OFFSET, Value::Varint(v)) => visit(Event::ContiguousOffset {
                negative,
                offset: unzigzag32(v),
            })?,
            (STORE_BIN_COUNTS..=STORE_CONTIGUOUS_OFFSET, value) => {
                return Err(wrong(field.number, &value))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A `map<sint32, double>` entry: a message whose missing fields are 0.
fn map_entry(bytes: &[u8]) -> Result<(i32, f64), DecodeError> {
    let (mut key, mut count) = (0, 0.0);
    let mut reader = Reader::new(bytes);
    while let Some(field) = reader.next_field() {
        let field = field?;
        match (field.number, field.value) {
            (ENTRY_KEY, Value::Varint(v)) => key = unzigzag32(v),
            (ENTRY_VALUE, Value::I64(bits)) => count = f64::from_bits(bits),
            (ENTRY_KEY..=ENTRY_VALUE, value) => return Err(wrong(field.number, &value)),
            _ => {}
        }
    }
    Ok((key, count))
}

/// A count checked and rounded: `None` for one that rounds to zero.
fn rounded(count: f64) -> Result<Option<f64>, DecodeError> {
    // -0.0 passes and rounds to nothing.
    if count.is_nan() || count < 0.0 || count.is_infinite() {
        return Err(DecodeError::InvalidCount(count));
    }
    let r = libm::round(count);
    Ok((r >= 1.0).then_some(r))
}

/// What the first pass learns of one store.
#[derive(Clone, Copy, Default)]
struct StoreScan {
    /// The last `contiguousBinIndexOffset` seen (they are merged scalars).
    offset: i32,
    /// Contiguous counts seen so far (their positions).
    seen: u64,
    /// The lowest and highest key with a non-zero count, in the wire's
    /// convention; contiguous keys are kept as positions until the offset
    /// is final.
    positions: Option<(u64, u64)>,
    sparse: Option<(i32, i32)>,
}

impl StoreScan {
    fn widen_positions(&mut self, at: u64) {
        self.positions = Some(self.positions.map_or((at, at), |(lo, hi)| (lo, hi.max(at))));
    }

    fn widen_sparse(&mut self, key: i32) {
        self.sparse = Some(
            self.sparse
                .map_or((key, key), |(lo, hi)| (lo.min(key), hi.max(key))),
        );
    }

    /// The lowest and highest non-empty key, shifted into this crate's
    /// convention, in `i64`.
    fn key_range(&self, shift: i64) -> Option<(i64, i64)> {
        let base = i64::from(self.offset).saturating_add(shift);
        let at = |p: u64| base.saturating_add(i64::try_from(p).unwrap_or(i64::MAX));
        let contiguous = self.positions.map(|(lo, hi)| (at(lo), at(hi)));
        let sparse = self.sparse.map(|(lo, hi)| {
            (
                i64::from(lo).saturating_add(shift),
                i64::from(hi).saturating_add(shift),
            )
        });
        match (contiguous, sparse) {
            (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
            (a, b) => a.or(b),
        }
    }
}

/// What the first pass learns of a whole message.
#[derive(Clone, Copy, Default)]
struct Scan {
    has_mapping: bool,
    gamma: f64,
    index_offset: f64,
    interpolation: i32,
    zero_count: f64,
    positive: StoreScan,
    negative: StoreScan,
}

impl Scan {
    fn store(&mut self, negative: bool) -> &mut StoreScan {
        if negative {
            &mut self.negative
        } else {
            &mut self.positive
        }
    }

    /// Reads the whole message, checking its syntax and every count.
    fn of(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut scan = Self::default();
        walk(bytes, &mut |event| {
            match event {
                Event::Mapping => scan.has_mapping = true,
                Event::Gamma(g) => scan.gamma = g,
                Event::IndexOffset(o) => scan.index_offset = o,
                Event::Interpolation(i) => scan.interpolation = i,
                // Last wins: checked once the message is read.
                Event::ZeroCount(c) => scan.zero_count = c,
                Event::Contiguous { negative, count } => {
                    let store = scan.store(negative);
                    if rounded(count)?.is_some() {
                        let at = store.seen;
                        store.widen_positions(at);
                    }
                    store.seen = store.seen.saturating_add(1);
                }
                Event::ContiguousOffset { negative, offset } => {
                    scan.store(negative).offset = offset
                }
                Event::Sparse {
                    negative,
                    key,
                    count,
                } => {
                    if rounded(count)?.is_some() {
                        scan.store(negative).widen_sparse(key);
                    }
                }
            }
            Ok(())
        })?;
        rounded(scan.zero_count)?;
        Ok(scan)
    }

    /// The mapping the message describes, checked against the sketch's
    /// type, with every non-empty key checked against it.
    fn mapping<M: WireMapping, N: Store>(&self, convention: Convention) -> Result<M, DecodeError> {
        if !self.has_mapping {
            return Err(DecodeError::MissingMapping);
        }
        if self.interpolation != M::INTERPOLATION as i32 {
            return Err(DecodeError::InterpolationMismatch {
                found: self.interpolation,
                expected: M::INTERPOLATION,
            });
        }
        let mapping = M::from_wire(self.gamma, self.index_offset, convention)?;
        // A γ so large that the mapping's own rounds to infinity could not
        // be written back: refused, so that whatever decodes encodes.
        if !mapping.wire_gamma(convention).is_finite() {
            return Err(MappingError::InvalidGamma(self.gamma).into());
        }
        let shift = convention.key_shift();
        if N::CAPACITY == 0 && self.negative.key_range(shift).is_some() {
            return Err(DecodeError::NegativeValues);
        }
        // Keys between the limits all have an indexable value: checking
        // each store's extremes checks every key.
        let limits = key_limits(&mapping);
        for store in [&self.positive, &self.negative] {
            if let Some((lo, hi)) = store.key_range(shift) {
                for key in [lo, hi] {
                    check_key(limits, key)?;
                }
            }
        }
        Ok(mapping)
    }
}

/// The lowest and highest key that a value of the mapping's indexable
/// range can have: a payload's keys must lie between them.
///
/// Judging a key by its representative instead would refuse keys that the
/// mapping itself gives to values near either end of the range, since a
/// representative may lie just outside it. Keys are monotone only up to
/// [`key_slack`](IndexMapping::key_slack) `s`: every `v` of the range has
/// `index(min / (1 + s)) <= index(v) <= index(max · (1 + s))`, so the
/// probes step that far past the ends (still normal floats, whose keys the
/// log-like mappings compute as anywhere else). The keys of the ends
/// themselves are always in, whatever a mapping answers past them.
fn key_limits<M: IndexMapping>(mapping: &M) -> (i64, i64) {
    let (min, max) = (mapping.min_indexable_value(), mapping.max_indexable_value());
    let widen = 1.0 + mapping.key_slack();
    let (mut low, mut high) = (mapping.index(min), mapping.index(max));
    if widen > 1.0 {
        low = low.min(mapping.index(min / widen));
        high = high.max(mapping.index(max * widen));
    }
    (i64::from(low), i64::from(high))
}

/// Refuses `key` unless it lies within `limits`, those of
/// [`key_limits`] (and so within `i32`).
fn check_key(limits: (i64, i64), key: i64) -> Result<(), DecodeError> {
    let (low, high) = limits;
    if (low..=high).contains(&key) {
        Ok(())
    } else {
        Err(DecodeError::KeyOutOfRange(key))
    }
}

/// A value that the mapping puts in bucket `key`, within its indexable
/// range so that adding it cannot fail: the representative `value(key)`
/// (always, up to rounding, except at the ends of the range, where a bucket
/// straddles a limit and the limit stands in), else a value between the
/// bucket's bounds. Past the slack of [`key_limits`], where no indexable
/// value has the key, the nearest limit: its bucket is the neighbour.
fn representative<M: IndexMapping>(mapping: &M, key: i32) -> f64 {
    let (min, max) = (mapping.min_indexable_value(), mapping.max_indexable_value());
    // `max` then `min` rather than `clamp`, which panics on NaN; a NaN
    // candidate becomes `min`.
    let clamped = |c: f64| c.max(min).min(max);
    let v = clamped(mapping.value(key));
    if mapping.index(v) == key {
        return v;
    }
    let low = mapping.lower_bound(key);
    let high = mapping.lower_bound(key.saturating_add(1));
    [libm::sqrt(low * high), low.next_up(), low, high.next_down()]
        .into_iter()
        .map(clamped)
        .find(|&c| mapping.index(c) == key)
        .unwrap_or(v)
}

/// Adds `count` samples (checked, not yet rounded) to bucket `key` of one
/// store of `sketch`.
fn add_bucket<M: IndexMapping, P: Store, N: Store>(
    sketch: &mut DDSketch<M, P, N>,
    negative: bool,
    key: i64,
    count: f64,
    report: &mut DecodeReport,
) -> Result<(), DecodeError> {
    let Some(n) = rounded(count)? else {
        if count != 0.0 {
            report.rounded = report.rounded.saturating_add(1);
        }
        return Ok(());
    };
    if n != count {
        report.rounded = report.rounded.saturating_add(1);
    }
    let k = i32::try_from(key).map_err(|_| DecodeError::KeyOutOfRange(key))?;
    let magnitude = representative(sketch.mapping(), k);
    let value = if negative { -magnitude } else { magnitude };
    let (weight, beyond) = fit(n, u64::from(u32::MAX));
    report.overflow = report.overflow.saturating_add(beyond);
    // At most `u32::MAX`.
    let weight = u32::try_from(weight).unwrap_or(u32::MAX);
    sketch
        .add_weighted(value, weight)
        .map_err(|_| DecodeError::KeyOutOfRange(key))
}

/// A count (a checked, rounded integer) split into what fits `room` and
/// the rest, both exact (`u64::MAX` for a rest past it).
fn fit(n: f64, room: u64) -> (u64, u64) {
    // An integral double below 2^128 converts exactly; `as` saturates
    // above, where the rest saturates anyway.
    let n = n as u128;
    let kept = n.min(u128::from(room));
    let rest = n.saturating_sub(kept);
    (
        u64::try_from(kept).unwrap_or(u64::MAX),
        u64::try_from(rest).unwrap_or(u64::MAX),
    )
}

/// Adds `n` samples to the zero bucket: `u32` weights at a time would take
/// up to 2^32 calls, so beyond one weight the count doubles by merging.
fn add_zeros<M: IndexMapping, P: Store, N: Store>(sketch: &mut DDSketch<M, P, N>, n: u64) {
    const CHUNK_BITS: u32 = 31;
    let low = (n & ((1 << CHUNK_BITS) - 1)) as u32;
    let mut high = n >> CHUNK_BITS;
    // Zero is always accepted: it lands in the zero bucket.
    let _ = sketch.add_weighted(0.0, low);
    if high == 0 {
        return;
    }
    let mut chunk = DDSketch::<M, P, N>::with_mapping(*sketch.mapping());
    let _ = chunk.add_weighted(0.0, 1 << CHUNK_BITS);
    while high != 0 {
        if high & 1 == 1 {
            // Same mapping: cannot fail.
            let _ = sketch.merge(&chunk);
        }
        high >>= 1;
        if high != 0 {
            let copy = chunk.clone();
            let _ = chunk.merge(&copy);
        }
    }
}

/// The second pass: adds every bucket of a message checked by [`Scan`].
fn apply<M: IndexMapping, P: Store, N: Store>(
    sketch: &mut DDSketch<M, P, N>,
    bytes: &[u8],
    scan: &Scan,
    convention: Convention,
) -> Result<DecodeReport, DecodeError> {
    let shift = convention.key_shift();
    let mut report = DecodeReport::default();
    // A store whose keys span more than it holds collapses as they are
    // added. In the payload's order, a key past its range each time (sparse
    // keys climbing by a store's capacity, as a hostile payload may have)
    // would fold the whole store each time: entries × capacity. So such a
    // store's two end keys go first, in a pass of their own; every other
    // key then lands inside its range or folds into its edge at once. The
    // buckets come out the same in any order.
    let collapsing = |store: &StoreScan, capacity: usize| {
        store.key_range(shift).filter(|&(lo, hi)| {
            usize::try_from(hi.saturating_sub(lo)).map_or(true, |span| span >= capacity)
        })
    };
    let ends = [
        collapsing(&scan.positive, P::CAPACITY),
        collapsing(&scan.negative, N::CAPACITY),
    ];
    let is_end = |negative: bool, key: i64| {
        ends.get(usize::from(negative))
            .copied()
            .flatten()
            .is_some_and(|(lo, hi)| key == lo || key == hi)
    };
    // `Some(true)`: the end keys only; `Some(false)`: the others.
    let passes: &[Option<bool>] = if ends.iter().any(Option::is_some) {
        &[Some(true), Some(false)]
    } else {
        &[None]
    };
    for &ends_only in passes {
        // Positions within each store's concatenated contiguous counts.
        let mut positions = [0u64; 2];
        walk(bytes, &mut |event| {
            let (negative, key, count) = match event {
                Event::Contiguous { negative, count } => {
                    let store = if negative {
                        &scan.negative
                    } else {
                        &scan.positive
                    };
                    let slot = positions.get_mut(usize::from(negative));
                    let at = slot.map_or(0, |p| {
                        let at = *p;
                        *p = p.saturating_add(1);
                        at
                    });
                    let key = i64::from(store.offset)
                        .saturating_add(shift)
                        .saturating_add(i64::try_from(at).unwrap_or(i64::MAX));
                    (negative, key, count)
                }
                Event::Sparse {
                    negative,
                    key,
                    count,
                } => (negative, i64::from(key).saturating_add(shift), count),
                _ => return Ok(()),
            };
            if ends_only.is_none_or(|only| only == is_end(negative, key)) {
                add_bucket(sketch, negative, key, count, &mut report)?;
            }
            Ok(())
        })?;
    }
    if let Some(n) = rounded(scan.zero_count)? {
        if n != scan.zero_count {
            report.rounded = report.rounded.saturating_add(1);
        }
        // The zero count saturates at u64::MAX and keeps no tally of what
        // it drops: reported here.
        let (kept, beyond) = fit(n, u64::MAX.saturating_sub(sketch.zero_count()));
        report.overflow = report.overflow.saturating_add(beyond);
        add_zeros(sketch, kept);
    } else if scan.zero_count != 0.0 {
        report.rounded = report.rounded.saturating_add(1);
    }
    Ok(report)
}

/// Decodes DataDog's `DDSketch` protobuf message, written by a producer of
/// `convention`, into a new sketch of type `DDSketch<M, P, N>` over the
/// mapping the message describes.
///
/// * **Fields**: in any order; unknown fields (and groups) skipped; a
///   scalar that repeats keeps its last value; repeated and packed
///   `contiguousBinCounts` concatenate; embedded messages that repeat merge
///   (so `contiguousBinIndexOffset` is the last one given in any of a
///   store's pieces). `binCounts` and `contiguousBinCounts` may both be
///   present: a key in both gets the sum, as the format says. One
///   deviation: a key repeated *within* `binCounts` is summed, where
///   protobuf's map semantics keep the last entry (remembering earlier keys
///   would take memory; no known producer repeats a key). Bytes that do
///   (two encoded sketches concatenated, say) decode here otherwise than
///   in a protobuf library, and in neither as the two sketches merged
///   (the zero count, a scalar, keeps the second's): merge decoded
///   sketches instead.
/// * **Mapping**: the interpolation must be `M`'s
///   ([`InterpolationMismatch`](DecodeError::InterpolationMismatch)
///   otherwise), γ and offset are read as `convention` writes them
///   ([`WireMapping::from_wire`]).
/// * **Counts**: must be finite and non-negative
///   ([`InvalidCount`](DecodeError::InvalidCount)); others are rounded to
///   the nearest integer (counted in [`DecodeReport::rounded`]); a bucket
///   count above `u32::MAX` fills the bucket and the rest is counted in
///   [`DecodeReport::overflow`]; the zero count is a `u64`: it holds up to
///   `2^64 − 1` and the rest is counted in [`DecodeReport::overflow`] too.
///   Counts above 2^53 are only as exact as the producer's doubles.
/// * **Keys**: each must lie between the keys of the mapping's
///   [`min_indexable_value`](IndexMapping::min_indexable_value) and
///   [`max_indexable_value`](IndexMapping::max_indexable_value), each end
///   widened by its [`key_slack`](IndexMapping::key_slack)
///   ([`KeyOutOfRange`](DecodeError::KeyOutOfRange) otherwise; a key in
///   that margin that no indexable value has is counted in the bucket at
///   the end). So every
///   sketch this crate encodes for [`Convention::GoJava`] decodes, even
///   one holding the ends of the range, whose representatives
///   ([`value`](IndexMapping::value)) may lie just outside it. Python
///   bytes of this crate name a mapping a hair wider than the sketch's
///   (see [`Convention`]), whose buckets drift from the sketch's by at
///   most [`MAX_PYTHON_DRIFT`](super::MAX_PYTHON_DRIFT) of a bucket (at
///   smaller α they carry the mapping's own γ): a key at an end of the
///   range may then fall past the decoded mapping's range and be refused.
/// * **Capacity**: every bucket is added to the sketch with its weight, at
///   its representative value (clamped into the indexable range, where
///   a bucket at either end straddles its limit), so a sketch too small
///   for the input collapses exactly as adding the samples would: check
///   [`DDSketch::collapse`]. Bucket counts are exact; the minimum, maximum
///   and sum, which the format does not carry, are those of the
///   representatives.
///
/// Costs two passes over the input and one add per non-empty bucket (a
/// third pass when a store's keys span more than it holds: its two end
/// keys are added first, so that the others fold into its edge at once,
/// in whatever order they come; the buckets are the same in any order,
/// the sum of the representatives may differ in its last bits); no
/// allocation.
///
/// ```
/// use tailguard::mapping::CubicMapping;
/// use tailguard::wire::{decode_ddsketch, encode_ddsketch, Convention};
/// use tailguard::DDSketch;
///
/// let mut sketch = DDSketch::new(0.01)?;
/// sketch.add_all(&[1.0, 2.0, 3.0]).map_err(|(_, e)| e)?;
/// // Bytes as sketches-py would write them...
/// let mut buffer = [0u8; 1024];
/// let n = encode_ddsketch(&sketch, Convention::Python, &mut buffer)?;
/// // ...read back with the producer's convention.
/// let (back, report): (DDSketch<CubicMapping>, _) =
///     decode_ddsketch(&buffer[..n], Convention::Python)?;
/// assert_eq!(back.count(), 3);
/// assert_eq!(report.rounded, 0);
/// let p50 = back.quantile(0.5)?.unwrap();
/// assert!((p50 - 2.0).abs() <= 0.01 * 2.0);
/// // The wrong convention reads another mapping and other buckets.
/// let (wrong, _): (DDSketch<CubicMapping>, _) =
///     decode_ddsketch(&buffer[..n], Convention::GoJava)?;
/// assert!((wrong.quantile(0.5)?.unwrap() - 2.0).abs() > 0.01 * 2.0);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// # Errors
/// A [`DecodeError`] for malformed or truncated bytes, a missing or
/// foreign mapping, an invalid count, a key that no indexable value has
/// (see **Keys**), or negative values for a sketch without a negative
/// store.
pub fn decode_ddsketch<M: WireMapping, P: Store, N: Store>(
    bytes: &[u8],
    convention: Convention,
) -> Result<(DDSketch<M, P, N>, DecodeReport), DecodeError> {
    let scan = Scan::of(bytes)?;
    let mapping = scan.mapping::<M, N>(convention)?;
    let mut sketch = DDSketch::with_mapping(mapping);
    let report = apply(&mut sketch, bytes, &scan, convention)?;
    Ok((sketch, report))
}

/// Decodes as [`decode_ddsketch`] and adds the result to `sketch`, whose
/// mapping must equal the message's
/// ([`MappingMismatch`](DecodeError::MappingMismatch) otherwise): the
/// sketch then holds the union of both, as [`DDSketch::merge`] would give.
///
/// The whole message is checked before the first bucket is added: on any
/// error the sketch is unchanged.
///
/// Under [`Convention::Python`] the mapping does not survive a round
/// trip: bytes that a sketch of `DDSketch::new(α)` (or any log-like mapping
/// built from α) wrote for Python carry the textbook γ, slightly wider than
/// the mapping's own, so decoding them into a sketch of that same
/// configuration returns [`MappingMismatch`](DecodeError::MappingMismatch)
/// (the keys are unchanged; see [`Convention`]). Decode the first message
/// with [`decode_ddsketch`], or into `DDSketch::with_mapping` of its
/// mapping, and merge the others into that; between tailguard peers
/// encode with [`Convention::GoJava`], whose mapping comes back equal.
///
/// ```
/// use tailguard::DDSketch;
/// use tailguard::wire::{decode_ddsketch, decode_ddsketch_into, encode_ddsketch, Convention};
///
/// // Payloads from several hosts, all with the same mapping.
/// let mut payloads = [[0u8; 128]; 3];
/// let mut lens = [0; 3];
/// for (i, (buffer, len)) in payloads.iter_mut().zip(&mut lens).enumerate() {
///     let mut host = DDSketch::new(0.01)?;
///     host.add(10.0 * (i + 1) as f64)?;
///     *len = encode_ddsketch(&host, Convention::GoJava, buffer)?;
/// }
/// let (mut total, _): (DDSketch, _) =
///     decode_ddsketch(&payloads[0][..lens[0]], Convention::GoJava)?;
/// for (buffer, &len) in payloads.iter().zip(&lens).skip(1) {
///     decode_ddsketch_into(&mut total, &buffer[..len], Convention::GoJava)?;
/// }
/// assert_eq!(total.count(), 3);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
///
/// # Errors
/// As [`decode_ddsketch`], and [`DecodeError::MappingMismatch`].
pub fn decode_ddsketch_into<M: WireMapping, P: Store, N: Store>(
    sketch: &mut DDSketch<M, P, N>,
    bytes: &[u8],
    convention: Convention,
) -> Result<DecodeReport, DecodeError> {
    let scan = Scan::of(bytes)?;
    let mapping = scan.mapping::<M, N>(convention)?;
    if mapping != *sketch.mapping() {
        return Err(DecodeError::MappingMismatch);
    }
    apply(sketch, bytes, &scan, convention)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::mapping::LogarithmicMapping;
    use crate::store::{probe, CollapsingHighestStore, CollapsingLowestStore};
    use std::vec::Vec;

    struct Bytes(Vec<u8>);

    impl Sink for Bytes {
        fn put(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    /// A message of `mapping` (from an encoded sketch holding one sample
    /// at key `keys[0]`) whose positive store then lists `keys`, one
    /// sample each, as sparse entries in that order (repeated messages
    /// merge).
    fn sparse<P: Store>(mapping: LogarithmicMapping, keys: &[i32]) -> Vec<u8> {
        let mut one: DDSketch<LogarithmicMapping, P> = DDSketch::with_mapping(mapping);
        let first = keys.first().copied().unwrap_or(0);
        one.add(mapping.value(first)).unwrap();
        let mut out = std::vec![0u8; 256];
        let n = encode_ddsketch(&one, Convention::GoJava, &mut out).unwrap();
        out.truncate(n);
        let mut store = Bytes(Vec::new());
        for &key in keys.iter().skip(1) {
            let mut entry = Bytes(Vec::new());
            entry.varint_field(ENTRY_KEY, zigzag32(key));
            entry.double(ENTRY_VALUE, 1.0);
            store.bytes_field(STORE_BIN_COUNTS, &entry.0);
        }
        let mut message = Bytes(out);
        message.bytes_field(SKETCH_POSITIVE, &store.0);
        message.0
    }

    /// Sparse keys climbing (or falling) by more than the store holds,
    /// each past the range of the ones before: decoding folds each at once
    /// (the counters read stay within a few passes over the store, not one
    /// a key), and the buckets are those the keys give in their own order.
    fn climbing_keys_cost_a_pass_each<P: Store>(step: i32) {
        let mapping = LogarithmicMapping::new(1e-4).unwrap();
        let start = if step > 0 { -1_000_000 } else { 1_000_000 };
        // Fewer under Miri, where each key's float index is emulated: the
        // bound still sits far below a fold a key.
        let n = if cfg!(miri) { 100 } else { 2_000 };
        let keys: Vec<i32> = (0..n).map(|i| start + i * step).collect();
        let bytes = sparse::<P>(mapping, &keys);
        probe::take();
        let (sketch, _): (DDSketch<LogarithmicMapping, P>, _) =
            decode_ddsketch(&bytes, Convention::GoJava).unwrap();
        let reads = probe::take();
        let bound = 4 * (keys.len() + P::CAPACITY) as u64;
        assert!(reads <= bound, "{reads} counters read (bound {bound})");
        let mut expected = P::default();
        for &key in &keys {
            expected.add(key, 1);
        }
        let bins = |s: &P| s.bins().collect::<Vec<_>>();
        assert_eq!(bins(sketch.positive_store()), bins(&expected));
        assert_eq!(sketch.count(), keys.len() as u64);
    }

    #[test]
    fn climbing_sparse_keys_do_not_fold_the_store_each() {
        climbing_keys_cost_a_pass_each::<CollapsingLowestStore<1024>>(1_100);
        climbing_keys_cost_a_pass_each::<CollapsingHighestStore<1024>>(-1_100);
        // And against the grain: every key folds into the edge at once.
        climbing_keys_cost_a_pass_each::<CollapsingLowestStore<1024>>(-1_100);
        climbing_keys_cost_a_pass_each::<CollapsingHighestStore<1024>>(1_100);
    }
}
