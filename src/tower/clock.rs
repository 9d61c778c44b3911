//! The layer's clock: tokio's, so that timers and timestamps agree (and
//! tokio's paused test clock drives both).

use tokio::time::Instant;

use crate::clock::{nanos, Clock};

/// [`tokio::time::Instant`]-based [`Clock`]: the nanoseconds the hedger
/// sees and the instants its timers sleep until come from the same source.
/// Copies share the origin; every request of one hedger must use copies of
/// one clock (see [`crate::clock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokioClock {
    origin: Instant,
}

impl TokioClock {
    /// A clock whose origin is now (tokio's now: paused time in tests).
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

    /// The instant `ns` nanoseconds after the origin; `None` past what
    /// `Instant` can represent.
    pub fn instant(&self, ns: u64) -> Option<Instant> {
        self.origin
            .checked_add(core::time::Duration::from_nanos(ns))
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ns(&self) -> u64 {
        nanos(Instant::now().saturating_duration_since(self.origin))
    }
}
