//! The hedge state machine over arbitrary configurations and event
//! sequences on several interleaved requests, with timestamps that repeat,
//! go backwards by hours, jump to the far future (1.7e18, `u64::MAX / 2`)
//! and back, and with requests dropped mid-race without any event.
//!
//! It never panics, never sends more than the configured attempts nor more
//! hedges than the budget earned, crowns at most one winner per request, and
//! its counters agree with what the caller saw and never decrease. A
//! skipped timer moves past the time it fired at or ends. It
//! recovers: hedges in flight are bounded by those really outstanding, and
//! a dropped request's hedges stop counting once the lease has passed, so
//! with nothing live and every dropped hedge a lease old the count is 0
//! whatever the clock did before. Both mappings: the default cubic one and
//! `LogLinearMapping` (the integer-only record path).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{
    Attempt, CommitOutcome, ConfigError, DelaySource, Failure, FailureOutcome, HedgeConfig,
    HedgeStats, Hedger, Idempotency, Plan, Request, RouteError, TimerAction,
};
use tailguard::store::CollapsingLowestStore;
use tailguard::{CubicMapping, FromRelativeAccuracy, IndexMapping, LogLinearMapping};

const SEC: u64 = 1_000_000_000;
const HOUR: u64 = 3_600 * SEC;

#[derive(arbitrary::Arbitrary, Debug)]
enum Event {
    Start {
        target: u8,
        idempotent: bool,
    },
    Timer {
        slot: u8,
    },
    Commit {
        slot: u8,
        attempt: u8,
    },
    Fail {
        slot: u8,
        attempt: u8,
        fatal: bool,
    },
    Abandon {
        slot: u8,
    },
    /// The caller drops the request mid-race: no event, no abandon.
    Drop {
        slot: u8,
    },
    /// The latest attempt went to another replica.
    Route {
        slot: u8,
        target: u8,
    },
    EvictIdle {
        idle: u32,
    },
    Tick(u32),
    Back(u32),
    Jump(u64),
    /// A timestamp from another clock: 1.7e18, `u64::MAX / 2`, or the end.
    FarFuture(u8),
    /// The clock steps back by 1 to 48 hours.
    BackHours(u8),
    /// Time moves on by one lease.
    PastLease,
}

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    max_hedges: u8,
    min_samples: u8,
    prior: Option<u32>,
    /// 0: no cap; otherwise at most 1 (mostly) or 2 hedges in flight.
    in_flight_cap: u8,
    /// The lease is `4 · (1 + lease_quarter_us) µs`.
    lease_quarter_us: u16,
    deadline: Option<u32>,
    budget: u8,
    share_bps: u16,
    per_target: bool,
    log_linear: bool,
    /// Retry throttling's tokens: 0 (off) to 7.
    retry_throttle: u8,
    /// Odd: an exact clock; even: a tick of `max(1, tick_us / 2)` µs.
    tick_us: u8,
    events: Vec<Event>,
}

/// What the fuzzer knows of one live request.
struct Live {
    request: Request<u8>,
    idempotent: bool,
    winners: u32,
}

/// Every counter of `s`, to check that none decreases.
fn counters(s: &HedgeStats) -> [u64; 19] {
    [
        s.requests,
        s.hedges_sent,
        s.retries_released,
        s.hedge_wins,
        s.retry_wins,
        s.primary_wins,
        s.budget_denials,
        s.cold_starts,
        s.aggregate_delays,
        s.not_idempotent,
        s.in_flight_limited,
        s.leases_expired,
        s.gave_up,
        s.samples,
        s.censored_samples,
        s.samples_refused,
        s.clock_anomalies,
        s.evictions,
        s.retries_throttled,
    ]
}

/// The hedges of `request` still in flight, as their send times.
/// Send times of the request's hedges in flight (retries hold no lease).
fn hedges_of(request: &Request<u8>) -> impl Iterator<Item = u64> + '_ {
    let hedges = request.hedge_attempts();
    request
        .in_flight()
        .iter()
        .filter(move |&a| hedges.contains(a))
        .filter_map(|a| request.sent_at(a))
}

fuzz_target!(|input: Input| {
    if input.log_linear {
        run::<LogLinearMapping>(input);
    } else {
        run::<CubicMapping>(input);
    }
});

fn run<M: IndexMapping + FromRelativeAccuracy>(input: Input) {
    // A multiple of 4 ns, so that "stops counting between ¾ of the lease
    // and the lease" holds to the nanosecond.
    let lease = 4 * (u64::from(input.lease_quarter_us) + 1) * 1_000;
    let mut config = HedgeConfig::DEFAULT
        .max_hedges(input.max_hedges % 8)
        .min_samples(u64::from(input.min_samples).max(1))
        .rotation_period_ns(SEC)
        .in_flight_lease_ns(lease)
        .retry_throttle(u16::from(input.retry_throttle % 8))
        // Half the inputs on an exact clock (odd `tick_us`), the others on a
        // tick of up to 127 µs.
        .clock_tick_ns(if input.tick_us % 2 == 1 {
            1
        } else {
            u64::from(input.tick_us / 2).max(1) * 1_000
        });
    if matches!(config.retry_throttle, 1 | 2) {
        // Refused: every retry would be throttled.
        assert_eq!(
            config.validate(),
            Err(ConfigError::RetryThrottle(config.retry_throttle))
        );
        config = config.retry_throttle(config.retry_throttle + 2);
    }
    if let Some(p) = input.prior {
        config = config.prior_delay_ns(u64::from(p));
    }
    let cap = match input.in_flight_cap % 4 {
        0 => None,
        3 => Some(2),
        _ => Some(1),
    };
    if let Some(c) = cap {
        config = config.max_hedges_in_flight(c);
    }
    if let Some(d) = input.deadline {
        config = config.deadline_ns(u64::from(d).max(1));
    }
    let share = u64::from(input.share_bps % 10_000) + 1;
    let budget = match input.budget % 3 {
        0 => Budget::Unlimited,
        1 => Budget::Never,
        // The explicit share: the default one may change.
        _ => Budget::Ratio(RatioBudget::new(share as u32, 3).unwrap()),
    };
    let bounded = !matches!(budget, Budget::Unlimited);
    let never = matches!(budget, Budget::Never);
    if input.log_linear {
        // At 1 % its 1 024 buckets span 2¹⁶ only: refused (`KeyRange`).
        config = config.relative_accuracy(0.02);
    }
    let mut h: Hedger<u8, Budget, 2, CollapsingLowestStore<1024>, M> = if input.per_target {
        Hedger::with_budget_per_target(config, budget).unwrap()
    } else {
        Hedger::with_budget(config, budget).unwrap()
    };
    let mut now: u64 = 0;
    let mut live: Vec<Live> = Vec::new();
    // What the caller saw.
    let (mut starts, mut wins, mut sends, mut retries, mut gave_up) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    // Attempts the hedger had to record (winners and the attempts cancelled).
    let mut recorded = 0u64;
    // Send times of the hedges of dropped requests, never released.
    let mut dropped: Vec<u64> = Vec::new();
    // Whether time has never gone backwards (then the counts are exact).
    let mut monotone = true;
    let mut before = counters(&h.stats());
    // Retry throttling's balance, as documented: full at first, a
    // retryable failure takes a token, an answer gives one back; a retry
    // only while it is above half.
    let full = u64::from(config.retry_throttle);
    let mut balance = full;
    let mut throttled = 0u64;

    for event in input.events.into_iter().take(512) {
        let then = now;
        match event {
            Event::Start { target, idempotent } => {
                let target = target % 3;
                let idem = if idempotent {
                    Idempotency::Idempotent
                } else {
                    Idempotency::NotIdempotent
                };
                let predicted = h.plan(&target, now);
                let request = h.start(target, now, idem);
                starts += 1;
                match request.plan() {
                    Plan::Hedge { delay_ns, source } => {
                        assert!(idempotent && config.max_hedges > 0);
                        assert!(delay_ns >= config.min_delay_ns);
                        // A delay from a window is a whole number of ticks,
                        // at least one (unless the maximum bounds it).
                        if source != DelaySource::Prior && delay_ns < config.max_delay_ns {
                            assert!(delay_ns >= config.clock_tick_ns);
                            let tick = config.clock_tick_ns;
                            assert!(
                                delay_ns % tick == 0 || delay_ns == config.min_delay_ns,
                                "{delay_ns} on a {tick} ns tick"
                            );
                        }
                        if source == DelaySource::Prior {
                            assert_eq!(
                                Some(delay_ns),
                                config.prior_delay_ns.map(|p| p.max(config.min_delay_ns))
                            );
                        }
                        let hedge_at = now.saturating_add(delay_ns);
                        let expected = match config.deadline_ns {
                            Some(d) => hedge_at.min(now.saturating_add(d)),
                            None => hedge_at,
                        };
                        assert_eq!(request.next_timer(), Some(expected));
                    }
                    Plan::NoHedge(_) => {
                        let deadline = config.deadline_ns.map(|d| now.saturating_add(d));
                        assert_eq!(request.next_timer(), deadline);
                    }
                }
                // Starting reads what `plan` reads, and changes nothing of it.
                if idempotent {
                    assert_eq!(request.plan(), predicted);
                }
                if live.len() < 6 {
                    live.push(Live {
                        request,
                        idempotent,
                        winners: 0,
                    });
                }
            }
            Event::Timer { slot } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let sent = l.request.attempts_sent();
                    let was_finished = l.request.is_finished();
                    match h.on_timer(&mut l.request, now) {
                        TimerAction::SendHedge(a) => {
                            assert!(!was_finished && l.idempotent);
                            assert_eq!(a, Attempt(sent));
                            assert_eq!(l.request.sent_at(a), Some(now));
                            assert!(!l.request.is_finished());
                            sends += 1;
                        }
                        TimerAction::GiveUp { cancel } => {
                            assert!(!was_finished && l.request.is_finished());
                            assert!(cancel.iter().all(|a| a.0 < sent));
                            recorded += u64::from(cancel.len());
                            gave_up += 1;
                        }
                        TimerAction::Wait { until } => assert!(until > now),
                        // A skipped timer moves on or ends (at the end of
                        // time too): a caller following it cannot spin.
                        TimerAction::Skip(reason) => {
                            let next = l.request.next_timer();
                            assert!(
                                next.is_none_or(|t| t > now),
                                "{reason:?} at {now}: {next:?}"
                            );
                        }
                    }
                    assert!(l.request.attempts_sent() <= 8);
                    assert!(l.request.retries_sent() <= config.max_retries);
                    // Failed attempts are replaced at most max_retries times.
                    let most = 1 + u16::from(config.max_hedges) + u16::from(config.max_retries);
                    assert!(u16::from(l.request.attempts_sent()) <= most);
                }
            }
            Event::Commit { slot, attempt } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let was_finished = l.request.is_finished();
                    let racing = l.request.in_flight();
                    let sent = l.request.attempts_sent();
                    let attempt = Attempt(attempt % 9);
                    match h.on_commit(&mut l.request, attempt, now) {
                        CommitOutcome::Won { winner, cancel } => {
                            assert!(!was_finished && racing.contains(winner));
                            assert_eq!(winner, attempt);
                            assert_eq!(cancel, racing.without(winner));
                            assert_eq!(l.request.winner(), Some(winner));
                            l.winners += 1;
                            wins += 1;
                            balance = (balance + 1).min(full);
                            recorded += 1 + u64::from(cancel.len());
                        }
                        CommitOutcome::Late => assert!(was_finished && attempt.0 < sent),
                        CommitOutcome::Unknown => {
                            assert!(attempt.0 >= sent || !racing.contains(attempt));
                        }
                    }
                    assert!(l.winners <= 1);
                }
            }
            Event::Fail {
                slot,
                attempt,
                fatal,
            } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let was_finished = l.request.is_finished();
                    let racing = l.request.in_flight();
                    let sent = l.request.attempts_sent();
                    let attempt = Attempt(attempt % 9);
                    let failure = if fatal {
                        Failure::Fatal
                    } else {
                        Failure::Retryable
                    };
                    let counts = !was_finished && racing.contains(attempt);
                    if counts && !fatal {
                        balance = balance.saturating_sub(1);
                    }
                    let retry_throttled = full > 0 && balance * 2 <= full;
                    let retries_before = h.stats().retries_throttled;
                    match h.on_failure(&mut l.request, attempt, now, failure) {
                        FailureOutcome::SendNow(next) => {
                            assert!(!was_finished && !fatal && l.idempotent);
                            assert!(racing.contains(attempt));
                            assert_eq!(next, Attempt(sent));
                            assert_eq!(l.request.sent_at(next), Some(now));
                            // A hedge if another attempt still races, else a
                            // retry.
                            if racing.without(attempt).is_empty() {
                                assert!(!l.request.hedge_attempts().contains(next));
                                assert!(!retry_throttled, "a retry at {balance} of {full}");
                                retries += 1;
                            } else {
                                assert!(l.request.hedge_attempts().contains(next));
                                sends += 1;
                            }
                        }
                        FailureOutcome::Continue => {
                            assert!(!was_finished && !fatal && racing.contains(attempt));
                            assert!(!l.request.in_flight().is_empty());
                        }
                        FailureOutcome::GiveUp { cancel } => {
                            assert!(!was_finished && racing.contains(attempt));
                            if h.stats().retries_throttled > retries_before {
                                // Throttled: a retry was due, none went.
                                assert!(retry_throttled && !fatal && cancel.is_empty());
                                throttled += 1;
                            }
                            assert_eq!(cancel, racing.without(attempt));
                            assert!(l.request.is_finished());
                            recorded += u64::from(cancel.len());
                            gave_up += 1;
                        }
                        FailureOutcome::Ignored => {
                            assert!(was_finished || !racing.contains(attempt));
                        }
                    }
                    assert!(l.request.attempts_sent() <= 8);
                    assert!(l.request.retries_sent() <= config.max_retries);
                    // Failed attempts are replaced at most max_retries times.
                    let most = 1 + u16::from(config.max_hedges) + u16::from(config.max_retries);
                    assert!(u16::from(l.request.attempts_sent()) <= most);
                }
            }
            Event::Abandon { slot } => {
                let i = usize::from(slot) % 6;
                if i < live.len() {
                    let mut l = live.swap_remove(i);
                    let was_finished = l.request.is_finished();
                    let racing = l.request.in_flight();
                    let cancel = h.abandon(&mut l.request, now);
                    assert_eq!(cancel, racing);
                    assert!(l.request.is_finished());
                    if !was_finished {
                        recorded += u64::from(cancel.len());
                        gave_up += 1;
                    }
                }
            }
            Event::Drop { slot } => {
                let i = usize::from(slot) % 6;
                if i < live.len() {
                    // Taken out and dropped at the end of this block, with
                    // no event: only the lease will release its hedges.
                    let l = live.swap_remove(i);
                    dropped.extend(hedges_of(&l.request));
                }
            }
            Event::Route { slot, target } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let last = Attempt(l.request.attempts_sent() - 1);
                    let before = l.request.target_of(last);
                    let routed = l.request.route(last, target % 3);
                    if last.is_primary() {
                        assert_eq!(routed, Err(RouteError::Primary));
                        assert_eq!(l.request.target_of(last), before);
                    } else {
                        assert_eq!(routed, Ok(()));
                        assert_eq!(l.request.target_of(last), Some(target % 3));
                    }
                }
            }
            Event::EvictIdle { idle } => {
                let targets = h.targets();
                let evicted = h.evict_idle(now, u64::from(idle));
                assert_eq!(h.targets() + evicted, targets);
            }
            Event::Tick(d) => now = now.saturating_add(u64::from(d)),
            Event::Back(d) => now = now.saturating_sub(u64::from(d)),
            Event::Jump(t) => now = t,
            Event::FarFuture(k) => {
                now = match k % 3 {
                    0 => 1_700_000_000_000_000_000,
                    1 => u64::MAX / 2,
                    _ => u64::MAX - u64::from(k),
                }
            }
            Event::BackHours(n) => now = now.saturating_sub(u64::from(n % 48 + 1) * HOUR),
            Event::PastLease => now = now.saturating_add(lease),
        }
        if now < then {
            monotone = false;
        }

        let s = h.stats();
        // Counters never decrease, and agree with what the caller saw.
        let after = counters(&s);
        for (i, (a, b)) in before.iter().zip(after.iter()).enumerate() {
            assert!(b >= a, "counter {i} went from {a} to {b}");
        }
        before = after;
        assert_eq!(s.requests, starts);
        assert_eq!(s.hedges_sent, sends);
        assert_eq!(s.retries_released, retries);
        assert_eq!(s.retries_throttled, throttled);
        assert_eq!(s.primary_wins + s.hedge_wins + s.retry_wins, wins);
        assert_eq!(s.gave_up, gave_up);
        // Every attempt recorded lands in exactly one counter; only winners
        // can be exact samples.
        assert_eq!(
            s.samples + s.censored_samples + s.samples_refused + s.clock_anomalies,
            recorded
        );
        assert!(s.samples <= wins);
        // Never more hedges than the budget earned: every request deposits
        // `share` basis points of a token into one budget, which starts empty.
        if never {
            assert_eq!(s.hedges_sent, 0);
        } else if bounded {
            assert!(s.hedges_sent * 10_000 <= s.requests * share, "{s:?}");
        }
        assert!(h.targets() <= 2);

        // Hedges in flight are at most those really outstanding: the live
        // requests' (a finished one holds none) and the dropped ones' still
        // within their lease of `now`, either way.
        let count = h.hedges_in_flight(now);
        let live_hedges: Vec<u64> = live.iter().flat_map(|l| hedges_of(&l.request)).collect();
        let near = |&&t: &&u64| now.abs_diff(t) < lease;
        let dropped_near = dropped.iter().filter(near).count() as u32;
        assert!(count <= live_hedges.len() as u32 + dropped_near, "{count}");
        // Recovery: nothing live, and every dropped hedge a lease away.
        if live.iter().all(|l| l.request.is_finished()) && dropped_near == 0 {
            assert_eq!(count, 0, "now {now}, dropped {dropped:?}");
        }
        if monotone {
            // Exact, and within the cap, as long as the clock never went back:
            // a hedge counts for at least ¾ of the lease and at most all of it.
            let all = || live_hedges.iter().chain(&dropped);
            let surely = all().filter(|&&t| now - t < lease / 4 * 3).count() as u32;
            let maybe = all().filter(|&&t| now - t < lease).count() as u32;
            assert!(
                (surely..=maybe).contains(&count),
                "{surely} <= {count} <= {maybe}"
            );
            if let Some(c) = cap {
                assert!(count <= c, "{count} > cap {c}");
            }
        }
    }
}
