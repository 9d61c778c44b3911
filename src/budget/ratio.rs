//! A traffic-proportional hedge budget.

use super::{
    check_share, BudgetError, BudgetStats, Counters, HedgeBudget, TokenBucket, UNITS_PER_TOKEN,
};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use core::num::NonZeroU64;

/// A window count read as more than this is a mark written out of order
/// (see *Time*): it reads as 0.
const COUNT_LIMIT: u32 = 1 << 31;

/// The largest cap any budget can have, in units, is below this: a floor of
/// `u32::MAX` tokens (below 2⁴⁶ units) or the share of a count below 2³¹.
/// The unspent earnings are pulled down to it now and then (see
/// [`RatioBudget::normalize`]) so that they stay far from wrapping.
const EARNINGS_LIMIT: u64 = 1 << 46;

/// Deposits between two checks that the unspent earnings are below
/// [`EARNINGS_LIMIT`]: at most `2¹⁶ × 10⁴ < 2³⁰` units are earned between
/// checks, so they stay below 2⁴⁷, far from the 2⁶³ where wrapping
/// arithmetic would misread them.
const NORMALIZE_SHIFT: u32 = 16;

/// A budget that grows with traffic: each primary request deposits a share
/// of a token, each hedge withdraws one whole token, and the balance (the
/// *bank*) is capped.
///
/// # How it counts
///
/// Balances are integer *units* ([`UNITS_PER_TOKEN`] per token). The budget
/// keeps two `AtomicU64`s: the deposits ever made, `D`, and the units ever
/// *consumed*, `E` — spent on hedges, or capped away. The balance is
///
/// ```text
/// balance = min(cap, D × share − E)
/// ```
///
/// A deposit is one `fetch_add` on `D` and nothing else; the cap is applied
/// when a token is taken: a grant moves `E` so that the balance drops by
/// one token from `min(cap, D × share − E)` (one compare-and-swap on `E`).
/// This is a token bucket whose clock is the request count (GCRA with the
/// deposits for time), so it is exact under concurrency: a deposit is never
/// lost, the balance never overdrawn. The budget starts empty. An optional
/// reserve ([`with_reserve`](Self::with_reserve)), a [`TokenBucket`]
/// consulted only when the balance is short of a token, lets a low-traffic
/// client hedge now and then.
///
/// # The cap
///
/// - **Traffic-scaled** ([`new`](Self::new), [`with_bank_window`](Self::with_bank_window),
///   the [`Default`]): the bank holds at most what the share earned over one
///   *bank window* (100 ms by default), and never less than a floor. Windows
///   are aligned on the caller's clock (window `k` is `[k·W, (k+1)·W)`);
///   the cap at `now` is `max(floor, share × max(n_k, n_(k−1)))` where `k`
///   is the window of `now` and `n` the deposits counted in a window. Under
///   steady traffic that is the share of one window's requests; after a
///   burst of traffic the cap rises with each deposit, and after a fall it
///   **lags**: the previous window's count holds it up until the end of the
///   window after the fall (between one and two windows). So a pause that
///   stalls every request on a replica at once may spend up to a window's
///   worth of hedges, where a fixed cap would refuse most of them.
/// - **Fixed** ([`fixed_cap`](Self::fixed_cap)): at most `max_tokens`,
///   whatever the traffic.
///
/// A window's count is the difference between `D` now and `D` at the
/// window's first deposit, which that deposit records in a *mark* (the
/// window number's low 32 bits beside `D`'s): one compare-and-swap on one
/// of two words (even and odd windows), once a window. Deposits in the
/// window of the latest mark skip it: their cost is the `fetch_add`, a load
/// and a comparison.
///
/// # Bound
///
/// Over any calls from any threads, with any timestamps:
///
/// - `grants × 10 000 ≤ deposits × share_bps` without a reserve (the budget
///   starts empty and only deposits fill it: every grant moves `E` up by a
///   token at least, and `E` never passes `D × share`). With a reserve, add
///   its own bound, `burst + (t_max − t_min) / interval`, over the
///   timestamps `[t_min, t_max]` passed to [`try_acquire`](HedgeBudget::try_acquire).
/// - The bank is never above the cap in force: `floor` or, for a
///   traffic-scaled budget, `share × n` for the larger window count `n`,
///   and `n` never counts more than the deposits made since the mark it
///   starts from.
/// - Over any stretch of calls whose timestamps do not go back, the
///   balance pays for at most `share_bps × (deposits in the stretch) /
///   10 000` hedges plus the bank at its start: a count only grows by one
///   per deposit, so time alone never raises the cap. A late stamp (see
///   *Time*) reads the cap of the newest marked window, which a call at a
///   later time may have read lower (after windows without a deposit);
///   it never reads above the cap that window had. A clock that goes back further can return
///   to a window number that still holds a mark from before, whose count
///   then runs from that old mark; what that uncovers is bounded: each
///   window's first deposit gives up the earnings above the cap at that
///   moment, so the balance never pays for more than the stretch's
///   earnings plus what was banked at the latest window mark and earned
///   since.
/// - With no hedges taken, a fixed-cap balance is exactly
///   `min(deposits × share_bps, cap)`; so is a traffic-scaled one whose
///   deposits all fell in one window (it is then `deposits × share_bps`,
///   as the cap grows with each deposit).
///
/// Under concurrency the deposit that marks a new window may not be the
/// first to have counted itself in `D`: a window's count may miss, or take
/// from the window before, one deposit per other thread depositing at that
/// moment. What the cap misses lowers the balance (fails closed); what it
/// takes from the window before is a real deposit of the last moments.
///
/// # Time
///
/// A timestamp at most [`LATE_WINDOWS`](Self::LATE_WINDOWS) (16) windows
/// before the window of the latest mark is a *late stamp* (a request
/// timed before it waited in a queue, a thread whose clock lags): its
/// deposit counts in that newest window, and a cap or a token at that
/// time is the newest window's (a token taken under a lower cap would
/// give up the bank above it). So late stamps neither lower the cap nor
/// give up what on-time traffic banked: with one request in 100 stamped
/// 210 ms to 1.6 s late, the default budget grants 15 % of traffic, where
/// re-marking the late window gave 2 %.
///
/// Late stamps are a minority. Once more than 64 of them make up most of
/// the newest window's deposits, the newest window was a stamp ahead of
/// the others (a thread whose clock leads), or the clock stepped back for
/// good, and the late time's window is marked: after one stamp up to 16
/// windows ahead, at most those 64 deposits count in the wrong window
/// (without this rule, all traffic counted in the stamp's window until
/// real time reached it: a bank of 750 tokens, 5 windows' earnings, for a
/// stamp 500 ms ahead). The stamp itself marks its window, though, and a
/// mark gives up the bank above that window's cap: one stamp two windows
/// ahead or more empties the bank down to the floor at once (fails
/// closed; at 10 000 requests a second and the default 15 %, 150 tokens
/// down to 10), and on-time traffic earns it back within two windows.
/// A thread whose clock keeps leading (one request in 100 stamped 150 ms
/// to 1 s ahead) re-marks windows again and again, and keeps the bank
/// near its floor: it fails closed (the share is still granted to a
/// steady demand), but burst capacity is lost.
///
/// Any other timestamp in a window whose mark is for another window
/// (later, earlier, or decades away) marks it anew. After a jump back,
/// counting restarts from the true time (for a jump back of 16 windows or
/// less, after the run of late stamps above): the cap falls to the floor
/// (fails closed) and follows traffic again within a window. After a jump
/// far ahead and back, the same when the window ahead shared the true
/// window's mark (window numbers of the same parity); otherwise the true
/// window's own mark is still there and its count goes on from it, stamp
/// ahead included: the cap is the true window's traffic, as if the jump
/// had not happened, and the balance has lost what the stamp's mark gave
/// up. A stamp ahead whose window the clock then reaches
/// still holds its mark: that window counts from the stamp, up to two
/// windows' traffic once. A count that would read above 2³¹ (a mark
/// written after a later window's: two threads marking at once, or a
/// window re-marked after one far back) reads as 0. Marks keep the low 32
/// bits of the window number: windows a multiple of 2³² apart (136 years
/// of 1 s windows) share a mark, and counts are taken modulo 2³², so a
/// window of more than 2³¹ deposits (two billion) reads as empty.
///
/// ```
/// use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket};
///
/// // 5 % of traffic, banking a second of it (at least 20 hedges), plus one
/// // hedge a minute for quiet periods.
/// static BUDGET: RatioBudget = match RatioBudget::with_bank_window(500, 20, 1_000_000_000) {
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
/// assert_eq!(BUDGET.balance_at(1_999_999_999), 500 * 10_000);
/// assert_eq!(BUDGET.cap_units_at(1_999_999_999), 500 * 10_000);
/// ```
#[derive(Debug)]
pub struct RatioBudget {
    /// Deposits ever made, `D` (wrapping: 2⁶⁴ of them take millennia).
    deposits: AtomicU64,
    /// Units consumed, `E`: spent on hedges or capped away. The balance is
    /// `min(cap, D × share − E)`, computed modulo 2⁶⁴ (the difference stays
    /// below 2⁴⁷: see [`NORMALIZE_SHIFT`]).
    consumed: AtomicU64,
    counters: Counters,
    /// Units deposited per primary request (the share in basis points).
    deposit: u64,
    /// Smallest cap, in units: the whole cap of a fixed-cap budget.
    floor: u64,
    /// Bank window of a traffic-scaled budget; `None` for a fixed cap.
    window_ns: Option<NonZeroU64>,
    /// The number of the window of the latest mark: a deposit in it needs
    /// no mark, and a cap in it no division.
    marked: AtomicU64,
    /// Late stamps deposited since the latest mark (see *Time*; wraps
    /// after 2³² of them, which only delays taking a stepped clock).
    late: AtomicU32,
    /// The marks of the latest even- and odd-numbered windows: the window
    /// number's low 32 bits above the low 32 bits of `D` before the
    /// window's first deposit.
    marks: [AtomicU64; 2],
    reserve: Option<TokenBucket>,
}

impl RatioBudget {
    /// How many bank windows before the latest marked window a timestamp
    /// may lie and still count in it: a late stamp, not a clock gone back
    /// (see *Time*).
    pub const LATE_WINDOWS: u64 = 16;

    /// The default share: 15 %. A hedger that hedges at the 90th percentile
    /// wants a hedge for about 10 % of requests; a 10 % budget would refuse
    /// some of those at random, 15 % leaves headroom.
    pub const DEFAULT_SHARE_BPS: u32 = 1_500;
    /// The default floor of a traffic-scaled bank: 10 tokens.
    pub const DEFAULT_FLOOR_TOKENS: u32 = 10;
    /// A conventional cap for [`fixed_cap`](Self::fixed_cap): 10 tokens
    /// (the floor of the default bank).
    pub const DEFAULT_MAX_TOKENS: u32 = 10;
    /// The default bank window: 100 ms. Over any 100 ms the hedges then
    /// stay below what that time's requests earn plus a bank of at most
    /// one bank window's earnings from the 200 ms before (or the floor):
    /// about twice the share at a steady rate. (When a stall also cuts the
    /// rate of new requests, the bank is spent on the stall's few requests,
    /// and hedges can outnumber them.) So at a steady rate a burst of
    /// stragglers adds at most about twice the share: where latency
    /// rises with load, a bank of a second's earnings, spent in a few
    /// milliseconds, overloads the backend into the very slowness that
    /// spends it (the simulation's `overload` scenario, at 60 % of
    /// capacity: p99 47 ms without hedging, 452 ms with a one-second bank,
    /// 19 ms with this one).
    /// A longer window ([`with_bank_window`](Self::with_bank_window)) buys
    /// more hedges in a pause that stalls a replica, for backends whose
    /// latency does not follow load; at latencies of seconds, make it about
    /// the hedge delay: there a drop of the delay makes the timers of
    /// requests started before and after it fire together, for as long as
    /// the drop (a second or more), and 100 ms of earnings cannot pay for
    /// that.
    pub const DEFAULT_BANK_WINDOW_NS: u64 = 100_000_000;

    /// A budget of `share_bps` basis points of traffic (15 % = `1_500`)
    /// whose bank scales with traffic: at most the tokens earned over the
    /// last 100 ms ([`DEFAULT_BANK_WINDOW_NS`](Self::DEFAULT_BANK_WINDOW_NS)),
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
    /// nanoseconds instead of 100 ms: the bank holds what the share
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

    /// Valid for `1 ≤ share ≤ 10 000` and `floor_tokens ≥ 1`. Empty: no
    /// deposit, nothing consumed, window 0 marked from `D = 0`.
    const fn new_unchecked(
        share_bps: u32,
        floor_tokens: u32,
        window_ns: Option<NonZeroU64>,
    ) -> Self {
        Self {
            deposits: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            counters: Counters::new(),
            deposit: share_bps as u64,
            // u32 × 10⁴ < 2⁴⁶: cannot saturate.
            floor: (floor_tokens as u64).saturating_mul(UNITS_PER_TOKEN),
            window_ns,
            marked: AtomicU64::new(0),
            late: AtomicU32::new(0),
            marks: [AtomicU64::new(0), AtomicU64::new(0)],
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
            deposits: self.deposits,
            consumed: self.consumed,
            counters: self.counters,
            deposit: self.deposit,
            floor: self.floor,
            window_ns: self.window_ns,
            marked: self.marked,
            late: self.late,
            marks: self.marks,
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
    /// `now_ns` (see *The cap*), or the fixed cap. A token taken at
    /// `now_ns` is taken from a balance capped at this.
    #[must_use]
    pub fn cap_units_at(&self, now_ns: u64) -> u64 {
        let Some(window) = self.window_ns else {
            return self.floor;
        };
        let (k, _) = self.window_of(now_ns, window);
        // Truncation intended: a mark keeps the window number's low half.
        #[allow(clippy::cast_possible_truncation)]
        let tag = k as u32;
        let [even, odd] = &self.marks;
        let (mine, other) = if k & 1 == 0 { (even, odd) } else { (odd, even) };
        // Marks before `D`: a mark holds a value `D` had before its store
        // (released), so the `D` read after it (acquired) is not below it.
        let mine = mine.load(Ordering::Acquire);
        let other = other.load(Ordering::Acquire);
        let d = low_half(self.deposits.load(Ordering::Relaxed));
        let here = (tag_of(mine) == tag).then_some(low_half(mine));
        let (n_here, n_before) = match (here, tag_of(other)) {
            // The window before: its count ends where this one's began (or
            // now, if this one has no deposit yet).
            (_, t) if t == tag.wrapping_sub(1) => (
                here.map_or(0, |from| count(from, d)),
                count(low_half(other), here.unwrap_or(d)),
            ),
            // The window after (the clock went back a window): this one's
            // count ends where that one's began, so going back never
            // raises the cap.
            (Some(from), t) if t == tag.wrapping_add(1) => (count(from, low_half(other)), 0),
            (Some(from), _) => (count(from, d), 0),
            (None, _) => (0, 0),
        };
        self.cap_for(u64::from(n_here.max(n_before)))
    }

    /// The balance at `now_ns` in units, not counting the reserve:
    /// `min(cap_units_at(now_ns), D × share − E)` (see *How it counts*).
    /// A token can be taken at `now_ns` exactly when this is at least one
    /// token (or the reserve has one).
    #[must_use]
    pub fn balance_at(&self, now_ns: u64) -> u64 {
        let cap = self.cap_units_at(now_ns);
        self.unspent(self.consumed.load(Ordering::Acquire))
            .0
            .min(cap)
    }

    /// The balance in units, not counting the reserve, in the window of the
    /// latest marked deposit (for a fixed cap, whatever the time):
    /// [`balance_at`](Self::balance_at) a time in that window.
    #[must_use]
    pub fn balance(&self) -> u64 {
        let k = self.marked.load(Ordering::Relaxed);
        let from = self.window_ns.map_or(0, |w| k.saturating_mul(w.get()));
        self.balance_at(from)
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

    /// The latest mark's window number, if `now_ns` lies in it.
    #[inline]
    fn marked_window(&self, now_ns: u64, window: NonZeroU64) -> Option<u64> {
        let k = self.marked.load(Ordering::Relaxed);
        Self::holds(k, now_ns, window).then_some(k)
    }

    /// Whether window `k` holds `now_ns`.
    #[inline]
    fn holds(k: u64, now_ns: u64, window: NonZeroU64) -> bool {
        // k·W ≤ some timestamp: no overflow. Not `wrapping_sub`: the last
        // window may end past `u64::MAX`.
        let from = k.saturating_mul(window.get());
        now_ns
            .checked_sub(from)
            .is_some_and(|into| into < window.get())
    }

    /// The window a deposit or a take at `now_ns` counts in, and whether
    /// that is the latest mark's: the latest mark's when `now_ns` lies in
    /// it (no division) or at most [`LATE_WINDOWS`](Self::LATE_WINDOWS)
    /// before it (a late stamp, see *Time*), else `now_ns / W`.
    #[inline]
    fn window_of(&self, now_ns: u64, window: NonZeroU64) -> (u64, bool) {
        // Acquire, against `mark`'s release: a window read as marked has
        // its mark visible in its slot (on weakly ordered CPUs a relaxed
        // read could see the number first, and count the window's deposits
        // in the window before it, raising the cap).
        let k = self.marked.load(Ordering::Acquire);
        if Self::holds(k, now_ns, window) {
            return (k, true);
        }
        let own = now_ns.checked_div(window.get()).unwrap_or(0);
        if is_late(own, k) {
            (k, true)
        } else {
            (own, false)
        }
    }

    /// Counts `n` deposits at `now_ns`: one `fetch_add`, and a mark for the
    /// first deposit of a window.
    #[inline]
    fn deposit_n(&self, now_ns: u64, n: u64) {
        // Exactly `n` calls of `on_request` (the checks on `n` fold away
        // for `on_request`'s constant 1): none marks no window, and a
        // window's first deposit is marked, and the earnings above its cap
        // given up, before the rest are added.
        if n == 0 {
            return;
        }
        let mut rest = n;
        if let Some(window) = self.window_ns {
            if self.marked_window(now_ns, window).is_none() {
                self.deposit_first(now_ns, window);
                rest = rest.wrapping_sub(1);
                if rest == 0 {
                    return;
                }
                if self.marked_window(now_ns, window).is_none() {
                    // A late stamp: the rest are too, until the run is taken.
                    rest = self.deposit_late(now_ns, window, rest);
                    if rest == 0 {
                        return;
                    }
                }
            }
        }
        let before = self.deposits.fetch_add(rest, Ordering::Relaxed);
        if crosses_normalize(before, rest) {
            self.normalize();
        }
    }

    /// A deposit outside the latest mark's window: counted, then its
    /// window marked (unless a late stamp: it counts in the latest).
    #[cold]
    #[inline(never)]
    fn deposit_first(&self, now_ns: u64, window: NonZeroU64) {
        let before = self.deposits.fetch_add(1, Ordering::Relaxed);
        let own = now_ns.checked_div(window.get()).unwrap_or(0);
        let newest = self.marked.load(Ordering::Relaxed);
        if !is_late(own, newest) || self.late_run_taken(newest, before) {
            self.mark(now_ns, own, before);
        }
        if crosses_normalize(before, 1) {
            self.normalize();
        }
    }

    /// `rest` more deposits at `now_ns`, a late stamp (the one before it
    /// was counted as one), exactly as `rest` sequential calls of
    /// [`deposit_first`](Self::deposit_first) would, in a few steps: the
    /// late ones up to the one that takes the run (if any), which marks its
    /// window. Returns the deposits left after it, which count in that
    /// window.
    #[cold]
    #[inline(never)]
    fn deposit_late(&self, now_ns: u64, window: NonZeroU64, rest: u64) -> u64 {
        let own = now_ns.checked_div(window.get()).unwrap_or(0);
        let newest = self.marked.load(Ordering::Relaxed);
        if !is_late(own, newest) {
            // Another thread marked meanwhile: plain deposits (in that
            // window's count; single calls might have marked `own`).
            return rest;
        }
        let late = u64::from(self.late.load(Ordering::Relaxed));
        let [even, odd] = &self.marks;
        let slot = if newest & 1 == 0 { even } else { odd };
        let mark = low_half(slot.load(Ordering::Acquire));
        let n = u64::from(count(mark, low_half(self.deposits.load(Ordering::Relaxed))));
        // The `i`th deposit more takes the run when `late + i > LATE_RUN`
        // and `late + i > (n + i) / 2` (see `late_run_taken`).
        let i = (u64::from(LATE_RUN) + 1)
            .saturating_sub(late)
            .max(n.saturating_add(1).saturating_sub(late.saturating_mul(2)))
            .max(1);
        let late_ones = i.saturating_sub(1).min(rest);
        if late_ones > 0 {
            let more = u32::try_from(late_ones).unwrap_or(u32::MAX);
            self.late.fetch_add(more, Ordering::Relaxed);
            let before = self.deposits.fetch_add(late_ones, Ordering::Relaxed);
            if crosses_normalize(before, late_ones) {
                self.normalize();
            }
        }
        if late_ones == rest {
            return 0;
        }
        let before = self.deposits.fetch_add(1, Ordering::Relaxed);
        self.mark(now_ns, own, before);
        if crosses_normalize(before, 1) {
            self.normalize();
        }
        rest.saturating_sub(late_ones).saturating_sub(1)
    }

    /// Counts a late stamp against window `newest`, whose deposits `D`
    /// had reached `before`: whether late stamps are now most of that
    /// window's deposits, and more than [`LATE_RUN`] of them. Then the
    /// newest window was a stamp ahead of the others (a clock that leads),
    /// or the clock stepped back for good, and the late time is taken.
    fn late_run_taken(&self, newest: u64, before: u64) -> bool {
        let late = self.late.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if late <= LATE_RUN {
            return false;
        }
        let [even, odd] = &self.marks;
        let slot = if newest & 1 == 0 { even } else { odd };
        // The newest window's deposits, this one included, from its mark
        // (a mark written over since reads as another window's: a later
        // one counts fewer, an earlier one more; either only moves when
        // the late time is taken).
        let n = count(
            low_half(slot.load(Ordering::Acquire)),
            low_half(before).wrapping_add(1),
        );
        // More than half.
        late > n >> 1
    }

    /// The first deposit of window `k`, `now_ns`'s (or one after another
    /// window's): marks it with `D` before the deposit, `before`, unless
    /// that is done.
    #[inline]
    fn mark(&self, now_ns: u64, k: u64, before: u64) {
        // Truncation intended: a mark keeps the window number's low half.
        #[allow(clippy::cast_possible_truncation)]
        let tag = k as u32;
        let [even, odd] = &self.marks;
        let slot = if k & 1 == 0 { even } else { odd };
        let next = (u64::from(tag) << 32) | u64::from(low_half(before));
        let mut word = slot.load(Ordering::Relaxed);
        let mut marked = false;
        while tag_of(word) != tag {
            match slot.compare_exchange_weak(word, next, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => {
                    marked = true;
                    break;
                }
                Err(actual) => word = actual,
            }
        }
        // Released after the slot's mark (ours, or the one read above):
        // see `window_of`.
        self.marked.store(k, Ordering::Release);
        self.late.store(0, Ordering::Relaxed);
        if marked {
            // `now_ns` is in window `k`, just marked.
            self.give_up_above(self.cap_units_at(now_ns));
        }
    }

    /// Consumes the earnings above `cap`, once a window (at its mark). It
    /// changes no balance while the clock goes forward (the cap then rises
    /// only with deposits, which raise the earnings as much); it keeps a
    /// clock that goes back from uncovering, through an old window's count,
    /// earnings that were capped away long ago.
    fn give_up_above(&self, cap: u64) {
        let mut consumed = self.consumed.load(Ordering::Acquire);
        loop {
            let (unspent, earned) = self.unspent(consumed);
            if unspent <= cap {
                return;
            }
            match self.consumed.compare_exchange_weak(
                consumed,
                earned.wrapping_sub(cap),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => consumed = actual,
            }
        }
    }

    /// Moves `E` up so that `D × share − E` is at most [`EARNINGS_LIMIT`],
    /// which is above every cap: no balance changes.
    #[cold]
    #[inline(never)]
    fn normalize(&self) {
        self.give_up_above(EARNINGS_LIMIT);
    }

    /// `D × share − consumed` and `D × share`, modulo 2⁶⁴. `consumed` must
    /// be read (acquired) before this reads `D`: then `D × share` is not
    /// below it, as every value of `E` was computed from an earlier `D`. A
    /// difference above 2⁶³ cannot happen; it reads as 0 (fails closed).
    #[inline]
    fn unspent(&self, consumed: u64) -> (u64, u64) {
        let earned = self
            .deposits
            .load(Ordering::Relaxed)
            .wrapping_mul(self.deposit);
        let unspent = earned.wrapping_sub(consumed);
        (if unspent >> 63 == 0 { unspent } else { 0 }, earned)
    }

    /// Takes one token from the balance (not the reserve) at `now_ns`.
    #[inline]
    fn take(&self, now_ns: u64) -> bool {
        // A cap read before the loop is at most the cap at the end of it
        // (counts only grow within a window): it can only deny more.
        let cap = self.cap_units_at(now_ns);
        let mut consumed = self.consumed.load(Ordering::Acquire);
        loop {
            let (unspent, earned) = self.unspent(consumed);
            let balance = unspent.min(cap);
            let Some(left) = balance.checked_sub(UNITS_PER_TOKEN) else {
                return false;
            };
            // Consumed so far, and what the cap took, and the token.
            let next = earned.wrapping_sub(left);
            match self.consumed.compare_exchange_weak(
                consumed,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => consumed = actual,
            }
        }
    }

    /// `max(floor, share × count)` in units.
    #[inline]
    const fn cap_for(&self, count: u64) -> u64 {
        // share ≤ 10⁴ and count < 2³¹: below 2⁴⁵.
        let earned = self.deposit.saturating_mul(count);
        if earned > self.floor {
            earned
        } else {
            self.floor
        }
    }
}

/// Late stamps a window takes before a majority of them in its deposits
/// is taken for the clock (see [`RatioBudget`]'s *Time*).
const LATE_RUN: u32 = 64;

/// Whether window `own` is at most [`RatioBudget::LATE_WINDOWS`] before
/// window `newest` (a late stamp's).
#[inline]
const fn is_late(own: u64, newest: u64) -> bool {
    // `newest − own` in 1..=16 (0 and ahead wrap high; `own < newest`
    // rules out a wrap past `u64::MAX`, which only 1 ns windows reach).
    own < newest && newest.wrapping_sub(own).wrapping_sub(1) < RatioBudget::LATE_WINDOWS
}

/// The window tag of a mark.
#[inline]
const fn tag_of(mark: u64) -> u32 {
    (mark >> 32) as u32
}

/// Whether `n` deposits from `before` pass a multiple of 2¹⁶: every 2¹⁶
/// deposits the unspent earnings are kept far from wrapping.
#[inline]
fn crosses_normalize(before: u64, n: u64) -> bool {
    (before >> NORMALIZE_SHIFT) != (before.wrapping_add(n) >> NORMALIZE_SHIFT)
}

/// The low 32 bits (of `D`, or of a mark: its `D`).
#[inline]
const fn low_half(word: u64) -> u32 {
    // Truncation intended.
    word as u32
}

/// Deposits from `from` to `to` (low halves of `D`), modulo 2³²; a count
/// above [`COUNT_LIMIT`] comes from marks written out of order and is 0.
#[inline]
const fn count(from: u32, to: u32) -> u32 {
    let n = to.wrapping_sub(from);
    if n > COUNT_LIMIT {
        0
    } else {
        n
    }
}

impl Default for RatioBudget {
    /// 15 % of traffic, a bank of 100 ms of earnings with a floor of 10
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
    /// One `fetch_add` on the deposit count; the first deposit of a bank
    /// window also marks it (one compare-and-swap).
    #[inline]
    fn on_request(&self, now_ns: u64) {
        self.deposit_n(now_ns, 1);
    }

    #[inline]
    fn on_requests(&self, now_ns: u64, n: u32) {
        self.deposit_n(now_ns, u64::from(n));
    }

    #[inline]
    fn try_acquire(&self, now_ns: u64) -> bool {
        if self.take(now_ns) {
            self.counters.grant();
            return true;
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
    /// reserve paid; the [`balance`](RatioBudget::balance) without the
    /// reserve's.
    fn stats(&self) -> BudgetStats {
        self.counters.stats(self.balance())
    }

    /// Balance 0, fresh window counts and counters, the same share, floor
    /// (or fixed cap) and window; the reserve, if any, drained at `now_ns`.
    fn drained(&self, now_ns: u64) -> Self {
        let fresh = Self::new_unchecked(self.share_bps(), 1, self.window_ns);
        Self {
            floor: self.floor,
            reserve: self.reserve.as_ref().map(|r| r.drained(now_ns)),
            ..fresh
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

    /// The default share and floor with a one-second bank window (what
    /// these tests count in: seconds of traffic).
    fn second_bank() -> RatioBudget {
        let Ok(b) = RatioBudget::with_bank_window(1_500, 10, SEC) else {
            unreachable!()
        };
        b
    }

    #[test]
    fn default_bank_is_100_ms_of_earnings() {
        // 10 000 requests a second at 15 %: 1 500 tokens a second, 150 in
        // 100 ms. A pause that stalls every request at once may spend
        // 100 ms' worth, not a second's.
        let b = RatioBudget::default();
        assert_eq!(b.share_bps(), 1_500);
        traffic(&b, 0, 2 * SEC, 20_000);
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
        let Ok(b) = RatioBudget::with_bank_window(1_500, 10, SEC) else {
            unreachable!()
        };
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
        assert_eq!(spend(&b, 3 * SEC / 10 - 1), 20);
    }

    #[test]
    fn bank_shrinks_to_the_floor_two_windows_after_traffic_stops() {
        // 2 000 requests in one second at 15 %: a bank of 300 tokens, which
        // the next window still allows; the one after allows the floor.
        let b = second_bank();
        traffic(&b, 0, SEC, 2_000);
        assert_eq!(b.balance_at(SEC - 1), 300 * UNITS_PER_TOKEN);
        assert_eq!(b.balance_at(2 * SEC - 1), 300 * UNITS_PER_TOKEN);
        assert_eq!(b.balance_at(2 * SEC), 10 * UNITS_PER_TOKEN);
        assert_eq!(spend(&b, 5 * SEC), 10);
        // What the cap kept back was consumed, not stored: traffic resuming
        // earns the bank anew.
        traffic(&b, 6 * SEC, SEC / 2, 100);
        assert_eq!(b.balance_at(6 * SEC + SEC / 2), 15 * UNITS_PER_TOKEN);
    }

    #[test]
    fn bank_recovers_after_a_jump_far_ahead() {
        let b = second_bank();
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
        let b = second_bank();
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
        let b = second_bank();
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
    fn stamps_far_back_mark_anew_and_fail_closed() {
        // Window 25 is marked; a deposit stamped in window 8, beyond the
        // late windows, is a clock gone back: it marks window 8 and the
        // bank gives up what is above window 8's cap, the floor.
        let b = second_bank();
        traffic(&b, 25 * SEC, SEC / 2, 1_000);
        assert_eq!(b.cap_units_at(25 * SEC + 1), 1_000 * 1_500);
        b.on_request(8 * SEC);
        assert_eq!(b.cap_units_at(8 * SEC), 10 * UNITS_PER_TOKEN); // the floor
        assert_eq!(b.balance_at(25 * SEC + 1), 10 * UNITS_PER_TOKEN);
        // Window 26 sees window 25's mark and count (the stale deposit
        // among them), not window 8's.
        b.on_request(26 * SEC);
        assert_eq!(b.cap_units_at(26 * SEC), 1_001 * 1_500);
        // Another stamp far back marks window 8 over window 26's mark (same
        // parity): window 26 reads unmarked, so every deposit since window
        // 25's mark counts for window 25 — real deposits of the last two
        // windows, nothing older.
        b.on_request(8 * SEC + 1);
        assert_eq!(b.cap_units_at(26 * SEC), 1_003 * 1_500);
    }

    #[test]
    fn a_stamp_a_window_back_counts_in_the_newest_window() {
        // 1 000 deposits in window 3, 2 000 in window 4: the cap in window
        // 4 is 2 000 deposits' worth. A time in window 3 is a late stamp:
        // it reads window 4's cap (not the 3 000 since window 3's mark:
        // time alone never raises the cap) and deposits into window 4.
        let b = second_bank();
        traffic(&b, 3 * SEC, SEC, 1_000);
        traffic(&b, 4 * SEC, SEC, 2_000);
        assert_eq!(b.cap_units_at(4 * SEC + 1), 2_000 * 1_500);
        assert_eq!(b.cap_units_at(3 * SEC + 1), 2_000 * 1_500);
        b.on_request(3 * SEC + 2);
        assert_eq!(b.cap_units_at(3 * SEC + 2), 2_001 * 1_500);
        assert_eq!(b.cap_units_at(4 * SEC + 2), 2_001 * 1_500);
        // The window after still counts window 4's deposits, the late one
        // among them.
        b.on_request(5 * SEC);
        assert_eq!(b.cap_units_at(5 * SEC), 2_001 * 1_500);
    }

    #[test]
    fn a_deposit_stamped_windows_late_keeps_the_bank() {
        // A timestamp taken before a queue: the deposit lands in a window
        // the others have left. It counts in the newest window and throws
        // nothing away: the bank and the next window's grants stay those of
        // on-time traffic (before, a stamp two windows late took the cap to
        // the floor and gave up the bank above it).
        const MS: u64 = 1_000_000;
        for lag in [1, 50, 110, 150, 200, 210, 290, 310, 1_000, 1_600] {
            let b = RatioBudget::default(); // 15 %, 100 ms windows
            let t0 = 36_000_000 * MS;
            traffic(&b, t0, 100 * MS, 1_000); // 150 tokens banked
            let now = t0 + 99 * MS;
            assert_eq!(b.balance_at(now), 150 * UNITS_PER_TOKEN);
            b.on_request(now - lag * MS);
            // The late deposit's earnings are banked too.
            assert_eq!(b.balance_at(now), 1_001 * 1_500, "lag {lag} ms");
            assert_eq!(b.balance_at(now - lag * MS), 1_001 * 1_500);
            traffic(&b, t0 + 100 * MS, MS, 10);
            assert_eq!(spend(&b, t0 + 101 * MS), 150, "lag {lag} ms");
        }
    }

    #[test]
    fn a_stall_spends_one_window_s_bank_on_its_few_requests() {
        // 1 s at 10 000 requests a second, then a stall: 100 ms at 500 a
        // second, each request taking every token it can. The stall's
        // hedges outnumber its requests, but stay within what they earn
        // plus one bank window's earnings (1 000 requests before): the
        // bound the docs give, not twice the share of the stall's own.
        const MS: u64 = 1_000_000;
        let b = RatioBudget::default();
        let mut t = 100 * SEC;
        traffic(&b, t, SEC, 10_000);
        t += SEC;
        let mut hedges = 0;
        for _ in 0..50 {
            b.on_request(t);
            hedges += spend(&b, t);
            t += 2 * MS;
        }
        // 15 % of (50 + 1 000) is 157.5 tokens.
        assert_eq!(hedges, 157);
    }

    #[test]
    fn a_few_late_stamps_keep_the_share() {
        // 10 000 requests a second for 2 s, one in 100 stamped `lag` late,
        // the bank drained every 50 ms: the grants are 15 % of the
        // requests, as without late stamps.
        const MS: u64 = 1_000_000;
        for lag in [0, 150, 210, 1_000, 1_600] {
            let b = RatioBudget::default();
            let mut grants = 0;
            for i in 0..20_000_u64 {
                let now = 10 * SEC + i * 100_000;
                let stamp = if i % 100 == 99 { now - lag * MS } else { now };
                b.on_request(stamp);
                if i % 500 == 499 {
                    grants += spend(&b, now);
                }
            }
            assert!(grants >= 2_990, "lag {lag} ms: {grants} grants of 3 000");
        }
    }

    #[test]
    fn one_stamp_ahead_does_not_pin_the_newest_window() {
        // A deposit stamped ahead (a thread whose clock leads) marks a
        // future window; on-time traffic, late against it, must not all
        // count in that window until real time catches up (the bank grew
        // to 16 windows' earnings: 2 250 tokens for a stamp 1.55 s ahead).
        const MS: u64 = 1_000_000;
        for ahead in [150, 500, 1_550] {
            let b = RatioBudget::default(); // 15 %, 100 ms windows
            let t0 = 3_600 * SEC;
            traffic(&b, t0, 100 * MS, 1_000);
            let stamp = t0 + 100 * MS + ahead * MS;
            b.on_request(stamp);
            // On time until the stamp's window begins, 10 000 a second.
            let end = stamp - stamp % (100 * MS);
            let span = end - (t0 + 100 * MS);
            traffic(&b, t0 + 100 * MS, span, span / 100_000);
            // At most a window's earnings (150 tokens) and the late
            // deposits counted before the run is taken for the clock.
            let spent = spend(&b, end - 1);
            assert!(spent <= 165, "{ahead} ms ahead: {spent} tokens");
            // And the budget still follows traffic afterwards.
            traffic(&b, end, 200 * MS, 2_000);
            assert_eq!(spend(&b, end + 200 * MS), 150, "{ahead} ms ahead");
        }
    }

    #[test]
    fn one_stamp_two_or_more_windows_ahead_gives_up_the_bank_above_the_floor() {
        // What the *Time* docs say a stamp ahead costs: its mark gives up
        // the bank above its window's cap, the floor (150 tokens down to
        // 10 at 10 000 a second), and on-time traffic earns it back within
        // two windows. One window ahead (the next window), the window
        // before is counted and nothing is lost.
        const MS: u64 = 1_000_000;
        for windows_ahead in [1_u64, 3, 5, 15] {
            let b = RatioBudget::default(); // 15 %, floor 10, 100 ms windows
            let t0 = 3_600 * SEC;
            traffic(&b, t0, 100 * MS, 1_000);
            assert_eq!(b.balance_at(t0 + 100 * MS - 1), 150 * UNITS_PER_TOKEN);
            b.on_request(t0 + windows_ahead * 100 * MS);
            // 100 on-time requests in the next window: the first late
            // stamps count in the stamp's window, then the run takes the
            // clock and the next window is marked with the full window
            // before it counted (a cap of 150 tokens again). What is left
            // is the floor and these requests' 15 tokens: the stamp's mark
            // gave up the rest (an odd distance: at an even one the next
            // window shares the stamp's slot, and its own mark gives up
            // down to the floor too).
            let from = t0 + 100 * MS;
            traffic(&b, from, 10 * MS, 100);
            let left = b.balance_at(from + 10 * MS) / UNITS_PER_TOKEN;
            if windows_ahead == 1 {
                assert_eq!(left, 150, "the next window is no stamp ahead");
            } else {
                assert!(
                    (20..=30).contains(&left),
                    "{windows_ahead} windows ahead: {left}"
                );
            }
            // Back to the full bank within two windows of traffic (more
            // once the clock reaches the stamp's window, which counts from
            // the stamp: up to two windows' earnings once, as documented).
            traffic(&b, from + 10 * MS, 190 * MS, 1_900);
            let spent = spend(&b, from + 200 * MS);
            assert!(
                (150..=300).contains(&spent),
                "{windows_ahead} windows ahead: {spent}"
            );
        }
    }

    #[test]
    fn a_jump_far_ahead_and_back_restarts_or_keeps_the_true_window_s_count() {
        // The *Time* docs: back from a window of the same parity, whose
        // mark took the true window's slot, counting restarts (the cap is
        // the floor); from one of the other parity the true window's mark
        // is still there, and its count goes on, the stamp ahead included.
        const MS: u64 = 1_000_000;
        for (ahead, cap) in [(10_100_u64, 20_000_u64), (10_101, 71_000)] {
            let Ok(b) = RatioBudget::new(1_000, 1) else {
                unreachable!()
            };
            traffic(&b, 100 * 100 * MS, 90 * MS, 50); // window 100
            b.on_request(ahead * 100 * MS);
            let back = 100 * 100 * MS + 95 * MS;
            // 20 back in window 100: a count of 20 from a new mark, or of
            // 50 + 1 + 20 from the old one (0.1 token a deposit).
            b.on_requests(back, 20);
            assert_eq!(b.cap_units_at(back), cap, "window {ahead}");
        }
    }

    #[test]
    fn a_bulk_of_late_stamps_is_single_ones() {
        // `on_requests(now, n)` through a late run: the same cap and
        // balance as `n` single deposits, whichever deposit takes the run.
        const MS: u64 = 1_000_000;
        for n in [1, 10, 64, 65, 70, 200, 2_000] {
            let (bulk, single) = (RatioBudget::default(), RatioBudget::default());
            for b in [&bulk, &single] {
                traffic(b, 3_600 * SEC, 100 * MS, 50);
                b.on_request(3_600 * SEC + 700 * MS); // a stamp ahead
            }
            let late = 3_600 * SEC + 150 * MS;
            bulk.on_requests(late, n);
            for _ in 0..n {
                single.on_request(late);
            }
            for now in [late, 3_600 * SEC + 700 * MS] {
                assert_eq!(bulk.cap_units_at(now), single.cap_units_at(now), "{n}");
                assert_eq!(bulk.balance_at(now), single.balance_at(now), "{n}");
            }
        }
    }

    #[test]
    fn a_stamp_beyond_the_late_windows_is_a_clock_gone_back() {
        // 17 windows back: counting restarts there, failing closed, and
        // follows traffic again within a window.
        const MS: u64 = 1_000_000;
        let b = RatioBudget::default();
        let t0 = 3_600 * SEC;
        traffic(&b, t0, 100 * MS, 1_000);
        let back = t0 - (RatioBudget::LATE_WINDOWS + 1) * 100 * MS;
        b.on_request(back);
        assert_eq!(b.cap_units_at(back), 10 * UNITS_PER_TOKEN);
        traffic(&b, back + MS, 200 * MS, 2_000);
        assert_eq!(spend(&b, back + 201 * MS), 150);
    }

    #[test]
    fn balances_are_exact_across_the_wrap_of_the_counters() {
        // `D × share` wraps modulo 2⁶⁴ long before `D` does; the balance is
        // a difference of the two counters and stays exact across it.
        let Ok(b) = RatioBudget::fixed_cap(10_000, 50) else {
            unreachable!()
        };
        let start = u64::MAX / 10_000 - 3;
        b.deposits.store(start, Ordering::Relaxed);
        b.consumed
            .store(start.wrapping_mul(10_000), Ordering::Relaxed);
        assert_eq!(b.balance(), 0);
        for _ in 0..7 {
            b.on_request(0); // the earnings wrap
        }
        assert_eq!(b.balance(), 7 * UNITS_PER_TOKEN);
        assert_eq!(spend(&b, 0), 7);
        assert_eq!(b.balance(), 0);
    }

    #[test]
    fn normalizing_changes_no_balance() {
        // Unspent earnings far above any cap (no hedge for ages) are pulled
        // down to the limit at a multiple of 2¹⁶ deposits: the balance,
        // capped far below it, does not move.
        let b = second_bank();
        if cfg!(miri) {
            // The same counts in one bulk deposit (a minute of Miri's time
            // one at a time).
            b.on_requests(0, 65_530);
        } else {
            traffic(&b, 0, SEC / 2, 65_530);
        }
        b.consumed
            .store(0u64.wrapping_sub(1 << 50), Ordering::Relaxed);
        let before = b.balance_at(SEC / 2);
        assert_eq!(before, b.cap_units_at(SEC / 2));
        traffic(&b, SEC / 2, 10, 10); // crosses 2¹⁶ deposits
        let (unspent, _) = b.unspent(b.consumed.load(Ordering::Relaxed));
        assert_eq!(unspent, EARNINGS_LIMIT + 4 * 1_500); // 4 deposits after it
        assert_eq!(b.balance_at(SEC / 2), 65_540 * 1_500);
        if !cfg!(miri) {
            // Ten thousand grants: minutes under Miri.
            assert_eq!(spend(&b, SEC / 2), 65_540 * 1_500 / UNITS_PER_TOKEN);
        }
    }

    #[test]
    fn bulk_deposits_count_as_single_ones() {
        let (a, b) = (second_bank(), second_bank());
        for i in 0..100 {
            a.on_requests(i * 20_000_000, 7);
            for _ in 0..7 {
                b.on_request(i * 20_000_000);
            }
        }
        assert_eq!(a.stats(), b.stats());
        for t in [0, SEC, 2 * SEC - 1, 3 * SEC] {
            assert_eq!(a.cap_units_at(t), b.cap_units_at(t));
            assert_eq!(a.balance_at(t), b.balance_at(t));
        }
        assert_eq!(spend(&a, SEC), spend(&b, SEC));
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
