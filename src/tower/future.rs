//! The race behind one call: attempts, the hedge timer, and the hedger's
//! decisions.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::boxed::Box;
use std::vec::Vec;

use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;

use super::clock::TokioClock;
use super::error::HedgeError;
use super::policy::{CommitSignal, Policy};
use crate::budget::HedgeBudget;
use crate::guard::RequestGuard;
use crate::hedge::{Attempt, CommitOutcome, Failure, FailureOutcome, TimerAction};
use crate::mapping::IndexMapping;
use crate::FromRelativeAccuracy;

pin_project! {
    /// One attempt: waiting for its service to be ready (extra attempts),
    /// then the call, then the commit signal.
    #[project = AttemptProj]
    pub(crate) enum AttemptFuture<S, Req, F>
    where
        S: Service<Req>,
    {
        Waiting { service: S, request: Option<Req> },
        Calling { #[pin] future: S::Future },
        Committing { #[pin] commit: F },
        Done,
    }
}

impl<S, Req, F> AttemptFuture<S, Req, F>
where
    S: Service<Req>,
{
    /// The primary: already called on a ready service.
    pub(crate) fn calling(future: S::Future) -> Self {
        Self::Calling { future }
    }

    /// Polls the attempt to its commit signal (or its error); `Pending`
    /// forever once done.
    fn poll_attempt<C>(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        signal: &C,
    ) -> Poll<Result<C::Response, AttemptError<S::Error>>>
    where
        C: CommitSignal<S::Response, S::Error, Future = F>,
        F: Future<Output = Result<C::Response, S::Error>>,
    {
        loop {
            match self.as_mut().project() {
                AttemptProj::Waiting { service, request } => {
                    if let Err(e) = core::task::ready!(service.poll_ready(cx)) {
                        self.set(Self::Done);
                        return Poll::Ready(Err(AttemptError::Unsent(e)));
                    }
                    let Some(request) = request.take() else {
                        self.set(Self::Done);
                        return Poll::Pending;
                    };
                    let future = service.call(request);
                    self.set(Self::Calling { future });
                }
                AttemptProj::Calling { future } => match core::task::ready!(future.poll(cx)) {
                    Ok(response) => {
                        let commit = signal.commit(response);
                        self.set(Self::Committing { commit });
                    }
                    Err(e) => {
                        self.set(Self::Done);
                        return Poll::Ready(Err(AttemptError::Failed(e)));
                    }
                },
                AttemptProj::Committing { commit } => {
                    let result = core::task::ready!(commit.poll(cx));
                    self.set(Self::Done);
                    return Poll::Ready(result.map_err(AttemptError::Failed));
                }
                AttemptProj::Done => return Poll::Pending,
            }
        }
    }
}

/// Why an attempt ended without its commit signal.
pub(crate) enum AttemptError<E> {
    /// Its service clone failed readiness: it never went out.
    Unsent(E),
    /// It went out and failed (or its commit signal did).
    Failed(E),
}

pin_project! {
    /// What a request needs only once a hedge is due or an extra attempt
    /// goes out: the hedge timer, the extra attempts and the service clone
    /// being readied. Built (one allocation, as the timer alone needs) at
    /// first need: a request answered at its first poll, or one that will
    /// not hedge and fails nothing, never builds it, and its future drops
    /// one pointer. The timer itself is built only once a hedge is due: a
    /// request that only retries needs no time driver.
    struct Race<S, Req, F>
    where
        S: Service<Req>,
    {
        // Armed at `armed`, once a hedge is due.
        #[pin]
        sleep: Option<Sleep>,
        // The clock reading `sleep` is armed at.
        armed: u64,
        // The clock reading whose timer has fired: a hedge due then,
        // waiting for readiness, polls only the deadline's.
        fired: Option<u64>,
        extras: Vec<Extra<S, Req, F>>,
        // A clone of the service for the hedge that is due, being readied.
        ready: Option<S>,
    }
}

/// A request's [`Race`], if built.
type RaceSlot<S, Req, F> = Option<Pin<Box<Race<S, Req, F>>>>;

impl<S: Service<Req>, Req, F> Race<S, Req, F> {
    /// A race whose timer is armed at `at` (`deadline`), if it has one.
    fn new(timer: Option<(Instant, u64)>) -> Pin<Box<Self>> {
        Box::pin(Self {
            sleep: timer.map(|(deadline, _)| sleep_until(deadline)),
            armed: timer.map_or(0, |(_, at)| at),
            fired: None,
            extras: Vec::new(),
            ready: None,
        })
    }

    /// The race in `slot`, built (without a timer) if there is none.
    fn of(slot: &mut RaceSlot<S, Req, F>) -> Pin<&mut Self> {
        slot.get_or_insert_with(|| Self::new(None)).as_mut()
    }

    /// Polls the timer armed at `at` (clock nanoseconds), building the
    /// race or its timer, or moving the timer, first. Ready once `at` has
    /// passed.
    fn poll_at(
        slot: &mut RaceSlot<S, Req, F>,
        cx: &mut Context<'_>,
        clock: &TokioClock,
        at: u64,
    ) -> Poll<()> {
        let Some(deadline) = clock.instant(at) else {
            return Poll::Pending; // beyond any `Instant`: never
        };
        let mut race = slot
            .get_or_insert_with(|| Self::new(Some((deadline, at))))
            .as_mut()
            .project();
        match race.sleep.as_mut().as_pin_mut() {
            Some(sleep) if *race.armed != at => sleep.reset(deadline),
            Some(_) => {}
            None => race.sleep.set(Some(sleep_until(deadline))),
        }
        *race.armed = at;
        let polled = match race.sleep.as_pin_mut() {
            Some(sleep) => sleep.poll(cx),
            None => Poll::Pending, // just set: not reached
        };
        if polled.is_ready() {
            *race.fired = Some(at);
        }
        polled
    }

    /// Whether the timer at `at` has fired already.
    fn has_fired(slot: &RaceSlot<S, Req, F>, at: u64) -> bool {
        slot.as_ref().is_some_and(|race| race.fired == Some(at))
    }

    /// Lets the clone being readied go (and its place in the inner
    /// service's queue); returns it.
    fn take_ready(slot: &mut RaceSlot<S, Req, F>) -> Option<S> {
        slot.as_mut()
            .and_then(|race| race.as_mut().project().ready.take())
    }
}

/// What extra attempts are made from: a service to clone and a copy of the
/// request.
#[derive(Debug)]
pub(crate) struct Spare<S, Req> {
    pub(crate) service: S,
    pub(crate) request: Req,
}

/// An extra attempt, boxed: extra attempts are rare, and boxing them keeps
/// the common path (the primary alone) free of allocation.
type Extra<S, Req, F> = (Attempt, Pin<Box<AttemptFuture<S, Req, F>>>);

pin_project! {
    /// The response future of [`HedgeService`](super::HedgeService): races
    /// the attempts the hedger releases and resolves with the first one
    /// that gives its commit signal. Dropping it drops every attempt
    /// (cancelling them) and gives the request up in the hedger (see
    /// [`RequestGuard`]).
    ///
    /// `G` is the request's [`RequestGuard<TokioClock, B, T>`] (a type
    /// parameter because `pin-project-lite` takes no const generics).
    pub struct ResponseFuture<S, Req, P, C, G>
    where
        S: Service<Req>,
        C: CommitSignal<S::Response, S::Error>,
    {
        #[pin]
        primary: AttemptFuture<S, Req, C::Future>,
        race: RaceSlot<S, Req, C::Future>,
        spare: Option<Spare<S, Req>>,
        guard: G,
        policy: P,
        signal: C,
    }
}

impl<S, Req, P, C, B, const T: usize, M>
    ResponseFuture<S, Req, P, C, RequestGuard<TokioClock, B, T, M>>
where
    S: Service<Req>,
    C: CommitSignal<S::Response, S::Error>,
    B: HedgeBudget + 'static,
    M: IndexMapping + FromRelativeAccuracy + 'static,
{
    /// Starts the request's guard, then calls the primary (timed from
    /// just before it goes out). Built in place, the guard (a few hundred
    /// bytes) inside the future: no copy of it a request.
    #[inline(always)]
    pub(crate) fn start(
        guard: impl FnOnce() -> RequestGuard<TokioClock, B, T, M>,
        primary: impl FnOnce() -> S::Future,
        spare: Option<Spare<S, Req>>,
        policy: P,
        signal: C,
    ) -> Self {
        Self {
            guard: guard(),
            primary: AttemptFuture::calling(primary()),
            race: None,
            spare,
            policy,
            signal,
        }
    }
}

/// Where an attempt's result leaves the race.
enum Settled<R, E> {
    /// The race goes on.
    Racing,
    /// The request is over with this result.
    Over(Result<R, HedgeError<E>>),
}

impl<S, Req, P, C, B, const T: usize, M> Future
    for ResponseFuture<S, Req, P, C, RequestGuard<TokioClock, B, T, M>>
where
    S: Service<Req> + Clone,
    P: Policy<Req, S::Error>,
    C: CommitSignal<S::Response, S::Error>,
    B: HedgeBudget + 'static,
    M: IndexMapping + FromRelativeAccuracy + 'static,
{
    type Output = Result<C::Response, HedgeError<S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        // The fields an event needs to launch attempts.
        macro_rules! launch {
            () => {
                Launch {
                    race: &mut *this.race,
                    spare: &mut *this.spare,
                    guard: &mut *this.guard,
                    policy: &*this.policy,
                }
            };
        }
        // The request is over: cancel every attempt still running now, not
        // when the caller drops this future (and give back the place a
        // clone holds in the inner service's queue).
        macro_rules! finish {
            ($result:expr) => {{
                if let Some(race) = this.race.as_mut() {
                    let race = race.as_mut().project();
                    race.extras.clear();
                    *race.ready = None;
                }
                this.primary.set(AttemptFuture::Done);
                Poll::Ready($result)
            }};
        }
        loop {
            // The primary first: with no hedge sent, it is all there is.
            if let Poll::Ready(result) = this.primary.as_mut().poll_attempt(cx, this.signal) {
                if let Settled::Over(result) = launch!().settle(Attempt::PRIMARY, result) {
                    return finish!(result);
                }
            }
            // Extra attempts; those launched while polling are polled in
            // the same pass (their first poll registers the waker).
            let mut i = 0;
            while let Some(race) = this.race.as_mut() {
                let extras = race.as_mut().project().extras;
                let Some((attempt, future)) = extras.get_mut(i) else {
                    break;
                };
                let attempt = *attempt;
                let Poll::Ready(result) = future.as_mut().poll_attempt(cx, this.signal) else {
                    i = i.saturating_add(1);
                    continue;
                };
                extras.swap_remove(i);
                if let Settled::Over(result) = launch!().settle(attempt, result) {
                    return finish!(result);
                }
            }
            // A clone readied for a hedge no longer due (it went to an
            // attempt a failure released, or hedging ended) lets its place
            // in the inner service's queue go.
            if this.guard.request().next_hedge_at.is_none() {
                Race::take_ready(this.race);
            }
            // The timer, only while one is due: none is built for a
            // request that will not hedge, or answers at its first poll.
            let Some(at) = this.guard.next_timer() else {
                return Poll::Pending;
            };
            let clock = *this.guard.clock();
            // Once `at` has fired (a hedge due, its clone waiting for
            // readiness), the timer is armed at the deadline below and
            // left there: armed back at `at`, past, it would fire at once
            // and wake this task again, a busy loop.
            if !Race::has_fired(this.race, at)
                && Race::poll_at(this.race, cx, &clock, at).is_pending()
            {
                return Poll::Pending;
            }
            // A hedge is due (not the deadline): it goes out on a clone of
            // the service readied *before* the hedger releases it, so that
            // back-pressure spends no token and no in-flight place, and the
            // hedge is timed from its call, not from its timer.
            let request = this.guard.request();
            let deadline = request.give_up_at;
            let hedge_due =
                request.next_hedge_at.is_some_and(|h| h <= at) && deadline.is_none_or(|g| g > at);
            let mut readied = false;
            if let (true, Some(spare)) = (hedge_due, this.spare.as_ref()) {
                let race = Race::of(this.race).project();
                let service = race.ready.get_or_insert_with(|| spare.service.clone());
                match service.poll_ready(cx) {
                    Poll::Ready(Ok(())) => readied = true,
                    // The hedge cannot go out: it is not released (no
                    // token, no count), and no later attempt is either.
                    Poll::Ready(Err(_)) => {
                        launch!().stop();
                        continue;
                    }
                    // Waiting for readiness: only the deadline ends that
                    // (`on_timer` below then gives up).
                    Poll::Pending => {
                        let expired = deadline
                            .is_some_and(|g| Race::poll_at(this.race, cx, &clock, g).is_ready());
                        if !expired {
                            return Poll::Pending;
                        }
                    }
                }
            }
            match this.guard.on_timer() {
                TimerAction::SendHedge(attempt) => {
                    let readied = if readied {
                        Race::take_ready(this.race)
                    } else {
                        None
                    };
                    let settled = launch!().send(attempt, readied);
                    if let Settled::Over(result) = settled {
                        return finish!(result);
                    }
                }
                TimerAction::GiveUp { .. } => return finish!(Err(HedgeError::Deadline)),
                // Re-armed at the new `next_timer` on the next pass; a
                // readied clone is let go (its reservation with it).
                TimerAction::Wait { .. } | TimerAction::Skip(_) => {
                    Race::take_ready(this.race);
                }
            }
        }
    }
}

/// The fields an event needs to launch attempts.
struct Launch<
    'a,
    S: Service<Req>,
    Req,
    P,
    F,
    B: HedgeBudget + 'static,
    const T: usize,
    M: IndexMapping + FromRelativeAccuracy + 'static,
> {
    /// The extra attempts, and the clone of the service being readied
    /// for a hedge: its place in the inner service's queue goes to the
    /// next attempt sent.
    race: &'a mut RaceSlot<S, Req, F>,
    spare: &'a mut Option<Spare<S, Req>>,
    guard: &'a mut RequestGuard<TokioClock, B, T, M>,
    policy: &'a P,
}

impl<S, Req, P, F, B, const T: usize, M> Launch<'_, S, Req, P, F, B, T, M>
where
    S: Service<Req> + Clone,
    P: Policy<Req, S::Error>,
    B: HedgeBudget + 'static,
    M: IndexMapping + FromRelativeAccuracy + 'static,
{
    /// Reports `attempt`'s result to the hedger and acts on its decision.
    /// Inlined (into both call sites of `poll`): a commit is every
    /// request's last event; the error paths stay out of line.
    #[inline(always)]
    fn settle<R>(
        &mut self,
        attempt: Attempt,
        result: Result<R, AttemptError<S::Error>>,
    ) -> Settled<R, S::Error> {
        match result {
            Ok(response) => match self.guard.on_commit(attempt) {
                CommitOutcome::Won { .. } => Settled::Over(Ok(response)),
                // Cannot happen while racing; the answer is not ours.
                CommitOutcome::Late | CommitOutcome::Unknown => Settled::Racing,
            },
            Err(error) => self.settle_error(attempt, error),
        }
    }

    /// [`settle`](Self::settle) for an attempt that ended in an error.
    #[inline(never)]
    fn settle_error<R>(
        &mut self,
        attempt: Attempt,
        error: AttemptError<S::Error>,
    ) -> Settled<R, S::Error> {
        match error {
            AttemptError::Failed(error) => {
                let failure = self.policy.failure(&error);
                self.fail(attempt, failure, error)
            }
            // Released before its readiness failed (by a failure, which
            // releases at once): it counts, but no further attempt does. A
            // failure that never went out, whatever the error says: it
            // fails the request only once nothing else is in flight.
            AttemptError::Unsent(error) => {
                self.stop();
                self.fail(attempt, Failure::Retryable, error)
            }
        }
    }

    /// A service clone failed readiness (tower's contract: a service that
    /// does is done with), and the clones of later attempts would share
    /// its fate: the hedger releases no further attempt for this request,
    /// so none takes a token or an in-flight place for nothing.
    fn stop(&mut self) {
        *self.spare = None;
        Race::take_ready(self.race);
        self.guard.stop_extra_attempts();
    }

    /// Reports `attempt`'s failure with `error`, classified as `failure`,
    /// and acts on the hedger's decision.
    fn fail<R>(
        &mut self,
        attempt: Attempt,
        failure: Failure,
        error: S::Error,
    ) -> Settled<R, S::Error> {
        match self.guard.on_failure(attempt, failure) {
            FailureOutcome::SendNow(next) => match self.send(next, None) {
                Settled::Over(Err(HedgeError::NotCloned)) => {
                    Settled::Over(Err(HedgeError::Service(error)))
                }
                settled => settled,
            },
            FailureOutcome::Continue => Settled::Racing,
            FailureOutcome::GiveUp { .. } => Settled::Over(Err(HedgeError::Service(error))),
            FailureOutcome::Ignored => {
                if self.guard.request().in_flight().is_empty() {
                    Settled::Over(Err(HedgeError::Service(error)))
                } else {
                    Settled::Racing
                }
            }
        }
    }

    /// Sends `attempt`, which the hedger released: a copy of the spare
    /// request, called at once on `ready` (a clone readied for it) or else
    /// once ready on the clone being readied for a hedge (which holds a
    /// place in the inner service's queue: an attempt a failure releases
    /// goes out as soon as that place comes up, not behind it), or on a
    /// fresh clone of the spare service; routed by the policy.
    fn send<R>(&mut self, attempt: Attempt, mut ready: Option<S>) -> Settled<R, S::Error> {
        let mut next = Some(attempt);
        while let Some(attempt) = next.take() {
            let copy = self
                .spare
                .as_ref()
                .and_then(|s| self.policy.clone_request(&s.request));
            if let (Some(mut request), Some(spare)) = (copy, self.spare.as_ref()) {
                let target = self.policy.route(&mut request, attempt);
                if target != self.guard.request().target() {
                    // An extra attempt the hedger released: never the
                    // primary, never beyond the last, so always routed.
                    let routed = self.guard.route(attempt, target);
                    debug_assert!(routed.is_ok());
                }
                let future = match ready.take() {
                    Some(mut service) => AttemptFuture::Calling {
                        future: service.call(request),
                    },
                    None => AttemptFuture::Waiting {
                        service: Race::take_ready(self.race)
                            .unwrap_or_else(|| spare.service.clone()),
                        request: Some(request),
                    },
                };
                Race::of(self.race)
                    .project()
                    .extras
                    .push((attempt, Box::pin(future)));
                continue;
            }
            // The policy broke its promise: this attempt never went out,
            // and no later one could (nothing to copy it from), so the
            // hedger releases no more: each would take a budget token and
            // an in-flight place for nothing.
            *self.spare = None;
            self.guard.stop_extra_attempts();
            match self.guard.on_failure(attempt, Failure::Retryable) {
                FailureOutcome::SendNow(again) => next = Some(again),
                FailureOutcome::GiveUp { .. } => return Settled::Over(Err(HedgeError::NotCloned)),
                FailureOutcome::Continue | FailureOutcome::Ignored => {}
            }
        }
        Settled::Racing
    }
}
