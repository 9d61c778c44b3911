//! The control: the default sketch's f64 `add`, whose cubic index runs in
//! software double precision on a Cortex-M4F. `.ci/run` checks that the
//! walk from `tailguard_record_f64` does reach a soft-float routine, so a
//! walk that finds nothing in `record` means something.
#![no_std]
#![no_main]

mod common;

use core::hint::black_box;
use tailguard::DDSketch;

/// Root of the walk.
#[no_mangle]
#[inline(never)]
pub fn tailguard_record_f64(sketch: &mut DDSketch, ns: u64) -> bool {
    sketch.add(ns as f64).is_ok()
}

#[no_mangle]
pub extern "C" fn _start() -> ! {
    if let Ok(mut s) = DDSketch::new(black_box(0.01)) {
        black_box(tailguard_record_f64(&mut s, black_box(4_000_000)));
        let _ = black_box(s.quantile(black_box(0.99)));
    }
    common::park()
}
