//! The α guarantee against an exact oracle, for every mapping and store,
//! over many data shapes (no collapse here; see `sketch_collapse.rs`).

mod common;

use common::{alpha, cases, check_all, dataset, size, sorted, Side};
use proptest::prelude::*;
use tailguard::mapping::{CubicMapping, LinearMapping, LogLinearMapping, LogarithmicMapping};
use tailguard::store::{CollapsingHighestStore, CollapsingLowestStore};
use tailguard::{DDSketch, IndexMapping, NoStore, SignedSketch, Store};

/// Big enough that no data set here collapses (at α ≥ 0.5 %, linear mapping,
/// a dynamic range of 10^15 needs about 5 000 buckets).
const CAP: usize = 8192;

fn check_mapping<M>(a: f64, data: &[f64]) -> Result<(), TestCaseError>
where
    M: IndexMapping + tailguard::FromRelativeAccuracy,
{
    let sorted = sorted(data);
    let mut lowest: Box<SignedSketch<M, CollapsingLowestStore<CAP>>> =
        Box::new(SignedSketch::with_accuracy(a).unwrap());
    let mut highest: Box<SignedSketch<M, CollapsingHighestStore<CAP>>> =
        Box::new(SignedSketch::with_accuracy(a).unwrap());
    check_all(&mut lowest, Side::Lowest, data, &sorted)?;
    check_all(&mut highest, Side::Highest, data, &sorted)?;
    if data.iter().all(|&v| v >= 0.0) {
        // Unsigned sketches (no negative store) take this data too (they
        // refuse every negative value, however small; -0.0 is not one).
        check_unsigned::<M, CollapsingLowestStore<CAP>>(a, Side::Lowest, data, &sorted)?;
        check_unsigned::<M, CollapsingHighestStore<CAP>>(a, Side::Highest, data, &sorted)?;
    }
    Ok(())
}

fn check_unsigned<M, P>(
    a: f64,
    side: Side,
    data: &[f64],
    sorted: &[f64],
) -> Result<(), TestCaseError>
where
    M: IndexMapping + tailguard::FromRelativeAccuracy,
    P: Store,
{
    let mut s: Box<DDSketch<M, P, NoStore>> = Box::new(DDSketch::with_accuracy(a).unwrap());
    check_all(&mut s, side, data, sorted)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    #[test]
    fn guarantee_holds_for_every_mapping_and_store((shape, data) in dataset(size()), a in alpha()) {
        let _ = shape;
        check_mapping::<LogarithmicMapping>(a, &data)?;
        check_mapping::<CubicMapping>(a, &data)?;
        check_mapping::<LinearMapping>(a, &data)?;
        check_mapping::<LogLinearMapping>(a, &data)?;
    }

    #[test]
    fn default_sketch_on_latency_like_data((shape, data) in dataset(1usize..2000), a in alpha()) {
        // The default: cubic, 1024 collapsing-lowest buckets, no negatives.
        prop_assume!(data.iter().all(|&v| v >= 0.0));
        let sorted = sorted(&data);
        let mut s = DDSketch::new(a).unwrap();
        common::feed(&mut s, &data)?;
        let _ = shape;
        // Whether or not it collapsed, the collapse-aware oracle must hold.
        common::check_quantiles(&s, Side::Lowest, &sorted)?;
    }
}
