//! The hedge state machine over arbitrary configurations and event
//! sequences on several interleaved requests, with timestamps that repeat,
//! go backwards and jump: it never panics, never sends more than the
//! configured attempts, crowns at most one winner per request, and its
//! counters agree with what the caller saw.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::budget::{Budget, RatioBudget};
use tailguard::hedge::{
    Attempt, CommitOutcome, FailureOutcome, FailurePolicy, HedgeConfig, Hedger, Idempotency, Plan,
    Request, TimerAction,
};

#[derive(arbitrary::Arbitrary, Debug)]
enum Event {
    Start { target: u8, idempotent: bool },
    Timer { slot: u8 },
    Commit { slot: u8, attempt: u8 },
    Fail { slot: u8, attempt: u8 },
    Abandon { slot: u8 },
    Tick(u32),
    Back(u32),
    Jump(u64),
}

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    max_hedges: u8,
    min_samples: u8,
    prior: Option<u32>,
    in_flight_cap: Option<u8>,
    deadline: Option<u32>,
    give_up_on_first: bool,
    budget: u8,
    events: Vec<Event>,
}

/// What the fuzzer knows of one live request.
struct Live {
    request: Request<u8>,
    winners: u32,
}

fuzz_target!(|input: Input| {
    let mut config = HedgeConfig::DEFAULT
        .max_hedges(input.max_hedges % 8)
        .min_samples(u64::from(input.min_samples).max(1))
        .rotation_period_ns(1_000_000_000);
    if let Some(p) = input.prior {
        config = config.prior_delay_ns(u64::from(p));
    }
    if let Some(c) = input.in_flight_cap {
        config = config.max_hedges_in_flight(u32::from(c).max(1));
    }
    if let Some(d) = input.deadline {
        config = config.deadline_ns(u64::from(d).max(1));
    }
    if input.give_up_on_first {
        config = config.failure_policy(FailurePolicy::GiveUpOnFirst);
    }
    let budget = match input.budget % 3 {
        0 => Budget::Unlimited,
        1 => Budget::Never,
        _ => Budget::Ratio(RatioBudget::new(5_000, 3).unwrap()),
    };
    let mut h: Hedger<u8, Budget, 2> = Hedger::with_budget(config, budget).unwrap();
    let mut now: u64 = 0;
    let mut live: Vec<Live> = Vec::new();
    let (mut wins, mut sends) = (0u64, 0u64);

    for event in input.events.into_iter().take(512) {
        match event {
            Event::Start { target, idempotent } => {
                let idem = if idempotent { Idempotency::Idempotent } else { Idempotency::NotIdempotent };
                let (request, plan) = h.start(target % 3, now, idem);
                if let Plan::HedgeAt { at, delay_ns, .. } = plan {
                    assert!(idempotent && config.max_hedges > 0);
                    assert!(delay_ns >= config.min_delay_ns);
                    assert_eq!(at, now.saturating_add(delay_ns));
                }
                if live.len() < 6 {
                    live.push(Live { request, winners: 0 });
                }
            }
            Event::Timer { slot } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let before = l.request.attempts_sent();
                    match h.on_timer(&mut l.request, now) {
                        TimerAction::SendHedge(a) => {
                            assert_eq!(a, Attempt(before));
                            assert!(!l.request.is_finished());
                            sends += 1;
                        }
                        TimerAction::GiveUp { cancel } => {
                            assert!(l.request.is_finished());
                            assert!(cancel.iter().all(|a| a.0 < before));
                        }
                        TimerAction::Wait { until } => assert!(until > now),
                        TimerAction::Skip(_) => {}
                    }
                    assert!(l.request.attempts_sent() <= config.max_hedges + 1);
                }
            }
            Event::Commit { slot, attempt } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let was_finished = l.request.is_finished();
                    match h.on_commit(&mut l.request, Attempt(attempt % 9), now) {
                        CommitOutcome::Won { winner, cancel } => {
                            assert!(!was_finished);
                            assert!(!cancel.contains(winner));
                            assert!(cancel.iter().all(|a| a.0 < l.request.attempts_sent()));
                            l.winners += 1;
                            wins += 1;
                        }
                        CommitOutcome::Late => assert!(was_finished),
                        CommitOutcome::Unknown => {}
                    }
                    assert!(l.winners <= 1);
                }
            }
            Event::Fail { slot, attempt } => {
                if let Some(l) = live.get_mut(usize::from(slot) % 6) {
                    let was_finished = l.request.is_finished();
                    if let FailureOutcome::GiveUp { .. } | FailureOutcome::Continue =
                        h.on_failure(&mut l.request, Attempt(attempt % 9), now)
                    {
                        assert!(!was_finished);
                    }
                }
            }
            Event::Abandon { slot } => {
                let i = usize::from(slot) % 6;
                if i < live.len() {
                    let mut l = live.swap_remove(i);
                    h.abandon(&mut l.request);
                    assert!(l.request.is_finished());
                }
            }
            Event::Tick(d) => now = now.saturating_add(u64::from(d)),
            Event::Back(d) => now = now.saturating_sub(u64::from(d)),
            Event::Jump(t) => now = t,
        }
        let s = h.stats();
        assert_eq!(s.hedges_sent, sends);
        assert_eq!(s.primary_wins + s.hedge_wins, wins);
        // Hedges in flight are exactly those of racing requests, minus the
        // failed ones (requests dropped from `live` were abandoned, and
        // those never kept there never got a timer).
        let expected: u32 = live
            .iter()
            .map(|l| l.request.in_flight().without(Attempt::PRIMARY).len())
            .sum();
        assert_eq!(h.hedges_in_flight(), expected);
        assert!(h.targets() <= 2);
    }
});
