//! Property tests: single-threaded operation sequences with arbitrary time
//! steps (repeats, backwards steps, jumps of centuries, absolute values),
//! checked against an exact integer model and against the documented bounds.

use proptest::prelude::*;
use tailguard::budget::{Budget, HedgeBudget, RatioBudget, TokenBucket, UNITS_PER_TOKEN};

const NS_PER_SEC: u128 = 1_000_000_000;
const YEAR_NS: u64 = 365 * 24 * 3_600 * 1_000_000_000;

#[derive(Clone, Debug)]
enum Step {
    Same,
    Forward(u64),
    Back(u64),
    Years(u64),
    Abs(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Request,
    Acquire,
    Time(Step),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Same),
        6 => (0..20_000_000_000_u64).prop_map(Step::Forward),
        2 => (0..20_000_000_000_u64).prop_map(Step::Back),
        1 => (0..600_u64).prop_map(Step::Years),
        1 => any::<u64>().prop_map(Step::Abs),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => Just(Op::Request),
            4 => Just(Op::Acquire),
            3 => step().prop_map(Op::Time),
        ],
        // Miri interprets every step: shorter sequences there.
        0..if cfg!(miri) { 40 } else { 400 },
    )
}

fn advance(now: u64, s: &Step) -> u64 {
    match *s {
        Step::Same => now,
        Step::Forward(d) => now.saturating_add(d),
        Step::Back(d) => now.saturating_sub(d),
        Step::Years(y) => now.saturating_add(y.saturating_mul(YEAR_NS)),
        Step::Abs(t) => t,
    }
}

/// Naive GCRA in u128: grant iff max(tat, now) + T ≤ min(now + burst·T,
/// u64::MAX): the window ends at the end of u64 time (the bucket fails
/// closed there instead of wrapping). A refused ask more than the window
/// and `TokenBucket::STALE_AFTER_NS` behind TAT is stale: `STALE_RUN` of
/// them in a row (TAT unchanged, as the bucket folds it; no other refusal
/// between) restart the bucket empty at the last one.
#[derive(Debug)]
struct GcraModel {
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
    fn new(interval: u64, burst: u32) -> Self {
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
    fn drained(interval: u64, burst: u32, at: u64) -> Self {
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
    fn time(&self) -> u128 {
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

    fn take(&mut self, now: u64) -> bool {
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
    fn balance(&self, now: u64) -> u128 {
        let now = u128::from(now);
        let room = self.limit(now).saturating_sub(self.tat.max(now));
        room * u128::from(UNITS_PER_TOKEN) / self.interval
    }

    /// The documented bound: grants · T ≤ burst · T (unless drained first)
    /// + the time of the stretches.
    fn within_bound(&self, grants: u128, initial_burst: bool) -> bool {
        let burst = if initial_burst { self.burst } else { 0 };
        grants.saturating_sub(burst) * self.interval <= self.time()
    }
}

#[derive(Clone, Debug)]
enum BucketCfg {
    Rate(u32, u32),
    Share(u32, u32, u32),
    Interval(u64, u32),
}

fn bucket_cfg() -> impl Strategy<Value = BucketCfg> {
    prop_oneof![
        (1..5_000_u32, 1..50_u32).prop_map(|(r, b)| BucketCfg::Rate(r, b)),
        (1..=10_000_u32, 1..100_000_u32, 1..50_u32).prop_map(|(s, r, b)| BucketCfg::Share(s, r, b)),
        (1..100_000_000_000_u64, 1..50_u32).prop_map(|(i, b)| BucketCfg::Interval(i, b)),
    ]
}

impl BucketCfg {
    fn build(&self) -> TokenBucket {
        match *self {
            Self::Rate(r, b) => TokenBucket::new(r, b),
            Self::Share(s, r, b) => TokenBucket::from_share(s, r, b),
            Self::Interval(i, b) => TokenBucket::with_interval(i, b),
        }
        .expect("generated configurations are valid")
    }

    fn burst(&self) -> u128 {
        match *self {
            Self::Rate(_, b) | Self::Share(_, _, b) | Self::Interval(_, b) => u128::from(b),
        }
    }

    /// The documented bound with the *nominal* (unrounded) rate:
    /// grants ≤ burst + elapsed × rate, cross-multiplied to stay exact.
    fn within_bound(&self, grants: u128, elapsed: u128) -> bool {
        let extra = grants.saturating_sub(self.burst());
        match *self {
            // extra ≤ elapsed·r/10⁹
            Self::Rate(r, _) => extra * NS_PER_SEC <= elapsed * u128::from(r),
            // extra ≤ elapsed·rps·share/(10⁹·10⁴)
            Self::Share(s, r, _) => {
                extra * NS_PER_SEC * 10_000 <= elapsed * u128::from(r) * u128::from(s)
            }
            Self::Interval(i, _) => extra * u128::from(i) <= elapsed,
        }
    }
}

/// The traffic-scaled cap, restated naively. `D` counts deposits; each
/// window's first deposit marks it (per parity: the window number's low 32
/// bits and `D` before it); a window's count runs from its mark to the next
/// window's mark, or to `D` if there is none; the cap is
/// `max(floor, share × max(n_k, n_(k−1)))`. A time at most 16 windows
/// before the latest marked window (a late stamp) counts in that window,
/// until more than 64 late stamps are most of its deposits.
#[derive(Debug)]
struct BankModel {
    share: u128,
    floor: u128,
    window: u64,
    deposits: u128,
    /// (tag, D at the mark) of the even- and odd-numbered windows.
    marks: [(u32, u128); 2],
    /// The window the latest deposit that marked (or found marked) its own
    /// window counted in.
    newest: u64,
    /// Late stamps since `newest` was set.
    late: u128,
}

impl BankModel {
    /// The window `now` counts in.
    fn window_of(&self, now: u64) -> u64 {
        let own = now / self.window;
        if own < self.newest && self.newest - own <= 16 {
            self.newest
        } else {
            own
        }
    }

    fn locate(&self, now: u64) -> (u32, usize) {
        let k = self.window_of(now);
        (k as u32, (k % 2) as usize)
    }

    /// Deposits from `from` to `to`, or 0 if `to` comes first (marks written
    /// out of order by a stale clock).
    fn count(from: u128, to: u128) -> u128 {
        to.saturating_sub(from)
    }

    fn cap_at(&self, now: u64) -> u128 {
        let (tag, i) = self.locate(now);
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
    fn deposit(&mut self, now: u64) -> bool {
        let own = now / self.window;
        if own == self.newest {
            self.deposits += 1;
            return false;
        }
        if self.window_of(now) == self.newest {
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

fn bank_window() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=10_u64,
        1_000..=1_000_000_u64,
        Just(1_000_000_000),
        1..=u64::MAX,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    #[test]
    fn token_bucket_matches_model_and_bound(cfg in bucket_cfg(), start in any::<u64>(), ops in ops()) {
        let bucket = cfg.build();
        let mut model = GcraModel::new(bucket.interval_ns(), bucket.burst());
        let mut now = start;
        let (mut grants, mut denials) = (0_u64, 0_u64);
        for op in &ops {
            match op {
                Op::Request => bucket.on_request(now),
                Op::Acquire => {
                    let before = bucket.balance_at(now);
                    let got = bucket.try_acquire(now);
                    prop_assert_eq!(got, model.take(now), "decision at {}", now);
                    // A token is granted exactly when a whole one is there
                    // (and TAT has room before u64::MAX).
                    if got {
                        prop_assert!(before >= UNITS_PER_TOKEN);
                        grants += 1;
                    } else {
                        denials += 1;
                    }
                }
                Op::Time(s) => now = advance(now, s),
            }
            prop_assert_eq!(u128::from(bucket.balance_at(now)), model.balance(now));
            prop_assert!(bucket.balance_at(now) <= u64::from(bucket.burst()) * UNITS_PER_TOKEN);
            // The bound, with the nominal rate, over the time of the
            // stretches between restarts (a restarted bucket has no burst).
            prop_assert!(cfg.within_bound(u128::from(grants), model.time()),
                "{} grants over {} ns", grants, model.time());
            prop_assert!(model.within_bound(u128::from(grants), true));
        }
        let stats = bucket.stats();
        prop_assert_eq!((stats.grants, stats.denials), (grants, denials));
    }

    #[test]
    fn token_bucket_denies_when_spent(cfg in bucket_cfg(), now in 0..u64::MAX / 2) {
        // At one instant, exactly `burst` grants, then denials.
        let bucket = cfg.build();
        let burst = bucket.burst();
        for _ in 0..burst {
            prop_assert!(bucket.try_acquire(now));
        }
        prop_assert!(!bucket.try_acquire(now));
        prop_assert!(!bucket.try_acquire(now.saturating_sub(1)));
        prop_assert_eq!(bucket.balance_at(now), 0);
        // One interval later, exactly one more.
        let later = now + bucket.interval_ns();
        prop_assert!(bucket.try_acquire(later));
        prop_assert!(!bucket.try_acquire(later));
    }

    #[test]
    fn ratio_matches_model_and_bound(
        share in 1..=10_000_u32,
        max_tokens in 1..20_u32,
        reserve in prop::option::of((1..100_000_000_000_u64, 1..3_u32)),
        start in any::<u64>(),
        ops in ops(),
    ) {
        let mut budget = RatioBudget::fixed_cap(share, max_tokens).expect("valid");
        let mut reserve_model = None;
        if let Some((interval, burst)) = reserve {
            budget = budget.with_reserve(TokenBucket::with_interval(interval, burst).expect("valid"));
            reserve_model = Some(GcraModel::new(interval, burst));
        }
        let cap = u128::from(max_tokens) * u128::from(UNITS_PER_TOKEN);
        let unit = u128::from(UNITS_PER_TOKEN);
        let mut now = start;
        let (mut balance, mut deposits, mut grants, mut denials) = (0_u128, 0_u128, 0_u64, 0_u64);
        for op in &ops {
            match op {
                Op::Request => {
                    budget.on_request(now);
                    deposits += 1;
                    balance = (balance + u128::from(share)).min(cap);
                }
                Op::Acquire => {
                    let expected = if balance >= unit {
                        balance -= unit;
                        true
                    } else {
                        reserve_model.as_mut().is_some_and(|r| r.take(now))
                    };
                    prop_assert_eq!(budget.try_acquire(now), expected);
                    if expected { grants += 1 } else { denials += 1 }
                }
                Op::Time(s) => now = advance(now, s),
            }
            // Deposits are never lost and withdrawals are exact.
            prop_assert_eq!(u128::from(budget.balance()), balance);
            // grants ≤ share/10⁴·deposits + reserve_burst + elapsed/reserve_interval.
            let g = u128::from(grants) * unit;
            match reserve {
                None => prop_assert!(g <= deposits * u128::from(share)),
                Some((interval, burst)) => {
                    // The reserve's time: its asks' stretches between restarts.
                    let time = reserve_model.as_ref().map_or(0, GcraModel::time);
                    let i = u128::from(interval);
                    prop_assert!(g * i <= (deposits * u128::from(share) + u128::from(burst) * unit) * i
                        + time * unit);
                }
            }
            // The brief's looser form: ≤ share·deposits + cap (+ reserve).
            if reserve.is_none() {
                prop_assert!(g <= deposits * u128::from(share) + cap);
            }
        }
        let stats = budget.stats();
        prop_assert_eq!((stats.grants, stats.denials), (grants, denials));
        prop_assert_eq!(u128::from(stats.balance), balance);
    }

    #[test]
    fn scaled_ratio_matches_model_and_bounds(
        share in 1..=10_000_u32,
        floor in 1..20_u32,
        window in bank_window(),
        reserve in prop::option::of((1..100_000_000_000_u64, 1..3_u32)),
        start in any::<u64>(),
        ops in ops(),
    ) {
        let mut budget = RatioBudget::with_bank_window(share, floor, window).expect("valid");
        let mut reserve_model = None;
        if let Some((interval, burst)) = reserve {
            budget = budget.with_reserve(TokenBucket::with_interval(interval, burst).expect("valid"));
            reserve_model = Some(GcraModel::new(interval, burst));
        }
        prop_assert_eq!(budget.bank_window_ns(), Some(window));
        let unit = u128::from(UNITS_PER_TOKEN);
        let (share_u, floor_u) = (u128::from(share), u128::from(floor) * unit);
        let mut bank = BankModel { share: share_u, floor: floor_u, window, deposits: 0, marks: [(0, 0); 2], newest: 0, late: 0 };
        let mut now = start;
        // Earned and not consumed (by grants, or by the cap at a grant).
        let mut unspent = 0_u128;
        let (mut paid, mut from_reserve, mut denials) = (0_u128, 0_u64, 0_u64);
        // max over earlier states i of (earned_i − paid_i − balance_i),
        // earned = deposits × share and paid = balance grants × unit, while
        // time never went back; and of (earned_i − paid_i − unspent_i).
        let (mut worst_start, mut weak_start) = (i128::MIN, i128::MIN);
        let mut went_back = false;
        let mut prev_now = now;
        for op in &ops {
            match op {
                Op::Request => {
                    budget.on_request(now);
                    unspent += share_u;
                    if bank.deposit(now) {
                        unspent = unspent.min(bank.cap_at(now));
                    }
                }
                Op::Acquire => {
                    let balance = unspent.min(bank.cap_at(now));
                    let expected = if balance >= unit {
                        unspent = balance - unit;
                        paid += unit;
                        true
                    } else if reserve_model.as_mut().is_some_and(|r| r.take(now)) {
                        from_reserve += 1;
                        true
                    } else {
                        denials += 1;
                        false
                    };
                    prop_assert_eq!(budget.try_acquire(now), expected, "at {}", now);
                }
                Op::Time(s) => now = advance(now, s),
            }
            let cap = bank.cap_at(now);
            let balance = unspent.min(cap);
            // Exact cap and balance.
            prop_assert_eq!(u128::from(budget.cap_units_at(now)), cap);
            prop_assert_eq!(u128::from(budget.balance_at(now)), balance);
            let earned = bank.deposits * share_u;
            // The cap counts real deposits only.
            prop_assert!(cap <= floor_u.max(earned));
            // The budget starts empty: the balance never pays for more than
            // the share of the deposits.
            prop_assert!(paid <= earned);
            // Over any stretch of calls whose timestamps do not go back,
            // the balance pays for at most the share of the stretch's
            // deposits plus the bank at its start:
            // x_i − x_j ≤ balance_i, x = earned − paid.
            went_back |= now < prev_now;
            prev_now = now;
            let x = i128::try_from(earned).unwrap() - i128::try_from(paid).unwrap();
            if !went_back {
                prop_assert!(worst_start <= x, "a stretch overspent: {} > {}", worst_start, x);
                worst_start = worst_start.max(x - i128::try_from(balance).unwrap());
            }
            // Whatever the clock: at most the stretch's earnings plus what
            // was earned and not consumed at its start, which is at most
            // the cap at the latest window mark plus the earnings since.
            prop_assert!(weak_start <= x);
            weak_start = weak_start.max(x - i128::try_from(unspent).unwrap());
        }
        let stats = budget.stats();
        let grants = u64::try_from(paid / unit).unwrap() + from_reserve;
        prop_assert_eq!((stats.grants, stats.denials), (grants, denials));
        if let Some(r) = budget.reserve() {
            prop_assert_eq!(r.stats().grants, from_reserve);
        }
    }

    #[test]
    fn scaled_ratio_stretch_bound_holds_through_one_step_back(
        share in 1..=10_000_u32,
        floor in 1..20_u32,
        window in 1..1_000_000_u64,
        ops in ops(),
    ) {
        // Clocks that step back at most one window at a time, and never
        // below the newest window minus one: time alone never raises the
        // cap, so the stretch bound holds across the steps back too.
        let budget = RatioBudget::with_bank_window(share, floor, window).expect("valid");
        let unit = u128::from(UNITS_PER_TOKEN);
        let (mut now, mut newest) = (window * 1_000, window * 1_000);
        let (mut deposits, mut paid) = (0_u128, 0_u128);
        let mut worst_start = i128::MIN;
        for op in &ops {
            match op {
                Op::Request => {
                    budget.on_request(now);
                    deposits += 1;
                }
                Op::Acquire => paid += unit * u128::from(budget.try_acquire(now)),
                Op::Time(Step::Back(d)) => {
                    let lowest = (newest / window).saturating_sub(1) * window;
                    now = now.saturating_sub(d % window.max(1)).max(lowest);
                }
                Op::Time(Step::Forward(d)) => now = now.saturating_add(*d),
                Op::Time(_) => {}
            }
            newest = newest.max(now);
            let x = i128::try_from(deposits * u128::from(share)).unwrap()
                - i128::try_from(paid).unwrap();
            prop_assert!(worst_start <= x, "a stretch overspent: {} > {}", worst_start, x);
            worst_start = worst_start.max(x - i128::from(budget.balance_at(now)));
        }
    }

    #[test]
    fn churn_cannot_mint_hedges(
        cfg in bucket_cfg(),
        share in 1..=10_000_u32,
        floor in 1..20_u32,
        window in bank_window(),
        start in 0..u64::MAX / 2,
        ops in prop::collection::vec(
            prop_oneof![
                3 => Just(None), // the tracked target changes: evict, re-add
                4 => Just(Some(Op::Request)),
                4 => Just(Some(Op::Acquire)),
                3 => (0..20_000_000_000_u64).prop_map(|d| Some(Op::Time(Step::Forward(d)))),
            ],
            0..if cfg!(miri) { 40 } else { 400 },
        ),
    ) {
        // A one-slot per-target table: every switch gives the new target
        // `template.drained(now)`. Whatever the churn, the slot grants no
        // more than one budget that was never evicted could have earned,
        // without its initial burst: grants × interval ≤ elapsed for the
        // bucket, grants × 10⁴ ≤ deposits × share for the ratio budget.
        let templates = [
            Budget::TokenBucket(cfg.build()),
            Budget::Ratio(RatioBudget::with_bank_window(share, floor, window).expect("valid")),
        ];
        for template in &templates {
            let mut slot = template.drained(start);
            let (mut now, mut deposits, mut grants) = (start, 0_u128, 0_u128);
            for op in &ops {
                match op {
                    None => slot = template.drained(now),
                    Some(Op::Request) => {
                        slot.on_request(now);
                        deposits += 1;
                    }
                    Some(Op::Acquire) => grants += u128::from(slot.try_acquire(now)),
                    Some(Op::Time(s)) => now = advance(now, s),
                }
                match template {
                    Budget::TokenBucket(b) => prop_assert!(
                        grants * u128::from(b.interval_ns()) <= u128::from(now - start),
                        "{} grants in {} ns", grants, now - start
                    ),
                    _ => prop_assert!(grants * 10_000 <= deposits * u128::from(share)),
                }
            }
            prop_assert_eq!(template.stats().grants, 0); // never touched
        }
    }

    #[test]
    fn drained_never_panics_or_mints(cfg in bucket_cfg(), share in 1..=10_000_u32, at in any::<u64>(), ops in ops()) {
        // Wild creation times and timestamps. A drained bucket has no burst
        // to give: each grant moves TAT (from at + burst·T) up by at least
        // T and TAT never passes t + burst·T, so grants × T ≤ t_max − at
        // for the newest acquire time t_max, until a clock step restarts
        // it (as empty at the step: the model counts those stretches). The
        // ratio budget's balance pays only for what it earned; its drained
        // reserve obeys the bucket's rule in each stretch, and a restart
        // takes `STALE_RUN` refusals.
        let reserve = cfg.build();
        let interval = u128::from(reserve.interval_ns());
        let ratio = RatioBudget::new(share, 1).expect("valid").with_reserve(reserve).drained(at);
        let bucket = cfg.build().drained(at);
        let mut model = GcraModel::drained(bucket.interval_ns(), bucket.burst(), at);
        prop_assert!(!bucket.try_acquire(at) && !bucket.try_acquire(at.saturating_sub(1)));
        prop_assert!(!model.take(at) && !model.take(at.saturating_sub(1)));
        prop_assert_eq!(bucket.balance_at(at), 0);
        prop_assert!(!ratio.try_acquire(at));
        let (mut now, mut deposits, mut grants) = (at, 0_u128, 0_u128);
        let (mut t_min, mut t_max) = (at, at);
        for op in &ops {
            match op {
                Op::Request => {
                    ratio.on_request(now);
                    deposits += 1;
                }
                Op::Acquire => {
                    (t_min, t_max) = (t_min.min(now), t_max.max(now));
                    grants += u128::from(ratio.try_acquire(now));
                    prop_assert_eq!(bucket.try_acquire(now), model.take(now));
                }
                Op::Time(s) => now = advance(now, s),
            }
            let reserve = ratio.reserve().map(|r| r.stats()).unwrap_or_default();
            let reserve_grants = u128::from(reserve.grants);
            prop_assert!((grants - reserve_grants) * 10_000 <= deposits * u128::from(share));
            let stretches = 1 + u128::from(reserve.denials) / u128::from(TokenBucket::STALE_RUN);
            prop_assert!(reserve_grants * interval <= stretches * u128::from(t_max - t_min));
            prop_assert!(model.within_bound(u128::from(bucket.stats().grants), false));
        }
    }

    #[test]
    fn ratio_denies_without_deposits(share in 1..=10_000_u32, max_tokens in 1..20_u32, n in 0..200_u32) {
        let budget = RatioBudget::fixed_cap(share, max_tokens).expect("valid");
        prop_assert!(!budget.try_acquire(0));
        for _ in 0..n {
            budget.on_request(0);
        }
        let tokens = (u64::from(n) * u64::from(share) / UNITS_PER_TOKEN).min(max_tokens.into());
        for _ in 0..tokens {
            prop_assert!(budget.try_acquire(0));
        }
        prop_assert!(!budget.try_acquire(u64::MAX));
    }
}
