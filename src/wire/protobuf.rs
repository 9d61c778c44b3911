//! A minimal protobuf codec: varints, zigzag, fixed64 and length-delimited
//! fields, over caller slices, without allocation.
//!
//! Writing goes through [`Sink`]: [`Counter`] measures what
//! [`SliceWriter`] would write, so a message's exact length is known before
//! a byte is written (length prefixes of nested messages, and one up-front
//! size check instead of a check per byte). Reading goes through [`Reader`],
//! which yields one [`Field`] at a time and never reads past its slice.

use super::DecodeError;

/// Protobuf wire types.
pub(crate) const VARINT: u8 = 0;
pub(crate) const I64: u8 = 1;
pub(crate) const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const I32: u8 = 5;

/// Nested groups deeper than this are refused rather than skipped.
const MAX_GROUP_DEPTH: u32 = 64;

/// Bytes of the varint encoding of `v`: 1 to 10.
pub(crate) const fn varint_len(v: u64) -> usize {
    // `v | 1` has 1 to 64 significant bits; 7 a byte.
    let bits = 64u32.wrapping_sub((v | 1).leading_zeros());
    (bits.div_ceil(7)) as usize
}

/// Bytes of a field's tag (field numbers used here are all below 16).
pub(crate) const fn tag_len(field: u32) -> usize {
    varint_len((field as u64) << 3)
}

/// The zigzag encoding of a `sint32`.
pub(crate) const fn zigzag32(v: i32) -> u64 {
    ((v << 1) ^ (v >> 31)) as u32 as u64
}

/// The `sint32` whose zigzag encoding has these low 32 bits (protobuf
/// truncates a longer varint to 32 bits).
pub(crate) const fn unzigzag32(v: u64) -> i32 {
    let v = v as u32;
    ((v >> 1) as i32) ^ ((v & 1) as i32).wrapping_neg()
}

/// Bytes of a length-delimited field holding `body` bytes.
pub(crate) const fn len_field_len(field: u32, body: usize) -> usize {
    tag_len(field)
        .saturating_add(varint_len(body as u64))
        .saturating_add(body)
}

/// Where encoded bytes go: a [`Counter`] or a [`SliceWriter`].
pub(crate) trait Sink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);

    /// Appends a varint.
    fn varint(&mut self, mut v: u64) {
        let mut buf = [0u8; 10];
        let mut n = 0usize;
        for slot in buf.iter_mut() {
            // At most 10 bytes: `n <= 10`.
            n = n.wrapping_add(1);
            if v < 0x80 {
                *slot = v as u8;
                break;
            }
            *slot = (v as u8 & 0x7f) | 0x80;
            v >>= 7;
        }
        self.put(buf.get(..n).unwrap_or(&[]));
    }

    /// Appends a field tag.
    fn tag(&mut self, field: u32, wire_type: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire_type));
    }

    /// Appends a `double` field.
    fn double(&mut self, field: u32, v: f64) {
        self.tag(field, I64);
        self.put(&v.to_le_bytes());
    }

    /// Appends a `fixed64` field.
    fn fixed64(&mut self, field: u32, v: u64) {
        self.tag(field, I64);
        self.put(&v.to_le_bytes());
    }

    /// Appends a varint field (`uint32`, `uint64`, enums, zigzagged `sint32`).
    fn varint_field(&mut self, field: u32, v: u64) {
        self.tag(field, VARINT);
        self.varint(v);
    }

    /// Appends the tag and length of a length-delimited field; its `len`
    /// bytes of body must follow.
    fn len_header(&mut self, field: u32, len: usize) {
        self.tag(field, LEN);
        self.varint(len as u64);
    }

    /// Appends a length-delimited field of bytes.
    fn bytes_field(&mut self, field: u32, bytes: &[u8]) {
        self.len_header(field, bytes.len());
        self.put(bytes);
    }
}

/// A sink that only counts.
#[derive(Default)]
pub(crate) struct Counter(pub(crate) usize);

impl Sink for Counter {
    fn put(&mut self, bytes: &[u8]) {
        self.0 = self.0.saturating_add(bytes.len());
    }
}

/// A sink into a caller's slice. Bytes that do not fit are dropped and
/// counted in `overflow`; callers check the size first, so it stays 0.
pub(crate) struct SliceWriter<'a> {
    rest: &'a mut [u8],
    pub(crate) written: usize,
    pub(crate) overflow: bool,
}

impl<'a> SliceWriter<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self {
            rest: buf,
            written: 0,
            overflow: false,
        }
    }
}

impl Sink for SliceWriter<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let rest = core::mem::take(&mut self.rest);
        if bytes.len() > rest.len() {
            self.overflow = true;
            self.rest = rest;
            return;
        }
        let (head, tail) = rest.split_at_mut(bytes.len());
        head.copy_from_slice(bytes);
        self.rest = tail;
        self.written = self.written.saturating_add(bytes.len());
    }
}

/// One field read off the wire, its value undecoded beyond the wire type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Field<'a> {
    pub(crate) number: u32,
    pub(crate) value: Value<'a>,
}

/// A field's value by wire type.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value<'a> {
    Varint(u64),
    I64(u64),
    Len(&'a [u8]),
    I32,
    Group,
}

impl Value<'_> {
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Self::Varint(_) => VARINT,
            Self::I64(_) => I64,
            Self::Len(_) => LEN,
            Self::I32 => I32,
            Self::Group => SGROUP,
        }
    }
}

/// Reads fields from a message's bytes.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let (&b, rest) = self.rest.split_first().ok_or(DecodeError::Truncated)?;
        self.rest = rest;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.rest.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// A varint of at most 10 bytes whose value fits 64 bits.
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            // The tenth byte (shift 63) may only carry the 64th bit.
            if shift == 63 && b > 1 {
                return Err(DecodeError::VarintOverflow);
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError::VarintOverflow)
    }

    fn fixed64(&mut self) -> Result<u64, DecodeError> {
        let (head, rest) = self
            .rest
            .split_first_chunk::<8>()
            .ok_or(DecodeError::Truncated)?;
        self.rest = rest;
        Ok(u64::from_le_bytes(*head))
    }

    /// The tag of the next field: `(number, wire type)`.
    fn tag(&mut self) -> Result<(u32, u8), DecodeError> {
        let tag = self.varint()?;
        let tag = u32::try_from(tag).map_err(|_| DecodeError::InvalidTag(tag))?;
        let number = tag >> 3;
        if number == 0 {
            return Err(DecodeError::InvalidTag(u64::from(tag)));
        }
        Ok((number, (tag & 7) as u8))
    }

    /// Skips a group whose start tag (field `number`) was just read.
    fn skip_group(&mut self, number: u32) -> Result<(), DecodeError> {
        let mut depth = 0u32;
        loop {
            let (n, wire_type) = self.tag()?;
            match wire_type {
                VARINT => {
                    self.varint()?;
                }
                I64 => {
                    self.fixed64()?;
                }
                LEN => {
                    let len = self.length()?;
                    self.take(len)?;
                }
                I32 => {
                    self.take(4)?;
                }
                SGROUP => {
                    depth = depth.saturating_add(1);
                    if depth > MAX_GROUP_DEPTH {
                        return Err(DecodeError::InvalidGroup);
                    }
                }
                EGROUP => {
                    if depth == 0 {
                        return if n == number {
                            Ok(())
                        } else {
                            Err(DecodeError::InvalidGroup)
                        };
                    }
                    depth = depth.saturating_sub(1);
                }
                other => return Err(DecodeError::InvalidWireType(other)),
            }
        }
    }

    fn length(&mut self) -> Result<usize, DecodeError> {
        let len = self.varint()?;
        usize::try_from(len).map_err(|_| DecodeError::Truncated)
    }

    /// The next field, `None` at the end of the message.
    pub(crate) fn next_field(&mut self) -> Option<Result<Field<'a>, DecodeError>> {
        if self.rest.is_empty() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<Field<'a>, DecodeError> {
        let (number, wire_type) = self.tag()?;
        let value = match wire_type {
            VARINT => Value::Varint(self.varint()?),
            I64 => Value::I64(self.fixed64()?),
            LEN => {
                let len = self.length()?;
                Value::Len(self.take(len)?)
            }
            I32 => {
                self.take(4)?;
                Value::I32
            }
            SGROUP => {
                self.skip_group(number)?;
                Value::Group
            }
            EGROUP => return Err(DecodeError::InvalidGroup),
            other => return Err(DecodeError::InvalidWireType(other)),
        };
        Ok(Field { number, value })
    }
}

/// A packed run of little-endian 8-byte values (`repeated double` or
/// `fixed64`): the payload's length must be a multiple of 8.
pub(crate) fn packed_fixed64(
    payload: &[u8],
) -> Result<impl Iterator<Item = u64> + '_, DecodeError> {
    if !payload.len().is_multiple_of(8) {
        return Err(DecodeError::InvalidPackedLength(payload.len()));
    }
    Ok(payload
        .chunks_exact(8)
        .filter_map(|c| c.first_chunk::<8>().map(|b| u64::from_le_bytes(*b))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_varint(v: u64) -> ([u8; 16], usize) {
        let mut buf = [0u8; 16];
        let mut w = SliceWriter::new(&mut buf);
        w.varint(v);
        let n = w.written;
        (buf, n)
    }

    #[test]
    fn varints_round_trip_and_have_the_predicted_length() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let (buf, n) = encode_varint(v);
            assert_eq!(n, varint_len(v), "{v}");
            let mut r = Reader::new(&buf[..n]);
            assert_eq!(r.varint().unwrap(), v);
            assert!(r.rest.is_empty());
        }
    }

    #[test]
    fn zigzag_is_protobufs() {
        for (v, z) in [(0, 0), (-1, 1), (1, 2), (-2, 3), (i32::MAX, 0xffff_fffe)] {
            assert_eq!(zigzag32(v), z);
            assert_eq!(unzigzag32(z), v);
        }
        assert_eq!(zigzag32(i32::MIN), 0xffff_ffff);
        assert_eq!(unzigzag32(0xffff_ffff), i32::MIN);
    }

    #[test]
    fn overlong_and_truncated_varints_are_errors() {
        let mut r = Reader::new(&[0xff; 11]);
        assert_eq!(r.varint(), Err(DecodeError::VarintOverflow));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
        assert_eq!(r.varint(), Err(DecodeError::VarintOverflow));
        let mut r = Reader::new(&[0x80, 0x80]);
        assert_eq!(r.varint(), Err(DecodeError::Truncated));
    }

    #[test]
    fn groups_are_skipped_and_checked() {
        // Field 5 group holding a varint field 1 and a nested group 2.
        let bytes = [0x2b, 0x08, 0x01, 0x13, 0x14, 0x2c, 0x08, 0x07];
        let mut r = Reader::new(&bytes);
        assert!(matches!(
            r.next_field(),
            Some(Ok(Field {
                number: 5,
                value: Value::Group
            }))
        ));
        assert!(matches!(
            r.next_field(),
            Some(Ok(Field {
                number: 1,
                value: Value::Varint(7)
            }))
        ));
        assert!(r.next_field().is_none());
        // An end tag for another field.
        let mut r = Reader::new(&[0x2b, 0x34]);
        assert_eq!(
            r.next_field().unwrap().unwrap_err(),
            DecodeError::InvalidGroup
        );
    }
}
