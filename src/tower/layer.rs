//! The layer that wraps services in [`HedgeService`].

use tower_layer::Layer;

use super::clock::TokioClock;
use super::policy::OnResponse;
use super::service::HedgeService;
use crate::budget::{Budget, HedgeBudget};
use crate::guard::HedgerRef;
use crate::mapping::{CubicMapping, IndexMapping};
use crate::FromRelativeAccuracy;

/// A [`Layer`] wrapping services in [`HedgeService`]: every service it
/// makes shares one [`SharedHedger`](crate::hedge::SharedHedger) (estimates, budget, in-flight cap) and
/// one [`TokioClock`].
#[derive(Debug)]
pub struct HedgeLayer<
    P,
    C = OnResponse,
    B: HedgeBudget + 'static = Budget,
    const T: usize = 1,
    M: IndexMapping + FromRelativeAccuracy + 'static = CubicMapping,
> {
    hedger: HedgerRef<B, T, M>,
    clock: TokioClock,
    policy: P,
    signal: C,
}

impl<
        P,
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > HedgeLayer<P, OnResponse, B, T, M>
{
    /// Hedges with `hedger` under `policy`, committing on the response
    /// ([`OnResponse`]), timed by [`TokioClock::new`]: the process's shared
    /// time base, so any number of layers (and
    /// [`RequestGuard`](crate::guard::RequestGuard)s on
    /// [`MonotonicClock::new`](crate::clock::MonotonicClock::new)) over
    /// one hedger time its requests alike. Under tokio's paused test clock
    /// the layer reads paused time and a `MonotonicClock` real time: give
    /// such guards a [`TokioClock`] too.
    pub fn new(hedger: impl Into<HedgerRef<B, T, M>>, policy: P) -> Self {
        Self {
            hedger: hedger.into(),
            clock: TokioClock::new(),
            policy,
            signal: OnResponse,
        }
    }
}

impl<
        P,
        C,
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > HedgeLayer<P, C, B, T, M>
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
    pub fn hedger(&self) -> &HedgerRef<B, T, M> {
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
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > Clone for HedgeLayer<P, C, B, T, M>
{
    fn clone(&self) -> Self {
        Self {
            hedger: self.hedger.clone(),
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
        B: HedgeBudget + 'static,
        const T: usize,
        M: IndexMapping + FromRelativeAccuracy + 'static,
    > Layer<S> for HedgeLayer<P, C, B, T, M>
{
    type Service = HedgeService<S, P, C, B, T, M>;

    fn layer(&self, inner: S) -> Self::Service {
        HedgeService::new(
            inner,
            self.hedger.clone(),
            self.clock,
            self.policy.clone(),
            self.signal.clone(),
        )
    }
}
