//! Placeholder until the sketch benchmarks land.
fn main() {}
