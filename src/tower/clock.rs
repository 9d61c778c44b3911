//! The layer's clock: tokio's, so that timers and timestamps agree (and
//! tokio's paused test clock drives both).

use tokio::time::Instant;

use crate::clock::{Base, Clock};

/// [`tokio::time::Instant`]-based [`Clock`]: the nanoseconds the hedger
/// sees and the instants its timers sleep until come from the same source.
///
/// [`new`](Self::new) clocks are on the process's shared time base (see
/// [`crate::clock`]): one instant reads the same on every one of them and
/// on every [`MonotonicClock::new`](crate::clock::MonotonicClock::new), so
/// any number of layers and guards over one hedger agree. Under tokio's
/// paused clock they read paused time, in order even when the runtime's
/// clock runs behind the base's anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokioClock {
    base: Base,
}

impl TokioClock {
    /// A clock on the process's shared time base.
    pub fn new() -> Self {
        Self {
            base: Base::shared(),
        }
    }

    /// A clock that reads 0 at `origin` (and before it), nanoseconds
    /// since `origin` after it. Only clocks made `since` the same origin
    /// share its time base.
    pub fn since(origin: Instant) -> Self {
        Self {
            base: Base::since(origin.into_std()),
        }
    }

    /// What `instant` reads on this clock.
    pub fn reading(&self, instant: Instant) -> u64 {
        self.base.reading(instant.into_std())
    }

    /// The instant that reads `ns` on this clock; `None` where `Instant`
    /// cannot go.
    pub fn instant(&self, ns: u64) -> Option<Instant> {
        self.base.instant(ns).map(Instant::from_std)
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.base.reading(Instant::now().into_std())
    }
}
