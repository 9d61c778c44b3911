//! A rotating dual window of sketches: the latency estimate follows a
//! changing backend.
//!
//! Two halves, *current* and *previous*, each a pair of sketches — one of
//! exact samples, one of censored samples (an attempt cancelled at elapsed
//! `t`: its latency is at least `t`) — queried as one with Kaplan–Meier's
//! product-limit estimator, so the estimate forgets old regimes and is not
//! biased by cancelled attempts.
//!
//! # Rotation
//! The current half becomes the previous one (and the old previous half is
//! dropped) when either
//! * it holds [`Rotation::max_samples`] answers (exact samples, however
//!   many were censored beside them): at high rates the window follows a
//!   change within two such batches, in seconds, and a half never leaves
//!   with fewer answers than the `min_samples` below it is raised to; or
//! * [`Rotation::period_ns`] has passed since the last rotation *and* it
//!   holds at least [`Rotation::min_samples`]: at low rates neither half is
//!   ever left nearly empty. A hedger asks for enough answers to estimate
//!   its quantile ([`Rotation::answers_to_estimate`]: 100 at p90, 1 000 at
//!   p99), so at low rates a half spans more than a period and a change
//!   takes up to two such halves to follow.
//!
//! A timestamp two periods or more after the window's time (see *Time*)
//! empties both halves: after an idle gap the caller is back in cold start
//! and gets `None`, never a made-up number. So a client stays warm only if
//! no two of its requests are two periods apart: with requests evenly
//! spaced, one a period is enough; with random (Poisson) arrivals at `n`
//! requests a period on average, a gap that long comes once in `e^{2n}`
//! requests (one in 400 at 3 a period, one in 7 at 1), and each costs
//! `min_samples` answers of cold start. Below a few requests a period,
//! lengthen the period.
//!
//! # Time
//! Timestamps are the caller's monotonic nanoseconds, possibly from threads
//! that read the clock a little apart, or from a clock that steps. The
//! window keeps its own time: the latest timestamp it has taken, which
//! moves back only when it takes a clock stepped back for good (the last
//! case below). Every sample is recorded, whatever its timestamp `now`;
//! `now` moves the window's time and the rotation period as follows.
//! * **Later** than the window's time by less than two periods: `now`
//!   becomes the window's time.
//! * **Later by two periods or more**: an idle gap (a clock jumped ahead
//!   looks the same): both halves are emptied, and the window's time and
//!   the period start at `now`. The window refills after `min_samples`
//!   answers.
//! * **At or behind** the window's time by less than two periods (a thread
//!   whose clock lags, a clock stepped back a little): neither the
//!   window's time nor the period's start moves. A clock stepped back for
//!   good by less than two periods is taken once it passes the window's
//!   time again; rotation on time waits for it, so the next one comes at
//!   most the step late (rotation on count does not wait).
//! * **Stale**, two periods or more behind: neither moves, and the window
//!   does not rotate on time — until a run of at least
//!   [`STALE_RUN`](LatencyWindow::STALE_RUN) (16) distinct stale
//!   timestamps (repeats of one count once) spanning more than two periods
//!   of their own clock, with no timestamp between them that moves the
//!   window's time: its clock has then been silent for as long as makes
//!   an idle gap. Then the clock was stepped back for good: the window's
//!   time becomes the last of them and the period restarts there, so idle
//!   gaps and rotation follow the new clock. A shorter run — a clock that
//!   steps back and returns, threads whose clocks lag (by any amount, as
//!   many as there are) taking turns shorter than two periods with one on
//!   the window's clock — changes neither. Until a run completes, the
//!   samples are recorded and the window rotates on count; idle gaps on
//!   the new clock go unseen and it does not rotate on time, which keeps
//!   the old estimate a little longer, never a made-up one. A turn of two
//!   periods or more with the window's clock silent takes the lagging
//!   clock; the window's clock, back, is then two periods ahead: an idle
//!   gap, as it would be had nothing been recorded meanwhile.
//!
//! Rotation on time compares `now` with the period's start, which moves
//! only at a rotation (to the window's time), the first timestamp, an idle
//! gap and a completed stale run; never because a timestamp is behind it.
//! With a period of 2⁶³ ns or more two periods do not fit in a `u64`: no
//! gap is idle and no timestamp stale. Reads
//! ([`quantile_at`](LatencyWindow::quantile_at),
//! [`count_at`](LatencyWindow::count_at),
//! [`is_idle_at`](LatencyWindow::is_idle_at)) measure idle gaps from the
//! same window's time and never change the window, so one bad timestamp
//! passed to a read changes nothing.
//!
//! # Cost
//! The window keeps a cached estimate of one quantile (the hedge delay),
//! refreshed as samples arrive — whenever the samples added since the last
//! refresh reach 1/32 of the window's count, and at every rotation — so
//! reading it is a field load. A refresh is one pass over the occupied
//! buckets of the four sketches, never over the empty keys between them.
//!
//! # Integers only
//! Latencies are recorded as `u64` nanoseconds through the mapping's
//! [`index_u64`](crate::IndexMapping::index_u64)
//! ([`DDSketch::add_u64`]), and the refresh runs Kaplan–Meier in integer
//! and fixed-point arithmetic (survival in units of 2⁻⁶³, the quantile
//! level decoded once from its bits), answering whole nanoseconds through
//! [`value_u64`](crate::IndexMapping::value_u64). With
//! [`LogLinearMapping`](crate::LogLinearMapping) both are integer
//! operations: recording and refreshing do no float arithmetic at all,
//! which on a Cortex-M4F (no double-precision FPU) keeps the software
//! `f64` routines off the path. With the default
//! [`CubicMapping`] the key and the answer's representative are still
//! computed in `f64`, and the estimate is the one the float estimator
//! gave, rounded down to whole nanoseconds (the integer product-limit is
//! exact up to 2⁻⁶³ per censored bucket; see `survival`'s docs).
//!
//! Rounding down costs up to 1 ns on top of α: an answer is within
//! `α·x + 1 ns` of the sample `x` it stands for (the exact 2 ns of
//! `{1, 2, 100}`'s median reads 1 ns at α = 1 %, the float representative
//! being 1.98), which matters only below a few microseconds; no whole
//! number can be within α of every integer in some buckets (at α = 2.5 %,
//! a bucket holding 100 to 105 ns would need 102.375 to 102.5).

pub(crate) mod survival;

use crate::mapping::{CubicMapping, IndexMapping};
use crate::sketch::{DDSketch, SketchError};
use crate::store::{CollapsingLowestStore, NoStore, Store};
use survival::{Level, Pair};

/// Nanoseconds in a second.
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Refresh the cached quantile once new samples reach `count / REFRESH_SHARE`.
pub(crate) const REFRESH_SHARE: u64 = 32;

/// The current half's count (answers and censored samples) at which a
/// window refreshed with `current_count` samples in its current half, of
/// which `current_exact` answers, and `count` in all, next refreshes:
/// `max(1, count / REFRESH_SHARE)` samples on, or at the first sample that
/// could complete the rotation on count (`max_samples` answers) if that
/// comes first. Both windows (this one and the shared hedger's) keep this
/// schedule, so that they estimate alike.
#[inline]
pub(crate) fn refresh_after(
    current_count: u64,
    current_exact: u64,
    count: u64,
    rotation: &Rotation,
) -> u64 {
    let step = (count / REFRESH_SHARE).max(1);
    let to_rotation = rotation.max_samples.saturating_sub(current_exact).max(1);
    current_count.saturating_add(step.min(to_rotation))
}

/// A gap longer than this is an idle gap: two periods less 1 ns, or
/// `u64::MAX` when two periods do not fit in a `u64` (then no gap is one:
/// saturating would make a gap of `u64::MAX` idle). Both windows use it.
#[inline]
pub(crate) fn idle_after(period_ns: u64) -> u64 {
    period_ns
        .checked_mul(2)
        .map_or(u64::MAX, |two| two.saturating_sub(1))
}

/// When a [`LatencyWindow`] rotates; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rotation {
    /// Rotate once a timestamp is this much after the current period's
    /// start, the last rotation (and the current half holds
    /// `min_samples`). Two periods without any timestamp empty the window.
    /// At least 1 ns. See *Time* in the module docs.
    pub period_ns: u64,
    /// Exact samples (answers) the current half must hold before time alone
    /// rotates it.
    pub min_samples: u64,
    /// Rotate as soon as the current half holds this many answers (exact
    /// samples; censored ones beside them do not count), whatever the time
    /// (`u64::MAX`: never on count alone).
    pub max_samples: u64,
}

impl Rotation {
    /// Rotation on time alone, every `period_ns`.
    pub const fn every(period_ns: u64) -> Self {
        Self {
            period_ns,
            min_samples: 0,
            max_samples: u64::MAX,
        }
    }

    /// Samples a half must hold to estimate quantile `q` from its own tail:
    /// about a hundred samples above the quantile, and at least 1 000, i.e.
    /// `max(1000, ⌈100 / (1 − q)⌉)` (1 000 at p90, 10 000 at p99). Used
    /// as [`max_samples`](Self::max_samples) by the hedger (raised to its
    /// `min_samples` if that is more: see
    /// [`HedgeConfig::rotation_samples`](crate::hedge::HedgeConfig::rotation_samples)).
    #[inline]
    pub fn samples_for_quantile(q: f64) -> u64 {
        Self::above_quantile(q, 100).max(1_000)
    }

    /// Answers a half must hold before it rotates on time, to estimate
    /// quantile `q` without a bias a hedger would feel: about ten above the
    /// quantile, `⌈10 / (1 − q)⌉` (20 at p50, 100 at p90, 1 000 at p99).
    /// Used as [`min_samples`](Self::min_samples) by the hedger (raised to
    /// its own `min_samples` if that is more, lowered to `max_samples` if
    /// that is less).
    ///
    /// Why: the lower quantile of `m` answers is the `r`-th smallest
    /// (from 0), `r = ⌊q(m − 1)⌋`, and a new draw exceeds it with
    /// probability `(m − r)/(m + 1)`, at most `(1 − q) + 2q/(m + 1)`:
    /// within a fifth of `1 − q` from `m = 10 / (1 − q)` on, but 1.43
    /// times `1 − q` at p90 with 20 answers (3 in 21).
    #[inline]
    pub fn answers_to_estimate(q: f64) -> u64 {
        Self::above_quantile(q, 10)
    }

    /// `⌈above / (1 − q)⌉`: answers that hold about `above` beyond the
    /// quantile (`u64::MAX` for `q` of 1 or more, or NaN). Inlined, so that
    /// a constant configuration folds it (no soft-float code on targets
    /// without double precision).
    #[inline(always)]
    fn above_quantile(q: f64, above: u32) -> u64 {
        let tail = 1.0 - q;
        if tail.is_nan() || tail <= 0.0 {
            return u64::MAX;
        }
        // The nudge keeps 1 − 0.9 = 0.09999999999999998 from asking for
        // 1 001. Rounded up by hand, not `libm::ceil`: plain float
        // operations fold for a constant `q`. `as` saturates.
        let x = f64::from(above) / tail * (1.0 - 1e-12);
        let n = x as u64;
        if (n as f64) < x {
            n.saturating_add(1)
        } else {
            n
        }
    }
}

/// One half of the window: exact samples and censored ones, bucketed alike.
#[derive(Clone, Debug)]
struct Half<M: IndexMapping, S: Store> {
    exact: DDSketch<M, S, NoStore>,
    censored: DDSketch<M, S, NoStore>,
}

impl<M: IndexMapping, S: Store> Half<M, S> {
    fn new(mapping: M) -> Self {
        Self {
            exact: DDSketch::with_mapping(mapping),
            censored: DDSketch::with_mapping(mapping),
        }
    }

    fn clear(&mut self) {
        self.exact.clear();
        self.censored.clear();
    }

    fn pair(&self) -> Pair<'_, DDSketch<M, S, NoStore>> {
        Pair {
            exact: &self.exact,
            censored: &self.censored,
        }
    }
}

/// Two halves of sketches rotated by caller timestamps and sample counts,
/// queried as one.
///
/// ```
/// use tailguard::window::LatencyWindow;
///
/// let mut w: LatencyWindow = LatencyWindow::new(0.01, 30_000_000_000, 0.9)?;
/// for i in 0..100u64 {
///     w.record(i * 1_000_000, 1_000_000 + i * 10_000)?; // now, latency (ns)
/// }
/// let p90 = w.cached_quantile().expect("warm");          // a field read
/// assert!((p90 as f64 - 1_890_000.0).abs() < 0.011 * 1_890_000.0);
/// // An attempt cancelled after 3 ms: its latency is at least 3 ms.
/// w.record_censored(100_000_000, 3_000_000)?;
/// # Ok::<(), tailguard::SketchError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LatencyWindow<M: IndexMapping = CubicMapping, S: Store = CollapsingLowestStore<1024>> {
    current: Half<M, S>,
    previous: Half<M, S>,
    rotation: Rotation,
    /// A gap longer than this is idle: two periods less 1 ns, or
    /// `u64::MAX` (no gap) when two periods do not fit in a `u64`. Fixed
    /// with the rotation: read on every sample and every idleness check.
    idle_after_ns: u64,
    /// When the current half began; `None` before the first timestamp.
    /// Set at the first timestamp, at rotation (to the window's time), at
    /// an idle gap's restart and when a stale run completes; never by a
    /// timestamp behind it.
    current_start: Option<u64>,
    /// The window's time: the latest non-stale timestamp seen (or the
    /// timestamp that ended an idle gap or completed a stale run). Idle
    /// gaps and stale timestamps are measured from it.
    time: u64,
    /// Distinct stale timestamps (two periods or more behind `time`;
    /// repeats of one count once) since `time` last moved, the first and
    /// the last of them, and the `time` they are behind: at
    /// [`STALE_RUN`](Self::STALE_RUN) of them spanning more than two
    /// periods the last becomes the window's time.
    stale_run: u32,
    stale_since: u64,
    stale_at: u64,
    stale_of: u64,
    quantile: Level,
    /// The cached estimate, whole nanoseconds.
    cached_ns: Option<u64>,
    rotations: u64,
    /// Samples (exact and censored) in the current half, and exact ones;
    /// a sample adds to these only, and the checks it makes read them.
    current_count: u64,
    current_exact: u64,
    /// The same counts of the previous half, fixed at rotation.
    previous_count: u64,
    previous_exact: u64,
    /// At this `current_count`, refresh (or rotate, at `max_samples`): one
    /// comparison a sample. See [`refresh`](Self::refresh).
    next_check: u64,
}

impl<M: IndexMapping + crate::FromRelativeAccuracy, S: Store> LatencyWindow<M, S> {
    /// A window with relative accuracy α, rotating every `period_ns` (on
    /// time alone; see [`with_rotation`](Self::with_rotation)), that caches
    /// quantile `quantile`.
    ///
    /// # Errors
    /// [`SketchError::Mapping`] for a bad α;
    /// [`SketchError::InvalidQuantile`] if `quantile` is not in `[0, 1]`.
    /// A period of 0 is raised to 1 ns.
    pub fn new(relative_accuracy: f64, period_ns: u64, quantile: f64) -> Result<Self, SketchError> {
        Self::with_rotation(
            M::from_relative_accuracy(relative_accuracy)?,
            Rotation::every(period_ns),
            quantile,
        )
    }
}

impl<M: IndexMapping, S: Store> LatencyWindow<M, S> {
    /// A window over a given mapping, rotating every `period_ns`; see
    /// [`new`](Self::new).
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] if `quantile` is not in `[0, 1]`.
    pub fn with_mapping(mapping: M, period_ns: u64, quantile: f64) -> Result<Self, SketchError> {
        Self::with_rotation(mapping, Rotation::every(period_ns), quantile)
    }

    /// A window over a given mapping and rotation rule. A period of 0 is
    /// raised to 1 ns.
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] if `quantile` is not in `[0, 1]`.
    pub fn with_rotation(
        mapping: M,
        rotation: Rotation,
        quantile: f64,
    ) -> Result<Self, SketchError> {
        let Some(level) = Level::new(quantile) else {
            return Err(SketchError::InvalidQuantile(quantile));
        };
        let period_ns = rotation.period_ns.max(1);
        Ok(Self {
            current: Half::new(mapping),
            previous: Half::new(mapping),
            rotation: Rotation {
                period_ns,
                ..rotation
            },
            idle_after_ns: idle_after(period_ns),
            current_start: None,
            time: 0,
            stale_run: 0,
            stale_since: 0,
            stale_at: 0,
            stale_of: 0,
            quantile: level,
            cached_ns: None,
            rotations: 0,
            current_count: 0,
            current_exact: 0,
            previous_count: 0,
            previous_exact: 0,
            next_check: 1,
        })
    }

    /// The default rotation period, 30 s.
    pub const DEFAULT_PERIOD_NS: u64 = 30 * NANOS_PER_SEC;

    /// Distinct stale timestamps (two periods or more behind the window's
    /// time), with none between them that moves the window's time, after
    /// which the last of them becomes the window's time and the period
    /// restarts there — once they also span more than two periods: the
    /// clock was stepped back for good. A shorter run (a clock that steps
    /// back and returns, a thread whose clock is stale taking turns with
    /// others) changes neither. See *Time* in the module docs.
    pub const STALE_RUN: u32 = 16;

    /// Brings the window to time `now` (see *Time* in the module docs):
    /// * the first timestamp starts the window's time and the period;
    /// * one later than the window's time becomes it — unless it is two
    ///   periods or more later, an idle gap: the window is emptied (cold)
    ///   and its time and period start there;
    /// * one behind by less than two periods changes neither the window's
    ///   time nor the period's start;
    /// * a stale one, two periods or more behind, changes neither until it
    ///   completes a run of [`STALE_RUN`](Self::STALE_RUN) spanning more
    ///   than two periods: then the window's time and the period start at
    ///   `now`.
    ///
    /// Then, unless `now` is stale, the window rotates if `now` is a
    /// period or more after the period's start and the current half holds
    /// `min_samples` answers.
    #[inline]
    pub fn advance(&mut self, now: u64) {
        let Some(start) = self.current_start else {
            self.current_start = Some(now);
            self.time = now;
            return;
        };
        let time = self.time;
        // Each difference is taken where it is positive: no wrap.
        if now > time {
            if now.wrapping_sub(time) > self.idle_after_ns {
                self.restart_after_idle(now);
                return;
            }
            self.time = now;
        } else if time.wrapping_sub(now) > self.idle_after_ns {
            self.note_stale(now, time);
            return;
        }
        if now.saturating_sub(start) >= self.rotation.period_ns
            && self.current_exact >= self.rotation.min_samples
        {
            self.rotate();
        }
    }

    /// After an idle gap: empty, cold, time and period starting at `now`.
    #[cold]
    #[inline(never)]
    fn restart_after_idle(&mut self, now: u64) {
        self.empty();
        self.time = now;
        self.current_start = Some(now);
        self.refresh();
    }

    /// A stale timestamp, two periods or more behind the window's time
    /// `time`: counted (a repeat of the last one once); the one that makes
    /// [`STALE_RUN`](Self::STALE_RUN) since `time` last moved, more than
    /// two periods after the first of them, becomes the window's time and
    /// the period's start.
    #[cold]
    #[inline(never)]
    fn note_stale(&mut self, now: u64, time: u64) {
        if time != self.stale_of {
            // The window's time moved since the last one: a new run.
            self.stale_of = time;
            self.stale_run = 0;
        }
        if now != self.stale_at || self.stale_run == 0 {
            if self.stale_run == 0 {
                self.stale_since = now;
            }
            self.stale_run = self.stale_run.saturating_add(1);
            self.stale_at = now;
        }
        // Two periods on the new clock with the window's clock silent all
        // along: by then that clock would read as an idle gap anyway. A
        // thread whose clock lags takes turns with the others far more
        // often, however many clocks take turns.
        if self.stale_run >= Self::STALE_RUN
            && now.saturating_sub(self.stale_since) > self.idle_after_ns
        {
            // The clock was stepped back for good.
            self.stale_run = 0;
            self.time = now;
            self.current_start = Some(now);
        }
    }

    /// The current half becomes the previous one; the new one starts at
    /// the window's time.
    fn rotate(&mut self) {
        core::mem::swap(&mut self.current, &mut self.previous);
        self.current.clear();
        self.previous_count = self.current_count;
        self.current_count = 0;
        self.previous_exact = self.current_exact;
        self.current_exact = 0;
        self.current_start = Some(self.time);
        self.rotations = self.rotations.saturating_add(1);
        self.refresh();
    }

    /// Records one latency sample (nanoseconds) at time `now`, through
    /// [`DDSketch::add_u64`]: 0 goes to the zero bucket.
    ///
    /// Each half is a fixed-capacity sketch: samples that span more keys
    /// than its store holds collapse its lowest buckets (see
    /// [`CollapsingLowestStore`]), so one sample of a year among
    /// milliseconds moves the low quantiles of that half (a p90 of 1 ms
    /// read 50 ms after one such sample). The hedgers refuse samples above
    /// [`HedgeConfig::max_sample_ns`](crate::hedge::HedgeConfig::max_sample_ns)
    /// for this reason; bound what you record the same way.
    ///
    /// # Errors
    /// Never for latencies up to `u64::MAX` with the crate's mappings at
    /// offset 0; the sketch's error otherwise, with the sample not
    /// recorded. Its timestamp still counts, as every timestamp does: it
    /// may rotate the window, or empty it after an idle gap.
    // Always inlined on 64-bit targets, where a call returns the `Result`
    // through memory; on 32-bit ones, where flash is scarce, at the
    // compiler's choice.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    pub fn record(&mut self, now: u64, latency_ns: u64) -> Result<(), SketchError> {
        self.advance(now);
        self.current.exact.add_u64(latency_ns)?;
        // Cannot overflow: one sample at a time (2⁶⁴ calls are centuries
        // at one a nanosecond), and rotation only moves counts down.
        self.current_exact = self.current_exact.wrapping_add(1);
        self.after_sample();
        Ok(())
    }

    /// Records one censored sample at time `now`: an attempt cancelled after
    /// `elapsed_ns`, whose latency is therefore at least that.
    ///
    /// Censored samples have a sketch of their own in each half, which
    /// collapses on its own: one cancellation far above every answer can
    /// fold the censored side's low keys while the answers keep theirs,
    /// and the estimate then moves although it should not (answers of
    /// 1–100 µs beside cancellations at 5 µs: a median of 52.2 µs with one
    /// more cancelled at 1 s, 71.7 µs with it at 10 h). Bound what you record,
    /// as the hedgers do with
    /// [`HedgeConfig::max_sample_ns`](crate::hedge::HedgeConfig::max_sample_ns).
    ///
    /// # Errors
    /// As [`record`](Self::record).
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    #[cfg_attr(not(target_pointer_width = "64"), inline)]
    pub fn record_censored(&mut self, now: u64, elapsed_ns: u64) -> Result<(), SketchError> {
        self.advance(now);
        self.current.censored.add_u64(elapsed_ns)?;
        self.after_sample();
        Ok(())
    }

    #[inline]
    fn after_sample(&mut self) {
        // As in `record`: one sample at a time, so this cannot overflow.
        self.current_count = self.current_count.wrapping_add(1);
        if self.current_count >= self.next_check {
            self.checkpoint();
        }
    }

    /// Every `count / 32` samples: rotate on count (the current half holds
    /// `max_samples` answers), or refresh.
    #[inline(never)]
    fn checkpoint(&mut self) {
        if self.current_exact >= self.rotation.max_samples {
            self.rotate();
        } else {
            self.refresh();
        }
    }

    /// Recomputes the cached quantile from both halves (integer
    /// arithmetic; see the module docs). The next refresh comes
    /// `max(1, count / 32)` samples later, or at the rotation on count if
    /// that is sooner.
    pub fn refresh(&mut self) {
        self.cached_ns =
            survival::quantile([self.current.pair(), self.previous.pair()], &self.quantile);
        self.next_check = refresh_after(
            self.current_count,
            self.current_exact,
            self.count(),
            &self.rotation,
        );
    }

    /// The cached quantile in nanoseconds (rounded down, saturating), `None`
    /// while the window is empty. O(1). It does not look at the time: see
    /// [`quantile_at`](Self::quantile_at).
    #[inline]
    pub fn cached_quantile(&self) -> Option<u64> {
        self.cached_ns
    }

    /// The quantile the window caches.
    pub fn cached_level(&self) -> f64 {
        self.quantile.get()
    }

    /// The cached quantile as of `now`: `None` if the window is empty or
    /// would be emptied at `now` (two periods or more after the window's
    /// time). O(1); changes nothing.
    #[inline]
    pub fn quantile_at(&self, now: u64) -> Option<u64> {
        if self.is_idle_at(now) {
            return None;
        }
        self.cached_quantile()
    }

    /// Samples (exact and censored) as of `now`: 0 after an idle gap.
    #[inline]
    pub fn count_at(&self, now: u64) -> u64 {
        if self.is_idle_at(now) {
            0
        } else {
            self.count()
        }
    }

    /// Whether the window would be emptied at `now`: two periods or more
    /// after the window's time (see *Time* in the module docs).
    #[inline]
    pub fn is_idle_at(&self, now: u64) -> bool {
        self.current_start.is_some() && now.saturating_sub(self.time) > self.idle_after_ns
    }

    /// A fresh product-limit estimate of any quantile over both halves, in
    /// nanoseconds rounded down, as [`refresh`](Self::refresh) computes it
    /// (a pass over the occupied buckets; no copy, no allocation).
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] for a bad `q`.
    pub fn quantile(&self, q: f64) -> Result<Option<u64>, SketchError> {
        let level = Level::new(q).ok_or(SketchError::InvalidQuantile(q))?;
        Ok(survival::quantile(
            [self.current.pair(), self.previous.pair()],
            &level,
        ))
    }

    /// Samples in both halves, exact and censored. O(1).
    #[inline]
    pub fn count(&self) -> u64 {
        // Two counts of samples taken one at a time: no overflow.
        self.current_count.wrapping_add(self.previous_count)
    }

    /// Exact samples (answers) in both halves. O(1).
    #[inline]
    pub fn exact_count(&self) -> u64 {
        self.current_exact.wrapping_add(self.previous_exact)
    }

    /// Censored samples in both halves.
    pub fn censored_count(&self) -> u64 {
        self.current
            .censored
            .count()
            .saturating_add(self.previous.censored.count())
    }

    /// Rotations so far (not counting idle-gap emptying).
    pub fn rotations(&self) -> u64 {
        self.rotations
    }

    /// The rotation rule.
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// The rotation period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.rotation.period_ns
    }

    /// The exact samples of the half that receives new samples.
    pub fn current(&self) -> &DDSketch<M, S, NoStore> {
        &self.current.exact
    }

    /// The exact samples of the half from the period before.
    pub fn previous(&self) -> &DDSketch<M, S, NoStore> {
        &self.previous.exact
    }

    /// The censored samples of the current half.
    pub fn current_censored(&self) -> &DDSketch<M, S, NoStore> {
        &self.current.censored
    }

    /// The censored samples of the previous half.
    pub fn previous_censored(&self) -> &DDSketch<M, S, NoStore> {
        &self.previous.censored
    }

    /// Empties both halves and their counts.
    fn empty(&mut self) {
        self.current.clear();
        self.previous.clear();
        self.current_count = 0;
        self.previous_count = 0;
        self.current_exact = 0;
        self.previous_exact = 0;
    }

    /// Empties both halves and forgets the time.
    pub fn clear(&mut self) {
        self.empty();
        self.current_start = None;
        self.time = 0;
        self.stale_run = 0;
        self.cached_ns = None;
        self.next_check = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented counts, exactly (the rounding up by hand, and the
    /// nudge that keeps `1 − 0.9` from asking for one more), and the ends.
    #[test]
    fn rotation_counts_for_a_quantile() {
        let cases = [
            (0.0, 10, 1_000),
            (0.5, 20, 1_000),
            (0.9, 100, 1_000),
            (0.95, 200, 2_000),
            (0.99, 1_000, 10_000),
            (0.999, 10_000, 100_000),
            (0.93, 143, 1_429),
        ];
        for (q, answers, samples) in cases {
            assert_eq!(Rotation::answers_to_estimate(q), answers, "p{q}");
            assert_eq!(Rotation::samples_for_quantile(q), samples, "p{q}");
        }
        for q in [1.0, 1.5, f64::NAN] {
            assert_eq!(Rotation::answers_to_estimate(q), u64::MAX);
            assert_eq!(Rotation::samples_for_quantile(q), u64::MAX);
        }
        // Below 0 the tail exceeds 1: fewer than `above`, never 0.
        assert_eq!(Rotation::answers_to_estimate(-1.0), 5);
    }

    const SEC: u64 = NANOS_PER_SEC;

    fn window() -> LatencyWindow {
        LatencyWindow::new(0.01, 10 * SEC, 0.5).unwrap()
    }

    #[test]
    fn rotation_forgets_after_two_periods() {
        let mut w = window();
        w.record(0, 100).unwrap();
        w.record(11 * SEC, 200).unwrap(); // one rotation: 100 is now previous
        assert_eq!(w.count(), 2);
        assert_eq!(w.previous().count(), 1);
        w.advance(21 * SEC); // second rotation: 100 falls out
        assert_eq!(w.count(), 1);
        w.advance(45 * SEC); // idle for > 2 periods: empty, cold
        assert_eq!(w.count(), 0);
        assert_eq!(w.cached_quantile(), None);
    }

    #[test]
    fn backwards_and_huge_jumps_are_survived() {
        let mut w = window();
        w.record(u64::MAX - 5, 100).unwrap();
        w.record(3, 100).unwrap(); // backwards: kept in the current half
        assert_eq!(w.count(), 2);
        // The stale 3 is the outlier: time "now" is still about u64::MAX.
        w.record(u64::MAX, 300).unwrap();
        assert_eq!(w.count(), 3);
        let mut w = window();
        w.record(0, 100).unwrap();
        w.record(u64::MAX, 100).unwrap(); // far future: old samples dropped
        assert_eq!(w.count(), 1);
    }

    #[test]
    fn no_gap_is_two_periods_of_half_the_clock_or_more() {
        for period in [1u64 << 63, u64::MAX] {
            let mut w: LatencyWindow = LatencyWindow::new(0.01, period, 0.5).unwrap();
            w.record(0, 100).unwrap();
            assert!(w.quantile_at(u64::MAX).is_some(), "{period}");
            w.advance(u64::MAX);
            assert_eq!(w.count(), 1, "{period}");
        }
        // Two periods of 2⁶³ − 1 ns fit: a gap of `u64::MAX` is idle.
        let mut w: LatencyWindow = LatencyWindow::new(0.01, (1 << 63) - 1, 0.5).unwrap();
        w.record(0, 100).unwrap();
        assert_eq!(w.quantile_at(u64::MAX), None);
        w.advance(u64::MAX);
        assert_eq!(w.count(), 0);
    }

    #[test]
    fn a_run_of_stale_timestamps_moves_time_only_when_it_is_long() {
        let run = u64::from(LatencyWindow::<CubicMapping>::STALE_RUN);
        // Long: sixteen timestamps spanning more than two periods (20 s).
        for (stale, gap) in [
            (1, 2 * SEC),
            (2, 2 * SEC),
            (run - 1, 2 * SEC),
            (run, 1),
            (run, 2 * SEC),
        ] {
            let mut w = window();
            let t = 7_200 * SEC;
            w.record(t, 100).unwrap();
            for i in 0..stale {
                // Two samples at each timestamp: a repeat counts once.
                w.record(t - 3_600 * SEC + i * gap, 100).unwrap();
                w.record(t - 3_600 * SEC + i * gap, 100).unwrap();
            }
            // Back to the true time: an idle gap only if the run took over.
            w.record(t + 1, 100).unwrap();
            let long = stale == run && gap > 1;
            let kept = if long { 1 } else { 2 * stale + 2 };
            assert_eq!(w.count(), kept, "a run of {stale}, {gap} ns apart");
        }
    }

    #[test]
    fn cache_tracks_a_shifting_backend() {
        let mut w = window();
        for i in 0..1000 {
            w.record(i, 1_000).unwrap();
        }
        let fast = w.cached_quantile().unwrap();
        assert!(fast.abs_diff(1_000) <= 10, "{fast}");
        for i in 0..3000 {
            w.record(10 * SEC + i, 9_000).unwrap();
        }
        let slow = w.cached_quantile().unwrap();
        assert!(slow.abs_diff(9_000) <= 90, "{slow}");
        // The cache equals a fresh query once refreshed.
        w.refresh();
        assert_eq!(w.cached_quantile(), w.quantile(0.5).unwrap());
    }

    #[test]
    fn a_clock_stepped_back_for_good_rotates_on_the_new_clock() {
        let mut w = window();
        let t = 7_200 * SEC;
        w.record(t, 100).unwrap();
        // One hour back, two seconds apart: stale, until the sixteenth (30 s
        // on, more than two periods), where the window's time and the
        // period restart.
        let back = t - 3_600 * SEC;
        for i in 0..16 {
            w.record(back + i * 2 * SEC, 200).unwrap();
            assert_eq!(w.rotations(), 0, "{i}");
            assert_eq!(w.is_idle_at(t), i == 15, "{i}");
        }
        let taken = back + 30 * SEC;
        assert!(!w.is_idle_at(taken + 20 * SEC - 1));
        // Rotation goes on from the new time, not an hour later.
        w.record(taken + 10 * SEC - 1, 300).unwrap();
        assert_eq!(w.rotations(), 0);
        w.record(taken + 11 * SEC, 300).unwrap();
        assert_eq!(w.rotations(), 1);
        w.record(taken + 22 * SEC, 400).unwrap();
        assert_eq!(w.rotations(), 2);
        assert_eq!(w.count(), 2);
    }

    #[test]
    fn a_clock_stepped_back_a_little_delays_rotation_by_the_step_at_most() {
        let mut w = window();
        let t = 1_000 * SEC;
        w.record(t, 100).unwrap();
        w.record(t + 5 * SEC, 100).unwrap();
        // Stepped back 15 s for good: the period's start stays at `t`, and
        // the window's time at `t + 5 s` until the new clock passes it.
        let mut clock = t - 10 * SEC;
        while clock < t + 10 * SEC {
            w.record(clock, 100).unwrap();
            assert_eq!(w.rotations(), 0, "{clock}");
            assert!(!w.is_idle_at(t + 5 * SEC + 20 * SEC - 1));
            clock += SEC;
        }
        // 20 s after the step (without it, 5 s after): 15 s late, the step.
        w.record(t + 10 * SEC, 100).unwrap();
        assert_eq!(w.rotations(), 1);
        assert_eq!(w.count(), 23);
        // A timestamp behind the period's start moves it no more.
        w.record(t + 5 * SEC, 100).unwrap();
        w.record(t + 19 * SEC, 100).unwrap();
        assert_eq!(w.rotations(), 1);
        w.record(t + 20 * SEC, 100).unwrap();
        assert_eq!(w.rotations(), 2);
    }

    #[test]
    fn rotates_on_samples_and_waits_for_min_samples() {
        let rotation = Rotation {
            period_ns: 10 * SEC,
            min_samples: 5,
            max_samples: 100,
        };
        let mapping = CubicMapping::new(0.01).unwrap();
        let mut w: LatencyWindow = LatencyWindow::with_rotation(mapping, rotation, 0.5).unwrap();
        for i in 0..250 {
            w.record(i, 1_000).unwrap();
        }
        assert_eq!(w.rotations(), 2, "on count, within a nanosecond range");
        assert_eq!(w.count(), 150);
        // A slow trickle: one sample every 9 s. Time alone rotates only once
        // the current half holds 5, so the window never runs dry.
        let mut w: LatencyWindow = LatencyWindow::with_rotation(mapping, rotation, 0.5).unwrap();
        for i in 0..100 {
            w.record(i * 9 * SEC, 1_000).unwrap();
            if i >= 5 {
                assert!(w.count() >= 5, "{i}: {}", w.count());
            }
        }
        // Reads never change the window; after two idle periods it reads cold.
        let last = 99 * 9 * SEC;
        assert!(w.quantile_at(last + 19 * SEC).is_some());
        assert_eq!(w.quantile_at(last + 20 * SEC), None);
        assert_eq!(w.count_at(last + 20 * SEC), 0);
        assert!(w.count() > 0);
    }

    #[test]
    fn censored_samples_enter_the_estimate_without_pulling_it_down() {
        let mut w = window();
        for i in 0..1000u64 {
            w.record(i, 1_000 + (i % 100) * 10).unwrap(); // 1000 ..= 1990
            w.record_censored(i, 5).unwrap(); // tiny: cancelled just after send
        }
        let median = w.quantile(0.5).unwrap().unwrap();
        // The exact lower median of the exact samples is 1490.
        assert!(median.abs_diff(1_490) <= 15, "{median}");
        assert_eq!(w.censored_count(), 1000);
    }

    #[test]
    fn the_estimate_walks_occupied_buckets_not_the_keys_between() {
        // At α = 1e-7, 1 ns and 10¹⁹ ns are 4·10⁸ keys apart: a walk over
        // the keys between the halves took seconds per estimate. A walk over
        // the occupied buckets reads a few passes over the stores at most.
        use crate::store::probe;
        let mut w: LatencyWindow = LatencyWindow::new(1e-7, 10 * SEC, 0.5).unwrap();
        w.record(0, 1).unwrap();
        w.record(11 * SEC, 10_000_000_000_000_000_000).unwrap(); // rotated
        assert_eq!(w.previous().count(), 1);
        for censored in [false, true] {
            if censored {
                w.record_censored(11 * SEC, 5).unwrap(); // the product-limit path
            }
            for q in 0..1_000 {
                probe::take();
                let v = w.quantile(f64::from(q) / 1_000.0).unwrap().unwrap();
                let reads = probe::take();
                assert!((1..=10_000_000_000_000_000_000).contains(&v), "{v}");
                assert!(reads <= 8 * 1_024, "q {q}: {reads} counters read");
            }
        }
    }

    #[test]
    fn rejects_bad_quantile() {
        assert!(LatencyWindow::<CubicMapping>::new(0.01, SEC, 1.5).is_err());
        assert!(LatencyWindow::<CubicMapping>::new(0.01, SEC, f64::NAN).is_err());
    }
}
