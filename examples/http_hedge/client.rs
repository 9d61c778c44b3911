//! The client side: one pooled hyper client, the hedging strategies that
//! drive it, and the closed loop that measures them.
//!
//! Every strategy sends an attempt the same way ([`Targets::send`]); a
//! request commits when its response headers arrive, and a cancelled
//! attempt is a dropped future (hyper then closes its connection, and the
//! server drops its handler when it notices).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailguard::hedge::{
    Attempt, CommitOutcome, HedgeConfig, HedgeStats, Hedger, Idempotency, SharedHedger, TimerAction,
};
use tailguard::tower::{HedgeLayer, HedgeService, OnResponse};
use tailguard::Budget;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::hedge::Hedge;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceExt};

/// The servers and the one connection pool every strategy shares.
pub struct Targets {
    uris: Vec<Uri>,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Targets {
    /// A client for these loopback servers.
    pub fn new(addrs: &[std::net::SocketAddr]) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let uris = addrs
            .iter()
            .map(|a| {
                format!("http://{a}/")
                    .parse()
                    .expect("a socket address is a URI authority")
            })
            .collect();
        Self { uris, client }
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        self.uris.len()
    }

    /// One attempt to server `target` (modulo the number of servers),
    /// complete when its response headers arrive.
    pub async fn send(&self, target: usize) -> Result<(), BoxError> {
        let uri = self.uris[target % self.uris.len()].clone();
        let response = self.client.get(uri).await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("server answered {}", response.status()).into())
        }
    }
}

/// One request as both hedging middlewares see it: the server of its
/// primary and of the attempt at hand (each policy points a hedge's copy
/// at the next server).
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// The primary's server.
    primary: usize,
    /// This attempt's server.
    target: usize,
}

/// tower's hedge policy: every request may be hedged, to the next server.
#[derive(Clone, Copy, Debug)]
pub struct NextServer(usize);

impl tower::hedge::Policy<Call> for NextServer {
    fn clone_request(&self, call: &Call) -> Option<Call> {
        Some(Call {
            target: (call.target + 1) % self.0,
            ..*call
        })
    }

    fn can_retry(&self, _: &Call) -> bool {
        true
    }
}

/// An attempt's error as a concrete type: with `BoxError` as the inner
/// service's error, tower's hedge future fails the `Send` check on a
/// higher-ranked `From` bound.
#[derive(Debug)]
pub struct AttemptFailed(BoxError);

impl std::fmt::Display for AttemptFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for AttemptFailed {}

/// One attempt to `call.target`, as a tower service (what both hedging
/// middlewares wrap).
fn attempt_service(targets: Arc<Targets>) -> BoxCloneSyncService<Call, (), AttemptFailed> {
    BoxCloneSyncService::new(tower::service_fn(move |call: Call| {
        let targets = Arc::clone(&targets);
        async move { targets.send(call.target).await.map_err(AttemptFailed) }
    }))
}

type TowerHedge = Hedge<BoxCloneSyncService<Call, (), AttemptFailed>, NextServer>;

/// Table slots of the layer's hedger: one window per server up to this
/// many; servers beyond share the aggregate window.
pub const LAYER_TARGETS: usize = 16;

/// Our layer's policy: every request may be hedged, each attempt to the
/// server after the previous attempt's, and that server is the attempt's
/// hedger target (its latency is recorded under it).
#[derive(Clone, Copy, Debug)]
pub struct RoundRobin {
    servers: usize,
}

impl tailguard::tower::Policy<Call, AttemptFailed> for RoundRobin {
    fn idempotency(&self, _: &Call) -> Idempotency {
        Idempotency::Idempotent
    }

    fn clone_request(&self, call: &Call) -> Option<Call> {
        Some(*call)
    }

    fn route(&self, call: &mut Call, attempt: Attempt) -> usize {
        call.target = (call.primary + usize::from(attempt.0)) % self.servers;
        call.target
    }
}

type OurLayer = HedgeService<
    BoxCloneSyncService<Call, (), AttemptFailed>,
    RoundRobin,
    OnResponse,
    Budget,
    LAYER_TARGETS,
>;

/// tower's hedge middleware's settings in this comparison: hedge at the
/// p90 of the last period's attempt latencies, as our default does.
pub const TOWER_PERCENTILE: f32 = 0.9;
/// tower hedges only once its last period holds this many latencies.
pub const TOWER_MIN_DATA_POINTS: u64 = 100;
/// tower's histogram rotation period.
pub const TOWER_PERIOD: Duration = Duration::from_secs(1);

/// How a request is sent: one strategy of the comparison.
pub enum Driver {
    /// One attempt, no hedging.
    Plain(Arc<Targets>),
    /// The crate's `Hedger` wired by hand, as `examples/tokio_race.rs`
    /// does: attempts are tasks, the loser is aborted, the timer is
    /// `sleep_until`, the hedger sits behind a mutex held for nanoseconds.
    Hedger {
        targets: Arc<Targets>,
        // Boxed: the hedger's windows are kilobytes, the other variants words.
        hedger: Box<Mutex<Hedger>>,
        epoch: Instant,
    },
    /// tower's hedge middleware (no budget; hedges every request still
    /// pending at the percentile). Its `call` needs `&mut`, so the workers
    /// share it behind an async mutex held for `poll_ready` and `call` only.
    Tower(tokio::sync::Mutex<TowerHedge>),
    /// Our tower layer (`tailguard::tower::HedgeLayer`) over a
    /// `SharedHedger` with a window per server; each request runs on a
    /// clone of the service (clones share the hedger).
    Layer(OurLayer),
}

impl Driver {
    /// The hand-wired hedger with this configuration.
    pub fn hedger(targets: Arc<Targets>, config: HedgeConfig) -> Self {
        Self::Hedger {
            targets,
            hedger: Box::new(Mutex::new(
                Hedger::new(config).expect("a valid configuration"),
            )),
            epoch: Instant::now(),
        }
    }

    /// Our tower layer with this configuration and the default budget.
    pub fn layer(targets: Arc<Targets>, config: HedgeConfig) -> Self {
        let servers = targets.len();
        let hedger = SharedHedger::<Budget, LAYER_TARGETS>::with_budget(config, Budget::default())
            .expect("a valid configuration");
        let layer = HedgeLayer::new(Arc::new(hedger), RoundRobin { servers });
        Self::Layer(layer.layer(attempt_service(targets)))
    }

    /// tower's hedge middleware over the same client.
    pub fn tower(targets: Arc<Targets>) -> Self {
        let n = targets.len();
        Self::Tower(tokio::sync::Mutex::new(Hedge::new(
            attempt_service(targets),
            NextServer(n),
            TOWER_MIN_DATA_POINTS,
            TOWER_PERCENTILE,
            TOWER_PERIOD,
        )))
    }

    /// The hedger's counters, for the strategies that have them.
    pub fn stats(&self) -> Option<HedgeStats> {
        match self {
            Self::Hedger { hedger, .. } => Some(lock(hedger).stats()),
            Self::Layer(service) => Some(service.hedger().stats()),
            _ => None,
        }
    }

    /// One request whose primary goes to server `target`; `Ok` once some
    /// attempt's response headers arrived.
    pub async fn call(&self, target: usize) -> Result<(), BoxError> {
        match self {
            Self::Plain(targets) => targets.send(target).await,
            Self::Hedger {
                targets,
                hedger,
                epoch,
            } => hedged_call(targets, hedger, *epoch, target).await,
            Self::Tower(hedge) => {
                let future = {
                    let mut hedge = hedge.lock().await;
                    hedge.ready().await?.call(Call {
                        primary: target,
                        target,
                    })
                };
                future.await
            }
            Self::Layer(service) => {
                let call = Call {
                    primary: target,
                    target,
                };
                Ok(service.clone().oneshot(call).await?)
            }
        }
    }
}

fn lock(hedger: &Mutex<Hedger>) -> std::sync::MutexGuard<'_, Hedger> {
    hedger.lock().unwrap_or_else(|e| e.into_inner())
}

/// One hedged request through the hand-wired hedger: the primary to
/// `target`, each hedge to the next server.
async fn hedged_call(
    targets: &Arc<Targets>,
    hedger: &Mutex<Hedger>,
    epoch: Instant,
    target: usize,
) -> Result<(), BoxError> {
    let now = || u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut request = lock(hedger).start((), now(), Idempotency::Idempotent);
    let mut attempts = JoinSet::new();
    let spawn = |attempts: &mut JoinSet<_>, attempt: Attempt| {
        let targets = Arc::clone(targets);
        let to = target + usize::from(attempt.0);
        attempts.spawn(async move { (attempt, targets.send(to).await) });
    };
    spawn(&mut attempts, Attempt::PRIMARY);
    loop {
        let timer = request
            .next_timer()
            .map(|at| epoch + Duration::from_nanos(at));
        tokio::select! {
            joined = attempts.join_next() => {
                let Some(joined) = joined else {
                    return Err("every attempt ended without an answer".into());
                };
                let (attempt, answer) = joined?;
                match answer {
                    Ok(()) => {
                        let outcome = lock(hedger).on_commit(&mut request, attempt, now());
                        if let CommitOutcome::Won { .. } = outcome {
                            attempts.abort_all(); // cancel the losers
                            return Ok(());
                        }
                    }
                    Err(e) => {
                        lock(hedger).abandon(&mut request, now());
                        return Err(e);
                    }
                }
            }
            () = tokio::time::sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {
                let action = lock(hedger).on_timer(&mut request, now());
                if let TimerAction::SendHedge(hedge) = action {
                    spawn(&mut attempts, hedge);
                }
            }
        }
    }
}

/// What one strategy's closed loop measured.
pub struct Measured {
    /// User-visible latency of every completed request, in µs.
    pub latency_us: Histogram<u64>,
    /// Requests that ended with an error (none expected on loopback).
    pub errors: u64,
    /// Wall-clock time of the loop.
    pub elapsed: Duration,
}

/// Runs `workers` closed-loop workers through `driver` until `requests`
/// requests were started or `deadline` passed; primaries go round robin
/// over the servers. Progress goes to stderr every 2 s.
pub async fn closed_loop(
    driver: Arc<Driver>,
    servers: usize,
    workers: usize,
    requests: u64,
    deadline: Instant,
    label: &str,
) -> Measured {
    let started = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (driver, issued, done) = (Arc::clone(&driver), Arc::clone(&issued), Arc::clone(&done));
        tasks.spawn(async move {
            let mut hist = new_histogram();
            let mut errors = 0;
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                if i >= requests || Instant::now() >= deadline {
                    break;
                }
                let t0 = Instant::now();
                match driver.call((i % servers as u64) as usize).await {
                    Ok(()) => {
                        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
                        hist.saturating_record(us.max(1));
                    }
                    Err(_) => errors += 1,
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            (hist, errors)
        });
    }
    let label = label.to_owned();
    let progress = tokio::spawn({
        let done = Arc::clone(&done);
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            tick.tick().await;
            loop {
                tick.tick().await;
                eprintln!(
                    "[http_hedge] {label}: {} / {requests} requests, {:.1} s",
                    done.load(Ordering::Relaxed),
                    started.elapsed().as_secs_f64()
                );
            }
        }
    });
    let mut latency_us = new_histogram();
    let mut errors = 0;
    while let Some(joined) = tasks.join_next().await {
        let (hist, e) = joined.expect("a worker panicked");
        latency_us.add(&hist).expect("histograms of equal bounds");
        errors += e;
    }
    progress.abort();
    Measured {
        latency_us,
        errors,
        elapsed: started.elapsed(),
    }
}

/// 1 µs to 60 s at 3 significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}
