//! A store of capacity zero, for sketches that take no negative values.

use super::{Store, StoreCollapse};

/// A store that holds nothing (8 bytes: a counter of what it refused).
///
/// As the negative store of a [`DDSketch`](crate::DDSketch) (the default) it
/// makes the sketch reject negative values with
/// [`SketchError::NegativeValue`](crate::SketchError::NegativeValue): latencies
/// are never negative, and this halves the sketch's size. Called directly,
/// [`add`](Store::add) counts what it was given as
/// [`saturated`](Store::saturated), so nothing vanishes unseen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoStore {
    dropped: u64,
}

impl Store for NoStore {
    const CAPACITY: usize = 0;

    fn add(&mut self, _key: i32, count: u32) {
        self.dropped = self.dropped.saturating_add(u64::from(count));
    }

    fn total(&self) -> u64 {
        0
    }

    fn saturated(&self) -> u64 {
        self.dropped
    }

    fn collapse(&self) -> Option<StoreCollapse> {
        None
    }

    fn key_at_rank(&self, _rank: u64, _lowest: i32, _highest: i32) -> Option<i32> {
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

    fn clear(&mut self) {
        self.dropped = 0;
    }
}
