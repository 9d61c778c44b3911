//! The layer that wraps services in [`HedgeService`].

use std::sync::Arc;

use tower_layer::Layer;

use super::clock::TokioClock;
use super::policy::OnResponse;
use super::service::HedgeService;
use crate::budget::{Budget, HedgeBudget};
use crate::hedge::SharedHedger;

/// A [`Layer`] wrapping services in [`HedgeService`]: every service it
/// makes shares one [`SharedHedger`] (estimates, budget, in-flight cap) and
/// one [`TokioClock`].
#[derive(Debug)]
pub struct HedgeLayer<P, C = OnResponse, B: HedgeBudget = Budget, const T: usize = 1> {
    hedger: Arc<SharedHedger<B, T>>,
    clock: TokioClock,
    policy: P,
    signal: C,
}

impl<P, B: HedgeBudget, const T: usize> HedgeLayer<P, OnResponse, B, T> {
    /// Hedges with `hedger` under `policy`, committing on the response
    /// ([`OnResponse`]), timed by a [`TokioClock`] starting now.
    ///
    /// A second layer over the same hedger must be given this one's clock
    /// (`.clock(first.tokio_clock())`): two clocks started at different
    /// times give the hedger two time bases, and its in-flight cap and
    /// windows then see each layer's requests as far from the other's.
    pub fn new(hedger: Arc<SharedHedger<B, T>>, policy: P) -> Self {
        Self {
            hedger,
            clock: TokioClock::new(),
            policy,
            signal: OnResponse,
        }
    }
}

impl<P, C, B: HedgeBudget, const T: usize> HedgeLayer<P, C, B, T> {
    /// Commits attempts on `signal` instead (first body frame, first
    /// token); see [`CommitSignal`](super::CommitSignal).
    pub fn commit_signal<C2>(self, signal: C2) -> HedgeLayer<P, C2, B, T> {
        HedgeLayer {
            hedger: self.hedger,
            clock: self.clock,
            policy: self.policy,
            signal,
        }
    }

    /// Times requests with `clock` (to share one with other users of the
    /// hedger).
    #[must_use]
    pub fn clock(mut self, clock: TokioClock) -> Self {
        self.clock = clock;
        self
    }

    /// The hedger (for its statistics).
    pub fn hedger(&self) -> &Arc<SharedHedger<B, T>> {
        &self.hedger
    }

    /// The clock every request is timed by.
    pub fn tokio_clock(&self) -> TokioClock {
        self.clock
    }
}

impl<P: Clone, C: Clone, B: HedgeBudget, const T: usize> Clone for HedgeLayer<P, C, B, T> {
    fn clone(&self) -> Self {
        Self {
            hedger: Arc::clone(&self.hedger),
            clock: self.clock,
            policy: self.policy.clone(),
            signal: self.signal.clone(),
        }
    }
}

impl<S, P: Clone, C: Clone, B: HedgeBudget, const T: usize> Layer<S> for HedgeLayer<P, C, B, T> {
    type Service = HedgeService<S, P, C, B, T>;

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
