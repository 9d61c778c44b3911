//! Counters of what a hedger decided.

/// What a [`Hedger`](super::Hedger) has done, since it was built. Every
/// counter counts one event at a time, so none can overflow (2⁶⁴ events
/// at 10⁹ a second take 584 years).
///
/// A *request* is one [`start`](super::Hedger::start): when the caller
/// retries a failed request, the retry is a new request (and deposits into
/// the budget again). Extra backend load per hedger request is
/// `(hedges_sent + retries_released) / requests`; per client-visible
/// operation, divide by `requests − caller retries` instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct HedgeStats {
    /// Requests started.
    pub requests: u64,
    /// Hedges sent: extra attempts raced against attempts in flight, on
    /// the hedge timer or at once after a retryable failure of another.
    pub hedges_sent: u64,
    /// Retries sent: attempts that replaced one that failed (retryable)
    /// when no other was in flight. Not in `hedges_sent`.
    pub retries_released: u64,
    /// Requests a hedge won.
    pub hedge_wins: u64,
    /// Requests a retry won (not in `hedge_wins`).
    pub retry_wins: u64,
    /// Requests the primary won.
    pub primary_wins: u64,
    /// Hedges the budget refused.
    pub budget_denials: u64,
    /// Requests started without a data-driven delay (no warm window: the
    /// prior applied, or nothing did).
    pub cold_starts: u64,
    /// Requests whose delay came from the aggregate window (their target
    /// had no slot, or its own window was cold).
    pub aggregate_delays: u64,
    /// Requests not hedged because the caller said they are not idempotent.
    pub not_idempotent: u64,
    /// Times a hedge was held back because the in-flight cap was reached:
    /// a hedge held back looks again one delay later, and each look that
    /// finds the cap still reached counts once more.
    pub in_flight_limited: u64,
    /// Hedges that stopped counting as in flight because their lease ran
    /// out before their request ended (dropped requests, or attempts longer
    /// than the lease). Counted when their time slot is reused by a later
    /// hedge, so it may lag, or never count a lease that nothing reused.
    pub leases_expired: u64,
    /// Requests given up (deadline, fatal failure, every attempt failed,
    /// or abandoned by the caller).
    pub gave_up: u64,
    /// Exact latency samples recorded (winners).
    pub samples: u64,
    /// Censored samples recorded (attempts cancelled or given up while in
    /// flight: their latency is at least their elapsed time).
    pub censored_samples: u64,
    /// Samples refused: an elapsed time above
    /// [`max_sample_ns`](super::HedgeConfig::max_sample_ns) (it cannot be
    /// real), or one the sketch refused; in a
    /// [`SharedHedger`](super::SharedHedger), also a sample dropped because
    /// another thread was emptying its window after an idle gap.
    pub samples_refused: u64,
    /// Attempts whose commit or give-up came at a time before their own send
    /// (a clock that went backwards), one per attempt: their samples were
    /// not recorded.
    pub clock_anomalies: u64,
    /// Failed attempts not retried because retries were throttled
    /// ([`HedgeConfig::retry_throttle`](super::HedgeConfig::retry_throttle)):
    /// their requests gave up.
    pub retries_throttled: u64,
    /// Targets evicted from the table to make room (a target without a
    /// slot takes one only once asked for about twice as often as the
    /// least used; see *Targets* in the module docs).
    pub evictions: u64,
    /// The delay given to the most recent request that hedges on a timer
    /// (ns); `None` before the first one.
    pub current_delay_ns: Option<u64>,
}

/// `*counter += 1`. Cannot overflow: one event a call, and 2⁶⁴ events at
/// 10⁹ a second take 584 years (a plain add: it is on every request).
#[inline(always)]
pub(crate) fn bump(counter: &mut u64) {
    *counter = counter.wrapping_add(1);
}
