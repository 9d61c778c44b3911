//! Differential fuzzing of the DDSketch against a naive model (every sample
//! kept in a `Vec`): after every operation, count/min/max are exact and every
//! quantile is within α of the exact one (exactly: `|x̂ − x| <= α·|x|` in
//! real arithmetic on the doubles, no slack), at three capacities: one that never
//! collapses, and small collapsing-lowest and collapsing-highest ones where
//! only the quantiles on the kept side of the bound keep the guarantee (the
//! others must err on the documented side).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tailguard::mapping::CubicMapping;
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore};
use tailguard::{IndexMapping, SignedSketch, SketchError, Store};

mod exact;
use exact::within;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Any bit pattern: NaN, infinities, subnormals, ±0.0, huge values.
    Add(f64),
    /// A "nice" value `± mantissa · 2^exp`, to hit realistic ranges and ties.
    AddScaled(bool, u16, i8),
    /// Weights stay below 2^16 so that no bucket can saturate in a run.
    AddWeighted(f64, u16),
    /// Merge a sketch built from these values (same mapping).
    Merge(Vec<f64>),
    /// A second mapping: merging must fail and change nothing.
    MergeMismatch,
    Clear,
    Quantile(f64),
}

/// Big enough for the whole `f64` range at α = 5 % (≈ 14 300 keys).
type Wide = SignedSketch<CubicMapping, CollapsingLowestStore<16384>>;
type Low = SignedSketch<CubicMapping, CollapsingLowestStore<32>>;
type High = SignedSketch<CubicMapping, CollapsingHighestStore<32>>;

#[derive(Clone, Copy, PartialEq)]
enum Side {
    None,
    Lowest,
    Highest,
}

struct Model {
    samples: Vec<(f64, u64)>,
}

impl Model {
    fn count(&self) -> u64 {
        self.samples.iter().map(|s| s.1).sum()
    }

    fn sorted(&self) -> Vec<(f64, u64)> {
        let mut s = self.samples.clone();
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        s
    }

    /// The exact lower quantile `sorted[floor(q·(n−1))]`.
    fn quantile(sorted: &[(f64, u64)], n: u64, q: f64) -> f64 {
        let rank = ((q * (n - 1) as f64) as u64).min(n - 1);
        let mut seen = 0;
        for &(v, w) in sorted {
            seen += w;
            if seen > rank {
                return v;
            }
        }
        unreachable!()
    }
}

fn expected(v: f64, max_idx: f64) -> Result<(), SketchError> {
    if v.is_nan() {
        Err(SketchError::NotANumber)
    } else if v.abs() > max_idx {
        Err(SketchError::ValueOutOfRange(v))
    } else {
        Ok(())
    }
}

fn check<M: IndexMapping, P: Store>(
    s: &tailguard::DDSketch<M, P, P>,
    side: Side,
    model: &Model,
    sorted: &[(f64, u64)],
    extra_q: Option<f64>,
) {
    let n = model.count();
    assert_eq!(s.count(), n);
    assert_eq!(s.saturated(), 0);
    if n == 0 {
        assert_eq!(s.quantile(0.5), Ok(None));
        assert_eq!((s.min(), s.max()), (None, None));
        return;
    }
    assert_eq!(s.min(), sorted.first().map(|x| x.0));
    assert_eq!(s.max(), sorted.last().map(|x| x.0));
    if side == Side::None {
        assert!(s.collapse().is_none() && s.negative_collapse().is_none());
    }
    let m = s.mapping();
    let alpha = m.relative_accuracy();
    let min_idx = m.min_indexable_value();
    let qs = (0..=100).map(|i| f64::from(i) / 100.0).chain(extra_q);
    for q in qs {
        let est = s.quantile(q).unwrap().unwrap();
        let x = Model::quantile(sorted, n, q);
        let mag = x.abs();
        if mag < min_idx {
            assert!((est - x).abs() <= min_idx, "q={q} x={x:e} est={est:e}");
            continue;
        }
        let collapse = if x > 0.0 {
            s.collapse()
        } else {
            s.negative_collapse()
        };
        let kept = match (side, collapse) {
            (_, None) | (Side::None, _) => true,
            (Side::Lowest, Some(c)) => mag >= c.bound,
            (Side::Highest, Some(c)) => mag < c.bound,
        };
        if kept {
            assert!(
                within(est, x, alpha),
                "q={q} x={x:e} est={est:e} {collapse:?}"
            );
        } else {
            let e = est.abs();
            assert_eq!(est.signum(), x.signum(), "q={q} x={x:e} est={est:e}");
            match side {
                Side::Lowest => assert!(
                    e >= mag || within(e, mag, alpha),
                    "q={q} x={x:e} est={est:e}"
                ),
                _ => assert!(
                    e <= mag || within(e, mag, alpha),
                    "q={q} x={x:e} est={est:e}"
                ),
            }
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut wide: Box<Wide> = Box::new(Wide::with_accuracy(0.05).unwrap());
    let mut low = Low::with_accuracy(0.01).unwrap();
    let mut high = High::with_accuracy(0.01).unwrap();
    let mut model = Model {
        samples: Vec::new(),
    };
    let max_wide = wide.mapping().max_indexable_value();
    let max_small = low.mapping().max_indexable_value();
    for op in ops.into_iter().take(256) {
        let mut extra_q = None;
        match op {
            Op::Add(v) | Op::AddWeighted(v, 1) => add(
                &mut wide, &mut low, &mut high, &mut model, v, 1, max_wide, max_small,
            ),
            Op::AddScaled(neg, m, e) => {
                let v = f64::from(m) * 2f64.powi(i32::from(e)) * if neg { -1.0 } else { 1.0 };
                add(
                    &mut wide, &mut low, &mut high, &mut model, v, 1, max_wide, max_small,
                );
            }
            Op::AddWeighted(v, w) => add(
                &mut wide,
                &mut low,
                &mut high,
                &mut model,
                v,
                u32::from(w),
                max_wide,
                max_small,
            ),
            Op::Merge(values) => {
                let mut w2: Box<Wide> = Box::new(Wide::with_accuracy(0.05).unwrap());
                let mut l2 = Low::with_accuracy(0.01).unwrap();
                let mut h2 = High::with_accuracy(0.01).unwrap();
                for v in values.into_iter().take(64) {
                    add(
                        &mut w2, &mut l2, &mut h2, &mut model, v, 1, max_wide, max_small,
                    );
                }
                wide.merge(&w2).unwrap();
                low.merge(&l2).unwrap();
                high.merge(&h2).unwrap();
            }
            Op::MergeMismatch => {
                let other = Low::with_accuracy(0.02).unwrap();
                let before = (low.count(), low.min(), low.max());
                assert_eq!(low.merge(&other), Err(SketchError::MappingMismatch));
                assert_eq!(before, (low.count(), low.min(), low.max()));
            }
            Op::Clear => {
                wide.clear();
                low.clear();
                high.clear();
                model.samples.clear();
            }
            Op::Quantile(q) => {
                if (0.0..=1.0).contains(&q) {
                    extra_q = Some(q);
                } else {
                    assert!(matches!(
                        wide.quantile(q),
                        Err(SketchError::InvalidQuantile(_))
                    ));
                    assert!(matches!(
                        low.quantile(q),
                        Err(SketchError::InvalidQuantile(_))
                    ));
                }
            }
        }
        let sorted = model.sorted();
        check(&wide, Side::None, &model, &sorted, extra_q);
        check(&low, Side::Lowest, &model, &sorted, extra_q);
        check(&high, Side::Highest, &model, &sorted, extra_q);
    }
});

/// Adds to all three sketches and the model; values the wide sketch
/// rejects must be rejected by all, with the documented error.
#[allow(clippy::too_many_arguments)]
fn add(
    wide: &mut Wide,
    low: &mut Low,
    high: &mut High,
    model: &mut Model,
    v: f64,
    w: u32,
    max_wide: f64,
    max_small: f64,
) {
    // A weight of 0 validates like any other.
    let (ew, es) = (expected(v, max_wide), expected(v, max_small));
    if ew != es {
        // Only between the two largest indexable values (α differs): skip.
        return;
    }
    assert_eq!(wide.add_weighted(v, w), ew);
    assert_eq!(low.add_weighted(v, w), es);
    assert_eq!(high.add_weighted(v, w), es);
    if ew.is_ok() && w > 0 {
        model.samples.push((v, u64::from(w)));
    }
}
