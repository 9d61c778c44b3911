//! Multi-threaded stress: several threads share one budget and one
//! controlled clock (an `AtomicU64` the test advances). Bounded in
//! iterations, well under a second in debug builds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use tailguard::budget::{Budget, HedgeBudget, RatioBudget, TokenBucket, UNITS_PER_TOKEN};

const THREADS: usize = 4;

/// `n` iterations, or a hundredth of them under miri (which interprets
/// every atomic operation and checks it for data races).
const fn iters(n: u64) -> u64 {
    if cfg!(miri) {
        n / 100
    } else {
        n
    }
}

/// Runs `f(thread_index)` on `THREADS` threads and sums the results.
fn on_threads(f: impl Fn(usize) -> u64 + Sync) -> u64 {
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                s.spawn({
                    let f = &f;
                    move || f(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .sum()
    })
}

#[test]
fn bucket_grants_exactly_burst_then_exactly_refill() {
    // Frozen clock: exactly `burst` grants however the threads interleave;
    // then each step of k intervals grants exactly k more.
    let burst = 64;
    let bucket = TokenBucket::new(1_000, burst).expect("valid"); // 1 ms per token
    let t0 = 5_000_000_000_u64;
    let got = on_threads(|_| {
        (0..iters(10_000))
            .filter(|_| bucket.try_acquire(t0))
            .count() as u64
    });
    assert_eq!(got, u64::from(burst));
    let mut now = t0;
    for k in [1_u64, 7, 64, 3] {
        now += k * bucket.interval_ns();
        let got = on_threads(|_| {
            (0..iters(2_000))
                .filter(|_| bucket.try_acquire(now))
                .count() as u64
        });
        assert_eq!(got, k, "after {k} intervals");
    }
    let s = bucket.stats();
    assert_eq!(s.grants, 64 + 1 + 7 + 64 + 3);
    assert_eq!(
        s.grants + s.denials,
        (THREADS as u64) * (iters(10_000) + 4 * iters(2_000))
    );
}

#[test]
fn bucket_bound_holds_with_a_moving_clock() {
    // Thread 0 drives the clock (sometimes backwards); the others race.
    let bucket = TokenBucket::from_share(1_000, 10_000, 20).expect("valid"); // 1 000 per s
    let clock = AtomicU64::new(1_000_000_000_000);
    let (t_min, t_max) = (AtomicU64::new(u64::MAX), AtomicU64::new(0));
    let done = AtomicBool::new(false);
    let grants = on_threads(|i| {
        let mut mine = 0;
        for n in 0..iters(50_000) {
            if i == 0 {
                if n.is_multiple_of(97) {
                    clock.fetch_sub(3_000_000, Ordering::SeqCst); // a backwards step
                } else {
                    clock.fetch_add(100_000, Ordering::SeqCst);
                }
            } else if done.load(Ordering::Relaxed) {
                break;
            }
            let now = clock.load(Ordering::SeqCst);
            t_min.fetch_min(now, Ordering::Relaxed);
            t_max.fetch_max(now, Ordering::Relaxed);
            mine += u64::from(bucket.try_acquire(now));
        }
        if i == 0 {
            done.store(true, Ordering::Relaxed);
        }
        mine
    });
    let elapsed = u128::from(t_max.into_inner() - t_min.into_inner());
    // grants ≤ burst + elapsed × rps × share / (10⁹ × 10⁴), exactly.
    let extra = u128::from(grants.saturating_sub(20));
    assert!(
        extra * 1_000_000_000 * 10_000 <= elapsed * 10_000 * 1_000,
        "{grants} grants in {elapsed} ns"
    );
    assert_eq!(bucket.stats().grants, grants);
    // The clock moved ~4.9 s forward (49 ms under miri): far more than the
    // burst was granted.
    assert!(grants > if cfg!(miri) { 20 } else { 1_000 }, "{grants}");
}

#[test]
fn ratio_loses_no_deposit() {
    let share = 37; // an awkward share: 0.37 %
    let budget = RatioBudget::fixed_cap(share, u32::MAX).expect("valid");
    let per_thread = iters(50_000);
    on_threads(|_| {
        for _ in 0..per_thread {
            budget.on_request(0);
        }
        0
    });
    let expected = THREADS as u64 * per_thread * u64::from(share);
    assert_eq!(budget.balance(), expected);

    // Now drain from all threads: exactly balance / unit grants.
    let grants =
        on_threads(|_| (0..iters(20_000)).filter(|_| budget.try_acquire(0)).count() as u64);
    assert_eq!(grants, expected / UNITS_PER_TOKEN);
    assert_eq!(budget.balance(), expected % UNITS_PER_TOKEN);
}

#[test]
fn ratio_cap_is_exact_under_contention() {
    let budget = RatioBudget::fixed_cap(3_333, 7).expect("valid");
    on_threads(|_| {
        for _ in 0..iters(10_000) {
            budget.on_request(0);
        }
        0
    });
    assert_eq!(budget.balance(), 7 * UNITS_PER_TOKEN);
}

#[test]
fn ratio_mixed_deposits_and_hedges_conserve_units() {
    // Cap never reached: balance + grants × unit == deposits × share, exactly,
    // and no thread ever overdraws (grants × unit ≤ deposits × share).
    let share = 1_000;
    let budget = Budget::Ratio(RatioBudget::fixed_cap(share, u32::MAX).expect("valid"));
    let dynb: &dyn HedgeBudget = &budget;
    let deposits = AtomicU64::new(0);
    let start = Barrier::new(THREADS);
    let grants = on_threads(|i| {
        start.wait();
        let mut mine = 0;
        for n in 0..iters(40_000) {
            if !(n + i as u64).is_multiple_of(3) {
                dynb.on_request(n);
                deposits.fetch_add(1, Ordering::Relaxed);
            } else {
                mine += u64::from(dynb.try_acquire(n));
            }
        }
        mine
    });
    let s = dynb.stats();
    let deposited = deposits.into_inner() * u64::from(share);
    assert_eq!(s.grants, grants);
    assert_eq!(s.balance + grants * UNITS_PER_TOKEN, deposited);
    assert!(grants * UNITS_PER_TOKEN <= deposited);
    assert!(s.denials > 0 && grants > 0);
}

#[test]
fn ratio_reserve_bound_across_threads() {
    // No traffic at all: only the reserve (1 per 10 ms, burst 2) grants.
    let reserve = TokenBucket::with_interval(10_000_000, 2).expect("valid");
    let budget = RatioBudget::fixed_cap(1_000, 10)
        .expect("valid")
        .with_reserve(reserve);
    let clock = AtomicU64::new(0);
    let grants = on_threads(|i| {
        let mut mine = 0;
        for _ in 0..iters(20_000) {
            if i == 0 {
                clock.fetch_add(1_000, Ordering::SeqCst);
            }
            mine += u64::from(budget.try_acquire(clock.load(Ordering::SeqCst)));
        }
        mine
    });
    let t_max = clock.into_inner();
    assert!(
        grants <= 2 + t_max / 10_000_000,
        "{grants} grants in {t_max} ns"
    );
    assert!(grants >= 2);
}

#[test]
fn scaled_ratio_counts_every_deposit_under_contention() {
    // One window: the cap is exactly the share of all deposits (the window
    // counter loses none), and the balance never exceeds it.
    let share = 10_000;
    let budget = RatioBudget::new(share, 1).expect("valid");
    let per_thread = iters(50_000);
    on_threads(|i| {
        for n in 0..per_thread {
            budget.on_request(n * THREADS as u64 + i as u64); // within 1 s
        }
        0
    });
    let total = THREADS as u64 * per_thread;
    assert_eq!(budget.cap_units_at(0), total * u64::from(share));
    assert!(budget.balance() <= total * u64::from(share));
    // With a floor above every count, nothing is clipped: exact balance.
    let budget = RatioBudget::new(37, u32::MAX).expect("valid");
    on_threads(|i| {
        for n in 0..per_thread {
            budget.on_request(n * 1_000_003 + i as u64); // many windows
        }
        0
    });
    assert_eq!(budget.balance(), total * 37);
}

#[test]
fn scaled_ratio_banks_a_window_and_spends_it_exactly() {
    // Four threads send 1 000 requests each within one second at 15 %,
    // into a one-second bank: it holds far more than the floor of 10, and
    // a burst of hedges from all threads at once gets exactly what the
    // balance holds.
    let budget = RatioBudget::with_bank_window(1_500, 10, 1_000_000_000).expect("valid");
    let per_thread = iters(1_000);
    let t0 = 7_000_000_000_u64;
    on_threads(|i| {
        for n in 0..per_thread {
            budget.on_request(t0 + n * 100_000 + i as u64);
        }
        0
    });
    let banked = budget.balance();
    let earned = THREADS as u64 * per_thread * 1_500;
    assert!(banked <= earned);
    if !cfg!(miri) {
        assert!(banked >= 500 * UNITS_PER_TOKEN, "{banked}");
    }
    let now = t0 + 500_000_000;
    let grants = on_threads(|_| (0..per_thread).filter(|_| budget.try_acquire(now)).count() as u64);
    assert_eq!(grants, banked / UNITS_PER_TOKEN);
    assert_eq!(budget.stats().grants, grants);
}

#[test]
fn scaled_ratio_bound_with_a_wild_clock() {
    // Thread 0 drives the clock forward 50 µs a step, sometimes a second
    // back, once to the far future and back; all threads deposit and hedge.
    // The balance never pays for more than the share of the deposits, and
    // never holds more than the share of all deposits (or the floor).
    let share = 1_500;
    let budget = Budget::Ratio(RatioBudget::new(share, 10).expect("valid"));
    let dynb: &dyn HedgeBudget = &budget;
    let clock = AtomicU64::new(1_000_000_000_000);
    let deposits = AtomicU64::new(0);
    let start = Barrier::new(THREADS);
    let n = iters(40_000);
    let grants = on_threads(|i| {
        start.wait();
        let mut mine = 0;
        for k in 0..n {
            if i == 0 {
                if k == n / 2 {
                    clock.fetch_add(1 << 62, Ordering::SeqCst); // far ahead...
                } else if k == n / 2 + 100 {
                    clock.fetch_sub(1 << 62, Ordering::SeqCst); // ...and back
                } else if k.is_multiple_of(5_000) {
                    clock.fetch_sub(1_000_000_000, Ordering::SeqCst);
                } else {
                    clock.fetch_add(50_000, Ordering::SeqCst);
                }
            }
            let now = clock.load(Ordering::SeqCst);
            if (k + i as u64).is_multiple_of(4) {
                mine += u64::from(dynb.try_acquire(now));
            } else {
                dynb.on_request(now);
                deposits.fetch_add(1, Ordering::Relaxed);
            }
        }
        mine
    });
    let s = dynb.stats();
    let earned = deposits.into_inner() * u64::from(share);
    assert_eq!(s.grants, grants);
    assert!(grants * UNITS_PER_TOKEN + s.balance <= earned);
    assert!(s.balance <= earned.max(10 * UNITS_PER_TOKEN));
    // Traffic of ~60 000 requests a second (or 600 under miri) at 15 %
    // earns far more than the floor in every window: hedges flowed.
    assert!(grants > if cfg!(miri) { 10 } else { 1_000 }, "{grants}");
}
