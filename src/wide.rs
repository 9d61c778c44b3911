//! 128-bit products divided by a 64-bit number without a 128-bit divide.
//!
//! On 32-bit targets LLVM has no library call for a `u128` division and
//! expands every one inline, about a kilobyte of Thumb code each; on
//! 64-bit ones it calls `__udivti3`. The integer estimator needs only
//! "a 128-bit number over a 64-bit one, the quotient fitting 64 bits",
//! which two 64-by-64 divisions do (Knuth's algorithm D with 32-bit
//! digits, as Hacker's Delight's `divlu` writes it).

/// `⌊(high · 2⁶⁴ + low) / divisor⌋`, which fits `u64` when
/// `high < divisor`; `u64::MAX` otherwise (a quotient that does not fit,
/// or a divisor of 0).
pub(crate) fn div_wide(high: u64, low: u64, divisor: u64) -> u64 {
    const DIGIT: u64 = 1 << 32;
    const MASK: u64 = DIGIT - 1;
    if high >= divisor {
        return u64::MAX;
    }
    // Normalise: the divisor's top bit set (divisor > high ≥ 0, so not 0).
    let s = divisor.leading_zeros();
    let v = divisor.wrapping_shl(s);
    let (v1, v0) = (v >> 32, v & MASK);
    // `high < divisor`: shifted by `s` it still fits 64 bits.
    let top = high.wrapping_shl(s) | low.checked_shr(64u32.wrapping_sub(s)).unwrap_or(0);
    let u10 = low.wrapping_shl(s);
    let (u1, u0) = (u10 >> 32, u10 & MASK);
    let q1 = digit(top, u1, v1, v0);
    // The partial remainder fits 64 bits (it is below `v`): wrapping is exact.
    let u21 = top
        .wrapping_shl(32)
        .wrapping_add(u1)
        .wrapping_sub(q1.wrapping_mul(v));
    let q0 = digit(u21, u0, v1, v0);
    q1.wrapping_shl(32) | q0
}

/// One 32-bit quotient digit of `(top · 2³² + next) / (v1 · 2³² + v0)`,
/// `top < v` and `v1 ≥ 2³¹`: estimated from the top digits, then corrected
/// (at most twice).
#[inline]
fn digit(top: u64, next: u64, v1: u64, v0: u64) -> u64 {
    const DIGIT: u64 = 1 << 32;
    // v1 ≥ 2³¹: never 0.
    let mut q = top.checked_div(v1).unwrap_or(0);
    let mut rest = top.wrapping_sub(q.wrapping_mul(v1));
    // `q < 2³²` before the product (short-circuit): it fits; `rest < 2³²`.
    while q >= DIGIT || q.wrapping_mul(v0) > rest.wrapping_shl(32) | next {
        q = q.wrapping_sub(1);
        rest = rest.wrapping_add(v1);
        if rest >= DIGIT {
            break;
        }
    }
    q
}

/// `⌊a · b / c⌋` for `b ≤ c` (the quotient is at most `a`); `a` when
/// `c` is 0.
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    if c == 0 {
        return a;
    }
    let product = u128::from(a).wrapping_mul(u128::from(b));
    div_wide((product >> 64) as u64, product as u64, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn divides_like_u128(high: u64, low: u64, divisor in 1u64..) {
            let x = (u128::from(high) << 64) | u128::from(low);
            let want = u64::try_from(x / u128::from(divisor)).unwrap_or(u64::MAX);
            prop_assert_eq!(div_wide(high, low, divisor), want);
        }

        #[test]
        fn divides_small_divisors(high in 0u64..16, low: u64, divisor in 1u64..64) {
            let x = (u128::from(high) << 64) | u128::from(low);
            let want = u64::try_from(x / u128::from(divisor)).unwrap_or(u64::MAX);
            prop_assert_eq!(div_wide(high, low, divisor), want);
        }

        #[test]
        fn scales(a: u64, b: u64, c: u64) {
            let (b, c) = (b.min(c), b.max(c));
            let want = if c == 0 { a } else {
                u64::try_from(u128::from(a) * u128::from(b) / u128::from(c)).unwrap()
            };
            prop_assert_eq!(mul_div(a, b, c), want);
        }
    }

    #[test]
    fn edges() {
        assert_eq!(div_wide(0, 0, 1), 0);
        assert_eq!(div_wide(u64::MAX - 1, u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(div_wide(1, 0, 1), u64::MAX);
        assert_eq!(div_wide(0, 5, 0), u64::MAX);
        assert_eq!(div_wide(1, 0, 2), 1 << 63);
    }
}
