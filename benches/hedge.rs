//! Placeholder until the hedge benchmarks land.
fn main() {}
