//! The layer that wraps services in [`HedgeService`].

use std::sync::Arc;

use tower_layer::Layer;

use super::clock::TokioClock;
use super::policy::OnResponse;
use super::service::HedgeService;
use crate::budget::{Budget, HedgeBudget};
use crate::hedge::SharedHedger;
use crate::mapping::{CubicMapping, IndexMapping};
use crate::FromRelativeAccuracy;

/// A [`Layer`] wrapping services in [`HedgeService`]: every service it
/// makes shares one [`SharedHedger`] (estimates, budget, in-flight cap) and
/// one [`TokioClock`].
#[derive(Debug)]
pub struct HedgeLayer<
    P,
    C = OnResponse,
    B: HedgeBudget = Budget,
    const T: usize = 1,
    M: IndexMapping + FromRelativeAccuracy = CubicMapping,
> {
    hedger: Arc<SharedHedger<B, T, M>>,
    clock: TokioClock,
    policy: P,
    signal: C,
}

impl<P, B: HedgeBudget, const T: usize, M: IndexMapping + FromRelativeAccuracy>
    HedgeLayer<P, OnResponse, B, T, M>
{
    /// Hedges with `hedger` under `policy`, committing on the response
    /// ([`OnResponse`]), timed by [`TokioClock::new`]: the process's shared
    /// time base, so any number of layers (and
    /// [`RequestGuard`](crate::guard::RequestGuard)s on
    /// [`MonotonicClock::new`](crate::clock::MonotonicClock::new)) over
    /// one hedger time its requests alike.
    pub fn new(hedger: Arc<SharedHedger<B, T, M>>, policy: P) -> Self {
        Self {
            hedger,
            clock: TokioClock::new(),
            policy,
            signal: OnResponse,
        }
    }
}

impl<P, C, B: HedgeBudget, const T: usize, M: IndexMapping + FromRelativeAccuracy>
    HedgeLayer<P, C, B, T, M>
{
    /// Commits attempts on `signal` instead (first body frame, first
    /// token); see [`CommitSignal`](super::CommitSignal).
    pub fn commit_signal<C2>(self, signal: C2) -> HedgeLayer<P, C2, B, T, M> {
        HedgeLayer {
            hedger: self.hedger,
            clock: self.clock,
            policy: self.policy,
            signal,
        }
    }

    /// Times requests with `clock` instead; every user of the hedger must
    /// be on `clock`'s time base (a clock made
    /// [`since`](TokioClock::since) an origin of your own is on no other's).
    #[must_use]
    pub fn clock(mut self, clock: TokioClock) -> Self {
        self.clock = clock;
        self
    }

    /// The hedger (for its statistics).
    pub fn hedger(&self) -> &Arc<SharedHedger<B, T, M>> {
        &self.hedger
    }

    /// The clock every request is timed by.
    pub fn tokio_clock(&self) -> TokioClock {
        self.clock
    }
}

impl<
        P: Clone,
        C: Clone,
        B: HedgeBudget,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy,
    > Clone for HedgeLayer<P, C, B, T, M>
{
    fn clone(&self) -> Self {
        Self {
            hedger: Arc::clone(&self.hedger),
            clock: self.clock,
            policy: self.policy.clone(),
            signal: self.signal.clone(),
        }
    }
}

impl<
        S,
        P: Clone,
        C: Clone,
        B: HedgeBudget,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy,
    > Layer<S> for HedgeLayer<P, C, B, T, M>
{
    type Service = HedgeService<S, P, C, B, T, M>;

    fn layer(&self, inner: S) -> Self::Service {
        HedgeService::new(
            inner,
            Arc::clone(&self.hedger),
            self.clock,
            self.policy.clone(),
            self.signal.clone(),
        )
    }
}
