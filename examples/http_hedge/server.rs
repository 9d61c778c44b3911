//! Loopback HTTP servers with the article's latency model, drawn per
//! attempt, and optional stop-the-world pauses per server.
//!
//! Each server counts the attempts it receives and the time it spends on
//! them (until the answer or until hyper drops the handler because its
//! client went away), so extra load and backend work are measured where
//! they happen, not inferred by the client.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// The per-attempt latency model: lognormal with this mean and standard
/// deviation, and with probability `slow_prob` (per attempt) `slow_factor`
/// times slower.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    pub mean_ms: f64,
    pub sd_ms: f64,
    pub slow_prob: f64,
    pub slow_factor: f64,
}

impl Model {
    /// The article's model: lognormal(5 ms, 2 ms), 5 % of attempts ×10.
    pub const ARTICLE: Self = Self {
        mean_ms: 5.0,
        sd_ms: 2.0,
        slow_prob: 0.05,
        slow_factor: 10.0,
    };

    /// The mean service time of an attempt, ms (no pauses).
    pub fn mean_ms(&self) -> f64 {
        self.mean_ms * (1.0 + self.slow_prob * (self.slow_factor - 1.0))
    }

    /// The lognormal's parameters (of the underlying normal), as the
    /// simulation derives them from the mean and standard deviation.
    fn lognormal(&self) -> LogNormal<f64> {
        let var = (1.0 + (self.sd_ms / self.mean_ms).powi(2)).ln();
        LogNormal::new(self.mean_ms.ln() - var / 2.0, var.sqrt())
            .expect("finite, positive mean and sd (checked by the command line)")
    }
}

/// Stop-the-world pauses of one server: `pause` long, exponential gaps of
/// mean `mean_gap` between one pause's end and the next one's start.
#[derive(Clone, Copy, Debug)]
pub struct Pauses {
    pub pause: Duration,
    pub mean_gap: Duration,
}

/// What every server has counted since the last [`Counters::take`].
#[derive(Default)]
pub struct Counters {
    attempts: AtomicU64,
    busy_ns: AtomicU64,
}

impl Counters {
    /// Attempts received and nanoseconds spent on them since the last call,
    /// and resets both.
    pub fn take(&self) -> (u64, u64) {
        (
            self.attempts.swap(0, Ordering::Relaxed),
            self.busy_ns.swap(0, Ordering::Relaxed),
        )
    }
}

/// Adds the time a handler ran to the busy counter, however it ends
/// (answered, or dropped by hyper when its connection closes).
struct Busy<'a> {
    since: Instant,
    counters: &'a Counters,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters.busy_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// One server's state, shared by its connections.
struct Server {
    model: Model,
    lognormal: LogNormal<f64>,
    rng: Mutex<StdRng>,
    /// Pause intervals `[start, end)`, sorted and disjoint, from `epoch`.
    pauses: Vec<(Instant, Instant)>,
    counters: Arc<Counters>,
}

impl Server {
    /// This attempt's service time.
    fn draw(&self) -> Duration {
        // The lock is held for two draws: nanoseconds, never across an await.
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let mut ms = self.lognormal.sample(&mut *rng);
        if rng.random::<f64>() < self.model.slow_prob {
            ms *= self.model.slow_factor;
        }
        Duration::from_secs_f64(ms / 1e3)
    }

    /// When an attempt arriving at `now` needing `work` finishes: no
    /// progress during a pause (the simulation's rule), so one arriving in
    /// a pause starts at its end and one in flight when a pause starts
    /// finishes the pause's length later.
    fn finish(&self, now: Instant, work: Duration) -> Instant {
        let first = self.pauses.partition_point(|&(_, end)| end <= now);
        let (mut at, mut left) = (now, work);
        for &(from, until) in &self.pauses[first..] {
            if from >= at + left {
                break;
            }
            left -= from.saturating_duration_since(at);
            at = until;
        }
        at + left
    }

    async fn handle(&self, _request: Request<Incoming>) -> Response<Empty<Bytes>> {
        let _busy = Busy {
            since: Instant::now(),
            counters: &self.counters,
        };
        self.counters.attempts.fetch_add(1, Ordering::Relaxed);
        let until = self.finish(Instant::now(), self.draw());
        tokio::time::sleep_until(until).await;
        // An empty body: the answer is complete with its headers, which is
        // the client's commit signal, and the connection goes back to the
        // pool at once.
        Response::new(Empty::new())
    }
}

/// Pause intervals from `epoch` to `epoch + horizon`.
fn pause_schedule(
    pauses: Option<Pauses>,
    epoch: Instant,
    horizon: Duration,
    rng: &mut StdRng,
) -> Vec<(Instant, Instant)> {
    let Some(p) = pauses.filter(|p| !p.pause.is_zero()) else {
        return Vec::new();
    };
    let gap = Exp::new(1.0 / p.mean_gap.as_secs_f64().max(1e-6)).expect("positive rate");
    let mut out = Vec::new();
    let mut t = epoch + Duration::from_secs_f64(gap.sample(rng));
    while t < epoch + horizon {
        out.push((t, t + p.pause));
        t += p.pause + Duration::from_secs_f64(gap.sample(rng));
    }
    out
}

/// Starts `n` servers on 127.0.0.1 ephemeral ports; they serve until the
/// runtime stops. Pauses are scheduled from now to `horizon` (the run's
/// bound). Returns their addresses and their shared counters.
pub async fn start(
    n: usize,
    model: Model,
    pauses: Option<Pauses>,
    horizon: Duration,
    seed: u64,
) -> std::io::Result<(Vec<SocketAddr>, Arc<Counters>)> {
    let counters = Arc::new(Counters::default());
    let epoch = Instant::now();
    let mut addrs = Vec::with_capacity(n);
    for i in 0..n {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        addrs.push(listener.local_addr()?);
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(i as u64));
        let server = Arc::new(Server {
            model,
            lognormal: model.lognormal(),
            pauses: pause_schedule(pauses, epoch, horizon, &mut rng),
            rng: Mutex::new(rng),
            counters: Arc::clone(&counters),
        });
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let server = Arc::clone(&server);
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let server = Arc::clone(&server);
                        async move { Ok::<_, Infallible>(server.handle(request).await) }
                    });
                    // A client that cancels an attempt closes its
                    // connection: an error here is the normal end of a loser.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    Ok((addrs, counters))
}
