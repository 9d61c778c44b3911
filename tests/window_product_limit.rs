//! A latency window's quantile with censored samples is Kaplan–Meier's
//! product-limit quantile of its buckets, checked end to end through the
//! public API against a model written from the documented rule.
//!
//! The rule, as the estimator's module (`src/window/survival.rs`) states
//! it: with `dᵢ` answers and `cᵢ` cancellations in bucket `i` (ascending,
//! the zero bucket first) and `rᵢ` the samples of either kind in buckets
//! `≥ i`, `S(i) = Π (1 − d_j/r_j)` and `F = 1 − S`; the quantile is the
//! first bucket whose `F` exceeds `max(q·(m−1), r)/m`, `m` the answers
//! and `r = ⌊q·(m−1)⌋` as the sketch's rank rule computes it in floats;
//! without cancellations, the sketch's rank rule itself. The answer is
//! that bucket's representative in whole nanoseconds, clamped into the
//! answers' `[min, max]`, and the largest answer when `F` never gets there.
//!
//! The window computes this in integers, exact to a few 2⁻⁶³; the model
//! works in `f64` and leaves out a level whose threshold lies within
//! 10⁻⁹ of some `F` (too close for it to call). Samples come from a few
//! latencies, so buckets are shared, ties are many, and the zero bucket
//! and a bucket far above the rest take part; they are split between the
//! window's two halves, whose union the estimate walks.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tailguard::store::CollapsingLowestStore;
use tailguard::window::{LatencyWindow, Rotation};
use tailguard::{CubicMapping, FromRelativeAccuracy, IndexMapping, LogLinearMapping};

const PERIOD: u64 = 1_000_000;

/// Where the product-limit estimate stops.
#[derive(Debug)]
enum Stop {
    /// The zero bucket.
    Zero,
    /// The bucket of this key.
    Key(i32),
    /// Past every bucket: the largest answer.
    Largest,
}

/// The documented product-limit rule over the buckets of `m`, in `f64`,
/// for `exact` not empty; `None` when the threshold is too close to some
/// `F` to call.
fn product_limit<M: IndexMapping>(m: &M, exact: &[u64], censored: &[u64], q: f64) -> Option<Stop> {
    // (answers, cancellations) per bucket, the zero bucket (`None`) first.
    let mut buckets: BTreeMap<Option<i32>, (u64, u64)> = BTreeMap::new();
    for &v in exact {
        buckets.entry(m.index_u64(v)).or_default().0 += 1;
    }
    for &v in censored {
        buckets.entry(m.index_u64(v)).or_default().1 += 1;
    }
    let stop = |key: Option<i32>| key.map_or(Stop::Zero, Stop::Key);
    let answers = exact.len() as u64;
    let rank = ((q * (answers - 1) as f64) as u64).min(answers - 1);
    if censored.is_empty() {
        let mut seen = 0;
        for (&key, &(d, _)) in &buckets {
            seen += d;
            if seen > rank {
                return Some(stop(key));
            }
        }
        return Some(Stop::Largest);
    }
    let threshold = (q * (answers - 1) as f64).max(rank as f64) / answers as f64;
    let mut survival = 1.0;
    let mut at_risk = (exact.len() + censored.len()) as f64;
    for (&key, &(d, c)) in &buckets {
        if d > 0 {
            survival *= 1.0 - d as f64 / at_risk;
            let f = 1.0 - survival;
            if (f - threshold).abs() < 1e-9 {
                return None;
            }
            if f > threshold {
                return Some(stop(key));
            }
        }
        at_risk -= (d + c) as f64;
    }
    Some(Stop::Largest)
}

/// Latencies: zero, a few nanoseconds, two that share a bucket at α = 2 %,
/// one a little above, and one far above the rest.
fn latency() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        1u64..20,
        Just(1_000),
        Just(1_010),
        Just(5_000),
        Just(u64::MAX >> 8),
    ]
}

/// Levels: the usual ones, both ends, anything.
fn level() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::sample::select(vec![0.0, 0.5, 0.9, 0.99, 1.0]),
        0.0f64..=1.0
    ]
}

/// Records `samples` (latency, censored) in a window over `M` at α = 2 %,
/// the first `split` in one period and the rest in the next, and checks
/// every level of `qs` against [`product_limit`].
fn matches_the_model<M: IndexMapping + FromRelativeAccuracy>(
    samples: &[(u64, bool)],
    split: usize,
    qs: &[f64],
) -> Result<(), TestCaseError> {
    let m = M::from_relative_accuracy(0.02).unwrap();
    // Buckets enough for every latency above: nothing collapses.
    let mut w: LatencyWindow<M, CollapsingLowestStore<4096>> =
        LatencyWindow::with_rotation(m, Rotation::every(PERIOD), 0.9).unwrap();
    let (mut exact, mut censored) = (Vec::new(), Vec::new());
    for (i, &(latency, cancelled)) in samples.iter().enumerate() {
        let now = if i < split { 0 } else { PERIOD };
        if cancelled {
            w.record_censored(now, latency).unwrap();
            censored.push(latency);
        } else {
            w.record(now, latency).unwrap();
            exact.push(latency);
        }
    }
    // The window rotated at the second period if both held samples.
    let rotated = (1..samples.len()).contains(&split);
    let previous = w.previous().count() + w.previous_censored().count();
    prop_assert_eq!(previous, if rotated { split as u64 } else { 0 });
    let sides = [
        w.current(),
        w.previous(),
        w.current_censored(),
        w.previous_censored(),
    ];
    prop_assert!(sides.iter().all(|s| s.collapse().is_none()));
    for &q in qs {
        let got = w.quantile(q).unwrap();
        let (Some(&lo), Some(&hi)) = (exact.iter().min(), exact.iter().max()) else {
            // Cancellations alone say nothing of the latency.
            prop_assert_eq!(got, None);
            continue;
        };
        let Some(stop) = product_limit(&m, &exact, &censored, q) else {
            continue;
        };
        let expected = match stop {
            // The zero bucket's 0, clamped into `[lo, hi]`.
            Stop::Zero => lo,
            Stop::Key(k) => m.value_u64(k).clamp(lo, hi),
            Stop::Largest => hi,
        };
        prop_assert_eq!(got, Some(expected), "q = {}, stopped at {:?}", q, stop);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// With and without cancellations, in one half or across both, with
    /// either mapping, the window's quantile is the product-limit one.
    #[test]
    fn the_quantile_is_the_product_limit_one(
        drawn in prop::collection::vec((latency(), 0u8..100), 1..300),
        cancelled_pct in prop_oneof![Just(0u8), Just(100), 1u8..100],
        split in any::<prop::sample::Index>(),
        qs in prop::collection::vec(level(), 1..12),
    ) {
        // A share of cancellations per case, none and all included.
        let samples: Vec<_> =
            drawn.iter().map(|&(ns, roll)| (ns, roll < cancelled_pct)).collect();
        let split = split.index(samples.len() + 1);
        matches_the_model::<CubicMapping>(&samples, split, &qs)?;
        matches_the_model::<LogLinearMapping>(&samples, split, &qs)?;
    }
}

#[test]
fn one_censored_sample_far_above_the_answers_folds_only_the_censored_side() {
    // Documented on `record_censored`: each side collapses on its own.
    use tailguard::window::LatencyWindow;
    let median = |last_ns: u64| {
        let mut w: LatencyWindow = LatencyWindow::new(0.01, u64::MAX, 0.5).unwrap();
        for us in 1..=100u64 {
            w.record(0, us * 1_000).unwrap();
            w.record_censored(0, 5_000).unwrap();
        }
        w.record_censored(0, last_ns).unwrap();
        w.quantile(0.5).unwrap().unwrap()
    };
    let (second, ten_hours) = (median(1_000_000_000), median(36_000_000_000_000));
    let tenths_us = |ns: u64| (ns + 50) / 100;
    assert_eq!(
        (tenths_us(second), tenths_us(ten_hours)),
        (522, 717),
        "{second} {ten_hours}"
    );
}
