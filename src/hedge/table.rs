//! Per-target latency state in a fixed-capacity table.

use crate::store::Store;
use crate::window::LatencyWindow;
use crate::CubicMapping;

/// One target's latency window and bookkeeping.
#[derive(Clone, Debug)]
pub(crate) struct Target<K, S: Store, B> {
    pub(crate) key: K,
    pub(crate) window: LatencyWindow<CubicMapping, S>,
    pub(crate) last_used: u64,
    /// The target's own budget, when budgets are per target.
    pub(crate) budget: Option<B>,
}

/// Up to `T` targets, found by a linear scan (faster than hashing for the
/// handful of hosts a client talks to), evicting the least recently used
/// when full.
#[derive(Clone, Debug)]
pub(crate) struct Table<K, S: Store, B, const T: usize> {
    targets: heapless::Vec<Target<K, S, B>, T>,
}

impl<K: PartialEq + Copy, S: Store, B, const T: usize> Table<K, S, B, T> {
    pub(crate) const fn new() -> Self {
        Self {
            targets: heapless::Vec::new(),
        }
    }

    /// The index of `key`'s entry, if present.
    #[inline]
    pub(crate) fn find(&self, key: &K) -> Option<usize> {
        self.targets.iter().position(|t| t.key == *key)
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut Target<K, S, B>> {
        self.targets.get_mut(index)
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Target<K, S, B>> {
        self.targets.get(index)
    }

    /// Inserts `target`, evicting the least recently used entry if the table
    /// is full. Returns the new entry's index and whether it evicted.
    pub(crate) fn insert(&mut self, target: Target<K, S, B>) -> (usize, bool) {
        match self.targets.push(target) {
            Ok(()) => (self.targets.len().saturating_sub(1), false),
            Err(target) => {
                let victim = self
                    .targets
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, t)| t.last_used)
                    .map_or(0, |(i, _)| i);
                match self.targets.get_mut(victim) {
                    Some(slot) => {
                        *slot = target;
                        (victim, true)
                    }
                    // T == 0: nothing can be stored.
                    None => (usize::MAX, false),
                }
            }
        }
    }

    /// Drops every entry unused since before `cutoff`; returns how many.
    pub(crate) fn evict_unused_since(&mut self, cutoff: u64) -> usize {
        let before = self.targets.len();
        self.targets.retain(|t| t.last_used >= cutoff);
        before.saturating_sub(self.targets.len())
    }

    pub(crate) fn len(&self) -> usize {
        self.targets.len()
    }
}
