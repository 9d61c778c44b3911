//! The rotating window under arbitrary timestamps (repeating, backwards,
//! jumping to the ends of `u64`, a second clock lagging the first) against
//! a naive model that keeps the raw samples of each half and follows the
//! rules of `LatencyWindow` (on time alone, `Rotation::every(period)`, or
//! also on sample counts, with small `min_samples` and `max_samples`
//! that make the window rotate at any timestamp): the window's
//! time is the largest timestamp taken since the last restart (an idle gap
//! or a completed stale run), timestamps behind it move neither it nor the
//! period's start, and stale ones (two periods or more behind) take the
//! new clock after a run of `STALE_RUN` distinct ones, spanning two periods
//! or more, with none between them that moves the window's time. Counts
//! and rotations match exactly,
//! reads never change the window, and with only exact samples the union
//! quantile is within α of the exact one (the estimate is whole
//! nanoseconds, rounded down). Both mappings: the default cubic one and
//! `LogLinearMapping`, whose record and refresh are integer-only.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::window::{LatencyWindow, Rotation};
use tailguard::{CubicMapping, FromRelativeAccuracy, IndexMapping, LogLinearMapping};

#[derive(arbitrary::Arbitrary, Debug)]
enum Op {
    Record {
        dt: i32,
        latency: u64,
    },
    /// An attempt cancelled after `elapsed`: a censored sample.
    Censor {
        dt: i32,
        elapsed: u64,
    },
    Advance {
        dt: i32,
    },
    /// A sample from a thread whose clock reads `behind` ns late: the
    /// fuzzer's clock does not move.
    Lagging {
        behind: u32,
        latency: u64,
    },
    Jump(u64),
    Query(u8),
    /// A read at `now + dt` that must not change the window.
    ReadAt {
        dt: i32,
    },
    Refresh,
}

/// `LatencyWindow`'s rotation and time, on raw samples.
#[derive(Default)]
struct Model {
    /// [`Rotation`]'s: rotate on time once the current half holds this
    /// many exact samples, and on count once it holds this many in all.
    min_samples: u64,
    max_samples: u64,
    /// When the current half began; `None` before the first timestamp.
    start: Option<u64>,
    /// The timestamps taken since the window's time last restarted (the
    /// first timestamp, an idle gap, a completed stale run): the restart's,
    /// then each later one that was ahead of all before it. The window's
    /// time is their largest.
    taken: Vec<u64>,
    /// The stale timestamps (two periods or more behind the window's time)
    /// given since the window's time last changed, a repeat of the one
    /// before left out.
    stale: Vec<u64>,
    current: Vec<u64>,
    previous: Vec<u64>,
    current_censored: Vec<u64>,
    previous_censored: Vec<u64>,
    rotations: u64,
}

/// Two periods, the shortest idle gap; `None` when it does not fit in a
/// `u64` (no gap is idle, no timestamp stale).
fn idle_gap(period: u64) -> Option<u64> {
    period.checked_mul(2)
}

/// Runs of this many stale timestamps take the new clock.
const STALE_RUN: usize = LatencyWindow::<CubicMapping>::STALE_RUN as usize;

impl Model {
    /// The window's time: the largest timestamp taken since the restart.
    fn time(&self) -> u64 {
        self.taken.iter().copied().max().unwrap_or(0)
    }

    /// The window's time and the period restart at `now`.
    fn restart(&mut self, now: u64) {
        self.taken = vec![now];
        self.stale.clear();
        self.start = Some(now);
    }

    fn advance(&mut self, now: u64, period: u64) {
        let Some(start) = self.start else {
            self.restart(now);
            return;
        };
        let time = self.time();
        let idle = idle_gap(period);
        if now > time && idle.is_some_and(|idle| now - time >= idle) {
            // Idle for two periods: both halves are emptied (no rotation).
            self.current.clear();
            self.previous.clear();
            self.current_censored.clear();
            self.previous_censored.clear();
            self.restart(now);
            return;
        }
        if now < time && idle.is_some_and(|idle| time - now >= idle) {
            // Stale: moves nothing until a run of them.
            if self.stale.last() != Some(&now) {
                self.stale.push(now);
            }
            let first = self.stale.first().copied().unwrap_or(now);
            if self.stale.len() >= STALE_RUN
                && idle.is_some_and(|idle| now.saturating_sub(first) >= idle)
            {
                // The clock was stepped back for good.
                self.restart(now);
            }
            return;
        }
        if now > time {
            // The window's time moves: a stale run is broken.
            self.stale.clear();
            self.taken.push(now);
        }
        if now.saturating_sub(start) >= period && self.current.len() as u64 >= self.min_samples {
            self.rotate();
        }
    }

    /// After a sample is added: rotate once the current half holds
    /// `max_samples` answers.
    fn added(&mut self) {
        if self.current.len() as u64 >= self.max_samples {
            self.rotate();
        }
    }

    /// A new period from the window's time, whatever the sample's.
    fn rotate(&mut self) {
        self.previous = std::mem::take(&mut self.current);
        self.previous_censored = std::mem::take(&mut self.current_censored);
        self.start = Some(self.time());
        self.rotations += 1;
    }

    fn idle_at(&self, now: u64, period: u64) -> bool {
        self.start.is_some()
            && idle_gap(period).is_some_and(|idle| now.saturating_sub(self.time()) >= idle)
    }

    fn count(&self) -> u64 {
        (self.current.len()
            + self.previous.len()
            + self.current_censored.len()
            + self.previous_censored.len()) as u64
    }

    fn censored(&self) -> usize {
        self.current_censored.len() + self.previous_censored.len()
    }
}

const ALPHA: f64 = 0.02;

fuzz_target!(|input: (bool, u16, Option<(u8, u8)>, Vec<Op>)| {
    let (log_linear, period, samples, ops) = input;
    if log_linear {
        run::<LogLinearMapping>(period, samples, ops);
    } else {
        run::<CubicMapping>(period, samples, ops);
    }
});

/// `samples`: the rotation's `min_samples` (0 to 7) and `max_samples`;
/// `None` for `Rotation::every`.
fn run<M: IndexMapping + FromRelativeAccuracy>(
    period: u16,
    samples: Option<(u8, u8)>,
    ops: Vec<Op>,
) {
    // The top value stands for a period of 2⁶³ ns, whose idle gap does not
    // fit in a `u64`: no gap is idle.
    let period = if period == u16::MAX {
        1 << 63
    } else {
        u64::from(period).max(1) * 1_000
    };
    let rotation = match samples {
        None => Rotation::every(period),
        Some((min, max)) => Rotation {
            period_ns: period,
            min_samples: u64::from(min % 8),
            max_samples: u64::from(max),
        },
    };
    let mut w: LatencyWindow<M> = match samples {
        None => LatencyWindow::new(ALPHA, period, 0.9).unwrap(),
        Some(_) => {
            let mapping = M::from_relative_accuracy(ALPHA).unwrap();
            LatencyWindow::with_rotation(mapping, rotation, 0.9).unwrap()
        }
    };
    assert_eq!(w.rotation(), rotation);
    let mut model = Model {
        min_samples: rotation.min_samples,
        max_samples: rotation.max_samples,
        ..Model::default()
    };
    let mut now: u64 = 1 << 40;
    for op in ops.into_iter().take(2_000) {
        let step = |now: u64, dt: i32| now.saturating_add_signed(i64::from(dt));
        match op {
            Op::Record { dt, latency } => {
                now = step(now, dt);
                w.record(now, latency).unwrap();
                model.advance(now, period);
                model.current.push(latency);
                model.added();
            }
            Op::Censor { dt, elapsed } => {
                now = step(now, dt);
                w.record_censored(now, elapsed).unwrap();
                model.advance(now, period);
                model.current_censored.push(elapsed);
                model.added();
            }
            Op::Advance { dt } => {
                now = step(now, dt);
                w.advance(now);
                model.advance(now, period);
            }
            Op::Lagging { behind, latency } => {
                let at = now.saturating_sub(u64::from(behind));
                w.record(at, latency).unwrap();
                model.advance(at, period);
                model.current.push(latency);
                model.added();
            }
            Op::Jump(t) => {
                now = t;
                w.advance(now);
                model.advance(now, period);
            }
            Op::ReadAt { dt } => {
                let at = step(now, dt);
                let idle = model.idle_at(at, period);
                assert_eq!(w.is_idle_at(at), idle);
                if idle {
                    assert_eq!(w.count_at(at), 0);
                    assert_eq!(w.quantile_at(at), None);
                } else {
                    assert_eq!(w.count_at(at), model.count());
                    assert_eq!(w.quantile_at(at), w.cached_quantile());
                }
            }
            Op::Query(q) => {
                let q = f64::from(q) / 255.0;
                let mut all: Vec<u64> = model
                    .current
                    .iter()
                    .chain(&model.previous)
                    .copied()
                    .collect();
                all.sort_unstable();
                let estimate = w.quantile(q).unwrap().map(|v| v as f64);
                if model.censored() > 0 && all.is_empty() {
                    // Cancellations alone are no latency: nothing to estimate.
                    assert_eq!(estimate, None);
                } else if model.censored() > 0 {
                    // Kaplan–Meier over censored samples has no exact
                    // counterpart here; it stays within what was seen.
                    let seen = all
                        .iter()
                        .chain(&model.current_censored)
                        .chain(&model.previous_censored)
                        .map(|&v| v as f64);
                    let lo = seen.clone().fold(f64::INFINITY, f64::min);
                    let hi = seen.fold(0.0, f64::max);
                    let e = estimate.expect("samples were recorded");
                    assert!(
                        e >= lo * (1.0 - 1e-9) && e <= hi * (1.0 + 1e-9),
                        "{e} not in [{lo}, {hi}]"
                    );
                } else {
                    match estimate {
                        None => assert!(all.is_empty()),
                        Some(estimate) => {
                            let rank = (q * (all.len() - 1) as f64) as usize;
                            let exact = all[rank] as f64;
                            // Above any collapsed bucket: within α. At or below one
                            // (latencies spanning more than the 1024 buckets cover):
                            // over-estimated, never under.
                            let bound = [w.current().collapse(), w.previous().collapse()]
                                .into_iter()
                                .flatten()
                                .map(|c| c.bound)
                                .fold(0.0, f64::max);
                            // Whole nanoseconds, rounded down: one more.
                            let slack = 1e-9 * exact + 1.0;
                            if exact >= bound {
                                assert!(
                                    (estimate - exact).abs() <= ALPHA * exact + slack,
                                    "q {q}: {estimate} vs {exact}"
                                );
                            } else {
                                assert!(
                                    estimate >= exact * (1.0 - ALPHA) - slack,
                                    "q {q}: {estimate} vs {exact}"
                                );
                            }
                        }
                    }
                }
            }
            Op::Refresh => {
                w.refresh();
                assert_eq!(w.cached_quantile(), w.quantile(0.9).unwrap());
            }
        }
        assert_eq!(w.current().count(), model.current.len() as u64);
        assert_eq!(w.previous().count(), model.previous.len() as u64);
        assert_eq!(
            w.current_censored().count(),
            model.current_censored.len() as u64
        );
        assert_eq!(
            w.previous_censored().count(),
            model.previous_censored.len() as u64
        );
        assert_eq!(w.count(), model.count());
        assert_eq!(w.censored_count(), model.censored() as u64);
        assert_eq!(w.rotations(), model.rotations);
    }
}
