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

/// A duration in whole nanoseconds, saturating.
pub(crate) fn nanos(d: core::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
