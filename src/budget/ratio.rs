//! A traffic-proportional hedge budget.

use super::{
    check_share, BudgetError, BudgetStats, Counters, HedgeBudget, TokenBucket, UNITS_PER_TOKEN,
};
use crate::sync::{AtomicU64, Ordering};
use core::num::NonZeroU64;

/// The low half of a window counter: deposits counted in the window.
const COUNT_MASK: u64 = 0xFFFF_FFFF;

/// A budget that grows with traffic: each primary request deposits a share
/// of a token, each hedge withdraws one whole token, and the balance (the
/// *bank*) is capped.
///
/// The balance is an integer count of units ([`UNITS_PER_TOKEN`] per token)
/// in one `AtomicU64`; a deposit of `share_bps` units and a withdrawal of
/// [`UNITS_PER_TOKEN`] units are each one compare-and-swap on it, so the
/// balance is exact under concurrency. The budget starts empty. An optional
/// reserve ([`with_reserve`](Self::with_reserve)), a [`TokenBucket`]
/// consulted only when the balance is short of a token, lets a low-traffic
/// client hedge now and then.
///
/// # The cap
///
/// - **Traffic-scaled** ([`new`](Self::new), [`with_bank_window`](Self::with_bank_window),
///   the [`Default`]): the bank holds at most what the share earned over one
///   *bank window* (1 s by default), and never less than a floor. Windows
///   are aligned on the caller's clock (window `k` is `[k·W, (k+1)·W)`) and
///   each keeps a count of its deposits; the cap at `now` is
///   `max(floor, share × max(n_k, n_(k−1)))` where `k` is the window of
///   `now` and `n` the counts. Under steady traffic that is the share of one
///   window's requests; after a burst of traffic the cap rises with each
///   deposit, and after a fall it **lags**: the previous window's count
///   holds it up until the end of the window after the fall (between one
///   and two windows). So a pause that stalls every request on a replica at
///   once may spend up to a window's worth of hedges, where a fixed cap
///   would refuse most of them.
/// - **Fixed** ([`fixed_cap`](Self::fixed_cap)): at most `max_tokens`,
///   whatever the traffic.
///
/// Each deposit counts itself first, then clips the balance to the cap at
/// its timestamp (so a bank earned under heavy traffic shrinks to the new
/// cap at the first deposit after traffic fell); withdrawals never look at
/// the cap. The window counters are two more `AtomicU64`s (one
/// compare-and-swap per deposit on the current one), touched only by
/// traffic-scaled budgets.
///
/// Under concurrency a deposit counts itself, then banks; before it clips
/// the bank *down* it reads the counts again, so the cap it clips to misses
/// only the deposits other threads have counted and not yet banked (one a
/// thread at most), never the ones they banked in between: a deposit whose
/// thread was preempted cannot pull the bank down to its own stale cap.
/// What it misses can only lower the balance (fail closed), never overdraw
/// it or mint a token.
///
/// # Bound
///
/// Over any calls from any threads, with any timestamps:
///
/// - `grants × 10 000 ≤ deposits × share_bps` without a reserve (the budget
///   starts empty and only deposits fill it). With a reserve, add its own
///   bound, `burst + (t_max − t_min) / interval`, over the timestamps
///   `[t_min, t_max]` passed to [`try_acquire`](HedgeBudget::try_acquire).
/// - Over any stretch of calls, the balance pays for at most
///   `share_bps × (deposits in the stretch) / 10 000` hedges plus the bank
///   at its start, and the bank is never above the largest cap so far:
///   `floor` or, for a traffic-scaled budget, `share × n` for the largest
///   window count `n`. A count only grows by one per deposit, so `n` is at
///   most the deposits made in that window (and at most `2³² − 1`: counts
///   saturate): time alone never raises the cap.
/// - With no hedges taken, a fixed-cap balance is exactly
///   `min(deposits × share_bps, cap)`; so is a traffic-scaled one whose
///   deposits all fell in one window from one thread (it is then
///   `deposits × share_bps`, as the cap grows with each deposit, up to
///   2³² − 1 deposits).
///
/// # Time
///
/// A deposit whose window is not the one its counter holds (later,
/// earlier, or decades away) resets that counter to its own window. After
/// a jump far ahead and back, or a jump back, counting restarts from the
/// true time: the cap falls to the floor (fails closed) and follows traffic
/// again within a window. A deposit stamped a whole window behind the
/// others' resets the counter they count into, which lowers the cap until
/// the next window (fails closed too). Counters keep the low 32 bits of the
/// window number: windows a multiple of 2³² apart (136 years of 1 s windows)
/// share a counter.
///
/// ```
/// use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket};
///
/// // 5 % of traffic, banking a second of it (at least 20 hedges), plus one
/// // hedge a minute for quiet periods.
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
///
/// // 10 000 requests in the next second earn 500 tokens: the bank holds
/// // them all (a second's earnings), the 0.05 token before is capped away.
/// for i in 0..10_000 {
///     BUDGET.on_request(1_000_000_000 + i * 100_000);
/// }
/// assert_eq!(BUDGET.stats().balance, 500 * 10_000);
/// assert_eq!(BUDGET.cap_units_at(1_999_999_999), 500 * 10_000);
/// ```
#[derive(Debug)]
pub struct RatioBudget {
    /// Balance in units; at most the cap of the latest deposit.
    balance: AtomicU64,
    counters: Counters,
    /// Units deposited per primary request (the share in basis points).
    deposit: u64,
    /// Smallest cap, in units: the whole cap of a fixed-cap budget.
    floor: u64,
    /// Bank window of a traffic-scaled budget; `None` for a fixed cap.
    window_ns: Option<NonZeroU64>,
    /// Deposits in the latest even- and odd-numbered windows: the window
    /// number's low 32 bits above a saturating 32-bit count.
    even: AtomicU64,
    odd: AtomicU64,
    reserve: Option<TokenBucket>,
}

impl RatioBudget {
    /// The default share: 15 %. A hedger that hedges at the 90th percentile
    /// wants a hedge for about 10 % of requests; a 10 % budget would refuse
    /// some of those at random, 15 % leaves headroom.
    pub const DEFAULT_SHARE_BPS: u32 = 1_500;
    /// The default floor of a traffic-scaled bank: 10 tokens.
    pub const DEFAULT_FLOOR_TOKENS: u32 = 10;
    /// A conventional cap for [`fixed_cap`](Self::fixed_cap): 10 tokens
    /// (the floor of the default bank).
    pub const DEFAULT_MAX_TOKENS: u32 = 10;
    /// The default bank window: one second.
    pub const DEFAULT_BANK_WINDOW_NS: u64 = 1_000_000_000;

    /// A budget of `share_bps` basis points of traffic (15 % = `1_500`)
    /// whose bank scales with traffic: at most the tokens earned over the
    /// last second ([`DEFAULT_BANK_WINDOW_NS`](Self::DEFAULT_BANK_WINDOW_NS)),
    /// and never less than `floor_tokens`. No reserve. See the type's *The
    /// cap*.
    ///
    /// # Errors
    /// [`BudgetError::ShareOutOfRange`] unless `1 ≤ share_bps ≤ 10 000`,
    /// [`BudgetError::ZeroCapacity`] for `floor_tokens == 0`.
    pub const fn new(share_bps: u32, floor_tokens: u32) -> Result<Self, BudgetError> {
        Self::with_bank_window(share_bps, floor_tokens, Self::DEFAULT_BANK_WINDOW_NS)
    }

    /// [`new`](Self::new) with a bank window of `bank_window_ns`
    /// nanoseconds instead of one second: the bank holds what the share
    /// earned over about one such window, and at least `floor_tokens`.
    ///
    /// ```
    /// use tailguard::budget::{HedgeBudget, RatioBudget};
    ///
    /// // 10 %, banking 100 ms of traffic, at least 2 hedges.
    /// let budget = RatioBudget::with_bank_window(1_000, 2, 100_000_000)?;
    /// for i in 0..1_000 {
    ///     budget.on_request(i * 100_000); // 1 000 requests in 100 ms
    /// }
    /// assert_eq!(budget.stats().balance, 100 * 10_000); // 100 tokens banked
    /// # Ok::<(), tailguard::budget::BudgetError>(())
    /// ```
    ///
    /// # Errors
    /// [`BudgetError::ShareOutOfRange`] unless `1 ≤ share_bps ≤ 10 000`,
    /// [`BudgetError::ZeroCapacity`] for `floor_tokens == 0`,
    /// [`BudgetError::ZeroInterval`] for `bank_window_ns == 0`.
    pub const fn with_bank_window(
        share_bps: u32,
        floor_tokens: u32,
        bank_window_ns: u64,
    ) -> Result<Self, BudgetError> {
        let share = match check_share(share_bps) {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        if floor_tokens == 0 {
            return Err(BudgetError::ZeroCapacity);
        }
        match NonZeroU64::new(bank_window_ns) {
            Some(w) => Ok(Self::new_unchecked(share, floor_tokens, Some(w))),
            None => Err(BudgetError::ZeroInterval),
        }
    }

    /// A budget of `share_bps` basis points of traffic banking at most
    /// `max_tokens` hedges whatever the traffic, with no reserve.
    ///
    /// Under correlated stragglers (a pause stalling every request on a
    /// replica at once) a small fixed cap refuses most of the hedges that
    /// were earned; prefer [`new`](Self::new) unless a hard cap on bursts
    /// is the point.
    ///
    /// # Errors
    /// [`BudgetError::ShareOutOfRange`] unless `1 ≤ share_bps ≤ 10 000`,
    /// [`BudgetError::ZeroCapacity`] for `max_tokens == 0`.
    pub const fn fixed_cap(share_bps: u32, max_tokens: u32) -> Result<Self, BudgetError> {
        let share = match check_share(share_bps) {
            Ok(s) => s,
            Err(e) => return Err(e),
        };
        if max_tokens == 0 {
            return Err(BudgetError::ZeroCapacity);
        }
        Ok(Self::new_unchecked(share, max_tokens, None))
    }

    /// Valid for `1 ≤ share ≤ 10 000` and `floor_tokens ≥ 1`.
    const fn new_unchecked(
        share_bps: u32,
        floor_tokens: u32,
        window_ns: Option<NonZeroU64>,
    ) -> Self {
        Self {
            balance: AtomicU64::new(0),
            counters: Counters::new(),
            deposit: share_bps as u64,
            // u32 × 10⁴ < 2⁴⁶: cannot saturate.
            floor: (floor_tokens as u64).saturating_mul(UNITS_PER_TOKEN),
            window_ns,
            even: AtomicU64::new(0),
            odd: AtomicU64::new(0),
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
            floor: self.floor,
            window_ns: self.window_ns,
            even: self.even,
            odd: self.odd,
            reserve: Some(reserve),
        }
    }

    /// The share deposited per primary request, in basis points.
    #[must_use]
    pub const fn share_bps(&self) -> u32 {
        // deposit was a u32 share.
        self.deposit as u32
    }

    /// The smallest cap, in units: the floor of a traffic-scaled budget,
    /// the whole cap of a fixed-cap one.
    #[must_use]
    pub const fn floor_units(&self) -> u64 {
        self.floor
    }

    /// The bank window in nanoseconds; `None` for a fixed cap.
    #[must_use]
    pub const fn bank_window_ns(&self) -> Option<u64> {
        match self.window_ns {
            Some(w) => Some(w.get()),
            None => None,
        }
    }

    /// The cap at `now_ns`, in units, from the deposits counted so far:
    /// `max(floor, share × max(n_k, n_(k−1)))` for the window `k` of
    /// `now_ns` (see *The cap*), or the fixed cap. A deposit at `now_ns`
    /// counts itself, then clips the balance to the cap this returns.
    #[must_use]
    pub fn cap_units_at(&self, now_ns: u64) -> u64 {
        let Some(window) = self.window_ns else {
            return self.floor;
        };
        let (tag, mine, other) = self.counters_at(now_ns, window);
        let here = count_in(mine.load(Ordering::Relaxed), tag);
        let before = count_in(other.load(Ordering::Relaxed), tag.wrapping_sub(1));
        self.cap_for(if here > before { here } else { before })
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

    /// The window tag of `now_ns` (its window number's low 32 bits), its
    /// counter and the previous window's.
    #[inline]
    fn counters_at(&self, now_ns: u64, window: NonZeroU64) -> (u32, &AtomicU64, &AtomicU64) {
        let k = now_ns.checked_div(window.get()).unwrap_or(0);
        // Truncation intended: the tag is the low half of the window number.
        #[allow(clippy::cast_possible_truncation)]
        let tag = k as u32;
        if k & 1 == 0 {
            (tag, &self.even, &self.odd)
        } else {
            (tag, &self.odd, &self.even)
        }
    }

    /// Counts one deposit at `now_ns` and returns the cap it sees.
    #[inline]
    fn count_deposit(&self, now_ns: u64, window: NonZeroU64) -> u64 {
        let (tag, mine, other) = self.counters_at(now_ns, window);
        let mut word = mine.load(Ordering::Relaxed);
        let here = loop {
            let next = if word >> 32 == u64::from(tag) {
                // Saturates: the count is below 2³² − 1 or left there
                // (below it, adding one cannot carry into the tag).
                let count = word & COUNT_MASK;
                if count < COUNT_MASK {
                    word.wrapping_add(1)
                } else {
                    word
                }
            } else {
                // A stale window, earlier or later: restart it at ours.
                (u64::from(tag) << 32) | 1
            };
            if next == word {
                break next & COUNT_MASK;
            }
            match mine.compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break next & COUNT_MASK,
                Err(actual) => word = actual,
            }
        };
        let before = count_in(other.load(Ordering::Relaxed), tag.wrapping_sub(1));
        self.cap_for(if here > before { here } else { before })
    }

    /// Adds one deposit to the balance, clipped to `cap` (the cap this
    /// deposit's count gave).
    #[inline]
    fn settle(&self, mut cap: u64, now_ns: u64) {
        let mut cur = self.balance.load(Ordering::Relaxed);
        loop {
            let sum = cur.saturating_add(self.deposit);
            // Full (deposit capped away, by design) or above a cap that
            // fell with traffic (clipped down to it).
            let next = if sum < cap { sum } else { cap };
            if next < cur {
                // Before clipping the bank down, the counts again: other
                // threads may have counted (and banked) deposits since this
                // one counted. A cap read now is short only of deposits
                // counted but not yet banked, so a stale deposit cannot
                // pull the bank down to its old cap.
                let fresh = self.cap_units_at(now_ns);
                if fresh > cap {
                    cap = fresh;
                    continue;
                }
            }
            if next == cur {
                return;
            }
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

    /// `max(floor, share × count)` in units.
    #[inline]
    const fn cap_for(&self, count: u64) -> u64 {
        // share ≤ 10⁴ and count < 2³²: below 2⁴⁶.
        let earned = self.deposit.saturating_mul(count);
        if earned > self.floor {
            earned
        } else {
            self.floor
        }
    }
}

/// The count of a window counter if it holds the window tagged `tag`, else 0.
#[inline]
const fn count_in(word: u64, tag: u32) -> u64 {
    if word >> 32 == tag as u64 {
        word & COUNT_MASK
    } else {
        0
    }
}

impl Default for RatioBudget {
    /// 15 % of traffic, a bank of one second's earnings with a floor of 10
    /// tokens, no reserve: [`RatioBudget::new`]`(1_500, 10)`.
    fn default() -> Self {
        Self::new_unchecked(
            Self::DEFAULT_SHARE_BPS,
            Self::DEFAULT_FLOOR_TOKENS,
            NonZeroU64::new(Self::DEFAULT_BANK_WINDOW_NS),
        )
    }
}

impl HedgeBudget for RatioBudget {
    #[inline]
    fn on_request(&self, now_ns: u64) {
        let cap = match self.window_ns {
            None => self.floor,
            Some(window) => self.count_deposit(now_ns, window),
        };
        self.settle(cap, now_ns);
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

    /// Grants and denials of this budget, whether the balance or the
    /// reserve paid; the balance without the reserve's.
    fn stats(&self) -> BudgetStats {
        self.counters.stats(self.balance())
    }

    /// Balance 0, fresh window counts and counters, the same share, floor
    /// (or fixed cap) and window; the reserve, if any, drained at `now_ns`.
    fn drained(&self, now_ns: u64) -> Self {
        Self {
            balance: AtomicU64::new(0),
            counters: Counters::new(),
            deposit: self.deposit,
            floor: self.floor,
            window_ns: self.window_ns,
            even: AtomicU64::new(0),
            odd: AtomicU64::new(0),
            reserve: self.reserve.as_ref().map(|r| r.drained(now_ns)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

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
        assert_eq!(
            RatioBudget::fixed_cap(10_001, 1).err(),
            Some(BudgetError::ShareOutOfRange { share_bps: 10_001 })
        );
        assert_eq!(
            RatioBudget::fixed_cap(1, 0).err(),
            Some(BudgetError::ZeroCapacity)
        );
        assert!(RatioBudget::fixed_cap(10_000, u32::MAX).is_ok());
    }

    #[test]
    fn deposits_cap_and_withdrawals() {
        let Ok(b) = RatioBudget::fixed_cap(3_000, 2) else {
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

    /// `n` deposits spread evenly over `[from, from + span)`.
    fn traffic(b: &RatioBudget, from: u64, span: u64, n: u64) {
        for i in 0..n {
            let offset = span.checked_div(n).unwrap_or(0).saturating_mul(i);
            b.on_request(from.saturating_add(offset));
        }
    }

    /// Grants taken at `now` until the first denial.
    fn spend(b: &RatioBudget, now: u64) -> u64 {
        let mut n = 0_u64;
        while b.try_acquire(now) {
            n = n.saturating_add(1);
        }
        n
    }

    #[test]
    fn default_bank_is_a_second_of_earnings() {
        // 1 000 requests a second at 15 %: 150 tokens a second. A pause
        // that stalls every request at once may spend a second's worth.
        let b = RatioBudget::default();
        assert_eq!(b.share_bps(), 1_500);
        traffic(&b, 0, 2 * SEC, 2_000);
        assert_eq!(b.cap_units_at(2 * SEC - 1), 150 * UNITS_PER_TOKEN);
        assert_eq!(spend(&b, 2 * SEC), 150);
        // Little traffic: the floor of 10 tokens.
        let b = RatioBudget::default();
        traffic(&b, 0, 10 * SEC, 100);
        assert_eq!(spend(&b, 10 * SEC), 10);
    }

    #[test]
    fn fixed_cap_ignores_traffic() {
        let Ok(b) = RatioBudget::fixed_cap(1_500, 10) else {
            unreachable!()
        };
        assert_eq!(b.bank_window_ns(), None);
        traffic(&b, 0, 2 * SEC, 2_000);
        assert_eq!(b.cap_units_at(SEC), 10 * UNITS_PER_TOKEN);
        assert_eq!(spend(&b, 2 * SEC), 10);
    }

    #[test]
    fn cap_follows_a_fall_in_traffic_within_two_windows() {
        let b = RatioBudget::default();
        traffic(&b, 0, SEC, 2_000); // 300 tokens earned, all banked
        assert_eq!(b.balance(), 300 * UNITS_PER_TOKEN);
        // The next window still sees the last one's count...
        b.on_request(SEC + 1);
        assert_eq!(b.balance(), 300 * UNITS_PER_TOKEN);
        // ...the one after does not: the next deposit clips to the floor.
        b.on_request(2 * SEC);
        assert_eq!(b.balance(), 10 * UNITS_PER_TOKEN);
        assert_eq!(spend(&b, 2 * SEC), 10);
    }

    #[test]
    fn bank_window_is_configurable_and_validated() {
        assert_eq!(
            RatioBudget::with_bank_window(1_000, 1, 0).err(),
            Some(BudgetError::ZeroInterval)
        );
        assert_eq!(
            RatioBudget::with_bank_window(1_000, 0, 1).err(),
            Some(BudgetError::ZeroCapacity)
        );
        assert_eq!(
            RatioBudget::with_bank_window(0, 1, 1).err(),
            Some(BudgetError::ShareOutOfRange { share_bps: 0 })
        );
        // 100 ms windows: 200 requests in one hold a bank of 20 tokens at 10 %.
        let Ok(b) = RatioBudget::with_bank_window(1_000, 1, SEC / 10) else {
            unreachable!()
        };
        assert_eq!(b.bank_window_ns(), Some(SEC / 10));
        traffic(&b, 0, SEC / 10, 500);
        assert_eq!(b.balance(), 50 * UNITS_PER_TOKEN);
        traffic(&b, SEC / 10, SEC / 10, 200);
        // Still the previous window's 500 requests: 50 tokens.
        assert_eq!(b.cap_units_at(SEC / 5 - 1), 50 * UNITS_PER_TOKEN);
        traffic(&b, SEC / 5, SEC / 10, 200);
        assert_eq!(b.cap_units_at(3 * SEC / 10 - 1), 20 * UNITS_PER_TOKEN);
        assert_eq!(spend(&b, SEC), 20);
    }

    #[test]
    fn bank_recovers_after_a_jump_far_ahead() {
        let b = RatioBudget::default();
        traffic(&b, 0, SEC, 1_000);
        for (i, wild) in (100..).zip([u64::MAX, u64::MAX - SEC, 1 << 63, 5 * SEC]) {
            b.on_request(wild);
            // Back to the true time: the counters restart from it, and a
            // second of traffic later the bank is a second's earnings again.
            let now = i * 10 * SEC;
            traffic(&b, now, 2 * SEC, 2_000);
            assert_eq!(b.cap_units_at(now + 2 * SEC - 1), 150 * UNITS_PER_TOKEN);
            assert_eq!(spend(&b, now + 2 * SEC), 150, "after {wild}");
        }
        let s = b.stats();
        assert!(s.grants * UNITS_PER_TOKEN <= 9_004 * 1_500);
    }

    #[test]
    fn bank_recovers_after_a_jump_back() {
        let b = RatioBudget::default();
        traffic(&b, 3_600 * SEC, 2 * SEC, 2_000);
        // The clock steps back half an hour, then to 0: counting restarts.
        for back in [1_800 * SEC, 0] {
            traffic(&b, back, 2 * SEC, 2_000);
            assert_eq!(b.cap_units_at(back + 2 * SEC - 1), 150 * UNITS_PER_TOKEN);
            assert_eq!(spend(&b, back + 2 * SEC), 150, "from {back}");
        }
    }

    #[test]
    fn wild_timestamps_never_mint() {
        let b = RatioBudget::default();
        let mut deposits = 0_u64;
        for (i, t) in [0, u64::MAX, 1, u64::MAX - 1, SEC, 0, u64::MAX / 2, 2]
            .into_iter()
            .cycle()
            .take(4_000)
            .enumerate()
        {
            b.on_request(t);
            deposits += 1;
            if i % 3 == 0 {
                let _ = b.try_acquire(t);
            }
            let s = b.stats();
            assert!(s.grants * UNITS_PER_TOKEN + s.balance <= deposits * 1_500);
            assert!(b.cap_units_at(t) <= (deposits * 1_500).max(10 * UNITS_PER_TOKEN));
        }
    }

    #[test]
    fn a_stale_deposit_cannot_pull_the_bank_down_to_its_old_cap() {
        // A deposit counts itself (the 101st), then its thread is
        // preempted while 1 000 more are counted and banked; when it
        // settles, its cap (101 deposits' worth) is long out of date.
        let b = RatioBudget::default();
        assert_eq!(b.bank_window_ns(), Some(SEC));
        let window = b.window_ns.unwrap_or(NonZeroU64::MIN);
        let t0 = 5 * SEC;
        for i in 0..100 {
            b.on_request(t0 + i);
        }
        let stale = b.count_deposit(t0 + 100, window);
        assert_eq!(stale, 101 * 1_500);
        for i in 0..1_000 {
            b.on_request(t0 + 200 + i);
        }
        assert_eq!(b.balance(), 1_100 * 1_500);
        b.settle(stale, t0 + 100);
        // Every deposit banked: not clipped to 101 deposits' worth.
        assert_eq!(b.balance(), 1_101 * 1_500);
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

    #[test]
    fn drained_keeps_the_configuration_and_nothing_else() {
        let (Ok(b), Ok(r)) = (
            RatioBudget::with_bank_window(2_000, 3, SEC / 10),
            TokenBucket::new(1, 1),
        ) else {
            unreachable!()
        };
        let b = b.with_reserve(r);
        traffic(&b, 0, SEC, 1_000);
        assert!(b.try_acquire(SEC));
        let d = b.drained(SEC);
        assert_eq!(
            (d.share_bps(), d.floor_units(), d.bank_window_ns()),
            (2_000, 30_000, Some(SEC / 10))
        );
        assert_eq!(d.stats(), BudgetStats::default());
        assert_eq!(d.cap_units_at(SEC - 1), d.floor_units()); // fresh counts
        let reserve = d.reserve().map(|r| (r.burst(), r.balance_at(SEC)));
        assert_eq!(reserve, Some((1, 0))); // the reserve is drained too
        assert!(!d.try_acquire(SEC)); // neither pays
        for _ in 0..5 {
            d.on_request(SEC); // 5 × 20 % = one token earned
        }
        assert!(d.try_acquire(SEC) && !d.try_acquire(SEC));
        assert!(d.try_acquire(2 * SEC)); // the reserve, one interval later
                                         // The original is untouched.
        assert_eq!(b.stats().grants, 1);
        // A fixed cap stays fixed.
        let Ok(f) = RatioBudget::fixed_cap(1_000, 4) else {
            unreachable!()
        };
        let f = f.drained(u64::MAX);
        assert_eq!(
            (f.bank_window_ns(), f.floor_units(), f.balance()),
            (None, 40_000, 0)
        );
    }
}
