//! The default approximation: `log2(2^e · (1 + s)) ≈ e + P(s)` with the cubic
//! `P(s) = ((A s + B) s + C) s`, `A = 6/35`, `B = −3/5`, `C = 10/7`.
//!
//! `P(0) = 0`, `P(1) = 1`, and `(1 + s) · P'(s) ≥ 10/7` on `[0, 1]` with
//! equality at `s = 0`, so `d ln(v) / d log` peaks at `7/10` against `ln 2`
//! for the exact `log2`: the multiplier grows by `7 / (10 ln 2)`, about 1 %
//! more buckets than the memory-optimal mapping, and no `ln` is called.

use super::{
    build_float, build_float_scaled, split_float, split_integer, split_mantissa, Interpolation,
    LogApproximation, MANTISSA_UNIT,
};
use core::f64::consts::LN_2;

const A: f64 = 6.0 / 35.0;
const B: f64 = -3.0 / 5.0;
const C: f64 = 10.0 / 7.0;

/// `log2` cubically interpolated between powers of two, for [`CubicMapping`](super::CubicMapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CubicLog;

impl LogApproximation for CubicLog {
    const INTERPOLATION: Interpolation = Interpolation::Cubic;
    const LN_BASE: f64 = LN_2;
    const CORRECTING_FACTOR: f64 = 7.0 / (10.0 * LN_2);

    /// `[A·m·2^-156, C·m·2^-52, B·m·2^-104]`: the multiplier, and the
    /// powers of `2^-52` that turn the integer mantissa `M` into `s`, folded
    /// into the coefficients. Scaling by a power of two is exact, so every
    /// operation rounds exactly as the same one on `s` would.
    type Scaled = [f64; 3];

    fn scale(m: f64) -> [f64; 3] {
        let u = MANTISSA_UNIT;
        [A * m * (u * u * u), C * m * u, B * m * (u * u)]
    }

    /// `((a M + b) M² + c M) + (e·m + offset)` with `M = s · 2^52`: the same
    /// roundings as `((A m s + B m) s² + C m s)`, Estrin's scheme (`M²`
    /// beside `a M + b`), and no multiply by `m` or `s = x − 1` on the
    /// dependency chain.
    #[inline(always)]
    fn scaled_log(v: f64, k: &[f64; 3], m: f64, offset: f64) -> f64 {
        let (e, mantissa) = split_mantissa(v);
        let [a, c, b] = *k;
        let m2 = mantissa * mantissa;
        (m2 * (a * mantissa + b) + c * mantissa) + (e * m + offset)
    }

    #[inline(always)]
    fn log(v: f64) -> f64 {
        let (e, s) = split_float(v);
        ((A * s + B) * s + C) * s + e
    }

    #[inline]
    fn exp(x: f64) -> f64 {
        let (e, s) = inverse(x);
        build_float(e, s)
    }

    #[inline]
    fn exp_scaled(x: f64, factor: f64) -> f64 {
        let (e, s) = inverse(x);
        build_float_scaled(e, s, factor)
    }
}

/// `x` as `(e, s)` with `e + P(s) = x`, `s` in `[0, 1]`.
#[inline(always)]
fn inverse(x: f64) -> (i32, f64) {
    let (e, t) = split_integer(x);
    // Solve P(s) = t for s in [0, 1). A degree-6 polynomial fitted to
    // the inverse of P (Chebyshev nodes, max error 3.3e-6) starts within
    // reach of one Halley step, which converges cubically: 0.9 · (3.3e-6)^3
    // is far below the rounding of P itself, so one step lands within
    // 4.5e-16 of the root (as close as two steps from a cruder start, and
    // one division instead of two). P is increasing, P' >= 0.74.
    let t2 = t * t;
    let t4 = t2 * t2;
    let [c0, c1, c2, c3, c4, c5, c6] = INVERSE;
    let s = (c0 + c1 * t) + t2 * (c2 + c3 * t) + t4 * ((c4 + c5 * t) + c6 * t2);
    // The residual in Estrin's form: `(A s + B) s²` beside `C s − t`, two
    // steps shorter than Horner's on the quantile's critical path.
    let f = (A * s + B) * (s * s) + (C * s - t);
    let df = (3.0 * A * s + 2.0 * B) * s + C;
    let ddf = 6.0 * A * s + 2.0 * B;
    (e, s - 2.0 * f * df / (2.0 * df * df - f * ddf))
}

/// Power-basis coefficients, in `t`, of the starting approximation to the
/// inverse of `P` on `[0, 1]`: a Chebyshev fit of degree 6, max error 3.3e-6.
const INVERSE: [f64; 7] = [
    -3.141_601_773_035_39e-6,
    7.003_349_455_585_577e-1,
    2.000_082_586_020_429e-1,
    1.169_533_456_959_533_4e-1,
    -8.205_026_126_306_303e-2,
    1.656_639_108_557_711_2e-1,
    -1.009_085_541_196_796_4e-1,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The guarantee's proof (see `LogLikeMapping`) allows the inverse an
    /// error of 2⁻⁴⁸ in `s`: check it densely over `[0, 1)` and at its ends,
    /// through the residual `P(s) − t` (`P' >= 0.74`, and `P` evaluated in
    /// `f64` is within a few ulps).
    #[test]
    fn inverse_is_within_its_allowance() {
        let n: u32 = if cfg!(miri) { 1_000 } else { 1_000_000 };
        // The ends of [0, 1), and just below 0, where the fraction rounds
        // up to exactly 1.
        let ends = [0.0, 1e-300, 1e-17, 0.5, 1.0 - 1e-16, -1e-17, -1e-300];
        let grid = (0..n).map(|i| f64::from(i) / f64::from(n));
        let mut worst = 0.0f64;
        for x in grid.chain(ends) {
            let (e, s) = inverse(x);
            let (whole, t) = super::super::split_integer(x);
            assert_eq!(e, whole, "{x}");
            let p = ((A * s + B) * s + C) * s;
            let error = ((p - t).abs() + 4.0 * f64::EPSILON) / 0.74;
            worst = worst.max(error);
            assert!(
                error <= 2f64.powi(-48),
                "x = {x}: s = {s}, P(s) = {p}, t = {t}"
            );
        }
        assert!(worst > 0.0);
    }
}
