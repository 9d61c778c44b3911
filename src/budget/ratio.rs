//! A traffic-proportional hedge budget.

use super::{
    check_share, BudgetError, BudgetStats, Counters, HedgeBudget, TokenBucket, UNITS_PER_TOKEN,
};
use crate::sync::{AtomicU64, Ordering};

/// A budget that grows with traffic: each primary request deposits a share
/// of a token, each hedge withdraws one whole token, and the balance is
/// capped.
///
/// The balance is an integer count of units ([`UNITS_PER_TOKEN`] per token)
/// in one `AtomicU64`; a deposit of `share_bps` units and a withdrawal of
/// [`UNITS_PER_TOKEN`] units are each one compare-and-swap, so the balance is
/// exact under concurrency. The budget starts empty. An optional reserve
/// ([`with_reserve`](Self::with_reserve)), a [`TokenBucket`] consulted only
/// when the balance is short of a token, lets a low-traffic client hedge now
/// and then.
///
/// **Bound.** Over any calls from any threads with timestamps in
/// `[t_min, t_max]`, after `deposits` calls to
/// [`on_request`](HedgeBudget::on_request):
/// `grants × 10 000 ≤ deposits × share_bps` without a reserve, plus the
/// reserve bucket's own bound (`burst + (t_max − t_min) / interval`) with
/// one. With no hedges taken, the balance is exactly
/// `min(deposits × share_bps, max_tokens × 10 000)`.
///
/// ```
/// use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket};
///
/// // 5 % of traffic, at most 20 hedges banked, plus one hedge a minute
/// // for quiet periods.
/// static BUDGET: RatioBudget = match RatioBudget::new(500, 20) {
///     Ok(b) => match TokenBucket::with_interval(60_000_000_000, 1) {
///         Ok(reserve) => b.with_reserve(reserve),
///         Err(_) => panic!("bad reserve"),
///     },
///     Err(_) => panic!("bad budget"),
/// }; // checked at compile time
///
/// BUDGET.on_request(0);
/// assert_eq!(BUDGET.stats().balance, 500); // 5 % of a token, in units
/// assert!(BUDGET.try_acquire(0)); // from the reserve
/// assert!(!BUDGET.try_acquire(1_000)); // reserve empty for a minute
/// ```
#[derive(Debug)]
pub struct RatioBudget {
    /// Balance in units, `0 ..= cap`.
    balance: AtomicU64,
    counters: Counters,
    /// Units deposited per primary request (the share in basis points).
    deposit: u64,
    /// Largest balance, in units.
    cap: u64,
    reserve: Option<TokenBucket>,
}

impl RatioBudget {
    /// The default share: 10 %.
    pub const DEFAULT_SHARE_BPS: u32 = 1_000;
    /// The default cap: 10 tokens.
    pub const DEFAULT_MAX_TOKENS: u32 = 10;

    /// A budget of `share_bps` basis points of traffic (10 % = `1_000`),
    /// banking at most `max_tokens` hedges, with no reserve.
    ///
    /// # Errors
    /// [`BudgetError::ShareOutOfRange`] unless `1 ≤ share_bps ≤ 10 000`,
    /// [`BudgetError::ZeroCapacity`] for `max_tokens == 0`.
    pub const fn new(share_bps: u32, max_tokens: u32) -> Result<Self, BudgetError> {
        let share = match check_share(share_bps) {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        if max_tokens == 0 {
            return Err(BudgetError::ZeroCapacity);
        }
        Ok(Self::new_unchecked(share, max_tokens))
    }

    /// Valid for `1 ≤ share ≤ 10 000` and `max_tokens ≥ 1`.
    const fn new_unchecked(share_bps: u32, max_tokens: u32) -> Self {
        Self {
            balance: AtomicU64::new(0),
            counters: Counters::new(),
            deposit: share_bps as u64,
            // u32 × 10⁴ < 2⁴⁶: cannot saturate.
            cap: (max_tokens as u64).saturating_mul(UNITS_PER_TOKEN),
            reserve: None,
        }
    }

    /// Adds a reserve: when the balance is short of a token, a hedge may
    /// still take one from `reserve`, a time-refilled bucket. Keep it small
    /// (say one token every few seconds): its grants are not tied to
    /// traffic.
    #[must_use]
    pub const fn with_reserve(self, reserve: TokenBucket) -> Self {
        Self {
            balance: self.balance,
            counters: self.counters,
            deposit: self.deposit,
            cap: self.cap,
            reserve: Some(reserve),
        }
    }

    /// The share deposited per primary request, in basis points.
    #[must_use]
    pub const fn share_bps(&self) -> u32 {
        // deposit was a u32 share.
        self.deposit as u32
    }

    /// The largest balance, in units.
    #[must_use]
    pub const fn cap_units(&self) -> u64 {
        self.cap
    }

    /// The reserve, if any.
    ///
    /// Its [`stats`](HedgeBudget::stats) count only what the reserve itself
    /// saw: a grant for each hedge it paid for, a denial for each time the
    /// balance was short and the reserve was empty too. This budget's own
    /// stats count every grant and denial, whichever paid.
    #[must_use]
    pub const fn reserve(&self) -> Option<&TokenBucket> {
        self.reserve.as_ref()
    }

    /// The balance in units, not counting the reserve.
    #[must_use]
    pub fn balance(&self) -> u64 {
        self.balance.load(Ordering::Relaxed)
    }
}

impl Default for RatioBudget {
    /// 10 % of traffic, at most 10 tokens banked, no reserve.
    fn default() -> Self {
        Self::new_unchecked(Self::DEFAULT_SHARE_BPS, Self::DEFAULT_MAX_TOKENS)
    }
}

impl HedgeBudget for RatioBudget {
    #[inline]
    fn on_request(&self, _now_ns: u64) {
        let mut cur = self.balance.load(Ordering::Relaxed);
        loop {
            if cur >= self.cap {
                return; // full: the deposit is capped away, by design
            }
            let sum = cur.saturating_add(self.deposit);
            let next = if sum < self.cap { sum } else { self.cap };
            match self.balance.compare_exchange_weak(
                cur,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    #[inline]
    fn try_acquire(&self, now_ns: u64) -> bool {
        let mut cur = self.balance.load(Ordering::Relaxed);
        while let Some(next) = cur.checked_sub(UNITS_PER_TOKEN) {
            match self.balance.compare_exchange_weak(
                cur,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.counters.grant();
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
        if let Some(reserve) = &self.reserve {
            // Through the reserve's own `try_acquire`, so that its stats
            // count the grants it paid for and the times it was empty.
            if reserve.try_acquire(now_ns) {
                self.counters.grant();
                return true;
            }
        }
        self.counters.deny();
        false
    }

    fn stats(&self) -> BudgetStats {
        self.counters.stats(self.balance())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert_eq!(
            RatioBudget::new(0, 1).err(),
            Some(BudgetError::ShareOutOfRange { share_bps: 0 })
        );
        assert_eq!(
            RatioBudget::new(1, 0).err(),
            Some(BudgetError::ZeroCapacity)
        );
        assert!(RatioBudget::new(10_000, u32::MAX).is_ok());
    }

    #[test]
    fn deposits_cap_and_withdrawals() {
        let Ok(b) = RatioBudget::new(3_000, 2) else {
            unreachable!()
        };
        for _ in 0..3 {
            b.on_request(0);
        }
        assert_eq!(b.balance(), 9_000);
        assert!(!b.try_acquire(0));
        b.on_request(0);
        assert!(b.try_acquire(0));
        assert_eq!(b.balance(), 2_000);
        for _ in 0..100 {
            b.on_request(0);
        }
        assert_eq!(b.balance(), 20_000);
        assert!(b.try_acquire(0) && b.try_acquire(0) && !b.try_acquire(0));
        let s = b.stats();
        assert_eq!((s.grants, s.denials, s.balance), (3, 2, 0));
    }

    #[test]
    fn reserve_used_only_when_short() {
        let Ok(r) = TokenBucket::new(1, 1) else {
            unreachable!()
        };
        let Ok(b) = RatioBudget::new(10_000, 1) else {
            unreachable!()
        };
        let b = b.with_reserve(r);
        b.on_request(0);
        assert!(b.try_acquire(0)); // balance
        assert!(b.try_acquire(0)); // reserve
        assert!(!b.try_acquire(0));
        assert!(b.try_acquire(1_000_000_000)); // reserve refilled
        assert_eq!(b.stats().grants, 3);
    }

    #[test]
    fn reserve_counts_its_own_grants() {
        let Ok(r) = TokenBucket::new(1, 1) else {
            unreachable!()
        };
        let Ok(b) = RatioBudget::new(10_000, 1) else {
            unreachable!()
        };
        let b = b.with_reserve(r);
        b.on_request(0);
        assert!(b.try_acquire(0)); // balance: not the reserve's grant
        assert!(b.try_acquire(5)); // reserve
        assert!(!b.try_acquire(6)); // both empty
        let outer = b.stats();
        assert_eq!((outer.grants, outer.denials), (2, 1));
        let inner = b.reserve().map(HedgeBudget::stats);
        // The reserve was asked twice (at 5 and 6 ns): one grant, one denial.
        assert_eq!(inner.map(|s| (s.grants, s.denials)), Some((1, 1)));
    }
}
