//! Exact integer models of the budgets, shared by the property tests that
//! drive a budget and its model with the same operations: the token
//! bucket's GCRA (with its stale-clock restart and the documented bound)
//! and the ratio budget's traffic-scaled bank. The budget fuzz target
//! (`fuzz/fuzz_targets/budget.rs`) includes this file too.
#![allow(dead_code)]

use tailguard::budget::{RatioBudget, TokenBucket, UNITS_PER_TOKEN};

/// Naive GCRA in u128: grant iff max(tat, now) + T ≤ min(now + burst·T,
/// u64::MAX): the window ends at the end of u64 time (the bucket fails
/// closed there instead of wrapping). A refused ask more than the window
/// and `TokenBucket::STALE_AFTER_NS` behind TAT is stale: `STALE_RUN` of
/// them in a row (TAT unchanged, as the bucket folds it; no other refusal
/// between) restart the bucket empty at the last one.
#[derive(Debug)]
pub struct GcraModel {
    tat: u128,
    interval: u128,
    burst: u128,
    run: u32,
    /// TAT folded as the bucket folds it (a run counts against one TAT).
    stale_of: u32,
    /// The time the bound allows grants for: the acquire span of the first
    /// stretch (from a restart or drain: from it), plus that of every
    /// stretch before.
    spent: u128,
    stretch: Option<(u64, u64)>,
    /// Whether the current stretch began at a restart or drain (at `.0`).
    from_restart: bool,
}

impl GcraModel {
    pub fn new(interval: u64, burst: u32) -> Self {
        Self {
            tat: 0,
            interval: interval.into(),
            burst: burst.into(),
            run: 0,
            stale_of: 0,
            spent: 0,
            stretch: None,
            from_restart: false,
        }
    }

    /// The model of `drained(at)`: empty at `at`.
    pub fn drained(interval: u64, burst: u32, at: u64) -> Self {
        let mut m = Self::new(interval, burst);
        m.restart(at);
        m
    }

    fn window(&self) -> u128 {
        self.burst * self.interval
    }

    fn restart(&mut self, at: u64) {
        self.spent += self.stretch_span();
        self.tat = (u128::from(at) + self.window()).min(u128::from(u64::MAX));
        self.run = 0;
        self.stretch = Some((at, at));
        self.from_restart = true;
    }

    fn stretch_span(&self) -> u128 {
        self.stretch.map_or(0, |(lo, hi)| u128::from(hi - lo))
    }

    /// Time the bound allows grants for: with `burst` more for the first
    /// stretch unless it began drained.
    pub fn time(&self) -> u128 {
        self.spent + self.stretch_span()
    }

    fn see(&mut self, now: u64) {
        self.stretch = Some(match self.stretch {
            None => (now, now),
            // A stretch from a restart counts from it, not from earlier asks.
            Some((lo, hi)) if self.from_restart => (lo, hi.max(now)),
            Some((lo, hi)) => (lo.min(now), hi.max(now)),
        });
    }

    pub fn take(&mut self, now: u64) -> bool {
        self.see(now);
        let t = u128::from(now);
        let next = self.tat.max(t) + self.interval;
        if next <= self.limit(t) {
            self.tat = next;
            return true;
        }
        let stale = t + self.window() + u128::from(TokenBucket::STALE_AFTER_NS) < self.tat;
        if !stale {
            self.run = 0;
            return false;
        }
        // TAT never exceeds u64::MAX (grants stop there, restarts clamp).
        let tat = u64::try_from(self.tat).unwrap();
        let folded = (tat ^ (tat >> 32)) as u32;
        self.run = if self.stale_of == folded {
            self.run + 1
        } else {
            1
        };
        self.stale_of = folded;
        if self.run >= TokenBucket::STALE_RUN {
            self.restart(now);
        }
        false
    }

    fn limit(&self, now: u128) -> u128 {
        (now + self.window()).min(u128::from(u64::MAX))
    }

    /// Exact balance in units: whole and fractional tokens left in the window.
    pub fn balance(&self, now: u64) -> u128 {
        let now = u128::from(now);
        let room = self.limit(now).saturating_sub(self.tat.max(now));
        room * u128::from(UNITS_PER_TOKEN) / self.interval
    }

    /// The documented bound: grants · T ≤ burst · T (unless drained first)
    /// + the time of the stretches.
    pub fn within_bound(&self, grants: u128, initial_burst: bool) -> bool {
        let burst = if initial_burst { self.burst } else { 0 };
        grants.saturating_sub(burst) * self.interval <= self.time()
    }
}

/// The traffic-scaled cap, restated naively. `D` counts deposits; each
/// window's first deposit marks it (per parity: the window number's low 32
/// bits and `D` before it); a window's count runs from its mark to the next
/// window's mark, or to `D` if there is none; the cap is
/// `max(floor, share × max(n_k, n_(k−1)))`. A time at most
/// `RatioBudget::LATE_WINDOWS` windows before the latest marked window (a
/// late stamp) counts in that window, until more than 64 late stamps are
/// most of its deposits. Without a window (`RatioBudget::fixed_cap`) the
/// cap is the floor.
#[derive(Debug)]
pub struct BankModel {
    /// Units a deposit earns.
    pub share: u128,
    /// The cap's floor (the cap itself without a window), in units.
    pub floor: u128,
    window: Option<u64>,
    /// Deposits so far: `D`.
    pub deposits: u128,
    /// (tag, D at the mark) of the even- and odd-numbered windows.
    marks: [(u32, u128); 2],
    /// The window the latest deposit that marked (or found marked) its own
    /// window counted in.
    newest: u64,
    /// Late stamps since `newest` was set.
    late: u128,
}

impl BankModel {
    /// An empty bank: `share` units a deposit, a cap of at least `floor`
    /// units, over windows of `window` ns (`None`: the floor is the cap).
    pub fn new(share: u128, floor: u128, window: Option<u64>) -> Self {
        Self {
            share,
            floor,
            window,
            deposits: 0,
            marks: [(0, 0); 2],
            newest: 0,
            late: 0,
        }
    }

    /// The window `now` counts in, over windows of `window` ns.
    fn window_of(&self, now: u64, window: u64) -> u64 {
        let own = now / window;
        if own < self.newest && self.newest - own <= RatioBudget::LATE_WINDOWS {
            self.newest
        } else {
            own
        }
    }

    fn locate(&self, now: u64, window: u64) -> (u32, usize) {
        let k = self.window_of(now, window);
        (k as u32, (k % 2) as usize)
    }

    /// Deposits from `from` to `to`, or 0 if `to` comes first (marks written
    /// out of order by a stale clock).
    fn count(from: u128, to: u128) -> u128 {
        to.saturating_sub(from)
    }

    /// The cap at `now`, in units.
    pub fn cap_at(&self, now: u64) -> u128 {
        let Some(window) = self.window else {
            return self.floor;
        };
        let (tag, i) = self.locate(now, window);
        let (mine, other) = (self.marks[i], self.marks[1 - i]);
        let here = (mine.0 == tag).then_some(mine.1);
        let d = self.deposits;
        let n = if other.0 == tag.wrapping_sub(1) {
            let before = Self::count(other.1, here.unwrap_or(d));
            before.max(here.map_or(0, |h| Self::count(h, d)))
        } else if other.0 == tag.wrapping_add(1) {
            here.map_or(0, |h| Self::count(h, other.1))
        } else {
            here.map_or(0, |h| Self::count(h, d))
        };
        self.floor.max(self.share * n)
    }

    /// Counts a deposit at `now`: whether it marked its window (then the
    /// earnings above the cap are given up).
    pub fn deposit(&mut self, now: u64) -> bool {
        let Some(window) = self.window else {
            self.deposits += 1;
            return false;
        };
        let own = now / window;
        if own == self.newest {
            self.deposits += 1;
            return false;
        }
        if self.window_of(now, window) == self.newest {
            // A late stamp: it counts in the newest window, unless late
            // stamps are now most of that window's deposits (and more than
            // 64): then its own window is taken.
            self.late += 1;
            let i = (self.newest % 2) as usize;
            // From the newest window's slot, whatever window wrote it.
            let n = self.deposits + 1 - self.marks[i].1;
            if self.late <= 64 || 2 * self.late <= n {
                self.deposits += 1;
                return false;
            }
        }
        self.newest = own;
        self.late = 0;
        let (tag, i) = ((own as u32), (own % 2) as usize);
        let marks = self.marks[i].0 != tag;
        if marks {
            self.marks[i] = (tag, self.deposits);
        }
        self.deposits += 1;
        marks
    }
}

/// Who pays for a hedge a ratio budget is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paid {
    Balance,
    Reserve,
    /// Nobody: refused.
    Refused,
}

/// A ratio budget: its bank, the units earned and not yet spent (nor cut
/// by the cap when a deposit marked a window), and its reserve.
#[derive(Debug)]
pub struct RatioModel {
    pub bank: BankModel,
    pub unspent: u128,
    pub reserve: Option<GcraModel>,
}

impl RatioModel {
    pub fn new(bank: BankModel, reserve: Option<GcraModel>) -> Self {
        Self {
            bank,
            unspent: 0,
            reserve,
        }
    }

    /// One request's deposit at `now`.
    pub fn deposit(&mut self, now: u64) {
        self.unspent += self.bank.share;
        if self.bank.deposit(now) {
            self.unspent = self.unspent.min(self.bank.cap_at(now));
        }
    }

    /// The balance at `now`, in units: what was earned, up to the cap.
    pub fn balance(&self, now: u64) -> u128 {
        self.unspent.min(self.bank.cap_at(now))
    }

    /// An ask at `now`: a whole token from the balance, else from the
    /// reserve.
    pub fn take(&mut self, now: u64) -> Paid {
        let balance = self.balance(now);
        let unit = u128::from(UNITS_PER_TOKEN);
        if balance >= unit {
            self.unspent = balance - unit;
            Paid::Balance
        } else if self.reserve.as_mut().is_some_and(|r| r.take(now)) {
            Paid::Reserve
        } else {
            Paid::Refused
        }
    }
}
