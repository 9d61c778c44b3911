//! Collapsing stores against an exact model of their contents.
//!
//! A collapsing store's contents depend only on the multiset of keys it was
//! given: with `lo` and `hi` the smallest and largest keys, nothing folds
//! while `hi − lo < N`; otherwise collapsing-lowest keeps `hi − N + 1 ..= hi`
//! and folds every smaller key into `hi − N + 1`, and collapsing-highest
//! keeps `lo ..= lo + N − 1` and folds every larger key into `lo + N − 1`.
//! The model computes that from a `BTreeMap`; the tests feed the store in
//! any order, by merging, near both ends of `i32`, and with capacities that
//! are and are not powers of two (the slot is a mask or a remainder).

mod common;

use common::cases;
use proptest::prelude::*;
use std::collections::BTreeMap;
use tailguard::store::{Collapse, CollapseSide, CollapsingStore, Highest, Lowest, StoreCollapse};
use tailguard::Store;

/// What a store must hold after taking `adds`.
struct Model {
    bins: Vec<(i32, u32)>,
    collapse: Option<StoreCollapse>,
}

fn model(side: Collapse, capacity: usize, adds: &[(i32, u32)]) -> Model {
    let mut keys: BTreeMap<i32, u64> = BTreeMap::new();
    for &(k, c) in adds.iter().filter(|a| a.1 > 0) {
        *keys.entry(k).or_default() += u64::from(c);
    }
    let (Some((&lo, _)), Some((&hi, _))) = (keys.first_key_value(), keys.last_key_value()) else {
        return Model {
            bins: vec![],
            collapse: None,
        };
    };
    let n = capacity as i64;
    if i64::from(hi) - i64::from(lo) < n {
        let bins = keys.iter().map(|(&k, &c)| (k, c as u32)).collect();
        return Model {
            bins,
            collapse: None,
        };
    }
    let (edge, boundary) = match side {
        Collapse::Lowest => {
            let edge = (i64::from(hi) - n + 1) as i32;
            (edge, edge + 1)
        }
        Collapse::Highest => {
            let edge = (i64::from(lo) + n - 1) as i32;
            (edge, edge)
        }
    };
    let mut folded: BTreeMap<i32, u64> = BTreeMap::new();
    let mut samples = 0;
    for (&k, &c) in &keys {
        let kept = match side {
            Collapse::Lowest => k.max(edge),
            Collapse::Highest => k.min(edge),
        };
        if kept != k {
            samples += c;
        }
        *folded.entry(kept).or_default() += c;
    }
    Model {
        bins: folded.iter().map(|(&k, &c)| (k, c as u32)).collect(),
        collapse: Some(StoreCollapse { samples, boundary }),
    }
}

/// Every read of the store agrees with the model.
fn agrees<const N: usize, S: CollapseSide>(
    store: &CollapsingStore<N, S>,
    adds: &[(i32, u32)],
) -> Result<(), TestCaseError> {
    let m = model(S::SIDE, N, adds);
    let bins: Vec<_> = store.bins().collect();
    prop_assert_eq!(&bins, &m.bins);
    prop_assert_eq!(store.collapse(), m.collapse);
    let total: u64 = m.bins.iter().map(|&(_, c)| u64::from(c)).sum();
    prop_assert_eq!(store.total(), total);
    prop_assert_eq!(store.saturated(), 0);
    prop_assert_eq!(
        store.key_range(),
        m.bins.first().zip(m.bins.last()).map(|(a, b)| (a.0, b.0))
    );
    // Reversed iteration, `count_of` and `count_at_or_below` at every bin
    // and just around it.
    let mut rev: Vec<_> = store.bins().rev().collect();
    rev.reverse();
    prop_assert_eq!(&rev, &m.bins);
    let mut below = 0u64;
    for &(k, c) in &m.bins {
        prop_assert_eq!(store.count_of(k), c);
        if k > i32::MIN {
            prop_assert_eq!(store.count_at_or_below(k - 1), below);
        }
        below += u64::from(c);
        prop_assert_eq!(store.count_at_or_below(k), below);
        if m.bins
            .binary_search_by_key(&k.wrapping_add(1), |b| b.0)
            .is_err()
            && k < i32::MAX
        {
            prop_assert_eq!(store.count_of(k + 1), 0);
        }
    }
    // Every rank, against the expanded sorted keys (bounded for speed).
    let mut rank = 0u64;
    for &(k, c) in &m.bins {
        for r in [rank, rank + u64::from(c) / 2, rank + u64::from(c) - 1] {
            prop_assert_eq!(store.key_at_rank(r), Some(k), "rank {}", r);
        }
        rank += u64::from(c);
    }
    prop_assert_eq!(store.key_at_rank(rank), None);
    Ok(())
}

/// Keys clustered around `base` (near either end of `i32` or in the
/// middle), spread over up to `spread` keys, with small weights.
fn adds() -> impl Strategy<Value = Vec<(i32, u32)>> {
    let base = prop_oneof![
        Just(i32::MIN),
        Just(-1_000),
        Just(0),
        Just(i32::MAX - 300),
        any::<i32>().prop_map(|k| k.clamp(i32::MIN, i32::MAX - 300)),
    ];
    (base, 1u32..300).prop_flat_map(|(base, spread)| {
        prop::collection::vec(
            (0..spread, 0u32..5).prop_map(move |(d, c)| (base.saturating_add(d as i32), c)),
            0..120,
        )
    })
}

fn check<const N: usize, S: CollapseSide>(
    adds: &[(i32, u32)],
    split: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    // In the given order.
    let mut store = CollapsingStore::<N, S>::new();
    for &(k, c) in adds {
        store.add(k, c);
    }
    agrees(&store, adds)?;
    // In another order: the contents depend only on the keys.
    let mut shuffled = adds.to_vec();
    let mut x = seed | 1;
    for i in (1..shuffled.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        shuffled.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut other = CollapsingStore::<N, S>::new();
    for &(k, c) in &shuffled {
        other.add(k, c);
    }
    agrees(&other, adds)?;
    // As the merge of two stores fed the two halves.
    let (a, b) = adds.split_at(split.min(adds.len()));
    let (mut sa, mut sb) = (
        CollapsingStore::<N, S>::new(),
        CollapsingStore::<N, S>::new(),
    );
    a.iter().for_each(|&(k, c)| sa.add(k, c));
    b.iter().for_each(|&(k, c)| sb.add(k, c));
    // The union walk a rotating window does, before merging.
    let total = sa.total() + sb.total();
    for r in [0, total / 3, total / 2, total.saturating_sub(1), total] {
        let merged_rank = {
            let mut m = sa.clone();
            m.merge(&sb);
            m.key_at_rank(r)
        };
        // Without a collapse, the union of two stores is their merge.
        if store.collapse().is_none() {
            prop_assert_eq!(sa.key_at_rank_with(&sb, r), merged_rank, "rank {}", r);
        }
    }
    sa.merge(&sb);
    agrees(&sa, adds)?;
    // Clearing forgets everything, collapse included.
    sa.clear();
    agrees(&sa, &[])?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn stores_hold_exactly_what_the_model_says(
        adds in adds(),
        split in 0usize..120,
        seed in any::<u64>(),
    ) {
        check::<1, Lowest>(&adds, split, seed)?;
        check::<7, Lowest>(&adds, split, seed)?;
        check::<7, Highest>(&adds, split, seed)?;
        check::<16, Lowest>(&adds, split, seed)?;
        check::<16, Highest>(&adds, split, seed)?;
        check::<100, Lowest>(&adds, split, seed)?;
        check::<100, Highest>(&adds, split, seed)?;
        check::<1024, Lowest>(&adds, split, seed)?;
    }
}

#[test]
fn ring_wraps_around_the_array_and_i32() {
    // A range that starts near the end of the array and continues from its
    // start, at the top of the `i32` key space.
    let mut s = CollapsingStore::<8, Lowest>::new();
    let top = i32::MAX;
    for k in (top - 7)..=top {
        s.add(k, 1);
    }
    assert_eq!(s.bins().count(), 8);
    assert_eq!(s.collapse(), None);
    s.add(i32::MIN, 1);
    // `i32::MIN` is far below: it folds into the lowest kept key.
    assert_eq!(
        s.collapse(),
        Some(StoreCollapse {
            samples: 1,
            boundary: top - 6
        })
    );
    assert_eq!(s.count_of(top - 7), 2);
    let mut h = CollapsingStore::<8, Highest>::new();
    h.add(i32::MIN, 1);
    h.add(top, 3);
    assert_eq!(
        h.bins().collect::<Vec<_>>(),
        vec![(i32::MIN, 1), (i32::MIN + 7, 3)]
    );
}
