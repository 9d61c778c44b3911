//! Counters of what a hedger decided.

/// What a [`Hedger`](super::Hedger) has done, since it was built. Every
/// counter saturates at `u64::MAX`.
///
/// `hedge_wins + primary_wins` counts requests that succeeded; `extra load`
/// is `hedges_sent / requests`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct HedgeStats {
    /// Requests started.
    pub requests: u64,
    /// Hedges sent (extra attempts).
    pub hedges_sent: u64,
    /// Requests a hedge won.
    pub hedge_wins: u64,
    /// Requests the primary won.
    pub primary_wins: u64,
    /// Hedges the budget refused.
    pub budget_denials: u64,
    /// Requests started in cold start (too few samples), prior or not.
    pub cold_starts: u64,
    /// Requests not hedged because the caller said they are not idempotent.
    pub not_idempotent: u64,
    /// Hedges skipped because the in-flight cap was reached.
    pub in_flight_limited: u64,
    /// Requests given up (deadline, or every attempt failed).
    pub gave_up: u64,
    /// Latency samples recorded (winners and censored losers).
    pub samples: u64,
    /// Targets evicted from the table to make room.
    pub evictions: u64,
    /// Events at a time before the attempt they concern was sent (a clock
    /// that went backwards): their samples were not recorded.
    pub clock_anomalies: u64,
    /// The delay given to the most recent request that hedges (ns);
    /// `None` before the first one.
    pub current_delay_ns: Option<u64>,
}

/// `*counter += 1`, saturating.
#[inline(always)]
pub(crate) fn bump(counter: &mut u64) {
    *counter = counter.saturating_add(1);
}
