//! tailguard: allocation-free, clock-free building blocks for adaptive
//! hedged requests.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "std")]
extern crate std;

pub mod budget;
mod sync;

pub use budget::{Budget, BudgetError, BudgetStats, HedgeBudget, RatioBudget, TokenBucket};
