//! The discrete-event engine behind `cargo run --example simulate`, shared
//! with `tests/simulation.rs`.
//!
//! Virtual time in nanoseconds, a binary-heap event queue, a seeded PRNG: no
//! clock, no sleep, no thread, the same output for the same seed. Clients
//! drive the real [`Hedger`] exactly as a network client would: `start`, arm a
//! timer at [`Request::next_timer`], `on_timer` → send the hedge it names,
//! `on_commit` on the commit signal → cancel the losers.
//!
//! The backend has unlimited capacity (no queueing): each attempt draws its
//! own latency when it is sent. An attempt costs backend time from its send
//! until it answers or is cancelled, whichever comes first.

// The example and the test each use a subset of this module.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tailguard::budget::{Budget, HedgeBudget, TokenBucket};
use tailguard::hedge::{Attempt, CommitOutcome, Hedger, Idempotency, Request, TimerAction};
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

/// The backend every attempt goes to.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The latency model.
    pub latency: Latency,
    /// Time-varying slowdowns (drift, outage), by the attempt's send time.
    pub slowdowns: Vec<Slowdown>,
}

/// One attempt's fate, drawn when it is sent.
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    /// Time from send to headers (streaming only).
    pub headers_ns: Option<u64>,
    /// Time from send to the answer (the response, or the first token).
    pub answer_ns: u64,
    /// A slow attempt (straggler or cache miss).
    pub slow: bool,
}

impl Backend {
    /// The article's backend: lognormal mean 5 ms, sd 2 ms, `slow_prob` of
    /// attempts ×10.
    pub fn article(slow_prob: f64) -> Self {
        Self {
            latency: Latency::Plain {
                base: LogNormal::from_mean_sd(5.0, 2.0),
                slow_prob,
                slow_factor: 10.0,
            },
            slowdowns: Vec::new(),
        }
    }

    /// The LLM streaming backend: headers ≈ 1 ms, first token 80 %
    /// lognormal(15, 3) ms, 20 % lognormal(200, 25) ms.
    pub fn streaming() -> Self {
        Self {
            latency: Latency::Streaming {
                headers: LogNormal::from_mean_sd(1.0, 0.2),
                hit: LogNormal::from_mean_sd(15.0, 3.0),
                miss: LogNormal::from_mean_sd(200.0, 25.0),
                miss_prob: 0.20,
            },
            slowdowns: Vec::new(),
        }
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

    fn factor_at(&self, now: u64) -> f64 {
        self.slowdowns
            .iter()
            .filter(|s| (s.from_ns..s.until_ns).contains(&now))
            .map(|s| s.factor)
            .product()
    }

    /// Draws one attempt sent at `now`.
    pub fn draw(&self, rng: &mut Rng, now: u64) -> Draw {
        let factor = self.factor_at(now);
        let scale = |ns: u64| ((ns as f64 * factor) as u64).max(1);
        match self.latency {
            Latency::Plain {
                base,
                slow_prob,
                slow_factor,
            } => {
                let slow = rng.chance(slow_prob);
                let ns = base.sample_ns(rng) as f64 * if slow { slow_factor } else { 1.0 };
                Draw {
                    headers_ns: None,
                    answer_ns: scale(ns as u64),
                    slow,
                }
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
                }
            }
        }
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

/// A hedging client as the engine sees it. Attempt numbers are `0` for the
/// primary and `1..` for hedges; sets of attempts are bit masks.
pub trait Client {
    /// Per-request state, owned by the engine.
    type Req;
    /// A request starts at `now`; its primary is sent.
    fn start(&mut self, now: u64) -> Self::Req;
    /// When the engine should call [`on_timer`](Self::on_timer) next.
    fn next_timer(&self, req: &Self::Req) -> Option<u64>;
    /// The timer fired: `Some(attempt)` to send a hedge now.
    fn on_timer(&mut self, req: &mut Self::Req, now: u64) -> Option<u8>;
    /// `attempt` gave the commit signal: `Some(losers)` if it won.
    fn on_commit(&mut self, req: &mut Self::Req, attempt: u8, now: u64) -> Option<u8>;
    /// `attempt`'s headers arrived (called for every live attempt, whatever
    /// the client races on).
    fn on_headers(&mut self, _req: &mut Self::Req, _attempt: u8, _now: u64) {}
    /// The signal the race is decided on.
    fn races_on(&self) -> Signal {
        Signal::Answer
    }
    /// The hedge delay a request would get now, if any.
    fn delay_ns(&self, now: u64) -> Option<u64>;
}

/// Our [`Hedger`], driven through its public API only.
#[derive(Debug)]
pub struct Ours<B: HedgeBudget = Budget> {
    /// The state machine.
    pub hedger: Hedger<(), B>,
    /// The commit signal: raced on and recorded.
    pub signal: Signal,
}

impl<B: HedgeBudget> Ours<B> {
    /// Wraps `hedger`, racing and recording on `signal`.
    pub fn new(hedger: Hedger<(), B>, signal: Signal) -> Self {
        Self { hedger, signal }
    }
}

fn mask(set: tailguard::hedge::AttemptSet) -> u8 {
    set.iter().fold(0, |m, a| m | (1 << a.0))
}

impl<B: HedgeBudget> Client for Ours<B> {
    type Req = Request<()>;

    fn start(&mut self, now: u64) -> Request<()> {
        // The timer to arm is `next_timer`; the plan only informs.
        self.hedger.start((), now, Idempotency::Idempotent)
    }

    fn next_timer(&self, req: &Request<()>) -> Option<u64> {
        req.next_timer()
    }

    fn on_timer(&mut self, req: &mut Request<()>, now: u64) -> Option<u8> {
        match self.hedger.on_timer(req, now) {
            TimerAction::SendHedge(a) => Some(a.0),
            // No deadline is configured, so `GiveUp` does not happen; the
            // engine re-arms at `next_timer` after `Wait`.
            TimerAction::Wait { .. } | TimerAction::Skip(_) | TimerAction::GiveUp { .. } => None,
        }
    }

    fn on_commit(&mut self, req: &mut Request<()>, attempt: u8, now: u64) -> Option<u8> {
        match self.hedger.on_commit(req, Attempt(attempt), now) {
            CommitOutcome::Won { cancel, .. } => Some(mask(cancel)),
            CommitOutcome::Late | CommitOutcome::Unknown => None,
        }
    }

    fn races_on(&self) -> Signal {
        self.signal
    }

    fn delay_ns(&self, now: u64) -> Option<u64> {
        self.hedger.delay_ns(&(), now)
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

    fn start(&mut self, now: u64) -> SimpleReq {
        self.started += 1;
        self.window.advance(now);
        SimpleReq::new(now, self.delay_ns(now))
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

    fn delay_ns(&self, _now: u64) -> Option<u64> {
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

    fn start(&mut self, now: u64) -> SimpleReq {
        self.window.advance(now);
        self.budget.on_request(now);
        SimpleReq::new(now, self.delay_ns(now))
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

    fn delay_ns(&self, _now: u64) -> Option<u64> {
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

/// What to run: closed-loop workers, each issuing user requests one after
/// another; each user request fans out to `fanout` backend requests and
/// completes when all have answered.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// User requests to issue in all (an upper bound if `until_ns` is set).
    pub users: u64,
    /// Concurrent workers.
    pub workers: usize,
    /// Backend requests per user request (1: no fan-out).
    pub fanout: usize,
    /// Stop issuing user requests at this virtual time.
    pub until_ns: Option<u64>,
}

impl Workload {
    /// `users` requests from `workers` workers, no fan-out.
    pub fn closed_loop(users: u64, workers: usize) -> Self {
        Self {
            users,
            workers,
            fanout: 1,
            until_ns: None,
        }
    }
}

/// One completed user request.
#[derive(Clone, Copy, Debug)]
pub struct UserRecord {
    /// When it started (ns).
    pub start_ns: u64,
    /// Start to last answer (ns).
    pub latency_ns: u64,
    /// Whether any of its primaries was slow (a straggler / cache miss).
    pub any_slow_primary: bool,
}

/// Activity in one second of virtual time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Second {
    /// Backend requests started (primaries).
    pub requests: u64,
    /// Hedges sent.
    pub hedges: u64,
    /// The client's hedge delay at the last request start in that second.
    pub delay_ns: Option<u64>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Completed user requests.
    pub users: Vec<UserRecord>,
    /// Backend requests started (one primary each).
    pub requests: u64,
    /// Hedges sent.
    pub hedges: u64,
    /// Backend busy time of every attempt, until answer or cancellation.
    pub busy_ns: u128,
    /// Per-second activity.
    pub per_second: Vec<Second>,
    /// Virtual time at the end.
    pub end_ns: u64,
}

impl Outcome {
    /// Hedges per backend request.
    pub fn extra_load(&self) -> f64 {
        self.hedges as f64 / self.requests.max(1) as f64
    }

    /// Backend requests per second of virtual time.
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / (self.end_ns.max(1) as f64 / SEC as f64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Headers(u8),
    Answer(u8),
    Timer,
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
}

#[derive(Debug)]
struct Sub<R> {
    req: R,
    worker: usize,
    attempts: [Live; 8],
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
}

struct Engine<'a, C: Client> {
    client: &'a mut C,
    backend: &'a Backend,
    workload: Workload,
    rng: Rng,
    queue: BinaryHeap<Reverse<Event>>,
    seq: u64,
    slots: Vec<Slot<C::Req>>,
    free: Vec<usize>,
    workers: Vec<UserState>,
    issued: u64,
    out: Outcome,
}

/// Runs `workload` against `backend` with `client`; deterministic in `seed`.
pub fn simulate<C: Client>(
    client: &mut C,
    backend: &Backend,
    workload: Workload,
    seed: u64,
) -> Outcome {
    let mut engine = Engine {
        client,
        backend,
        workload,
        rng: Rng::new(seed),
        queue: BinaryHeap::new(),
        seq: 0,
        slots: Vec::new(),
        free: Vec::new(),
        workers: vec![UserState::default(); workload.workers],
        issued: 0,
        out: Outcome::default(),
    };
    for w in 0..workload.workers {
        engine.start_user(w, 0);
    }
    while let Some(Reverse(ev)) = engine.queue.pop() {
        engine.out.end_ns = ev.at;
        engine.handle(ev);
    }
    engine.out
}

impl<C: Client> Engine<'_, C> {
    fn push(&mut self, at: u64, slot: usize, kind: Kind) {
        self.seq += 1;
        let gen = self.slots[slot].gen;
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

    fn start_user(&mut self, worker: usize, now: u64) {
        if self.issued >= self.workload.users || self.workload.until_ns.is_some_and(|u| now >= u) {
            return;
        }
        self.issued += 1;
        self.workers[worker] = UserState {
            start: now,
            remaining: self.workload.fanout,
            slow: false,
        };
        for _ in 0..self.workload.fanout {
            self.start_sub(worker, now);
        }
    }

    fn start_sub(&mut self, worker: usize, now: u64) {
        let req = self.client.start(now);
        let delay = self.client.delay_ns(now);
        self.out.requests += 1;
        let second = self.second(now);
        second.requests += 1;
        second.delay_ns = delay;
        let sub = Sub {
            req,
            worker,
            attempts: [Live::default(); 8],
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
        self.send(slot, 0, now);
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

    fn send(&mut self, slot: usize, attempt: u8, now: u64) {
        let draw = self.backend.draw(&mut self.rng, now);
        let sub = self.sub(slot);
        sub.attempts[usize::from(attempt)] = Live {
            sent_at: now,
            live: true,
        };
        let worker = sub.worker;
        if attempt == 0 && draw.slow {
            self.workers[worker].slow = true;
        }
        if let Some(h) = draw.headers_ns {
            self.push(now + h, slot, Kind::Headers(attempt));
        }
        self.push(now + draw.answer_ns, slot, Kind::Answer(attempt));
    }

    /// Stops `attempts` (a mask) at `now`: their backend time ends here.
    fn cancel(&mut self, slot: usize, attempts: u8, now: u64) {
        let mut busy = 0;
        for (i, a) in self.sub(slot).attempts.iter_mut().enumerate() {
            if attempts & (1 << i) != 0 && a.live {
                a.live = false;
                busy += u128::from(now - a.sent_at);
            }
        }
        self.out.busy_ns += busy;
    }

    fn handle(&mut self, ev: Event) {
        let current = self.slots[ev.slot].gen == ev.gen && self.slots[ev.slot].sub.is_some();
        if !current {
            return; // the request finished; a stale event
        }
        let now = ev.at;
        match ev.kind {
            Kind::Timer => {
                let sub = self.slots[ev.slot].sub.as_mut().expect("live slot");
                if let Some(a) = self.client.on_timer(&mut sub.req, now) {
                    self.out.hedges += 1;
                    self.second(now).hedges += 1;
                    self.send(ev.slot, a, now);
                }
                self.arm(ev.slot, now);
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
        }
    }

    fn finish_sub(&mut self, slot: usize, now: u64) {
        let s = &mut self.slots[slot];
        let sub = s.sub.take().expect("live slot");
        s.gen = s.gen.wrapping_add(1);
        // Attempts still running (none with our clients) keep running until
        // the backend answers; they are not charged beyond this point.
        self.free.push(slot);
        let worker = sub.worker;
        let user = &mut self.workers[worker];
        user.remaining -= 1;
        if user.remaining == 0 {
            self.out.users.push(UserRecord {
                start_ns: user.start,
                latency_ns: now - user.start,
                any_slow_primary: user.slow,
            });
            self.start_user(worker, now);
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

/// The quantiles of `records` whose start lies in `[from, until)`.
pub fn quantiles_between(records: &[UserRecord], from_ns: u64, until_ns: u64) -> Quantiles {
    let mut v: Vec<u64> = records
        .iter()
        .filter(|r| (from_ns..until_ns).contains(&r.start_ns))
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

/// The quantiles of every record.
pub fn quantiles(records: &[UserRecord]) -> Quantiles {
    quantiles_between(records, 0, u64::MAX)
}
