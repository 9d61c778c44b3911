//! Hedge configuration, validated once at construction.

use core::fmt;

use crate::mapping::MIN_RELATIVE_ACCURACY;
use crate::window::Rotation;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// Windows must key samples apart down to 1 µs (or to the minimum delay):
/// shorter ones may share the lowest bucket.
const MAX_KEY_FLOOR_NS: u64 = 1_000;

/// The most extra attempts a request may send (8 attempts in all).
pub const MAX_HEDGES: u8 = 7;

/// How a [`Hedger`](super::Hedger) decides; every field has a documented
/// default ([`HedgeConfig::DEFAULT`]).
///
/// ```
/// use tailguard::hedge::HedgeConfig;
/// // One seed walk-through: hedge at p95 × 1.5, never before 2 ms, two hedges.
/// let config = HedgeConfig::DEFAULT
///     .quantile(0.95)
///     .delay_multiplier_permille(1_500)
///     .min_delay_ns(2_000_000)
///     .max_hedges(2);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct HedgeConfig {
    /// The latency quantile that sets the hedge delay. Default 0.90.
    ///
    /// Put it below the slow requests you want raced: with exactly 10 %
    /// stragglers, the p90 falls at the edge of the slow group, where a
    /// small error of the estimate moves the delay into it, and many
    /// stragglers wait for it; with more than 10 %, the p90 is a
    /// straggler's latency and they go unhedged. `1 − quantile` should be
    /// comfortably above the share of stragglers, and the budget's share
    /// above `1 − quantile`.
    ///
    /// The delay is within the relative accuracy of the quantile's
    /// *value*, not of its rank: where latencies spread over only a few
    /// times that accuracy (10 ms + up to 1 ms of jitter at α = 1 %), the
    /// p90, p95 and p99 can share a bucket, and so a delay: the hedge rate
    /// is then the share of requests above it, the same for all three and
    /// far from `1 − quantile`. Requests that close together gain little
    /// from a hedge anyway.
    pub quantile: f64,
    /// Multiplier on that quantile, in thousandths. Default 1000 (× 1.0).
    pub delay_multiplier_permille: u32,
    /// The delay never goes below this. Default 1 ms. With a coarse clock,
    /// set [`clock_tick_ns`](Self::clock_tick_ns) too.
    pub min_delay_ns: u64,
    /// The delay never goes above this. Default `u64::MAX` (no cap).
    pub max_delay_ns: u64,
    /// Answers (exact samples) a window must hold before its estimate is
    /// trusted; until then the target falls back to the aggregate window,
    /// then to the prior, then to cold start. Default 20.
    ///
    /// A few answers estimate a high quantile poorly, and low: the p99 of
    /// 20 answers is their second largest, which one attempt in ten
    /// exceeds, not one in a hundred. Until a half holds
    /// [`Rotation::answers_to_estimate`] answers (1 000 at p99) hedges go
    /// out more often than the quantile says, within the budget; raise this
    /// towards that count to hedge on the prior (or not at all) instead.
    /// Likewise at a cold start with many requests in flight, the first
    /// answers are the fastest of them and the first estimates low, for
    /// about the time the slow ones take to answer.
    pub min_samples: u64,
    /// Rotation period of the latency windows: a window rotates once this
    /// has passed and its current half holds enough answers to estimate
    /// the quantile (see [`rotation`](Self::rotation)), and forgets
    /// everything after two periods without a sample. Default 30 s.
    pub rotation_period_ns: u64,
    /// A window also rotates as soon as its current half holds this many
    /// answers (exact samples; censored ones beside them do not count), so
    /// that at high rates the delay follows a change within
    /// seconds. Default `None`: [`Rotation::samples_for_quantile`] of
    /// `quantile` (1 000 at p90, 10 000 at p99). Never fewer than
    /// `min_samples` (a smaller count rotates at `min_samples`): a window
    /// rotating sooner could never hold enough answers to be trusted. A
    /// count below [`Rotation::answers_to_estimate`] of the quantile also
    /// lowers what a half must hold to rotate on time (see
    /// [`rotation`](Self::rotation)): faster at low rates, with the bias
    /// that comes with fewer answers.
    pub rotation_samples: Option<u64>,
    /// The longest latency that can be real: an elapsed time above it (a
    /// timestamp from another clock, a jump of the clock) is refused and
    /// counted in [`HedgeStats::samples_refused`](super::HedgeStats::samples_refused),
    /// never recorded. Default 10 minutes, the span of the default sketch.
    ///
    /// Not a timeout: set it above every latency the backend can really
    /// take. Answers above it are dropped, not counted as slow, so a limit
    /// inside the tail leans the delay low (seen: a delay of 32.5 ms for a
    /// true p90 of 38 ms with a 40 ms limit). Give up on slow requests
    /// with [`deadline_ns`](Self::deadline_ns), whose cancelled attempts
    /// are recorded as lasting at least that long. It also sets how many
    /// buckets a window needs (see [`ConfigError::KeyRange`]).
    pub max_sample_ns: u64,
    /// Relative accuracy of the latency sketches, in
    /// `[`[`MIN_RELATIVE_ACCURACY`](crate::mapping::MIN_RELATIVE_ACCURACY)`, 1)`. Default 0.01.
    /// A finer α needs more buckets for the same range: with the default
    /// store (1 024 buckets) and `max_sample_ns` (10 min), α below about
    /// 0.66 % is refused at construction ([`ConfigError::KeyRange`]):
    /// lower `max_sample_ns` with it.
    pub relative_accuracy: f64,
    /// Hedges per request: extra attempts raced against the ones in
    /// flight, each one delay after the previous, each paying the budget.
    /// A hedge that fails (retryable) frees its place for another, as one
    /// of the request's `max_retries` replacements (given back if no hedge
    /// takes the place: the budget refuses it, say). Default 1, at most
    /// [`MAX_HEDGES`]; 0 disables hedging (requests are still measured).
    pub max_hedges: u8,
    /// Failed attempts a request replaces: when an attempt fails with
    /// [`Failure::Retryable`](super::Failure::Retryable), a replacement is
    /// sent at once, up to this many times in all: a *retry* when no other
    /// attempt is in flight, a hedge (paying the budget, within
    /// `max_hedges` and the in-flight cap) when others still race. A retry
    /// adds no concurrent load (the attempt it replaces is over), so it
    /// draws no budget token and does not use up `max_hedges`: the retried
    /// request can still be hedged. Default 2 (three tries, as a caller's
    /// retry loop would make); 0 leaves retrying to the caller, and a
    /// failed hedge is then not replaced. A request sends at most
    /// `1 + max_hedges + max_retries` attempts, and never more than 8.
    pub max_retries: u8,
    /// Retry throttling, as gRPC's: the hedger keeps a balance of this many
    /// tokens, full at first and never above it; every retryable failure
    /// takes one and every answered request gives one back. A failed
    /// attempt is replaced by a *retry* (nothing else in flight) only
    /// while the balance is above half: once failures outrun answers by
    /// half the balance (a backend down, failing fast), requests are no
    /// longer retried and the backend sees one attempt each, and retries
    /// resume as answers come back. Failures that replace a hedge while
    /// others race pay the budget instead, and are not throttled. One
    /// balance per hedger: a dead target among healthy ones is still
    /// retried (give it a hedger of its own). Default 20: failures must
    /// outnumber answers by 10 before retries stop, which a backend
    /// failing one attempt in five did not do in 20 000 requests (tested);
    /// 0 turns throttling off. 1 and 2 are refused
    /// ([`ConfigError::RetryThrottle`]): a failure's own token would take
    /// the balance to half, so nothing would ever be retried.
    pub retry_throttle: u16,
    /// A delay to use during cold start. Default `None`: no hedging until
    /// the window holds `min_samples` samples.
    pub prior_delay_ns: Option<u64>,
    /// At most this many hedges in flight at once, across requests.
    /// Default `None` (only the budget limits them).
    ///
    /// Set it for a backend whose latency rises with its load: there a
    /// burst of hedges the budget allows (about twice its share over
    /// 100 ms) can push the backend into the slowness that asks for more,
    /// and from about 70 % of capacity the default makes the tail far
    /// worse than no hedging. A cap on hedges in flight throttles itself,
    /// since a hedge to a slowed backend holds its slot longer. Size it by
    /// Little's law from the backend at a moderate load, and err low: the
    /// share times the backend's capacity in attempts a second times no
    /// hedging's p50 at about half of capacity (15 % of 10 000 a second
    /// times 5 ms is 7.5: the README's runs use 8), rounded down, and 1 if
    /// that is below 1 (0 is refused: `max_hedges(0)` turns hedging off).
    /// From 70 % of capacity, twice too many is worse than none. The cap
    /// is per hedger: divide it among the hedgers (threads, processes)
    /// that share the backend; a [`SharedHedger`](crate::hedge::SharedHedger)
    /// may pass it by one at a slot boundary. The slot is freed when the
    /// request ends, so where cancelled attempts keep running on the
    /// backend the cap does not bound their work. Retries (an attempt
    /// replacing a failed one with nothing else in flight) pass neither
    /// this cap nor the budget: in front of a loaded backend consider
    /// [`max_retries(0)`](Self::max_retries). And where utilisation times
    /// `1 +` the share reaches 1 (about 87 % at 15 %), or the backend's
    /// throughput falls as its queue grows, do not hedge at all. See the
    /// README's *overload* simulation.
    ///
    /// Replicas that queue their attempts are such a backend at any load:
    /// a straggler holds up the attempts behind it and they pass the delay
    /// together. Where a cancelled attempt keeps its place in the queue,
    /// the default still cuts p99 at 30 % of capacity but worsens it at
    /// 75 %, by up to 1.8× when every hedge goes to the next replica; one
    /// hedge in flight (Little's law again) keeps p99 near no hedging's
    /// there; at 60 % neither gains much. Send hedges to a replica
    /// other than the primary's, picked at random. Where the servers drop
    /// a cancelled attempt still waiting in their queue, the loser leaves
    /// its queue and hedging cuts p99 at every load simulated, 30 % to
    /// 75 % (to 0.44–0.75× no hedging's; 0.33–0.55× if they also stop one
    /// in service): make cancellations reach the servers first. See the
    /// README's *queued* simulation.
    pub max_hedges_in_flight: Option<u32>,
    /// How long a hedge counts as in flight if its request is dropped
    /// without a final event: it stops counting between ¾ of this and this
    /// long after it was sent (the lease is counted in four slots of
    /// `⌊lease / 4⌋` ns, at least 2 ns each, so a lease below 8 ns counts
    /// as 8 ns). Default 10 s.
    ///
    /// The slots cannot tell a dropped request from a live one: a hedge
    /// whose request is still racing after the lease stops counting too
    /// (and is counted in [`HedgeStats::leases_expired`](super::HedgeStats::leases_expired)),
    /// so requests that may outlive it (long polls, streams) can take
    /// more than [`max_hedges_in_flight`](Self::max_hedges_in_flight)
    /// places. Set the lease above the longest request, e.g. the
    /// [`deadline`](Self::deadline_ns); with `RequestGuard` or the tower
    /// layer (features `std`, `tower`), which give a dropped request up
    /// at once, a long lease costs nothing.
    pub in_flight_lease_ns: u64,
    /// Give the whole request up this long after its start (the caller's
    /// hard timeout): the timer armed at [`Request::next_timer`](super::Request::next_timer)
    /// fires there, and it, or a failure at or past it, ends the race and
    /// sends nothing more. A commit reported before that event still wins
    /// (see *State machine* in the [module docs](super)). Default `None`.
    pub deadline_ns: Option<u64>,
    /// The resolution of the caller's clock: its timestamps are multiples
    /// of this many ns (a 1 ms SysTick: 1 000 000). Default 1, an exact
    /// clock.
    ///
    /// On a coarse clock answers tie at tick values, and a delay at a tick
    /// would hedge every request that reaches that tick, far more than
    /// `1 − quantile` of them (2.1 times at p99 with 0.5 ms latencies on a
    /// 1 ms tick); with `min_delay_ns` 0 and latencies under a tick, every
    /// sample and the delay are 0, and every request hedges as it starts.
    /// With the tick set, a delay from the windows is rounded to the
    /// nearest tick and one tick added: a request hedges only once it is
    /// measurably slower than the estimate, so the hedge rate stays at or
    /// below `1 − quantile` (fails closed; below it by the tick's share
    /// where latencies span few ticks: nothing can tell the slow requests
    /// apart there), and a delay from the windows is never 0 (the prior
    /// delay and the minimum delay are taken as given: a prior of 0 with a
    /// minimum of 0 still hedges at once). Timers that fire on ticks
    /// are then exact. A 32 kHz RTC (30.5 µs) hedges its share of
    /// millisecond latencies with or without it; tokio's timers, whose
    /// timestamps are exact but whose sleeps end on a millisecond, need it
    /// not (they fire late, which only hedges less).
    pub clock_tick_ns: u64,
}

impl HedgeConfig {
    /// The documented defaults: p90, × 1.0, ≥ 1 ms, no cap, 20 samples,
    /// 30 s rotation or 1 000 samples, α = 1 %, samples up to 10 min, one
    /// hedge, two retries of retryable failures (throttled at a balance of
    /// 20), no prior, no in-flight cap
    /// (10 s lease), no deadline, an exact clock.
    pub const DEFAULT: Self = Self {
        quantile: 0.90,
        delay_multiplier_permille: 1_000,
        min_delay_ns: MS,
        max_delay_ns: u64::MAX,
        min_samples: 20,
        rotation_period_ns: 30 * SEC,
        rotation_samples: None,
        max_sample_ns: 600 * SEC,
        relative_accuracy: 0.01,
        max_hedges: 1,
        max_retries: 2,
        retry_throttle: 20,
        prior_delay_ns: None,
        max_hedges_in_flight: None,
        in_flight_lease_ns: 10 * SEC,
        deadline_ns: None,
        clock_tick_ns: 1,
    };

    /// Sets [`quantile`](Self::quantile).
    pub const fn quantile(mut self, q: f64) -> Self {
        self.quantile = q;
        self
    }

    /// Sets [`delay_multiplier_permille`](Self::delay_multiplier_permille).
    pub const fn delay_multiplier_permille(mut self, permille: u32) -> Self {
        self.delay_multiplier_permille = permille;
        self
    }

    /// Sets [`min_delay_ns`](Self::min_delay_ns).
    pub const fn min_delay_ns(mut self, ns: u64) -> Self {
        self.min_delay_ns = ns;
        self
    }

    /// Sets [`max_delay_ns`](Self::max_delay_ns).
    pub const fn max_delay_ns(mut self, ns: u64) -> Self {
        self.max_delay_ns = ns;
        self
    }

    /// Sets [`min_samples`](Self::min_samples).
    pub const fn min_samples(mut self, n: u64) -> Self {
        self.min_samples = n;
        self
    }

    /// Sets [`rotation_period_ns`](Self::rotation_period_ns).
    pub const fn rotation_period_ns(mut self, ns: u64) -> Self {
        self.rotation_period_ns = ns;
        self
    }

    /// Sets [`rotation_samples`](Self::rotation_samples).
    pub const fn rotation_samples(mut self, n: u64) -> Self {
        self.rotation_samples = Some(n);
        self
    }

    /// Sets [`max_sample_ns`](Self::max_sample_ns).
    pub const fn max_sample_ns(mut self, ns: u64) -> Self {
        self.max_sample_ns = ns;
        self
    }

    /// Sets [`clock_tick_ns`](Self::clock_tick_ns).
    pub const fn clock_tick_ns(mut self, ns: u64) -> Self {
        self.clock_tick_ns = ns;
        self
    }

    /// Sets [`in_flight_lease_ns`](Self::in_flight_lease_ns).
    pub const fn in_flight_lease_ns(mut self, ns: u64) -> Self {
        self.in_flight_lease_ns = ns;
        self
    }

    /// Sets [`relative_accuracy`](Self::relative_accuracy).
    pub const fn relative_accuracy(mut self, alpha: f64) -> Self {
        self.relative_accuracy = alpha;
        self
    }

    /// Sets [`max_hedges`](Self::max_hedges).
    pub const fn max_hedges(mut self, n: u8) -> Self {
        self.max_hedges = n;
        self
    }

    /// Sets [`max_retries`](Self::max_retries).
    pub const fn max_retries(mut self, n: u8) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets [`retry_throttle`](Self::retry_throttle).
    pub const fn retry_throttle(mut self, tokens: u16) -> Self {
        self.retry_throttle = tokens;
        self
    }

    /// Sets [`prior_delay_ns`](Self::prior_delay_ns).
    pub const fn prior_delay_ns(mut self, ns: u64) -> Self {
        self.prior_delay_ns = Some(ns);
        self
    }

    /// Sets [`max_hedges_in_flight`](Self::max_hedges_in_flight).
    pub const fn max_hedges_in_flight(mut self, n: u32) -> Self {
        self.max_hedges_in_flight = Some(n);
        self
    }

    /// Sets [`deadline_ns`](Self::deadline_ns).
    pub const fn deadline_ns(mut self, ns: u64) -> Self {
        self.deadline_ns = Some(ns);
        self
    }

    /// Checks every field; [`Hedger::new`](super::Hedger::new) calls this.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.quantile > 0.0 && self.quantile < 1.0) {
            return Err(ConfigError::Quantile(self.quantile));
        }
        if self.delay_multiplier_permille == 0 {
            return Err(ConfigError::ZeroMultiplier);
        }
        if self.min_delay_ns > self.max_delay_ns {
            return Err(ConfigError::DelayBounds {
                min_ns: self.min_delay_ns,
                max_ns: self.max_delay_ns,
            });
        }
        if self.min_samples == 0 {
            return Err(ConfigError::ZeroMinSamples);
        }
        if self.rotation_period_ns == 0 {
            return Err(ConfigError::ZeroPeriod);
        }
        if self.rotation_samples == Some(0) {
            return Err(ConfigError::ZeroRotationSamples);
        }
        if self.max_sample_ns == 0 {
            return Err(ConfigError::ZeroMaxSample);
        }
        // Only where hedges go out on a timer does the minimum delay count.
        if self.max_hedges > 0 && self.min_delay_ns > self.max_sample_ns {
            return Err(ConfigError::MinDelayAboveMaxSample {
                min_delay_ns: self.min_delay_ns,
                max_sample_ns: self.max_sample_ns,
            });
        }
        if self.in_flight_lease_ns == 0 {
            return Err(ConfigError::ZeroLease);
        }
        if self.clock_tick_ns == 0 {
            return Err(ConfigError::ZeroTick);
        }
        // The range every mapping takes (the store's span is checked at
        // construction: `KeyRange`).
        if !(MIN_RELATIVE_ACCURACY..1.0).contains(&self.relative_accuracy) {
            return Err(ConfigError::RelativeAccuracy(self.relative_accuracy));
        }
        if self.max_hedges > MAX_HEDGES {
            return Err(ConfigError::TooManyHedges(self.max_hedges));
        }
        if self.max_hedges_in_flight == Some(0) {
            return Err(ConfigError::ZeroInFlight);
        }
        if self.deadline_ns == Some(0) {
            return Err(ConfigError::ZeroDeadline);
        }
        if matches!(self.retry_throttle, 1 | 2) {
            return Err(ConfigError::RetryThrottle(self.retry_throttle));
        }
        Ok(())
    }
}

impl HedgeConfig {
    /// How windows rotate under this configuration.
    ///
    /// A half rotates on time only once it holds
    /// [`Rotation::answers_to_estimate`] answers of the quantile (and at
    /// least `min_samples`): with fewer, the quantile is an order statistic
    /// of a few dozen answers, which a new attempt exceeds several times
    /// more often than `1 − q` (at p90 with 20 answers, one in seven). At
    /// low rates a half so spans more than a period: at half a request a
    /// second, 200 s at p90, 2 000 s at p99.
    pub fn rotation(&self) -> Rotation {
        // Never below `min_samples`: a half rotated out full holds
        // enough answers to warm the window (when few were censored).
        let max_samples = self
            .rotation_samples
            .unwrap_or_else(|| Rotation::samples_for_quantile(self.quantile))
            .max(self.min_samples);
        Rotation {
            period_ns: self.rotation_period_ns,
            min_samples: Rotation::answers_to_estimate(self.quantile)
                .max(self.min_samples)
                .min(max_samples),
            max_samples,
        }
    }

    /// `delay` within `[min_delay, max_delay]` (not `clamp`, which asserts
    /// its bounds are ordered: validated, but not provably so).
    #[inline]
    pub(crate) fn bound(&self, delay: u64) -> u64 {
        delay.max(self.min_delay_ns).min(self.max_delay_ns)
    }

    /// The delay for a window's quantile estimate: times the multiplier,
    /// one tick past the nearest tick on a coarse clock, within the bounds.
    #[inline]
    pub(crate) fn delay_for(&self, quantile_ns: u64) -> u64 {
        let scaled = self.scale(quantile_ns);
        let tick = self.clock_tick_ns;
        let delay = if tick > 1 {
            // ⌊(d + τ/2) / τ⌋ + 1 ticks, saturating.
            let ticks = scaled
                .saturating_add(tick / 2)
                .checked_div(tick)
                .unwrap_or(0);
            ticks.saturating_add(1).saturating_mul(tick)
        } else {
            scaled
        };
        self.bound(delay)
    }

    /// A quantile times the configured multiplier, saturating.
    #[inline]
    pub(crate) fn scale(&self, quantile_ns: u64) -> u64 {
        let permille = self.delay_multiplier_permille;
        if permille == 1_000 {
            return quantile_ns;
        }
        // u64 × u32 fits u128; divided without a 128-bit divide (inline
        // kilobytes on 32-bit targets), saturating past u64.
        let scaled = u128::from(quantile_ns).wrapping_mul(u128::from(permille));
        crate::wide::div_wide((scaled >> 64) as u64, scaled as u64, 1_000)
    }

    /// How far down windows must key samples apart: to 1 µs, or to the
    /// largest quantile the multiplier takes to `min_delay_ns` or below
    /// (every delay from a shorter one is the minimum anyway). A window
    /// whose buckets stop above it is refused ([`ConfigError::KeyRange`]).
    pub(crate) fn key_floor_needed(&self) -> u64 {
        let permille = u64::from(self.delay_multiplier_permille);
        let lifted = if permille == 1_000 {
            self.min_delay_ns
        } else {
            // The largest `v` with ⌊v · permille / 1000⌋ ≤ min_delay_ns:
            // ⌊(1000 · (min_delay_ns + 1) − 1) / permille⌋ (permille ≥ 1:
            // validated), saturating past `u64`; in 128 bits, divided
            // without a 128-bit divide (as `scale`).
            let top = (u128::from(self.min_delay_ns).wrapping_add(1))
                .wrapping_mul(1_000)
                .wrapping_sub(1); // below 2⁷⁴
            crate::wide::div_wide((top >> 64) as u64, top as u64, permille.max(1))
        };
        lifted.max(MAX_KEY_FLOOR_NS)
    }
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A configuration [`HedgeConfig::validate`] rejects, or (for
/// [`KeyRange`](Self::KeyRange)) a hedger's construction does.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// The quantile is not strictly between 0 and 1.
    Quantile(f64),
    /// The delay multiplier is 0, which would hedge every request at once.
    ZeroMultiplier,
    /// The minimum delay exceeds the maximum.
    DelayBounds {
        /// The minimum given.
        min_ns: u64,
        /// The maximum given.
        max_ns: u64,
    },
    /// `min_samples` is 0, which would trust an empty window.
    ZeroMinSamples,
    /// The rotation period is 0.
    ZeroPeriod,
    /// `rotation_samples` is 0, which would rotate on every sample.
    ZeroRotationSamples,
    /// `max_sample_ns` is 0, which would refuse every sample.
    ZeroMaxSample,
    /// `in_flight_lease_ns` is 0, which would forget hedges at once.
    ZeroLease,
    /// The relative accuracy is not in
    /// `[`[`MIN_RELATIVE_ACCURACY`](crate::mapping::MIN_RELATIVE_ACCURACY)`, 1)`.
    RelativeAccuracy(f64),
    /// More extra attempts than [`MAX_HEDGES`].
    TooManyHedges(u8),
    /// An in-flight cap of 0; disable hedging with `max_hedges(0)` instead.
    ZeroInFlight,
    /// A deadline of 0 would give up every request at once.
    ZeroDeadline,
    /// A clock tick of 0 ns: an exact clock's is 1.
    ZeroTick,
    /// A minimum delay above the longest real latency (`max_sample_ns`):
    /// every answer would come before any hedge could go out. Lower the
    /// minimum delay or raise `max_sample_ns`. Checked only when hedging
    /// is on (`max_hedges` above 0): otherwise no delay is ever used.
    MinDelayAboveMaxSample {
        /// The minimum delay.
        min_delay_ns: u64,
        /// The longest latency the hedger takes for real.
        max_sample_ns: u64,
    },
    /// A retry throttle of 1 or 2 tokens: a failure's own token takes the
    /// balance to half or below, so no failure would ever be retried. Use
    /// 0 for no throttling, or 3 and up.
    RetryThrottle(u16),
    /// The windows' buckets, as many as the store holds (1 024 a side in a
    /// [`SharedHedger`](super::SharedHedger); `N` for a
    /// [`Hedger`](super::Hedger) over `CollapsingLowestStore<N>`), cannot
    /// reach from `max_sample_ns` down to both 1 µs and what `min_delay_ns`
    /// lets the delay go down to: they reach `floor_ns` only. Shorter
    /// answers would share the lowest bucket (or, in a `Hedger`, one long
    /// answer would fold the short ones into it) and delays below it would
    /// be guesses: with 64 buckets, one 2 s answer among 38 ms ones took
    /// the delay to 13 times the p90. Raise `relative_accuracy`, lower
    /// `max_sample_ns`, raise `min_delay_ns`, or give the store more
    /// buckets (see [`SharedHedger::key_floor_ns`](super::SharedHedger::key_floor_ns)
    /// and [`Hedger::key_floor_ns`](super::Hedger::key_floor_ns)).
    KeyRange {
        /// The smallest sample the windows key apart from the lowest
        /// bucket.
        floor_ns: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Quantile(q) => write!(f, "hedge quantile {q} is not in (0, 1); 0.9 hedges after the p90"),
            Self::ZeroMultiplier => f.write_str("the delay multiplier is 0; use 1000 for × 1.0"),
            Self::DelayBounds { min_ns, max_ns } => write!(
                f,
                "min delay {min_ns} ns exceeds max delay {max_ns} ns; raise the max or lower the min"
            ),
            Self::ZeroMinSamples => f.write_str("min_samples is 0; trust the window only after e.g. 20 samples"),
            Self::ZeroPeriod => f.write_str("rotation period is 0; use e.g. 30 s"),
            Self::ZeroRotationSamples => f.write_str("rotation_samples is 0; leave it unset for the quantile's default"),
            Self::ZeroMaxSample => f.write_str("max_sample_ns is 0; use the longest latency that can be real, e.g. 10 min"),
            Self::ZeroTick => f.write_str("clock_tick_ns is 0; an exact nanosecond clock's is 1, a 1 ms tick's 1000000"),
            Self::ZeroLease => f.write_str("in_flight_lease_ns is 0; use at least the longest attempt, e.g. 10 s"),
            Self::RelativeAccuracy(a) => {
                write!(f, "relative accuracy {a} is not in [{MIN_RELATIVE_ACCURACY:e}, 1); use 0.01")
            }
            Self::TooManyHedges(n) => write!(f, "{n} hedges per request exceeds the maximum of {MAX_HEDGES}"),
            Self::ZeroInFlight => f.write_str(
                "max_hedges_in_flight is 0; disable hedging with max_hedges(0), or allow at least 1",
            ),
            Self::ZeroDeadline => f.write_str("the request deadline is 0 ns; give a positive timeout or none"),
            Self::RetryThrottle(n) => write!(
                f,
                "a retry throttle of {n} tokens would throttle every retry; use 0 for none, or 3 and up (e.g. 20)"
            ),
            Self::MinDelayAboveMaxSample {
                min_delay_ns,
                max_sample_ns,
            } => write!(
                f,
                "min_delay_ns {min_delay_ns} is above max_sample_ns {max_sample_ns}: no hedge could ever go out; lower min_delay_ns or raise max_sample_ns"
            ),
            Self::KeyRange { floor_ns } => write!(
                f,
                "the windows' buckets reach from max_sample_ns down to {floor_ns} ns only; raise relative_accuracy, lower max_sample_ns, raise min_delay_ns to at least that, or give the store more buckets"
            ),
        }
    }
}

impl core::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The floor a window needs is the largest one the rule takes:
        /// down to 1 µs, or to a quantile the multiplier keeps at or below
        /// the minimum delay.
        #[test]
        fn the_needed_floor_is_the_rule(
            min_delay in prop_oneof![0u64..10_000_000, any::<u64>()],
            permille in 1u32..100_000,
            floor in prop_oneof![0u64..100_000_000, any::<u64>()],
        ) {
            let config = HedgeConfig::DEFAULT
                .min_delay_ns(min_delay)
                .delay_multiplier_permille(permille);
            let refused = floor > MAX_KEY_FLOOR_NS && config.scale(floor) > min_delay;
            prop_assert_eq!(floor > config.key_floor_needed(), refused);
        }
    }
}
