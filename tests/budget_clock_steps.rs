//! Budgets whose clock steps: a timestamp far ahead of the others (one
//! wall-clock reading mixed into monotonic ones, an `u64::MAX`), or a clock
//! stepped back for good. Neither may freeze a budget: it survives the
//! step, and grants again at its nominal rate soon after (the
//! token bucket: within `TokenBucket::STALE_RUN` asks and one interval).

use proptest::prelude::*;
use tailguard::budget::{HedgeBudget, RatioBudget, TokenBucket};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
/// A monotonic clock's reading after ~2.8 hours of uptime.
const UPTIME: u64 = 10_000 * SEC;
/// A wall-clock reading (2023) mixed into the monotonic ones.
const WALL: u64 = 1_700_000_000 * SEC;

/// What happens to the clock once the bucket is busy.
#[derive(Clone, Copy, Debug)]
enum Disturbance {
    /// One ask at this timestamp; the clock then carries on where it was.
    Once(u64),
    /// The clock steps back this far, and stays there.
    Back(u64),
}

/// Asks every `gap` ns from `UPTIME` for `before` asks, then the
/// disturbance, then asks every `gap` ns on the clock after it. Returns
/// the number of asks after the disturbance until the first grant, and the
/// grants of the `after` asks that follow that first one.
fn drive(bucket: &TokenBucket, gap: u64, before: u64, d: Disturbance, after: u64) -> (u64, u64) {
    let mut now = UPTIME;
    for _ in 0..before {
        let _ = bucket.try_acquire(now);
        now += gap;
    }
    match d {
        Disturbance::Once(t) => {
            let _ = bucket.try_acquire(t);
        }
        Disturbance::Back(by) => now -= by,
    }
    let mut asks = 0;
    loop {
        asks += 1;
        let granted = bucket.try_acquire(now);
        now += gap;
        if granted {
            break;
        }
        assert!(asks < 1_000_000, "no grant in a million asks after {d:?}");
    }
    let grants = (0..after)
        .filter(|_| {
            let granted = bucket.try_acquire(now);
            now += gap;
            granted
        })
        .count() as u64;
    (asks, grants)
}

/// Asks, one every `gap`, that the documented recovery allows before the
/// first grant after a step far past the bucket's time: `STALE_RUN`
/// refused as stale, then one interval's worth after the bucket restarts
/// empty (and one for rounding).
fn recovery_asks(bucket: &TokenBucket, gap: u64) -> u64 {
    u64::from(TokenBucket::STALE_RUN) + bucket.interval_ns().div_ceil(gap) + 1
}

/// The same for any step: a step back by less than the window and
/// [`TokenBucket::STALE_AFTER_NS`] is waited out, which takes at most that
/// second (and an interval) of the clock's time.
fn any_recovery_asks(bucket: &TokenBucket, gap: u64) -> u64 {
    recovery_asks(bucket, gap) + TokenBucket::STALE_AFTER_NS.div_ceil(gap)
}

#[test]
fn a_bucket_recovers_from_a_timestamp_far_ahead_and_from_a_clock_stepped_back() {
    let buckets = [
        (TokenBucket::new(20, 5).unwrap(), 10 * MS),
        (TokenBucket::new(1_000, 20).unwrap(), 250_000),
        (TokenBucket::with_interval(60 * SEC, 1).unwrap(), 15 * SEC),
        (TokenBucket::new(1_000_000, 1).unwrap(), 500),
    ];
    for (make, gap) in buckets {
        let window = make.interval_ns() * u64::from(make.burst());
        let disturbances = [
            Disturbance::Once(WALL),
            Disturbance::Once(u64::MAX - window),
            Disturbance::Once(u64::MAX),
            Disturbance::Back(3_600 * SEC),
            Disturbance::Back(window + 2 * SEC),
        ];
        for d in disturbances {
            let bucket = make.drained(0);
            let (asks, grants) = drive(&bucket, gap, 400, d, 400);
            let label = format!(
                "interval {} ns, burst {}, {d:?}",
                bucket.interval_ns(),
                bucket.burst()
            );
            assert!(
                asks <= recovery_asks(&bucket, gap),
                "{label}: first grant after {asks} asks (allowed {})",
                recovery_asks(&bucket, gap)
            );
            // Then the nominal rate: one token an interval, the asks
            // spanning 400 gaps (a bucket restarted empty has no burst).
            let nominal = 400 * gap / bucket.interval_ns();
            assert!(
                grants.abs_diff(nominal) <= 1,
                "{label}: {grants} grants where the rate gives {nominal}"
            );
        }
    }
}

/// A step back shorter than the bucket's window and a second is no clock
/// step: the bucket waits for the clock to catch up (nothing granted
/// twice), as it always did.
#[test]
fn a_short_step_back_is_waited_out_not_restarted() {
    let bucket = TokenBucket::new(20, 5).unwrap(); // 50 ms a token, 250 ms window
    let mut now = UPTIME;
    // Spend the burst and keep it spent.
    for _ in 0..100 {
        let _ = bucket.try_acquire(now);
        now += 10 * MS;
    }
    let spent_until = now;
    // 900 ms back: within window + 1 s. Every ask is refused until the
    // clock is back where the bucket's time was, however many there are.
    now -= 900 * MS;
    while now + 50 * MS < spent_until {
        assert!(
            !bucket.try_acquire(now),
            "granted at {now}, {} ns before",
            spent_until - now
        );
        now += MS;
    }
}

#[test]
fn the_ratio_budget_survives_the_same_steps() {
    for d in [
        Disturbance::Once(WALL),
        Disturbance::Once(u64::MAX),
        Disturbance::Back(3_600 * SEC),
    ] {
        let budget = RatioBudget::default(); // 15 %
        let mut now = UPTIME;
        let ask = |now: u64, i: u64| {
            budget.on_request(now);
            i.is_multiple_of(10) && budget.try_acquire(now)
        };
        for i in 0..20_000 {
            let _ = ask(now, i);
            now += MS;
        }
        match d {
            Disturbance::Once(t) => {
                let _ = ask(t, 0);
            }
            Disturbance::Back(by) => now -= by,
        }
        let grants = (0..20_000)
            .filter(|&i| {
                let granted = ask(now, i);
                now += MS;
                granted
            })
            .count();
        // One ask in ten, 15 % earned: every ask is granted.
        assert_eq!(grants, 2_000, "{d:?}");
    }
}

fn bucket() -> impl Strategy<Value = TokenBucket> {
    prop_oneof![
        // 1 ms to 100 s a token (windows shorter than the uptime; waiting
        // out a second takes at most 8 000 asks).
        (1..1_000_u32, 1..50_u32).prop_map(|(r, b)| TokenBucket::new(r, b).unwrap()),
        (MS..100 * SEC, 1..20_u32).prop_map(|(i, b)| TokenBucket::with_interval(i, b).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    /// Whatever the bucket, the traffic and the step: the first grant
    /// comes within `STALE_RUN` asks, a second of the clock and one
    /// interval; after it the bucket grants at least its nominal rate, and
    /// never more than its bound.
    #[test]
    fn every_bucket_recovers_from_any_step(
        make in bucket(),
        asks_per_interval in 1..8_u64,
        before in 0..200_u64,
        back in any::<bool>(),
        far in any::<u64>(),
    ) {
        let gap = (make.interval_ns() / asks_per_interval).max(1);
        let d = if back {
            Disturbance::Back(far % UPTIME)
        } else {
            Disturbance::Once(far)
        };
        let bucket = make.drained(0);
        let (asks, grants) = drive(&bucket, gap, before, d, 64);
        let allowed = any_recovery_asks(&bucket, gap);
        prop_assert!(asks <= allowed, "{} asks (allowed {})", asks, allowed);
        // Asks come every `gap`: a token an interval is taken at the first
        // ask after it, every ⌈interval / gap⌉ asks at worst.
        let slowest = 64 / bucket.interval_ns().div_ceil(gap);
        prop_assert!(grants + 1 >= slowest, "{} grants, at least {}", grants, slowest);
        let nominal = 64 * gap / bucket.interval_ns();
        prop_assert!(grants <= nominal + u64::from(bucket.burst()), "{} grants, nominal {}", grants, nominal);
    }

    /// Bulk deposits are single ones in a row, whatever the clock does
    /// (zero included): the same cap, balance and decisions.
    #[test]
    fn bulk_deposits_are_single_ones(
        share in 1..=10_000_u32,
        floor in 1..20_u32,
        window in 1..10 * SEC,
        steps in prop::collection::vec((0..40_u32, -(2 * SEC as i64)..2 * SEC as i64, any::<bool>()), 0..200),
    ) {
        let bulk = RatioBudget::with_bank_window(share, floor, window).unwrap();
        let single = RatioBudget::with_bank_window(share, floor, window).unwrap();
        let mut now = UPTIME;
        for (n, step, ask) in steps {
            now = now.saturating_add_signed(step);
            bulk.on_requests(now, n);
            for _ in 0..n {
                single.on_request(now);
            }
            prop_assert_eq!(bulk.cap_units_at(now), single.cap_units_at(now));
            prop_assert_eq!(bulk.balance_at(now), single.balance_at(now));
            if ask {
                prop_assert_eq!(bulk.try_acquire(now), single.try_acquire(now));
            }
        }
    }
}

/// `on_requests(now, n)` is `n` calls of `on_request(now)`: with `n = 0`,
/// none, whatever `now` (a lane flushing an empty count at a stale time
/// once drained a ratio budget's bank to its floor).
#[test]
fn depositing_no_requests_changes_nothing() {
    // A one-second bank, so that the 2 000 deposits below all count.
    let bank = || RatioBudget::with_bank_window(1_500, 10, SEC).unwrap();
    let (a, b) = (bank(), bank());
    for i in 0..2_000_u64 {
        a.on_request(5 * SEC + i * 400_000);
        b.on_request(5 * SEC + i * 400_000);
    }
    let now = 5 * SEC + 900 * MS;
    assert_eq!(b.balance_at(now), 300 * tailguard::budget::UNITS_PER_TOKEN);
    for stale in [0, 3 * SEC, now, u64::MAX] {
        a.on_requests(stale, 0);
        assert_eq!(a.balance_at(now), b.balance_at(now), "after 0 at {stale}");
        assert_eq!(
            a.cap_units_at(now),
            b.cap_units_at(now),
            "after 0 at {stale}"
        );
    }
}
