//! A tiny protobuf writer for hand-built `ddsketch.proto` messages: each
//! function appends one field (or builds one sub-message) as the wire
//! format lays it out, with nothing checked, so that tests can write
//! malformed and hostile messages as easily as valid ones.
#![allow(dead_code)]

/// A base-128 varint.
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A field's key: its number and wire type.
pub fn tag(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire_type));
}

/// A `double` field (wire type 1).
pub fn double(out: &mut Vec<u8>, field: u32, v: f64) {
    tag(out, field, 1);
    out.extend(v.to_le_bytes());
}

/// A length-delimited field (wire type 2): bytes, a sub-message or a
/// packed repeated field.
pub fn len(out: &mut Vec<u8>, field: u32, body: &[u8]) {
    tag(out, field, 2);
    varint(out, body.len() as u64);
    out.extend(body);
}

/// A `sint32` field (zigzag varint).
pub fn sint(out: &mut Vec<u8>, field: u32, v: i32) {
    tag(out, field, 0);
    varint(out, u64::from(((v << 1) ^ (v >> 31)) as u32));
}

/// An `IndexMapping` message: γ, index offset and interpolation.
pub fn mapping_msg(gamma: f64, offset: f64, interpolation: u64) -> Vec<u8> {
    let mut m = Vec::new();
    double(&mut m, 1, gamma);
    double(&mut m, 2, offset);
    tag(&mut m, 3, 0);
    varint(&mut m, interpolation);
    m
}

/// The body of a packed `repeated double` (a store's contiguous counts).
pub fn packed(counts: &[f64]) -> Vec<u8> {
    counts.iter().flat_map(|c| c.to_le_bytes()).collect()
}

/// One entry of a store's sparse `binCounts` map: key and count.
pub fn entry(key: i32, count: f64) -> Vec<u8> {
    let mut e = Vec::new();
    sint(&mut e, 1, key);
    double(&mut e, 2, count);
    e
}
