//! Placeholder until the budget benchmarks land.
fn main() {}
