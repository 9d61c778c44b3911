//! The one atomics facade of the crate.
//!
//! Every module takes its atomics from here, so switching the backend (for a
//! loom model check, or a target without native compare-and-swap) is a change
//! in one file. `portable-atomic` compiles to the native instructions where
//! the target has them and to its fallback elsewhere; on targets without any
//! compare-and-swap (`thumbv6m-none-eabi`, `riscv32imc-unknown-none-elf`) the
//! final binary enables `portable-atomic/critical-section` (see the crate
//! docs), never this library.

#[allow(unused_imports)]
pub(crate) use portable_atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
