//! The per-request state machine, written once for every hedger.
//!
//! A [`Request`] carries its own race; what an event decides also depends
//! on state the hedger shares between requests: the configuration, the
//! windows samples go to, the in-flight count, the budget and the
//! counters. [`Core`] is that shared state, implemented by
//! [`Hedger`](super::Hedger) (through `&mut`) and by
//! [`SharedHedger`](super::SharedHedger) (through `&`, with atomics), so
//! both run exactly these transitions.

use super::config::HedgeConfig;
use super::request::{self, Phase};
use super::{
    Attempt, AttemptSet, CommitOutcome, DelaySource, Failure, FailureOutcome, Idempotency, NoHedge,
    Plan, Request, TimerAction,
};
use crate::sync::{AtomicU32, Ordering};

/// A counter the state machine bumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stat {
    HedgesSent,
    RetriesReleased,
    HedgeWins,
    RetryWins,
    PrimaryWins,
    BudgetDenials,
    ColdStarts,
    AggregateDelays,
    NotIdempotent,
    InFlightLimited,
    GaveUp,
    Samples,
    CensoredSamples,
    SamplesRefused,
    ClockAnomalies,
    RetriesThrottled,
}

/// Numbers hedgers apart: each request keeps its hedger's, and another
/// hedger refuses it (it would take its hedges out of that hedger's
/// in-flight count and record its latencies there). Wraps after 2³²
/// hedgers built in one process.
static HEDGER_IDS: AtomicU32 = AtomicU32::new(0);

/// A number no other hedger has (see `HEDGER_IDS`).
pub(crate) fn hedger_id() -> u32 {
    HEDGER_IDS.fetch_add(1, Ordering::Relaxed)
}

/// The state a hedger shares between requests, as the machine uses it.
pub(crate) trait Core<K> {
    fn config(&self) -> &HedgeConfig;
    /// The hedger's number ([`hedger_id`]).
    fn id(&self) -> u32;
    /// Hedges in flight at `now`.
    fn in_flight_count(&self, now: u64) -> u32;
    /// Counts a hedge sent at `now` as in flight, unless `cap` hedges
    /// already are (another thread took the last place since the check).
    fn in_flight_acquire(&mut self, now: u64, cap: Option<u32>) -> bool;
    /// Takes back a hedge sent at `sent_at`.
    fn in_flight_release(&mut self, sent_at: u64);
    /// Takes a hedge token for a request to `target` at `now`.
    fn acquire_token(&mut self, target: K, now: u64) -> bool;
    /// Records one sample of `target` (and the aggregate): whether the
    /// target's window took it.
    fn record_sample(&mut self, target: K, now: u64, elapsed: u64, exact: bool) -> bool;
    /// The samples recorded until [`end_samples`](Self::end_samples) are
    /// one event's (a commit's winner and losers, a give-up's attempts):
    /// the shared hedger publishes them together, so that none of them
    /// waits in a batch the others left (nothing for `Hedger`).
    fn begin_samples(&mut self) {}
    /// The event's samples are all recorded, at `now`.
    fn end_samples(&mut self, _now: u64) {}
    /// [`record_sample`](Self::record_sample) of an exact sample, on the
    /// common path (the sole primary's answer).
    fn record_answer(&mut self, target: K, now: u64, elapsed: u64) -> bool {
        self.record_sample(target, now, elapsed, true)
    }
    /// Notes a use of `target`'s slot by an attempt routed there at `now`
    /// (the table's use count, its last use); nothing without a table.
    fn touch_routed(&mut self, _target: K, _now: u64) {}
    fn bump(&mut self, stat: Stat);
    /// The retry balance ([`HedgeConfig::retry_throttle`]): a retryable
    /// failure takes a token. Returns the balance this take left (one
    /// atomic step in the shared hedger: the throttle decides on it, not
    /// on a later read that other threads' takes may have lowered).
    fn retry_balance_take(&mut self) -> u32;
    /// An answered request gives a token back, up to the full balance.
    fn retry_balance_give(&mut self);
    /// The delay given to the latest request that hedges on a timer.
    fn set_current_delay(&mut self, delay_ns: u64);
}

/// What kind of extra attempt to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extra {
    /// Raced against attempts still in flight: counts against
    /// `max_hedges`, the in-flight cap and the budget.
    Hedge,
    /// Replaces a failed attempt when none is left in flight: adds no
    /// concurrent load, so it counts against nothing but `max_retries`
    /// (which the failure checked).
    Retry,
}

/// A fresh request to `target` at `now`, given the delay the hedger found
/// for it (its window's, the aggregate's, the prior, or none).
#[inline]
pub(crate) fn start<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    target: K,
    now: u64,
    idempotency: Idempotency,
    delay: Option<(u64, DelaySource)>,
) -> Request<K> {
    let mut request = Request::new(target, now, core.id());
    let config = core.config();
    request.give_up_at = config.deadline_ns.map(|d| now.saturating_add(d));
    let max_hedges = config.max_hedges;
    match delay {
        Some((_, DelaySource::Target)) => {}
        Some((_, DelaySource::Aggregate)) => core.bump(Stat::AggregateDelays),
        Some((_, DelaySource::Prior)) | None => core.bump(Stat::ColdStarts),
    }
    request.plan = if idempotency == Idempotency::NotIdempotent {
        core.bump(Stat::NotIdempotent);
        Plan::NoHedge(NoHedge::NotIdempotent)
    } else if max_hedges == 0 {
        // Retries of retryable failures are still allowed.
        request.hedgeable = true;
        Plan::NoHedge(NoHedge::Disabled)
    } else {
        request.hedgeable = true;
        match delay {
            Some((delay_ns, source)) => {
                request.next_hedge_at = Some(now.saturating_add(delay_ns));
                core.set_current_delay(delay_ns);
                Plan::Hedge { delay_ns, source }
            }
            None => Plan::NoHedge(NoHedge::ColdStart),
        }
    };
    request
}

/// The plan of an idempotent request given its delay.
pub(crate) fn plan(config: &HedgeConfig, delay: Option<(u64, DelaySource)>) -> Plan {
    if config.max_hedges == 0 {
        return Plan::NoHedge(NoHedge::Disabled);
    }
    match delay {
        Some((delay_ns, source)) => Plan::Hedge { delay_ns, source },
        None => Plan::NoHedge(NoHedge::ColdStart),
    }
}

/// The caller's timer for `request` fired at `now`.
pub(crate) fn on_timer<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    now: u64,
) -> TimerAction {
    if request.owner != core.id() {
        return TimerAction::Skip(NoHedge::OtherHedger);
    }
    if request.phase != Phase::Racing {
        return TimerAction::Skip(NoHedge::Finished);
    }
    if request.give_up_at.is_some_and(|g| now >= g) {
        let cancel = give_up(core, request, now);
        return TimerAction::GiveUp { cancel };
    }
    let Some(due) = request.next_hedge_at else {
        return match (request.give_up_at, request.plan) {
            (Some(until), _) => TimerAction::Wait { until },
            // No timer was due: why there is none.
            (None, Plan::NoHedge(reason)) => TimerAction::Skip(reason),
            (None, Plan::Hedge { .. }) => TimerAction::Skip(request.ended),
        };
    };
    if now < due {
        let until = request.give_up_at.map_or(due, |g| g.min(due));
        return TimerAction::Wait { until };
    }
    match send_next(core, request, now, Extra::Hedge) {
        Ok(attempt) => TimerAction::SendHedge(attempt),
        Err(NoHedge::InFlightLimit) => {
            // Look again one delay later (a slot may have freed up), or, at
            // the end of time, never: the timer must move.
            match look_again_at(request, now) {
                Some(again) => request.next_hedge_at = Some(again),
                None => end_timer_hedging(request, NoHedge::InFlightLimit),
            }
            TimerAction::Skip(NoHedge::InFlightLimit)
        }
        Err(reason) => {
            end_timer_hedging(request, reason);
            TimerAction::Skip(reason)
        }
    }
}

/// When a hedge the in-flight cap held back at `now` is looked at again:
/// one delay later (at least 1 ns, so a zero delay cannot spin); `None`
/// when that is past the end of time, and the request hedges no more on
/// the timer (saturating would re-arm at `now` at the last nanosecond,
/// and a caller following the timer would spin; within a delay of the
/// end, 584 years on, one look fewer is not worth the code).
fn look_again_at<K: Copy>(request: &Request<K>, now: u64) -> Option<u64> {
    now.checked_add(request.delay_ns().unwrap_or(0).max(1))
}

/// No further hedge goes out on the timer, for `reason`: the places of
/// failed hedges no hedge took were no replacement after all. Out of
/// line: inlined at its call sites it took the embedded hedger's flash
/// past its CI gate (`.ci/run`, `HEDGER_FLASH_LIMIT`).
#[inline(never)]
fn end_timer_hedging<K>(request: &mut Request<K>, reason: NoHedge) {
    request.next_hedge_at = None;
    request.ended = reason;
    give_back_freed(request);
}

/// The places of failed hedges that no hedge took go back to those hedges
/// (they count against `max_hedges` again) and are no replacement: as if
/// they had never been freed, so that `1 + max_hedges + max_retries` still
/// bounds what the request sends.
fn give_back_freed<K>(request: &mut Request<K>) {
    request.replaced = request.replaced.saturating_sub(request.freed);
    request.hedges = request.hedges.saturating_add(request.freed);
    request.freed = 0;
}

/// Sends the next attempt of `request` at `now`, as a hedge (raced
/// against those in flight: hedges left, in-flight cap and budget
/// permitting) or as a retry (nothing left in flight: retries left
/// permitting), and schedules the next hedge one delay later.
fn send_next<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    now: u64,
    kind: Extra,
) -> Result<Attempt, NoHedge> {
    if !request.hedgeable {
        return Err(match request.plan {
            Plan::NoHedge(reason) => reason,
            Plan::Hedge { .. } => NoHedge::Disabled,
        });
    }
    if usize::from(request.sent) >= request::MAX_ATTEMPTS {
        return Err(NoHedge::AttemptsExhausted);
    }
    let max_hedges = core.config().max_hedges;
    match kind {
        Extra::Hedge => {
            if request.hedges >= max_hedges {
                return Err(NoHedge::AttemptsExhausted);
            }
            let cap = core.config().max_hedges_in_flight;
            if cap.is_some_and(|cap| core.in_flight_count(now) >= cap) {
                core.bump(Stat::InFlightLimited);
                return Err(NoHedge::InFlightLimit);
            }
            if !core.acquire_token(request.target(), now) {
                core.bump(Stat::BudgetDenials);
                return Err(NoHedge::BudgetDenied);
            }
            // Counted only if a place is still free: between the check and
            // here another thread may have taken the last one (the token
            // is then spent for nothing, which fails closed).
            if !core.in_flight_acquire(now, cap) {
                core.bump(Stat::InFlightLimited);
                return Err(NoHedge::InFlightLimit);
            }
        }
        // Its replacement was counted by the failure.
        Extra::Retry => {}
    }
    let attempt = Attempt(request.sent);
    if let Some(slot) = request.sent_at.get_mut(attempt.index()) {
        *slot = now;
    }
    request.sent = request.sent.saturating_add(1);
    match kind {
        Extra::Hedge => {
            request.hedges = request.hedges.saturating_add(1);
            // In the place of a failed one, if any is free.
            request.freed = request.freed.saturating_sub(1);
            request.hedge_attempts = request.hedge_attempts.with(attempt);
            request.leased = request.leased.with(attempt);
            core.bump(Stat::HedgesSent);
        }
        Extra::Retry => {
            request.retries = request.retries.saturating_add(1);
            core.bump(Stat::RetriesReleased);
        }
    }
    request.next_hedge_at = match request.delay_ns() {
        Some(d) if request.hedges < max_hedges => Some(now.saturating_add(d)),
        _ => {
            request.ended = NoHedge::AttemptsExhausted;
            None
        }
    };
    Ok(attempt)
}

/// Whether `attempt`'s commit, to the hedger `id`, is the common one: the
/// primary answers and it is all that was sent (nothing to release or
/// cancel), on the hedger that started it.
#[inline(always)]
pub(crate) fn is_sole_primary<K>(request: &Request<K>, attempt: Attempt, id: u32) -> bool {
    attempt.is_primary()
        && request.sent == 1
        && request.owner == id
        && request.phase == Phase::Racing
        && request.failed.is_empty()
}

/// The commit of the sole primary at `now` (see [`is_sole_primary`]): one
/// exact sample. Always inlined on 64-bit targets: it is most requests'
/// whole commit (on 32-bit ones, where flash is scarce, at the compiler's
/// choice).
#[cfg_attr(target_pointer_width = "64", inline(always))]
#[cfg_attr(not(target_pointer_width = "64"), inline)]
pub(crate) fn commit_sole_primary<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    now: u64,
) -> CommitOutcome {
    let stat = match request
        .sent_at
        .first()
        .and_then(|&sent| now.checked_sub(sent))
    {
        None => Stat::ClockAnomalies,
        Some(elapsed) if elapsed > core.config().max_sample_ns => Stat::SamplesRefused,
        Some(elapsed) => {
            if core.record_answer(request.target(), now, elapsed) {
                Stat::Samples
            } else {
                Stat::SamplesRefused
            }
        }
    };
    core.bump(stat);
    core.retry_balance_give();
    request.phase = Phase::Won(Attempt::PRIMARY);
    request.next_hedge_at = None;
    core.bump(Stat::PrimaryWins);
    CommitOutcome::Won {
        winner: Attempt::PRIMARY,
        cancel: AttemptSet::EMPTY,
    }
}

/// `attempt` of `request` gave its commit signal at `now`.
pub(crate) fn on_commit<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    attempt: Attempt,
    now: u64,
) -> CommitOutcome {
    if is_sole_primary(request, attempt, core.id()) {
        return commit_sole_primary(core, request, now);
    }
    // Never sent, or already failed: not an answer of this request's,
    // whether it races or is over; nor of this hedger's.
    if attempt.0 >= request.sent || request.failed.contains(attempt) || request.owner != core.id() {
        return CommitOutcome::Unknown;
    }
    if request.phase != Phase::Racing {
        return CommitOutcome::Late;
    }
    let racing = request.in_flight();
    record(core, request, racing, Some(attempt), now);
    release(core, request, racing);
    core.retry_balance_give();
    request.phase = Phase::Won(attempt);
    request.next_hedge_at = None;
    core.bump(if attempt.is_primary() {
        Stat::PrimaryWins
    } else if request.hedge_attempts.contains(attempt) {
        Stat::HedgeWins
    } else {
        Stat::RetryWins
    });
    CommitOutcome::Won {
        winner: attempt,
        cancel: racing.without(attempt),
    }
}

/// Records the elapsed time of every attempt in `attempts` at `now`: the
/// winner's as an exact sample, the others' as censored ones, each under
/// the target the attempt went to and in the aggregate.
#[inline]
fn record<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &Request<K>,
    attempts: AttemptSet,
    winner: Option<Attempt>,
    now: u64,
) {
    core.begin_samples();
    for a in attempts.iter() {
        record_one(core, request, a, winner == Some(a), now);
    }
    core.end_samples(now);
}

/// Records the elapsed time of attempt `a` at `now`: exact (the winner's)
/// or censored.
#[inline(always)]
fn record_one<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &Request<K>,
    a: Attempt,
    exact: bool,
    now: u64,
) {
    let Some(elapsed) = request.sent_at(a).and_then(|sent| now.checked_sub(sent)) else {
        core.bump(Stat::ClockAnomalies);
        return;
    };
    if elapsed > core.config().max_sample_ns {
        core.bump(Stat::SamplesRefused);
        return;
    }
    let target = request.target_of(a).unwrap_or(request.target());
    if target != request.target() {
        // Routed elsewhere: a use of that target, as a start is of its own.
        core.touch_routed(target, now);
    }
    let stat = if !core.record_sample(target, now, elapsed, exact) {
        Stat::SamplesRefused
    } else if exact {
        Stat::Samples
    } else {
        Stat::CensoredSamples
    };
    core.bump(stat);
}

/// Forgets the hedges among `attempts` in the in-flight count.
#[inline]
fn release<K: Copy + Eq, C: Core<K>>(core: &mut C, request: &mut Request<K>, attempts: AttemptSet) {
    // Usually empty (only hedges are leased): walk just the leased ones.
    let leased = request.leased.intersection(attempts);
    request.leased = request.leased.difference(leased);
    for a in leased.iter() {
        if let Some(sent) = request.sent_at(a) {
            core.in_flight_release(sent);
        }
    }
}

/// Ends `request` at `now`: the attempts in flight are recorded as
/// censored and returned, to cancel.
fn give_up<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    now: u64,
) -> AttemptSet {
    let cancel = request.in_flight();
    record(core, request, cancel, None, now);
    release(core, request, cancel);
    request.phase = Phase::GaveUp;
    request.next_hedge_at = None;
    core.bump(Stat::GaveUp);
    cancel
}

/// `attempt` of `request` failed (an error, not slowness) at `now`.
pub(crate) fn on_failure<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    attempt: Attempt,
    now: u64,
    failure: Failure,
) -> FailureOutcome {
    if attempt.0 >= request.sent
        || request.phase != Phase::Racing
        || request.failed.contains(attempt)
        || request.owner != core.id()
    {
        return FailureOutcome::Ignored;
    }
    request.failed = request.failed.with(attempt);
    release(core, request, AttemptSet::EMPTY.with(attempt));
    let balance = if failure == Failure::Retryable {
        core.retry_balance_take()
    } else {
        0 // fatal: given up below, never retried
    };
    let past_deadline = request.give_up_at.is_some_and(|g| now >= g);
    if failure == Failure::Fatal || past_deadline {
        return FailureOutcome::GiveUp {
            cancel: give_up(core, request, now),
        };
    }
    let racing = !request.in_flight().is_empty();
    if !racing {
        // The race is over: a place freed for a hedge that never went out
        // (not due yet, or held back by the in-flight cap) was none.
        give_back_freed(request);
    }
    // At most `max_retries` failed attempts are replaced, however they
    // are: a request sends at most `1 + max_hedges + max_retries`.
    let max_retries = core.config().max_retries;
    if request.replaced >= max_retries {
        return if racing {
            FailureOutcome::Continue
        } else {
            FailureOutcome::GiveUp {
                cancel: give_up(core, request, now),
            }
        };
    }
    // Retryable: race a fresh attempt now rather than wait for the delay —
    // a hedge if others are still in flight, a retry if not. Each counts
    // as one replacement, and so does a failed hedge's place freed for
    // the race (taken now, or on the timer if not at once) or, after a
    // retry, for a hedge of it.
    let was_hedge = request.hedge_attempts.contains(attempt);
    let freed = racing && was_hedge;
    if freed {
        request.hedges = request.hedges.saturating_sub(1);
        request.replaced = request.replaced.saturating_add(1);
        request.freed = request.freed.saturating_add(1);
    }
    let kind = if racing { Extra::Hedge } else { Extra::Retry };
    // Only where a retry would go out (an idempotent request with an
    // attempt left) is one throttled.
    let could_retry = request.hedgeable && usize::from(request.sent) < request::MAX_ATTEMPTS;
    if kind == Extra::Retry && could_retry && retries_throttled(core.config(), balance) {
        core.bump(Stat::RetriesThrottled);
        return FailureOutcome::GiveUp {
            cancel: give_up(core, request, now),
        };
    }
    let sent = send_next(core, request, now, kind);
    if sent.is_ok() && !freed {
        request.replaced = request.replaced.saturating_add(1);
    }
    // A failed hedge replaced by a retry: its place goes to a hedge of the
    // retry, as one more replacement, while one is left (else the bound
    // 1 + max_hedges + max_retries would not hold).
    if sent.is_ok() && kind == Extra::Retry && was_hedge && request.replaced < max_retries {
        request.hedges = request.hedges.saturating_sub(1);
        request.replaced = request.replaced.saturating_add(1);
        request.freed = request.freed.saturating_add(1);
        request.next_hedge_at = request.delay_ns().map(|d| now.saturating_add(d));
    }
    match sent {
        Ok(next) => FailureOutcome::SendNow(next),
        Err(reason) if racing => {
            // As on the timer: a denial ends hedging for the request, a
            // full in-flight cap is looked at again one delay later.
            match reason {
                NoHedge::BudgetDenied => end_timer_hedging(request, reason),
                NoHedge::InFlightLimit => {
                    // Past the end of time: the timer already armed, if
                    // any, ends the hedging when the cap holds it back.
                    if let Some(again) = look_again_at(request, now) {
                        request.next_hedge_at =
                            Some(request.next_hedge_at.map_or(again, |t| t.min(again)));
                    }
                }
                _ => {}
            }
            FailureOutcome::Continue
        }
        Err(_) => FailureOutcome::GiveUp {
            cancel: give_up(core, request, now),
        },
    }
}

/// Whether retries are throttled at `balance`: at half the tokens or
/// below (never with a throttle of 0).
#[inline]
fn retries_throttled(config: &HedgeConfig, balance: u32) -> bool {
    let full = u32::from(config.retry_throttle);
    full > 0 && balance.saturating_mul(2) <= full
}

/// The caller gives `request` up at `now`.
pub(crate) fn abandon<K: Copy + Eq, C: Core<K>>(
    core: &mut C,
    request: &mut Request<K>,
    now: u64,
) -> AttemptSet {
    if request.phase != Phase::Racing || request.owner != core.id() {
        return AttemptSet::EMPTY;
    }
    give_up(core, request, now)
}
