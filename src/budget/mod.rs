//! Hedge budgets: caps on how many hedges may be sent, so that hedging
//! stays within a share of the requests over the long run, and over any
//! short stretch within that stretch's share plus a bank.
//!
//! A hedge state machine asks its budget once per request that wants to
//! hedge ([`HedgeBudget::try_acquire`]) and tells it about every primary
//! request ([`HedgeBudget::on_request`]). Two strategies are offered:
//!
//! - [`RatioBudget`] (the default, 15 %): every primary deposits a share of a
//!   token, every hedge withdraws a whole token, and the balance is capped
//!   at what the share earned over the current or the previous 100 ms
//!   window, whichever earned more (at least 10 tokens),
//!   so a burst of stragglers can spend what recent traffic earned, but
//!   no more than that bank and what the burst's own requests earn. It
//!   needs no guess of the request rate and follows traffic as it changes.
//!   A deposit is one `fetch_add`. [`RatioBudget::fixed_cap`] caps the bank
//!   at a fixed number of tokens instead. An optional reserve
//!   ([`RatioBudget::with_reserve`]) lets a client with very little traffic
//!   still hedge now and then.
//! - [`TokenBucket`]: a time-refilled bucket (GCRA), refilled at a fixed rate,
//!   for example `estimated_rps × share` as in the original article. It is
//!   only as good as the rate estimate.
//!
//! [`Budget`] wraps either (or [`Budget::Unlimited`] / [`Budget::Never`]) so
//! a caller can hold one concrete type; [`HedgeBudget`] is object safe, so
//! `&dyn HedgeBudget` works too.
//!
//! ```
//! use tailguard::budget::{Budget, HedgeBudget, RatioBudget, UNITS_PER_TOKEN};
//!
//! // 10 % of traffic, banking up to 100 ms of earnings (at least 5 hedges).
//! let budget = Budget::Ratio(RatioBudget::new(1_000, 5)?);
//! let mut now_ns = 0_u64; // the caller's monotonic clock
//! for _ in 0..20 {
//!     budget.on_request(now_ns); // one fetch_add on the deposit count
//!     now_ns += 1_000_000;
//! }
//! assert!(budget.try_acquire(now_ns)); // 20 × 10 % = 2 tokens banked
//! assert!(budget.try_acquire(now_ns));
//! assert!(!budget.try_acquire(now_ns)); // spent: denied
//! let stats = budget.stats();
//! assert_eq!((stats.grants, stats.denials, stats.balance), (2, 1, 0));
//! # let _ = UNITS_PER_TOKEN;
//! # Ok::<(), tailguard::budget::BudgetError>(())
//! ```
//!
//! # Units
//!
//! Shares are given in basis points (1 bp = 0.01 %, so 10 % = `1_000`).
//! Balances are reported in *units*: one token is [`UNITS_PER_TOKEN`]
//! (`10_000`) units, so a 10 % ratio budget gains exactly `1_000` units per
//! primary request. All arithmetic is integer; the module has no floating
//! point at all (`clippy::float_arithmetic` is denied here).
//!
//! # Time
//!
//! The budgets never read a clock: callers pass monotonic nanoseconds with
//! an arbitrary epoch. Timestamps that repeat, go backwards or jump far
//! ahead never panic, overflow or mint tokens:
//!
//! - a repeated or earlier timestamp is treated as "no time has passed" by
//!   the token bucket; the ratio budget's earnings ignore time, a
//!   timestamp up to 16 bank windows behind its newest (a request timed
//!   before a queue) counts in the newest window while such stamps are a
//!   minority, and one further away, or a majority run of them, restarts
//!   the traffic-scaled cap's per-window counts there (the cap falls to
//!   its floor and follows traffic again within a window: see
//!   [`RatioBudget`]'s *Time*);
//! - after a clock stepped back, or a timestamp far ahead followed by a
//!   return to the true time, the token bucket refuses (it fails closed: no
//!   hedges, never extra ones) until the clock catches up, or, when the
//!   step is more than its window and a second, until 16 asks on the new
//!   clock restart it empty there (see [`TokenBucket`]'s *Clock steps*):
//!   one bad timestamp never freezes a budget;
//! - within one refill interval of `u64::MAX` nanoseconds (year 2554 for a
//!   Unix epoch) the token bucket denies rather than wrap.
//!
//! # Memory ordering
//!
//! Each budget keeps its admission state in **one** `AtomicU64`: the
//! theoretical arrival time for [`TokenBucket`]; for [`RatioBudget`], the
//! units consumed, beside the count of deposits (whose optional reserve is
//! a separate [`TokenBucket`], and whose traffic-scaled cap comes from two
//! more words marking where each window's deposits began). Every grant is a
//! single successful `compare_exchange_weak` on that word, computed from
//! the value it replaces; every deposit is one `fetch_add` on the count.
//! All read-modify-write operations on one atomic location are totally
//! ordered (its modification order) whatever `Ordering` they use, so
//! the budgets are *exact* under any number of threads: a balance can never
//! be overdrawn, a deposit never lost, and the bounds documented on each type
//! hold for every interleaving. Unlike a "check, then subtract" design (as in
//! tower's retry budget), two threads can never both spend the last token.
//! The loops are lock-free, not wait-free: a thread may retry when another
//! one changed the word, but some thread always makes progress.
//!
//! Operations use `Ordering::Relaxed`, except where one word's value says
//! something about another's: the ratio budget reads its consumed units
//! (acquire) before the deposit count, and its window marks (acquire, set
//! with release) before the count too, so that a reader never sees a mark
//! or a grant computed from a count it has not seen. A grant does **not**
//! publish any other memory and must not be used as a synchronization edge
//! between threads. The counters in [`BudgetStats`] are separate relaxed atomics:
//! each is monotone and exact on its own, but one [`HedgeBudget::stats`]
//! call is not a consistent snapshot across fields under concurrency.
//! Counters, as read, saturate at [`COUNTER_MAX`] (2⁶³ − 1) instead of wrapping.
//!
//! # Targets without 64-bit compare-and-swap
//!
//! Atomics come from [`portable-atomic`](https://docs.rs/portable-atomic),
//! which uses native instructions where the target has them. Elsewhere:
//!
//! - **No compare-and-swap at all** (`thumbv6m-none-eabi`,
//!   `riscv32imc-unknown-none-elf`): the *final binary* must enable
//!   `portable-atomic`'s `critical-section` feature and link a
//!   `critical-section` implementation (for a single-core Cortex-M, e.g.
//!   `cortex-m`'s `critical-section-single-core`), or enable
//!   `unsafe-assume-single-core` instead. This library never enables either.
//!   Every atomic operation then runs inside a critical section: on a
//!   single-core MCU that masks interrupts for a few dozen cycles per call,
//!   which adds interrupt latency but cannot deadlock.
//! - **32-bit compare-and-swap only** (`thumbv7em-none-eabihf` and other
//!   32-bit targets): `AtomicU64` is *not lock-free* in `portable-atomic`.
//!   It builds without any feature, but every 64-bit store or
//!   read-modify-write takes one of 67 global sequence locks (picked by
//!   address) whose writers spin; loads read optimistically. That is
//!   correct between threads, but if an interrupt handler uses a budget
//!   while the code it preempted holds the lock on the same core, the
//!   handler spins forever. Choose one: use budgets from a single execution
//!   priority only; or enable `portable-atomic/unsafe-assume-single-core`
//!   in the binary (single-core chips: interrupts are masked around each
//!   operation, cheapest and deadlock-free); or
//!   `portable-atomic/unsafe-assume-privileged` on multi-core chips running
//!   privileged code (the lock is taken with interrupts masked). A 32-bit
//!   state variant that would be lock-free there is not provided yet.
//!
//! On 64-bit hosts (x86-64, AArch64) every operation is a native, lock-free
//! instruction.
#![deny(
    clippy::float_arithmetic,
    clippy::arithmetic_side_effects,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod ratio;
mod token_bucket;

pub use ratio::RatioBudget;
pub use token_bucket::TokenBucket;

use crate::sync::{AtomicU64, Ordering};
use core::fmt;

/// Units in one hedge token: balances are reported in ten-thousandths of a
/// token, so a share in basis points is exactly the deposit per request.
pub const UNITS_PER_TOKEN: u64 = 10_000;

/// The largest share a budget accepts, in basis points: 100 %, one hedge per
/// primary request.
pub const MAX_SHARE_BPS: u32 = 10_000;

/// Where the grant and denial counters stop: 2⁶³ − 1.
pub const COUNTER_MAX: u64 = u64::MAX >> 1;

/// A cap on the number of hedges, shared by all threads of a client.
///
/// Implementors are `Sync` and exact under concurrency: see the module's
/// *Memory ordering* section. The trait is object safe.
pub trait HedgeBudget: Send + Sync {
    /// Records one primary request sent at `now_ns`.
    ///
    /// The [`RatioBudget`] deposits its share here; the [`TokenBucket`]
    /// ignores it (its refill is time-based).
    fn on_request(&self, now_ns: u64);

    /// Records `n` primary requests sent by `now_ns`, exactly as `n` calls
    /// of [`on_request`](Self::on_request) at `now_ns` would: a hedger
    /// that counts requests locally (the shared hedger's per-thread lanes)
    /// hands them over in one call. The default makes the `n` calls; the
    /// [`RatioBudget`] deposits them in one `fetch_add`.
    fn on_requests(&self, now_ns: u64, n: u32) {
        for _ in 0..n {
            self.on_request(now_ns);
        }
    }

    /// Takes one hedge token at `now_ns`; `true` means "send the hedge".
    ///
    /// Exact under concurrency: no two callers can take the same token.
    #[must_use = "a granted token is spent whether or not the hedge is sent"]
    fn try_acquire(&self, now_ns: u64) -> bool;

    /// Grants, denials and the current balance, read without locks.
    fn stats(&self) -> BudgetStats;

    /// A new, independent budget with this one's configuration and nothing
    /// to spend at `now_ns` (it must earn or refill its tokens): what a
    /// hedger gives a target it starts tracking.
    ///
    /// A per-target budget created *full* lets churn mint hedges: evicting
    /// a target and tracking it again would refill it each time. A drained
    /// one only has what it earns after `now_ns`. Counters start at zero.
    ///
    /// - [`RatioBudget`]: balance 0, fresh window counts, the same share,
    ///   floor (or fixed cap) and window; its reserve drained too.
    /// - [`TokenBucket`]: empty at `now_ns`, the next token one interval
    ///   later (a `now_ns` far ahead leaves it empty until the clock
    ///   catches up or restarts it, as after any forward jump).
    /// - [`Budget`]: each variant drained; [`Budget::Unlimited`] and
    ///   [`Budget::Never`] stay as they are.
    /// - `&T`: the same reference. A shared budget stays shared: a hedger
    ///   holding `&budget` per target spends from the one budget.
    ///
    /// Not available on `dyn HedgeBudget` (it returns `Self`), but on
    /// `&dyn HedgeBudget`. Generic code over `B: HedgeBudget` gets `B`'s
    /// own method; in concrete code, method syntax on a reference
    /// auto-derefs (`budget_ref.drained(now)` with `budget_ref: &Budget`
    /// drains a new `Budget`): write `<&Budget as HedgeBudget>::drained`
    /// for the reference's.
    ///
    /// ```
    /// use tailguard::budget::{HedgeBudget, TokenBucket};
    ///
    /// let template = TokenBucket::new(10, 5)?; // full: 5 tokens
    /// let now = 42_000_000_000;
    /// let fresh = template.drained(now);
    /// assert!(!fresh.try_acquire(now)); // nothing to spend yet
    /// assert!(fresh.try_acquire(now + 100_000_000)); // one interval later
    /// assert!(template.try_acquire(now)); // the template is untouched
    /// # Ok::<(), tailguard::budget::BudgetError>(())
    /// ```
    #[must_use]
    fn drained(&self, now_ns: u64) -> Self
    where
        Self: Sized;
}

impl<T: HedgeBudget + ?Sized> HedgeBudget for &T {
    #[inline]
    fn on_request(&self, now_ns: u64) {
        (**self).on_request(now_ns);
    }

    #[inline]
    fn on_requests(&self, now_ns: u64, n: u32) {
        (**self).on_requests(now_ns, n);
    }

    #[inline]
    fn try_acquire(&self, now_ns: u64) -> bool {
        (**self).try_acquire(now_ns)
    }

    #[inline]
    fn stats(&self) -> BudgetStats {
        (**self).stats()
    }

    /// The same reference: a shared budget stays shared.
    #[inline]
    fn drained(&self, _now_ns: u64) -> Self {
        self
    }
}

/// Counters of a budget; see [`HedgeBudget::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct BudgetStats {
    /// Hedge tokens granted (saturates at [`COUNTER_MAX`]).
    pub grants: u64,
    /// Hedge requests denied (saturates at [`COUNTER_MAX`]).
    pub denials: u64,
    /// Current balance in units ([`UNITS_PER_TOKEN`] units = one token).
    ///
    /// For [`RatioBudget`] the balance in the window of its latest marked
    /// deposit ([`RatioBudget::balance`], not counting its reserve): once
    /// traffic stops, the cap a grant sees falls to the floor while this
    /// still reads the bank of the last busy window, so read
    /// [`RatioBudget::balance_at`] for what can be spent at a time; for
    /// [`TokenBucket`] the balance at the timestamp of the latest call to
    /// [`HedgeBudget::try_acquire`], whichever thread made it (not the
    /// largest timestamp: one far ahead would fix the reading there); use
    /// [`TokenBucket::balance_at`] for any other time; `u64::MAX` for
    /// [`Budget::Unlimited`], 0 for [`Budget::Never`].
    pub balance: u64,
}

/// A configuration the budgets reject, returned by their constructors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum BudgetError {
    /// The share is 0 or above [`MAX_SHARE_BPS`].
    ShareOutOfRange {
        /// The share that was given, in basis points.
        share_bps: u32,
    },
    /// A refill rate (tokens per second or estimated requests per second)
    /// of zero.
    ZeroRate,
    /// A refill interval of zero nanoseconds.
    ZeroInterval,
    /// A burst or capacity of zero tokens.
    ZeroCapacity,
    /// `burst × interval` is above `u64::MAX / 2` nanoseconds (292 years):
    /// a bucket denies within one window of `u64::MAX`, so it could never
    /// grant.
    BurstTooLong {
        /// The burst that was given, in tokens.
        burst: u32,
        /// The refill interval, in nanoseconds per token.
        interval_ns: u64,
    },
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ShareOutOfRange { share_bps } => write!(
                f,
                "hedge share of {share_bps} basis points is out of range; \
                 give 1 to {MAX_SHARE_BPS} basis points (10 % is 1000)"
            ),
            Self::ZeroRate => f.write_str(
                "refill rate is zero, so no hedge could ever be sent; \
                 give at least 1 per second, or use Budget::Never to disable hedging",
            ),
            Self::ZeroInterval => f.write_str(
                "refill interval is zero nanoseconds, which would mean unlimited tokens; \
                 give at least 1 ns, or use Budget::Unlimited",
            ),
            Self::ZeroCapacity => f.write_str(
                "burst or capacity is zero tokens, so no hedge could ever be sent; \
                 give at least 1 token",
            ),
            Self::BurstTooLong { burst, interval_ns } => write!(
                f,
                "a burst of {burst} tokens at {interval_ns} ns per token spans more than \
                 half of 64-bit nanoseconds; lower the burst or raise the rate"
            ),
        }
    }
}

impl core::error::Error for BudgetError {}

/// Any budget, as one concrete type for the hedge state machine.
///
/// The default is a [`RatioBudget`] at 15 % with a bank of 100 ms of
/// earnings (see [`RatioBudget::default`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Budget {
    /// A time-refilled token bucket.
    TokenBucket(TokenBucket),
    /// A traffic-proportional budget.
    Ratio(RatioBudget),
    /// Every hedge is granted; keeps no counters. Only for tests and
    /// backends that are known to absorb double load.
    Unlimited,
    /// No hedge is ever granted; keeps no counters.
    Never,
}

impl Default for Budget {
    fn default() -> Self {
        Self::Ratio(RatioBudget::default())
    }
}

impl HedgeBudget for Budget {
    #[inline]
    fn on_request(&self, now_ns: u64) {
        match self {
            Self::TokenBucket(b) => b.on_request(now_ns),
            Self::Ratio(b) => b.on_request(now_ns),
            Self::Unlimited | Self::Never => {}
        }
    }

    #[inline]
    fn on_requests(&self, now_ns: u64, n: u32) {
        match self {
            Self::TokenBucket(b) => b.on_requests(now_ns, n),
            Self::Ratio(b) => b.on_requests(now_ns, n),
            Self::Unlimited | Self::Never => {}
        }
    }

    #[inline]
    fn try_acquire(&self, now_ns: u64) -> bool {
        match self {
            Self::TokenBucket(b) => b.try_acquire(now_ns),
            Self::Ratio(b) => b.try_acquire(now_ns),
            Self::Unlimited => true,
            Self::Never => false,
        }
    }

    fn stats(&self) -> BudgetStats {
        match self {
            Self::TokenBucket(b) => b.stats(),
            Self::Ratio(b) => b.stats(),
            Self::Unlimited => BudgetStats {
                balance: u64::MAX,
                ..BudgetStats::default()
            },
            Self::Never => BudgetStats::default(),
        }
    }

    fn drained(&self, now_ns: u64) -> Self {
        match self {
            Self::TokenBucket(b) => Self::TokenBucket(b.drained(now_ns)),
            Self::Ratio(b) => Self::Ratio(b.drained(now_ns)),
            Self::Unlimited => Self::Unlimited,
            Self::Never => Self::Never,
        }
    }
}

impl From<TokenBucket> for Budget {
    fn from(b: TokenBucket) -> Self {
        Self::TokenBucket(b)
    }
}

impl From<RatioBudget> for Budget {
    fn from(b: RatioBudget) -> Self {
        Self::Ratio(b)
    }
}

/// Grant and denial counters shared by both budgets.
#[derive(Debug)]
struct Counters {
    grants: AtomicU64,
    denials: AtomicU64,
}

impl Counters {
    const fn new() -> Self {
        Self {
            grants: AtomicU64::new(0),
            denials: AtomicU64::new(0),
        }
    }

    #[inline]
    fn grant(&self) {
        bump(&self.grants);
    }

    #[inline]
    fn deny(&self) {
        bump(&self.denials);
    }

    fn stats(&self, balance: u64) -> BudgetStats {
        BudgetStats {
            grants: read(&self.grants),
            denials: read(&self.denials),
            balance,
        }
    }
}

/// One increment, one instruction on 64-bit hosts. The raw counter cannot
/// wrap: 2⁶⁴ grants or denials take 584 years at one a nanosecond, and
/// [`read`] saturates at [`COUNTER_MAX`] long before.
#[inline]
fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[inline]
fn read(counter: &AtomicU64) -> u64 {
    let raw = counter.load(Ordering::Relaxed);
    if raw < COUNTER_MAX {
        raw
    } else {
        COUNTER_MAX
    }
}

/// Validates a share in basis points.
const fn check_share(share_bps: u32) -> Result<u32, BudgetError> {
    if share_bps == 0 || share_bps > MAX_SHARE_BPS {
        Err(BudgetError::ShareOutOfRange { share_bps })
    } else {
        Ok(share_bps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_saturate() {
        let c = AtomicU64::new(COUNTER_MAX - 1);
        bump(&c);
        assert_eq!(read(&c), COUNTER_MAX);
        bump(&c);
        bump(&c);
        assert_eq!(read(&c), COUNTER_MAX);
    }

    #[test]
    fn unlimited_and_never() {
        assert!(Budget::Unlimited.try_acquire(0));
        assert!(!Budget::Never.try_acquire(0));
        assert_eq!(Budget::Unlimited.stats().balance, u64::MAX);
        assert_eq!(Budget::Never.stats(), BudgetStats::default());
    }

    #[test]
    fn errors_say_cause_and_fix() {
        extern crate std;
        use std::string::ToString;
        let msg = BudgetError::ShareOutOfRange { share_bps: 0 }.to_string();
        assert!(msg.contains("out of range") && msg.contains("give 1 to 10000"));
        assert!(BudgetError::ZeroRate.to_string().contains("at least 1"));
    }

    #[test]
    fn trait_is_object_safe() {
        let b = Budget::default();
        let dynb: &dyn HedgeBudget = &b;
        for _ in 0..10 {
            dynb.on_request(0);
        }
        assert!((&dynb).try_acquire(0));
        assert_eq!(dynb.stats().grants, 1);
    }

    #[test]
    fn drained_budgets() {
        const SEC: u64 = 1_000_000_000;
        assert!(matches!(Budget::Unlimited.drained(5), Budget::Unlimited));
        assert!(matches!(Budget::Never.drained(5), Budget::Never));
        let Ok(bucket) = TokenBucket::new(1, 3) else {
            unreachable!()
        };
        let d = Budget::TokenBucket(bucket).drained(7);
        assert!(matches!(d, Budget::TokenBucket(_)));
        assert!(!d.try_acquire(7));
        assert!(d.try_acquire(SEC + 7) && !d.try_acquire(SEC + 7));
        let b = Budget::default();
        for _ in 0..100 {
            b.on_request(0);
        }
        assert!(b.try_acquire(0));
        let d = b.drained(0);
        assert!(matches!(d, Budget::Ratio(_)) && !d.try_acquire(0));
        // A reference is a shared budget: drained gives the same one back
        // (called through the trait for `&T`: `r.drained(0)` would
        // auto-deref to `Budget::drained`).
        let r = &b;
        assert!(core::ptr::eq(<&Budget as HedgeBudget>::drained(&r, 0), r));
        let dynb: &dyn HedgeBudget = &b;
        let same = <&dyn HedgeBudget as HedgeBudget>::drained(&dynb, u64::MAX);
        assert!(core::ptr::addr_eq(same, dynb));
    }

    #[test]
    fn churn_cannot_refill_a_drained_budget() {
        // One table slot, two targets alternating every 10 ms for a second,
        // every request wanting a hedge. A budget created full would
        // grant on each switch; a drained one only what it earns.
        const MS: u64 = 1_000_000;
        let Ok(bucket) = TokenBucket::new(5, 10) else {
            unreachable!()
        };
        let templates = [Budget::TokenBucket(bucket), Budget::default()];
        for template in &templates {
            let mut grants = 0_u32;
            let mut now = 0_u64;
            while now < 1_000 * MS {
                let slot = template.drained(now); // target evicted, re-added
                slot.on_request(now);
                grants = grants.saturating_add(u32::from(slot.try_acquire(now)));
                now = now.saturating_add(10 * MS);
            }
            assert_eq!(grants, 0, "{template:?}");
        }
    }
}
