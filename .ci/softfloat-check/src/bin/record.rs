//! The integer record path: a latency in nanoseconds into a
//! `DDSketch<LogLinearMapping>`. `.ci/run` checks that no software
//! double-precision routine is reachable from `tailguard_record_u64` or
//! `tailguard_index_u64`.
#![no_std]
#![no_main]

mod common;

use core::hint::black_box;
use tailguard::{DDSketch, IndexMapping, LogLinearMapping};

/// Root of the walk: what a hedger's commit will do per latency.
#[no_mangle]
#[inline(never)]
pub fn tailguard_record_u64(sketch: &mut DDSketch<LogLinearMapping>, ns: u64) -> bool {
    sketch.add_u64(ns).is_ok()
}

/// Root of the walk: the mapping alone.
#[no_mangle]
#[inline(never)]
pub fn tailguard_index_u64(mapping: &LogLinearMapping, ns: u64) -> i32 {
    mapping.index_u64(ns).unwrap_or(i32::MIN)
}

#[no_mangle]
pub extern "C" fn _start() -> ! {
    // Building the mapping and reading quantiles use floats: off the path.
    if let Ok(mut s) = DDSketch::<LogLinearMapping>::with_accuracy(black_box(0.01)) {
        black_box(tailguard_record_u64(&mut s, black_box(4_000_000)));
        black_box(tailguard_index_u64(s.mapping(), black_box(123)));
        let _ = black_box(s.quantile(black_box(0.99)));
    }
    common::park()
}
