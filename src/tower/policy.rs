//! What the caller decides: which requests may be duplicated, how to copy
//! one, where each copy goes, which errors are worth another attempt, and
//! when a response counts as answered.

use core::future::{ready, Future, Ready};

use crate::hedge::{Attempt, Failure, Idempotency};

/// The caller's hedging policy for requests `Req` whose attempts fail with
/// `E`.
///
/// Nothing is duplicated unless [`idempotency`](Self::idempotency) says so
/// *and* [`clone_request`](Self::clone_request) gives a copy. A duplicated
/// request costs one copy when it starts (kept to make the extra attempts
/// from), and one more per extra attempt.
pub trait Policy<Req, E> {
    /// Whether `request` may be sent more than once (hedged, or retried
    /// after a retryable failure). Say [`Idempotency::Idempotent`] only for
    /// reads and for writes carrying an idempotency key.
    fn idempotency(&self, request: &Req) -> Idempotency;

    /// A copy of `request` for another attempt, or `None` if it cannot be
    /// copied (a streamed body): the request is then sent once, measured
    /// but never duplicated (started as
    /// [`Idempotency::NotIdempotent`], so counted in
    /// [`HedgeStats::not_idempotent`](crate::hedge::HedgeStats::not_idempotent)).
    /// Called once when the request starts (the copy
    /// kept for extra attempts) and once per extra attempt on that copy: it
    /// must keep answering `Some` for a request it copied once. (If it does
    /// not, that attempt counts as a retryable failure that never went
    /// out, and no further attempt is released for the request; with
    /// nothing else in flight the request fails with the error of the
    /// failure that released that attempt.)
    fn clone_request(&self, request: &Req) -> Option<Req>;

    /// The hedger target (`0..T`, the index of a replica or endpoint) that
    /// `request` goes to as `attempt`, after changing the request if this
    /// attempt should go elsewhere (point a hedge at another replica). The
    /// latency of each attempt is recorded under its target. Called for
    /// the primary before it starts, and for each extra attempt on its
    /// copy. Default: target 0, request unchanged.
    fn route(&self, request: &mut Req, attempt: Attempt) -> usize {
        let _ = (request, attempt);
        0
    }

    /// How an attempt that failed with `error` failed: a
    /// [`Failure::Retryable`] one releases another attempt at once (a hedge
    /// if others are in flight, budget permitting; a retry, within
    /// `max_retries`, if none is), a [`Failure::Fatal`] one fails the
    /// request with this error. Default: `Fatal` (errors are not retried
    /// unless the policy says so).
    fn failure(&self, error: &E) -> Failure {
        let _ = error;
        Failure::Fatal
    }
}

/// A [`Policy`] that duplicates every request by `Clone` and sends every
/// attempt to target 0: for services whose requests are all idempotent.
/// Errors are fatal: the first attempt to fail ends the request, so a hedge
/// shed by an overloaded backend (or a limit below the layer) fails a
/// request whose primary would have answered. Where attempts can be
/// refused for load, write a [`Policy`] whose
/// [`failure`](Policy::failure) calls those errors
/// [`Failure::Retryable`](crate::hedge::Failure::Retryable) (and see
/// *Errors* in the [module docs](crate::tower) for the replacements that
/// releases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllIdempotent;

impl<Req: Clone, E> Policy<Req, E> for AllIdempotent {
    fn idempotency(&self, _: &Req) -> Idempotency {
        Idempotency::Idempotent
    }

    fn clone_request(&self, request: &Req) -> Option<Req> {
        Some(request.clone())
    }
}

/// When an attempt's response counts as *answered*: the signal that both
/// decides the race and is recorded as the attempt's latency (the hedger
/// must learn the latency it races on).
///
/// [`commit`](Self::commit) turns the inner service's response into a
/// future that resolves at the signal, with what the caller gets (the
/// response itself, or what it became while waiting: its head and first
/// body frame, say) or the error that came instead (a failure of that
/// attempt, classified by [`Policy::failure`]). The default,
/// [`OnResponse`], commits as soon as the inner service returns its
/// response (for HTTP: the headers). Closures
/// `Fn(Res) -> impl Future<Output = Result<R, E>>` implement it too.
pub trait CommitSignal<Res, E> {
    /// What the hedged service answers with.
    type Response;

    /// Resolves at the commit signal.
    type Future: Future<Output = Result<Self::Response, E>>;

    /// Waits for `response`'s commit signal.
    fn commit(&self, response: Res) -> Self::Future;
}

/// The default [`CommitSignal`]: the response itself (for HTTP, its
/// headers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OnResponse;

impl<Res, E> CommitSignal<Res, E> for OnResponse {
    type Response = Res;
    type Future = Ready<Result<Res, E>>;

    fn commit(&self, response: Res) -> Self::Future {
        ready(Ok(response))
    }
}

impl<Res, E, R, F, Fut> CommitSignal<Res, E> for F
where
    F: Fn(Res) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    type Response = R;
    type Future = Fut;

    fn commit(&self, response: Res) -> Self::Future {
        self(response)
    }
}
