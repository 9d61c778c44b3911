//! Monotonic clocks for the `std` conveniences: nanoseconds since an origin.
//!
//! The core never reads a clock; [`crate::guard::RequestGuard`] and the
//! tower layer do, through [`Clock`]. Every request of one hedger must be
//! timed by the same clock (copies of one value share its origin): the
//! hedger compares timestamps across requests (window rotation, in-flight
//! leases).

use std::time::Instant;

/// A monotonic clock: nanoseconds since an origin of its own.
pub trait Clock {
    /// Nanoseconds elapsed since the origin (saturating at `u64::MAX`,
    /// about 584 years).
    fn now_ns(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

/// [`std::time::Instant`]-based [`Clock`]. Copies share the origin.
///
/// ```
/// use tailguard::clock::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let (a, b) = (clock.now_ns(), clock.now_ns());
/// assert!(a <= b);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self::since(Instant::now())
    }

    /// A clock whose origin is `origin`.
    pub const fn since(origin: Instant) -> Self {
        Self { origin }
    }

    /// The origin.
    pub const fn origin(&self) -> Instant {
        self.origin
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        nanos(self.origin.elapsed())
    }
}

/// A duration in whole nanoseconds, saturating. In 64-bit arithmetic, not
/// through `as_nanos`'s `u128`: it runs on every clock read.
#[inline]
pub(crate) fn nanos(d: core::time::Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::nanos;
    use core::time::Duration;

    #[test]
    fn nanos_is_exact_and_saturates() {
        let exact = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let last = u64::MAX / 1_000_000_000; // 18 446 744 073 s
        for d in [
            Duration::ZERO,
            Duration::new(0, 999_999_999),
            Duration::new(1, 1),
            Duration::new(last, 709_551_615), // u64::MAX ns exactly
            Duration::new(last, 709_551_616), // one past
            Duration::new(last + 1, 0),
            Duration::MAX,
        ] {
            assert_eq!(nanos(d), exact(d), "{d:?}");
        }
        assert_eq!(nanos(Duration::new(last, 709_551_615)), u64::MAX);
        assert_eq!(nanos(Duration::new(last, 709_551_614)), u64::MAX - 1);
    }

    proptest::proptest! {
        #[test]
        fn nanos_matches_as_nanos(
            secs in proptest::prop_oneof![0u64..=18_446_744_074, proptest::num::u64::ANY],
            sub in 0u32..1_000_000_000,
        ) {
            let d = Duration::new(secs, sub);
            proptest::prop_assert_eq!(nanos(d), u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        }
    }
}
