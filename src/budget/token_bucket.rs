//! A time-refilled token bucket in one atomic word (GCRA).

use super::{check_share, BudgetError, BudgetStats, Counters, HedgeBudget, UNITS_PER_TOKEN};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

const NS_PER_SEC: u64 = 1_000_000_000;

/// A token bucket refilled at a fixed rate, holding at most `burst` tokens.
///
/// Implemented as GCRA (the generic cell rate algorithm): the whole bucket is
/// one `AtomicU64`, the *theoretical arrival time* (TAT) in caller
/// nanoseconds. A token is granted at `now` when
/// `max(TAT, now) + interval ≤ now + burst × interval`, and the grant moves
/// TAT to `max(TAT, now) + interval` with one compare-and-swap. The bucket
/// starts full.
///
/// **Bound.** Over any sequence of calls, from any number of threads, whose
/// timestamps lie in `[t_min, t_max]`:
/// `grants ≤ burst + (t_max − t_min) / interval`, as long as the clock
/// does not step (below). The interval is the exact one rounded *up* to a
/// whole nanosecond, so the bucket never grants more than the nominal rate
/// allows. Rates above 10⁹ tokens per second are clamped to one token per
/// nanosecond.
///
/// **Clock steps.** An ask whose timestamp is further behind TAT than the
/// window (`burst × interval`) and [`STALE_AFTER_NS`](Self::STALE_AFTER_NS)
/// (1 s) is *stale*: it comes from a clock stepped back, or TAT came from a
/// timestamp far ahead (one wall-clock reading among monotonic ones). Such
/// asks are refused; after [`STALE_RUN`](Self::STALE_RUN) (16) of them in a
/// row — with no grant and no other refusal between them — the bucket
/// restarts *empty* at the last one's time and refills at
/// its rate from there, instead of staying drained until the clock catches
/// up (for ever, after a wall-clock reading). A smaller step back is waited
/// out: the bucket grants again once the clock has advanced by the step
/// less the window, at most a second (and an interval). Each stretch
/// between restarts obeys the bound, without the burst after the first:
/// across a restart the bound holds per stretch, not over the union of
/// their timestamps (a clock stepped back replays the same numbers). The
/// bucket cannot tell a clock stepped back for good from the only thread
/// asking for a while being more than the window and a second behind the
/// others: threads must read one clock (as they do a monotonic one, a few
/// microseconds apart), or each such stretch restarts the bucket and may
/// give up to a burst more once the others ask again. Under concurrency the
/// run is counted approximately (threads racing may count an ask twice or
/// miss one); a restart is one compare-and-swap on TAT, so it undoes no
/// grant made meanwhile (unless grants and another restart brought TAT
/// back to the very value it read, while its thread was stalled for over
/// a second: an ABA case, which at worst gives a burst once more).
///
/// ```
/// use tailguard::budget::{HedgeBudget, TokenBucket};
///
/// // The article's rule: 10 % (1 000 bp) of an estimated 200 requests per
/// // second is 20 hedges per second, with at most 5 at once.
/// let bucket = TokenBucket::from_share(1_000, 200, 5)?;
/// assert_eq!(bucket.interval_ns(), 50_000_000);
/// let t0 = 7_000_000_000; // any epoch
/// for _ in 0..5 {
///     assert!(bucket.try_acquire(t0)); // one CAS each
/// }
/// assert!(!bucket.try_acquire(t0)); // burst spent
/// assert!(bucket.try_acquire(t0 + 50_000_000)); // one interval later
/// # Ok::<(), tailguard::budget::BudgetError>(())
/// ```
#[derive(Debug)]
pub struct TokenBucket {
    /// Theoretical arrival time, in caller nanoseconds.
    tat: AtomicU64,
    /// The latest timestamp given to `try_acquire`; only feeds `stats`.
    seen: AtomicU64,
    counters: Counters,
    /// Nanoseconds per token (≥ 1).
    interval_ns: u64,
    /// `burst × interval_ns`: how far TAT may run ahead of `now`.
    window_ns: u64,
    burst: u32,
    /// The run of stale asks (see *Clock steps*): its length, and the TAT
    /// (folded) it was counted against.
    stale_run: AtomicU32,
    stale_of: AtomicU32,
}

impl TokenBucket {
    /// An ask whose timestamp is further behind the bucket's time than its
    /// window and this (1 s) is *stale*; see *Clock steps*.
    pub const STALE_AFTER_NS: u64 = NS_PER_SEC;

    /// Stale asks in a row (no grant or other refusal between them) after
    /// which the bucket restarts on their clock; see *Clock steps*.
    pub const STALE_RUN: u32 = 16;

    /// A bucket refilled at `rate_per_sec` tokens per second, holding at most
    /// `burst` tokens.
    ///
    /// # Errors
    /// [`BudgetError::ZeroRate`], [`BudgetError::ZeroCapacity`] for a zero
    /// burst.
    pub const fn new(rate_per_sec: u32, burst: u32) -> Result<Self, BudgetError> {
        if rate_per_sec == 0 {
            return Err(BudgetError::ZeroRate);
        }
        Self::with_interval(NS_PER_SEC.div_ceil(rate_per_sec as u64), burst)
    }

    /// A bucket refilled at `estimated_rps × share_bps / 10 000` tokens per
    /// second (the article's rule), holding at most `burst` tokens.
    ///
    /// The rate is fixed: if traffic differs from the estimate, the share of
    /// hedges does too. [`RatioBudget`](super::RatioBudget) needs no estimate.
    ///
    /// # Errors
    /// [`BudgetError::ShareOutOfRange`] unless `1 ≤ share_bps ≤ 10 000`,
    /// [`BudgetError::ZeroRate`] for `estimated_rps == 0`,
    /// [`BudgetError::ZeroCapacity`] for a zero burst,
    /// [`BudgetError::BurstTooLong`] if `burst` intervals exceed
    /// `u64::MAX / 2` ns.
    pub const fn from_share(
        share_bps: u32,
        estimated_rps: u32,
        burst: u32,
    ) -> Result<Self, BudgetError> {
        let share = match check_share(share_bps) {
            Ok(s) => s as u64,
            Err(e) => return Err(e),
        };
        if estimated_rps == 0 {
            return Err(BudgetError::ZeroRate);
        }
        // tokens/s = rps × share / 10⁴, so ns/token = 10⁹ × 10⁴ / (rps × share).
        // Both factors are below 2³², so the product fits in u64 and is ≥ 1.
        let per_token = (estimated_rps as u64).saturating_mul(share);
        Self::with_interval(
            (NS_PER_SEC.saturating_mul(UNITS_PER_TOKEN)).div_ceil(per_token),
            burst,
        )
    }

    /// A bucket that gains one token every `interval_ns` nanoseconds, holding
    /// at most `burst` tokens. Use it for rates below one per second.
    ///
    /// # Errors
    /// [`BudgetError::ZeroInterval`], [`BudgetError::ZeroCapacity`] for a
    /// zero burst, [`BudgetError::BurstTooLong`] if `burst × interval_ns`
    /// exceeds `u64::MAX / 2` ns (292 years: such a bucket could never
    /// grant, as it denies within one window of `u64::MAX`).
    pub const fn with_interval(interval_ns: u64, burst: u32) -> Result<Self, BudgetError> {
        if interval_ns == 0 {
            return Err(BudgetError::ZeroInterval);
        }
        if burst == 0 {
            return Err(BudgetError::ZeroCapacity);
        }
        let window_ns = match interval_ns.checked_mul(burst as u64) {
            Some(w) if w <= u64::MAX / 2 => w,
            _ => return Err(BudgetError::BurstTooLong { burst, interval_ns }),
        };
        Ok(Self {
            tat: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            counters: Counters::new(),
            interval_ns,
            window_ns,
            burst,
            stale_run: AtomicU32::new(0),
            stale_of: AtomicU32::new(0),
        })
    }

    /// Nanoseconds per token (the refill interval, rounded up).
    #[must_use]
    pub const fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// The most tokens the bucket holds.
    #[must_use]
    pub const fn burst(&self) -> u32 {
        self.burst
    }

    /// The balance at `now_ns`, in units ([`UNITS_PER_TOKEN`] per token),
    /// between 0 and `burst × UNITS_PER_TOKEN`. A token can be taken at
    /// `now_ns` exactly when this is at least one token.
    #[must_use]
    pub fn balance_at(&self, now_ns: u64) -> u64 {
        let tat = self.tat.load(Ordering::Relaxed);
        let base = if tat > now_ns { tat } else { now_ns };
        // Time still unspent in the window; ≤ window_ns because base ≥ now.
        let room = now_ns.saturating_add(self.window_ns).saturating_sub(base);
        // room ≤ burst × interval, so this is ≤ burst × 10⁴ < 2⁴⁷; interval ≥ 1.
        let units = u128::from(room)
            .saturating_mul(u128::from(UNITS_PER_TOKEN))
            .checked_div(u128::from(self.interval_ns))
            .unwrap_or(0);
        u64::try_from(units).unwrap_or(u64::MAX)
    }

    /// Takes one token without touching the counters.
    #[inline]
    fn take(&self, now_ns: u64) -> bool {
        let limit = now_ns.saturating_add(self.window_ns);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let base = if tat > now_ns { tat } else { now_ns };
            // At the end of the u64 time range there is none: fail closed.
            let next = match base.checked_add(self.interval_ns) {
                Some(next) if next <= limit => next,
                _ => {
                    self.refused(now_ns, tat);
                    return false;
                }
            };
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => tat = actual,
            }
        }
    }

    /// An ask at `now_ns` refused with TAT at `tat`. A stale one (further
    /// behind than the window and [`STALE_AFTER_NS`](Self::STALE_AFTER_NS))
    /// counts toward a restart; any other ends the run. Out of line: the
    /// grant is the path that counts.
    #[inline(never)]
    fn refused(&self, now_ns: u64, tat: u64) {
        let behind = self.window_ns.saturating_add(Self::STALE_AFTER_NS);
        if now_ns >= tat.saturating_sub(behind) {
            if self.stale_run.load(Ordering::Relaxed) != 0 {
                self.stale_run.store(0, Ordering::Relaxed);
            }
            return;
        }
        // A run counts against one TAT: a grant or a restart moves it,
        // and starts a new run.
        let run = if self.stale_of.swap(fold(tat), Ordering::Relaxed) == fold(tat) {
            self.stale_run.load(Ordering::Relaxed).saturating_add(1)
        } else {
            1
        };
        if run < Self::STALE_RUN {
            self.stale_run.store(run, Ordering::Relaxed);
            return;
        }
        // The clock was stepped back for good, or TAT came from a
        // timestamp far ahead: start again, empty, on the asks' clock.
        self.stale_run.store(0, Ordering::Relaxed);
        let restart = now_ns.saturating_add(self.window_ns);
        // Weak: one out-of-line operation fewer on targets without 64-bit
        // atomics (where their fallback never fails spuriously); elsewhere
        // a spurious failure leaves the restart to the next run.
        let _ = self
            .tat
            .compare_exchange_weak(tat, restart, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// TAT folded into the 32 bits a run of stale asks is counted against
/// (native atomics on 32-bit targets; a collision only lets a run go on).
#[inline]
fn fold(tat: u64) -> u32 {
    // Truncation intended: a digest of both halves.
    #[allow(clippy::cast_possible_truncation)]
    let folded = (tat ^ (tat >> 32)) as u32;
    folded
}

impl HedgeBudget for TokenBucket {
    /// Does nothing: the bucket refills with time, not with traffic.
    #[inline]
    fn on_request(&self, _now_ns: u64) {}

    /// Does nothing either.
    #[inline]
    fn on_requests(&self, _now_ns: u64, _n: u32) {}

    #[inline]
    fn try_acquire(&self, now_ns: u64) -> bool {
        // Stats only (grants never read it): the latest timestamp, one store.
        self.seen.store(now_ns, Ordering::Relaxed);
        if self.take(now_ns) {
            self.counters.grant();
            true
        } else {
            self.counters.deny();
            false
        }
    }

    fn stats(&self) -> BudgetStats {
        let seen = self.seen.load(Ordering::Relaxed);
        self.counters.stats(self.balance_at(seen))
    }

    /// Empty at `now_ns`: TAT set to `now_ns + burst × interval`, so the
    /// next token can be taken at `now_ns + interval` and the bucket is
    /// full again `burst` intervals later. Counters start at zero.
    ///
    /// A `now_ns` ahead of the true time leaves the bucket empty until the
    /// clock catches up, or, if it is more than a second ahead, until
    /// [`STALE_RUN`](Self::STALE_RUN) asks on the true clock restart it
    /// (see *Clock steps*).
    fn drained(&self, now_ns: u64) -> Self {
        Self {
            tat: AtomicU64::new(now_ns.saturating_add(self.window_ns)),
            seen: AtomicU64::new(now_ns),
            counters: Counters::new(),
            interval_ns: self.interval_ns,
            window_ns: self.window_ns,
            burst: self.burst,
            stale_run: AtomicU32::new(0),
            stale_of: AtomicU32::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert_eq!(TokenBucket::new(0, 1).err(), Some(BudgetError::ZeroRate));
        assert_eq!(
            TokenBucket::new(1, 0).err(),
            Some(BudgetError::ZeroCapacity)
        );
        assert_eq!(
            TokenBucket::with_interval(0, 1).err(),
            Some(BudgetError::ZeroInterval)
        );
        assert_eq!(
            TokenBucket::with_interval(u64::MAX / 2, 3).err(),
            Some(BudgetError::BurstTooLong {
                burst: 3,
                interval_ns: u64::MAX / 2
            })
        );
        assert_eq!(
            TokenBucket::from_share(10_001, 1, 1).err(),
            Some(BudgetError::ShareOutOfRange { share_bps: 10_001 })
        );
        assert_eq!(
            TokenBucket::from_share(1, 0, 1).err(),
            Some(BudgetError::ZeroRate)
        );
        // A burst over half the clock's range could never be granted (the
        // bucket denies within one window of `u64::MAX`): refused, not a
        // bucket that is silently empty for good.
        for interval_ns in [u64::MAX, u64::MAX / 2 + 1] {
            assert_eq!(
                TokenBucket::with_interval(interval_ns, 1).err(),
                Some(BudgetError::BurstTooLong {
                    burst: 1,
                    interval_ns
                })
            );
        }
        // Half the range is a burst.
        let Ok(slow) = TokenBucket::with_interval(u64::MAX / 2, 1) else {
            unreachable!()
        };
        assert!(slow.try_acquire(1_000));
        assert!(!slow.try_acquire(2_000));
        // 0.3 tokens per second: one every 3.33… s, rounded up.
        let b = TokenBucket::from_share(1_000, 3, 1).ok();
        assert_eq!(b.map(|b| b.interval_ns()), Some(3_333_333_334));
        let b = TokenBucket::new(u32::MAX, 1).ok();
        assert_eq!(b.map(|b| b.interval_ns()), Some(1));
    }

    #[test]
    fn refills_and_caps() {
        let Ok(b) = TokenBucket::new(10, 2) else {
            unreachable!()
        };
        assert_eq!(b.balance_at(0), 20_000);
        assert!(b.try_acquire(0) && b.try_acquire(0) && !b.try_acquire(0));
        assert_eq!(b.balance_at(50_000_000), 5_000);
        assert!(!b.try_acquire(50_000_000));
        assert!(b.try_acquire(100_000_000));
        // A long idle gap refills to the burst, no further.
        assert_eq!(b.balance_at(10_000_000_000), 20_000);
        assert_eq!(b.stats().grants, 3);
        assert_eq!(b.stats().denials, 2);
        assert_eq!(b.stats().balance, 0);
    }

    #[test]
    fn hostile_time() {
        let Ok(b) = TokenBucket::new(1, 1) else {
            unreachable!()
        };
        let late = u64::MAX - 2_000_000_000;
        assert!(b.try_acquire(late));
        // Backwards, repeated: nothing minted.
        assert!(!b.try_acquire(0));
        assert!(!b.try_acquire(late));
        // Refilled a second later, but within one interval of u64::MAX the
        // next TAT would overflow, so the bucket fails closed.
        assert!(b.try_acquire(u64::MAX - 1_000_000_000));
        assert!(!b.try_acquire(u64::MAX));
        assert_eq!(b.balance_at(u64::MAX), 0);
        let Ok(b) = TokenBucket::new(1, 1) else {
            unreachable!()
        };
        assert!(!b.try_acquire(u64::MAX)); // TAT would overflow: fail closed
    }

    #[test]
    fn drained_is_empty_for_one_interval() {
        let Ok(b) = TokenBucket::new(10, 5) else {
            unreachable!()
        };
        let interval = b.interval_ns(); // 100 ms
        let now = 3_000_000_000;
        let d = b.drained(now);
        assert_eq!((d.interval_ns(), d.burst()), (interval, 5));
        assert_eq!(d.balance_at(now), 0);
        assert_eq!(d.stats(), BudgetStats::default());
        assert!(!d.try_acquire(now));
        assert!(!d.try_acquire(now.saturating_add(interval - 1)));
        assert!(d.try_acquire(now.saturating_add(interval)));
        assert!(!d.try_acquire(now.saturating_add(interval)));
        assert!(!d.try_acquire(0)); // earlier: nothing minted
        let s = d.stats();
        assert_eq!((s.grants, s.denials), (1, 4));
        // The original is untouched (and still full).
        assert_eq!(b.balance_at(now), 50_000);
        assert_eq!(b.stats().grants, 0);
        // Wild timestamps: no panic, nothing to spend at `now` or before.
        for now in [
            0,
            1,
            u64::MAX / 2,
            u64::MAX - interval,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let d = b.drained(now);
            assert_eq!(d.balance_at(now), 0);
            assert!(!d.try_acquire(now) && !d.try_acquire(0));
            let _ = d.try_acquire(now.saturating_add(interval));
            assert!(d.stats().grants <= 1);
        }
    }
}
