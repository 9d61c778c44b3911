//! A store of capacity zero, for sketches that take no negative values.

use super::{Store, StoreCollapse};

/// A store that holds nothing and takes no memory.
///
/// As the negative store of a [`DDSketch`](crate::DDSketch) (the default) it
/// makes the sketch reject negative values with
/// [`SketchError::NegativeValue`](crate::SketchError::NegativeValue) before
/// they reach the store: latencies are never negative, and this halves the
/// sketch's size. Its own [`add`](Store::add), which the sketch never calls,
/// discards what it is given.
///
/// It cannot be the positive store: a sketch (or a window) whose positive
/// store has [`CAPACITY`](Store::CAPACITY) 0 would take positive values and
/// count none, so building one fails to compile (when `with_mapping` is
/// instantiated: a `cargo build` error, which `cargo check` does not see).
///
/// ```compile_fail,E0080
/// use tailguard::{CollapsingLowestStore, CubicMapping, DDSketch, NoStore};
///
/// let s = DDSketch::<CubicMapping, NoStore, CollapsingLowestStore<64>>::with_accuracy(0.01);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoStore;

impl Store for NoStore {
    const CAPACITY: usize = 0;

    fn add(&mut self, _key: i32, _count: u32) {}

    fn total(&self) -> u64 {
        0
    }

    fn saturated(&self) -> u64 {
        0
    }

    fn collapse(&self) -> Option<StoreCollapse> {
        None
    }

    fn key_range(&self) -> Option<(i32, i32)> {
        None
    }

    fn key_at_rank(&self, _rank: u64) -> Option<i32> {
        None
    }

    fn count_at_or_below(&self, _key: i32) -> u64 {
        0
    }

    fn count_of(&self, _key: i32) -> u32 {
        0
    }

    fn bins(&self) -> impl DoubleEndedIterator<Item = (i32, u32)> + '_ {
        core::iter::empty()
    }

    fn clear(&mut self) {}
}
