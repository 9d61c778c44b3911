//! What hedging middleware adds to every request, on an inner service that
//! answers at once: the bare inner service, tailguard's `HedgeService`
//! (over an `Arc`ed hedger, and over a `&'static` one),
//! tower's `Hedge` (warm: its histogram holds data, so it plans a hedge on
//! every request), and a `Mutex<Hedger>` driven by hand (start + commit).
//! Every variant runs inside a current-thread tokio runtime (tower's hedge
//! builds a timer per request) and polls each response future once. A
//! fifth row drives the layer's `SharedHedger` by hand with the layer's
//! clock (start + commit): the layer's own cost is the difference.
//!
//! Run: `cargo bench --bench tower --features tower`
//!
//! Instructions per request (callgrind): set `TAILGUARD_CALLGRIND` to
//! `VARIANT:N` (variant `bare`, `tailguard`, `tailguard-static`, `tower`, `mutex`,
//! `shared`) to run N
//! requests after a warm-up, and take the difference of two request counts
//! (the hedger's window refreshes its quantile now and then, so take many):
//! `valgrind --tool=callgrind target/release/deps/tower-<hash>` with
//! `TAILGUARD_CALLGRIND=tailguard:12000` and `:2000`, over 10 000 (the
//! layer's count moves a few percent run to run: its thread publishes
//! samples in batches formed by time, and valgrind's speed sets the time).
//! The paused-clock tests turn on tokio's `test-util`, which adds a clock
//! look-up to every tokio clock read (2 per request here, 6 in tower's
//! hedge); the README's figures were taken with it on, as the bench builds.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::Criterion;
use tailguard::clock::Clock;
use tailguard::hedge::SharedHedger;
use tailguard::hedge::{Attempt, HedgeConfig, Hedger, Idempotency};
use tailguard::tower::{AllIdempotent, HedgeLayer, TokioClock};
use tower::{Layer, Service};

/// The inner service: answers at once.
#[derive(Clone, Copy)]
struct Inner;

impl Service<u64> for Inner {
    type Response = u64;
    type Error = Infallible;
    type Future = Ready<Result<u64, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: u64) -> Self::Future {
        ready(Ok(request.wrapping_mul(3)))
    }
}

/// tower's hedge policy: every request may be hedged.
#[derive(Clone, Copy)]
struct TowerPolicy;

impl tower::hedge::Policy<u64> for TowerPolicy {
    fn clone_request(&self, request: &u64) -> Option<u64> {
        Some(*request)
    }

    fn can_retry(&self, _: &u64) -> bool {
        true
    }
}

/// One request through `service`: ready, call, one poll.
fn serve<S: Service<u64>>(service: &mut S, request: u64) -> S::Response
where
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(())) = service.poll_ready(&mut cx) else {
        panic!("the inner service is always ready")
    };
    match pin!(service.call(request)).poll(&mut cx) {
        Poll::Ready(Ok(response)) => response,
        Poll::Ready(Err(e)) => panic!("{e:?}"),
        Poll::Pending => panic!("the inner service answers at once"),
    }
}

/// A hedged client under test: one request at a time.
trait Client {
    fn request(&mut self, i: u64) -> u64;
}

struct Bare(Inner);

impl Client for Bare {
    fn request(&mut self, i: u64) -> u64 {
        serve(&mut self.0, i)
    }
}

struct Tailguard(tailguard::tower::HedgeService<Inner, AllIdempotent>);

impl Client for Tailguard {
    fn request(&mut self, i: u64) -> u64 {
        serve(&mut self.0, i)
    }
}

struct TowerHedge(tower::hedge::Hedge<Inner, TowerPolicy>);

impl Client for TowerHedge {
    fn request(&mut self, i: u64) -> u64 {
        serve(&mut self.0, i)
    }
}

/// The hand-driven baseline: two clock reads, two lock/unlock pairs.
struct MutexHedger {
    hedger: Mutex<Hedger>,
    origin: Instant,
    inner: Inner,
}

impl Client for MutexHedger {
    fn request(&mut self, i: u64) -> u64 {
        let now = || self.origin.elapsed().as_nanos() as u64;
        let mut request = self
            .hedger
            .lock()
            .unwrap()
            .start((), now(), Idempotency::Idempotent);
        let response = serve(&mut self.inner, i);
        let outcome = self
            .hedger
            .lock()
            .unwrap()
            .on_commit(&mut request, Attempt::PRIMARY, now());
        let _ = black_box(outcome);
        response
    }
}

/// The layer's hedger driven by hand, with the layer's clock: what the
/// layer costs beyond its two hedger events is the difference.
struct SharedByHand {
    hedger: SharedHedger,
    clock: TokioClock,
    inner: Inner,
}

impl Client for SharedByHand {
    fn request(&mut self, i: u64) -> u64 {
        let now = self.clock.now_ns();
        let mut request = self.hedger.start(0, now, Idempotency::Idempotent);
        let response = serve(&mut self.inner, i);
        let now = self.clock.now_ns();
        let _ = black_box(self.hedger.on_commit(&mut request, Attempt::PRIMARY, now));
        response
    }
}

/// Every variant named `only` (all if `None`), warmed with 2 000 requests.
fn clients(only: Option<&str>) -> Vec<(&'static str, Box<dyn Client>)> {
    let hedger = Arc::new(SharedHedger::new(HedgeConfig::DEFAULT).unwrap());
    let ours = HedgeLayer::new(hedger, AllIdempotent).layer(Inner);
    // The same with a `&'static` hedger: no `Arc` count moved per request.
    let leaked: &'static SharedHedger =
        Box::leak(Box::new(SharedHedger::new(HedgeConfig::DEFAULT).unwrap()));
    let ours_static = HedgeLayer::new(leaked, AllIdempotent).layer(Inner);
    // tower's histogram pre-filled: it plans a hedge at its p90 from the
    // first request.
    let theirs = tower::hedge::Hedge::new_with_mock_latencies(
        Inner,
        TowerPolicy,
        10,
        0.9,
        Duration::from_secs(10),
        &[1; 1_000],
    );
    let by_hand = SharedByHand {
        hedger: SharedHedger::new(HedgeConfig::DEFAULT).unwrap(),
        clock: TokioClock::new(),
        inner: Inner,
    };
    let mut all: Vec<(&'static str, Box<dyn Client>)> = vec![
        ("bare inner service", Box::new(Bare(Inner))),
        ("tailguard HedgeService", Box::new(Tailguard(ours))),
        (
            "tailguard HedgeService, &'static hedger",
            Box::new(Tailguard(ours_static)),
        ),
        ("tower Hedge", Box::new(TowerHedge(theirs))),
        ("SharedHedger start + on_commit", Box::new(by_hand)),
        (
            "Mutex<Hedger> start + on_commit",
            Box::new(MutexHedger {
                hedger: Mutex::new(Hedger::new(HedgeConfig::DEFAULT).unwrap()),
                origin: Instant::now(),
                inner: Inner,
            }),
        ),
    ];
    all.retain(|(name, _)| only.is_none_or(|o| o == *name));
    for (_, client) in &mut all {
        for i in 0..2_000 {
            black_box(client.request(i));
        }
    }
    all
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn per_request(c: &mut Criterion) {
    let rt = runtime();
    let _entered = rt.enter();
    let mut group = c.benchmark_group("tower");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for (name, mut client) in clients(None) {
        let mut i = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                black_box(client.request(black_box(i)))
            })
        });
    }
    group.finish();
}

/// `VARIANT:N`: N requests of one variant, for callgrind.
fn callgrind(spec: &str) {
    let (variant, n) = spec.split_once(':').expect("VARIANT:N");
    let n: u64 = n.parse().expect("N is a count");
    let name = match variant {
        "bare" => "bare inner service",
        "tailguard" => "tailguard HedgeService",
        "tailguard-static" => "tailguard HedgeService, &'static hedger",
        "tower" => "tower Hedge",
        "mutex" => "Mutex<Hedger> start + on_commit",
        "shared" => "SharedHedger start + on_commit",
        other => panic!("unknown variant {other}"),
    };
    let rt = runtime();
    let _entered = rt.enter();
    let (_, mut client) = clients(Some(name)).pop().expect("a variant");
    for i in 0..n {
        black_box(client.request(i));
    }
}

fn main() {
    if let Ok(spec) = std::env::var("TAILGUARD_CALLGRIND") {
        callgrind(&spec);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    per_request(&mut c);
    c.final_summary();
}
