//! The hedging service.

use core::task::{Context, Poll};

use tower_service::Service;

use super::clock::TokioClock;
use super::error::HedgeError;
use super::future::{ResponseFuture, Spare};
use super::policy::{CommitSignal, OnResponse, Policy};
use crate::budget::{Budget, HedgeBudget};
use crate::guard::{HedgerRef, RequestGuard};
use crate::hedge::{Attempt, Idempotency};
use crate::mapping::{CubicMapping, IndexMapping};
use crate::FromRelativeAccuracy;

/// A [`Service`] that hedges the requests of `S` with a [`SharedHedger`](crate::hedge::SharedHedger)
/// under policy `P`, committing on signal `C`; see the [module
/// docs](super). Build it with [`HedgeLayer`](super::HedgeLayer).
///
/// Readiness: [`poll_ready`](Service::poll_ready) is the inner service's,
/// and the primary is called on that ready service. Each extra attempt
/// runs on a clone of the inner service and waits for that clone's own
/// `poll_ready` inside the response future — a hedge honours the inner
/// service's back-pressure (a concurrency limit, a full pool) instead of
/// bypassing it, and the race goes on while it waits. A hedge on the timer
/// is readied *before* the hedger releases it: one that waits for a permit
/// spends no budget token and holds no in-flight place meanwhile, one that
/// never gets one is never counted, and its latency is timed from its
/// call (the deadline still fires while it waits). An attempt released at
/// once by a failure (see [`Policy::failure`]) readies after its release,
/// and is timed from that.
///
/// A clone whose `poll_ready` fails is done with, as tower's contract
/// says, and the clones of the request's later attempts would share its
/// fate: the hedger releases no further attempt for that request, and the
/// race goes on with the attempts already out. A hedge on the timer whose
/// readiness fails is not released at all (no token, no count); an
/// attempt a failure released counts (it was released before its
/// readiness could fail) and fails as one that never went out: whatever
/// the policy makes of the error, it fails the request with it only once
/// nothing else is in flight.
#[derive(Debug)]
pub struct HedgeService<
    S,
    P,
    C = OnResponse,
    B: HedgeBudget + 'static = Budget,
    const T: usize = 1,
    M: IndexMapping + FromRelativeAccuracy + 'static = CubicMapping,
> {
    inner: S,
    hedger: HedgerRef<B, T, M>,
    /// Whether the hedger may release an extra attempt (a hedge or a
    /// retry): read from its configuration once, not every call.
    extras: bool,
    clock: TokioClock,
    policy: P,
    signal: C,
}

impl<
        S,
        P,
        C,
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > HedgeService<S, P, C, B, T, M>
{
    /// Hedges `inner`'s requests with `hedger`, timed by `clock` (every
    /// request of `hedger` must be timed on one time base: see
    /// [`crate::clock`]).
    pub fn new(
        inner: S,
        hedger: impl Into<HedgerRef<B, T, M>>,
        clock: TokioClock,
        policy: P,
        signal: C,
    ) -> Self {
        let hedger = hedger.into();
        let config = hedger.config();
        Self {
            inner,
            extras: config.max_hedges > 0 || config.max_retries > 0,
            hedger,
            clock,
            policy,
            signal,
        }
    }

    /// The hedger (for its statistics).
    pub fn hedger(&self) -> &HedgerRef<B, T, M> {
        &self.hedger
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<
        S: Clone,
        P: Clone,
        C: Clone,
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > Clone for HedgeService<S, P, C, B, T, M>
{
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            hedger: self.hedger.clone(),
            extras: self.extras,
            clock: self.clock,
            policy: self.policy.clone(),
            signal: self.signal.clone(),
        }
    }
}

impl<S, Req, P, C, B, const T: usize, M> Service<Req> for HedgeService<S, P, C, B, T, M>
where
    S: Service<Req> + Clone,
    P: Policy<Req, S::Error> + Clone,
    C: CommitSignal<S::Response, S::Error> + Clone,
    B: HedgeBudget + 'static,
    M: IndexMapping + FromRelativeAccuracy + 'static,
{
    type Response = C::Response;
    type Error = HedgeError<S::Error>;
    type Future = ResponseFuture<S, Req, P, C, RequestGuard<TokioClock, B, T, M>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(HedgeError::Service)
    }

    fn call(&mut self, mut request: Req) -> Self::Future {
        let target = self.policy.route(&mut request, Attempt::PRIMARY);
        let idempotency = self.policy.idempotency(&request);
        // A copy to make extra attempts from, if the hedger may release
        // any: no copy, no duplicate.
        let extras = self.extras;
        let spare = match idempotency {
            Idempotency::Idempotent if extras => {
                self.policy.clone_request(&request).map(|copy| Spare {
                    service: self.inner.clone(),
                    request: copy,
                })
            }
            _ => None,
        };
        let idempotency = if extras && spare.is_none() {
            Idempotency::NotIdempotent
        } else {
            idempotency
        };
        let (hedger, clock) = (&self.hedger, self.clock);
        let inner = &mut self.inner;
        ResponseFuture::start(
            || RequestGuard::start(hedger.clone(), clock, target, idempotency),
            || inner.call(request),
            spare,
            self.policy.clone(),
            self.signal.clone(),
        )
    }
}
