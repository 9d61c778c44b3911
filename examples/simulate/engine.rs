//! The discrete-event engine behind `cargo run --example simulate`, shared
//! with `tests/simulation.rs`.
//!
//! Virtual time in nanoseconds, a binary-heap event queue, seeded PRNGs: no
//! clock, no sleep, no thread, the same output for the same seed. Clients
//! drive the real [`Hedger`] exactly as a network client would: `start`, arm a
//! timer at [`Request::next_timer`], `on_timer` → send the hedge it names,
//! `on_commit` on the commit signal → cancel the losers.
//!
//! Every call into [`Hedger`] lives in the adapter [`Ours`] (and its
//! [`Client`] impl): when the hedger's API changes, only that adapter does.
//!
//! Load is either a closed loop of workers (each issues its next user
//! request when the last completes) or open-loop Poisson arrivals. A user
//! request goes to a *target* (the key the client is started with: one
//! target, or several with a skewed popularity); each attempt is served by a
//! *replica* of the backend, chosen by the engine ([`Routing`]). Replicas may
//! be slower than others and may pause (a stop-the-world GC): a pause stalls
//! every attempt on that replica, in flight or arriving, until it ends.
//!
//! The backend has otherwise unlimited capacity (no queueing): each attempt
//! draws its own latency when it is sent. An attempt costs backend time from
//! its send until it answers, fails or is cancelled, whichever comes first.
//! A queued backend ([`Backend::queue`]) instead makes each replica one
//! server taking its attempts in order: an attempt's draw is its service,
//! after the work ahead of it; a cancellation reaches that server or not
//! ([`OnCancel`]).
//!
//! An attempt may also *fail fast* ([`FastFailures`]): it answers with an
//! error instead, and the client decides what the failure does
//! ([`Client::on_failure`]: send the next attempt now, wait for the others,
//! or give the request up). A request given up is retried by the *caller*
//! as a new request, up to [`Workload::tries`] tries in all; the user
//! request's latency runs from its first try's start to its success, and it
//! counts as failed after its last try fails.
//!
//! Randomness: closed-loop runs draw every attempt's latency from one stream
//! in send order (as they always did, so their tables are unchanged).
//! Open-loop runs use *common random numbers*: arrival times come from their
//! own stream, and attempt `a` of the `i`-th user request draws its latency,
//! its replica and its target from a generator seeded by `(seed, i, a)`, so
//! every strategy run with the same seed sees the same arrivals, the same
//! primaries and the same would-be hedges: the rows differ by the hedging
//! alone. A caller retry (try `k ≥ 1`) draws from `(seed, i, a, k)`: the
//! same fates for every strategy that retries as often.

// The example and the test each use a subset of this module.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tailguard::budget::{Budget, HedgeBudget, TokenBucket};
use tailguard::hedge::{
    Attempt, CommitOutcome, DelaySource, Failure, FailureOutcome, HedgeConfig, HedgeStats, Hedger,
    Idempotency, Plan, Request, TimerAction,
};
use tailguard::window::LatencyWindow;

/// Nanoseconds in a millisecond.
pub const MS: u64 = 1_000_000;
/// Nanoseconds in a second.
pub const SEC: u64 = 1_000_000_000;

// ---------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------

/// xoshiro256** seeded through splitmix64, with Box–Muller normals.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
    spare: Option<f64>,
}

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut splitmix = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self {
            s: [splitmix(), splitmix(), splitmix(), splitmix()],
            spare: None,
        }
    }

    /// The generator for a tuple of values (a stream id, a request number,
    /// an attempt …): each tuple gets its own independent stream.
    pub fn keyed(parts: &[u64]) -> Self {
        let mut h = 0x6A09_E667_F3BC_C908_u64;
        for &p in parts {
            h = Self::new(h ^ p.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64();
        }
        Self::new(h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// Exponential with mean `mean_ns`, in nanoseconds.
    pub fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        let u = 1.0 - self.uniform(); // (0, 1]: ln is finite
        (-u.ln() * mean_ns) as u64
    }

    /// Standard normal (Box–Muller; the second value is kept for next time).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln is finite
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }
}

/// A lognormal distribution in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct LogNormal {
    mu: f64,
    sigma: f64,
}

impl LogNormal {
    /// The lognormal with this mean and standard deviation (ms):
    /// σ² = ln(1 + sd²/mean²), μ = ln(mean) − σ²/2.
    pub fn from_mean_sd(mean_ms: f64, sd_ms: f64) -> Self {
        let var = (1.0 + (sd_ms / mean_ms).powi(2)).ln();
        Self {
            mu: mean_ms.ln() - var / 2.0,
            sigma: var.sqrt(),
        }
    }

    /// One draw, in nanoseconds (at least 1).
    pub fn sample_ns(&self, rng: &mut Rng) -> u64 {
        let ms = (self.mu + self.sigma * rng.normal()).exp();
        ((ms * MS as f64) as u64).max(1)
    }
}

// ---------------------------------------------------------------------------
// Backend model
// ---------------------------------------------------------------------------

/// How long one attempt takes.
#[derive(Clone, Copy, Debug)]
pub enum Latency {
    /// An RPC: lognormal, and with probability `slow_prob` (drawn for each
    /// attempt independently) `slow_factor` times slower.
    Plain {
        /// The usual latency.
        base: LogNormal,
        /// Share of slow attempts.
        slow_prob: f64,
        /// How much slower they are.
        slow_factor: f64,
    },
    /// A streaming response: headers first, then the first token, which is
    /// slow (a KV-cache miss) with probability `miss_prob`, per attempt.
    Streaming {
        /// Time to response headers.
        headers: LogNormal,
        /// Time to first token on a cache hit.
        hit: LogNormal,
        /// Time to first token on a cache miss.
        miss: LogNormal,
        /// Share of misses.
        miss_prob: f64,
    },
    /// A Pareto (power-law) tail: `scale_ms × U^(−1/shape)`, capped at
    /// `cap_ms` (a client timeout; the cap keeps the mean finite in
    /// practice). Shape ≤ 2 has infinite variance.
    Pareto {
        /// Tail index α.
        shape: f64,
        /// The minimum (ms).
        scale_ms: f64,
        /// The cap (ms).
        cap_ms: f64,
    },
    /// Two modes: `fast`, or with probability `slow_prob` (per attempt)
    /// `slow` (a cache miss, a cold path).
    Bimodal {
        /// The usual mode.
        fast: LogNormal,
        /// The slow mode.
        slow: LogNormal,
        /// Share of the slow mode.
        slow_prob: f64,
    },
}

/// A stretch of virtual time during which every attempt sent is `factor`
/// times slower.
#[derive(Clone, Copy, Debug)]
pub struct Slowdown {
    /// Start (ns, inclusive).
    pub from_ns: u64,
    /// End (ns, exclusive).
    pub until_ns: u64,
    /// Multiplier on latency.
    pub factor: f64,
}

/// One server of the backend.
#[derive(Clone, Debug)]
pub struct Replica {
    /// Multiplier on every attempt's latency on this replica.
    pub scale: f64,
    /// Stop-the-world pauses, `[start, end)` in ns, sorted and disjoint.
    pub pauses: Vec<(u64, u64)>,
}

impl Replica {
    /// A replica `scale` times slower than the model, never pausing.
    pub fn scaled(scale: f64) -> Self {
        Self {
            scale,
            pauses: Vec::new(),
        }
    }

    /// When an attempt sent at `send` that needs `work_ns` of service
    /// finishes: service makes no progress during a pause, so an attempt
    /// sent during a pause finishes `work_ns` after it ends, and one in
    /// flight when a pause starts finishes the pause's length later.
    pub fn finish(&self, send: u64, work_ns: u64) -> u64 {
        let first = self.pauses.partition_point(|&(_, end)| end <= send);
        let (mut t, mut rem) = (send, work_ns);
        for &(from, until) in &self.pauses[first..] {
            if from > t {
                let run = from - t;
                if run >= rem {
                    return t + rem;
                }
                rem -= run;
            }
            t = t.max(until);
        }
        t + rem
    }
}

/// Pause intervals `[start, start + pause_ns)` up to `horizon_ns`, with
/// exponential gaps of mean `mean_gap_ns` between one pause's end and the
/// next one's start (a Poisson process of pauses, a pause at a time).
pub fn poisson_pauses(
    rng: &mut Rng,
    pause_ns: u64,
    mean_gap_ns: u64,
    horizon_ns: u64,
) -> Vec<(u64, u64)> {
    let mut pauses = Vec::new();
    let mut t = rng.exp_ns(mean_gap_ns as f64);
    while t < horizon_ns {
        pauses.push((t, t + pause_ns));
        t += pause_ns + rng.exp_ns(mean_gap_ns as f64);
    }
    pauses
}

/// Attempts that fail fast: with probability `prob` (drawn for each attempt
/// independently) an attempt answers with an error after `after` instead of
/// answering.
#[derive(Clone, Copy, Debug)]
pub struct FastFailures {
    /// Share of attempts that fail.
    pub prob: f64,
    /// When a failing attempt reports its error, after its send.
    pub after: LogNormal,
}

/// A backend whose latency rises with its load: each attempt's latency is
/// its draw times `1 / (1 − ρ)`, `ρ` the attempts sent over the last
/// `window_ns` against `capacity_per_sec` (at most 0.995). A cancelled
/// attempt frees nothing: the model has no queue to leave.
#[derive(Clone, Copy, Debug)]
pub struct LoadSensitivity {
    /// Attempts a second at which the backend saturates.
    pub capacity_per_sec: f64,
    /// How far back the load is measured.
    pub window_ns: u64,
}

/// `ns` × `factor`, at least 1 ns.
fn stretched(ns: u64, factor: f64) -> u64 {
    ((ns as f64 * factor) as u64).max(1)
}

impl LoadSensitivity {
    /// The latency factor with `sent` attempts in the window.
    fn factor(&self, sent: usize) -> f64 {
        let capacity = self.capacity_per_sec * self.window_ns as f64 / SEC as f64;
        let rho = (sent as f64 / capacity).min(0.995);
        1.0 / (1.0 - rho)
    }
}

/// The backend every attempt goes to.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The latency model.
    pub latency: Latency,
    /// Time-varying slowdowns (drift, outage), by the attempt's send time.
    pub slowdowns: Vec<Slowdown>,
    /// Its servers; empty means one plain replica (scale 1, no pauses).
    pub replicas: Vec<Replica>,
    /// Attempts that fail fast, if any.
    pub failures: Option<FastFailures>,
    /// Latency that rises with load, if any.
    pub load: Option<LoadSensitivity>,
    /// Each replica a single server taking its attempts in order (`Some`):
    /// an attempt's draw is its service time, and it first waits for the
    /// work sent to its replica before it; what a cancellation does there.
    pub queue: Option<OnCancel>,
}

/// What the server of a [`Backend::queued`] replica does with an attempt
/// the client cancels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnCancel {
    /// Nothing tells the server: the attempt keeps its place in the queue
    /// and its work.
    Kept,
    /// The server takes it off its queue if it is still waiting there; one
    /// already in service runs to its end.
    Dequeued,
    /// Off the queue, and stopped if in service: the server moves on to
    /// the next attempt at once.
    Stopped,
}

/// One attempt's fate, drawn when it is sent.
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    /// Time from send to headers (streaming only).
    pub headers_ns: Option<u64>,
    /// Time from send to the answer (the response, or the first token).
    pub answer_ns: u64,
    /// A slow attempt (straggler, cache miss, slow mode, or caught by a
    /// pause).
    pub slow: bool,
    /// A failing attempt: its error arrives this long after its send, and
    /// it never answers.
    pub fail_ns: Option<u64>,
}

impl Backend {
    /// A backend with this latency model, one replica, no slowdown.
    pub fn new(latency: Latency) -> Self {
        Self {
            latency,
            slowdowns: Vec::new(),
            replicas: Vec::new(),
            failures: None,
            load: None,
            queue: None,
        }
    }

    /// The article's backend: lognormal mean 5 ms, sd 2 ms, `slow_prob` of
    /// attempts ×10.
    pub fn article(slow_prob: f64) -> Self {
        Self::new(Latency::Plain {
            base: LogNormal::from_mean_sd(5.0, 2.0),
            slow_prob,
            slow_factor: 10.0,
        })
    }

    /// The LLM streaming backend: headers ≈ 1 ms, first token 80 %
    /// lognormal(15, 3) ms, 20 % lognormal(200, 25) ms.
    pub fn streaming() -> Self {
        Self::new(Latency::Streaming {
            headers: LogNormal::from_mean_sd(1.0, 0.2),
            hit: LogNormal::from_mean_sd(15.0, 3.0),
            miss: LogNormal::from_mean_sd(200.0, 25.0),
            miss_prob: 0.20,
        })
    }

    /// The same backend, `factor` times slower during `[from, until)`.
    pub fn with_slowdown(mut self, from_ns: u64, until_ns: u64, factor: f64) -> Self {
        self.slowdowns.push(Slowdown {
            from_ns,
            until_ns,
            factor,
        });
        self
    }

    /// The same backend served by these replicas.
    pub fn with_replicas(mut self, replicas: Vec<Replica>) -> Self {
        self.replicas = replicas;
        self
    }

    /// The same backend, its latency rising with load as `load` says.
    pub fn with_load(mut self, load: LoadSensitivity) -> Self {
        self.load = Some(load);
        self
    }

    /// The same backend, each replica a FIFO single server
    /// ([`Backend::queue`]) that keeps cancelled attempts.
    pub fn queued(self) -> Self {
        self.queued_with(OnCancel::Kept)
    }

    /// The same backend, each replica a FIFO single server
    /// ([`Backend::queue`]) that treats a cancelled attempt as `on_cancel`
    /// says.
    pub fn queued_with(mut self, on_cancel: OnCancel) -> Self {
        self.queue = Some(on_cancel);
        self
    }

    /// The same backend, `prob` of its attempts failing after `after`.
    pub fn with_fast_failures(mut self, prob: f64, after: LogNormal) -> Self {
        self.failures = Some(FastFailures { prob, after });
        self
    }

    /// How many replicas serve it (at least 1).
    pub fn replica_count(&self) -> u32 {
        (self.replicas.len() as u32).max(1)
    }

    /// The latency multiplier in force at `now`.
    pub fn factor_at(&self, now: u64) -> f64 {
        self.slowdowns
            .iter()
            .filter(|s| (s.from_ns..s.until_ns).contains(&now))
            .map(|s| s.factor)
            .product()
    }

    /// Draws one attempt sent at `now` (replicas aside).
    pub fn draw(&self, rng: &mut Rng, now: u64) -> Draw {
        let factor = self.factor_at(now);
        let scale = |ns: u64| ((ns as f64 * factor) as u64).max(1);
        let plain = |ns: u64, slow| Draw {
            headers_ns: None,
            answer_ns: scale(ns),
            slow,
            fail_ns: None,
        };
        match self.latency {
            Latency::Plain {
                base,
                slow_prob,
                slow_factor,
            } => {
                let slow = rng.chance(slow_prob);
                let ns = base.sample_ns(rng) as f64 * if slow { slow_factor } else { 1.0 };
                plain(ns as u64, slow)
            }
            Latency::Streaming {
                headers,
                hit,
                miss,
                miss_prob,
            } => {
                let h = scale(headers.sample_ns(rng));
                let slow = rng.chance(miss_prob);
                let token = scale(if slow { miss } else { hit }.sample_ns(rng));
                Draw {
                    headers_ns: Some(h),
                    answer_ns: token.max(h + 1),
                    slow,
                    fail_ns: None,
                }
            }
            Latency::Pareto {
                shape,
                scale_ms,
                cap_ms,
            } => {
                let u = 1.0 - rng.uniform(); // (0, 1]
                let ms = (scale_ms * u.powf(-1.0 / shape)).min(cap_ms);
                plain((ms * MS as f64) as u64, false)
            }
            Latency::Bimodal {
                fast,
                slow,
                slow_prob,
            } => {
                let is_slow = rng.chance(slow_prob);
                let ns = if is_slow { slow } else { fast }.sample_ns(rng);
                plain(ns, is_slow)
            }
        }
    }

    /// Draws one attempt sent at `now` to `replica`: the model's draw,
    /// scaled by the replica and stretched by its pauses, then whether it
    /// fails fast (drawn only if the backend has [`FastFailures`], so other
    /// backends' random streams are unchanged).
    pub fn draw_on(&self, rng: &mut Rng, now: u64, replica: u32) -> Draw {
        let mut d = self.draw(rng, now);
        if let Some(f) = self.failures {
            if rng.chance(f.prob) {
                d.fail_ns = Some(f.after.sample_ns(rng));
                d.slow = false;
            }
        }
        let Some(r) = self.replicas.get(replica as usize) else {
            return d;
        };
        let on = |ns: u64| {
            let work = if r.scale == 1.0 {
                ns
            } else {
                ((ns as f64 * r.scale) as u64).max(1)
            };
            (r.finish(now, work) - now, work)
        };
        let (answer, work) = on(d.answer_ns);
        d.slow |= answer > work && d.fail_ns.is_none();
        d.answer_ns = answer;
        d.headers_ns = d.headers_ns.map(|h| on(h).0);
        d.fail_ns = d.fail_ns.map(|f| on(f).0);
        d
    }

    /// The attempt-latency quantiles `qs` (ms) of the model at time `at_ns`
    /// (slowdowns included, replicas aside), by Monte Carlo over `draws`
    /// draws: the truth a hedger's delay is measured against.
    pub fn true_quantiles_ms(&self, at_ns: u64, qs: &[f64], draws: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::keyed(&[0x7275_7468, seed]);
        let mut v: Vec<u64> = (0..draws.max(1))
            .map(|_| self.draw(&mut rng, at_ns).answer_ns)
            .collect();
        v.sort_unstable();
        qs.iter()
            .map(|&q| {
                let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
                v[rank - 1] as f64 / MS as f64
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Clients: the hedging policies under test
// ---------------------------------------------------------------------------

/// The signal a client races on (and, for [`Ours`], records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Response headers (streaming only).
    Headers,
    /// The answer: the response of an RPC, the first token of a stream.
    Answer,
}

/// Where a request's hedge delay came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DelayOrigin {
    /// Measured latency of the request's target (its own window held
    /// enough samples).
    Data,
    /// Measured latency of every target (the hedger's aggregate window: the
    /// target's own is cold or was evicted).
    Aggregate,
    /// A configured prior or fixed delay (cold start, static policies).
    Prior,
    /// No delay: the request is not hedged (cold start without a prior,
    /// hedging disabled, a policy that does not say).
    #[default]
    NoDelay,
}

/// What a client decided when an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureAction {
    /// Send this attempt now.
    SendNow(u8),
    /// Keep waiting for the attempts still in flight (or the hedge timer).
    Continue,
    /// The request failed: cancel these attempts (a mask); the caller may
    /// retry it as a new request.
    GiveUp(u8),
}

/// A hedging client as the engine sees it. Attempt numbers are `0` for the
/// primary and `1..` for hedges; sets of attempts are bit masks. Targets and
/// replicas are the engine's small integers.
pub trait Client {
    /// Per-request state, owned by the engine (never copied or cloned).
    type Req;
    /// A request to `target` starts at `now`; its primary is sent.
    fn start(&mut self, target: u32, now: u64) -> Self::Req;
    /// Hedge `attempt` (≥ 1) of `req` is about to be sent to `target` (a
    /// replica, under [`Routing::Spread`]; the request's own target
    /// otherwise).
    fn route(&mut self, _req: &mut Self::Req, _attempt: u8, _target: u32) {}
    /// When the engine should call [`on_timer`](Self::on_timer) next.
    fn next_timer(&self, req: &Self::Req) -> Option<u64>;
    /// The timer fired: `Some(attempt)` to send a hedge now.
    fn on_timer(&mut self, req: &mut Self::Req, now: u64) -> Option<u8>;
    /// `attempt` gave the commit signal: `Some(losers)` if it won.
    fn on_commit(&mut self, req: &mut Self::Req, attempt: u8, now: u64) -> Option<u8>;
    /// `attempt` failed fast at `now`; `in_flight` is the mask of the
    /// request's other attempts still in flight. By default the request
    /// gives up when nothing is left in flight, and waits otherwise.
    fn on_failure(
        &mut self,
        _req: &mut Self::Req,
        _attempt: u8,
        _now: u64,
        in_flight: u8,
    ) -> FailureAction {
        if in_flight == 0 {
            FailureAction::GiveUp(0)
        } else {
            FailureAction::Continue
        }
    }
    /// `attempt`'s headers arrived (called for every live attempt, whatever
    /// the client races on).
    fn on_headers(&mut self, _req: &mut Self::Req, _attempt: u8, _now: u64) {}
    /// The signal the race is decided on.
    fn races_on(&self) -> Signal {
        Signal::Answer
    }
    /// The hedge delay a request to `target` would get at `now`, if any.
    fn delay_ns(&self, target: u32, now: u64) -> Option<u64>;
    /// Where `req`'s delay came from, as decided at its start.
    fn delay_origin(&self, _req: &Self::Req) -> DelayOrigin {
        DelayOrigin::NoDelay
    }
    /// The hedger's counters, for clients that have one.
    fn stats(&self) -> Option<HedgeStats> {
        None
    }
}

/// The hedger's key for one of the engine's target numbers: `()` for a
/// single-target hedger (every target is the same key), `u32` for a keyed
/// one.
pub trait TargetKey: Eq + Copy {
    /// The key of target `id`.
    fn from_id(id: u32) -> Self;
}

impl TargetKey for () {
    fn from_id(_: u32) -> Self {}
}

impl TargetKey for u32 {
    fn from_id(id: u32) -> Self {
        id
    }
}

/// Our [`Hedger`], driven through its public API only: **the adapter**.
/// Every call into `tailguard::hedge::Hedger` in the simulation is in this
/// `impl` block or the `Client` impl below it.
#[derive(Debug)]
pub struct Ours<K: TargetKey = (), B: HedgeBudget = Budget, const T: usize = 1> {
    /// Boxed: a hedger holds its windows inline (16.5 KiB per target), too
    /// much to move around a debug build's stack.
    hedger: Box<Hedger<K, B, T>>,
    /// The commit signal: raced on and recorded.
    signal: Signal,
    /// How attempt failures are reported to the hedger.
    failure: Failure,
}

/// [`Ours`]'s per-request state.
#[derive(Debug)]
pub struct OursReq<K> {
    request: Request<K>,
}

impl<K: TargetKey, B: HedgeBudget, const T: usize> Ours<K, B, T> {
    /// A hedger with `config` whose targets all share `budget`, racing and
    /// recording on `signal`.
    pub fn with_budget(config: HedgeConfig, budget: B, signal: Signal) -> Self {
        Self {
            hedger: Box::new(Hedger::with_budget(config, budget).expect("valid config")),
            signal,
            failure: Failure::Retryable,
        }
    }

    /// The same client, reporting every attempt failure as `failure`
    /// (default [`Failure::Retryable`]).
    pub fn reporting(mut self, failure: Failure) -> Self {
        self.failure = failure;
        self
    }

    /// The hedger's counters.
    pub fn hedge_stats(&self) -> HedgeStats {
        self.hedger.stats()
    }
}

fn mask(set: tailguard::hedge::AttemptSet) -> u8 {
    set.iter().fold(0, |m, a| m | (1 << a.0))
}

impl<K: TargetKey, B: HedgeBudget, const T: usize> Client for Ours<K, B, T> {
    type Req = OursReq<K>;

    fn start(&mut self, target: u32, now: u64) -> OursReq<K> {
        let request = self
            .hedger
            .start(K::from_id(target), now, Idempotency::Idempotent);
        OursReq { request }
    }

    fn route(&mut self, req: &mut OursReq<K>, attempt: u8, target: u32) {
        // The hedge's latency is recorded under the replica that served it.
        // Only hedges are routed (the primary goes where it started).
        let routed = req.request.route(Attempt(attempt), K::from_id(target));
        debug_assert!(routed.is_ok(), "attempt {attempt} not routed");
    }

    fn next_timer(&self, req: &OursReq<K>) -> Option<u64> {
        req.request.next_timer()
    }

    fn on_timer(&mut self, req: &mut OursReq<K>, now: u64) -> Option<u8> {
        match self.hedger.on_timer(&mut req.request, now) {
            TimerAction::SendHedge(a) => Some(a.0),
            // No deadline is configured, so `GiveUp` does not happen; the
            // engine re-arms at `next_timer` after `Wait`.
            TimerAction::Wait { .. } | TimerAction::Skip(_) | TimerAction::GiveUp { .. } => None,
        }
    }

    fn on_commit(&mut self, req: &mut OursReq<K>, attempt: u8, now: u64) -> Option<u8> {
        match self
            .hedger
            .on_commit(&mut req.request, Attempt(attempt), now)
        {
            CommitOutcome::Won { cancel, .. } => Some(mask(cancel)),
            CommitOutcome::Late | CommitOutcome::Unknown => None,
        }
    }

    fn on_failure(
        &mut self,
        req: &mut OursReq<K>,
        attempt: u8,
        now: u64,
        _in_flight: u8,
    ) -> FailureAction {
        match self
            .hedger
            .on_failure(&mut req.request, Attempt(attempt), now, self.failure)
        {
            FailureOutcome::SendNow(a) => FailureAction::SendNow(a.0),
            FailureOutcome::GiveUp { cancel } => FailureAction::GiveUp(mask(cancel)),
            // `Ignored` cannot happen: the engine reports each live attempt
            // of a racing request once.
            FailureOutcome::Continue | FailureOutcome::Ignored => FailureAction::Continue,
        }
    }

    fn races_on(&self) -> Signal {
        self.signal
    }

    fn delay_ns(&self, target: u32, now: u64) -> Option<u64> {
        self.hedger.delay_ns(&K::from_id(target), now)
    }

    fn delay_origin(&self, req: &OursReq<K>) -> DelayOrigin {
        match req.request.plan() {
            Plan::Hedge {
                source: DelaySource::Target,
                ..
            } => DelayOrigin::Data,
            Plan::Hedge {
                source: DelaySource::Aggregate,
                ..
            } => DelayOrigin::Aggregate,
            Plan::Hedge {
                source: DelaySource::Prior,
                ..
            } => DelayOrigin::Prior,
            Plan::NoHedge(_) => DelayOrigin::NoDelay,
        }
    }

    fn stats(&self) -> Option<HedgeStats> {
        Some(self.hedge_stats())
    }
}

/// Request state of the example-side policies below (one hedge at most).
#[derive(Clone, Copy, Debug)]
pub struct SimpleReq {
    start: u64,
    sent_at: [u64; 2],
    sent: u8,
    hedge_at: Option<u64>,
    done: bool,
}

impl SimpleReq {
    fn new(now: u64, delay: Option<u64>) -> Self {
        Self {
            start: now,
            sent_at: [now, 0],
            sent: 1,
            hedge_at: delay.map(|d| now + d),
            done: false,
        }
    }

    /// Whether the hedge is due at `now` (and not yet sent).
    fn due(&mut self, now: u64) -> bool {
        match self.hedge_at {
            Some(at) if !self.done && now >= at => {
                self.hedge_at = None;
                true
            }
            _ => false,
        }
    }

    fn send_hedge(&mut self, now: u64) -> u8 {
        self.sent_at[1] = now;
        self.sent = 2;
        1
    }

    /// Ends the race with `attempt` as winner; returns the losers.
    fn win(&mut self, attempt: u8) -> Option<u8> {
        if self.done || attempt >= self.sent {
            return None;
        }
        self.done = true;
        self.hedge_at = None;
        Some(((1u8 << self.sent) - 1) & !(1 << attempt))
    }
}

/// The Go reference library's policy, rebuilt here from our parts for
/// comparison: the delay is the p90 of a rotating window fed **only the
/// winner's latency, timed from the primary's start**; the budget is a
/// time-refilled token bucket at `estimated_rps × 10 %` per second; the first
/// 20 *requests* (not samples) hedge at a fixed 10 ms.
#[derive(Debug)]
pub struct GoReference {
    window: LatencyWindow,
    budget: TokenBucket,
    started: u64,
}

impl GoReference {
    /// Requests hedged at the fixed warm-up delay.
    pub const WARMUP_REQUESTS: u64 = 20;
    /// The warm-up delay.
    pub const WARMUP_DELAY_NS: u64 = 10 * MS;
    /// The smallest delay.
    pub const MIN_DELAY_NS: u64 = MS;

    /// The policy with a window rotating every `period_ns` and a budget of
    /// 10 % of `estimated_rps` per second, bursting to one second's worth.
    pub fn new(estimated_rps: u32, period_ns: u64) -> Self {
        let burst = (estimated_rps / 10).max(1);
        Self {
            window: LatencyWindow::new(0.01, period_ns, 0.90).expect("valid window"),
            budget: TokenBucket::from_share(1_000, estimated_rps.max(1), burst)
                .expect("valid bucket"),
            started: 0,
        }
    }

    /// The bucket's refill interval (ns per token).
    pub fn interval_ns(&self) -> u64 {
        self.budget.interval_ns()
    }
}

impl Client for GoReference {
    type Req = SimpleReq;

    fn start(&mut self, _target: u32, now: u64) -> SimpleReq {
        self.started += 1;
        self.window.advance(now);
        SimpleReq::new(now, self.delay())
    }

    fn next_timer(&self, req: &SimpleReq) -> Option<u64> {
        req.hedge_at.filter(|_| !req.done)
    }

    fn on_timer(&mut self, req: &mut SimpleReq, now: u64) -> Option<u8> {
        (req.due(now) && self.budget.try_acquire(now)).then(|| req.send_hedge(now))
    }

    fn on_commit(&mut self, req: &mut SimpleReq, attempt: u8, now: u64) -> Option<u8> {
        let losers = req.win(attempt)?;
        // Winner only, from the primary's start.
        let _ = self.window.record(now, now - req.start);
        Some(losers)
    }

    fn delay_ns(&self, _target: u32, _now: u64) -> Option<u64> {
        self.delay()
    }
}

impl GoReference {
    fn delay(&self) -> Option<u64> {
        if self.started <= Self::WARMUP_REQUESTS {
            return Some(Self::WARMUP_DELAY_NS);
        }
        Some(
            self.window
                .cached_quantile()
                .unwrap_or(Self::WARMUP_DELAY_NS)
                .max(Self::MIN_DELAY_NS),
        )
    }
}

/// A mis-calibrated streaming client, built from our window and budget:
/// it **records each attempt's time to headers** but **races on the first
/// token** — what a hedging transport that times `RoundTrip` does when the
/// application waits for the stream. Delay = quantile × multiplier of the
/// header latencies, after `min_samples` samples.
#[derive(Debug)]
pub struct HeaderCalibrated {
    window: LatencyWindow,
    budget: Budget,
    multiplier: f64,
    min_samples: u64,
}

impl HeaderCalibrated {
    /// Delay = `quantile` × `multiplier` of header latency, under `budget`.
    pub fn new(quantile: f64, multiplier: f64, period_ns: u64, budget: Budget) -> Self {
        Self {
            window: LatencyWindow::new(0.01, period_ns, quantile).expect("valid window"),
            budget,
            multiplier,
            min_samples: 20,
        }
    }
}

impl Client for HeaderCalibrated {
    type Req = SimpleReq;

    fn start(&mut self, _target: u32, now: u64) -> SimpleReq {
        self.window.advance(now);
        self.budget.on_request(now);
        SimpleReq::new(now, self.delay())
    }

    fn next_timer(&self, req: &SimpleReq) -> Option<u64> {
        req.hedge_at.filter(|_| !req.done)
    }

    fn on_timer(&mut self, req: &mut SimpleReq, now: u64) -> Option<u8> {
        (req.due(now) && self.budget.try_acquire(now)).then(|| req.send_hedge(now))
    }

    fn on_headers(&mut self, req: &mut SimpleReq, attempt: u8, now: u64) {
        if let Some(&sent) = req.sent_at.get(usize::from(attempt)) {
            let _ = self.window.record(now, now - sent);
        }
    }

    fn on_commit(&mut self, req: &mut SimpleReq, attempt: u8, _now: u64) -> Option<u8> {
        req.win(attempt)
    }

    fn delay_ns(&self, _target: u32, _now: u64) -> Option<u64> {
        self.delay()
    }
}

impl HeaderCalibrated {
    fn delay(&self) -> Option<u64> {
        if self.window.count() < self.min_samples {
            return None;
        }
        let q = self.window.cached_quantile()?;
        Some(((q as f64 * self.multiplier) as u64).max(MS))
    }
}

// ---------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------

/// How user requests arrive.
#[derive(Clone, Copy, Debug)]
pub enum Arrivals {
    /// Closed loop: `workers` workers, each issuing its next user request
    /// when the last one completes (load falls when latency rises).
    ClosedLoop {
        /// Concurrent workers.
        workers: usize,
    },
    /// Open loop: Poisson arrivals at `per_sec` user requests per second,
    /// whatever the latency (load does not fall when latency rises).
    Poisson {
        /// Mean arrival rate.
        per_sec: f64,
    },
}

/// Which target each user request goes to.
#[derive(Clone, Copy, Debug)]
pub enum Popularity {
    /// Every request goes to target 0.
    One,
    /// `n` targets: target 0 (the hot key) gets `hot_share` of requests,
    /// targets `1..n` share the rest in proportion to `1/k` (Zipf, s = 1).
    HotZipf {
        /// Targets.
        n: u32,
        /// The hot key's share.
        hot_share: f64,
    },
}

impl Popularity {
    /// How many targets.
    pub fn targets(&self) -> u32 {
        match *self {
            Self::One => 1,
            Self::HotZipf { n, .. } => n,
        }
    }

    /// The share of requests going to target `k`.
    pub fn share(&self, k: u32) -> f64 {
        match *self {
            Self::One => f64::from(u8::from(k == 0)),
            Self::HotZipf { n, hot_share } => {
                if k == 0 {
                    return hot_share;
                }
                let h: f64 = (1..n).map(|j| 1.0 / f64::from(j)).sum();
                (1.0 - hot_share) / f64::from(k) / h
            }
        }
    }

    fn pick(&self, rng: &mut Rng) -> u32 {
        let n = self.targets();
        if n == 1 {
            return 0;
        }
        let mut u = rng.uniform();
        for k in 0..n {
            u -= self.share(k);
            if u < 0.0 {
                return k;
            }
        }
        n - 1
    }
}

/// Which replica serves each attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Every attempt goes to the replica numbered like the request's target
    /// (modulo the replicas): each target is its own server or service,
    /// and a hedge is another try at the same one.
    ToTarget,
    /// The primary goes to a uniformly random replica, each hedge to a
    /// uniformly random replica this request has not used yet (if any is
    /// left), as a load balancer spreading a service's traffic would.
    Spread,
    /// The primary goes to a uniformly random replica, hedge `k` to the
    /// `k`-th replica after it (modulo the replicas): a client that tries
    /// the next address in its list.
    Next,
}

/// What to run. Each user request fans out to `fanout` backend requests and
/// completes when all have answered.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// User requests to issue in all (an upper bound if `until_ns` is set).
    pub users: u64,
    /// How they arrive.
    pub arrivals: Arrivals,
    /// Backend requests per user request (1: no fan-out).
    pub fanout: usize,
    /// Stop issuing user requests at this virtual time.
    pub until_ns: Option<u64>,
    /// Which target each user request goes to.
    pub popularity: Popularity,
    /// Which replica serves each attempt.
    pub routing: Routing,
    /// Record the client's delay for target 0 every this many ns
    /// ([`Outcome::delay_series`]).
    pub sample_every_ns: Option<u64>,
    /// Tries per backend request: a request the client gives up is retried
    /// by the caller, as a new request started at once, until this many
    /// tries have failed (1: no caller retry).
    pub tries: u32,
}

impl Workload {
    /// `users` requests from `workers` closed-loop workers, no fan-out, one
    /// target.
    pub fn closed_loop(users: u64, workers: usize) -> Self {
        Self {
            users,
            arrivals: Arrivals::ClosedLoop { workers },
            fanout: 1,
            until_ns: None,
            popularity: Popularity::One,
            routing: Routing::ToTarget,
            sample_every_ns: None,
            tries: 1,
        }
    }

    /// Poisson arrivals at `per_sec` requests per second until `until_ns`,
    /// no fan-out, one target.
    pub fn open_loop(per_sec: f64, until_ns: u64) -> Self {
        Self {
            users: u64::MAX,
            arrivals: Arrivals::Poisson { per_sec },
            until_ns: Some(until_ns),
            ..Self::closed_loop(u64::MAX, 0)
        }
    }

    /// The same, issuing no user request from `until_ns` on.
    pub fn until(mut self, until_ns: u64) -> Self {
        self.until_ns = Some(until_ns);
        self
    }

    /// The same, each user request fanning out to `n` backend requests.
    pub fn fanout(mut self, n: usize) -> Self {
        self.fanout = n;
        self
    }

    /// The same, with these targets.
    pub fn popularity(mut self, p: Popularity) -> Self {
        self.popularity = p;
        self
    }

    /// The same, with this routing.
    pub fn routing(mut self, r: Routing) -> Self {
        self.routing = r;
        self
    }

    /// The same, sampling the client's delay every `every_ns`.
    pub fn sample_every(mut self, every_ns: u64) -> Self {
        self.sample_every_ns = Some(every_ns.max(1));
        self
    }

    /// The same, the caller trying each backend request up to `tries`
    /// times (at least 1).
    pub fn tries(mut self, tries: u32) -> Self {
        self.tries = tries.max(1);
        self
    }
}

/// One completed user request.
#[derive(Clone, Copy, Debug)]
pub struct UserRecord {
    /// When it started (ns).
    pub start_ns: u64,
    /// Start to last answer (ns).
    pub latency_ns: u64,
    /// Whether any of its primaries was slow (a straggler / cache miss /
    /// caught by a pause).
    pub any_slow_primary: bool,
    /// Its target.
    pub target: u32,
    /// Where its delay came from (of its first backend request's first
    /// try).
    pub origin: DelayOrigin,
    /// Whether it failed: a backend request of it failed every try.
    pub failed: bool,
    /// Caller retries it took (tries beyond the first, over its backend
    /// requests).
    pub retries: u32,
}

/// Activity in one second of virtual time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Second {
    /// Backend requests started (primaries; a caller retry is a new
    /// request).
    pub requests: u64,
    /// The same, in each tenth of the second (the default budget's bank
    /// windows).
    pub by_tenth: [u64; 10],
    /// Hedges sent (on the timer, or released by a failure).
    pub hedges: u64,
    /// The client's hedge delay at the last request start in that second.
    pub delay_ns: Option<u64>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Completed user requests (failed ones included, flagged).
    pub users: Vec<UserRecord>,
    /// Backend requests started (one primary each; caller retries
    /// included).
    pub requests: u64,
    /// Hedges sent (on the timer, or released by a failure).
    pub hedges: u64,
    /// Caller retries: requests started because the previous try of the
    /// same backend request gave up.
    pub caller_retries: u64,
    /// Attempts that failed fast.
    pub failed_attempts: u64,
    /// Backend busy time of every attempt, until answer or cancellation
    /// (from its send: with a [`Backend::queue`] backend that counts the
    /// wait in the queue and misses service after a cancellation, so it is
    /// not the servers' work there).
    pub busy_ns: u128,
    /// Per-second activity.
    pub per_second: Vec<Second>,
    /// The client's delay for target 0 at each sampling tick
    /// ([`Workload::sample_every_ns`]): `(tick ns, delay)`.
    pub delay_series: Vec<(u64, Option<u64>)>,
    /// The client's delay for target 0 when the run ended.
    pub final_delay_ns: Option<u64>,
    /// Virtual time at the end.
    pub end_ns: u64,
}

impl Outcome {
    /// Hedges per backend request (per hedger request: caller retries are
    /// requests too).
    pub fn extra_load(&self) -> f64 {
        self.hedges as f64 / self.requests.max(1) as f64
    }

    /// The share of user requests that failed.
    pub fn failure_rate(&self) -> f64 {
        let failed = self.users.iter().filter(|u| u.failed).count();
        failed as f64 / self.users.len().max(1) as f64
    }

    /// Backend requests per second of virtual time.
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / (self.end_ns.max(1) as f64 / SEC as f64)
    }

    /// Adds `other`'s measurements (another client's run) to these:
    /// records and counters pooled, per-second counts summed; the delay
    /// series and final delay stay this run's.
    pub fn pool(&mut self, other: Outcome) {
        self.users.extend(other.users);
        self.requests += other.requests;
        self.hedges += other.hedges;
        self.caller_retries += other.caller_retries;
        self.failed_attempts += other.failed_attempts;
        self.busy_ns += other.busy_ns;
        if self.per_second.len() < other.per_second.len() {
            self.per_second
                .resize(other.per_second.len(), Second::default());
        }
        for (mine, theirs) in self.per_second.iter_mut().zip(other.per_second) {
            mine.requests += theirs.requests;
            for (m, t) in mine.by_tenth.iter_mut().zip(theirs.by_tenth) {
                *m += t;
            }
            mine.hedges += theirs.hedges;
            mine.delay_ns = mine.delay_ns.or(theirs.delay_ns);
        }
        self.end_ns = self.end_ns.max(other.end_ns);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Headers(u8),
    Answer(u8),
    Fail(u8),
    Timer,
    Arrival,
    /// A replica's service of its `run`-th attempt ends (a queued backend
    /// whose cancellations reach the server).
    Served {
        replica: u32,
        run: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: u64,
    seq: u64,
    slot: usize,
    gen: u32,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, Default)]
struct Live {
    sent_at: u64,
    live: bool,
    /// The replica it was sent to.
    replica: u32,
}

/// An attempt at a replica whose server hears of cancellations
/// ([`OnCancel::Dequeued`], [`OnCancel::Stopped`]): its request (slot and
/// generation), and its draw, from the start of its service.
#[derive(Clone, Copy, Debug)]
struct Job {
    slot: usize,
    gen: u32,
    attempt: u8,
    draw: Draw,
}

/// The server of one such replica.
#[derive(Debug, Default)]
struct Server {
    waiting: VecDeque<Job>,
    serving: Option<Job>,
    /// Services started: tells a stopped service's end from the current.
    run: u32,
}

#[derive(Debug)]
struct Sub<R> {
    req: R,
    user: usize,
    /// Which backend request of its user request (fan-out index).
    index: usize,
    /// Which try of that backend request (0: the first; caller retries
    /// after).
    try_no: u32,
    attempts: [Live; 8],
    /// Replicas its attempts went to (bit mask, replicas 0..64).
    replicas_used: u64,
    /// The replica its primary went to.
    primary_replica: u32,
    /// Raced on headers: the winner, now awaited for its answer.
    winner: Option<u8>,
}

#[derive(Debug)]
struct Slot<R> {
    gen: u32,
    sub: Option<Sub<R>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct UserState {
    start: u64,
    remaining: usize,
    slow: bool,
    /// The how-manieth user request (0-based): the key of its random draws.
    number: u64,
    target: u32,
    origin: DelayOrigin,
    failed: bool,
    retries: u32,
}

/// Keys of the keyed random streams.
const STREAM_ARRIVALS: u64 = 1;
const STREAM_TARGET: u64 = 2;
const STREAM_LATENCY: u64 = 3;
const STREAM_REPLICA: u64 = 4;

struct Engine<'a, C: Client> {
    client: &'a mut C,
    backend: &'a Backend,
    workload: Workload,
    seed: u64,
    /// Closed loop: every attempt's latency, in send order.
    rng: Rng,
    /// Open loop: arrival times.
    arrivals: Rng,
    open_loop: bool,
    queue: BinaryHeap<Reverse<Event>>,
    seq: u64,
    slots: Vec<Slot<C::Req>>,
    free: Vec<usize>,
    /// User requests in progress: one per worker in a closed loop (worker
    /// `w` is `users[w]`), allocated and freed in an open loop.
    users: Vec<UserState>,
    free_users: Vec<usize>,
    issued: u64,
    next_sample: u64,
    out: Outcome,
    /// Send times within the load window of a load-sensitive backend.
    recent: VecDeque<u64>,
    /// When each replica of a queued backend that keeps cancelled
    /// attempts has done the work sent to it.
    free_at: Vec<u64>,
    /// The servers of a queued backend that hears of cancellations.
    servers: Vec<Server>,
}

/// The slot number of arrival events.
const ARRIVAL: usize = usize::MAX;

/// Runs `workload` against `backend` with `client`; deterministic in `seed`.
pub fn simulate<C: Client>(
    client: &mut C,
    backend: &Backend,
    workload: Workload,
    seed: u64,
) -> Outcome {
    let open_loop = matches!(workload.arrivals, Arrivals::Poisson { .. });
    let mut engine = Engine {
        client,
        backend,
        workload,
        seed,
        rng: Rng::new(seed),
        arrivals: Rng::keyed(&[STREAM_ARRIVALS, seed]),
        open_loop,
        queue: BinaryHeap::new(),
        seq: 0,
        slots: Vec::new(),
        free: Vec::new(),
        users: Vec::new(),
        free_users: Vec::new(),
        issued: 0,
        next_sample: 0,
        out: Outcome::default(),
        recent: VecDeque::new(),
        free_at: vec![0; backend.replica_count() as usize],
        servers: (0..backend.replica_count())
            .map(|_| Server::default())
            .collect(),
    };
    match workload.arrivals {
        Arrivals::ClosedLoop { workers } => {
            engine.users = vec![UserState::default(); workers];
            for w in 0..workers {
                engine.start_user(Some(w), 0);
            }
        }
        Arrivals::Poisson { .. } => engine.schedule_arrival(0),
    }
    while let Some(Reverse(ev)) = engine.queue.pop() {
        engine.sample_until(ev.at);
        engine.out.end_ns = ev.at;
        engine.handle(ev);
    }
    let end = engine.out.end_ns;
    engine.sample_until(end);
    engine.out.final_delay_ns = engine.client.delay_ns(0, end);
    engine.out
}

impl<C: Client> Engine<'_, C> {
    fn push(&mut self, at: u64, slot: usize, kind: Kind) {
        self.seq += 1;
        let gen = self.slots.get(slot).map_or(0, |s| s.gen);
        self.queue.push(Reverse(Event {
            at,
            seq: self.seq,
            slot,
            gen,
            kind,
        }));
    }

    fn second(&mut self, now: u64) -> &mut Second {
        let i = usize::try_from(now / SEC).unwrap_or(usize::MAX);
        if self.out.per_second.len() <= i {
            self.out.per_second.resize(i + 1, Second::default());
        }
        &mut self.out.per_second[i]
    }

    /// Records the delay at every sampling tick up to `now` (ticks past
    /// the last arrival are not sampled).
    fn sample_until(&mut self, now: u64) {
        let Some(every) = self.workload.sample_every_ns else {
            return;
        };
        let until = self.workload.until_ns.unwrap_or(u64::MAX);
        while self.next_sample <= now && self.next_sample < until {
            let t = self.next_sample;
            let delay = self.client.delay_ns(0, t);
            self.out.delay_series.push((t, delay));
            self.next_sample += every;
        }
    }

    fn done_issuing(&self, now: u64) -> bool {
        self.issued >= self.workload.users || self.workload.until_ns.is_some_and(|u| now >= u)
    }

    /// Schedules the next Poisson arrival after `now`.
    fn schedule_arrival(&mut self, now: u64) {
        let Arrivals::Poisson { per_sec } = self.workload.arrivals else {
            return;
        };
        let at = now + self.arrivals.exp_ns(SEC as f64 / per_sec).max(1);
        if !self.done_issuing(at) {
            self.push(at, ARRIVAL, Kind::Arrival);
        }
    }

    /// Starts a user request at `now`: for closed-loop worker `worker`, or
    /// a new arrival.
    fn start_user(&mut self, worker: Option<usize>, now: u64) {
        if self.done_issuing(now) {
            return;
        }
        let number = self.issued;
        self.issued += 1;
        let target = match self.workload.popularity {
            Popularity::One => 0,
            p => p.pick(&mut Rng::keyed(&[STREAM_TARGET, self.seed, number])),
        };
        let state = UserState {
            start: now,
            remaining: self.workload.fanout,
            slow: false,
            number,
            target,
            origin: DelayOrigin::NoDelay,
            failed: false,
            retries: 0,
        };
        let user = match worker {
            Some(w) => {
                self.users[w] = state;
                w
            }
            None => match self.free_users.pop() {
                Some(u) => {
                    self.users[u] = state;
                    u
                }
                None => {
                    self.users.push(state);
                    self.users.len() - 1
                }
            },
        };
        for index in 0..self.workload.fanout {
            self.start_sub(user, index, 0, now);
        }
    }

    /// Starts try `try_no` of backend request `index` of `user` at `now`.
    fn start_sub(&mut self, user: usize, index: usize, try_no: u32, now: u64) {
        let target = self.users[user].target;
        let req = self.client.start(target, now);
        let delay = self.client.delay_ns(target, now);
        if index == 0 && try_no == 0 {
            self.users[user].origin = self.client.delay_origin(&req);
        }
        self.out.requests += 1;
        let second = self.second(now);
        second.requests += 1;
        second.by_tenth[((now % SEC) / (SEC / 10)) as usize] += 1;
        second.delay_ns = delay;
        let sub = Sub {
            req,
            user,
            index,
            try_no,
            attempts: [Live::default(); 8],
            replicas_used: 0,
            primary_replica: 0,
            winner: None,
        };
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i].sub = Some(sub);
                i
            }
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    sub: Some(sub),
                });
                self.slots.len() - 1
            }
        };
        let replica = self.replica_for(slot, 0);
        self.send(slot, 0, replica, now);
        self.arm(slot, now);
    }

    fn sub(&mut self, slot: usize) -> &mut Sub<C::Req> {
        self.slots[slot].sub.as_mut().expect("live slot")
    }

    fn arm(&mut self, slot: usize, now: u64) {
        let req = &self.slots[slot].sub.as_ref().expect("live slot").req;
        if let Some(at) = self.client.next_timer(req) {
            self.push(at.max(now + 1), slot, Kind::Timer);
        }
    }

    /// The random stream of `attempt` of the request in `slot`, for `what`
    /// (a caller retry's tries draw anew; first tries keep the stream they
    /// had before retries existed).
    fn keyed_rng(&self, slot: usize, attempt: u8, what: u64) -> Rng {
        let sub = self.slots[slot].sub.as_ref().expect("live slot");
        let number = self.users[sub.user].number;
        let parts = [
            what,
            self.seed,
            number,
            sub.index as u64,
            u64::from(attempt),
            u64::from(sub.try_no),
        ];
        Rng::keyed(if sub.try_no == 0 { &parts[..5] } else { &parts })
    }

    /// The replica `attempt` of the request in `slot` goes to.
    fn replica_for(&self, slot: usize, attempt: u8) -> u32 {
        let n = self.backend.replica_count();
        match self.workload.routing {
            Routing::ToTarget => {
                let sub = self.slots[slot].sub.as_ref().expect("live slot");
                self.users[sub.user].target % n
            }
            Routing::Next if attempt > 0 => {
                let used = self.slots[slot]
                    .sub
                    .as_ref()
                    .expect("live slot")
                    .primary_replica;
                (used + u32::from(attempt)) % n
            }
            Routing::Spread | Routing::Next => {
                let used = self.slots[slot]
                    .sub
                    .as_ref()
                    .expect("live slot")
                    .replicas_used;
                let free: Vec<u32> = (0..n.min(64)).filter(|r| used & (1 << r) == 0).collect();
                let mut rng = self.keyed_rng(slot, attempt, STREAM_REPLICA);
                if free.is_empty() {
                    rng.below(n)
                } else {
                    free[rng.below(free.len() as u32) as usize]
                }
            }
        }
    }

    fn send(&mut self, slot: usize, attempt: u8, replica: u32, now: u64) {
        let mut draw = if self.open_loop {
            let mut rng = self.keyed_rng(slot, attempt, STREAM_LATENCY);
            self.backend.draw_on(&mut rng, now, replica)
        } else {
            self.backend.draw_on(&mut self.rng, now, replica)
        };
        if let Some(load) = self.backend.load {
            self.recent.push_back(now);
            let since = now.saturating_sub(load.window_ns);
            while self.recent.front().is_some_and(|&t| t < since) {
                self.recent.pop_front();
            }
            let factor = load.factor(self.recent.len());
            draw.answer_ns = stretched(draw.answer_ns, factor);
            draw.headers_ns = draw.headers_ns.map(|h| stretched(h, factor));
        }
        if self.backend.queue == Some(OnCancel::Kept) {
            // Service starts when the work queued before it is done.
            let free = &mut self.free_at[replica as usize];
            let wait = free.saturating_sub(now);
            let service = draw.fail_ns.unwrap_or(draw.answer_ns);
            *free = now + wait + service;
            draw.answer_ns += wait;
            draw.headers_ns = draw.headers_ns.map(|h| h + wait);
            draw.fail_ns = draw.fail_ns.map(|f| f + wait);
        }
        let sub = self.sub(slot);
        sub.attempts[usize::from(attempt)] = Live {
            sent_at: now,
            live: true,
            replica,
        };
        if replica < 64 {
            sub.replicas_used |= 1 << replica;
        }
        if attempt == 0 {
            sub.primary_replica = replica;
        }
        let user = sub.user;
        if attempt == 0 && draw.slow {
            self.users[user].slow = true;
        }
        if matches!(
            self.backend.queue,
            Some(OnCancel::Dequeued | OnCancel::Stopped)
        ) {
            let gen = self.slots[slot].gen;
            let server = &mut self.servers[replica as usize];
            server.waiting.push_back(Job {
                slot,
                gen,
                attempt,
                draw,
            });
            if server.serving.is_none() {
                self.serve_next(replica, now);
            }
            return;
        }
        self.push_fate(slot, attempt, draw, now);
    }

    /// The events of `attempt`'s `draw`, from `now`.
    fn push_fate(&mut self, slot: usize, attempt: u8, draw: Draw, now: u64) {
        if let Some(f) = draw.fail_ns {
            self.push(now + f, slot, Kind::Fail(attempt));
            return;
        }
        if let Some(h) = draw.headers_ns {
            self.push(now + h, slot, Kind::Headers(attempt));
        }
        self.push(now + draw.answer_ns, slot, Kind::Answer(attempt));
    }

    /// `replica`'s server, idle at `now`, starts on the next attempt still
    /// wanted in its queue, if any.
    fn serve_next(&mut self, replica: u32, now: u64) {
        let server = &mut self.servers[replica as usize];
        server.serving = None;
        while let Some(job) = server.waiting.pop_front() {
            let slot = &self.slots[job.slot];
            let wanted = slot.gen == job.gen
                && slot
                    .sub
                    .as_ref()
                    .is_some_and(|s| s.attempts[usize::from(job.attempt)].live);
            if !wanted {
                continue;
            }
            server.serving = Some(job);
            server.run = server.run.wrapping_add(1);
            let run = server.run;
            let service = job.draw.fail_ns.unwrap_or(job.draw.answer_ns);
            self.push_fate(job.slot, job.attempt, job.draw, now);
            self.push(now + service, ARRIVAL, Kind::Served { replica, run });
            return;
        }
    }

    /// Sends hedge `attempt` of the request in `slot` at `now`: to the
    /// replica the routing picks, told to the client first.
    fn send_hedge(&mut self, slot: usize, attempt: u8, now: u64) {
        self.out.hedges += 1;
        self.second(now).hedges += 1;
        let replica = self.replica_for(slot, attempt);
        let key = match self.workload.routing {
            Routing::Spread | Routing::Next => replica,
            Routing::ToTarget => {
                let sub = self.slots[slot].sub.as_ref().expect("live slot");
                self.users[sub.user].target
            }
        };
        let sub = self.slots[slot].sub.as_mut().expect("live slot");
        self.client.route(&mut sub.req, attempt, key);
        self.send(slot, attempt, replica, now);
    }

    /// The attempts of the request in `slot` still in flight (a mask).
    fn live(&self, slot: usize) -> u8 {
        let sub = self.slots[slot].sub.as_ref().expect("live slot");
        sub.attempts
            .iter()
            .enumerate()
            .filter(|(_, a)| a.live)
            .fold(0, |m, (i, _)| m | (1 << i))
    }

    /// Stops `attempts` (a mask) at `now`: their backend time ends here.
    /// On a queued backend whose servers hear of it, a cancelled attempt
    /// leaves its queue (and, if they stop work, its service).
    fn cancel(&mut self, slot: usize, attempts: u8, now: u64) {
        let mut busy = 0;
        let mut stopped = 0u64;
        for (i, a) in self.sub(slot).attempts.iter_mut().enumerate() {
            if attempts & (1 << i) != 0 && a.live {
                a.live = false;
                busy += u128::from(now - a.sent_at);
                if a.replica < 64 {
                    stopped |= 1 << a.replica;
                }
            }
        }
        self.out.busy_ns += busy;
        match self.backend.queue {
            // Dequeued lazily: `serve_next` skips attempts no longer live.
            Some(OnCancel::Dequeued) => {}
            Some(OnCancel::Stopped) => {
                let gen = self.slots[slot].gen;
                for replica in 0..self.servers.len().min(64) {
                    if stopped & (1 << replica) == 0 {
                        continue;
                    }
                    let serving = self.servers[replica].serving;
                    let ours = serving.is_some_and(|j| {
                        j.slot == slot && j.gen == gen && attempts & (1 << j.attempt) != 0
                    });
                    if ours {
                        self.serve_next(replica as u32, now);
                    }
                }
            }
            Some(OnCancel::Kept) | None => {}
        }
    }

    fn handle(&mut self, ev: Event) {
        let now = ev.at;
        if ev.kind == Kind::Arrival {
            self.start_user(None, now);
            self.schedule_arrival(now);
            return;
        }
        if let Kind::Served { replica, run } = ev.kind {
            // Not a service the server has since stopped.
            if self.servers[replica as usize].run == run {
                self.serve_next(replica, now);
            }
            return;
        }
        let current = self.slots[ev.slot].gen == ev.gen && self.slots[ev.slot].sub.is_some();
        if !current {
            return; // the request finished; a stale event
        }
        match ev.kind {
            Kind::Timer => {
                let sub = self.slots[ev.slot].sub.as_mut().expect("live slot");
                if let Some(a) = self.client.on_timer(&mut sub.req, now) {
                    self.send_hedge(ev.slot, a, now);
                }
                self.arm(ev.slot, now);
            }
            Kind::Fail(a) => {
                if !self.sub(ev.slot).attempts[usize::from(a)].live {
                    return;
                }
                self.out.failed_attempts += 1;
                self.cancel(ev.slot, 1 << a, now); // failed: its work ends
                let in_flight = self.live(ev.slot);
                let sub = self.slots[ev.slot].sub.as_mut().expect("live slot");
                match self.client.on_failure(&mut sub.req, a, now, in_flight) {
                    FailureAction::SendNow(b) => {
                        self.send_hedge(ev.slot, b, now);
                        self.arm(ev.slot, now);
                    }
                    FailureAction::Continue => {
                        let sub = self.slots[ev.slot].sub.as_ref().expect("live slot");
                        if in_flight == 0 && self.client.next_timer(&sub.req).is_none() {
                            // Nothing in flight and nothing pending: the
                            // request could never end otherwise.
                            self.give_up_sub(ev.slot, now);
                        } else {
                            self.arm(ev.slot, now);
                        }
                    }
                    FailureAction::GiveUp(cancel) => {
                        self.cancel(ev.slot, cancel, now);
                        self.give_up_sub(ev.slot, now);
                    }
                }
            }
            Kind::Headers(a) => {
                let races_on = self.client.races_on();
                let sub = self.slots[ev.slot].sub.as_mut().expect("live slot");
                if !sub.attempts[usize::from(a)].live {
                    return;
                }
                self.client.on_headers(&mut sub.req, a, now);
                if races_on == Signal::Headers && sub.winner.is_none() {
                    if let Some(losers) = self.client.on_commit(&mut sub.req, a, now) {
                        sub.winner = Some(a);
                        self.cancel(ev.slot, losers, now);
                    }
                }
            }
            Kind::Answer(a) => {
                let races_on = self.client.races_on();
                let sub = self.slots[ev.slot].sub.as_mut().expect("live slot");
                if !sub.attempts[usize::from(a)].live {
                    return;
                }
                let finished = if sub.winner == Some(a) {
                    true
                } else if races_on == Signal::Answer {
                    match self.client.on_commit(&mut sub.req, a, now) {
                        Some(losers) => {
                            self.cancel(ev.slot, losers, now);
                            true
                        }
                        None => false,
                    }
                } else {
                    false
                };
                self.cancel(ev.slot, 1 << a, now); // answered: its work ends
                if finished {
                    self.finish_sub(ev.slot, now);
                }
            }
            Kind::Arrival | Kind::Served { .. } => unreachable!("handled above"),
        }
    }

    /// Frees the slot of a finished request; returns the request.
    fn take_sub(&mut self, slot: usize) -> Sub<C::Req> {
        let s = &mut self.slots[slot];
        let sub = s.sub.take().expect("live slot");
        s.gen = s.gen.wrapping_add(1);
        // Attempts still running (none with our clients) keep running until
        // the backend answers; they are not charged beyond this point.
        self.free.push(slot);
        sub
    }

    /// The request in `slot` gave up at `now`: the caller retries it as a
    /// new request if it has tries left, else its user request fails.
    fn give_up_sub(&mut self, slot: usize, now: u64) {
        let sub = self.take_sub(slot);
        let next = sub.try_no + 1;
        if next < self.workload.tries {
            self.out.caller_retries += 1;
            self.users[sub.user].retries += 1;
            self.start_sub(sub.user, sub.index, next, now);
        } else {
            self.users[sub.user].failed = true;
            self.end_sub(sub.user, now);
        }
    }

    fn finish_sub(&mut self, slot: usize, now: u64) {
        let sub = self.take_sub(slot);
        self.end_sub(sub.user, now);
    }

    /// One backend request of user request `u` ended (answered or failed
    /// for good) at `now`.
    fn end_sub(&mut self, u: usize, now: u64) {
        let user = &mut self.users[u];
        user.remaining -= 1;
        if user.remaining == 0 {
            self.out.users.push(UserRecord {
                start_ns: user.start,
                latency_ns: now - user.start,
                any_slow_primary: user.slow,
                target: user.target,
                origin: user.origin,
                failed: user.failed,
                retries: user.retries,
            });
            if self.open_loop {
                self.free_users.push(u);
            } else {
                self.start_user(Some(u), now);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Summaries
// ---------------------------------------------------------------------------

/// Latency quantiles of a set of user requests, in milliseconds (exact,
/// nearest rank).
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantiles {
    /// Requests summarised.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// The quantiles of the successful `records` whose start lies in
/// `[from, until)` (failed user requests are counted apart:
/// [`Outcome::failure_rate`]).
pub fn quantiles_between(records: &[UserRecord], from_ns: u64, until_ns: u64) -> Quantiles {
    let mut v: Vec<u64> = records
        .iter()
        .filter(|r| !r.failed && (from_ns..until_ns).contains(&r.start_ns))
        .map(|r| r.latency_ns)
        .collect();
    v.sort_unstable();
    let q = |p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1] as f64 / MS as f64
    };
    Quantiles {
        count: v.len(),
        p50: q(0.50),
        p90: q(0.90),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
    }
}

/// The quantiles of every successful record.
pub fn quantiles(records: &[UserRecord]) -> Quantiles {
    quantiles_between(records, 0, u64::MAX)
}

impl DelayOrigin {
    /// Whether the delay came from measured latency (the target's own or
    /// the aggregate's).
    pub fn is_data_driven(self) -> bool {
        matches!(self, Self::Data | Self::Aggregate)
    }
}

/// The share of `records` starting at or after `from_ns` whose delay came
/// from measured latency (the target's own or the aggregate's).
pub fn data_driven_share(records: &[UserRecord], from_ns: u64) -> f64 {
    origin_share(records, from_ns, DelayOrigin::is_data_driven)
}

/// The share of `records` starting at or after `from_ns` whose delay's
/// origin passes `pick`.
pub fn origin_share(
    records: &[UserRecord],
    from_ns: u64,
    pick: impl Fn(DelayOrigin) -> bool,
) -> f64 {
    let after = records.iter().filter(|r| r.start_ns >= from_ns);
    let (n, data) = after.fold((0u64, 0u64), |(n, d), r| {
        (n + 1, d + u64::from(pick(r.origin)))
    });
    data as f64 / n.max(1) as f64
}
