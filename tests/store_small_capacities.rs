//! Collapsing stores of 1, 2, 3 and 5 buckets against the exact model
//! (`common::store_model`), after every step of a sequence of adds, merges
//! and clears whose keys mix both ends of `i32` with the middle and whose
//! weights saturate a bucket in one add.
//!
//! At these capacities nearly every add collapses, the edge bucket is
//! most of the store, keys spanning all of `i32` fold into one bucket or a
//! few, and at 3 and 5 buckets the slot is a remainder, not a mask.
//! `store_model.rs` feeds keys clustered within a few hundred to larger
//! stores in one batch; here every read is checked after every step,
//! counts are conserved (stored plus saturated is everything added), and
//! before each merge the union walk a rotating window does must find every
//! bucket of both stores at its ranks.

mod common;

use common::{cases, store_agrees_with_model};
use proptest::prelude::*;
use std::collections::BTreeMap;
use tailguard::store::{CollapseSide, CollapsingStore, Highest, Lowest};
use tailguard::Store;

#[derive(Clone, Debug)]
enum Step {
    Add(i32, u32),
    /// Merge a store fed these adds.
    Merge(Vec<(i32, u32)>),
    Clear,
}

/// Keys at both ends of `i32`, around zero, or anywhere.
fn key() -> impl Strategy<Value = i32> {
    prop_oneof![
        (0i32..8).prop_map(|d| i32::MIN + d),
        (0i32..8).prop_map(|d| i32::MAX - d),
        -6i32..6,
        any::<i32>(),
    ]
}

/// Weights: small, or large enough that one add or two fill a bucket.
fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..4,
        Just(u32::MAX),
        Just(u32::MAX - 1),
        Just(u32::MAX / 2 + 1),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            6 => (key(), weight()).prop_map(|(k, c)| Step::Add(k, c)),
            2 => prop::collection::vec((key(), weight()), 0..6).prop_map(Step::Merge),
            1 => Just(Step::Clear),
        ],
        1..40,
    )
}

/// The union walk of `a` and `b`: the first and the last rank of every
/// bucket of the two stores, counted together as they stand, from either
/// store's side; past them, nothing.
fn union_walk_finds_every_bucket<const N: usize, S: CollapseSide>(
    a: &CollapsingStore<N, S>,
    b: &CollapsingStore<N, S>,
) -> Result<(), TestCaseError> {
    let mut union: BTreeMap<i32, u64> = BTreeMap::new();
    for (k, c) in a.bins().chain(b.bins()) {
        *union.entry(k).or_default() += u64::from(c);
    }
    let mut below = 0u64;
    for (&k, &c) in &union {
        for rank in [below, below + c - 1] {
            prop_assert_eq!(a.key_at_rank_with(b, rank), Some(k), "rank {}", rank);
            prop_assert_eq!(b.key_at_rank_with(a, rank), Some(k), "rank {}", rank);
        }
        below += c;
    }
    prop_assert_eq!(a.key_at_rank_with(b, below), None);
    Ok(())
}

/// Runs `steps` on a store of `N` buckets collapsing on side `S`, checking
/// every read against the model of everything added since the last clear.
fn follows_the_model<const N: usize, S: CollapseSide>(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut store = CollapsingStore::<N, S>::new();
    let mut adds: Vec<(i32, u32)> = Vec::new();
    for step in steps {
        match step {
            Step::Add(k, c) => {
                store.add(*k, *c);
                adds.push((*k, *c));
            }
            Step::Merge(more) => {
                let mut other = CollapsingStore::<N, S>::new();
                for &(k, c) in more {
                    other.add(k, c);
                }
                union_walk_finds_every_bucket(&store, &other)?;
                store.merge(&other);
                adds.extend(more);
            }
            Step::Clear => {
                store.clear();
                adds.clear();
            }
        }
        store_agrees_with_model(&store, &adds)?;
        // Nothing is lost: what the buckets hold and what saturated them.
        let added: u64 = adds.iter().map(|&(_, c)| u64::from(c)).sum();
        prop_assert_eq!(store.total() + store.saturated(), added, "after {:?}", step);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Stores of 1, 2, 3 and 5 buckets, collapsing on either side, hold
    /// exactly what the model says after every step.
    #[test]
    fn tiny_stores_follow_the_model_step_by_step(steps in steps()) {
        follows_the_model::<1, Lowest>(&steps)?;
        follows_the_model::<1, Highest>(&steps)?;
        follows_the_model::<2, Lowest>(&steps)?;
        follows_the_model::<2, Highest>(&steps)?;
        follows_the_model::<3, Lowest>(&steps)?;
        follows_the_model::<3, Highest>(&steps)?;
        follows_the_model::<5, Lowest>(&steps)?;
        follows_the_model::<5, Highest>(&steps)?;
    }
}
