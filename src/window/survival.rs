//! Kaplan–Meier's product-limit quantile over bucketed samples.
//!
//! A hedged request cancels its losers: their elapsed time says only "this
//! attempt takes at least `t`" — a right-censored sample. Treating it as a
//! full sample biases quantiles low (a hedge cancelled 1 ms after its send
//! would count as a 1 ms answer); dropping it biases them too (only the
//! attempts that beat the others remain). The product-limit estimator uses
//! both without bias as long as the censoring time does not depend on the
//! attempt's own latency, which holds for hedging: an attempt is cancelled
//! when *another* attempt answers.
//!
//! With exact counts `dᵢ` and censored counts `cᵢ` per bucket, in ascending
//! bucket order, and `rᵢ` the samples (of either kind) in buckets `≥ i`:
//!
//! ```text
//! S(i) = Π_{j ≤ i} (1 − d_j / r_j),   F(i) = 1 − S(i)
//! ```
//!
//! A censored sample shares the risk set of the exact samples of its own
//! bucket (it was cancelled no earlier than the bucket's lower bound). The
//! quantile is the first bucket with `F(i) > q·(m−1)/m`, `m` the number of
//! answers: exactly the sketch's own rank rule when nothing is censored,
//! and unchanged by attempts censored before every answer.

use crate::mapping::IndexMapping;
use crate::sketch::DDSketch;
use crate::store::{NoStore, Store};

/// One side (exact or censored samples) of a window half, as the estimator
/// reads it: a sketch, or the shared hedger's atomic buckets.
pub(crate) trait Side {
    /// Samples on this side.
    fn count(&self) -> u64;
    /// Samples too small to index.
    fn zero_count(&self) -> u64;
    /// The smallest and largest sample, `None` while empty.
    fn min(&self) -> Option<f64>;
    /// See [`min`](Self::min).
    fn max(&self) -> Option<f64>;
    /// The occupied buckets, ascending: (key, count).
    fn bins(&self) -> impl Iterator<Item = (i32, u32)> + '_;
    /// The value that represents bucket `key`.
    fn value(&self, key: i32) -> f64;
    /// The rank-rule quantile of the union of two uncensored sides when a
    /// faster way than the walk over occupied buckets exists, `None` when
    /// the walk must do (its answer is the same).
    fn union_quantile(&self, _other: &Self, _q: f64) -> Option<Option<f64>> {
        None
    }
}

impl<M: IndexMapping, S: Store> Side for DDSketch<M, S, NoStore> {
    #[inline]
    fn count(&self) -> u64 {
        DDSketch::count(self)
    }
    #[inline]
    fn zero_count(&self) -> u64 {
        DDSketch::zero_count(self)
    }
    #[inline]
    fn min(&self) -> Option<f64> {
        DDSketch::min(self)
    }
    #[inline]
    fn max(&self) -> Option<f64> {
        DDSketch::max(self)
    }
    #[inline]
    fn bins(&self) -> impl Iterator<Item = (i32, u32)> + '_ {
        self.positive_store().bins()
    }
    #[inline]
    fn value(&self, key: i32) -> f64 {
        self.mapping().value(key)
    }
    fn union_quantile(&self, other: &Self, q: f64) -> Option<Option<f64>> {
        // When the two halves' keys are close (always, but for samples
        // decades apart), the sketch's own union walk is the fastest way
        // to the empirical quantile.
        let span = match (
            self.positive_store().key_range(),
            other.positive_store().key_range(),
        ) {
            (Some((la, ha)), Some((lb, hb))) => {
                i64::from(ha.max(hb)).wrapping_sub(i64::from(la.min(lb)))
            }
            _ => 0,
        };
        let near = usize::try_from(span).is_ok_and(|s| s <= S::CAPACITY.saturating_mul(4));
        near.then(|| self.quantile_with(other, q).ok().flatten())
    }
}

/// One side of exact samples and one of censored ones, bucketed alike.
pub(crate) struct Pair<'a, X> {
    pub(crate) exact: &'a X,
    pub(crate) censored: &'a X,
}

/// The product-limit `q`-quantile of the union of `halves`, clamped into
/// the answers' `[min, max]`; `None` when they hold no exact sample (no
/// attempt ever answered: there is no latency to estimate from). When the
/// estimate never reaches `q` (the upper tail was only ever seen censored)
/// the answer is the largest exact sample: a lower bound of the quantile
/// that comes from answers, never from the censoring times — which a hedge
/// delay itself sets, so feeding them back would let the delay run away.
///
/// Cost: one pass over the occupied buckets of the four stores, never
/// over the empty keys between them (samples of 1 ns and of 584 years in
/// one window cost two steps, not a walk across 10⁹ keys at α = 10⁻⁷).
///
/// Sides being written while this reads them (the shared hedger) give an
/// estimate of some mix of before and after: the counts are read before
/// the buckets, so the walk may end short of the rank (the largest answer
/// is returned) and the risk set may run out early (the product stops
/// falling); it never panics nor loops.
pub(crate) fn quantile<X: Side>(halves: [Pair<'_, X>; 2], q: f64) -> Option<f64> {
    let [a, b] = halves;
    let exact = a.exact.count().saturating_add(b.exact.count());
    let censored = a.censored.count().saturating_add(b.censored.count());
    let n = exact.saturating_add(censored);
    if exact == 0 {
        return None;
    }
    // The answer is always an answered (exact) bucket: clamp into the
    // answers' own range, whatever was censored below or above it.
    let mut min = f64::INFINITY;
    let mut max = f64::NEG_INFINITY;
    for s in [a.exact, b.exact] {
        min = min.min(s.min().unwrap_or(f64::INFINITY));
        max = max.max(s.max().unwrap_or(f64::NEG_INFINITY));
    }
    if censored == 0 {
        if let Some(answer) = a.exact.union_quantile(b.exact, q) {
            return answer;
        }
    }
    // Without censoring the product reduces to the empirical distribution:
    // the sketch's own rank rule, in integers (the first bucket whose
    // cumulative count exceeds ⌊q·(n−1)⌋).
    let rank = (censored == 0).then(|| {
        let last = n.saturating_sub(1);
        ((q * last as f64) as u64).min(last)
    });
    let mut seen = 0u64;
    // The rank correction (n−1)/n of the uncensored rule, on the answers:
    // an attempt censored before every answer then changes nothing.
    let m_f = exact as f64;
    let threshold = q * (m_f - 1.0) / m_f;
    let mut at_risk = n as f64;
    let mut survival = 1.0_f64;
    let mut step = |d: u64, c: u64| -> bool {
        if let Some(rank) = rank {
            seen = seen.saturating_add(d);
            return seen > rank;
        }
        if d > 0 && at_risk > 0.0 {
            survival *= 1.0 - d as f64 / at_risk;
        }
        at_risk -= (d.saturating_add(c)) as f64;
        1.0 - survival > threshold
    };
    let zeros_exact = a.exact.zero_count().saturating_add(b.exact.zero_count());
    let zeros_censored = a
        .censored
        .zero_count()
        .saturating_add(b.censored.zero_count());
    if step(zeros_exact, zeros_censored) {
        return Some(clamp(0.0, min, max));
    }
    let mut bins = [
        a.exact.bins().peekable(),
        b.exact.bins().peekable(),
        a.censored.bins().peekable(),
        b.censored.bins().peekable(),
    ];
    // The smallest key at the head of the four ascending runs, in turn.
    while let Some(key) = bins
        .iter_mut()
        .filter_map(|it| it.peek().map(|&(k, _)| k))
        .min()
    {
        let mut counts = [0u64; 4];
        for (it, count) in bins.iter_mut().zip(counts.iter_mut()) {
            if let Some((_, c)) = it.next_if(|&(k, _)| k == key) {
                *count = u64::from(c);
            }
        }
        let [ea, eb, ca, cb] = counts;
        // Four `u32` counts cannot overflow a `u64`.
        if step(ea.saturating_add(eb), ca.saturating_add(cb)) {
            return Some(clamp(a.exact.value(key), min, max));
        }
    }
    let largest_exact = [a.exact.max(), b.exact.max()]
        .into_iter()
        .flatten()
        .fold(f64::NEG_INFINITY, f64::max);
    Some(largest_exact)
}

fn clamp(v: f64, min: f64, max: f64) -> f64 {
    if v < min {
        min
    } else if v > max {
        max
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::CubicMapping;
    use crate::store::CollapsingLowestStore;

    type Sketch = DDSketch<CubicMapping, CollapsingLowestStore<1024>, NoStore>;

    fn sketch() -> Sketch {
        Sketch::with_mapping(CubicMapping::new(0.01).unwrap())
    }

    fn km(exact: &Sketch, censored: &Sketch, q: f64) -> Option<f64> {
        let empty = sketch();
        quantile(
            [
                Pair { exact, censored },
                Pair {
                    exact: &empty,
                    censored: &empty,
                },
            ],
            q,
        )
    }

    #[test]
    fn without_censoring_it_is_the_sketch_quantile() {
        let mut e = sketch();
        for v in 1..=100 {
            e.add(f64::from(v)).unwrap();
        }
        for q in [0.0, 0.25, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(km(&e, &sketch(), q), e.quantile(q).unwrap());
        }
        assert_eq!(km(&sketch(), &sketch(), 0.5), None);
    }

    #[test]
    fn censored_samples_count_in_the_population() {
        // 100 exact samples 1..=100, plus 100 attempts cancelled at 50: those
        // took at least 50, so below 50 the distribution of all 200 is
        // F(t) = t / 200, and the p10 is 20, the p25 is 50.
        let mut e = sketch();
        let mut c = sketch();
        for v in 1..=100 {
            e.add(f64::from(v)).unwrap();
            c.add(50.0).unwrap();
        }
        let p10 = km(&e, &c, 0.10).unwrap();
        assert!((p10 - 20.0).abs() <= 0.011 * 20.0, "{p10}");
        let p25 = km(&e, &c, 0.25).unwrap();
        assert!((p25 - 50.0).abs() <= 0.011 * 50.0, "{p25}");
        // Above 50 the censored ones are taken to follow the exact ones:
        // S falls from 3/4 to 0 evenly over 51..=100, so S = 1/4 at 83⅓.
        let p75 = km(&e, &c, 0.75).unwrap();
        assert!((p75 - 84.0).abs() <= 0.011 * 84.0, "{p75}");
    }

    #[test]
    fn hand_computed_product_limit() {
        // Exact 1, 2, 4; censored at 3. S(1) = 3/4, S(2) = 3/4 · 2/3 = 1/2,
        // S(4) = 0. Threshold for q = 0.5: 0.5 · 3/4 = 0.375 → bucket of 2.
        let mut e = sketch();
        let mut c = sketch();
        for v in [1.0, 2.0, 4.0] {
            e.add(v).unwrap();
        }
        c.add(3.0).unwrap();
        let got = km(&e, &c, 0.5).unwrap();
        assert!((got - 2.0).abs() <= 0.02 * 2.0, "{got}");
        // q = 0.9: threshold 0.675 > F(2) = 0.5 → the bucket of 4.
        let got = km(&e, &c, 0.9).unwrap();
        assert!((got - 4.0).abs() <= 0.04, "{got}");
    }

    #[test]
    fn censoring_before_every_answer_changes_nothing() {
        let mut e = sketch();
        let mut c = sketch();
        e.add(1_100.0).unwrap();
        e.add(1_200.0).unwrap();
        c.add(1.0).unwrap();
        for q in [0.0, 0.01, 0.5, 0.75, 0.99, 1.0] {
            assert_eq!(km(&e, &c, q), km(&e, &sketch(), q), "q = {q}");
        }
        // Never below the smallest answer, whatever was censored below it.
        let mut e = sketch();
        e.add(1_000.0).unwrap();
        e.add(2_000.0).unwrap();
        assert_eq!(km(&e, &c, 0.01), Some(1_000.0));
    }

    #[test]
    fn a_tail_seen_only_censored_gives_the_largest_answer() {
        let mut e = sketch();
        let mut c = sketch();
        e.add(1.0).unwrap();
        for _ in 0..10 {
            c.add(7.0).unwrap();
        }
        // Not the censoring time (7): hedges set it, and feeding it back
        // would push the delay up by a hedge latency every refresh.
        assert_eq!(km(&e, &c, 0.99), Some(1.0));
        // No answer at all: nothing to estimate.
        assert_eq!(km(&sketch(), &c, 0.5), None);
    }
}
