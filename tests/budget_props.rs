//! Property tests: single-threaded operation sequences with arbitrary time
//! steps (repeats, backwards steps, jumps of centuries, absolute values),
//! checked against an exact integer model and against the documented bounds.

mod budget_model;

use budget_model::{BankModel, GcraModel, Paid, RatioModel};
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
        let mut model = RatioModel::new(BankModel::new(share_u, floor_u, Some(window)), reserve_model);
        let mut now = start;
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
                    model.deposit(now);
                }
                Op::Acquire => {
                    let payer = model.take(now);
                    match payer {
                        Paid::Balance => paid += unit,
                        Paid::Reserve => from_reserve += 1,
                        Paid::Refused => denials += 1,
                    }
                    prop_assert_eq!(budget.try_acquire(now), payer != Paid::Refused, "at {}", now);
                }
                Op::Time(s) => now = advance(now, s),
            }
            let cap = model.bank.cap_at(now);
            let balance = model.balance(now);
            // Exact cap and balance.
            prop_assert_eq!(u128::from(budget.cap_units_at(now)), cap);
            prop_assert_eq!(u128::from(budget.balance_at(now)), balance);
            let earned = model.bank.deposits * share_u;
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
            weak_start = weak_start.max(x - i128::try_from(model.unspent).unwrap());
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
