//! Differential fuzzing of the collapsing stores against an exact model.
//!
//! A store's contents depend only on the multiset of keys it was given (see
//! `tests/store_model.rs`): with `lo` and `hi` the extreme keys, nothing
//! folds while `hi − lo < N`; otherwise collapsing-lowest keeps
//! `hi − N + 1 ..= hi` and folds smaller keys into its lowest, and
//! collapsing-highest keeps `lo ..= lo + N − 1` and folds larger keys into
//! its highest. A bucket holds at most `u32::MAX` and the rest is saturated;
//! the collapse report counts folded samples up to what the edge bucket
//! holds. After every operation, bins, totals, saturation, the collapse
//! report, ranks and counts must match the model, for a capacity that is a
//! power of two (the slot is a mask) and one that is not (a remainder).
//! Before each merge, the union walk of the two stores must find every
//! bucket of both, counted together, at its ranks.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use tailguard::store::{Collapse, CollapseSide, CollapsingStore, Highest, Lowest, StoreCollapse};
use tailguard::Store;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A key near one of a few anchors (both ends of `i32`, zero) or any.
    Add(Anchor, u8, u8),
    /// A weight near `u32::MAX` or its half: buckets saturate.
    AddHeavy(Anchor, u8, bool, u8),
    /// Merge a store fed these keys.
    Merge(Vec<(Anchor, u8, u8)>),
    Clear,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Anchor {
    Min,
    Zero,
    Max,
    Any(i32),
}

fn key(anchor: Anchor, offset: u8) -> i32 {
    let d = i32::from(offset);
    match anchor {
        Anchor::Min => i32::MIN + d,
        Anchor::Zero => d - 128,
        Anchor::Max => i32::MAX - d,
        Anchor::Any(k) => k.saturating_add(d),
    }
}

const MAX: u64 = u32::MAX as u64;

/// Bins, saturated samples and collapse report of a store fed `keys`.
fn model(
    side: Collapse,
    n: usize,
    keys: &BTreeMap<i32, u64>,
) -> (Vec<(i32, u32)>, u64, Option<StoreCollapse>) {
    let (Some((&lo, _)), Some((&hi, _))) = (keys.first_key_value(), keys.last_key_value()) else {
        return (vec![], 0, None);
    };
    let n = n as i64;
    let saturated = |b: &BTreeMap<i32, u64>| b.values().map(|&c| c.saturating_sub(MAX)).sum();
    if i64::from(hi) - i64::from(lo) < n {
        let bins = keys.iter().map(|(&k, &c)| (k, c.min(MAX) as u32)).collect();
        return (bins, saturated(keys), None);
    }
    let (edge, boundary) = match side {
        Collapse::Lowest => {
            let e = (i64::from(hi) - n + 1) as i32;
            (e, e + 1)
        }
        Collapse::Highest => {
            let e = (i64::from(lo) + n - 1) as i32;
            (e, e)
        }
    };
    let mut folded: BTreeMap<i32, u64> = BTreeMap::new();
    let mut samples = 0;
    for (&k, &c) in keys {
        let kept = match side {
            Collapse::Lowest => k.max(edge),
            Collapse::Highest => k.min(edge),
        };
        if kept != k {
            samples += c;
        }
        *folded.entry(kept).or_default() += c;
    }
    let samples = samples.min(folded[&edge].min(MAX));
    (
        folded
            .iter()
            .map(|(&k, &c)| (k, c.min(MAX) as u32))
            .collect(),
        saturated(&folded),
        Some(StoreCollapse {
            samples,
            boundary,
            side,
        }),
    )
}

struct Case<const N: usize, S: CollapseSide> {
    store: CollapsingStore<N, S>,
}

impl<const N: usize, S: CollapseSide> Case<N, S> {
    fn check(&self, keys: &BTreeMap<i32, u64>) {
        let (bins, saturated, collapse) = model(S::SIDE, N, keys);
        assert_eq!(self.store.bins().collect::<Vec<_>>(), bins);
        assert_eq!(self.store.collapse(), collapse);
        assert_eq!(self.store.saturated(), saturated);
        let total: u64 = bins.iter().map(|&(_, c)| u64::from(c)).sum();
        assert_eq!(self.store.total(), total);
        assert_eq!(
            self.store.key_range(),
            bins.first().zip(bins.last()).map(|(a, b)| (a.0, b.0))
        );
        let mut below = 0u64;
        for &(k, c) in &bins {
            assert_eq!(self.store.count_of(k), c);
            assert_eq!(self.store.key_at_rank(below), Some(k));
            below += u64::from(c);
            assert_eq!(self.store.key_at_rank(below - 1), Some(k));
            assert_eq!(self.store.count_at_or_below(k), below);
        }
        assert_eq!(self.store.key_at_rank(total), None);
    }
}

/// The union walk a rotating window does, before merging, against the two
/// stores' buckets counted together as they stand (not collapsed further):
/// the first and last rank of every bucket, from both stores' side. Keys at
/// both ends of `i32` put billions of empty keys between the two ranges,
/// which the walk must step over.
fn union_walk<const N: usize, S: CollapseSide>(
    a: &CollapsingStore<N, S>,
    b: &CollapsingStore<N, S>,
) {
    let mut union: BTreeMap<i32, u64> = BTreeMap::new();
    for (k, c) in a.bins().chain(b.bins()) {
        *union.entry(k).or_default() += u64::from(c);
    }
    let mut below = 0u64;
    for (&k, &c) in &union {
        for rank in [below, below + c - 1] {
            assert_eq!(a.key_at_rank_with(b, rank), Some(k), "rank {rank}");
            assert_eq!(b.key_at_rank_with(a, rank), Some(k), "rank {rank}");
        }
        below += c;
    }
    assert_eq!(a.key_at_rank_with(b, below), None);
}

fn run<const N: usize, S: CollapseSide>(ops: &[Op]) {
    let mut case = Case::<N, S> {
        store: CollapsingStore::new(),
    };
    let mut keys: BTreeMap<i32, u64> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Add(a, d, c) => {
                let k = key(*a, *d);
                case.store.add(k, u32::from(*c));
                if *c > 0 {
                    *keys.entry(k).or_default() += u64::from(*c);
                }
            }
            Op::AddHeavy(a, d, half, less) => {
                let k = key(*a, *d);
                let c = if *half { u32::MAX / 2 } else { u32::MAX } - u32::from(*less);
                case.store.add(k, c);
                *keys.entry(k).or_default() += u64::from(c);
            }
            Op::Merge(adds) => {
                let mut other = CollapsingStore::<N, S>::new();
                for &(a, d, c) in adds {
                    let k = key(a, d);
                    other.add(k, u32::from(c));
                    if c > 0 {
                        *keys.entry(k).or_default() += u64::from(c);
                    }
                }
                union_walk(&case.store, &other);
                case.store.merge(&other);
            }
            Op::Clear => {
                case.store.clear();
                keys.clear();
            }
        }
        case.check(&keys);
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let ops = &ops[..ops.len().min(64)];
    run::<16, Lowest>(ops);
    run::<16, Highest>(ops);
    run::<7, Lowest>(ops);
    run::<7, Highest>(ops);
});
