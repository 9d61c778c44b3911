//! `quantiles` answers exactly what `quantile` answers for each `q`, in the
//! order given: unsorted, duplicated, 0 and 1 included, over signed data with
//! zeros and collapsed stores; and it reports the first invalid `q`.

mod common;

use common::cases;
use proptest::prelude::*;
use tailguard::{
    CollapsingHighestStore, CollapsingLowestStore, CubicMapping, DDSketch, IndexMapping,
    LogarithmicMapping, SignedSketch, SketchError, Store,
};

/// A `q` from a small pool (so duplicates are common) or anywhere in `[0, 1]`.
fn q() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1.0),
        Just(0.5),
        Just(0.9),
        Just(0.99),
        0.0..=1.0f64,
    ]
}

/// Values of both signs over many decades, with exact zeros.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(0.0),
        4 => (-12.0..12.0f64).prop_map(|e| 10f64.powf(e)),
        2 => (-12.0..12.0f64).prop_map(|e| -(10f64.powf(e))),
        2 => 1.0..1000.0f64,
    ]
}

/// A data length bound: a tenth under Miri (this file took 504 s there at
/// full length, 113 s at a tenth).
const fn len(n: usize) -> usize {
    if cfg!(miri) {
        n / 10
    } else {
        n
    }
}

fn same_as_quantile<M: IndexMapping, P: Store, N: Store, const K: usize>(
    s: &DDSketch<M, P, N>,
    qs: &[f64; K],
) -> Result<(), TestCaseError> {
    let all = s.quantiles(qs).expect("valid qs");
    if s.is_empty() {
        prop_assert_eq!(all, None);
        return Ok(());
    }
    let all = all.expect("not empty");
    for (&q, &got) in qs.iter().zip(&all) {
        let one = s.quantile(q).expect("valid q").expect("not empty");
        prop_assert_eq!(
            got.to_bits(),
            one.to_bits(),
            "quantiles gave {:e} for q = {} but quantile gave {:e}",
            got,
            q,
            one
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn signed_collapsing_lowest(
        data in prop::collection::vec(value(), 0..len(400)),
        qs in prop::array::uniform9(q()),
    ) {
        let mut s: SignedSketch<CubicMapping, CollapsingLowestStore<64>> =
            SignedSketch::with_accuracy(0.01).unwrap();
        for &v in &data {
            s.add(v).unwrap();
        }
        same_as_quantile(&s, &qs)?;
    }

    #[test]
    fn signed_collapsing_highest(
        data in prop::collection::vec(value(), 0..len(400)),
        qs in prop::array::uniform9(q()),
    ) {
        let mut s: SignedSketch<LogarithmicMapping, CollapsingHighestStore<32>> =
            SignedSketch::with_accuracy(0.02).unwrap();
        for &v in &data {
            s.add(v).unwrap();
        }
        same_as_quantile(&s, &qs)?;
    }

    #[test]
    fn default_sketch_weighted(
        data in prop::collection::vec((1.0..1e9f64, 0u32..5), 1..len(300)),
        qs in prop::array::uniform5(q()),
    ) {
        let mut s = DDSketch::new(0.01).unwrap();
        for &(v, w) in &data {
            s.add_weighted(v, w).unwrap();
        }
        same_as_quantile(&s, &qs)?;
        // Reversed and doubled: every `q` twice, in falling order.
        let mut twice = [0.0; 10];
        for (i, t) in twice.iter_mut().enumerate() {
            *t = qs[4 - i / 2];
        }
        same_as_quantile(&s, &twice)?;
    }

    #[test]
    fn first_invalid_q_is_reported(
        data in prop::collection::vec(value(), 0..len(50)),
        mut qs in prop::array::uniform4(q()),
        at in 0usize..4,
        bad in prop_oneof![Just(f64::NAN), Just(-0.5), Just(1.5), Just(f64::INFINITY)],
    ) {
        let mut s: SignedSketch = SignedSketch::with_accuracy(0.01).unwrap();
        for &v in &data {
            s.add(v).unwrap();
        }
        qs[at] = bad;
        if at < 3 {
            qs[3] = -1.0; // a later invalid `q` is not the one reported
        }
        match s.quantiles(&qs) {
            Err(SketchError::InvalidQuantile(q)) => {
                prop_assert_eq!(q.to_bits(), bad.to_bits());
            }
            other => prop_assert!(false, "expected InvalidQuantile({}), got {:?}", bad, other),
        }
    }
}

/// What `quantile_with` promises, from the buckets: the bucket at the rank
/// among both sketches' buckets counted together as they stand (a union
/// wider than a store is not collapsed further), clamped into the union's
/// `[min, max]`.
fn union_quantile<M: IndexMapping, S: Store>(
    x: &SignedSketch<M, S>,
    y: &SignedSketch<M, S>,
    q: f64,
) -> Option<f64> {
    let m = x.mapping();
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for s in [x, y] {
        let neg = s.negative_store().bins().map(|(k, c)| (-m.value(k), c));
        let pos = s.positive_store().bins().map(|(k, c)| (m.value(k), c));
        buckets.extend(neg.chain(pos).map(|(v, c)| (v, u64::from(c))));
        buckets.push((0.0, s.zero_count()));
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n: u64 = buckets.iter().map(|b| b.1).sum();
    let min = [x.min(), y.min()].into_iter().flatten().reduce(f64::min)?;
    let max = [x.max(), y.max()].into_iter().flatten().reduce(f64::max)?;
    let rank = ((q * (n - 1) as f64) as u64).min(n - 1);
    let mut seen = 0;
    let (v, _) = buckets.into_iter().find(|b| {
        seen += b.1;
        seen > rank
    })?;
    Some(if v < min {
        min
    } else if v > max {
        max
    } else {
        v
    })
}

/// Whether two stores' ranges fit one store: merging them then collapses
/// nothing more, and the union of their buckets is the merge.
fn fits<S: Store>(a: &S, b: &S) -> bool {
    match (a.key_range(), b.key_range()) {
        (Some(a), Some(b)) => {
            let width = i64::from(a.1.max(b.1)) - i64::from(a.0.min(b.0));
            width < S::CAPACITY as i64
        }
        _ => true,
    }
}

fn union_as_promised<M: IndexMapping, S: Store>(
    m: M,
    a: &[f64],
    b: &[f64],
    qs: &[f64],
) -> Result<(), TestCaseError> {
    let mut x: SignedSketch<M, S> = SignedSketch::with_mapping(m);
    let mut y: SignedSketch<M, S> = SignedSketch::with_mapping(m);
    a.iter().for_each(|&v| x.add(v).unwrap());
    b.iter().for_each(|&v| y.add(v).unwrap());
    let mut merged = x.clone();
    merged.merge(&y).unwrap();
    let same = fits(x.positive_store(), y.positive_store())
        && fits(x.negative_store(), y.negative_store());
    for &q in qs {
        let got = x.quantile_with(&y, q).unwrap();
        let bits = |v: Option<f64>| v.map(f64::to_bits);
        prop_assert_eq!(bits(got), bits(union_quantile(&x, &y, q)), "q = {}", q);
        prop_assert_eq!(
            bits(got),
            bits(y.quantile_with(&x, q).unwrap()),
            "q = {}",
            q
        );
        if same {
            prop_assert_eq!(bits(got), bits(merged.quantile(q).unwrap()), "q = {}", q);
        }
    }
    Ok(())
}

/// The fine mapping of the union test: its indexable values lie about
/// 10⁹ keys apart.
fn fine() -> LogarithmicMapping {
    LogarithmicMapping::new(1e-7).unwrap()
}

/// Values over many decades, or at the ends of what [`fine`] indexes: two
/// sketches' ranges are often far apart and wider than a store together.
fn spread() -> impl Strategy<Value = f64> {
    let (lo, hi) = (fine().min_indexable_value(), fine().max_indexable_value());
    prop_oneof![
        6 => value(),
        1 => prop_oneof![Just(lo), Just(hi), Just(-lo), Just(-hi)],
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// `quantile_with` answers from both sketches' buckets counted
    /// together, the quantile of their merge whenever the merge collapses
    /// nothing more; in either order, for both store kinds, with ranges
    /// far apart (a walk over the keys between would take seconds).
    #[test]
    fn quantile_with_is_the_quantile_of_the_union(
        a in prop::collection::vec(spread(), 0..len(60)),
        b in prop::collection::vec(spread(), 0..len(60)),
        c in prop::collection::vec(value(), 0..len(200)),
        d in prop::collection::vec(value(), 0..len(200)),
        qs in prop::array::uniform5(q()),
    ) {
        union_as_promised::<_, CollapsingLowestStore<32>>(fine(), &a, &b, &qs)?;
        union_as_promised::<_, CollapsingHighestStore<32>>(fine(), &a, &b, &qs)?;
        let coarse = CubicMapping::new(0.02).unwrap();
        union_as_promised::<_, CollapsingLowestStore<64>>(coarse, &c, &d, &qs)?;
        union_as_promised::<_, CollapsingHighestStore<64>>(coarse, &c, &d, &qs)?;
        // Close together: the union usually fits, and is the merge.
        union_as_promised::<_, CollapsingLowestStore<1024>>(coarse, &c, &d, &qs)?;
    }
}

#[test]
fn empty_array_of_qs() {
    let mut s = DDSketch::new(0.01).unwrap();
    assert_eq!(s.quantiles(&[]), Ok(None));
    s.add(5.0).unwrap();
    assert_eq!(s.quantiles(&[]), Ok(Some([])));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// `add_all` is exactly a loop of `add`: same buckets, bit-identical
    /// min, max and sum, and the same first refusal.
    #[test]
    fn add_all_equals_a_loop_of_add(
        data in prop::collection::vec(
            prop_oneof![
                8 => 1e-3..1e9f64,
                1 => Just(0.0),
                1 => Just(-1.0),
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
            ],
            0..len(300),
        )
    ) {
        let mut batch = DDSketch::new(0.01).unwrap();
        let mut one_by_one = DDSketch::new(0.01).unwrap();
        let outcome = batch.add_all(&data);
        let mut expected = Ok(());
        for (i, &v) in data.iter().enumerate() {
            if let Err(e) = one_by_one.add(v) {
                expected = Err((i, e));
                break;
            }
        }
        prop_assert_eq!(outcome, expected);
        prop_assert_eq!(batch.count(), one_by_one.count());
        prop_assert_eq!(batch.zero_count(), one_by_one.zero_count());
        let bins = |s: &DDSketch| s.positive_store().bins().collect::<Vec<_>>();
        prop_assert_eq!(bins(&batch), bins(&one_by_one));
        let bits = |x: Option<f64>| x.map(f64::to_bits);
        prop_assert_eq!(bits(batch.min()), bits(one_by_one.min()));
        prop_assert_eq!(bits(batch.max()), bits(one_by_one.max()));
        prop_assert_eq!(bits(batch.sum()), bits(one_by_one.sum()));
    }
}
