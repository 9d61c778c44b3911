//! Budgets at the ends of their parameters, against the exact models of
//! `budget_model`: token buckets of 1 ns an interval, of bursts up to
//! `u32::MAX` and of windows up to the documented `u64::MAX / 2`; ratio
//! budgets of every share from 1 to 10 000 basis points, floors and fixed
//! caps up to `u32::MAX` tokens, bank windows of 1 ns, 2 ns and up to
//! `u64::MAX`, with or without a reserve at the same extremes. Time starts
//! and jumps to either end of `u64`, steps back past the late-stamp limit,
//! budgets are drained in the middle of the traffic, and deposits come in
//! bulk (`on_requests(n)` with `n` up to 70 000, so that one call passes
//! the 64 late stamps after which a window is taken).
//!
//! A constructor refuses exactly what its documentation names, with the
//! typed error; every decision, cap and balance equals the model's, and
//! the documented bounds hold. `budget_props.rs` drives the same models
//! with ordinary parameters and clock steps.

mod budget_model;

use budget_model::{BankModel, GcraModel, Paid, RatioModel};
use proptest::prelude::*;
use tailguard::budget::{
    BudgetError, HedgeBudget, RatioBudget, TokenBucket, MAX_SHARE_BPS, UNITS_PER_TOKEN,
};

#[derive(Clone, Debug)]
enum Op {
    /// `on_requests(now, n)`; `on_request(now)` for `None`.
    Deposit(Option<u32>),
    Acquire,
    /// Replace the budget by `drained(now)`.
    Drain,
    Time(Step),
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Forward(u64),
    Back(u64),
    To(u64),
}

impl Step {
    fn from(self, now: u64) -> u64 {
        match self {
            Self::Forward(d) => now.saturating_add(d),
            Self::Back(d) => now.saturating_sub(d),
            Self::To(t) => t,
        }
    }
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let bulk = prop_oneof![0u32..3, 60u32..140, Just(1_000), Just(70_000)];
    let time = prop_oneof![
        prop::sample::select(vec![0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]),
        0u64..2_000_000_000,
        any::<u64>(),
    ];
    // Back about 16 bank windows of 100 ms: a late stamp, or just not.
    let back = prop_oneof![
        0u64..1_000,
        0u64..2_000_000_000,
        prop::sample::select(vec![1_600_000_000, 1_700_000_000]),
    ];
    prop::collection::vec(
        prop_oneof![
            4 => Just(Op::Deposit(None)),
            3 => bulk.prop_map(|n| Op::Deposit(Some(n))),
            6 => Just(Op::Acquire),
            1 => Just(Op::Drain),
            3 => prop_oneof![0u64..1_000, 0u64..2_000_000_000, Just(100_000_000)]
                .prop_map(|d| Op::Time(Step::Forward(d))),
            2 => back.prop_map(|d| Op::Time(Step::Back(d))),
            1 => time.prop_map(|t| Op::Time(Step::To(t))),
        ],
        1..120,
    )
}

/// Token counts: 0 (refused), 1, around a byte and 16 bits, `u32::MAX`.
fn tokens() -> impl Strategy<Value = u32> {
    prop_oneof![
        prop::sample::select(vec![0, 1, 2, 255, 256, 65_536, u32::MAX]),
        any::<u32>(),
    ]
}

/// Intervals: 0 (refused), a few nanoseconds, a second, up to `u64::MAX`.
fn interval() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            2,
            1_000_000_000,
            u64::MAX / 4,
            u64::MAX / 2,
            u64::MAX
        ]),
        1u64..10_000,
        any::<u64>(),
    ]
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![0, u64::MAX - 5, u64::MAX]),
        0u64..1_000_000_000_000,
        any::<u64>(),
    ]
}

/// The bucket `with_interval` builds, or the error its documentation
/// names for these parameters.
fn bucket(interval_ns: u64, burst: u32) -> Result<Option<TokenBucket>, TestCaseError> {
    let built = TokenBucket::with_interval(interval_ns, burst);
    let expected = if interval_ns == 0 {
        Some(BudgetError::ZeroInterval)
    } else if burst == 0 {
        Some(BudgetError::ZeroCapacity)
    } else if u128::from(interval_ns) * u128::from(burst) > u128::from(u64::MAX / 2) {
        Some(BudgetError::BurstTooLong { burst, interval_ns })
    } else {
        None
    };
    prop_assert_eq!(built.as_ref().err(), expected.as_ref());
    if let Ok(b) = &built {
        prop_assert_eq!((b.interval_ns(), b.burst()), (interval_ns, burst));
    }
    Ok(built.ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    /// A token bucket at its extremes grants exactly what the model grants,
    /// holds exactly its balance, and keeps the documented bound, through
    /// drains and clock jumps to either end of `u64`.
    #[test]
    fn a_token_bucket_at_its_extremes_is_the_model(
        interval_ns in interval(),
        burst in tokens(),
        start in start(),
        ops in ops(),
    ) {
        let Some(mut bucket) = bucket(interval_ns, burst)? else {
            return Ok(());
        };
        let mut model = GcraModel::new(interval_ns, burst);
        // Until the first drain the bucket starts full: its burst is free.
        let (mut now, mut grants, mut full_start) = (start, 0u64, true);
        for op in &ops {
            match *op {
                Op::Deposit(n) => match n {
                    Some(n) => bucket.on_requests(now, n),
                    None => bucket.on_request(now),
                },
                Op::Acquire => {
                    let got = bucket.try_acquire(now);
                    prop_assert_eq!(got, model.take(now), "at {}", now);
                    grants += u64::from(got);
                }
                Op::Drain => {
                    bucket = bucket.drained(now);
                    model = GcraModel::drained(interval_ns, burst, now);
                    (grants, full_start) = (0, false);
                    prop_assert_eq!(bucket.balance_at(now), 0);
                }
                Op::Time(step) => now = step.from(now),
            }
            prop_assert_eq!(u128::from(bucket.balance_at(now)), model.balance(now), "at {}", now);
            prop_assert!(bucket.balance_at(now) <= u64::from(burst) * UNITS_PER_TOKEN);
            prop_assert!(model.within_bound(u128::from(grants), full_start), "{} grants", grants);
            prop_assert_eq!(bucket.stats().grants, grants);
        }
    }

    /// A ratio budget at its extremes, with or without a reserve, grants
    /// exactly what the model grants, reports its cap and balance exactly,
    /// and never pays from its balance more than its share of the
    /// deposits, through drains, bulk deposits and clock jumps.
    #[test]
    fn a_ratio_budget_at_its_extremes_is_the_model(
        share in prop_oneof![prop::sample::select(vec![0, 1, MAX_SHARE_BPS, MAX_SHARE_BPS + 1]), 1..MAX_SHARE_BPS],
        floor in tokens(),
        window in prop_oneof![
            Just(None),
            prop::sample::select(vec![0, 1, 2, 100_000_000, u64::MAX / 2, u64::MAX]).prop_map(Some),
            any::<u64>().prop_map(Some),
        ],
        reserve in prop::option::of((interval(), tokens())),
        start in start(),
        ops in ops(),
    ) {
        let built = match window {
            None => RatioBudget::fixed_cap(share, floor),
            Some(w) => RatioBudget::with_bank_window(share, floor, w),
        };
        let expected = if share == 0 || share > MAX_SHARE_BPS {
            Some(BudgetError::ShareOutOfRange { share_bps: share })
        } else if floor == 0 {
            Some(BudgetError::ZeroCapacity)
        } else if window == Some(0) {
            Some(BudgetError::ZeroInterval)
        } else {
            None
        };
        prop_assert_eq!(built.as_ref().err(), expected.as_ref());
        let Ok(mut budget) = built else {
            return Ok(());
        };
        prop_assert_eq!(budget.bank_window_ns(), window);
        let reserve = match reserve {
            Some((interval_ns, burst)) => bucket(interval_ns, burst)?,
            None => None,
        };
        let reserve_model = reserve.as_ref().map(|r| GcraModel::new(r.interval_ns(), r.burst()));
        if let Some(r) = reserve {
            budget = budget.with_reserve(r);
        }
        let (unit, share_units) = (u128::from(UNITS_PER_TOKEN), u128::from(share));
        let floor_units = u128::from(floor) * unit;
        let new_bank = || BankModel::new(share_units, floor_units, window);
        let mut model = RatioModel::new(new_bank(), reserve_model);
        let mut now = start;
        let (mut grants, mut from_reserve) = (0u64, 0u64);
        for op in &ops {
            match *op {
                Op::Deposit(n) => {
                    match n {
                        Some(n) => budget.on_requests(now, n),
                        None => budget.on_request(now),
                    }
                    for _ in 0..n.unwrap_or(1) {
                        model.deposit(now);
                    }
                }
                Op::Acquire => {
                    let payer = model.take(now);
                    prop_assert_eq!(budget.try_acquire(now), payer != Paid::Refused, "at {}", now);
                    grants += u64::from(payer != Paid::Refused);
                    from_reserve += u64::from(payer == Paid::Reserve);
                }
                Op::Drain => {
                    budget = budget.drained(now);
                    let reserve = budget
                        .reserve()
                        .map(|r| GcraModel::drained(r.interval_ns(), r.burst(), now));
                    model = RatioModel::new(new_bank(), reserve);
                    (grants, from_reserve) = (0, 0);
                }
                Op::Time(step) => now = step.from(now),
            }
            let cap = model.bank.cap_at(now);
            prop_assert_eq!(u128::from(budget.cap_units_at(now)), cap, "cap at {}", now);
            prop_assert_eq!(u128::from(budget.balance_at(now)), model.balance(now), "balance at {}", now);
            // The cap counts real deposits only, and so does what the
            // balance pays for.
            let earned = model.bank.deposits * share_units;
            prop_assert!(cap <= floor_units.max(earned));
            prop_assert!(u128::from(grants - from_reserve) * unit <= earned);
            prop_assert_eq!(budget.stats().grants, grants);
        }
    }
}
