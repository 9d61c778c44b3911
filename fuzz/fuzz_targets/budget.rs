//! Differential fuzzing of the hedge budgets against naive u128 models,
//! over arbitrary configurations, operation sequences and timestamps,
//! including budgets replaced by `drained` copies mid-sequence.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket, UNITS_PER_TOKEN};

#[derive(arbitrary::Arbitrary, Debug)]
enum Op {
    Request,
    Acquire,
    /// Replace both budgets by `drained(now)` copies (a target re-added).
    Drain,
    Forward(u32),
    Back(u32),
    Jump(u64),
    Set(u64),
}

#[derive(arbitrary::Arbitrary, Debug)]
enum BucketCfg {
    Rate(u32, u8),
    Share(u16, u32, u8),
    Interval(u64, u8),
}

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    bucket: BucketCfg,
    share_bps: u16,
    /// The fixed cap, or the floor of a traffic-scaled bank.
    tokens: u8,
    /// `None`: `fixed_cap`; `Some(0)`: `new` (the default 100 ms window);
    /// else the window.
    bank_window: Option<u64>,
    reserve: Option<(u64, u8)>,
    start: u64,
    ops: Vec<Op>,
}

// The exact models the property tests use (`tests/budget_model`): GCRA in
// u128 with the bucket's restart after a clock step and the time its bound
// allows grants for; the traffic-scaled cap restated naively.
#[path = "../../tests/budget_model/mod.rs"]
mod budget_model;

use budget_model::{BankModel, GcraModel, Paid, RatioModel};

fuzz_target!(|input: Input| {
    // Configurations: invalid ones must be rejected, never panic.
    let bucket = match input.bucket {
        BucketCfg::Rate(r, b) => TokenBucket::new(r, b.into()),
        BucketCfg::Share(s, r, b) => TokenBucket::from_share(s.into(), r, b.into()),
        BucketCfg::Interval(i, b) => TokenBucket::with_interval(i, b.into()),
    };
    let (share, tokens) = (u32::from(input.share_bps), u32::from(input.tokens));
    let ratio = match input.bank_window {
        None => RatioBudget::fixed_cap(share, tokens),
        Some(0) => RatioBudget::new(share, tokens),
        Some(w) => RatioBudget::with_bank_window(share, tokens, w),
    };
    let reserve = input
        .reserve
        .map(|(i, b)| TokenBucket::with_interval(i, b.into()));
    match (&input.bucket, &bucket) {
        (BucketCfg::Rate(r, b), Err(_)) => assert!(*r == 0 || *b == 0),
        (BucketCfg::Share(s, r, b), Err(_)) => {
            assert!(*s == 0 || *s > 10_000 || *r == 0 || *b == 0)
        }
        (BucketCfg::Interval(i, b), Err(_)) => {
            let window = i.checked_mul(u64::from(*b));
            assert!(*i == 0 || *b == 0 || window.is_none_or(|w| w > u64::MAX / 2))
        }
        _ => {}
    }
    assert_eq!(ratio.is_err(), share == 0 || share > 10_000 || tokens == 0);

    let mut bucket = bucket.ok();
    let mut bucket_model = bucket
        .as_ref()
        .map(|b| GcraModel::new(b.interval_ns(), b.burst()));
    // Whether the bucket was drained (then it never had a burst).
    let mut bucket_drained = false;
    let mut ratio = ratio.ok();
    let new_bank = |r: &RatioBudget| {
        BankModel::new(
            r.share_bps().into(),
            r.floor_units().into(),
            r.bank_window_ns(),
        )
    };
    if let Some(r) = &ratio {
        let w = input.bank_window.map(|w| {
            if w == 0 {
                RatioBudget::DEFAULT_BANK_WINDOW_NS
            } else {
                w
            }
        });
        assert_eq!(r.bank_window_ns(), w);
    }
    let mut model = ratio.as_ref().map(|r| RatioModel::new(new_bank(r), None));
    // (Taken only with a reserve to give it: a ratio budget without one
    // stays as it is.)
    if let (Some(Ok(res)), Some(m)) = (reserve, model.as_mut()) {
        m.reserve = Some(GcraModel::new(res.interval_ns(), res.burst()));
        ratio = ratio.take().map(|r| r.with_reserve(res));
    }
    // The configurations as built: a drained copy must keep them, and the
    // models after a drain are rebuilt from these, not from the copy.
    let bucket_cfg = bucket.as_ref().map(|b| (b.interval_ns(), b.burst()));
    let ratio_cfg = ratio.as_ref().map(|r| {
        (
            (r.share_bps(), r.floor_units(), r.bank_window_ns()),
            r.reserve().map(|res| (res.interval_ns(), res.burst())),
        )
    });
    let mut reserve_drained = false;
    let unit = u128::from(UNITS_PER_TOKEN);
    // Bounds hold from the start, over the span of acquire times (grants ≤
    // burst + span / interval), or from the latest drain, after which a
    // bucket has no burst to give, summed over the stretches between the
    // bucket's restarts (`GcraModel::within_bound`).
    let mut now = input.start;
    let (mut bucket_grants, mut ratio_grants, mut reserve_grants) = (0_u128, 0_u128, 0_u128);

    for op in &input.ops {
        match *op {
            Op::Request => {
                if let Some(b) = &bucket {
                    b.on_request(now);
                }
                if let (Some(r), Some(m)) = (&ratio, model.as_mut()) {
                    r.on_request(now);
                    m.deposit(now);
                }
            }
            Op::Acquire => {
                if let (Some(b), Some(m)) = (&bucket, bucket_model.as_mut()) {
                    let got = b.try_acquire(now);
                    assert_eq!(got, m.take(now));
                    bucket_grants += u128::from(got);
                }
                if let (Some(r), Some(m)) = (&ratio, model.as_mut()) {
                    let paid = m.take(now);
                    assert_eq!(r.try_acquire(now), paid != Paid::Refused);
                    ratio_grants += u128::from(paid != Paid::Refused);
                    reserve_grants += u128::from(paid == Paid::Reserve);
                }
            }
            Op::Drain => {
                bucket = bucket.map(|b| {
                    let d = b.drained(now);
                    assert_eq!(d.balance_at(now), 0);
                    assert_eq!(Some((d.interval_ns(), d.burst())), bucket_cfg);
                    d
                });
                bucket_model = bucket_cfg.map(|(i, b)| GcraModel::drained(i, b, now));
                bucket_drained = true;
                ratio = ratio.map(|r| r.drained(now));
                if let (Some(r), Some(((share, floor, window), res))) = (&ratio, ratio_cfg) {
                    let kept = (r.share_bps(), r.floor_units(), r.bank_window_ns());
                    assert_eq!(kept, (share, floor, window));
                    let kept_reserve = r.reserve().map(|x| (x.interval_ns(), x.burst()));
                    assert_eq!(kept_reserve, res);
                    let bank = BankModel::new(share.into(), floor.into(), window);
                    let reserve = res.map(|(i, b)| GcraModel::drained(i, b, now));
                    reserve_drained = true;
                    model = Some(RatioModel::new(bank, reserve));
                }
                (bucket_grants, ratio_grants, reserve_grants) = (0, 0, 0);
            }
            Op::Forward(d) => now = now.saturating_add(d.into()),
            Op::Back(d) => now = now.saturating_sub(d.into()),
            Op::Jump(d) => now = now.saturating_add(d),
            Op::Set(t) => now = t,
        }
        if let (Some(b), Some(m)) = (&bucket, &bucket_model) {
            assert!(m.within_bound(bucket_grants, !bucket_drained));
            assert!(b.balance_at(now) <= u64::from(b.burst()) * UNITS_PER_TOKEN);
            assert_eq!(u128::from(b.stats().grants), bucket_grants);
        }
        if let (Some(r), Some(m)) = (&ratio, &model) {
            let cap = m.bank.cap_at(now);
            assert_eq!(u128::from(r.cap_units_at(now)), cap);
            assert_eq!(u128::from(r.balance_at(now)), m.balance(now));
            let earned = m.bank.deposits * m.bank.share;
            // The cap counts real deposits only.
            assert!(cap <= m.bank.floor.max(earned));
            assert!((ratio_grants - reserve_grants) * unit <= earned);
            assert_eq!(u128::from(r.stats().grants), ratio_grants);
            if let Some(res) = r.reserve() {
                assert_eq!(u128::from(res.stats().grants), reserve_grants);
                assert!(m
                    .reserve
                    .as_ref()
                    .is_some_and(|g| g.within_bound(reserve_grants, !reserve_drained)));
            }
        }
    }
});
