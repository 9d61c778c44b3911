//! Collapsing stores: after a collapse, quantiles on the kept side keep the
//! α guarantee and those on the collapsed side err only one way.

mod common;

use common::{alpha, cases, check_quantiles, dataset, sorted, Shape, Side};
use proptest::prelude::*;
use tailguard::mapping::{CubicMapping, LinearMapping, LogarithmicMapping};
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore};
use tailguard::{DDSketch, FromRelativeAccuracy, IndexMapping, NoStore, SignedSketch, Store};

/// A wide data set: the generated shape plus anchors at `s·10^-3` and
/// `s·10^6` (and their negatives when `signed`), so that every capacity
/// tested here (≤ 128 buckets, α ≤ 5 %) must collapse.
fn wide(signed: bool) -> impl Strategy<Value = (Shape, Vec<f64>)> {
    (dataset(20usize..400), 0usize..1000, -3i32..=9).prop_map(move |((shape, mut data), at, e)| {
        let s = 10f64.powi(e);
        // Magnitudes that stay finite once spread by up to 10^9.
        data.retain(|v| v.abs() >= 1e-290 && v.abs() <= 1e290);
        // Spread the shape over nine decades (a golden-ratio sequence of
        // factors), so that both sides of any collapse bound hold samples.
        for (i, v) in data.iter_mut().enumerate() {
            let spread = 10f64.powf(9.0 * ((i as f64 * 0.618_033_988_749_895) % 1.0));
            let sign = if signed && i % 2 == 1 { -1.0 } else { 1.0 };
            *v = sign * v.abs() * spread;
        }
        let mut anchors = vec![s * 1e-3, s * 1e6];
        if signed {
            anchors.extend([-s * 1e-3, -s * 1e6]);
        }
        for a in anchors {
            let at = at % (data.len() + 1);
            data.insert(at, a);
        }
        (shape, data)
    })
}

fn check<M, P, N>(a: f64, side: Side, data: &[f64]) -> Result<(), TestCaseError>
where
    M: IndexMapping + FromRelativeAccuracy,
    P: Store,
    N: Store,
{
    let sorted = sorted(data);
    let mut s: DDSketch<M, P, N> = DDSketch::with_accuracy(a).unwrap();
    common::feed(&mut s, data)?;
    // A collapse must have happened, on every store that saw data.
    let c = s.collapse();
    prop_assert!(c.is_some(), "no collapse with {} buckets", P::CAPACITY);
    let c = c.unwrap();
    prop_assert!(
        c.samples > 0 && c.samples <= s.count(),
        "{:?} count {}",
        c,
        s.count()
    );
    if N::CAPACITY > 0 {
        let nc = s.negative_collapse();
        prop_assert!(nc.is_some(), "no negative collapse");
        let nc = nc.unwrap();
        prop_assert!(nc.samples > 0 && nc.samples <= s.count(), "{:?}", nc);
    }
    // At most CAPACITY non-empty buckets per store.
    prop_assert!(s.positive_store().bins().count() <= P::CAPACITY);
    check_quantiles(&s, side, &sorted)?;
    // Some exact quantile lies on the kept side: the test is not vacuous.
    let kept = common::qs().iter().any(|&q| {
        let x = common::exact_quantile(&sorted, q);
        let store = if x > 0.0 {
            Some(c)
        } else {
            s.negative_collapse()
        };
        store.is_some_and(|c| match side {
            Side::Lowest => x.abs() >= c.bound,
            Side::Highest => x.abs() < c.bound,
        })
    });
    prop_assert!(kept, "no quantile on the kept side of {:?}", c);
    Ok(())
}

macro_rules! all_mappings {
    ($a:expr, $side:expr, $data:expr, $store:ident < $n:literal >, $neg:ty) => {{
        check::<LogarithmicMapping, $store<$n>, $neg>($a, $side, $data)?;
        check::<CubicMapping, $store<$n>, $neg>($a, $side, $data)?;
        check::<LinearMapping, $store<$n>, $neg>($a, $side, $data)?;
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    #[test]
    fn collapsing_lowest_keeps_high_quantiles((_shape, data) in wide(false), a in alpha()) {
        all_mappings!(a, Side::Lowest, &data, CollapsingLowestStore<16>, NoStore);
        all_mappings!(a, Side::Lowest, &data, CollapsingLowestStore<64>, NoStore);
        all_mappings!(a, Side::Lowest, &data, CollapsingLowestStore<128>, NoStore);
    }

    #[test]
    fn collapsing_highest_keeps_low_quantiles((_shape, data) in wide(false), a in alpha()) {
        all_mappings!(a, Side::Highest, &data, CollapsingHighestStore<16>, NoStore);
        all_mappings!(a, Side::Highest, &data, CollapsingHighestStore<64>, NoStore);
        all_mappings!(a, Side::Highest, &data, CollapsingHighestStore<128>, NoStore);
    }

    #[test]
    fn signed_sketches_collapse_per_sign((_shape, data) in wide(true), a in alpha()) {
        all_mappings!(a, Side::Lowest, &data, CollapsingLowestStore<64>, CollapsingLowestStore<64>);
        all_mappings!(a, Side::Highest, &data, CollapsingHighestStore<64>, CollapsingHighestStore<64>);
    }
}

#[test]
fn default_sketch_collapses_below_its_range_and_keeps_the_tail() {
    // 1 ns .. 1 h in ns needs ≈ 1 446 buckets at α = 1 %: the default 1 024
    // collapse the lowest ones and keep p50 and above.
    let mut s = DDSketch::new(0.01).unwrap();
    let mut data = Vec::new();
    let mut v = 1.0;
    while v < 3.6e12 {
        data.push(v);
        v *= 1.001;
    }
    common::feed(&mut s, &data).unwrap();
    let c = s.collapse().expect("collapsed");
    assert!(c.bound > 1.0 && c.bound < 3.6e12 / 1e8, "{c:?}");
    let sorted = sorted(&data);
    check_quantiles(&s, Side::Lowest, &sorted).unwrap();
    let p50 = s.quantile(0.5).unwrap().unwrap();
    let x = common::exact_quantile(&sorted, 0.5);
    assert!((p50 - x).abs() <= 0.01 * x);
    let signed: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
    assert!(signed.negative_collapse().is_none());
}
