//! The memory-optimal approximation: the natural logarithm itself.

use super::{Interpolation, LogApproximation};

/// The exact natural logarithm (through `libm`), for [`LogarithmicMapping`](super::LogarithmicMapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NaturalLog;

impl LogApproximation for NaturalLog {
    const INTERPOLATION: Interpolation = Interpolation::None;
    const LN_BASE: f64 = 1.0;
    const CORRECTING_FACTOR: f64 = 1.0;

    type Scaled = ();

    fn scale(_multiplier: f64) {}

    #[inline(always)]
    fn log(v: f64) -> f64 {
        libm::log(v)
    }

    fn exp(x: f64) -> f64 {
        libm::exp(x)
    }
}
