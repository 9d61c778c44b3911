//! One row per strategy, printed in the simulation's table layout.

use hdrhistogram::Histogram;
use tailguard::hedge::HedgeStats;

/// User-visible latency quantiles, in ms.
#[derive(Clone, Copy, Debug)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Quantiles {
    /// From a histogram of µs.
    pub fn of(h: &Histogram<u64>) -> Self {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        Self {
            p50: ms(0.5),
            p90: ms(0.9),
            p95: ms(0.95),
            p99: ms(0.99),
            p999: ms(0.999),
        }
    }
}

/// What one strategy measured.
pub struct Row {
    pub name: String,
    pub q: Quantiles,
    /// Requests completed.
    pub requests: u64,
    /// Requests that failed (none expected).
    pub errors: u64,
    /// Attempts the servers received per request, minus one.
    pub extra_load: f64,
    /// Server busy time per request, ms.
    pub work_ms: f64,
    /// Requests per second of the closed loop.
    pub rps: f64,
    /// The hedger's counters, where the strategy has them.
    pub stats: Option<HedgeStats>,
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

/// The table and its notes, to stdout; `model_mean_ms` is the latency
/// model's mean service time of an attempt, to compare with the servers'.
pub fn print(rows: &[Row], model_mean_ms: f64) {
    println!("| strategy | p50 | p90 | p95 | p99 | p99.9 | extra load | backend work |");
    println!("|---|---|---|---|---|---|---|---|");
    let Some(base) = rows.first() else { return };
    for r in rows {
        let q = &r.q;
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:+.1} % |",
            r.name,
            q.p50,
            q.p90,
            q.p95,
            q.p99,
            q.p999,
            pct(r.extra_load),
            100.0 * (r.work_ms / base.work_ms - 1.0)
        );
    }
    println!();
    for r in rows.iter().skip(1) {
        let s = r.stats.map_or(String::new(), |s| {
            format!(
                ", {} hedges sent, {} hedge wins, {} budget denials, {} cold starts",
                s.hedges_sent, s.hedge_wins, s.budget_denials, s.cold_starts
            )
        });
        println!(
            "- {}: p99 {:.1} % below {}, extra load {}{s}",
            r.name,
            100.0 * (1.0 - r.q.p99 / base.q.p99),
            base.name,
            pct(r.extra_load)
        );
    }
    for r in rows {
        let errors = if r.errors == 0 {
            String::new()
        } else {
            format!(", {} FAILED", r.errors)
        };
        println!(
            "- {}: {} requests at {:.0} requests/s, servers busy {:.2} ms an attempt (the model's mean: {model_mean_ms:.2} ms){errors}",
            r.name,
            r.requests,
            r.rps,
            r.work_ms / (1.0 + r.extra_load)
        );
    }
    println!();
}
