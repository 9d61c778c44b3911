//! The budget workload shared by `benches/budget.rs` (criterion, time) and
//! `benches/instructions.rs` (gungraun, instruction counts).

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use tailguard::budget::TokenBucket;

const BIG: NonZeroU32 = NonZeroU32::MAX;

/// 1 ns per token, burst 1000: a clock stepping by 1 ns always grants.
pub fn always_granting_bucket() -> TokenBucket {
    TokenBucket::new(u32::MAX, 1_000).expect("valid")
}

/// `governor`'s direct limiter on its default (quanta) clock, with a burst
/// of 2³² − 1 cells: every `check()` in a run is a grant.
pub fn governor() -> DefaultDirectRateLimiter {
    RateLimiter::direct(Quota::per_second(BIG))
}

/// `governor`'s direct limiter on a fake clock.
pub type FakeClockLimiter =
    RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<Nanos>>;

/// The same limiter on a frozen fake clock: the algorithm without the
/// clock read, the like-for-like peer of our caller-timestamped bucket.
pub fn governor_fake_clock() -> FakeClockLimiter {
    RateLimiter::direct_with_clock(Quota::per_second(BIG), FakeRelativeClock::default())
}
