//! A rotating dual window of sketches: the latency estimate follows a
//! changing backend.
//!
//! Two sketches, *current* and *previous*, swap every `period` of caller
//! time; queries see the union of both, so the estimate always rests on
//! between one and two periods of samples and forgets older regimes. After
//! an idle gap of two periods or more both are empty again: the caller is
//! back in cold start and gets `None`, never a made-up number.
//!
//! The window keeps a cached estimate of one quantile (the hedge delay),
//! refreshed as samples arrive — whenever the samples added since the last
//! refresh reach 1/64 of the window's count, and at every rotation — so
//! reading it is a field load, while the amortised refresh costs a few
//! nanoseconds per sample.

use crate::mapping::{CubicMapping, IndexMapping};
use crate::sketch::{DDSketch, SketchError};
use crate::store::{CollapsingLowestStore, NoStore, Store};

/// Nanoseconds in a second.
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Refresh the cached quantile once new samples reach `count / REFRESH_SHARE`.
const REFRESH_SHARE: u64 = 64;

/// Two sketches rotated by caller timestamps, queried as one.
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
/// # Ok::<(), tailguard::SketchError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LatencyWindow<M: IndexMapping = CubicMapping, S: Store = CollapsingLowestStore<1024>> {
    current: DDSketch<M, S, NoStore>,
    previous: DDSketch<M, S, NoStore>,
    period_ns: u64,
    /// When the current period began; `None` before the first timestamp.
    current_start: Option<u64>,
    quantile: f64,
    cached: Option<f64>,
    since_refresh: u64,
}

impl<M: IndexMapping + crate::FromRelativeAccuracy, S: Store> LatencyWindow<M, S> {
    /// A window with relative accuracy α, rotating every `period_ns`, that
    /// caches quantile `quantile`.
    ///
    /// # Errors
    /// [`SketchError::Mapping`] for a bad α;
    /// [`SketchError::InvalidQuantile`] if `quantile` is not in `[0, 1]`.
    /// A period of 0 is raised to 1 ns.
    pub fn new(relative_accuracy: f64, period_ns: u64, quantile: f64) -> Result<Self, SketchError> {
        Self::with_mapping(
            M::from_relative_accuracy(relative_accuracy)?,
            period_ns,
            quantile,
        )
    }
}

impl<M: IndexMapping, S: Store> LatencyWindow<M, S> {
    /// A window over a given mapping; see [`new`](Self::new). A period of 0
    /// is raised to 1 ns.
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] if `quantile` is not in `[0, 1]`.
    pub fn with_mapping(mapping: M, period_ns: u64, quantile: f64) -> Result<Self, SketchError> {
        if !(0.0..=1.0).contains(&quantile) {
            return Err(SketchError::InvalidQuantile(quantile));
        }
        Ok(Self {
            current: DDSketch::with_mapping(mapping),
            previous: DDSketch::with_mapping(mapping),
            period_ns: period_ns.max(1),
            current_start: None,
            quantile,
            cached: None,
            since_refresh: 0,
        })
    }

    /// The default rotation period, 30 s.
    pub const DEFAULT_PERIOD_NS: u64 = 30 * NANOS_PER_SEC;

    /// Brings the window to time `now`: rotates once if a period has
    /// passed, empties both halves if two or more have. A `now` earlier than
    /// the current period's start (a clock that went backwards) changes
    /// nothing.
    pub fn advance(&mut self, now: u64) {
        let Some(start) = self.current_start else {
            self.current_start = Some(now);
            return;
        };
        let elapsed = now.saturating_sub(start);
        if elapsed < self.period_ns {
            return;
        }
        if elapsed < self.period_ns.saturating_mul(2) {
            core::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
            self.current_start = Some(start.saturating_add(self.period_ns));
        } else {
            self.current.clear();
            self.previous.clear();
            self.current_start = Some(now);
        }
        self.refresh();
    }

    /// Records one latency sample (nanoseconds) at time `now`.
    ///
    /// # Errors
    /// Never for latencies up to `u64::MAX` with the default mappings; the
    /// sketch's error otherwise, with nothing recorded.
    #[inline]
    pub fn record(&mut self, now: u64, latency_ns: u64) -> Result<(), SketchError> {
        self.advance(now);
        self.current.add(latency_ns as f64)?;
        self.since_refresh = self.since_refresh.saturating_add(1);
        if self.since_refresh >= (self.count() / REFRESH_SHARE).max(1) {
            self.refresh();
        }
        Ok(())
    }

    /// Recomputes the cached quantile from both halves.
    pub fn refresh(&mut self) {
        self.since_refresh = 0;
        self.cached = self
            .current
            .quantile_with(&self.previous, self.quantile)
            .ok()
            .flatten();
    }

    /// The cached quantile in nanoseconds (rounded down, saturating), `None`
    /// while the window is empty. O(1).
    #[inline]
    pub fn cached_quantile(&self) -> Option<u64> {
        self.cached.map(|v| v as u64)
    }

    /// The cached quantile as the sketch reported it.
    pub fn cached_quantile_f64(&self) -> Option<f64> {
        self.cached
    }

    /// A fresh estimate of any quantile over both halves (a walk over the
    /// buckets; no copy, no allocation).
    ///
    /// # Errors
    /// [`SketchError::InvalidQuantile`] for a bad `q`.
    pub fn quantile(&self, q: f64) -> Result<Option<f64>, SketchError> {
        self.current.quantile_with(&self.previous, q)
    }

    /// Samples in both halves.
    pub fn count(&self) -> u64 {
        self.current.count().saturating_add(self.previous.count())
    }

    /// The rotation period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The half that receives new samples.
    pub fn current(&self) -> &DDSketch<M, S, NoStore> {
        &self.current
    }

    /// The half from the period before.
    pub fn previous(&self) -> &DDSketch<M, S, NoStore> {
        &self.previous
    }

    /// Empties both halves and forgets the time.
    pub fn clear(&mut self) {
        self.current.clear();
        self.previous.clear();
        self.current_start = None;
        self.cached = None;
        self.since_refresh = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        w.record(u64::MAX, 300).unwrap();
        assert_eq!(w.count(), 3);
        let mut w = window();
        w.record(0, 100).unwrap();
        w.record(u64::MAX, 100).unwrap(); // far future: old samples dropped
        assert_eq!(w.count(), 1);
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
        assert_eq!(w.cached_quantile_f64(), w.quantile(0.5).unwrap());
    }

    #[test]
    fn rejects_bad_quantile() {
        assert!(LatencyWindow::<CubicMapping>::new(0.01, SEC, 1.5).is_err());
        assert!(LatencyWindow::<CubicMapping>::new(0.01, SEC, f64::NAN).is_err());
    }
}
