//! Sketches written by DataDog's Python library (sketches-py 3.0.1), decoded
//! with [`Convention::Python`]: same counts, every quantile within α of the
//! exact one and as close to what Python itself reported as the two
//! libraries' representatives allow. Fixtures and the script that made them:
//! `tests/fixtures/ddsketch_python/`.

use std::collections::BTreeMap;
use tailguard::mapping::{CubicMapping, LinearMapping, LogarithmicMapping};
use tailguard::store::CollapsingLowestStore;
use tailguard::wire::{decode_ddsketch, Convention, DecodeReport, WireMapping};
use tailguard::SignedSketch;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/ddsketch_python"
);

#[derive(Default)]
struct Expected {
    count: u64,
    zero_count: u64,
    /// `(q, python's answer, exact lower quantile)`.
    quantiles: Vec<(f64, f64, f64)>,
}

fn expected() -> BTreeMap<String, Expected> {
    let text = std::fs::read_to_string(format!("{DIR}/expected.txt")).unwrap();
    let mut all: BTreeMap<String, Expected> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["#count", file, count, zeros] => {
                let e = all.entry(file.to_string()).or_default();
                e.count = count.parse().unwrap();
                e.zero_count = zeros.parse().unwrap();
            }
            [file, q, python, exact] if !file.starts_with('#') => {
                all.entry(file.to_string()).or_default().quantiles.push((
                    q.parse().unwrap(),
                    python.parse().unwrap(),
                    exact.parse().unwrap(),
                ));
            }
            _ => {}
        }
    }
    all
}

type Sketch<M> = SignedSketch<M, CollapsingLowestStore<4096>>;

/// Decodes one fixture and checks it; returns how many quantiles the
/// wrong convention (Go/Java) puts outside α.
fn check<M: WireMapping>(file: &str, e: &Expected, same_representative: bool) -> usize {
    let bytes = std::fs::read(format!("{DIR}/{file}")).unwrap();
    let (s, report): (Sketch<M>, _) = decode_ddsketch(&bytes, Convention::Python).unwrap();
    assert_eq!(report, DecodeReport::default(), "{file}");
    assert_eq!(s.count(), e.count, "{file}");
    assert_eq!(s.zero_count(), e.zero_count, "{file}");
    assert!(s.collapse().is_none() && s.negative_collapse().is_none());
    let alpha = s.mapping().relative_accuracy();
    for &(q, python, exact) in &e.quantiles {
        let ours = s.quantile(q).unwrap().unwrap();
        assert!(
            (ours - exact).abs() <= alpha * exact.abs() * (1.0 + 1e-9),
            "{file} q={q}: ours {ours}, exact {exact}, α={alpha}"
        );
        // Python's representative is `upper · (1 − α)`, ours
        // `lower · (1 + α)`: the same for the exact logarithm, where
        // `upper = lower · γ`; within 2α for interpolated mappings.
        let tol = if same_representative {
            1e-9
        } else {
            2.0 * alpha
        };
        assert!(
            (ours - python).abs() <= tol * python.abs(),
            "{file} q={q}: ours {ours}, Python {python}"
        );
    }
    let (wrong, _): (Sketch<M>, _) = decode_ddsketch(&bytes, Convention::GoJava).unwrap();
    e.quantiles
        .iter()
        .filter(|&&(q, _, exact)| {
            let w = wrong.quantile(q).unwrap().unwrap();
            (w - exact).abs() > alpha * exact.abs() * (1.0 + 1e-9)
        })
        .count()
}

#[test]
fn python_sketches_decode_to_pythons_quantiles() {
    let all = expected();
    assert_eq!(
        all.len(),
        4,
        "fixtures: {:?}",
        all.keys().collect::<Vec<_>>()
    );
    for (file, e) in &all {
        assert!(e.quantiles.len() >= 10);
        let wrong = if file.starts_with("log_") {
            check::<LogarithmicMapping>(file, e, true)
        } else if file.starts_with("cubic_") {
            check::<CubicMapping>(file, e, false)
        } else if file.starts_with("linear_") {
            check::<LinearMapping>(file, e, false)
        } else {
            panic!("unknown fixture {file}")
        };
        // The convention matters: read as Go's, most quantiles break α.
        assert!(wrong >= e.quantiles.len() / 2, "{file}: only {wrong} off");
    }
}
