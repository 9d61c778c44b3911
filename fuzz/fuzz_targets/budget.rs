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
    /// `None`: `fixed_cap`; `Some(0)`: `new` (1 s window); else the window.
    bank_window: Option<u64>,
    reserve: Option<(u64, u8)>,
    start: u64,
    ops: Vec<Op>,
}

/// GCRA in u128, with the bucket's restart after a clock step: a refused
/// ask more than the window and `STALE_AFTER_NS` behind TAT is stale, and
/// `STALE_RUN` of them in a row (TAT unchanged, as the bucket folds it; no
/// other refusal between) restart it empty at the last one. It also keeps
/// the time its bound allows grants for: the acquire span of each stretch
/// between restarts (from the restart or drain that began it).
struct Gcra {
    tat: u128,
    interval: u128,
    burst: u128,
    run: u32,
    /// TAT folded as the bucket folds it (a run counts against one TAT).
    stale_of: u32,
    spent: u128,
    stretch: Option<(u64, u64)>,
    from_restart: bool,
    /// Whether the bucket was ever drained (then it never had a burst).
    drained: bool,
}

impl Gcra {
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
            drained: false,
        }
    }

    fn window(&self) -> u128 {
        self.burst * self.interval
    }

    fn span(&self) -> u128 {
        self.stretch.map_or(0, |(lo, hi)| u128::from(hi - lo))
    }

    fn restart(&mut self, at: u64) {
        self.spent += self.span();
        self.tat = (u128::from(at) + self.window()).min(u128::from(u64::MAX));
        self.run = 0;
        self.stretch = Some((at, at));
        self.from_restart = true;
    }

    fn take(&mut self, now: u64) -> bool {
        self.stretch = Some(match self.stretch {
            None => (now, now),
            Some((lo, hi)) if self.from_restart => (lo, hi.max(now)),
            Some((lo, hi)) => (lo.min(now), hi.max(now)),
        });
        let t = u128::from(now);
        let limit = (t + self.window()).min(u128::from(u64::MAX));
        let next = self.tat.max(t) + self.interval;
        if next <= limit {
            self.tat = next;
            return true;
        }
        if t + self.window() + u128::from(TokenBucket::STALE_AFTER_NS) >= self.tat {
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

    /// The drained state: empty at `now`, no burst, a fresh count.
    fn drain(&mut self, now: u64) {
        *self = Self {
            drained: true,
            ..Self::new(self.interval as u64, self.burst as u32)
        };
        self.restart(now);
        self.spent = 0;
    }

    /// grants ≤ burst (never drained) + time / interval.
    fn bound(&self, grants: u128) -> bool {
        let burst = if self.drained { 0 } else { self.burst };
        grants.saturating_sub(burst) * self.interval <= self.spent + self.span()
    }
}

/// The ratio budget's cap: fixed, or max(floor, share × max(n_k, n_(k−1)))
/// where a window's count runs from its mark (the window number's low 32
/// bits and the deposit count before its first deposit) to the next
/// window's mark, or to now; a time at most `LATE_WINDOWS` windows before
/// the newest window (a late stamp) counts in the newest.
struct Bank {
    share: u128,
    floor: u128,
    window: Option<u64>,
    deposits: u128,
    marks: [(u32, u128); 2],
    /// The window of the latest deposit that marked, or found marked, its
    /// own window.
    newest: u64,
    /// Late stamps since `newest` was set.
    late: u128,
}

impl Bank {
    fn window_of(&self, now: u64, w: u64) -> u64 {
        let own = now / w;
        if own < self.newest && self.newest - own <= RatioBudget::LATE_WINDOWS {
            self.newest
        } else {
            own
        }
    }

    fn count(from: u128, to: u128) -> u128 {
        to.saturating_sub(from)
    }

    fn cap_at(&self, now: u64) -> u128 {
        let Some(w) = self.window else {
            return self.floor;
        };
        let k = self.window_of(now, w);
        let (tag, i) = (k as u32, (k % 2) as usize);
        let (mine, other) = (self.marks[i], self.marks[1 - i]);
        let here = (mine.0 == tag).then_some(mine.1);
        let d = self.deposits;
        let n = if other.0 == tag.wrapping_sub(1) {
            Self::count(other.1, here.unwrap_or(d)).max(here.map_or(0, |h| Self::count(h, d)))
        } else if other.0 == tag.wrapping_add(1) {
            here.map_or(0, |h| Self::count(h, other.1))
        } else {
            here.map_or(0, |h| Self::count(h, d))
        };
        self.floor.max(self.share * n)
    }

    /// Counts a deposit: whether it marked its window.
    fn deposit(&mut self, now: u64) -> bool {
        let mut marked = false;
        if let Some(w) = self.window {
            let own = now / w;
            let mut counts_in_newest = own == self.newest;
            if !counts_in_newest && self.window_of(now, w) == self.newest {
                // A late stamp, unless more than 64 of them are now most
                // of the newest window's deposits.
                self.late += 1;
                let i = (self.newest % 2) as usize;
                // From the newest window's slot, whatever window wrote it.
                let n = self.deposits + 1 - self.marks[i].1;
                counts_in_newest = self.late <= 64 || 2 * self.late <= n;
            }
            if !counts_in_newest {
                self.newest = own;
                self.late = 0;
                let (tag, i) = (own as u32, (own % 2) as usize);
                if self.marks[i].0 != tag {
                    self.marks[i] = (tag, self.deposits);
                    marked = true;
                }
            }
        }
        self.deposits += 1;
        marked
    }
}

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
        .map(|b| Gcra::new(b.interval_ns(), b.burst()));
    let mut ratio = ratio.ok();
    let mut bank = ratio.as_ref().map(|r| Bank {
        share: r.share_bps().into(),
        floor: r.floor_units().into(),
        window: r.bank_window_ns(),
        deposits: 0,
        marks: [(0, 0); 2],
        newest: 0,
        late: 0,
    });
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
    let mut reserve_model = None;
    if let (Some(r), Some(Ok(res))) = (ratio.take(), reserve) {
        reserve_model = Some(Gcra::new(res.interval_ns(), res.burst()));
        ratio = Some(r.with_reserve(res));
    }
    let unit = u128::from(UNITS_PER_TOKEN);
    // Bounds hold from the start, over the span of acquire times (grants ≤
    // burst + span / interval), or from the latest drain, after which a
    // bucket has no burst to give, summed over the stretches between the
    // bucket's restarts (`Gcra::bound`).
    let mut now = input.start;
    // The ratio budget's earnings not consumed by grants or by the cap.
    let (mut unspent, mut deposits, mut bucket_grants, mut ratio_grants, mut reserve_grants) =
        (0_u128, 0_u128, 0_u128, 0_u128, 0_u128);

    for op in &input.ops {
        match *op {
            Op::Request => {
                if let Some(b) = &bucket {
                    b.on_request(now);
                }
                if let (Some(r), Some(m)) = (&ratio, bank.as_mut()) {
                    r.on_request(now);
                    deposits += 1;
                    unspent += m.share;
                    if m.deposit(now) {
                        // A window's first deposit gives up what the cap holds back.
                        unspent = unspent.min(m.cap_at(now));
                    }
                }
            }
            Op::Acquire => {
                if let (Some(b), Some(m)) = (&bucket, bucket_model.as_mut()) {
                    let got = b.try_acquire(now);
                    assert_eq!(got, m.take(now));
                    bucket_grants += u128::from(got);
                }
                if let (Some(r), Some(m)) = (&ratio, &bank) {
                    let balance = unspent.min(m.cap_at(now));
                    let expect = if balance >= unit {
                        unspent = balance - unit;
                        true
                    } else if reserve_model.as_mut().is_some_and(|m| m.take(now)) {
                        reserve_grants += 1;
                        true
                    } else {
                        false
                    };
                    assert_eq!(r.try_acquire(now), expect);
                    ratio_grants += u128::from(expect);
                }
            }
            Op::Drain => {
                bucket = bucket.map(|b| {
                    let d = b.drained(now);
                    assert_eq!(d.balance_at(now), 0);
                    d
                });
                if let Some(m) = bucket_model.as_mut() {
                    m.drain(now);
                }
                ratio = ratio.map(|r| r.drained(now));
                if let Some(m) = bank.as_mut() {
                    (m.deposits, m.marks, m.newest, m.late) = (0, [(0, 0); 2], 0, 0);
                }
                if let Some(m) = reserve_model.as_mut() {
                    m.drain(now);
                }
                (
                    unspent,
                    deposits,
                    bucket_grants,
                    ratio_grants,
                    reserve_grants,
                ) = (0, 0, 0, 0, 0);
            }
            Op::Forward(d) => now = now.saturating_add(d.into()),
            Op::Back(d) => now = now.saturating_sub(d.into()),
            Op::Jump(d) => now = now.saturating_add(d),
            Op::Set(t) => now = t,
        }
        if let (Some(b), Some(m)) = (&bucket, &bucket_model) {
            assert!(m.bound(bucket_grants));
            assert!(b.balance_at(now) <= u64::from(b.burst()) * UNITS_PER_TOKEN);
            assert_eq!(u128::from(b.stats().grants), bucket_grants);
        }
        if let (Some(r), Some(m)) = (&ratio, &bank) {
            let cap = m.cap_at(now);
            assert_eq!(u128::from(r.cap_units_at(now)), cap);
            assert_eq!(u128::from(r.balance_at(now)), unspent.min(cap));
            let earned = deposits * m.share;
            // The cap counts real deposits only.
            assert!(cap <= m.floor.max(earned));
            assert!((ratio_grants - reserve_grants) * unit <= earned);
            assert_eq!(u128::from(r.stats().grants), ratio_grants);
            if let Some(res) = r.reserve() {
                assert_eq!(u128::from(res.stats().grants), reserve_grants);
                assert!(reserve_model
                    .as_ref()
                    .is_some_and(|m| m.bound(reserve_grants)));
            }
        }
    }
});
