//! A clock the test sets, shared by copies: for guards whose time the
//! test moves (forward, or back).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tailguard::clock::Clock;

#[derive(Clone, Debug)]
pub struct TestClock(pub Arc<AtomicU64>);

impl Clock for TestClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Relaxed)
    }
}
