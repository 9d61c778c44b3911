//! The tower layer over a mock backend on tokio's paused clock: every time
//! below is exact virtual time, so the tests are deterministic.
#![cfg(feature = "tower")]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tailguard::clock::Clock;
use tailguard::hedge::SharedHedger;
use tailguard::hedge::{Attempt, DelaySource, Failure, HedgeConfig, Idempotency, Plan};
use tailguard::tower::{AllIdempotent, HedgeError, HedgeLayer, HedgeService, Policy};
use tailguard::{Budget, LogLinearMapping};
use tokio::time::{sleep, Instant};
use tower::{Layer, Service, ServiceExt};

const MS: u64 = 1_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the backend does with one attempt.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// Answers after this long.
    After(Duration),
    /// Fails after this long.
    FailAfter(Duration, Failure),
}

/// The backend's error: how the test wants it classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BackendError(Failure);

/// What the backend saw.
#[derive(Debug, Default)]
struct Log {
    /// (request, attempt number at the backend, when it was called).
    calls: Vec<(u64, u32, Instant)>,
    /// Attempts whose future was dropped before it finished.
    dropped: Vec<(u64, u32)>,
    per_request: HashMap<u64, u32>,
}

type Script = Arc<dyn Fn(u64, u32) -> Reply + Send + Sync>;

/// A backend whose answer to the `n`-th call for request `id` is
/// `script(id, n)`; it logs calls and cancellations.
#[derive(Clone)]
struct Backend {
    log: Arc<Mutex<Log>>,
    script: Script,
}

impl Backend {
    fn new(script: impl Fn(u64, u32) -> Reply + Send + Sync + 'static) -> Self {
        Self {
            log: Arc::default(),
            script: Arc::new(script),
        }
    }

    fn calls(&self) -> Vec<(u64, u32, Instant)> {
        self.log.lock().unwrap().calls.clone()
    }

    fn dropped(&self) -> Vec<(u64, u32)> {
        self.log.lock().unwrap().dropped.clone()
    }
}

/// Logs the attempt as dropped unless it finished.
struct DropFlag {
    log: Arc<Mutex<Log>>,
    key: (u64, u32),
    finished: bool,
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        if !self.finished {
            self.log.lock().unwrap().dropped.push(self.key);
        }
    }
}

impl Service<u64> for Backend {
    type Response = (u64, u32);
    type Error = BackendError;
    type Future = Pin<Box<dyn Future<Output = Result<(u64, u32), BackendError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BackendError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: u64) -> Self::Future {
        let n = {
            let mut log = self.log.lock().unwrap();
            let n = *log
                .per_request
                .entry(id)
                .and_modify(|n| *n += 1)
                .or_insert(0);
            log.calls.push((id, n, Instant::now()));
            n
        };
        let reply = (self.script)(id, n);
        let flag = DropFlag {
            log: Arc::clone(&self.log),
            key: (id, n),
            finished: false,
        };
        Box::pin(async move {
            let mut flag = flag; // the whole flag, not just the field
            let result = match reply {
                Reply::After(d) => {
                    sleep(d).await;
                    Ok((id, n))
                }
                Reply::FailAfter(d, f) => {
                    sleep(d).await;
                    Err(BackendError(f))
                }
            };
            flag.finished = true;
            result
        })
    }
}

/// Duplicates even ids only; classifies errors as the backend says.
#[derive(Clone, Copy)]
struct EvenIdempotent;

impl Policy<u64, BackendError> for EvenIdempotent {
    fn idempotency(&self, id: &u64) -> Idempotency {
        if id.is_multiple_of(2) {
            Idempotency::Idempotent
        } else {
            Idempotency::NotIdempotent
        }
    }

    fn clone_request(&self, id: &u64) -> Option<u64> {
        Some(*id)
    }

    fn failure(&self, error: &BackendError) -> Failure {
        error.0
    }
}

/// A 5 ms prior delay, unlimited budget.
fn hedger(config: HedgeConfig) -> Arc<SharedHedger<Budget>> {
    Arc::new(SharedHedger::with_budget(config, Budget::Unlimited).unwrap())
}

fn prior_5ms() -> HedgeConfig {
    HedgeConfig::DEFAULT.prior_delay_ns(5 * MS)
}

#[tokio::test(start_paused = true)]
async fn hedge_fires_at_the_delay_and_the_loser_is_dropped() {
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 100 } else { 2 })));
    let hedger = hedger(prior_5ms());
    let layer = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent);
    let t0 = Instant::now();
    let answer = layer.layer(backend.clone()).oneshot(4).await.unwrap();
    assert_eq!(answer, (4, 1), "the hedge answered");
    assert_eq!(
        t0.elapsed(),
        ms(7),
        "hedge sent at 5 ms, answered 2 ms later"
    );
    let calls = backend.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].2 - t0, ms(5), "the hedge fires at the delay");
    assert_eq!(backend.dropped(), [(4, 0)], "the primary was cancelled");
    let stats = hedger.stats();
    assert_eq!(
        (
            stats.hedges_sent,
            stats.hedge_wins,
            stats.samples,
            stats.censored_samples
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(hedger.hedges_in_flight(u64::MAX / 2), 0);
}

/// The layer over a hedger on the integer log-linear mapping: the same
/// race, and its window learns the delay from the answers.
#[tokio::test(start_paused = true)]
async fn a_log_linear_hedger_hedges_alike_and_learns() {
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 100 } else { 2 })));
    // α = 2 %: at 1 % the log-linear keys' 1 024 buckets stop at 9 ms, and
    // the hedger is refused (`ConfigError::KeyRange`).
    let config = prior_5ms().min_samples(3).relative_accuracy(0.02);
    let hedger: Arc<SharedHedger<Budget, 1, LogLinearMapping>> =
        Arc::new(SharedHedger::with_budget(config, Budget::Unlimited).unwrap());
    let layer = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent);
    let t0 = Instant::now();
    let answer = layer.layer(backend.clone()).oneshot(4).await.unwrap();
    assert_eq!((answer, t0.elapsed()), ((4, 1), ms(7)));
    assert_eq!(backend.dropped(), [(4, 0)], "the primary was cancelled");
    // Three answers of 8 ms, then the delay is their p90, within α.
    let fast = Backend::new(|_, _| Reply::After(ms(8)));
    let quick = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(fast);
    for id in [10, 12, 14] {
        quick.clone().oneshot(id).await.unwrap();
    }
    let now = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent)
        .tokio_clock()
        .now_ns();
    let delay = hedger.delay_ns(0, now).expect("warm") as f64;
    assert!((delay / (8 * MS) as f64 - 1.0).abs() <= 0.02, "{delay}");
}

#[tokio::test(start_paused = true)]
async fn a_primary_faster_than_the_delay_is_never_hedged() {
    let backend = Backend::new(|_, _| Reply::After(ms(3)));
    let hedger = hedger(prior_5ms());
    let mut service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(backend.clone());
    for id in (0..20).map(|i| i * 2) {
        let t0 = Instant::now();
        assert_eq!(
            service.ready().await.unwrap().call(id).await.unwrap(),
            (id, 0)
        );
        assert_eq!(t0.elapsed(), ms(3));
    }
    assert_eq!(backend.calls().len(), 20);
    assert!(backend.dropped().is_empty());
    let stats = hedger.stats();
    assert_eq!(
        (stats.hedges_sent, stats.samples, stats.censored_samples),
        (0, 20, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn not_idempotent_requests_are_never_duplicated() {
    // Odd ids are not idempotent: slow, or failing with a retryable error,
    // they are sent once.
    let backend = Backend::new(|id, _| {
        if id % 4 == 1 {
            Reply::After(ms(100))
        } else {
            Reply::FailAfter(ms(1), Failure::Retryable)
        }
    });
    let hedger = hedger(prior_5ms());
    let mut service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(backend.clone());
    for id in [1, 3, 5, 7] {
        let result = service.ready().await.unwrap().call(id).await;
        if id % 4 == 1 {
            assert_eq!(result.unwrap(), (id, 0));
        } else {
            assert_eq!(
                result.unwrap_err(),
                HedgeError::Service(BackendError(Failure::Retryable))
            );
        }
    }
    assert_eq!(backend.calls().len(), 4, "one call per request");
    let stats = hedger.stats();
    assert_eq!(
        (
            stats.hedges_sent,
            stats.retries_released,
            stats.not_idempotent
        ),
        (0, 0, 4)
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_response_future_cancels_every_attempt() {
    let backend = Backend::new(|_, _| Reply::After(ms(100)));
    let hedger = hedger(prior_5ms());
    let service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(backend.clone());
    let t0 = Instant::now();
    // The caller's own timeout: the hedge went out at 5 ms, both are
    // pending at 8 ms.
    let outcome = tokio::time::timeout(ms(8), service.oneshot(2)).await;
    assert!(outcome.is_err());
    assert_eq!(t0.elapsed(), ms(8));
    let mut dropped = backend.dropped();
    dropped.sort_unstable();
    assert_eq!(dropped, [(2, 0), (2, 1)], "both attempts cancelled");
    // The hedger gave the request up at once: nothing in flight (the lease
    // is 10 s), both attempts censored, nothing exact.
    assert_eq!(hedger.hedges_in_flight(0), 0);
    let stats = hedger.stats();
    assert_eq!(
        (
            stats.hedges_sent,
            stats.samples,
            stats.censored_samples,
            stats.gave_up
        ),
        (1, 0, 2, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_hedges() {
    // Every primary straggles; the default budget allows 15 % of traffic.
    // (The prior delay stays in force: this is about the budget alone.)
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 50 } else { 1 })));
    let hedger = Arc::new(SharedHedger::new(prior_5ms().min_samples(1_000_000)).unwrap());
    let mut service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(backend.clone());
    const N: u64 = 200;
    for id in 0..N {
        service.ready().await.unwrap().call(id).await.unwrap();
    }
    let stats = hedger.stats();
    let budget = hedger.budget_stats();
    assert_eq!(stats.hedges_sent, budget.grants);
    assert!(stats.budget_denials > 0);
    assert!(
        stats.hedges_sent * 100 <= N * 15,
        "{} hedges",
        stats.hedges_sent
    );
    assert!(
        stats.hedges_sent * 100 >= N * 14,
        "the budget is used: {}",
        stats.hedges_sent
    );
    assert_eq!(backend.calls().len() as u64, N + stats.hedges_sent);
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_sends_the_next_attempt_at_once() {
    // The primary fails after 1 ms: a retry goes out at once (no hedge was
    // in flight), well before the 5 ms delay.
    let backend = Backend::new(|_, n| match n {
        0 => Reply::FailAfter(ms(1), Failure::Retryable),
        _ => Reply::After(ms(2)),
    });
    let hedger = hedger(prior_5ms());
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(backend.clone());
    let t0 = Instant::now();
    assert_eq!(service.oneshot(6).await.unwrap(), (6, 1));
    assert_eq!(t0.elapsed(), ms(3));
    assert_eq!(backend.calls()[1].2 - t0, ms(1));
    let stats = hedger.stats();
    assert_eq!(
        (stats.retries_released, stats.hedges_sent, stats.samples),
        (1, 0, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_fatal_failure_fails_the_request_and_cancels_the_rest() {
    // The hedge fails fatally while the primary is still pending.
    let backend = Backend::new(|_, n| match n {
        0 => Reply::After(ms(100)),
        _ => Reply::FailAfter(ms(1), Failure::Fatal),
    });
    let hedger = hedger(prior_5ms());
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(backend.clone());
    let t0 = Instant::now();
    let error = service.oneshot(8).await.unwrap_err();
    assert_eq!(error, HedgeError::Service(BackendError(Failure::Fatal)));
    assert_eq!(t0.elapsed(), ms(6));
    assert_eq!(backend.dropped(), [(8, 0)]);
    let stats = hedger.stats();
    assert_eq!(
        (stats.samples, stats.censored_samples, stats.gave_up),
        (0, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_fails_the_request() {
    let backend = Backend::new(|_, _| Reply::After(ms(100)));
    let hedger = hedger(prior_5ms().deadline_ns(20 * MS));
    let service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(backend.clone());
    let t0 = Instant::now();
    assert_eq!(service.oneshot(10).await.unwrap_err(), HedgeError::Deadline);
    assert_eq!(t0.elapsed(), ms(20));
    assert_eq!(backend.dropped().len(), 2);
    assert_eq!(hedger.stats().censored_samples, 2);
}

#[tokio::test(start_paused = true)]
async fn the_commit_signal_decides_the_race() {
    // Attempt 0 answers its headers first (1 ms) but its first token comes
    // 50 ms later; the hedge (sent at 5 ms) has headers at 2 ms and its
    // first token 1 ms after: with the first token as the commit signal,
    // the hedge wins at 8 ms.
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 1 } else { 2 })));
    let hedger = hedger(prior_5ms());
    // The signal may change what the service answers: here, the response
    // with its first token.
    let first_token = |(id, n): (u64, u32)| async move {
        sleep(ms(if n == 0 { 50 } else { 1 })).await;
        Ok::<_, BackendError>(((id, n), "first token"))
    };
    let service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent)
        .commit_signal(first_token)
        .layer(backend.clone());
    let t0 = Instant::now();
    assert_eq!(service.oneshot(12).await.unwrap(), ((12, 1), "first token"));
    assert_eq!(t0.elapsed(), ms(8));
    let stats = hedger.stats();
    assert_eq!(
        (stats.hedge_wins, stats.samples, stats.censored_samples),
        (1, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn hedges_wait_for_their_own_readiness() {
    // One call at a time across every clone of the service (one shared
    // semaphore): the hedge's clone waits for a permit the primary holds,
    // and is dropped, never called, when the primary answers; the hedger
    // never released it (no hedge counted, no token spent).
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 30 } else { 1 })));
    let limited = tower::limit::GlobalConcurrencyLimitLayer::new(1).layer(backend.clone());
    let hedger = hedger(prior_5ms());
    let service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(limited);
    let t0 = Instant::now();
    assert_eq!(service.oneshot(14).await.unwrap(), (14, 0));
    assert_eq!(t0.elapsed(), ms(30), "the hedge could not get a permit");
    assert_eq!(backend.calls().len(), 1, "never called past the limit");
    assert_eq!(hedger.stats().hedges_sent, 0);
}

/// Sends hedges to replica 1: the request names its replica (ids from
/// 1 000 up are replica 1's).
#[derive(Clone, Copy)]
struct HedgesToReplica1;

impl Policy<u64, BackendError> for HedgesToReplica1 {
    fn idempotency(&self, _: &u64) -> Idempotency {
        Idempotency::Idempotent
    }

    fn clone_request(&self, id: &u64) -> Option<u64> {
        Some(*id)
    }

    fn route(&self, id: &mut u64, attempt: Attempt) -> usize {
        if attempt.is_primary() {
            0
        } else {
            *id += 1_000;
            1
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedge_routed_elsewhere_is_recorded_there() {
    // Replica 0 straggles, replica 1 answers in 1 ms.
    let backend = Backend::new(|id, _| Reply::After(ms(if id >= 1_000 { 1 } else { 100 })));
    let config = prior_5ms().min_samples(1);
    let hedger =
        Arc::new(SharedHedger::<Budget, 2>::with_budget(config, Budget::Unlimited).unwrap());
    let layer = HedgeLayer::new(Arc::clone(&hedger), HedgesToReplica1);
    let clock = layer.tokio_clock();
    assert_eq!(
        layer.layer(backend.clone()).oneshot(16).await.unwrap(),
        (1_016, 0)
    );
    let seen: Vec<u64> = backend.calls().iter().map(|c| c.0).collect();
    assert_eq!(seen, [16, 1_016], "the hedge was rewritten for replica 1");
    // Replica 1 holds the exact sample: its own window is warm. Replica 0
    // holds only the censored primary: it borrows the aggregate's delay.
    let now = clock.now_ns();
    assert!(matches!(
        hedger.plan(1, now),
        Plan::Hedge {
            source: DelaySource::Target,
            ..
        }
    ));
    assert!(matches!(
        hedger.plan(0, now),
        Plan::Hedge {
            source: DelaySource::Aggregate,
            ..
        }
    ));
}

#[test]
fn response_futures_are_send() {
    fn send<T: Send>() {}
    send::<<HedgeService<Backend, AllIdempotent> as Service<u64>>::Future>();
    send::<HedgeService<Backend, EvenIdempotent>>();
}

/// The side-by-side backend: lognormal latency (mean 5 ms, sd 2 ms) per
/// attempt, one attempt in 20 ten times slower, from a seeded generator.
#[derive(Clone)]
struct Lognormal {
    rng: Arc<Mutex<rand::rngs::StdRng>>,
    calls: Arc<Mutex<u64>>,
}

impl Lognormal {
    fn new(seed: u64) -> Self {
        use rand::SeedableRng;
        Self {
            rng: Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))),
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> u64 {
        *self.calls.lock().unwrap()
    }
}

impl Service<u64> for Lognormal {
    type Response = u64;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<u64, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, id: u64) -> Self::Future {
        use rand::RngExt;
        use rand_distr::{Distribution, LogNormal};
        *self.calls.lock().unwrap() += 1;
        let latency = {
            let mut rng = self.rng.lock().unwrap();
            let base = LogNormal::from_mean_cv(5.0, 0.4).unwrap().sample(&mut *rng);
            let slow = rng.random::<f64>() < 0.05;
            Duration::from_secs_f64(base * if slow { 10.0 } else { 1.0 } / 1e3)
        };
        Box::pin(async move {
            sleep(latency).await;
            Ok(id)
        })
    }
}

/// tower's hedge policy: every request may be hedged.
#[derive(Clone, Copy)]
struct TowerPolicy;

impl tower::hedge::Policy<u64> for TowerPolicy {
    fn clone_request(&self, id: &u64) -> Option<u64> {
        Some(*id)
    }

    fn can_retry(&self, _: &u64) -> bool {
        true
    }
}

/// Sends `n` requests one after another; returns their sorted latencies.
async fn drive<S: Service<u64>>(mut service: S, n: u64) -> Vec<Duration>
where
    S::Error: std::fmt::Debug,
{
    let mut latencies = Vec::new();
    for id in 0..n {
        let t0 = Instant::now();
        service.ready().await.unwrap().call(id).await.unwrap();
        latencies.push(t0.elapsed());
    }
    latencies.sort_unstable();
    latencies
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

#[tokio::test(start_paused = true)]
async fn side_by_side_with_tower_hedge() {
    const N: u64 = 4_000;
    const SEED: u64 = 7;
    let plain = Lognormal::new(SEED);
    let none = drive(plain.clone(), N).await;

    // Ours: the defaults (p90 delay once 20 answers are in, one hedge,
    // a 15 % budget).
    let ours_backend = Lognormal::new(SEED);
    let hedger = Arc::new(SharedHedger::new(HedgeConfig::DEFAULT).unwrap());
    let ours = drive(
        HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(ours_backend.clone()),
        N,
    )
    .await;

    // tower's: the same p90, 20 data points, a 1 s histogram period (it
    // hedges only from the second period on); it has no budget.
    let tower_backend = Lognormal::new(SEED);
    let hedge = tower::hedge::Hedge::new(tower_backend.clone(), TowerPolicy, 20, 0.9, ms(1_000));
    let theirs = drive(hedge, N).await;

    let extra = |calls: u64| (calls - N) as f64 / N as f64;
    let report = |name: &str, l: &[Duration], calls: u64| {
        println!(
            "{name:>14}: p50 {:>6.2} ms, p99 {:>6.2} ms, p99.9 {:>6.2} ms, extra load {:>5.1} %",
            quantile(l, 0.5).as_secs_f64() * 1e3,
            quantile(l, 0.99).as_secs_f64() * 1e3,
            quantile(l, 0.999).as_secs_f64() * 1e3,
            extra(calls) * 100.0,
        );
    };
    report("no hedging", &none, plain.calls());
    report("tailguard", &ours, ours_backend.calls());
    report("tower hedge", &theirs, tower_backend.calls());

    assert_eq!(plain.calls(), N);
    // Ours cuts the tail (a straggler takes ~50 ms, a hedge ~10 ms more
    // than the p90 delay) and stays within its budget.
    assert!(quantile(&ours, 0.99) * 2 < quantile(&none, 0.99));
    assert!(extra(ours_backend.calls()) <= 0.15);
    assert_eq!(ours_backend.calls() - N, hedger.stats().hedges_sent);
}

#[tokio::test(start_paused = true)]
async fn without_extra_attempts_no_copy_is_made() {
    use std::sync::atomic::{AtomicU32, Ordering};
    /// Counts the copies it makes.
    #[derive(Clone)]
    struct Counting(Arc<AtomicU32>);
    impl Policy<u64, BackendError> for Counting {
        fn idempotency(&self, _: &u64) -> Idempotency {
            Idempotency::Idempotent
        }
        fn clone_request(&self, id: &u64) -> Option<u64> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Some(*id)
        }
    }
    let backend = Backend::new(|_, _| Reply::After(ms(100)));
    let copies = Arc::new(AtomicU32::new(0));
    // No hedges, no retries: the hedger can release nothing.
    let hedger = hedger(prior_5ms().max_hedges(0).max_retries(0));
    let service = HedgeLayer::new(Arc::clone(&hedger), Counting(Arc::clone(&copies)));
    assert_eq!(
        service.layer(backend.clone()).oneshot(18).await.unwrap(),
        (18, 0)
    );
    assert_eq!(copies.load(Ordering::Relaxed), 0);
    assert_eq!(backend.calls().len(), 1);
    // With hedging on, one copy is kept and one more made for the hedge.
    let hedger = self::hedger(prior_5ms());
    let service = HedgeLayer::new(Arc::clone(&hedger), Counting(Arc::clone(&copies)));
    assert_eq!(
        service.layer(backend.clone()).oneshot(20).await.unwrap().0,
        20
    );
    assert_eq!(copies.load(Ordering::Relaxed), 2);
}

/// A hedge waits for its service's readiness before the hedger releases
/// it: a hedge held back by back-pressure is timed from its call, not from
/// when its timer fired, and one that never goes out costs no token and
/// counts as no hedge.
#[tokio::test(start_paused = true)]
async fn a_hedge_held_back_by_back_pressure_is_timed_from_its_call() {
    // Request 100 is another caller's, holding one of two permits 50 ms;
    // our primary takes 500 ms, our hedge 1 ms.
    let backend = Backend::new(|id, n| {
        Reply::After(ms(match (id, n) {
            (100, _) => 50,
            (_, 0) => 500,
            _ => 1,
        }))
    });
    let limited = tower::limit::ConcurrencyLimit::new(backend.clone(), 2);
    let hedger = hedger(prior_5ms().min_samples(1));
    let mut other = limited.clone();
    let held = tokio::spawn(other.ready().await.unwrap().call(100));
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(limited);
    let t0 = Instant::now();
    assert_eq!(service.oneshot(0).await.unwrap(), (0, 1));
    // Released at 5 ms, called at 50 ms when a permit came back.
    assert_eq!(t0.elapsed(), ms(51));
    held.await.unwrap().unwrap();
    let stats = hedger.stats();
    assert_eq!((stats.hedges_sent, stats.hedge_wins), (1, 1));
    // Its sample is its own 1 ms (not the 46 ms it waited and ran).
    let now = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent)
        .tokio_clock()
        .now_ns();
    let delay = hedger.delay_ns(0, now).expect("warm");
    assert!(delay <= 2 * MS, "{delay} ns");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_its_service_never_readies_is_never_released() {
    // One permit: the primary holds it for its 500 ms.
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 500 } else { 1 })));
    let limited = tower::limit::ConcurrencyLimit::new(backend.clone(), 1);
    let hedger = hedger(prior_5ms());
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(limited);
    let t0 = Instant::now();
    assert_eq!(service.oneshot(0).await.unwrap(), (0, 0));
    assert_eq!(t0.elapsed(), ms(500));
    assert_eq!(backend.calls().len(), 1);
    let stats = hedger.stats();
    assert_eq!((stats.hedges_sent, stats.primary_wins), (0, 1));
    assert_eq!(
        hedger.budget_stats().grants,
        0,
        "no token for a hedge never sent"
    );
    assert_eq!(stats.censored_samples, 0, "no attempt but the primary");
}

/// While a due hedge waits for readiness, the deadline still fires.
#[tokio::test(start_paused = true)]
async fn the_deadline_fires_while_a_hedge_waits_for_readiness() {
    let backend = Backend::new(|_, _| Reply::After(ms(500)));
    let limited = tower::limit::ConcurrencyLimit::new(backend.clone(), 1);
    let hedger = hedger(prior_5ms().deadline_ns(20 * MS));
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(limited);
    let t0 = Instant::now();
    assert!(matches!(
        service.oneshot(0).await,
        Err(HedgeError::Deadline)
    ));
    assert_eq!(t0.elapsed(), ms(20));
    assert_eq!(hedger.stats().gave_up, 1);
    assert_eq!(hedger.hedges_in_flight(u64::MAX / 2), 0);
}

/// A future that counts its polls and fails past `limit`: a busy loop
/// (every poll waking the next) shows as thousands, where a waiting
/// future is polled a handful of times.
struct PollBudget<F> {
    inner: Pin<Box<F>>,
    polls: u32,
    limit: u32,
}

impl<F: Future> Future for PollBudget<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls += 1;
        assert!(
            self.polls <= self.limit,
            "polled {} times: a busy loop",
            self.polls
        );
        self.inner.as_mut().poll(cx)
    }
}

/// A due hedge waits for readiness (one permit, held by the primary for
/// 30 ms) under a deadline, and something else wakes the task meanwhile
/// (here a sleep joined with it): the wait stays a wait. (The timer was
/// armed back at the passed hedge time on every poll, which fired at once
/// and woke the task again: a busy loop, which under paused time never
/// let the clock advance.)
#[tokio::test(start_paused = true)]
async fn a_hedge_waiting_for_readiness_under_a_deadline_does_not_spin() {
    for deadline in [None, Some(1_000 * MS)] {
        let backend = Backend::new(|_, _| Reply::After(ms(30)));
        let limited = tower::limit::ConcurrencyLimit::new(backend.clone(), 1);
        let mut config = HedgeConfig::DEFAULT.prior_delay_ns(2 * MS);
        if let Some(d) = deadline {
            config = config.deadline_ns(d);
        }
        let hedger = hedger(config);
        let service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(limited);
        let t0 = Instant::now();
        let call = PollBudget {
            inner: Box::pin(service.oneshot(0)),
            polls: 0,
            limit: 100,
        };
        let (answer, ()) = tokio::join!(call, sleep(ms(5)));
        assert_eq!(answer.unwrap(), (0, 0), "deadline {deadline:?}");
        assert_eq!(t0.elapsed(), ms(30));
        assert_eq!(hedger.hedges_in_flight(u64::MAX / 2), 0);
    }
}

/// A hedge waiting for readiness holds a place in the inner service's
/// queue. When a failure releases an attempt at once, that attempt goes
/// out on the waiting clone, so the permit the failure frees is not handed
/// to a clone nobody polls. One permit; the primary fails at 10 ms while
/// the hedge (due at 5 ms) waits for it: the retry is called at 10 ms and
/// answers at 11 ms, also with a deadline at 14 ms (before the fix it
/// timed out there).
#[tokio::test(start_paused = true)]
async fn an_attempt_a_failure_releases_takes_the_waiting_clone() {
    for deadline in [None, Some(14 * MS)] {
        let backend = Backend::new(|_, n| match n {
            0 => Reply::FailAfter(ms(10), Failure::Retryable),
            _ => Reply::After(ms(1)),
        });
        let limited = tower::limit::ConcurrencyLimit::new(backend.clone(), 1);
        let mut config = prior_5ms().max_retries(1);
        if let Some(d) = deadline {
            config = config.deadline_ns(d);
        }
        let hedger = hedger(config);
        let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(limited);
        let t0 = Instant::now();
        assert_eq!(service.oneshot(0).await.unwrap(), (0, 1));
        assert_eq!(t0.elapsed(), ms(11));
        let calls: Vec<_> = backend.calls().iter().map(|c| c.2 - t0).collect();
        assert_eq!(calls, [ms(0), ms(10)]);
        let stats = hedger.stats();
        assert_eq!(
            (stats.retries_released, stats.hedges_sent, stats.retry_wins),
            (1, 0, 1),
            "{stats:?}"
        );
    }
}

/// Two permits; the primary never answers in time, the first hedge (5 ms)
/// fails at 12 ms while the second (due at 10 ms) waits for a permit: the
/// replacement the failure releases goes out at 12 ms on the waiting
/// clone and answers at 13 ms.
#[tokio::test(start_paused = true)]
async fn a_replacement_hedge_takes_the_waiting_clone() {
    let backend = Backend::new(|_, n| match n {
        0 => Reply::After(ms(1_000)),
        1 => Reply::FailAfter(ms(7), Failure::Retryable),
        _ => Reply::After(ms(1)),
    });
    let limited = tower::limit::ConcurrencyLimit::new(backend.clone(), 2);
    let hedger = hedger(prior_5ms().max_hedges(2).max_retries(1));
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(limited);
    let t0 = Instant::now();
    assert_eq!(service.oneshot(0).await.unwrap(), (0, 2));
    assert_eq!(t0.elapsed(), ms(13));
    let calls: Vec<_> = backend.calls().iter().map(|c| c.2 - t0).collect();
    assert_eq!(calls, [ms(0), ms(5), ms(12)]);
    assert_eq!(hedger.stats().hedges_sent, 2);
}

/// `Backend` whose readiness fails with `error` from its `ok`-th
/// `poll_ready` on, counted across its clones (a pool that broke after
/// the primary was called on it).
#[derive(Clone)]
struct ReadinessFails {
    inner: Backend,
    polls: Arc<std::sync::atomic::AtomicU32>,
    ok: u32,
    error: Failure,
}

impl ReadinessFails {
    fn new(inner: Backend, ok: u32, error: Failure) -> Self {
        Self {
            inner,
            polls: Arc::default(),
            ok,
            error,
        }
    }
}

impl Service<u64> for ReadinessFails {
    type Response = (u64, u32);
    type Error = BackendError;
    type Future = <Backend as Service<u64>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BackendError>> {
        let n = self
            .polls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n < self.ok {
            self.inner.poll_ready(cx)
        } else {
            Poll::Ready(Err(BackendError(self.error)))
        }
    }

    fn call(&mut self, id: u64) -> Self::Future {
        self.inner.call(id)
    }
}

/// A hedge whose service clone fails readiness never went out: it is not
/// released (no hedge counted, no budget token), no later attempt is
/// either, and the primary, still healthy, answers — whatever the policy
/// makes of the readiness error (a fatal one does not fail the request).
#[tokio::test(start_paused = true)]
async fn a_hedge_whose_readiness_fails_is_never_released_nor_paid() {
    for error in [Failure::Retryable, Failure::Fatal] {
        let backend = Backend::new(|_, _| Reply::After(ms(30)));
        let service = ReadinessFails::new(backend.clone(), 1, error);
        let bucket = tailguard::TokenBucket::new(10, 10).unwrap();
        let config = prior_5ms().max_retries(2);
        let hedger: Arc<SharedHedger> =
            Arc::new(SharedHedger::with_budget(config, Budget::TokenBucket(bucket)).unwrap());
        let layered = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(service);
        let t0 = Instant::now();
        assert_eq!(layered.oneshot(0).await, Ok((0, 0)), "{error:?}");
        assert_eq!(t0.elapsed(), ms(30));
        assert_eq!(backend.calls().len(), 1, "only the primary went out");
        let stats = hedger.stats();
        assert_eq!(
            (
                stats.hedges_sent,
                stats.retries_released,
                stats.primary_wins
            ),
            (0, 0, 1),
            "{error:?}: {stats:?}"
        );
        assert_eq!(hedger.budget_stats().grants, 0, "{error:?}: no token");
        assert_eq!(hedger.hedges_in_flight(u64::MAX / 2), 0);
    }
}

/// A retry a failure released at once readies after its release: if its
/// readiness fails, it counts as released (it was, before anyone could
/// know), but no further attempt is, and the request fails with the
/// readiness error once nothing else is in flight.
#[tokio::test(start_paused = true)]
async fn a_retry_whose_readiness_fails_ends_the_extra_attempts() {
    for error in [Failure::Retryable, Failure::Fatal] {
        let backend = Backend::new(|_, _| Reply::FailAfter(ms(2), Failure::Retryable));
        let service = ReadinessFails::new(backend.clone(), 1, error);
        let hedger = hedger(prior_5ms().max_retries(2));
        let layered = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(service);
        let t0 = Instant::now();
        assert_eq!(
            layered.oneshot(0).await,
            Err(HedgeError::Service(BackendError(error)))
        );
        assert_eq!(t0.elapsed(), ms(2));
        assert_eq!(backend.calls().len(), 1);
        let stats = hedger.stats();
        assert_eq!(
            (stats.retries_released, stats.hedges_sent, stats.gave_up),
            (1, 0, 1),
            "{error:?}: {stats:?}"
        );
    }
}

/// Under the paused clock, guards timed on `TokioClock::new` agree with
/// the layer (a `MonotonicClock` would read real time): after an hour of
/// paused time, a guard's hedge still counts against the layer's
/// in-flight cap of one.
#[tokio::test(start_paused = true)]
async fn guards_on_tokio_clocks_agree_with_the_layer_under_the_paused_clock() {
    use tailguard::guard::RequestGuard;
    use tailguard::hedge::TimerAction;
    use tailguard::tower::TokioClock;
    sleep(ms(3_600_000)).await;
    let hedger = hedger(prior_5ms().max_hedges_in_flight(1));
    let layer = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent);
    let mut guard = RequestGuard::start(
        Arc::clone(&hedger),
        TokioClock::new(),
        0,
        Idempotency::Idempotent,
    );
    sleep(ms(6)).await;
    assert!(matches!(guard.on_timer(), TimerAction::SendHedge(_)));
    // The layer's request may not hedge: the guard's hedge holds the place.
    let backend = Backend::new(|_, n| Reply::After(ms(if n == 0 { 50 } else { 2 })));
    let service = layer.layer(backend.clone());
    assert_eq!(service.oneshot(0).await.unwrap(), (0, 0));
    let stats = hedger.stats();
    assert_eq!(
        (stats.hedges_sent, stats.leases_expired),
        (1, 0),
        "{stats:?}"
    );
    // Refused at 5 ms, and again at each re-armed timer.
    assert!(stats.in_flight_limited >= 1, "{stats:?}");
    drop(guard);
    assert_eq!(hedger.hedges_in_flight(layer.tokio_clock().now_ns()), 0);
}

/// Fails its first call (retryable) and answers the next, both at once.
#[derive(Clone, Default)]
struct FailsOnce(Arc<Mutex<u32>>);

impl Service<u64> for FailsOnce {
    type Response = u32;
    type Error = BackendError;
    type Future = std::future::Ready<Result<u32, BackendError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BackendError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: u64) -> Self::Future {
        let mut calls = self.0.lock().unwrap();
        *calls += 1;
        std::future::ready(if *calls == 1 {
            Err(BackendError(Failure::Retryable))
        } else {
            Ok(*calls)
        })
    }
}

/// A request that never waits for a hedge builds no timer, so the layer
/// runs without tokio's time driver (here a runtime without it), also when
/// a failure releases a retry: the retry goes out and answers.
#[test]
fn a_retry_needs_no_time_driver() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let backend = FailsOnce::default();
    // No prior and a cold window: no hedge is planned, no timer is due.
    let hedger = hedger(HedgeConfig::DEFAULT);
    let service = HedgeLayer::new(Arc::clone(&hedger), EvenIdempotent).layer(backend.clone());
    let answer = runtime.block_on(service.oneshot(2));
    assert_eq!(answer.unwrap(), 2);
    assert_eq!(hedger.stats().retries_released, 1);
}
