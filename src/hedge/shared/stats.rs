//! The shared hedger's counters, striped over cache lines.
//!
//! Every request bumps a few counters (requests, a win, a sample). One
//! `AtomicU64` each, bumped by every thread, would make their cache line
//! travel between cores on every request; instead each counter has
//! [`STRIPES`] copies, on lines of their own, and a thread bumps the copy
//! of its stripe: the stripe is picked from the address of the thread's
//! stack (no thread ids in `no_std`), which is stable within a thread and
//! differs between threads whose stacks are a megabyte or more apart, as
//! those of OS threads are. It is only a hint: two threads on one stripe
//! are exact too, just slower. Reads sum the stripes.

use crate::hedge::machine::Stat;
use crate::hedge::HedgeStats;
use crate::sync::{AtomicU64, Ordering};

/// Copies of each counter.
const STRIPES: usize = 8;

/// Counters a stripe holds: every [`Stat`] and the requests.
const COUNTERS: usize = 15;

/// The index of "requests started" (the [`Stat`]s come first).
const REQUESTS: usize = COUNTERS - 1;

/// One copy of every counter, alone on its cache lines (128 bytes: two
/// 64-byte lines, which adjacent-line prefetchers pair).
#[derive(Debug)]
#[repr(align(128))]
struct Stripe([AtomicU64; COUNTERS]);

#[derive(Debug)]
pub(crate) struct AtomicStats {
    stripes: [Stripe; STRIPES],
    /// The latest timer delay plus one, saturating; 0 for none.
    current_delay: AtomicU64,
}

/// This thread's stripe.
#[inline(always)]
fn stripe() -> usize {
    let marker = 0u8;
    let address = core::ptr::addr_of!(marker).addr();
    // Megabyte granularity, hashed (Fibonacci) into the stripe count.
    ((address >> 20).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> (usize::BITS - 3))
        % STRIPES
}

impl AtomicStats {
    pub(crate) fn new() -> Self {
        Self {
            stripes: core::array::from_fn(|_| Stripe(core::array::from_fn(|_| AtomicU64::new(0)))),
            current_delay: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    fn add(&self, index: usize) {
        if let Some(counter) = self.stripes.get(stripe()).and_then(|s| s.0.get(index)) {
            // Cannot overflow: 2⁶⁴ events at 10⁹ a second take 584 years.
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    pub(crate) fn bump(&self, stat: Stat) {
        self.add(stat as usize);
    }

    #[inline(always)]
    pub(crate) fn request(&self) {
        self.add(REQUESTS);
    }

    #[inline]
    pub(crate) fn set_current_delay(&self, delay_ns: u64) {
        let encoded = delay_ns.saturating_add(1);
        // Most requests get the delay the last one got: no write then.
        if self.current_delay.load(Ordering::Relaxed) != encoded {
            self.current_delay.store(encoded, Ordering::Relaxed);
        }
    }

    fn sum(&self, index: usize) -> u64 {
        self.stripes.iter().fold(0u64, |sum, s| {
            sum.saturating_add(s.0.get(index).map_or(0, |c| c.load(Ordering::Relaxed)))
        })
    }

    /// The counters summed over the stripes (each exact; a read racing
    /// with events may see some of an event's counters and not others).
    pub(crate) fn snapshot(&self) -> HedgeStats {
        let s = |stat: Stat| self.sum(stat as usize);
        HedgeStats {
            requests: self.sum(REQUESTS),
            hedges_sent: s(Stat::HedgesSent),
            retries_released: s(Stat::RetriesReleased),
            hedge_wins: s(Stat::HedgeWins),
            primary_wins: s(Stat::PrimaryWins),
            budget_denials: s(Stat::BudgetDenials),
            cold_starts: s(Stat::ColdStarts),
            aggregate_delays: s(Stat::AggregateDelays),
            not_idempotent: s(Stat::NotIdempotent),
            in_flight_limited: s(Stat::InFlightLimited),
            leases_expired: 0,
            gave_up: s(Stat::GaveUp),
            samples: s(Stat::Samples),
            censored_samples: s(Stat::CensoredSamples),
            samples_refused: s(Stat::SamplesRefused),
            clock_anomalies: s(Stat::ClockAnomalies),
            evictions: 0,
            // A delay of `u64::MAX` reads as `u64::MAX − 1`.
            current_delay_ns: self.current_delay.load(Ordering::Relaxed).checked_sub(1),
        }
    }
}

// Every `Stat` has a counter before `REQUESTS`.
const _: () = assert!(Stat::ClockAnomalies as usize + 1 == REQUESTS);
