//! Allocation-free, clock-free building blocks for adaptive hedged requests.
//!
//! A *straggler* — a request that is slow but not failed — should be raced,
//! not retried: send a second copy once the first is slower than usual, keep
//! whichever answers first, cancel the other. This crate gives the pieces,
//! for `no_std` targets and servers alike:
//!
//! * [`DDSketch`]: a quantile sketch with a relative-error guarantee α, in
//!   fixed memory (4 KiB by default), a few nanoseconds per
//!   [`add`](DDSketch::add);
//! * [`window::LatencyWindow`]: sketches of exact and censored samples in
//!   two halves rotated by caller time and sample count, queried as one with
//!   Kaplan–Meier's product-limit estimator, with an O(1) cached quantile;
//! * [`budget`]: lock-free token budgets that cap hedges to a share of
//!   traffic;
//! * [`hedge::Hedger`]: the per-request state machine — when to hedge,
//!   whether one may, who won, whom to cancel — and
//!   [`hedge::SharedHedger`], the same machine on `&self` for every thread
//!   of a runtime, without a lock anyone waits for;
//! * with `std`, `guard::RequestGuard`, a request that gives itself up when
//!   dropped; with `tower`, `tower::HedgeLayer`, hedging for any
//!   `tower::Service` on tokio timers.
//!
//! The crate never reads a clock, never allocates and never blocks: every
//! call that needs time takes the caller's monotonic nanoseconds.
//!
//! ```
//! use tailguard::hedge::{Attempt, HedgeConfig, Hedger, Idempotency, NoHedge, Plan};
//!
//! let mut hedger = Hedger::new(HedgeConfig::DEFAULT)?;
//! let mut request = hedger.start((), 0, Idempotency::Idempotent);
//! //                ^^^^^ tens of ns: a table look-up, a budget deposit
//! assert_eq!(request.plan(), Plan::NoHedge(NoHedge::ColdStart)); // no data yet
//! assert_eq!(request.next_timer(), None); // so no timer to arm
//! hedger.on_commit(&mut request, Attempt::PRIMARY, 4_000_000);
//! //     ^^^^^^^^^ records 4 ms in the window: a sketch add
//! # Ok::<(), tailguard::hedge::ConfigError>(())
//! ```
//!
//! # Panics and error handling
//! No function panics on any input. Invalid configuration is rejected at
//! construction with a typed error that names the cause and the fix
//! ([`MappingError`], [`budget::BudgetError`], [`hedge::ConfigError`]).
//! Bad samples (NaN, ±∞, out of range, negative in an unsigned sketch) are
//! refused with [`SketchError`] and change nothing. Out-of-order events
//! (a second commit, a commit of an attempt never sent, a timer after the
//! answer) get a documented "late"/"unknown"/"ignored" answer. Timestamps
//! that go backwards, repeat or jump are survived and recovered from: a
//! latency that cannot be real is refused and counted, windows keep
//! rotating, no table entry is pinned (see [`hedge`]'s *Time*). A request
//! dropped mid-flight releases what it held on its own. Counters saturate.
//!
//! # Accuracy
//! A sketch with relative accuracy α answers every quantile `x̂` within α
//! of the exact lower quantile `x = sorted[⌊q·(n−1)⌋]`, whatever the
//! mapping, exactly in floating point: `|x̂ − x| ≤ α·|x|` holds in real
//! arithmetic on the doubles, with no rounding slack (the buckets are
//! narrower than γ = (1+α)/(1−α) by a proven margin of about 10⁻¹¹). With
//! `N` buckets it covers values from `v` to about `v · γ^N`; at α = 1 % the
//! default 1024 buckets span 1 µs to about 10 minutes (in ns). Past that
//! range the lowest buckets collapse: [`DDSketch::collapse`] says so and
//! from which value up the guarantee still holds; quantiles below it may be
//! over-estimated by any amount, and under-estimated by α at most. What a
//! sketch holds depends only
//! on the samples it was given, not their order, so merging sketches gives
//! exactly the sketch of the combined stream, collapse and saturation
//! included (the float sum up to the rounding of its additions).
//!
//! # Limitations
//! * Bucket counters are `u32`: a bucket that receives more than 4·10⁹
//!   samples saturates (reported by [`DDSketch::saturated`]).
//! * On 32-bit targets 64-bit atomics are emulated by `portable-atomic`
//!   with a lock; see [`budget`].
//! * A [`hedge::Hedger`] takes `&mut self` for events; share a
//!   [`hedge::SharedHedger`] instead (targets are then indexes `0..T`), or
//!   give each thread its own and share the budget (see [`hedge`]'s
//!   *Concurrency*).
//! * The crate cannot know whether a request is idempotent: the caller says
//!   so on every [`hedge::Hedger::start`].
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Panic freedom: every possible panic path in the library is a lint error in
// CI; the few `allow`s each carry a comment proving the case impossible.
#![cfg_attr(
    not(test),
    warn(
        clippy::panic,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "std")]
extern crate std;

pub mod budget;
#[cfg(feature = "std")]
pub mod clock;
#[cfg(feature = "std")]
pub mod guard;
pub mod hedge;
pub mod mapping;
mod sketch;
pub mod store;
mod sync;
#[cfg(feature = "tower")]
pub mod tower;
mod wide;
pub mod window;
pub mod wire;

pub use budget::{Budget, BudgetError, BudgetStats, HedgeBudget, RatioBudget, TokenBucket};
pub use mapping::{
    CubicMapping, IndexMapping, LinearMapping, LogLinearMapping, LogarithmicMapping, MappingError,
};
pub use sketch::{Collapsed, DDSketch, FromRelativeAccuracy, SignedSketch, SketchError};
pub use store::{CollapsingHighestStore, CollapsingLowestStore, NoStore, Store};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
