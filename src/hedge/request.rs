//! One request's race: its attempts, its timer, and what each event decides.

use super::config::MAX_HEDGES;

/// Attempts a request can hold: the primary and up to [`MAX_HEDGES`] hedges.
pub(crate) const MAX_ATTEMPTS: usize = MAX_HEDGES as usize + 1;

/// Whether a request may be sent more than once.
///
/// The state machine cannot know whether duplicating a request is safe: a
/// hedged `POST /payments` may charge twice. Every
/// [`Hedger::start`](super::Hedger::start) call says it explicitly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Idempotency {
    /// Sending this request twice is harmless (a read, or a write with an
    /// idempotency key): it may be hedged.
    Idempotent,
    /// Sending it twice could do harm: it is never hedged, only measured.
    NotIdempotent,
}

/// One attempt of a request: 0 is the primary, 1.. are hedges in the order
/// sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Attempt(pub u8);

impl Attempt {
    /// The primary attempt.
    pub const PRIMARY: Self = Self(0);

    /// Whether this is the primary.
    pub const fn is_primary(self) -> bool {
        self.0 == 0
    }

    /// The attempt's number, usable as an index into the caller's own table.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A set of attempts (a bit mask), e.g. those to cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AttemptSet(u8);

impl AttemptSet {
    /// The empty set.
    pub const EMPTY: Self = Self(0);

    /// Whether `attempt` is in the set.
    pub const fn contains(self, attempt: Attempt) -> bool {
        attempt.0 < 8 && self.0 & (1 << attempt.0) != 0
    }

    /// How many attempts the set holds.
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The attempts, in ascending order.
    pub fn iter(self) -> impl Iterator<Item = Attempt> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            // The lowest set bit, then clear it.
            let i = bits.trailing_zeros() as u8;
            bits &= bits.wrapping_sub(1);
            Some(Attempt(i))
        })
    }

    /// The attempts in both sets.
    #[must_use]
    pub(crate) const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The attempts of `self` not in `other`.
    #[must_use]
    pub(crate) const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// This set plus `attempt` (attempts beyond 7 are ignored).
    #[must_use]
    pub const fn with(self, attempt: Attempt) -> Self {
        if attempt.0 < 8 {
            Self(self.0 | (1 << attempt.0))
        } else {
            self
        }
    }

    /// This set minus `attempt`.
    #[must_use]
    pub const fn without(self, attempt: Attempt) -> Self {
        if attempt.0 < 8 {
            Self(self.0 & !(1 << attempt.0))
        } else {
            self
        }
    }
}

/// Why a request will not be hedged (at all, or any further).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NoHedge {
    /// No warm window (the target's or the aggregate) and no prior delay.
    ColdStart,
    /// Hedging is disabled (`max_hedges` is 0).
    Disabled,
    /// The caller said the request is not idempotent.
    NotIdempotent,
    /// The budget refused a token.
    BudgetDenied,
    /// Every allowed attempt has been sent.
    AttemptsExhausted,
    /// The cap on hedges in flight across requests was reached.
    InFlightLimit,
    /// An attempt already answered, or the request was given up.
    Finished,
    /// The request was started by another hedger: nothing was done.
    OtherHedger,
}

/// Where a request's hedge delay came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DelaySource {
    /// The target's own latency window.
    Target,
    /// The window shared by every target (the target's own is cold, or it
    /// has no slot in the table).
    Aggregate,
    /// The configured prior: no window is warm yet.
    Prior,
}

impl DelaySource {
    /// Whether the delay was estimated from measured latencies.
    pub const fn is_data_driven(self) -> bool {
        !matches!(self, Self::Prior)
    }
}

/// What [`Hedger::start`](super::Hedger::start) decided for a request
/// (read it with [`Request::plan`]). It only informs: the timer to arm is
/// always [`Request::next_timer`], which also covers the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Plan {
    /// A hedge is due `delay_ns` after the primary's send, if it has not
    /// answered by then.
    Hedge {
        /// The delay in force (it may be 0 with `min_delay_ns(0)`).
        delay_ns: u64,
        /// Where it came from.
        source: DelaySource,
    },
    /// No hedge will be sent on a timer (a retryable failure may still
    /// release the next attempt; see [`Hedger::on_failure`](super::Hedger::on_failure)).
    NoHedge(NoHedge),
}

/// What [`Hedger::on_timer`](super::Hedger::on_timer) decided.
///
/// Must be acted on: a [`SendHedge`](Self::SendHedge) ignored is a hedge the
/// hedger counts as sent (a budget token spent, a censored sample recorded
/// when the request ends) that never went out. So it is `#[must_use]`, as
/// are [`CommitOutcome`] and [`FailureOutcome`]:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// use tailguard::hedge::{HedgeConfig, Hedger, Idempotency};
///
/// let mut hedger = Hedger::new(HedgeConfig::DEFAULT.prior_delay_ns(1_000)).unwrap();
/// let mut req = hedger.start((), 0, Idempotency::Idempotent);
/// hedger.on_timer(&mut req, 1_000); // error: unused `TimerAction`
/// ```
///
/// ```
/// #![deny(unused_must_use)]
/// use tailguard::hedge::{HedgeConfig, Hedger, Idempotency, TimerAction};
///
/// let mut hedger = Hedger::new(HedgeConfig::DEFAULT.prior_delay_ns(1_000)).unwrap();
/// let mut req = hedger.start((), 0, Idempotency::Idempotent);
/// if let TimerAction::SendHedge(hedge) = hedger.on_timer(&mut req, 1_000) {
///     let _ = hedge; // ... send it
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a SendHedge must be sent (the hedger counts it as sent), a GiveUp's attempts cancelled"]
pub enum TimerAction {
    /// Send this hedge now; then arm the timer at
    /// [`Request::next_timer`].
    SendHedge(Attempt),
    /// Too early (or the clock went backwards): nothing to do before `until`.
    Wait {
        /// When to call again.
        until: u64,
    },
    /// No hedge this time, for this reason; the request races on with what
    /// it has (check [`Request::next_timer`] for a deadline still pending).
    Skip(NoHedge),
    /// The request's deadline passed: cancel these attempts and fail it.
    GiveUp {
        /// The attempts still in flight.
        cancel: AttemptSet,
    },
}

/// What [`Hedger::on_commit`](super::Hedger::on_commit) decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a Won's losers must be cancelled, a Late answer discarded"]
pub enum CommitOutcome {
    /// This attempt won: use its answer, cancel the others.
    Won {
        /// The winner.
        winner: Attempt,
        /// The attempts still in flight, to cancel.
        cancel: AttemptSet,
    },
    /// Another attempt had already won (or the request was given up):
    /// discard this answer.
    Late,
    /// No such attempt was sent (or it had already reported failure):
    /// the event is ignored.
    Unknown,
}

/// How an attempt failed: what the caller knows about the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Failure {
    /// Another attempt may succeed (a connection reset, an overloaded or
    /// unavailable replica, gRPC `UNAVAILABLE`): the next attempt is released
    /// now, budget permitting, instead of waiting for the hedge delay.
    Retryable,
    /// Every attempt would fail alike (a bad request, permission denied,
    /// not found): the request ends and the rest are cancelled.
    Fatal,
}

/// What [`Hedger::on_failure`](super::Hedger::on_failure) decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a SendNow must be sent (the hedger counts it as sent), a GiveUp's attempts cancelled"]
pub enum FailureOutcome {
    /// Send this attempt now (a retryable failure released it early); then
    /// arm the timer at [`Request::next_timer`].
    SendNow(Attempt),
    /// Other attempts are still in flight: keep waiting for them.
    Continue,
    /// The request has failed: cancel these attempts and report the error.
    GiveUp {
        /// The attempts still in flight.
        cancel: AttemptSet,
    },
    /// The request had already finished, or no such attempt was sent:
    /// the event is ignored.
    Ignored,
}

/// Where a request's race stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) enum Phase {
    Racing,
    Won(Attempt),
    GaveUp,
}

/// The state of one request, owned by the caller and passed back with each
/// event. Holds no reference into the hedger.
///
/// A request is one value: it is neither `Copy` nor `Clone`, so it cannot
/// be committed twice or release another request's hedge (but see *Time*
/// in the [module docs](super) for hedges stamped by another clock). It
/// belongs to the hedger that started it: another hedger does nothing
/// with it (its timer is [`TimerAction::Skip`]`(`[`NoHedge::OtherHedger`]`)`,
/// a commit [`CommitOutcome::Unknown`](super::CommitOutcome::Unknown), a
/// failure [`FailureOutcome::Ignored`](super::FailureOutcome::Ignored),
/// `abandon` cancels nothing), so that it can neither take its hedges out
/// of that hedger's in-flight count nor record its latencies there. Dropping it
/// without a final event is safe: the hedges it had in flight stop counting
/// against [`max_hedges_in_flight`](super::HedgeConfig::max_hedges_in_flight)
/// on their own within [`in_flight_lease_ns`](super::HedgeConfig::in_flight_lease_ns),
/// and it held nothing else (budget tokens are spent when a hedge is sent).
///
/// ```compile_fail
/// # use tailguard::hedge::{Hedger, HedgeConfig, Idempotency};
/// let mut hedger = Hedger::new(HedgeConfig::DEFAULT).unwrap();
/// let request = hedger.start((), 0, Idempotency::Idempotent);
/// let copy = request.clone(); // a request is one value
/// ```
///
/// ```compile_fail
/// # use tailguard::hedge::{Attempt, Hedger, HedgeConfig, Idempotency};
/// let mut hedger = Hedger::new(HedgeConfig::DEFAULT).unwrap();
/// let request = hedger.start((), 0, Idempotency::Idempotent);
/// let mut a = request;
/// let mut b = request; // moved: it cannot be committed twice
/// ```
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "a request must be driven to its end: arm a timer at `next_timer()` and report commits"]
pub struct Request<K> {
    /// The target of each attempt (the primary's unless routed elsewhere).
    pub(crate) targets: [K; MAX_ATTEMPTS],
    pub(crate) sent_at: [u64; MAX_ATTEMPTS],
    /// Attempts `0 .. sent` have been sent.
    pub(crate) sent: u8,
    pub(crate) failed: AttemptSet,
    pub(crate) phase: Phase,
    /// Also the delay between attempts: `Plan::Hedge`'s, when hedging on
    /// a timer (one field, so that `start` writes it once).
    pub(crate) plan: Plan,
    /// When the next hedge is due; `None` when no further hedge will be sent
    /// on a timer.
    pub(crate) next_hedge_at: Option<u64>,
    pub(crate) give_up_at: Option<u64>,
    /// Whether the caller allowed duplicates (idempotent): hedges and
    /// retries alike.
    pub(crate) hedgeable: bool,
    /// Hedges sent and not failed: what counts against `max_hedges` (a
    /// hedge that failed frees its place for another, as one of the
    /// request's replacements).
    pub(crate) hedges: u8,
    /// Every hedge sent.
    pub(crate) hedge_attempts: AttemptSet,
    /// Retries sent (replacing a failed attempt when none was in flight).
    pub(crate) retries: u8,
    /// Failed attempts replaced (by a retry, or by a hedge in the place
    /// of a failed one): what counts against `max_retries`.
    pub(crate) replaced: u8,
    /// Places of failed hedges counted in `replaced` that no hedge has
    /// taken yet: given back if hedging on the timer ends first.
    pub(crate) freed: u8,
    /// Why hedging on the timer ended, once it has (with a hedging plan:
    /// a request whose plan is not to hedge answers its plan's reason).
    pub(crate) ended: NoHedge,
    /// The hedger that started it (see `machine::hedger_id`).
    pub(crate) owner: u32,
    /// Hedges counted in the hedger's in-flight slots, not yet released.
    pub(crate) leased: AttemptSet,
}

/// Why [`Request::route`] refused an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RouteError {
    /// The primary goes to the target the request was started for.
    Primary,
    /// No such attempt: a request sends at most
    /// [`MAX_HEDGES`](super::MAX_HEDGES)` + 1` attempts.
    NoSuchAttempt,
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Primary => "the primary goes to the target its request was started for",
            Self::NoSuchAttempt => "no such attempt: a request sends at most 8 attempts",
        })
    }
}

impl core::error::Error for RouteError {}

impl<K: Copy> Request<K> {
    pub(crate) fn new(target: K, now: u64, owner: u32) -> Self {
        Self {
            targets: [target; MAX_ATTEMPTS],
            // The primary's; the others are read only once sent (`sent_at`
            // checks), so filling them all is as good as zeros, and cheaper.
            sent_at: [now; MAX_ATTEMPTS],
            sent: 1,
            failed: AttemptSet::EMPTY,
            phase: Phase::Racing,
            plan: Plan::NoHedge(NoHedge::ColdStart),
            next_hedge_at: None,
            give_up_at: None,
            hedgeable: false,
            hedges: 0,
            hedge_attempts: AttemptSet::EMPTY,
            retries: 0,
            replaced: 0,
            freed: 0,
            ended: NoHedge::AttemptsExhausted,
            owner,
            leased: AttemptSet::EMPTY,
        }
    }

    /// The target this request was started for (the primary's).
    pub fn target(&self) -> K {
        self.targets[0]
    }

    /// The target `attempt` goes to: the primary's unless
    /// [`route`](Self::route)d elsewhere.
    pub fn target_of(&self, attempt: Attempt) -> Option<K> {
        self.targets.get(attempt.index()).copied()
    }

    /// Says that `attempt` went to `target` (a hedge sent to another
    /// replica), so that its latency is recorded where it was measured and
    /// the attempt counts as a use of `target`'s slot in a
    /// [`Hedger`](super::Hedger)'s table (its use count and last use, as a
    /// start counts for the primary's) when its sample is recorded. Call it
    /// right after sending the attempt, before any event for it. The budget
    /// is always the primary target's.
    ///
    /// # Errors
    /// [`RouteError::Primary`] for the primary, whose target is the one the
    /// request was started for: the start took its delay, deposited into
    /// its budget and counted a use of its slot, and a hedge is paid from
    /// that budget. Start the request for the target the primary goes to.
    /// [`RouteError::NoSuchAttempt`] for an attempt no request can send
    /// (from `Attempt(`[`MAX_HEDGES`](super::MAX_HEDGES)` + 1)` on).
    pub fn route(&mut self, attempt: Attempt, target: K) -> Result<(), RouteError> {
        if attempt.is_primary() {
            return Err(RouteError::Primary);
        }
        let slot = self
            .targets
            .get_mut(attempt.index())
            .ok_or(RouteError::NoSuchAttempt)?;
        *slot = target;
        Ok(())
    }

    /// What the hedger decided at the start.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// When the caller's timer should next fire for this request (the next
    /// hedge or the deadline, whichever is sooner); `None` once nothing is
    /// pending. The single source of truth for timers.
    pub fn next_timer(&self) -> Option<u64> {
        if self.phase != Phase::Racing {
            return None;
        }
        match (self.next_hedge_at, self.give_up_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Attempts sent so far, the primary included.
    pub fn attempts_sent(&self) -> u8 {
        self.sent
    }

    /// When `attempt` was sent, if it was.
    pub fn sent_at(&self, attempt: Attempt) -> Option<u64> {
        (attempt.0 < self.sent)
            .then(|| self.sent_at.get(attempt.index()).copied())
            .flatten()
    }

    /// Every attempt sent so far, in order.
    pub fn sent_attempts(&self) -> impl Iterator<Item = Attempt> {
        (0..self.sent).map(Attempt)
    }

    /// Attempts sent and neither failed nor finished.
    pub fn in_flight(&self) -> AttemptSet {
        if self.phase != Phase::Racing {
            return AttemptSet::EMPTY;
        }
        let all = (1u16 << self.sent).wrapping_sub(1) as u8;
        AttemptSet(all & !self.failed.0)
    }

    /// The winner, once an attempt has committed.
    pub fn winner(&self) -> Option<Attempt> {
        match self.phase {
            Phase::Won(a) => Some(a),
            _ => None,
        }
    }

    /// Whether the request is over (won or given up).
    pub fn is_finished(&self) -> bool {
        self.phase != Phase::Racing
    }

    /// The delay between attempts in force for this request, if it hedges
    /// on a timer (`Some(0)` with a zero minimum delay).
    #[inline]
    pub fn delay_ns(&self) -> Option<u64> {
        match self.plan {
            Plan::Hedge { delay_ns, .. } => Some(delay_ns),
            Plan::NoHedge(_) => None,
        }
    }

    /// Hedges sent so far (extra attempts raced against others in flight).
    pub fn hedges_sent(&self) -> u32 {
        self.hedge_attempts.len()
    }

    /// The attempts sent as hedges (raced against others in flight); the
    /// rest, beyond the primary, were retries.
    pub fn hedge_attempts(&self) -> AttemptSet {
        self.hedge_attempts
    }

    /// Retries sent so far (attempts that replaced a failed one when none
    /// was left in flight).
    pub fn retries_sent(&self) -> u8 {
        self.retries
    }
}
