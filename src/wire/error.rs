//! Why an encoding or a decoding failed.

use crate::mapping::{Interpolation, MappingError};
use core::fmt;

/// Why bytes could not be decoded. Decoding never panics and never reads
/// past its input; on any error a sketch being decoded into is unchanged.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends inside a field (a tag, a varint, a fixed-width value
    /// or a length-delimited payload longer than what is left).
    Truncated,
    /// A varint is longer than 10 bytes or does not fit 64 bits.
    VarintOverflow,
    /// A field tag is larger than 32 bits or names field 0.
    InvalidTag(u64),
    /// Wire type 6 or 7, which protobuf does not define.
    InvalidWireType(u8),
    /// A group end without its start, for another field, or groups nested
    /// deeper than 64.
    InvalidGroup,
    /// A known field arrived with a wire type its declared type cannot have.
    WrongWireType {
        /// The field number, in the message being read.
        field: u32,
        /// The wire type found.
        wire_type: u8,
    },
    /// A packed run of 8-byte values whose length is not a multiple of 8.
    InvalidPackedLength(usize),
    /// The message has no index mapping (field 1 of `DDSketch`).
    MissingMapping,
    /// The mapping's γ or index offset is not one this crate can build.
    Mapping(MappingError),
    /// The wire's interpolation is not the one of the sketch's mapping
    /// type (the raw enum value, unknown values included).
    InterpolationMismatch {
        /// The interpolation found on the wire, as its raw enum value.
        found: i32,
        /// The interpolation of the mapping type decoded into.
        expected: Interpolation,
    },
    /// A bucket or zero count is negative, NaN or infinite.
    InvalidCount(f64),
    /// A bucket key (after the producer convention's shift) beyond what
    /// the decoded mapping's indexable range can give: below the key of
    /// [`min_indexable_value`](crate::IndexMapping::min_indexable_value) or
    /// above that of
    /// [`max_indexable_value`](crate::IndexMapping::max_indexable_value),
    /// each end widened by the mapping's
    /// [`key_slack`](crate::IndexMapping::key_slack) so that no key the
    /// mapping gives a value of that range is refused (a key within that
    /// margin that no value has is counted in the bucket at the end). Keys
    /// outside `i32` are among them.
    KeyOutOfRange(i64),
    /// The bytes hold negative values and the sketch has no negative store.
    NegativeValues,
    /// [`decode_ddsketch_into`](super::decode_ddsketch_into): the wire's
    /// mapping is not the sketch's.
    MappingMismatch,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("the input ends inside a field"),
            Self::VarintOverflow => f.write_str("a varint is longer than 10 bytes"),
            Self::InvalidTag(t) => write!(f, "invalid field tag {t}"),
            Self::InvalidWireType(w) => write!(f, "invalid wire type {w}"),
            Self::InvalidGroup => f.write_str("unbalanced or too deeply nested group"),
            Self::WrongWireType { field, wire_type } => {
                write!(f, "field {field} has wire type {wire_type}, which its type cannot have")
            }
            Self::InvalidPackedLength(n) => {
                write!(f, "a packed run of doubles is {n} bytes, not a multiple of 8")
            }
            Self::MissingMapping => f.write_str("the sketch has no index mapping"),
            Self::Mapping(e) => fmt::Display::fmt(e, f),
            Self::InterpolationMismatch { found, expected } => write!(
                f,
                "the bytes use interpolation {found}, the sketch type {expected:?} ({}); decode into a sketch of the producer's mapping",
                *expected as i32
            ),
            Self::InvalidCount(c) => write!(f, "count {c} is negative, NaN or infinite"),
            Self::KeyOutOfRange(k) => write!(
                f,
                "bucket key {k} is beyond the keys of the mapping's indexable range; check the producer convention"
            ),
            Self::NegativeValues => f.write_str(
                "the bytes hold negative values; decode into a SignedSketch",
            ),
            Self::MappingMismatch => f.write_str(
                "the bytes use another mapping than the sketch decoded into",
            ),
        }
    }
}

impl core::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Mapping(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MappingError> for DecodeError {
    fn from(e: MappingError) -> Self {
        Self::Mapping(e)
    }
}

/// Why a sketch could not be encoded. Nothing is written on error.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The buffer is shorter than the encoding.
    BufferTooSmall {
        /// Bytes the encoding takes.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A key does not fit `i32` once shifted to the consumer's convention.
    KeyOutOfRange(i64),
    /// The mapping's γ is not finite (an exponential mapping of scale −10),
    /// so the format cannot carry it.
    UnencodableMapping(f64),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferTooSmall { needed, available } => write!(
                f,
                "the encoding takes {needed} bytes and the buffer has {available}"
            ),
            Self::KeyOutOfRange(k) => {
                write!(
                    f,
                    "bucket key {k} does not fit i32 in the consumer's convention"
                )
            }
            Self::UnencodableMapping(g) => {
                write!(f, "the mapping's gamma {g} cannot be written")
            }
        }
    }
}

impl core::error::Error for EncodeError {}
