//! A deterministic discrete-event simulation of hedged requests driving the
//! real `Hedger`, budgets and sketches (issue #5).
//!
//! ```text
//! cargo run --release --example simulate -- [--scenario NAME] [--requests N]
//!     [--seed S] [--csv DIR]
//! ```
//! Scenarios: `article`, `drift`, `outage`, `streaming`, `fan-out`, `all`
//! (default). Virtual time only: no sleeping, no threads; the same seed gives
//! the same output.

mod engine;
mod scenarios;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use engine::{Quantiles, MS, SEC};
use scenarios::{Phased, Row};

const SCENARIOS: [&str; 5] = ["article", "drift", "outage", "streaming", "fan-out"];

/// The Go reference's published results (DESIGN.md), for the article table.
const REFERENCE: [(&str, [f64; 5], f64); 4] = [
    ("no hedging", [5.1, 9.0, 18.8, 65.0, 103.8], 0.0),
    ("static 10 ms", [5.0, 9.0, 13.3, 17.5, 61.2], 7.7),
    ("static 50 ms", [5.0, 9.0, 16.5, 54.9, 59.7], 2.1),
    ("adaptive p90", [5.0, 8.9, 12.3, 17.3, 63.5], 8.9),
];

struct Args {
    scenario: String,
    requests: u64,
    seed: u64,
    csv: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scenario: "all".to_owned(),
        requests: 50_000,
        seed: 42,
        csv: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--scenario" => args.scenario = value()?,
            "--requests" => {
                args.requests = value()?.parse().map_err(|e| format!("--requests: {e}"))?;
            }
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--csv" => args.csv = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                return Err(format!(
                    "usage: simulate [--scenario all|{}] [--requests N] [--seed S] [--csv DIR]",
                    SCENARIOS.join("|")
                ))
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    if args.scenario != "all" && !SCENARIOS.contains(&args.scenario.as_str()) {
        return Err(format!(
            "unknown scenario {:?}; one of all, {}",
            args.scenario,
            SCENARIOS.join(", ")
        ));
    }
    if args.requests == 0 {
        return Err("--requests must be at least 1".to_owned());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(dir) = &args.csv {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let mut csv = Csv {
        dir: args.csv.clone(),
        failed: false,
    };
    let run = |name: &str| args.scenario == "all" || args.scenario == name;
    let n = args.requests;
    // Drift and outage are time-based: phases of 30 s (drift) and 10 s
    // (outage) of virtual time at the default 50,000 requests, scaled with
    // --requests (at least 2 s).
    let phase_ns = (n * 10 * SEC / 50_000).max(2 * SEC) / SEC * SEC;
    let drift_phase_ns = 3 * phase_ns;
    let started = std::time::Instant::now();
    if run("article") {
        eprintln!("[simulate] article: {n} requests × 7 strategies …");
        print_article(&scenarios::article(n, args.seed), n, &mut csv);
    }
    if run("drift") {
        eprintln!("[simulate] drift: 3 phases of {} s …", drift_phase_ns / SEC);
        print_drift(&scenarios::drift(drift_phase_ns, args.seed), &mut csv);
    }
    if run("outage") {
        eprintln!("[simulate] outage: 3 phases of {} s …", phase_ns / SEC);
        print_outage(
            &scenarios::outage(phase_ns, &scenarios::sweep_delays(), args.seed),
            &mut csv,
        );
    }
    if run("streaming") {
        eprintln!("[simulate] streaming: {n} requests × 6 strategies …");
        print_streaming(&scenarios::streaming(n, args.seed), n, &mut csv);
    }
    if run("fan-out") {
        eprintln!(
            "[simulate] fan-out: n = 1, 10, 100, about {} backend requests each …",
            2 * n
        );
        print_fan_out(
            &scenarios::fan_out(&[1, 10, 100], 2 * n, args.seed),
            &mut csv,
        );
    }
    eprintln!(
        "[simulate] done in {:.1} s (wall clock)",
        started.elapsed().as_secs_f64()
    );
    if csv.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

struct Csv {
    dir: Option<PathBuf>,
    failed: bool,
}

impl Csv {
    fn write(&mut self, name: &str, body: &str) {
        let Some(dir) = &self.dir else { return };
        let path = dir.join(name);
        match std::fs::write(&path, body) {
            Ok(()) => eprintln!("[simulate] wrote {}", path.display()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                self.failed = true;
            }
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

fn quantile_cells(q: &Quantiles) -> String {
    format!(
        "{:.1} | {:.1} | {:.1} | {:.1} | {:.1}",
        q.p50, q.p90, q.p95, q.p99, q.p999
    )
}

fn summary_csv(rows: &[Row]) -> String {
    let mut s =
        "strategy,count,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,extra_load,work_ms_per_request\n"
            .to_owned();
    for r in rows {
        let q = &r.q;
        let _ = writeln!(
            s,
            "\"{}\",{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.5},{:.4}",
            r.name, q.count, q.p50, q.p90, q.p95, q.p99, q.p999, r.extra_load, r.work_ms
        );
    }
    s
}

fn latencies_csv(rows: &[Row]) -> String {
    let mut s = "strategy,start_ms,latency_ms\n".to_owned();
    for r in rows {
        for u in &r.outcome.users {
            let _ = writeln!(
                s,
                "\"{}\",{:.3},{:.3}",
                r.name,
                u.start_ns as f64 / MS as f64,
                u.latency_ns as f64 / MS as f64
            );
        }
    }
    s
}

fn per_second_csv(rows: &[Row]) -> String {
    let mut s = "strategy,second,requests,hedges,delay_ms\n".to_owned();
    for r in rows {
        for (t, sec) in r.outcome.per_second.iter().enumerate() {
            let delay = sec
                .delay_ns
                .map_or(String::new(), |d| format!("{:.3}", d as f64 / MS as f64));
            let _ = writeln!(
                s,
                "\"{}\",{t},{},{},{delay}",
                r.name, sec.requests, sec.hedges
            );
        }
    }
    s
}

fn print_article(a: &scenarios::Article, n: u64, csv: &mut Csv) {
    println!(
        "## article: {n} requests, {} workers, lognormal(5 ms, 2 ms), 5 % of attempts ×10\n",
        scenarios::WORKERS
    );
    println!("| strategy | p50 | p90 | p95 | p99 | p99.9 | extra load | backend work |");
    println!("|---|---|---|---|---|---|---|---|");
    let none_work = a.rows[0].work_ms;
    let mut shown = Vec::new();
    for r in &a.rows {
        println!(
            "| {} | {} | {} | {:+.1} % |",
            r.name,
            quantile_cells(&r.q),
            pct(r.extra_load),
            100.0 * (r.work_ms / none_work - 1.0)
        );
        let reference = REFERENCE
            .iter()
            .find(|(name, ..)| r.name.starts_with(name) && !shown.contains(name));
        if let Some((name, q, load)) = reference {
            shown.push(name);
            println!(
                "| *published (Go reference's simulation): {name}* | *{:.1}* | *{:.1}* | *{:.1}* | *{:.1}* | *{:.1}* | *{load:.1} %* | |",
                q[0], q[1], q[2], q[3], q[4]
            );
        }
    }
    let none = a.rows[0].q.p99;
    println!();
    for r in a.rows.iter().skip(1) {
        let s = r.stats.map_or(String::new(), |s| {
            format!(
                ", {} hedge wins, {} budget denials, {} cold starts",
                s.hedge_wins, s.budget_denials, s.cold_starts
            )
        });
        println!(
            "- {}: p99 {:.1} % below no hedging, extra load {}{s}",
            r.name,
            100.0 * (1.0 - r.q.p99 / none),
            pct(r.extra_load)
        );
    }
    println!(
        "- measured throughput without hedging: {} requests/s\n",
        a.measured_rps
    );
    csv.write("article.csv", &summary_csv(&a.rows));
    csv.write("article_latencies.csv", &latencies_csv(&a.rows));
}

fn print_phases(p: &Phased) {
    println!("| strategy | phase | p50 | p90 | p95 | p99 | p99.9 | extra load |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &p.rows {
        for (i, (phase, ..)) in p.phases.iter().enumerate() {
            println!(
                "| {} | {phase} | {} | {} |",
                r.name,
                quantile_cells(&p.quantiles(r, i)),
                pct(p.extra_load(r, i))
            );
        }
    }
    println!();
}

fn phased_csv(p: &Phased) -> String {
    let mut s = "strategy,phase,count,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,extra_load\n".to_owned();
    for r in &p.rows {
        for (i, (phase, ..)) in p.phases.iter().enumerate() {
            let q = p.quantiles(r, i);
            let _ = writeln!(
                s,
                "\"{}\",{phase},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.5}",
                r.name,
                q.count,
                q.p50,
                q.p90,
                q.p95,
                q.p99,
                q.p999,
                p.extra_load(r, i)
            );
        }
    }
    s
}

fn print_drift(p: &Phased, csv: &mut Csv) {
    let phase_s = p.phases[0].2 / SEC;
    println!(
        "## drift: backend 3× slower from {phase_s} s to {} s (virtual), window rotation {} s\n",
        2 * phase_s,
        scenarios::FAST_ROTATION_NS / SEC
    );
    print_phases(p);
    csv.write("drift.csv", &phased_csv(p));
    csv.write("drift_per_second.csv", &per_second_csv(&p.rows));
}

fn print_outage(p: &Phased, csv: &mut Csv) {
    let phase_s = p.phases[0].2 / SEC;
    println!(
        "## outage: every attempt 10× slower from {phase_s} s to {} s (virtual), window rotation {} s\n",
        2 * phase_s,
        scenarios::FAST_ROTATION_NS / SEC
    );
    print_phases(p);
    let ours = &p.rows[1];
    let go = &p.rows[2];
    println!("Per second: our 10 % ratio budget allows 10 % of that second's requests plus at most 10 banked tokens;");
    println!(
        "the Go reference's bucket allows its fixed rate (plus its burst) whatever the traffic.\n"
    );
    println!("| second | requests (ours) | hedges (ours) | allowance (ours) | delay ms (ours) | requests (Go) | hedges (Go) | allowance (Go) |");
    println!("|---|---|---|---|---|---|---|---|");
    let go_rate = p.go_rps / 10;
    for t in 0..ours
        .outcome
        .per_second
        .len()
        .max(go.outcome.per_second.len())
    {
        let o = ours.outcome.per_second.get(t).copied().unwrap_or_default();
        let g = go.outcome.per_second.get(t).copied().unwrap_or_default();
        let allowance = o.requests / 10;
        println!(
            "| {t} | {} | {} | {}{} | {} | {} | {} | {go_rate} |",
            o.requests,
            o.hedges,
            allowance,
            if o.hedges > allowance {
                " + banked"
            } else {
                ""
            },
            o.delay_ns.map_or("cold".to_owned(), |d| format!(
                "{:.1}",
                d as f64 / MS as f64
            )),
            g.requests,
            g.hedges,
        );
    }
    println!();
    csv.write("outage.csv", &phased_csv(p));
    csv.write("outage_per_second.csv", &per_second_csv(&p.rows));
}

fn print_streaming(rows: &[Row], n: u64, csv: &mut Csv) {
    println!("## streaming: {n} requests, {} workers, headers ≈ 1 ms, first token 80 % lognormal(15, 3) ms + 20 % lognormal(200, 25) ms\n", scenarios::WORKERS);
    println!("Delay = 1.5 × the median of the calibration signal; budget 100 % of traffic unless noted. Latency = time to first token (ms).\n");
    println!("| strategy | p50 | p90 | p95 | p99 | p99.9 | extra load | backend work |");
    println!("|---|---|---|---|---|---|---|---|");
    let none_work = rows[0].work_ms;
    for r in rows {
        println!(
            "| {} | {} | {} | {:+.1} % |",
            r.name,
            quantile_cells(&r.q),
            pct(r.extra_load),
            100.0 * (r.work_ms / none_work - 1.0)
        );
    }
    println!();
    csv.write("streaming.csv", &summary_csv(rows));
}

fn print_fan_out(widths: &[scenarios::FanOut], csv: &mut Csv) {
    println!("## fan-out: each user request waits for n backends; 1 % of attempts ×10\n");
    println!("| n | P(≥ 1 slow) = 1 − (1 − p)ⁿ | measured | strategy | p50 | p90 | p95 | p99 | p99.9 | extra load |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut s = "n,strategy,users,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,extra_load\n".to_owned();
    for f in widths {
        for r in &f.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                f.n,
                pct(f.predicted_any_slow()),
                pct(f.measured_any_slow),
                r.name,
                quantile_cells(&r.q),
                pct(r.extra_load)
            );
            let q = &r.q;
            let _ = writeln!(
                s,
                "{},\"{}\",{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.5}",
                f.n, r.name, q.count, q.p50, q.p90, q.p95, q.p99, q.p999, r.extra_load
            );
        }
    }
    println!();
    csv.write("fan_out.csv", &s);
}
