//! Collapsing stores against an exact model of their contents.
//!
//! A collapsing store's contents depend only on the multiset of keys it was
//! given: with `lo` and `hi` the smallest and largest keys, nothing folds
//! while `hi − lo < N`; otherwise collapsing-lowest keeps `hi − N + 1 ..= hi`
//! and folds every smaller key into `hi − N + 1`, and collapsing-highest
//! keeps `lo ..= lo + N − 1` and folds every larger key into `lo + N − 1`.
//! A bucket holds at most `u32::MAX`; what does not fit is saturated, and
//! the collapse counts folded samples only up to what the edge bucket holds.
//! The model (`common::store_model`) computes that from a `BTreeMap`; the
//! tests feed the store in any order, by merging, near both ends of `i32`,
//! with weights small and huge, and with capacities that are and are not
//! powers of two (the slot is a mask or a remainder).

mod common;

use common::{cases, store_agrees_with_model};
use proptest::prelude::*;
use tailguard::store::{Collapse, CollapseSide, CollapsingStore, Highest, Lowest, StoreCollapse};
use tailguard::Store;

/// Weights: mostly small; sometimes huge, so that buckets saturate (alone,
/// when collapsing folds them together, or when merging adds them).
fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![
        12 => 0u32..5,
        1 => Just(u32::MAX),
        1 => (u32::MAX / 2 - 2)..=(u32::MAX / 2 + 2),
        1 => any::<u32>(),
    ]
}

/// Keys clustered around `base` (near either end of `i32` or in the
/// middle), spread over up to `spread` keys, with small weights and, when
/// `heavy`, a few huge ones.
fn adds() -> impl Strategy<Value = Vec<(i32, u32)>> {
    prop_oneof![3 => Just(false), 1 => Just(true)].prop_flat_map(adds_with)
}

fn adds_with(heavy: bool) -> impl Strategy<Value = Vec<(i32, u32)>> {
    let base = prop_oneof![
        Just(i32::MIN),
        Just(-1_000),
        Just(0),
        Just(i32::MAX - 300),
        any::<i32>().prop_map(|k| k.clamp(i32::MIN, i32::MAX - 300)),
    ];
    (base, 1u32..300).prop_flat_map(move |(base, spread)| {
        let w = if heavy {
            weight().boxed()
        } else {
            (0u32..5).boxed()
        };
        prop::collection::vec(
            (0..spread, w).prop_map(move |(d, c)| (base.saturating_add(d as i32), c)),
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
    store_agrees_with_model(&store, adds)?;
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
    store_agrees_with_model(&other, adds)?;
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
    let mut merged = sa.clone();
    merged.merge(&sb);
    // Without a collapse, and unless merging saturates a bucket (the union
    // walk adds the two counters without a cap), the union of two stores
    // is their merge.
    let comparable =
        store.collapse().is_none() && merged.saturated() == sa.saturated() + sb.saturated();
    for r in [0, total / 3, total / 2, total.saturating_sub(1), total] {
        if comparable {
            prop_assert_eq!(
                sa.key_at_rank_with(&sb, r),
                merged.key_at_rank(r),
                "rank {}",
                r
            );
        }
    }
    sa.merge(&sb);
    store_agrees_with_model(&sa, adds)?;
    // Clearing forgets everything, collapse included.
    sa.clear();
    store_agrees_with_model(&sa, &[])?;
    // And leaves no counter behind (it zeroes only the occupied range):
    // filled again, it holds exactly the new samples.
    for &(k, c) in adds {
        sa.add(k, c);
    }
    store_agrees_with_model(&sa, adds)?;
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
            boundary: top - 6,
            side: Collapse::Lowest,
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

/// The reported cases: a collapse never counts more than the store holds,
/// whatever the order, and a merge keeps the other store's saturation.
#[test]
fn saturation_and_collapse_are_accounted_in_any_order() {
    let max = u64::from(u32::MAX);
    // Far key first, then two saturating adds below the kept range.
    let mut a = CollapsingStore::<16, Lowest>::new();
    a.add(1000, 1);
    a.add(0, u32::MAX);
    a.add(0, u32::MAX);
    // The same keys, the heavy ones first.
    let mut b = CollapsingStore::<16, Lowest>::new();
    b.add(0, u32::MAX);
    b.add(0, u32::MAX);
    b.add(1000, 1);
    for s in [&a, &b] {
        assert_eq!(s.total(), max + 1);
        assert_eq!(s.saturated(), max);
        assert_eq!(
            s.collapse(),
            Some(StoreCollapse {
                samples: max,
                boundary: 1000 - 15 + 1,
                side: Collapse::Lowest,
            })
        );
    }
    // A merge adds the other store's dropped samples to its own.
    let mut c = CollapsingStore::<16, Lowest>::new();
    c.add(3, 1);
    let mut d = CollapsingStore::<16, Lowest>::new();
    d.add(5, u32::MAX);
    d.add(5, u32::MAX);
    assert_eq!(d.saturated(), max);
    c.merge(&d);
    assert_eq!((c.total(), c.saturated()), (max + 1, max));
    // And through the unaligned path (the union spans more than 16 keys).
    let mut e = CollapsingStore::<16, Lowest>::new();
    e.add(100, 1);
    e.merge(&d);
    assert_eq!((e.total(), e.saturated()), (max + 1, max));
}
