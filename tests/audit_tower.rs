//! Audit of the async client surfaces as clients use them: the tower
//! layer's response future dropped by task aborts, `select!` and timeouts,
//! before and after its hedge fired; many concurrent requests ending every
//! way; a backend that slows down tenfold and recovers; and
//! `RequestGuard`s dropped on other threads. Times are tokio's paused
//! clock or explicit: nothing depends on timing.
#![cfg(feature = "tower")]

mod test_clock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use test_clock::TestClock;

use tailguard::clock::Clock;
use tailguard::guard::RequestGuard;
use tailguard::hedge::{Failure, HedgeConfig, Idempotency, SharedHedger, TimerAction};
use tailguard::tower::{HedgeError, HedgeLayer, Policy};
use tailguard::Budget;
use tokio::time::{sleep, Instant};
use tower::{service_fn, Layer, Service, ServiceExt};

const MS: u64 = 1_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The backend's error, classified as it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fail(Failure);

/// Every request may be copied; errors are classified as they say.
#[derive(Clone, Copy)]
struct Idempotent;

impl Policy<u64, Fail> for Idempotent {
    fn idempotency(&self, _: &u64) -> Idempotency {
        Idempotency::Idempotent
    }

    fn clone_request(&self, id: &u64) -> Option<u64> {
        Some(*id)
    }

    fn failure(&self, error: &Fail) -> Failure {
        error.0
    }
}

/// A backend whose `n`-th call overall answers after `latency(n)` (or
/// fails, for the negative ones), counting its calls.
#[derive(Clone)]
struct Backend {
    calls: Arc<AtomicU64>,
    /// Latency of every call, in ms; changed by the test.
    latency_ms: Arc<AtomicU64>,
}

impl Backend {
    fn new(latency_ms: u64) -> Self {
        Self {
            calls: Arc::default(),
            latency_ms: Arc::new(AtomicU64::new(latency_ms)),
        }
    }

    fn service(
        &self,
    ) -> impl Service<u64, Response = u64, Error = Fail, Future = impl Send> + Clone + Send {
        let (calls, latency) = (Arc::clone(&self.calls), Arc::clone(&self.latency_ms));
        service_fn(move |id: u64| {
            calls.fetch_add(1, Relaxed);
            let d = latency.load(Relaxed);
            async move {
                sleep(ms(d)).await;
                Ok::<_, Fail>(id)
            }
        })
    }
}

fn hedger(config: HedgeConfig) -> Arc<SharedHedger<Budget>> {
    Arc::new(SharedHedger::with_budget(config, Budget::Unlimited).unwrap())
}

/// A 5 ms prior, at most one hedge in flight, a 10 s lease (so "released
/// at once" cannot be the lease running out).
fn capped() -> HedgeConfig {
    HedgeConfig::DEFAULT
        .prior_delay_ns(5 * MS)
        .max_hedges_in_flight(1)
        .in_flight_lease_ns(10_000 * MS)
}

/// An aborted task whose hedge was in flight frees the in-flight cap at
/// once: the next request hedges at its own delay, not after the lease.
#[tokio::test(start_paused = true)]
async fn an_aborted_task_frees_the_in_flight_cap_at_once() {
    let backend = Backend::new(100);
    let hedger = hedger(capped());
    let layer = HedgeLayer::new(Arc::clone(&hedger), Idempotent);
    let clock = layer.tokio_clock();
    let service = layer.layer(backend.service());
    let task = tokio::spawn(service.clone().oneshot(1));
    sleep(ms(7)).await; // the hedge went out at 5 ms
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 1);
    assert_eq!(backend.calls.load(Relaxed), 2);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 0, "at once");
    let stats = hedger.stats();
    assert_eq!(
        (stats.samples, stats.censored_samples, stats.gave_up),
        (0, 2, 1),
        "both attempts censored, nothing exact"
    );
    // The next straggler hedges at 5 ms: the cap is free.
    backend.latency_ms.store(30, Relaxed);
    let t0 = Instant::now();
    let task = tokio::spawn(service.clone().oneshot(2));
    sleep(ms(6)).await;
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 1);
    assert_eq!(hedger.stats().in_flight_limited, 0);
    assert_eq!(task.await.unwrap().unwrap(), 2);
    assert_eq!(t0.elapsed(), ms(30), "the primary still wins");
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 0);
    assert_eq!(hedger.stats().leases_expired, 0);
}

/// A `select!` that the hedged call loses, before its hedge is due:
/// only the primary is censored, no hedge is ever sent.
#[tokio::test(start_paused = true)]
async fn a_select_loser_before_the_hedge_censors_only_the_primary() {
    let backend = Backend::new(100);
    let hedger = hedger(capped());
    let service = HedgeLayer::new(Arc::clone(&hedger), Idempotent).layer(backend.service());
    tokio::select! {
        _ = service.clone().oneshot(1) => panic!("the call cannot win"),
        () = sleep(ms(3)) => {}
    }
    // Past the hedge's delay: nothing fires for a dropped request.
    sleep(ms(10)).await;
    assert_eq!(backend.calls.load(Relaxed), 1);
    let stats = hedger.stats();
    assert_eq!(
        (
            stats.hedges_sent,
            stats.samples,
            stats.censored_samples,
            stats.gave_up
        ),
        (0, 0, 1, 1)
    );
}

/// Many concurrent requests, each given up by its caller's timeout at a
/// different moment (before its hedge, after it, or never), over a backend
/// whose attempts fail now and then: every request ends exactly once,
/// winners alone are exact, nothing stays in flight, every released
/// attempt reached the backend.
#[tokio::test(start_paused = true)]
async fn concurrent_requests_ending_every_way_balance() {
    let n = 400u64;
    let calls = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    // Call k answers after 1..=40 ms; every 7th fails (every other one of
    // those fatally).
    let backend = service_fn(move |id: u64| {
        let k = counter.fetch_add(1, Relaxed);
        async move {
            sleep(ms(1 + (k * 13 + id) % 40)).await;
            match k % 14 {
                0 => Err(Fail(Failure::Retryable)),
                7 => Err(Fail(Failure::Fatal)),
                _ => Ok(id),
            }
        }
    });
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(8 * MS)
        .min_samples(10)
        .max_hedges(2)
        .max_hedges_in_flight(20)
        .in_flight_lease_ns(10_000 * MS);
    let hedger = Arc::new(SharedHedger::new(config).unwrap());
    let layer = HedgeLayer::new(Arc::clone(&hedger), Idempotent);
    let clock = layer.tokio_clock();
    let service = layer.layer(backend);
    let mut tasks = Vec::new();
    for id in 0..n {
        let call = service.clone().oneshot(id);
        tasks.push(tokio::spawn(async move {
            sleep(ms(id % 17)).await; // staggered starts
                                      // Timeouts from 2 ms (before any hedge) to never.
            match id % 4 {
                0 => Some(call.await),
                t => tokio::time::timeout(ms(t * 9 - 7), call).await.ok(),
            }
        }));
    }
    let (mut ok, mut failed, mut timed_out) = (0u64, 0u64, 0u64);
    for task in tasks {
        match task.await.unwrap() {
            Some(Ok(_)) => ok += 1,
            Some(Err(HedgeError::Service(_))) => failed += 1,
            Some(Err(e)) => panic!("{e:?}"),
            None => timed_out += 1,
        }
    }
    assert_eq!(ok + failed + timed_out, n);
    assert!(
        ok > 0 && failed > 0 && timed_out > 0,
        "{ok} {failed} {timed_out}"
    );
    let stats = hedger.stats();
    assert_eq!(stats.requests, n);
    assert_eq!(stats.primary_wins + stats.hedge_wins + stats.retry_wins, ok);
    assert_eq!(stats.gave_up, failed + timed_out);
    assert_eq!(stats.samples, ok, "winners alone are exact");
    assert_eq!(stats.samples_refused + stats.clock_anomalies, 0);
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 0);
    assert_eq!(stats.leases_expired, 0);
    assert_eq!(hedger.budget_stats().grants, stats.hedges_sent);
    assert_eq!(
        calls.load(Relaxed),
        n + stats.hedges_sent + stats.retries_released,
        "every released attempt was called"
    );
}

/// Whether `delay` is `latency` within the mapping's accuracy (1 %).
fn accurate(delay: Option<u64>, latency: u64) -> bool {
    delay.is_some_and(|d| d.abs_diff(latency) * 100 <= latency)
}

/// Through the layer, one request after another: a backend 10× slower for
/// a while is followed within two batches of 1 000 answers (the p90
/// window's rotation), and so is its recovery.
#[tokio::test(start_paused = true)]
#[cfg_attr(miri, ignore)]
async fn the_layer_follows_a_tenfold_slowdown_and_back() {
    let backend = Backend::new(2);
    let hedger = Arc::new(SharedHedger::new(HedgeConfig::DEFAULT.prior_delay_ns(MS)).unwrap());
    let layer = HedgeLayer::new(Arc::clone(&hedger), Idempotent);
    let clock = layer.tokio_clock();
    let mut service = layer.layer(backend.service());
    let batch = 1_000;
    let mut followed = Vec::new();
    for latency in [2, 20, 2] {
        backend.latency_ms.store(latency, Relaxed);
        let mut first = None;
        for i in 0..3 * batch {
            service.ready().await.unwrap().call(i).await.unwrap();
            if first.is_none() && accurate(hedger.delay_ns(0, clock.now_ns()), latency * MS) {
                first = Some(i);
            }
        }
        followed.push(first.expect("followed"));
    }
    eprintln!("followed after {followed:?} requests");
    assert!(followed.iter().all(|&f| f <= 2 * batch), "{followed:?}");
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 0);
}

/// Guards moved to other threads and dropped there, in every phase, with
/// the clock moving on meanwhile: each gives its request up once, at the
/// drop, releasing its hedges then.
#[test]
fn guards_dropped_on_other_threads_give_up_at_once() {
    let config = capped().max_hedges(2).max_hedges_in_flight(100);
    let hedger = hedger(config);
    let clock = TestClock(Arc::new(AtomicU64::new(1_000 * MS)));
    let mut guards = Vec::new();
    let mut censored = 0;
    for k in 0..30u64 {
        let mut g = RequestGuard::start(
            Arc::clone(&hedger),
            clock.clone(),
            0,
            Idempotency::Idempotent,
        );
        // k % 3 hedges fired, up to two.
        for _ in 0..k % 3 {
            clock.0.fetch_add(5 * MS, Relaxed);
            assert!(matches!(g.on_timer(), TimerAction::SendHedge(_)));
        }
        censored += 1 + k % 3;
        guards.push(g);
    }
    let now = clock.now_ns();
    let sent = hedger.stats().hedges_sent;
    assert_eq!(hedger.hedges_in_flight(now), sent as u32);
    std::thread::scope(|s| {
        let mut guards = guards;
        while !guards.is_empty() {
            let batch: Vec<_> = guards.drain(..guards.len().min(7)).collect();
            s.spawn(move || drop(batch));
        }
    });
    assert_eq!(hedger.hedges_in_flight(now), 0);
    let stats = hedger.stats();
    assert_eq!(
        (stats.samples, stats.censored_samples, stats.gave_up),
        (0, censored, 30)
    );
}

/// An inner future that panics after the hedge went out: the task dies,
/// its response future is dropped while unwinding, and the request is
/// given up at once (both attempts censored, nothing in flight).
#[tokio::test(start_paused = true)]
async fn an_inner_panic_gives_the_request_up() {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    let backend = service_fn(move |id: u64| {
        let k = counter.fetch_add(1, Relaxed);
        async move {
            sleep(ms(if k == 0 { 100 } else { 1 })).await;
            assert!(k == 0, "the hedge's attempt panics");
            Ok::<_, Fail>(id)
        }
    });
    let hedger = hedger(capped());
    let layer = HedgeLayer::new(Arc::clone(&hedger), Idempotent);
    let clock = layer.tokio_clock();
    let task = tokio::spawn(layer.layer(backend).oneshot(1));
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(calls.load(Relaxed), 2);
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 0);
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

/// Two layers over one hedger, each built with [`HedgeLayer::new`], an
/// hour apart. Were each clock's origin its own making, the hedger would
/// see two time bases an hour apart: its in-flight cap would count only
/// one layer's hedges at a time (two hedges out under a cap of one), and
/// a window fed by both would keep emptying on what looks like an idle
/// gap. Both clocks are on the shared time base: one cap for both.
#[tokio::test(start_paused = true)]
async fn two_layers_over_one_hedger_share_its_in_flight_cap() {
    let backend = Backend::new(100);
    let hedger = hedger(capped());
    let first = HedgeLayer::new(Arc::clone(&hedger), Idempotent).layer(backend.service());
    sleep(Duration::from_secs(3_600)).await;
    let second = HedgeLayer::new(Arc::clone(&hedger), Idempotent).layer(backend.service());
    let a = tokio::spawn(first.oneshot(1));
    let b = tokio::spawn(second.oneshot(2));
    sleep(ms(7)).await; // both hedges are due at 5 ms; the cap is one
    let stats = hedger.stats();
    assert_eq!(
        (stats.hedges_sent, stats.in_flight_limited),
        (1, 1),
        "{stats:?}"
    );
    a.abort();
    b.abort();
}

/// Tokio's multi-threaded runtime, real time: requests race on four
/// workers, a quarter of them abandoned by a timeout, a few failing.
/// Whatever the interleaving, the counts balance exactly and nothing
/// stays in flight (the assertions hold for any timing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(miri, ignore)]
async fn multi_threaded_runtime_counts_balance() {
    let n = 600u64;
    let calls = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    let backend = service_fn(move |id: u64| {
        let k = counter.fetch_add(1, Relaxed);
        async move {
            // 0 to 3 ms, the odd slow one at 20 ms.
            let d = if k % 10 == 3 {
                20_000
            } else {
                (k * 7 + id) % 3_000
            };
            sleep(Duration::from_micros(d)).await;
            if k % 23 == 5 {
                Err(Fail(Failure::Retryable))
            } else {
                Ok(id)
            }
        }
    });
    let config = HedgeConfig::DEFAULT
        .prior_delay_ns(2 * MS)
        .min_samples(20)
        .max_hedges(2)
        .max_hedges_in_flight(8)
        .in_flight_lease_ns(3_600_000 * MS);
    let hedger = Arc::new(SharedHedger::new(config).unwrap());
    let layer = HedgeLayer::new(Arc::clone(&hedger), Idempotent);
    let clock = layer.tokio_clock();
    let service = layer.layer(backend);
    let tasks: Vec<_> = (0..n)
        .map(|id| {
            let call = service.clone().oneshot(id);
            tokio::spawn(async move {
                if id % 4 == 0 {
                    tokio::time::timeout(Duration::from_micros(1_500), call)
                        .await
                        .ok()
                } else {
                    Some(call.await)
                }
            })
        })
        .collect();
    let (mut ok, mut failed, mut timed_out) = (0u64, 0u64, 0u64);
    for task in tasks {
        match task.await.unwrap() {
            Some(Ok(_)) => ok += 1,
            Some(Err(HedgeError::Service(_))) => failed += 1,
            Some(Err(e)) => panic!("{e:?}"),
            None => timed_out += 1,
        }
    }
    let stats = hedger.stats();
    assert_eq!(stats.requests, n);
    assert_eq!(stats.primary_wins + stats.hedge_wins + stats.retry_wins, ok);
    assert_eq!(stats.gave_up, failed + timed_out);
    assert_eq!(stats.samples, ok, "winners alone are exact");
    assert_eq!(stats.samples_refused + stats.clock_anomalies, 0);
    assert_eq!(stats.leases_expired, 0);
    assert_eq!(hedger.hedges_in_flight(clock.now_ns()), 0);
    // Every grant paid for a hedge, except where another thread took the
    // last in-flight place between the check and the count (the token is
    // then spent for nothing, and the refusal counted as in-flight limited).
    let grants = hedger.budget_stats().grants;
    assert!(grants >= stats.hedges_sent, "{grants} {stats:?}");
    assert!(
        grants - stats.hedges_sent <= stats.in_flight_limited,
        "{grants} {stats:?}"
    );
    // A hedge released in the same poll as the race ends is never called.
    assert!(calls.load(Relaxed) <= n + stats.hedges_sent + stats.retries_released);
}

/// A policy that copies a request once (the spare kept for extra
/// attempts) and never again: it breaks its promise.
#[derive(Clone, Default)]
struct CopiesOnce(Arc<AtomicU64>);

impl Policy<u64, Fail> for CopiesOnce {
    fn idempotency(&self, _: &u64) -> Idempotency {
        Idempotency::Idempotent
    }

    fn clone_request(&self, id: &u64) -> Option<u64> {
        (self.0.fetch_add(1, Relaxed) == 0).then_some(*id)
    }

    fn failure(&self, error: &Fail) -> Failure {
        error.0
    }
}

/// A hedger whose budget counts its grants: ten tokens a second, ten at
/// once.
fn counted(config: HedgeConfig) -> Arc<SharedHedger<Budget>> {
    let bucket = tailguard::TokenBucket::new(10, 10).unwrap();
    Arc::new(SharedHedger::with_budget(config, Budget::TokenBucket(bucket)).unwrap())
}

/// A hedge that cannot be copied never goes out; it must not take the
/// hedger's budget for attempt after attempt that cannot go out either
/// (one hedge asked for, one token at most), and the primary races on.
#[tokio::test(start_paused = true)]
async fn an_uncopyable_hedge_spends_one_token_at_most() {
    let backend = Backend::new(30);
    let config = HedgeConfig::DEFAULT.prior_delay_ns(5 * MS);
    let hedger = counted(config);
    let service =
        HedgeLayer::new(Arc::clone(&hedger), CopiesOnce::default()).layer(backend.service());
    let t0 = Instant::now();
    assert_eq!(service.oneshot(3).await.unwrap(), 3);
    assert_eq!(t0.elapsed(), ms(30), "the primary answered");
    assert_eq!(backend.calls.load(Relaxed), 1);
    let stats = hedger.stats();
    assert_eq!(
        (
            stats.hedges_sent,
            hedger.budget_stats().grants,
            stats.samples,
            stats.censored_samples
        ),
        (1, 1, 1, 0),
        "one hedge released and failed, nothing recorded for it: {stats:?}"
    );
}

/// The same with nothing else in flight: the primary fails (retryable),
/// its retry cannot be copied, and the request fails with the primary's
/// error after one retry released, not `max_retries`.
#[tokio::test(start_paused = true)]
async fn an_uncopyable_retry_fails_the_request_once() {
    let backend = service_fn(|_: u64| async {
        sleep(ms(1)).await;
        Err::<u64, _>(Fail(Failure::Retryable))
    });
    let config = HedgeConfig::DEFAULT.prior_delay_ns(5 * MS).max_retries(3);
    let hedger = hedger(config);
    let service = HedgeLayer::new(Arc::clone(&hedger), CopiesOnce::default()).layer(backend);
    assert_eq!(
        service.oneshot(5).await.unwrap_err(),
        HedgeError::Service(Fail(Failure::Retryable))
    );
    let stats = hedger.stats();
    assert_eq!(
        (stats.retries_released, stats.gave_up, stats.samples),
        (1, 1, 0),
        "{stats:?}"
    );
}

/// A policy for a service whose error is tower's `BoxError` (a buffered or
/// timed-out one): per-attempt timeouts are worth another attempt.
#[derive(Clone, Copy)]
struct Boxed;

impl Policy<u64, tower::BoxError> for Boxed {
    fn idempotency(&self, _: &u64) -> Idempotency {
        Idempotency::Idempotent
    }

    fn clone_request(&self, id: &u64) -> Option<u64> {
        Some(*id)
    }

    fn failure(&self, error: &tower::BoxError) -> Failure {
        if error.is::<tower::timeout::error::Elapsed>() {
            Failure::Retryable
        } else {
            Failure::Fatal
        }
    }
}

/// A typical client stack: the hedged service is a buffered, per-attempt
/// timed-out one (its error a `BoxError`), and an outer timeout wraps the
/// layer, which asks the layer's error to turn into a `BoxError` too (and
/// `?` into one compiles).
#[tokio::test(start_paused = true)]
async fn a_buffered_timed_out_stack_hedges_inside_an_outer_timeout() -> Result<(), tower::BoxError>
{
    let latency_ms = Arc::new(AtomicU64::new(5));
    let backend = {
        let latency_ms = Arc::clone(&latency_ms);
        service_fn(move |id: u64| {
            let d = latency_ms.load(Relaxed);
            async move {
                sleep(ms(d)).await;
                Ok::<_, tower::BoxError>(id)
            }
        })
    };
    let inner = tower::ServiceBuilder::new()
        .buffer(64)
        .timeout(ms(50))
        .service(backend);
    let h = hedger(HedgeConfig::DEFAULT.prior_delay_ns(10 * MS));
    let svc = tower::ServiceBuilder::new()
        .timeout(ms(500))
        .layer(HedgeLayer::new(Arc::clone(&h), Boxed))
        .service(inner);
    let answer = svc.clone().oneshot(7).await?;
    assert_eq!(answer, 7);
    // A backend slower than the per-attempt timeout: every attempt times
    // out, and the layer's error comes out of the outer stack as a
    // `BoxError` whose message names the inner timeout.
    latency_ms.store(100, Relaxed);
    let error = svc.oneshot(8).await.expect_err("every attempt timed out");
    let shown = error.to_string();
    assert!(shown.contains("hedged request failed"), "{shown}");
    let elapsed = tower::timeout::error::Elapsed::new().to_string();
    assert!(shown.contains(&elapsed), "{shown} names no {elapsed}");
    let hedge_error = error
        .downcast_ref::<HedgeError<tower::BoxError>>()
        .expect("the layer's error, boxed");
    assert!(
        matches!(hedge_error, HedgeError::Service(e) if e.is::<tower::timeout::error::Elapsed>()),
        "{hedge_error:?}"
    );
    Ok(())
}
