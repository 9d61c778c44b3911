//! tailguard: allocation-free, clock-free building blocks for adaptive
//! hedged requests.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "std")]
extern crate std;

pub mod budget;
pub mod hedge;
pub mod mapping;
mod sketch;
pub mod store;
mod sync;
pub mod window;

pub use budget::{Budget, BudgetError, BudgetStats, HedgeBudget, RatioBudget, TokenBucket};
pub use mapping::{CubicMapping, IndexMapping, LinearMapping, LogarithmicMapping, MappingError};
pub use sketch::{Collapsed, DDSketch, FromRelativeAccuracy, SignedSketch, SketchError};
pub use store::{CollapsingHighestStore, CollapsingLowestStore, NoStore, Store};
