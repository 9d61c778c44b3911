//! Monotonic clocks for the `std` conveniences: nanoseconds on a time base.
//!
//! The core never reads a clock; [`crate::guard::RequestGuard`] and the
//! tower layer do, through [`Clock`]. Every request of one hedger must be
//! timed on one time base: the hedger compares timestamps across requests
//! (window rotation, in-flight leases). Clocks made by
//! [`MonotonicClock::new`] (and the tower layer's `TokioClock::new`) all
//! share the process's time base: one instant reads the same nanoseconds
//! whichever of them reads it, on any thread, so any number of guards and
//! layers over one hedger agree without passing a clock around. A clock
//! made [`since`](MonotonicClock::since) an origin of your own reads 0
//! there instead. One exception: under tokio's paused test clock
//! (`test-util`), a `TokioClock` reads the paused time and a
//! `MonotonicClock` the real one, which part as soon as the test advances
//! time: a test that pauses time times every request on `TokioClock`s.

use core::time::Duration;
use std::sync::OnceLock;
use std::time::Instant;

/// A monotonic clock: nanoseconds on a time base of its own.
pub trait Clock {
    /// The time now, in nanoseconds on the clock's time base (saturating
    /// at `u64::MAX`).
    fn now_ns(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

/// What the process's shared time base reads at its anchor (the first
/// instant any clock asked for it): 2⁶² ns, so that instants up to 146
/// years before the anchor still read in order (a paused tokio clock may
/// run behind it), and the readings saturate only 438 years after it.
pub const SHARED_ANCHOR_NS: u64 = 1 << 62;

/// The anchor of the process's shared time base: the instant that reads
/// [`SHARED_ANCHOR_NS`].
pub fn shared_anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// A time base: `anchor` reads `at` nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Base {
    anchor: Instant,
    at: u64,
}

impl Base {
    /// The process's shared time base.
    pub(crate) fn shared() -> Self {
        Self {
            anchor: shared_anchor(),
            at: SHARED_ANCHOR_NS,
        }
    }

    /// `origin` reads 0, and so does every instant before it.
    pub(crate) const fn since(origin: Instant) -> Self {
        Self {
            anchor: origin,
            at: 0,
        }
    }

    /// What `instant` reads on this base.
    #[inline]
    pub(crate) fn reading(&self, instant: Instant) -> u64 {
        match instant.checked_duration_since(self.anchor) {
            Some(after) => self.at.saturating_add(nanos(after)),
            None => self
                .at
                .saturating_sub(nanos(self.anchor.saturating_duration_since(instant))),
        }
    }

    /// The instant that reads `ns`; `None` where `Instant` cannot go.
    pub(crate) fn instant(&self, ns: u64) -> Option<Instant> {
        match ns.checked_sub(self.at) {
            Some(after) => self.anchor.checked_add(Duration::from_nanos(after)),
            // ns < at: no wrap.
            None => self
                .anchor
                .checked_sub(Duration::from_nanos(self.at.wrapping_sub(ns))),
        }
    }
}

/// [`std::time::Instant`]-based [`Clock`] on the process's shared time
/// base (see the module docs), or on an origin of your own.
///
/// ```
/// use tailguard::clock::{Clock, MonotonicClock};
///
/// let (clock, other) = (MonotonicClock::new(), MonotonicClock::new());
/// let (a, b) = (clock.now_ns(), other.now_ns());
/// assert!(a <= b); // one time base
/// let at = clock.instant(b).expect("representable");
/// assert_eq!(clock.reading(at), b);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonotonicClock {
    base: Base,
}

impl MonotonicClock {
    /// A clock on the process's shared time base: it reads what every
    /// other clock made by `new` reads.
    pub fn new() -> Self {
        Self {
            base: Base::shared(),
        }
    }

    /// A clock that reads 0 at `origin` (and before it), nanoseconds
    /// since `origin` after it. Only clocks made `since` the same origin
    /// share its time base.
    pub const fn since(origin: Instant) -> Self {
        Self {
            base: Base::since(origin),
        }
    }

    /// What `instant` reads on this clock.
    pub fn reading(&self, instant: Instant) -> u64 {
        self.base.reading(instant)
    }

    /// The instant that reads `ns` on this clock (to arm a timer at a
    /// [`Request::next_timer`](crate::hedge::Request::next_timer));
    /// `None` where `Instant` cannot go.
    pub fn instant(&self, ns: u64) -> Option<Instant> {
        self.base.instant(ns)
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.base.reading(Instant::now())
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
    use super::{nanos, MonotonicClock, SHARED_ANCHOR_NS};
    use core::time::Duration;
    use std::time::Instant;

    #[test]
    fn clocks_made_apart_share_one_time_base() {
        let first = MonotonicClock::new();
        std::thread::sleep(Duration::from_millis(2));
        let second = std::thread::spawn(MonotonicClock::new).join().unwrap();
        let now = Instant::now();
        assert_eq!(first.reading(now), second.reading(now));
        assert_eq!(first, second);
        // Within a process's life: far from both ends of the range.
        let ns = first.reading(now);
        assert!((SHARED_ANCHOR_NS..SHARED_ANCHOR_NS + (1 << 61)).contains(&ns));
    }

    #[test]
    fn the_shared_base_reads_in_order_before_its_anchor_and_round_trips() {
        let clock = MonotonicClock::new();
        let anchor = super::shared_anchor();
        assert_eq!(clock.reading(anchor), SHARED_ANCHOR_NS);
        let mut last = 0;
        for back in [3_600_000_000_000u64, 1_000_000_000, 1, 0] {
            if let Some(t) = anchor.checked_sub(Duration::from_nanos(back)) {
                let ns = clock.reading(t);
                assert_eq!(ns, SHARED_ANCHOR_NS - back);
                assert!(ns >= last);
                last = ns;
                assert_eq!(clock.instant(ns), Some(t));
            }
        }
        let later = anchor + Duration::new(5, 7);
        let ns = clock.reading(later);
        assert_eq!(ns, SHARED_ANCHOR_NS + 5_000_000_007);
        assert_eq!(clock.instant(ns), Some(later));
    }

    #[test]
    fn a_clock_since_an_origin_reads_from_zero() {
        let origin = Instant::now();
        let clock = MonotonicClock::since(origin);
        assert_eq!(clock.reading(origin), 0);
        assert_eq!(clock.reading(origin + Duration::from_micros(3)), 3_000);
        if let Some(before) = origin.checked_sub(Duration::from_secs(1)) {
            assert_eq!(clock.reading(before), 0);
        }
        assert_eq!(clock.instant(0), Some(origin));
        assert_ne!(clock, MonotonicClock::new());
    }

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
