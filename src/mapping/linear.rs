//! The cheapest approximation: `log2(2^e · (1 + s)) ≈ e + s`.
//!
//! `d ln(v) / d(e + s) = 1 / (1 + s)` peaks at 1 (at `s = 0`), against `ln 2`
//! for the exact `log2`; so the multiplier grows by `1 / ln 2` (44 % more
//! buckets) to keep consecutive bounds within γ.

use super::{
    build_float, build_float_scaled, split_float, split_integer, Interpolation, LogApproximation,
};
use core::f64::consts::LN_2;

/// `log2` linearly interpolated between powers of two, for [`LinearMapping`](super::LinearMapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LinearLog;

impl LogApproximation for LinearLog {
    const INTERPOLATION: Interpolation = Interpolation::Linear;
    const LN_BASE: f64 = LN_2;
    const CORRECTING_FACTOR: f64 = 1.0 / LN_2;

    type Scaled = ();

    fn scale(_multiplier: f64) {}

    #[inline(always)]
    fn log(v: f64) -> f64 {
        let (e, s) = split_float(v);
        e + s
    }

    #[inline]
    fn exp(x: f64) -> f64 {
        let (e, s) = split_integer(x);
        build_float(e, s)
    }

    #[inline]
    fn exp_scaled(x: f64, factor: f64) -> f64 {
        let (e, s) = split_integer(x);
        build_float_scaled(e, s, factor)
    }
}
