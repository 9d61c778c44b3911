//! Hedges in flight, counted in time slots that expire on their own, for
//! every thread at once.
//!
//! The rules of the hedger's own in-flight count (a hedge counts in the
//! slot of its send time, four slots a lease, a slot older than the lease
//! is reused and what it held expires) with each slot one `AtomicU64`
//! updated by compare-and-swap: the slot's epoch and its count change
//! together, so a hedge is never counted in, or taken out of, a slot that
//! another thread just reused.
//!
//! A word holds the epoch modulo 2⁴⁰ (bits 24..64), a "valid" bit (23) and
//! the count (bits 0..23, saturating at 2²³ − 1 hedges a slot). Epochs are
//! compared modulo 2⁴⁰ slots: two timestamps 2⁴⁰ slots apart (87 000 years
//! at the default 10 s lease; 18 minutes at a lease of 4 ns) look alike.

use crate::sync::{AtomicU64, Ordering};

/// Slots per lease.
const SLOTS: usize = 4;
const VALID: u64 = 1 << 23;
const COUNT: u64 = VALID - 1;
const EPOCH_SHIFT: u32 = 24;
const EPOCH_MOD: u64 = 1 << 40;

#[derive(Debug)]
pub(crate) struct AtomicInFlight {
    slot_ns: u64,
    slots: [AtomicU64; SLOTS],
    /// Hedges whose slot expired before their request released them.
    expired: AtomicU64,
}

impl AtomicInFlight {
    /// Slots for a lease of `lease_ns` (at least 2 ns a slot, as
    /// `Hedger`'s).
    pub(crate) fn new(lease_ns: u64) -> Self {
        Self {
            slot_ns: lease_ns.checked_div(SLOTS as u64).unwrap_or(0).max(2),
            slots: core::array::from_fn(|_| AtomicU64::new(0)),
            expired: AtomicU64::new(0),
        }
    }

    /// The slot of time `t` and its epoch modulo 2⁴⁰.
    #[inline]
    fn locate(&self, t: u64) -> (Option<&AtomicU64>, u64) {
        let epoch = t.checked_div(self.slot_ns).unwrap_or(t);
        // `SLOTS` divides 2⁴⁰: the slot of the truncated epoch is the same.
        let slot = epoch.checked_rem(SLOTS as u64).unwrap_or(0) as usize;
        (self.slots.get(slot), epoch & (EPOCH_MOD - 1))
    }

    /// Hedges counted at `now`: those whose slot is within `SLOTS` slots
    /// of `now`'s, before or after it.
    pub(crate) fn count(&self, now: u64) -> u32 {
        self.count_but(now, None)
    }

    /// [`count`](Self::count) over every slot but `skip`.
    fn count_but(&self, now: u64, skip: Option<&AtomicU64>) -> u32 {
        let (_, current) = self.locate(now);
        self.slots
            .iter()
            .filter(|slot| skip.is_none_or(|s| !core::ptr::eq(*slot, s)))
            .fold(0u32, |sum, slot| {
                let w = slot.load(Ordering::Acquire);
                let ahead = (w >> EPOCH_SHIFT).wrapping_sub(current) & (EPOCH_MOD - 1);
                let near = ahead < SLOTS as u64 || EPOCH_MOD.wrapping_sub(ahead) < SLOTS as u64;
                if w & VALID != 0 && near {
                    // `COUNT` < 2²³: the cast is exact.
                    sum.saturating_add((w & COUNT) as u32)
                } else {
                    sum
                }
            })
    }

    /// Counts a hedge sent at `now`, unless that would make more than
    /// `cap` hedges counted at `now`: `false` then, and nothing changes.
    ///
    /// The check and the count are one compare-and-swap on `now`'s slot,
    /// so threads counting into one slot at once cannot both take its
    /// last place; the other slots are read inside the loop, so only
    /// threads counting into two different slots at the same instant (on
    /// either side of a slot boundary) can each miss the other's.
    pub(crate) fn acquire(&self, now: u64, cap: Option<u32>) -> bool {
        let (Some(slot), epoch) = self.locate(now) else {
            return true;
        };
        let mut expired = 0;
        let counted = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            // The slot as it would be for `now`: its own epoch's count, or
            // reused (what it held expires).
            let (base, expiring) = if w & VALID != 0 && w >> EPOCH_SHIFT == epoch {
                (w, 0)
            } else {
                let held = if w & VALID != 0 { w & COUNT } else { 0 };
                (epoch << EPOCH_SHIFT | VALID, held)
            };
            if let Some(cap) = cap {
                // `COUNT` < 2²³: the cast is exact.
                let own = (base & COUNT) as u32;
                if self.count_but(now, Some(slot)).saturating_add(own) >= cap {
                    return None;
                }
            }
            expired = expiring;
            Some(if base & COUNT < COUNT {
                base.wrapping_add(1)
            } else {
                base
            })
        });
        if counted.is_err() {
            return false;
        }
        if expired > 0 {
            self.expired.fetch_add(expired, Ordering::Relaxed);
        }
        true
    }

    /// Takes back a hedge sent at `sent_at`, if its slot still counts it.
    pub(crate) fn release(&self, sent_at: u64) {
        let (Some(slot), epoch) = self.locate(sent_at) else {
            return;
        };
        let _ = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            (w & VALID != 0 && w >> EPOCH_SHIFT == epoch && w & COUNT > 0)
                .then(|| w.wrapping_sub(1))
        });
    }

    /// Hedges that expired unreleased so far.
    pub(crate) fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hedge::in_flight::InFlight;
    use proptest::prelude::*;

    proptest! {
        /// The same counts as the hedger's own in-flight slots, whatever
        /// the order of sends, releases and reads.
        #[test]
        fn counts_as_the_plain_slots_do(
            lease in 1u64..10_000,
            ops in prop::collection::vec((0u8..4, 0u64..100_000), 1..200),
            cap in 1u32..4,
        ) {
            let mut plain = InFlight::new(lease);
            let shared = AtomicInFlight::new(lease);
            for (op, t) in ops {
                match op {
                    0 => {
                        plain.acquire(t);
                        prop_assert!(shared.acquire(t, None));
                    }
                    1 => {
                        plain.release(t);
                        shared.release(t);
                    }
                    // Capped: counted exactly when the plain count is
                    // below the cap (the check the machine makes first).
                    2 => {
                        let room = plain.count(t) < cap;
                        if room {
                            plain.acquire(t);
                        }
                        prop_assert_eq!(shared.acquire(t, Some(cap)), room);
                    }
                    _ => {}
                }
                prop_assert_eq!(plain.count(t), shared.count(t));
                prop_assert_eq!(plain.expired(), shared.expired());
            }
        }
    }

    #[test]
    fn epochs_compare_modulo_2_pow_40() {
        let f = AtomicInFlight::new(8); // the shortest slots: 2 ns
        assert!(f.acquire(0, None));
        assert_eq!(f.count(3), 1);
        assert_eq!(f.count(4 * 1_000), 0);
        // 2⁴⁰ slots later the slot looks current again: the documented bound.
        assert_eq!(f.count(2 << 40), 1);
    }
}
