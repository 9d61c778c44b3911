//! Hedges in flight, counted in time slots that expire on their own.
//!
//! A request dropped without a final event (in async Rust, cancellation is
//! a drop) never says its hedges are done. Each hedge is counted in the
//! slot of its send time; a finished request takes its hedges back out of
//! their slots, and a slot older than the lease is simply reused, so what
//! a dropped request held stops counting after the lease without any call.

/// Slots per lease.
const SLOTS: usize = 4;

#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    slot_ns: u64,
    epochs: [u64; SLOTS],
    counts: [u32; SLOTS],
    /// Hedges whose slot expired before their request released them.
    expired: u64,
}

impl InFlight {
    /// Slots for a lease of `lease_ns` (at least 2 ns a slot, so that no
    /// epoch is `u64::MAX`, the empty slot's mark).
    pub(crate) fn new(lease_ns: u64) -> Self {
        Self {
            slot_ns: lease_ns.checked_div(SLOTS as u64).unwrap_or(0).max(2),
            // No slot has a valid epoch yet: `u64::MAX` is never current
            // with a nonzero count (`acquire` resets before counting).
            epochs: [u64::MAX; SLOTS],
            counts: [0; SLOTS],
            expired: 0,
        }
    }

    fn epoch(&self, t: u64) -> u64 {
        // `slot_ns` is at least 2: never `u64::MAX`, the empty slot's mark.
        t.checked_div(self.slot_ns).unwrap_or(t)
    }

    fn slot(epoch: u64) -> usize {
        // `SLOTS` is a power of two; the remainder is below it.
        epoch.checked_rem(SLOTS as u64).unwrap_or(0) as usize
    }

    /// Hedges counted at `now`: those whose slot is within `SLOTS` slots of
    /// `now`'s, before or after it (events from threads that read the clock
    /// a little apart arrive slightly out of order; a slot far from `now`,
    /// from another clock, does not count).
    pub(crate) fn count(&self, now: u64) -> u32 {
        let current = self.epoch(now);
        self.epochs
            .iter()
            .zip(self.counts.iter())
            .filter(|&(&e, _)| e != u64::MAX && e.abs_diff(current) < SLOTS as u64)
            .fold(0u32, |sum, (_, &c)| sum.saturating_add(c))
    }

    /// Counts a hedge sent at `now`.
    pub(crate) fn acquire(&mut self, now: u64) {
        let epoch = self.epoch(now);
        let i = Self::slot(epoch);
        if let (Some(e), Some(c)) = (self.epochs.get_mut(i), self.counts.get_mut(i)) {
            if *e != epoch {
                self.expired = self.expired.saturating_add(u64::from(*c));
                *e = epoch;
                *c = 0;
            }
            *c = c.saturating_add(1);
        }
    }

    /// Takes back a hedge sent at `sent_at`, if its slot still counts it.
    pub(crate) fn release(&mut self, sent_at: u64) {
        let epoch = self.epoch(sent_at);
        let i = Self::slot(epoch);
        if let (Some(&e), Some(c)) = (self.epochs.get(i), self.counts.get_mut(i)) {
            if e == epoch {
                *c = c.saturating_sub(1);
            }
        }
    }

    /// Hedges that expired unreleased so far.
    pub(crate) fn expired(&self) -> u64 {
        self.expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_expire_and_releases_balance() {
        let mut f = InFlight::new(4_000);
        f.acquire(0);
        f.acquire(1_500);
        assert_eq!(f.count(1_500), 2);
        f.release(1_500);
        assert_eq!(f.count(2_000), 1);
        // The hedge sent at 0 is never released: it stops counting once
        // its slot is four slots old.
        assert_eq!(f.count(3_999), 1);
        assert_eq!(f.count(4_000), 0);
        f.acquire(4_000); // reuses slot 0: the leak is counted
        assert_eq!(f.expired(), 1);
        // A far-future acquisition does not count at normal times, and a
        // release for it is harmless.
        f.acquire(u64::MAX);
        assert_eq!(f.count(4_001), 1);
        f.release(u64::MAX);
        f.release(123_456_789);
        assert_eq!(f.count(4_001), 1);
    }
}
