//! A request driver shared by the hedger tests: one request at a time
//! through the public API, attempts racing against a latency model.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use statrs::distribution::{ContinuousCDF, Normal};
use tailguard::budget::HedgeBudget;
use tailguard::hedge::{Attempt, CommitOutcome, Hedger, Idempotency, Plan, Request, TimerAction};
use tailguard::store::Store;
use tailguard::IndexMapping;

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000_000_000;

/// Attempt latencies: lognormal around `median_ns` with shape `sigma`,
/// times `scale`.
pub struct Backend {
    pub rng: StdRng,
    pub median_ns: f64,
    pub sigma: f64,
    pub scale: f64,
}

impl Backend {
    pub fn lognormal(median_ms: f64, sigma: f64, seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            median_ns: median_ms * MS as f64,
            sigma,
            scale: 1.0,
        }
    }

    pub fn draw(&mut self) -> u64 {
        let d = LogNormal::new(self.median_ns.ln(), self.sigma).unwrap();
        (d.sample(&mut self.rng) * self.scale).max(1.0) as u64
    }

    /// The true `q`-quantile of one attempt (the lognormal's, scaled).
    pub fn quantile(&self, q: f64) -> f64 {
        let z = Normal::standard().inverse_cdf(q);
        self.median_ns * (self.sigma * z).exp() * self.scale
    }
}

/// Drives one request to `target` started at `t` to its end: hedges on
/// the timer, the earliest answer wins. Returns the plan and the request's
/// latency.
pub fn run_request<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M: IndexMapping>(
    hedger: &mut Hedger<K, B, T, S, M>,
    backend: &mut Backend,
    target: K,
    t: u64,
) -> (Plan, u64) {
    let mut req = hedger.start(target, t, Idempotency::Idempotent);
    let plan = req.plan();
    let end = race(hedger, backend, &mut req, t);
    (plan, end.saturating_sub(t))
}

/// Races `req` (started at `t`) to its commit; returns the commit time.
pub fn race<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M: IndexMapping>(
    hedger: &mut Hedger<K, B, T, S, M>,
    backend: &mut Backend,
    req: &mut Request<K>,
    t: u64,
) -> u64 {
    race_with(hedger, req, t, || backend.draw())
}

/// Races `req` (started at `t`) to its commit, each attempt taking
/// `draw()` ns: hedges on the timer, the earliest answer wins. Returns the
/// commit time.
pub fn race_with<K: Eq + Copy, B: HedgeBudget, const T: usize, S: Store, M: IndexMapping>(
    hedger: &mut Hedger<K, B, T, S, M>,
    req: &mut Request<K>,
    t: u64,
    mut draw: impl FnMut() -> u64,
) -> u64 {
    let mut finish = vec![t + draw()];
    loop {
        let (first, at) = finish
            .iter()
            .enumerate()
            .min_by_key(|&(_, &f)| f)
            .map(|(a, &f)| (a, f))
            .unwrap();
        match req.next_timer() {
            Some(timer) if timer < at => match hedger.on_timer(req, timer) {
                TimerAction::SendHedge(a) => {
                    assert_eq!(a.index(), finish.len());
                    finish.push(timer + draw());
                }
                TimerAction::GiveUp { .. } => return timer,
                TimerAction::Wait { .. } | TimerAction::Skip(_) => {}
            },
            _ => {
                let outcome = hedger.on_commit(req, Attempt(first as u8), at);
                assert!(matches!(outcome, CommitOutcome::Won { .. }), "{outcome:?}");
                return at;
            }
        }
    }
}

/// Whether a plan carries a delay estimated from measurements.
pub fn data_driven(plan: Plan) -> bool {
    matches!(plan, Plan::Hedge { source, .. } if source.is_data_driven())
}
