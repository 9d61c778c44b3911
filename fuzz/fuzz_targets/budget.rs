//! Differential fuzzing of the hedge budgets against naive u128 models,
//! over arbitrary configurations, operation sequences and timestamps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket, UNITS_PER_TOKEN};

#[derive(arbitrary::Arbitrary, Debug)]
enum Op {
    Request,
    Acquire,
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
    max_tokens: u8,
    reserve: Option<(u64, u8)>,
    start: u64,
    ops: Vec<Op>,
}

struct Gcra {
    tat: u128,
    interval: u128,
    burst: u128,
}

impl Gcra {
    fn take(&mut self, now: u64) -> bool {
        let now = u128::from(now);
        let limit = (now + self.burst * self.interval).min(u128::from(u64::MAX));
        let next = self.tat.max(now) + self.interval;
        let ok = next <= limit;
        if ok {
            self.tat = next;
        }
        ok
    }
}

fuzz_target!(|input: Input| {
    // Configurations: invalid ones must be rejected, never panic.
    let bucket = match input.bucket {
        BucketCfg::Rate(r, b) => TokenBucket::new(r, b.into()),
        BucketCfg::Share(s, r, b) => TokenBucket::from_share(s.into(), r, b.into()),
        BucketCfg::Interval(i, b) => TokenBucket::with_interval(i, b.into()),
    };
    let ratio = RatioBudget::fixed_cap(input.share_bps.into(), input.max_tokens.into());
    let reserve = input.reserve.map(|(i, b)| TokenBucket::with_interval(i, b.into()));
    match (&input.bucket, &bucket) {
        (BucketCfg::Rate(r, b), Err(_)) => assert!(*r == 0 || *b == 0),
        (BucketCfg::Share(s, r, b), Err(_)) => {
            assert!(*s == 0 || *s > 10_000 || *r == 0 || *b == 0)
        }
        (BucketCfg::Interval(i, b), Err(_)) => {
            assert!(*i == 0 || *b == 0 || i.checked_mul(u64::from(*b)).is_none())
        }
        _ => {}
    }
    let (s, m) = (input.share_bps, input.max_tokens);
    assert_eq!(ratio.is_err(), s == 0 || s > 10_000 || m == 0);

    let mut bucket_model = bucket.as_ref().ok().map(|b| Gcra {
        tat: 0,
        interval: b.interval_ns().into(),
        burst: b.burst().into(),
    });
    let mut ratio = ratio.ok();
    let mut reserve_model = None;
    if let (Some(r), Some(Ok(res))) = (ratio.take(), reserve) {
        reserve_model = Some(Gcra {
            tat: 0,
            interval: res.interval_ns().into(),
            burst: res.burst().into(),
        });
        ratio = Some(r.with_reserve(res));
    }
    let unit = u128::from(UNITS_PER_TOKEN);
    let (mut now, mut lo, mut hi) = (input.start, u64::MAX, 0_u64);
    let (mut balance, mut deposits, mut bucket_grants, mut ratio_grants) = (0_u128, 0_u128, 0_u128, 0_u128);

    for op in &input.ops {
        match *op {
            Op::Request => {
                if let Ok(b) = &bucket {
                    b.on_request(now);
                }
                if let Some(r) = &ratio {
                    r.on_request(now);
                    deposits += 1;
                    balance = (balance + u128::from(r.share_bps())).min(u128::from(r.floor_units()));
                }
            }
            Op::Acquire => {
                lo = lo.min(now);
                hi = hi.max(now);
                if let (Ok(b), Some(m)) = (&bucket, bucket_model.as_mut()) {
                    let got = b.try_acquire(now);
                    assert_eq!(got, m.take(now));
                    bucket_grants += u128::from(got);
                }
                if let Some(r) = &ratio {
                    let expect = if balance >= unit {
                        balance -= unit;
                        true
                    } else {
                        reserve_model.as_mut().is_some_and(|m| m.take(now))
                    };
                    assert_eq!(r.try_acquire(now), expect);
                    ratio_grants += u128::from(expect);
                }
            }
            Op::Forward(d) => now = now.saturating_add(d.into()),
            Op::Back(d) => now = now.saturating_sub(d.into()),
            Op::Jump(d) => now = now.saturating_add(d),
            Op::Set(t) => now = t,
        }
        let elapsed = u128::from(hi.saturating_sub(lo));
        if let Ok(b) = &bucket {
            // grants ≤ burst + elapsed / interval
            let extra = bucket_grants.saturating_sub(b.burst().into());
            assert!(extra * u128::from(b.interval_ns()) <= elapsed);
            assert!(b.balance_at(now) <= u64::from(b.burst()) * UNITS_PER_TOKEN);
            assert_eq!(u128::from(b.stats().grants), bucket_grants);
        }
        if let Some(r) = &ratio {
            assert_eq!(u128::from(r.balance()), balance);
            let earned = deposits * u128::from(r.share_bps());
            match r.reserve() {
                None => assert!(ratio_grants * unit <= earned),
                Some(res) => {
                    let i = u128::from(res.interval_ns());
                    let extra = (ratio_grants * unit).saturating_sub(earned + u128::from(res.burst()) * unit);
                    assert!(extra * i <= elapsed * unit);
                }
            }
            assert_eq!(u128::from(r.stats().grants), ratio_grants);
        }
    }
});
