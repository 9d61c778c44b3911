//! Audit of `SharedHedger` under the clocks and traffic real clients give
//! it: clocks read apart, stepped back, jumped ahead, at the ends of
//! `u64`; very low rates, bursts, a backend that slows down tenfold and
//! recovers. Every timestamp is explicit: nothing here depends on timing.

use proptest::prelude::*;
use std::sync::atomic::Ordering::Relaxed;
use tailguard::budget::Budget;
use tailguard::hedge::{
    Attempt, CommitOutcome, HedgeConfig, Idempotency, NoHedge, Plan, SharedHedger, TimerAction,
};
use tailguard::window::{LatencyWindow, Rotation};
use tailguard::CubicMapping;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const MIN: u64 = 60 * SEC;
const HOUR: u64 = 60 * MIN;

/// One request started at `t` whose primary answers after `latency` and
/// whose hedge (if the hedger releases one when its timer fires) answers
/// after `hedge_latency`; the first answer commits. Returns the hedger's
/// delay for the request, if it hedged on a timer.
fn request<const T: usize>(
    h: &SharedHedger<Budget, T>,
    target: usize,
    t: u64,
    latency: u64,
    hedge_latency: u64,
) -> Option<u64> {
    let mut r = h.start(target, t, Idempotency::Idempotent);
    let primary_done = t.saturating_add(latency);
    let (mut winner, mut done) = (Attempt::PRIMARY, primary_done);
    if let Some(at) = r.next_timer().filter(|&at| at < primary_done) {
        if let TimerAction::SendHedge(hedge) = h.on_timer(&mut r, at) {
            let hedge_done = at.saturating_add(hedge_latency);
            if hedge_done < primary_done {
                (winner, done) = (hedge, hedge_done);
            }
        }
    }
    let outcome = h.on_commit(&mut r, winner, done);
    assert!(matches!(outcome, CommitOutcome::Won { .. }), "{outcome:?}");
    r.delay_ns()
}

/// Whether `delay` is the quantile of a backend answering in exactly
/// `latency`, within the mapping's relative accuracy (1 %).
fn accurate(delay: Option<u64>, latency: u64) -> bool {
    delay.is_some_and(|d| d.abs_diff(latency) * 100 <= latency)
}

/// A clock disturbance between two stretches of normal traffic.
#[derive(Clone, Copy, Debug)]
enum Disturbance {
    /// Timestamps from `threads` threads that read the clock up to
    /// `skew_ns` apart, interleaved out of order.
    Skew { threads: u64, skew_ns: u64 },
    /// The clock steps back by this much and stays there.
    StepBack(u64),
    /// One stretch far ahead (this much), then back to the true time.
    JumpAheadAndBack(u64),
}

fn disturbance() -> impl Strategy<Value = Disturbance> {
    prop_oneof![
        (2u64..8, 1u64..5 * MS)
            .prop_map(|(threads, skew_ns)| Disturbance::Skew { threads, skew_ns }),
        prop::sample::select(vec![MS, SEC, 31 * SEC, HOUR, 10_000 * HOUR])
            .prop_map(Disturbance::StepBack),
        prop::sample::select(vec![SEC, 61 * SEC, HOUR, 1 << 62, u64::MAX / 2])
            .prop_map(Disturbance::JumpAheadAndBack),
    ]
}

/// Where the true clock starts: the low end, a plain value, the high end
/// (a jump ahead from there saturates at `u64::MAX`).
fn origin() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![0, 5 * SEC, 1 << 40, u64::MAX - 3 * HOUR])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Survived and recovered: whatever the clock did, once it is back to
    /// normal and the backend twice as fast, the delay is the new quantile
    /// within the mapping's accuracy after at most two rotation periods
    /// from when the window takes the clock: at once, or, for a return two
    /// periods or more behind the window's time (after a jump ahead), once
    /// `STALE_RUN` or more timestamps span two periods, where the period
    /// restarts (rotation goes on: it does not wait for the old time) — and
    /// it never stops
    /// being exact under skew alone; nothing is left in flight; the budget
    /// grants at most its share, and grants again.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn clock_trouble_is_survived_and_recovered_from(
        disturbance in disturbance(),
        origin in origin(),
        latency_ms in 2u64..40,
    ) {
        let latency = latency_ms * MS;
        let min_samples = 20;
        // 100 requests a period: the windows rotate on time.
        let per_period = 100;
        let config = HedgeConfig::DEFAULT
            .rotation_period_ns(per_period * 10 * MS)
            .min_samples(min_samples)
            .prior_delay_ns(latency / 2)
            .max_hedges_in_flight(4);
        let h: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, Budget::default()).unwrap();
        // Normal traffic, one request every 10 ms: warm and exact.
        let mut t = origin;
        for _ in 0..200 {
            request(&h, 0, t, latency, latency);
            t = t.saturating_add(10 * MS);
        }
        prop_assert!(accurate(h.delay_ns(0, t), latency), "{:?}", h.delay_ns(0, t));
        // The disturbance, 200 requests long.
        match disturbance {
            Disturbance::Skew { threads, skew_ns } => {
                for i in 0..200u64 {
                    // Thread `i % threads` reads the clock `skew` late.
                    let skew = (i % threads) * skew_ns / threads;
                    let at = t.saturating_sub(skew);
                    let delay = request(&h, 0, at, latency, latency);
                    // Skew alone never costs the estimate.
                    prop_assert!(accurate(delay, latency), "{delay:?} at {i}");
                    t = t.saturating_add(MS);
                }
            }
            Disturbance::StepBack(back) => {
                t = t.saturating_sub(back);
                for _ in 0..200 {
                    request(&h, 0, t, latency, latency);
                    t = t.saturating_add(10 * MS);
                }
            }
            Disturbance::JumpAheadAndBack(ahead) => {
                let mut far = t.saturating_add(ahead);
                for _ in 0..200 {
                    request(&h, 0, far, latency, latency);
                    far = far.saturating_add(10 * MS);
                }
            }
        }
        // Back to normal, and the backend twice as fast: recovered within
        // two periods of the window taking the clock, which (two periods
        // or more behind it, after a jump ahead) takes two periods.
        let latency = latency / 2;
        let mut recovered_after = None;
        for i in 0..500u64 {
            let delay = request(&h, 0, t, latency, latency);
            t = t.saturating_add(10 * MS);
            if recovered_after.is_none() && accurate(h.delay_ns(0, t), latency) {
                recovered_after = Some(i);
            }
            if let Some(r) = recovered_after {
                // ...and stays so.
                prop_assert!(i == r || accurate(delay, latency), "{delay:?} at {i}");
            }
        }
        let recovered_after = recovered_after.expect("recovers");
        let stale_run = u64::from(LatencyWindow::<CubicMapping>::STALE_RUN);
        prop_assert!(
            recovered_after <= 4 * per_period + stale_run,
            "after {recovered_after} answers"
        );
        prop_assert!(accurate(h.delay_ns(1, t), latency), "the aggregate recovers too");
        // Hedging works again: a straggler is hedged at the delay, within
        // a budget the clock's trouble did not freeze.
        let mut straggler = h.start(0, t, Idempotency::Idempotent);
        let at = straggler.next_timer().expect("a delay");
        prop_assert!(accurate(Some(at - t), latency));
        let action = h.on_timer(&mut straggler, at);
        let TimerAction::SendHedge(hedge) = action else {
            return Err(TestCaseError::fail(format!("no hedge: {action:?}")));
        };
        let won = h.on_commit(&mut straggler, hedge, at + latency);
        prop_assert!(matches!(won, CommitOutcome::Won { .. }), "{:?}", won);
        t = t.saturating_add(10 * MS);
        // Every request finished: nothing in flight, now or later.
        prop_assert_eq!(h.hedges_in_flight(t), 0);
        prop_assert_eq!(h.hedges_in_flight(t.saturating_add(10 * SEC)), 0);
        let stats = h.stats();
        let budget = h.budget_stats();
        prop_assert_eq!(stats.requests, 901);
        prop_assert_eq!(stats.hedges_sent, budget.grants);
        // The ratio budget's bound: 15 % of the requests, whatever the clock.
        prop_assert!(budget.grants * 10_000 <= stats.requests * 1_500, "{:?}", budget);
        // Each request: one exact sample, a censored one per hedge, or
        // nothing recorded when its times could not be real.
        prop_assert_eq!(
            stats.samples + stats.samples_refused + stats.clock_anomalies,
            901 + stats.hedges_sent - stats.censored_samples
        );
    }
}

/// A backend 10× slower for a while, then back: at a high rate the delay
/// follows each change within two rotations of `rotation_samples`
/// answers (the documented window), and is exact in between.
#[test]
#[cfg_attr(miri, ignore)]
fn a_tenfold_slowdown_is_followed_within_two_batches_each_way() {
    let batch = 1_000; // rotation_samples for p90
    let config = HedgeConfig::DEFAULT.prior_delay_ns(MS);
    let h: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut t = SEC;
    // Requests start every 1 ms, each answering after `latency` (the hedge
    // alike): returns how many requests it took for the delay to become
    // exact, running `n` requests.
    let mut phase = |latency: u64, n: u64| {
        let mut followed = None;
        for i in 0..n {
            request(&h, 0, t, latency, latency);
            t += MS;
            if followed.is_none() && accurate(h.delay_ns(0, t), latency) {
                followed = Some(i);
            }
        }
        (followed, h.delay_ns(0, t))
    };
    let (_, warm) = phase(3 * MS, 3 * batch);
    assert!(accurate(warm, 3 * MS), "{warm:?}");
    let (up, slow) = phase(30 * MS, 3 * batch);
    assert!(accurate(slow, 30 * MS), "{slow:?}");
    let up = up.unwrap();
    eprintln!("10x slowdown followed after {up} requests");
    assert!(up < 2 * batch, "followed the slowdown after {up}");
    let (down, fast) = phase(3 * MS, 3 * batch);
    assert!(accurate(fast, 3 * MS), "{fast:?}");
    let down = down.unwrap();
    eprintln!("recovery followed after {down} requests");
    assert!(down <= 2 * batch, "followed the recovery after {down}");
    assert_eq!(h.hedges_in_flight(t), 0);
}

/// One request a minute with the defaults: every gap is two 30 s periods,
/// so the window empties before each sample and the hedger never warms up
/// (documented: "a client that sends at least one request a period stays
/// warm"). With a 10 min period the same traffic warms up after
/// `min_samples` answers, stays warm, follows a 10× slowdown within a few
/// answers and forgets it within two halves of the answers a half holds
/// before it rotates on time (`Rotation::answers_to_estimate`, 100 at p90).
#[test]
#[cfg_attr(miri, ignore)]
fn one_request_a_minute() {
    let cold: SharedHedger = SharedHedger::new(HedgeConfig::DEFAULT).unwrap();
    for i in 0..100 {
        request(&cold, 0, i * MIN, 4 * MS, 4 * MS);
    }
    let stats = cold.stats();
    assert_eq!((stats.cold_starts, stats.samples), (100, 100));
    assert_eq!(cold.delay_ns(0, 99 * MIN + 5 * MS), None);

    let min_samples = 20;
    let config = HedgeConfig::DEFAULT.rotation_period_ns(10 * MIN);
    let h: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut t = 0;
    let mut phase = |latency: u64, n: u64| {
        let mut followed = None;
        for i in 0..n {
            request(&h, 0, t, latency, latency);
            t += MIN;
            if followed.is_none() && accurate(h.delay_ns(0, t - MIN + latency), latency) {
                followed = Some(i);
            }
        }
        followed.expect("followed")
    };
    assert_eq!(
        phase(4 * MS, 60),
        min_samples - 1,
        "warm at the 20th answer"
    );
    // Slower: more than 10 % of the window is soon slow.
    let up = phase(40 * MS, 60);
    eprintln!("1/min: slowdown followed after {up} answers");
    assert!(up <= 5, "followed the slowdown after {up}");
    let down = phase(4 * MS, 250);
    eprintln!("1/min: recovery followed after {down} answers");
    let half = Rotation::answers_to_estimate(0.9);
    assert!(down < 2 * half, "followed the recovery after {down}");
    assert_eq!(
        h.stats().cold_starts,
        min_samples,
        "cold only while warming up"
    );
}

/// Bursts of 300 requests in 30 ms every 20 s: the window rotates on its
/// sample count and on time, and the delay stays exact through the quiet.
#[test]
#[cfg_attr(miri, ignore)]
fn bursts_keep_the_delay_exact() {
    let config = HedgeConfig::DEFAULT;
    let h: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    for burst in 0..20u64 {
        let t0 = SEC + burst * 20 * SEC;
        for i in 0..300 {
            request(&h, 0, t0 + i * 100_000, 6 * MS, 6 * MS);
        }
        // Read in the middle of the quiet that follows.
        let quiet = t0 + 10 * SEC;
        assert!(accurate(h.delay_ns(0, quiet), 6 * MS), "burst {burst}");
        assert_eq!(
            h.plan(0, quiet),
            Plan::Hedge {
                delay_ns: h.delay_ns(0, quiet).unwrap(),
                source: tailguard::hedge::DelaySource::Target
            }
        );
    }
    // A quiet longer than two periods: cold, never a stale number.
    let later = SEC + 20 * 20 * SEC + 61 * SEC;
    assert_eq!(h.plan(0, later), Plan::NoHedge(NoHedge::ColdStart));
}

/// Many targets with `T > 1`, and target indexes beyond `T`: each target's
/// delay is its own latency, the out-of-range ones share the aggregate,
/// whose delay is the quantile of every sample.
#[test]
#[cfg_attr(miri, ignore)]
fn targets_keep_their_own_delays_and_the_rest_share_the_aggregate() {
    let config = HedgeConfig::DEFAULT.min_samples(10);
    let h: SharedHedger<Budget, 4> = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    // Target k answers in (k + 1) ms; targets 4..100 answer in 50 ms, one
    // request each per round.
    let mut t = SEC;
    for _ in 0..40 {
        for target in 0..100usize {
            let latency = if target < 4 {
                (target as u64 + 1) * MS
            } else {
                50 * MS
            };
            request(&h, target, t, latency, latency);
            t += 100_000;
        }
    }
    for target in 0..4usize {
        assert!(
            accurate(h.delay_ns(target, t), (target as u64 + 1) * MS),
            "target {target}: {:?}",
            h.delay_ns(target, t)
        );
    }
    // 96 % of the samples are 50 ms: so is the aggregate's p90.
    for target in [4, 99, 1_000, usize::MAX] {
        assert!(accurate(h.delay_ns(target, t), 50 * MS), "target {target}");
    }
}

/// How one request of the concurrent test ends.
#[derive(Clone, Copy, Debug)]
enum End {
    PrimaryWins,
    HedgeWins,
    /// The hedge fails (retryable), then the primary wins.
    HedgeFailsThenPrimary,
    /// The primary fails fatally.
    Fatal,
    /// The caller gives up (a dropped guard, a timeout).
    Abandon,
}

/// Threads whose clocks read a little apart run requests ending every
/// way, hedged or not, against one hedger with an in-flight cap: every
/// counter comes out at its exact answer, nothing stays in flight once
/// every request has ended, and the budget keeps its bound. (Time is one
/// virtual clock the threads advance, read up to 3 ms apart; the lease is
/// longer than the run, so that a thread the OS preempts for long cannot
/// see its hedges expire.)
#[test]
fn every_ending_from_many_threads_balances_exactly() {
    let (threads, per) = if cfg!(miri) {
        (2u64, 10u64)
    } else {
        (4, 3_000)
    };
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(2 * MS)
        .min_samples(5)
        .max_hedges(2)
        .max_hedges_in_flight(3)
        .in_flight_lease_ns(1 << 60);
    let clock = std::sync::atomic::AtomicU64::new(SEC);
    let h: SharedHedger<Budget, 2> = SharedHedger::with_budget(config, Budget::default()).unwrap();
    /// What one thread expects the hedger to have counted.
    #[derive(Default)]
    struct Expect {
        wins: u64,
        gave_up: u64,
        censored: u64,
    }
    let expected: Vec<Expect> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let (h, clock) = (&h, &clock);
                s.spawn(move || {
                    let mut e = Expect::default();
                    for i in 0..per {
                        // Up to 3 ms of skew between threads.
                        let skew = k * 3 * MS / threads;
                        let t = clock.fetch_add(MS, Relaxed).saturating_sub(skew);
                        let end = match (i + k) % 5 {
                            0 => End::PrimaryWins,
                            1 => End::HedgeWins,
                            2 => End::HedgeFailsThenPrimary,
                            3 => End::Fatal,
                            _ => End::Abandon,
                        };
                        let target = (i % 3) as usize; // 2 is beyond T
                        let mut r = h.start(target, t, Idempotency::Idempotent);
                        let mut now = t + MS;
                        let mut hedge = None;
                        if let Some(at) = r.next_timer().filter(|_| i % 2 == 0) {
                            now = at;
                            if let TimerAction::SendHedge(a) = h.on_timer(&mut r, at) {
                                hedge = Some(a);
                            }
                            now += MS;
                        }
                        let in_flight = r.in_flight().len();
                        match (end, hedge) {
                            (End::HedgeWins, Some(a)) => {
                                assert!(matches!(
                                    h.on_commit(&mut r, a, now),
                                    CommitOutcome::Won { .. }
                                ));
                                e.wins += 1;
                                e.censored += u64::from(in_flight) - 1;
                            }
                            (End::HedgeFailsThenPrimary, Some(a)) => {
                                // Another hedge may go out at once.
                                let _ = h.on_failure(
                                    &mut r,
                                    a,
                                    now,
                                    tailguard::hedge::Failure::Retryable,
                                );
                                let in_flight = r.in_flight().len();
                                assert!(matches!(
                                    h.on_commit(&mut r, Attempt::PRIMARY, now + MS),
                                    CommitOutcome::Won { .. }
                                ));
                                e.wins += 1;
                                e.censored += u64::from(in_flight) - 1;
                            }
                            (End::Fatal, _) => {
                                let outcome = h.on_failure(
                                    &mut r,
                                    Attempt::PRIMARY,
                                    now,
                                    tailguard::hedge::Failure::Fatal,
                                );
                                assert!(matches!(
                                    outcome,
                                    tailguard::hedge::FailureOutcome::GiveUp { .. }
                                ));
                                e.gave_up += 1;
                                e.censored += u64::from(in_flight) - 1;
                            }
                            (End::Abandon, _) => {
                                let cancel = h.abandon(&mut r, now);
                                assert_eq!(cancel.len(), in_flight);
                                e.gave_up += 1;
                                e.censored += u64::from(in_flight);
                            }
                            _ => {
                                assert!(matches!(
                                    h.on_commit(&mut r, Attempt::PRIMARY, now),
                                    CommitOutcome::Won { .. }
                                ));
                                e.wins += 1;
                                e.censored += u64::from(in_flight) - 1;
                            }
                        }
                        assert!(r.is_finished());
                    }
                    e
                })
            })
            .collect();
        handles.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let sum = |f: fn(&Expect) -> u64| expected.iter().map(f).sum::<u64>();
    let stats = h.stats();
    let requests = threads * per;
    assert_eq!(stats.requests, requests);
    assert_eq!(
        stats.primary_wins + stats.hedge_wins + stats.retry_wins,
        sum(|e| e.wins)
    );
    assert_eq!(stats.gave_up, sum(|e| e.gave_up));
    assert_eq!(stats.samples, sum(|e| e.wins), "winners only are exact");
    assert_eq!(stats.censored_samples, sum(|e| e.censored));
    assert_eq!(stats.samples_refused + stats.clock_anomalies, 0);
    assert_eq!(stats.leases_expired, 0, "every hedge was released");
    let end = clock.load(Relaxed) + 10 * MS;
    assert_eq!(h.hedges_in_flight(end), 0);
    let budget = h.budget_stats();
    // Every hedge sent paid a token; a token granted while another thread
    // took the last in-flight place was spent for nothing (fails closed),
    // and that hedge counts as limited.
    assert!(budget.grants >= stats.hedges_sent, "{budget:?} {stats:?}");
    assert!(
        budget.grants - stats.hedges_sent <= stats.in_flight_limited,
        "{budget:?} {stats:?}"
    );
    assert!(budget.grants * 10_000 <= requests * 1_500, "{budget:?}");
    assert!(stats.hedges_sent > 0 && stats.hedge_wins > 0, "{stats:?}");
}

/// A budget that grants every hedge, but only once two callers are
/// inside it at once: it holds two threads between the hedger's in-flight
/// check and its in-flight count, the interleaving a race would give.
#[derive(Debug)]
struct Rendezvous(std::sync::Barrier);

impl tailguard::budget::HedgeBudget for Rendezvous {
    fn on_request(&self, _: u64) {}

    fn try_acquire(&self, _: u64) -> bool {
        self.0.wait();
        true
    }

    fn stats(&self) -> tailguard::budget::BudgetStats {
        Budget::Unlimited.stats()
    }

    fn drained(&self, _: u64) -> Self {
        Self(std::sync::Barrier::new(2))
    }
}

/// Two threads whose hedge timers fire together, one place in flight
/// left: one hedge goes out, the other is refused for the cap — never
/// both, whatever the interleaving (here the worst one, made certain).
#[test]
fn two_threads_cannot_both_take_the_last_in_flight_place() {
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(MS)
        .max_hedges_in_flight(1);
    let h: SharedHedger<Rendezvous> =
        SharedHedger::with_budget(config, Rendezvous(std::sync::Barrier::new(2))).unwrap();
    let actions: Vec<_> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let h = &h;
                s.spawn(move || {
                    let mut r = h.start(0, SEC, Idempotency::Idempotent);
                    let action = h.on_timer(&mut r, SEC + MS);
                    // The request (and its hedge) stays in flight.
                    (action, r)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let (actions, _in_flight): (Vec<_>, Vec<_>) = actions.into_iter().unzip();
    let sent = actions
        .iter()
        .filter(|a| matches!(a, TimerAction::SendHedge(_)))
        .count();
    assert_eq!(sent, 1, "{actions:?}");
    assert!(actions.contains(&TimerAction::Skip(NoHedge::InFlightLimit)));
    assert_eq!(h.hedges_in_flight(SEC + MS), 1);
    let stats = h.stats();
    assert_eq!((stats.hedges_sent, stats.in_flight_limited), (1, 1));
}

/// The in-flight cap holds across threads: however many threads fire
/// their hedge timers at once, at most `cap` hedges are out at any time.
/// (Rounds: every thread starts a request, all fire their timers
/// together, the hedges are counted, then every request ends.)
#[test]
#[cfg_attr(miri, ignore)]
fn the_in_flight_cap_holds_across_threads() {
    let (threads, rounds, cap) = (4usize, 5_000u64, 2u32);
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(MS)
        .max_hedges_in_flight(cap)
        .min_samples(u64::MAX);
    let h: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let fire = std::sync::Barrier::new(threads);
    let end = std::sync::Barrier::new(threads);
    let worst = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (h, fire, end, worst) = (&h, &fire, &end, &worst);
            s.spawn(move || {
                for round in 0..rounds {
                    let t = SEC + round * 10 * MS;
                    let mut r = h.start(0, t, Idempotency::Idempotent);
                    fire.wait();
                    let _ = h.on_timer(&mut r, t + MS);
                    worst.fetch_max(h.hedges_in_flight(t + MS), Relaxed);
                    end.wait();
                    h.abandon(&mut r, t + 2 * MS);
                    end.wait();
                }
            });
        }
    });
    let stats = h.stats();
    assert!(
        worst.load(Relaxed) <= cap,
        "{} hedges in flight under a cap of {cap} ({} sent, {} limited)",
        worst.load(Relaxed),
        stats.hedges_sent,
        stats.in_flight_limited
    );
    assert_eq!(
        stats.hedges_sent + stats.in_flight_limited,
        threads as u64 * rounds
    );
}

/// A request still racing after `in_flight_lease_ns` (a long poll, a
/// stream): as `in_flight_lease_ns` documents, the time slots cannot tell
/// it from a dropped one, so with a 10 s lease its hedge stops counting
/// against the cap 12 s on (and is counted in `leases_expired`); with the
/// documented remedy, a lease above the longest request, it keeps its
/// place until it ends, and then frees it.
#[test]
fn a_live_request_keeps_its_hedge_in_flight_only_within_the_lease() {
    for (lease, counted) in [(10 * SEC, false), (20 * SEC, true)] {
        let config = HedgeConfig::DEFAULT
            .prior_delay_ns(5 * MS)
            .max_hedges_in_flight(1)
            .in_flight_lease_ns(lease);
        let h: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
        let mut long = h.start(0, 0, Idempotency::Idempotent);
        assert!(matches!(
            h.on_timer(&mut long, 5 * MS),
            TimerAction::SendHedge(_)
        ));
        // 12 s later the long request is still racing.
        let t = 12 * SEC;
        let mut next = h.start(0, t, Idempotency::Idempotent);
        assert_eq!(h.hedges_in_flight(t), u32::from(counted), "lease {lease}");
        let action = h.on_timer(&mut next, t + 5 * MS);
        if counted {
            assert_eq!(action, TimerAction::Skip(NoHedge::InFlightLimit));
        } else {
            assert!(matches!(action, TimerAction::SendHedge(_)), "{action:?}");
        }
        assert!(matches!(
            h.on_commit(&mut long, Attempt::PRIMARY, t + 6 * MS),
            CommitOutcome::Won { .. }
        ));
        assert_eq!(h.stats().leases_expired, u64::from(!counted));
        // Its end frees the place (the second request's hedge, if sent,
        // still holds one).
        assert_eq!(h.hedges_in_flight(t + 6 * MS), u32::from(!counted));
    }
}

/// Bimodal latencies — 80 % in 1–2 ms, 20 % in 80–120 ms, p90 exactly
/// 100 ms — with every straggler hedged at the delay and its hedge
/// usually winning: the delay is the p90 of one attempt's latency (the
/// cancelled primaries are censored, not dropped), not the much lower p90
/// of the winners.
#[test]
#[cfg_attr(miri, ignore)]
fn bimodal_latencies_under_hedging_give_the_attempt_quantile() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut draw = move || {
        if rng.random_bool(0.8) {
            rng.random_range(MS..2 * MS)
        } else {
            rng.random_range(80 * MS..120 * MS)
        }
    };
    let config = HedgeConfig::DEFAULT.prior_delay_ns(50 * MS);
    let h: SharedHedger = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
    let mut t = SEC;
    for _ in 0..20_000 {
        let (primary, hedge) = (draw(), draw());
        request(&h, 0, t, primary, hedge);
        t += MS;
    }
    let stats = h.stats();
    assert!(stats.hedge_wins > 1_000, "{stats:?}");
    let delay = h.delay_ns(0, t).unwrap();
    // 2 000 samples or so in the window: about 1.3 ms of sampling error
    // at the p90, plus the mapping's 1 %.
    assert!(delay.abs_diff(100 * MS) <= 5 * MS, "{delay}");
}
