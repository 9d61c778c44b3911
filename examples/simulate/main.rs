//! A deterministic discrete-event simulation of hedged requests driving the
//! real `Hedger`, budgets and sketches.
//!
//! ```text
//! cargo run --release --example simulate -- [--scenario NAME] [--requests N]
//!     [--seed S] [--csv DIR] [--plot DIR]
//! ```
//! `--help` lists the scenarios and every flag with its default. Virtual
//! time only: no sleeping, no threads; the same seed gives the same output.
//!
//! Scenarios (`--scenario NAME`, all of them by default, in this order):
//! - `article`: 20 closed-loop workers on lognormal(5, 2) ms with 5 % of
//!   attempts ×10; static, adaptive and Go-reference rows against the
//!   published numbers, and the adaptive row with a 10 % budget and with a
//!   fixed cap, to show what the default budget's headroom buys.
//! - `drift`: the backend 3× slower for the middle third of the run.
//! - `outage`: every attempt 10× slower for the middle third; per-second
//!   hedges against what the default budget allows; an oracle row.
//! - `streaming`: LLM time to first token, header vs first-token
//!   calibration.
//! - `fan-out`: each user request waits for n = 1, 10, 100 backends.
//! - `low-rate`: 0.5 requests/s for 20 minutes: how often is the delay
//!   data-driven?
//! - `correlated`: 4 replicas with 50 ms stop-the-world pauses, hedges to
//!   another replica; adaptive rows with the default and a 10 % budget,
//!   and an oracle row.
//! - `heavy-tail`: Pareto (α = 1.5) and bimodal backends; the delay against
//!   the true quantile.
//! - `step`: latency doubles at 30 s; how fast the delay follows.
//! - `many-targets`: 16 targets, a hot key, a hedger with 4 table slots.
//! - `failures`: 20 % of attempts fail fast; failures reported retryable
//!   (the hedger sends the next attempt at once) vs fatal (the request
//!   ends and the caller retries it), against caller retries alone.
//! - `overload`: a backend whose latency rises with its load, at 60 % to
//!   80 % of its capacity; the default bank against a second's, a fixed
//!   cap, and a cap on hedges in flight.
//! - `queued`: replicas that serve their attempts in order, at 30 % to 75 %
//!   of their capacity, cancelled attempts keeping their place; hedges to
//!   a random replica or the next one, with and without a cap in flight;
//!   and servers that drop cancelled attempts, waiting or in service.
//!
//! Sources. *The article* is Prathamesh Bhope's "Stragglers are not
//! failures: how adaptive hedged requests cut p99 latency by 74 %" (title
//! translated: we read it in a Chinese translation), which builds on Dean &
//! Barroso, "The Tail at Scale", CACM 56(2), 2013, and on DDSketch (Masson,
//! Rim & Lee, VLDB 2019). Its reference implementation is the Go library
//! <https://github.com/bhope/hedge>; the article table's *published* rows
//! are what that library's simulation (`go run .`: 50 000 requests, 20
//! workers, lognormal mean 5 ms sd 2 ms, 5 % of attempts ×10) printed, as
//! the article publishes them. The *Go reference* rows are not that code:
//! they rebuild its policy, as the article describes it, from our parts
//! (`engine::GoReference`), and do not reproduce the published adaptive
//! row (see `README.md`, *Simulation*).

mod engine;
mod plot;
mod scenarios;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use engine::{Quantiles, MS, SEC};
use plot::{Chart, Scale, Series};
use plotters::chart::SeriesLabelPosition;
use scenarios::{default_share, Phased, Row, SweepPoint};
use tailguard::budget::RatioBudget;

/// The default budget in words: "15 % ratio budget (a bank of the last
/// 100 ms of earnings, at least 10 tokens)".
fn default_budget() -> String {
    format!(
        "{} ratio budget (a bank of the last 100 ms of earnings, at least {} tokens)",
        default_share(),
        RatioBudget::DEFAULT_FLOOR_TOKENS
    )
}

/// The published simulation results of the article's Go reference
/// implementation, <https://github.com/bhope/hedge> (`go run .`: 50 000
/// requests, 20 workers, lognormal mean 5 ms sd 2 ms, 5 % of requests
/// ×10), for the article table; its rows: p50, p90, p95, p99, p99.9 in ms,
/// and extra load in %.
const REFERENCE: [(&str, [f64; 5], f64); 4] = [
    ("no hedging", [5.1, 9.0, 18.8, 65.0, 103.8], 0.0),
    ("static 10 ms", [5.0, 9.0, 13.3, 17.5, 61.2], 7.7),
    ("static 50 ms", [5.0, 9.0, 16.5, 54.9, 59.7], 2.1),
    ("adaptive p90", [5.0, 8.9, 12.3, 17.3, 63.5], 8.9),
];

/// A deterministic discrete-event simulation of hedged requests, driving
/// tailguard's real Hedger, budgets and sketches in virtual time.
///
/// Each scenario prints a Markdown table per strategy: user-visible
/// latency quantiles (ms), extra load (hedges per request) and
/// scenario-specific columns. "Oracle" rows are the best static delay of a
/// sweep (16 delays from 1 ms to 200 ms, same budget as the adaptive row),
/// chosen by p99.9 (ties by p99) on the same run: a bound no fixed setting
/// beats on that run. Unless a row names its budget, our rows use the
/// default, `RatioBudget::default()` (its share of traffic, with a bank of
/// the last 100 ms of earnings); each scenario prints it. The same seed
/// gives the same output.
#[derive(Parser, Debug)]
#[command(name = "simulate", version)]
struct Args {
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    scenario: Scenario,
    /// Scale of the run: requests of the closed-loop scenarios (article,
    /// streaming; drift and outage phases, fan-out); the open-loop ones
    /// scale their virtual duration (correlated 30 s, heavy-tail 60 s,
    /// many-targets 30 s, failures 30 s at 50000; at least 5 s) and
    /// low-rate its number of clients (10 at 50000; at least 2). step
    /// always runs 90 s. At most 1 000 000, 20× the default (every
    /// scenario then takes about a minute and 0.8 GB).
    #[arg(long, value_name = "N", default_value_t = 50_000,
          value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    requests: u64,
    /// Seed of every random draw.
    #[arg(long, value_name = "S", default_value_t = 42)]
    seed: u64,
    /// Also write CSV files (summaries, latencies, per-second activity,
    /// sweeps, delay series) into DIR, creating it [default: none written].
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Also write SVG plots, named <scenario>-<what>.svg, into DIR, creating
    /// it [default: none written].
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

/// The bound of `--requests`: every run keeps its user requests' latencies
/// (32 bytes each, eight rows in the article), so memory grows with it.
const MAX_REQUESTS: u64 = 1_000_000;

/// The scenarios, in the order `all` runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Every scenario below, in this order
    All,
    /// 20 closed-loop workers, lognormal(5, 2) ms, 5 % of attempts ×10;
    /// static, adaptive and Go-reference rows against published numbers;
    /// adaptive with a 10 % budget and with a fixed cap
    Article,
    /// The backend 3× slower for the middle third of the run
    Drift,
    /// Every attempt 10× slower for the middle third; per-second hedges
    /// against the default budget's allowance; oracle row
    Outage,
    /// LLM time to first token: header vs first-token calibration
    Streaming,
    /// Each user request waits for n = 1, 10, 100 backends
    FanOut,
    /// 0.5 requests/s open loop for 20 min: how often is the delay
    /// data-driven?
    LowRate,
    /// 4 replicas with 50 ms stop-the-world pauses; hedges to another
    /// replica; adaptive with the default and a 10 % budget, oracle row
    Correlated,
    /// Pareto (α = 1.5) and bimodal backends; delay vs the true quantile
    HeavyTail,
    /// Latency doubles at 30 s; how fast the delay follows
    Step,
    /// 16 targets, a hot key, a hedger with 4 table slots
    ManyTargets,
    /// 20 % of attempts fail after ~1 ms, caller retries up to 3 tries:
    /// failures reported retryable vs fatal
    Failures,
    /// A backend whose latency rises with its load, at 60 % to 80 % of its
    /// capacity: the default bank against a second's, a fixed cap, and a
    /// cap on hedges in flight
    Overload,
    /// Replicas that each serve their attempts in order, at 30 % to 75 %
    /// of their capacity; cancelled attempts keep their place, or the
    /// servers drop them
    Queued,
}

impl Scenario {
    fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// `base_s` seconds at 50,000 requests, scaled with `n`, at least 5 s.
fn scaled_ns(base_s: u64, n: u64) -> u64 {
    (base_s.saturating_mul(n) / 50_000).max(5) * SEC
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut out = Output {
        csv: args.csv.clone(),
        plot: args.plot.clone(),
        failed: false,
    };
    for dir in [&args.csv, &args.plot].into_iter().flatten() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let run = |s: Scenario| args.scenario == Scenario::All || args.scenario == s;
    let n = args.requests;
    let seed = args.seed;
    // Drift and outage are time-based: phases of 30 s (drift) and 10 s
    // (outage) of virtual time at the default 50,000 requests, scaled with
    // --requests (at least 2 s).
    let phase_ns = (n * 10 * SEC / 50_000).max(2 * SEC) / SEC * SEC;
    let drift_phase_ns = 3 * phase_ns;
    let sweep = scenarios::sweep_delays();
    let started = std::time::Instant::now();
    let note = |s: Scenario, what: String| eprintln!("[simulate] {}: {what} …", s.name());
    if run(Scenario::Article) {
        note(Scenario::Article, format!("{n} requests × 8 strategies"));
        print_article(&scenarios::article(n, seed), n, &mut out);
    }
    if run(Scenario::Drift) {
        note(
            Scenario::Drift,
            format!("3 phases of {} s", drift_phase_ns / SEC),
        );
        print_drift(&scenarios::drift(drift_phase_ns, seed), &mut out);
    }
    if run(Scenario::Outage) {
        note(
            Scenario::Outage,
            format!("3 phases of {} s, oracle sweep", phase_ns / SEC),
        );
        print_outage(&scenarios::outage(phase_ns, &sweep, seed), &mut out);
    }
    if run(Scenario::Streaming) {
        note(Scenario::Streaming, format!("{n} requests × 6 strategies"));
        print_streaming(&scenarios::streaming(n, seed), n, &mut out);
    }
    if run(Scenario::FanOut) {
        note(
            Scenario::FanOut,
            format!("n = 1, 10, 100, about {} backend requests each", 2 * n),
        );
        print_fan_out(&scenarios::fan_out(&[1, 10, 100], 2 * n, seed), &mut out);
    }
    if run(Scenario::LowRate) {
        let clients = usize::try_from(n / 5_000).unwrap_or(usize::MAX).max(2);
        note(
            Scenario::LowRate,
            format!("{clients} clients × 20 virtual minutes"),
        );
        print_low_rate(&scenarios::low_rate(clients, &sweep, seed), &mut out);
    }
    if run(Scenario::Correlated) {
        let params = scenarios::CorrelatedParams::new(scaled_ns(30, n));
        note(
            Scenario::Correlated,
            format!("{} s of virtual time", params.run_ns / SEC),
        );
        print_correlated(&scenarios::correlated(params, &sweep, seed), &mut out);
    }
    if run(Scenario::HeavyTail) {
        let run_ns = scaled_ns(60, n);
        note(
            Scenario::HeavyTail,
            format!("2 backends × {} s", run_ns / SEC),
        );
        print_heavy_tail(
            &scenarios::heavy_tail(run_ns, &sweep, scenarios::TRUTH_DRAWS, seed),
            run_ns,
            &mut out,
        );
    }
    if run(Scenario::Step) {
        note(Scenario::Step, "90 s of virtual time".to_owned());
        let step = scenarios::step(
            scenarios::STEP_AT_NS,
            60 * SEC,
            scenarios::TRUTH_DRAWS,
            seed,
        );
        print_step(&step, &mut out);
    }
    if run(Scenario::ManyTargets) {
        let run_ns = scaled_ns(30, n);
        note(
            Scenario::ManyTargets,
            format!("{} s of virtual time", run_ns / SEC),
        );
        print_many_targets(
            &scenarios::many_targets(run_ns, &sweep, seed),
            run_ns,
            &mut out,
        );
    }
    if run(Scenario::Failures) {
        let run_ns = scaled_ns(30, n);
        note(
            Scenario::Failures,
            format!("{} s of virtual time, oracle sweep", run_ns / SEC),
        );
        print_failures(&scenarios::failures(run_ns, &sweep, seed), &mut out);
    }
    if run(Scenario::Overload) {
        let run_ns = scaled_ns(20, n);
        note(
            Scenario::Overload,
            format!("4 loads × {} s of virtual time", run_ns / SEC),
        );
        print_overload(
            &scenarios::overload(&[0.6, 0.7, 0.75, 0.8], run_ns, seed),
            run_ns,
            &mut out,
        );
    }
    if run(Scenario::Queued) {
        let run_ns = scaled_ns(20, n);
        note(
            Scenario::Queued,
            format!("4 loads × {} s of virtual time", run_ns / SEC),
        );
        print_queued(
            &scenarios::queued(&[0.3, 0.45, 0.6, 0.75], run_ns, seed),
            run_ns,
            &mut out,
        );
    }
    eprintln!(
        "[simulate] done in {:.1} s (wall clock)",
        started.elapsed().as_secs_f64()
    );
    if out.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Where CSV files and plots go, if anywhere.
struct Output {
    csv: Option<PathBuf>,
    plot: Option<PathBuf>,
    failed: bool,
}

impl Output {
    fn write(&mut self, name: &str, body: &str) {
        let Some(dir) = &self.csv else { return };
        let path = dir.join(name);
        match std::fs::write(&path, body) {
            Ok(()) => eprintln!("[simulate] wrote {}", path.display()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                self.failed = true;
            }
        }
    }

    /// Whether plots are wanted (so their data is only gathered then).
    fn plotting(&self) -> bool {
        self.plot.is_some()
    }

    fn plot(&mut self, name: &str, chart: &Chart) {
        let Some(dir) = &self.plot else { return };
        let path = dir.join(name);
        match chart.write(&path) {
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

fn print_article(a: &scenarios::Article, n: u64, csv: &mut Output) {
    println!(
        "## article: {n} requests, {} workers, lognormal(5 ms, 2 ms), 5 % of attempts ×10\n",
        scenarios::WORKERS
    );
    println!(
        "Our rows use the default {} unless named: *{} budget* is the same traffic-scaled bank at a {} share (hedging at p90 wants about 10 %: what the default's headroom buys shows in its denials and p99.9); *fixed cap* banks at most that many tokens whatever the traffic. The Go reference's budget is its own token bucket (10 % of its RPS guess per second). *Published* rows: the simulation of the article's Go reference implementation (github.com/bhope/hedge, `go run .`); the *Go reference* rows rebuild its policy as the article describes it, from our parts, and do not reproduce its published adaptive row.\n",
        default_budget(),
        scenarios::share_label(scenarios::TIGHT_SHARE_BPS),
        scenarios::share_label(scenarios::TIGHT_SHARE_BPS),
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
    plot_tail(
        csv,
        "article",
        &format!("article: {n} requests, lognormal(5, 2) ms, 5 % of attempts ×10"),
        &a.rows,
    );
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

fn print_drift(p: &Phased, csv: &mut Output) {
    let phase_s = p.phases[0].2 / SEC;
    println!(
        "## drift: backend 3× slower from {phase_s} s to {} s (virtual); ours with the default rotation (1 000 samples or 30 s), the Go reference's every {} s\n",
        2 * phase_s,
        scenarios::FAST_ROTATION_NS / SEC
    );
    print_phases(p);
    csv.write("drift.csv", &phased_csv(p));
    csv.write("drift_per_second.csv", &per_second_csv(&p.rows));
}

fn print_outage(p: &Phased, csv: &mut Output) {
    let phase_s = p.phases[0].2 / SEC;
    println!(
        "## outage: every attempt 10× slower from {phase_s} s to {} s (virtual); ours with the default rotation (1 000 samples or 30 s), the Go reference's every {} s\n",
        2 * phase_s,
        scenarios::FAST_ROTATION_NS / SEC
    );
    print_phases(p);
    if let Some(oracle) = p.rows.last().filter(|_| !p.sweep.is_empty()) {
        println!(
            "- {}: chosen by whole-run p99.9 among {} static delays, same default {}",
            oracle.name,
            p.sweep.len(),
            default_budget()
        );
        print_sweep(&p.sweep);
        println!();
    }
    let ours = &p.rows[1];
    let go = &p.rows[2];
    let budget = RatioBudget::default();
    println!(
        "Per second: our default {} allows {} of that second's requests (*earned*) plus the bank it started the second with (*banked*, at most: the cap of the last deposit before, max({} tokens, {} × the requests of that deposit's 100 ms or the 100 ms before), and no more than was earned and not spent); allowance = earned + banked.",
        default_budget(),
        default_share(),
        budget.floor_units() / tailguard::budget::UNITS_PER_TOKEN,
        default_share(),
    );
    println!(
        "The Go reference's bucket allows its fixed rate (plus its burst) whatever the traffic.\n"
    );
    println!("| second | requests (ours) | hedges (ours) | allowance (ours): earned + banked | delay ms (ours) | requests (Go) | hedges (Go) | allowance (Go) |");
    println!("|---|---|---|---|---|---|---|---|");
    let go_rate = p.go_rps / 10;
    let allowances = scenarios::allowances(&budget, &ours.outcome.per_second);
    for t in 0..ours
        .outcome
        .per_second
        .len()
        .max(go.outcome.per_second.len())
    {
        let o = ours.outcome.per_second.get(t).copied().unwrap_or_default();
        let g = go.outcome.per_second.get(t).copied().unwrap_or_default();
        let a = allowances.get(t).copied().unwrap_or_default();
        println!(
            "| {t} | {} | {} | {} = {} + {} | {} | {} | {} | {go_rate} |",
            o.requests,
            o.hedges,
            a.tokens(),
            a.earned_tokens(),
            a.bank_tokens(),
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
    csv.write("outage_sweep.csv", &sweep_csv(&p.sweep));
    csv.write("outage_delay.csv", &delay_series_csv(&p.rows));
    if csv.plotting() {
        let mut series: Vec<Series> = p.rows[1..3]
            .iter()
            .map(|r| delay_series(&r.name, &r.outcome.delay_series))
            .collect();
        series.push(Series::truth(
            "true attempt p90 (Monte Carlo)",
            phase_steps(p),
        ));
        csv.plot(
            "outage-delay.svg",
            &Chart {
                title:
                    "outage: hedge delay vs the true p90 (attempts 10× slower in the middle third)",
                x_label: "virtual time (s)",
                y_label: "delay (ms)",
                x: Scale::Linear,
                y: Scale::Log,
                legend: SeriesLabelPosition::UpperRight,
                series,
            },
        );
    }
}

fn print_streaming(rows: &[Row], n: u64, csv: &mut Output) {
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

fn print_overload(runs: &[scenarios::Overload], run_ns: u64, csv: &mut Output) {
    println!(
        "## overload: Poisson arrivals at 60 %, 70 %, 75 % and 80 % of a backend's capacity ({} attempts a second) for {} s; lognormal(median 2 ms, σ 0.3), 3 % of attempts ×8, every latency × 1 / (1 − ρ), ρ the attempts sent over the last 100 ms against the capacity (at most 0.995); a cancelled attempt frees nothing\n",
        scenarios::OVERLOAD_CAPACITY,
        run_ns / SEC
    );
    println!("Hedges add load, and load adds latency: a bank a burst of stragglers spends in a few milliseconds pushes the backend into the slowness that spends it. The default bank holds 100 ms of earnings; near capacity only a cap on hedges in flight keeps the tail below no hedging's (a hedge to a slowed backend holds its slot longer, so the hedge rate falls as latency rises).\n");
    print_utilisation_table(runs, "overload.csv", csv);
}

fn print_queued(runs: &[scenarios::Overload], run_ns: u64, csv: &mut Output) {
    println!(
        "## queued: Poisson arrivals at 30 %, 45 %, 60 % and 75 % of the capacity of {} replicas ({:.0} attempts a second) for {} s; each replica serves its attempts one at a time in arrival order, lognormal(median 2 ms, σ 0.3) of service, 3 % of attempts ×8; a primary goes to a random replica, its hedge to another; a cancelled attempt keeps its place in the queue, unless the row says the server drops it\n",
        scenarios::QUEUED_REPLICAS,
        scenarios::QUEUED_CAPACITY,
        run_ns / SEC
    );
    println!("A queue makes latency follow load at any utilisation: a straggler holds up the attempts behind it, they all pass the delay together, and their hedges queue behind the work on another replica. A server that drops the attempts its clients cancel turns that around: the copy that loses leaves its queue.\n");
    print_utilisation_table(runs, "queued.csv", csv);
}

/// One table row (and CSV line, into `file`) for each run at each
/// utilisation.
fn print_utilisation_table(runs: &[scenarios::Overload], file: &str, csv: &mut Output) {
    println!("| utilisation | strategy | p50 | p90 | p95 | p99 | p99.9 | extra load |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut s =
        "utilisation,strategy,users,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,extra_load\n".to_owned();
    for o in runs {
        for r in &o.rows {
            println!(
                "| {} | {} | {} | {} |",
                pct(o.utilisation),
                r.name,
                quantile_cells(&r.q),
                pct(r.extra_load)
            );
            csv_row(&mut s, o.utilisation, r);
        }
    }
    println!();
    csv.write(file, &s);
}

/// A CSV line for `r`, after a first column `lead`: strategy, users,
/// quantiles (ms) and extra load.
fn csv_row(s: &mut String, lead: impl std::fmt::Display, r: &Row) {
    let q = &r.q;
    let _ = writeln!(
        s,
        "{lead},\"{}\",{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.5}",
        r.name, q.count, q.p50, q.p90, q.p95, q.p99, q.p999, r.extra_load
    );
}

fn print_fan_out(widths: &[scenarios::FanOut], csv: &mut Output) {
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
            csv_row(&mut s, f.n, r);
        }
    }
    println!();
    csv.write("fan_out.csv", &s);
}

// ---------------------------------------------------------------------------
// The scenarios added with the oracle rows
// ---------------------------------------------------------------------------

fn secs(ns: u64) -> f64 {
    ns as f64 / SEC as f64
}

fn ms(ns: u64) -> f64 {
    ns as f64 / MS as f64
}

fn delay_cell(d: Option<u64>) -> String {
    d.map_or("cold".to_owned(), |d| format!("{:.1}", ms(d)))
}

/// p50 | p90 | p99 | p99.9 (ms).
fn tail_cells(q: &Quantiles) -> String {
    format!("{:.1} | {:.1} | {:.1} | {:.1}", q.p50, q.p90, q.p99, q.p999)
}

/// The oracle's sweep on one line: each static delay and its p99.9.
fn print_sweep(sweep: &[SweepPoint]) {
    let cells: Vec<String> = sweep
        .iter()
        .map(|p| format!("{} → {:.1}", scenarios::ms_label(p.delay_ns), p.q.p999))
        .collect();
    println!(
        "- sweep, static delay (ms) → p99.9 (ms): {}",
        cells.join(", ")
    );
}

fn sweep_csv(sweep: &[SweepPoint]) -> String {
    let mut s = "delay_ms,count,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,extra_load\n".to_owned();
    for p in sweep {
        let q = &p.q;
        let _ = writeln!(
            s,
            "{:.3},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.5}",
            ms(p.delay_ns),
            q.count,
            q.p50,
            q.p90,
            q.p95,
            q.p99,
            q.p999,
            p.extra_load
        );
    }
    s
}

fn delay_series_csv(rows: &[Row]) -> String {
    let mut s = "strategy,t_s,delay_ms\n".to_owned();
    for r in rows {
        for &(t, d) in &r.outcome.delay_series {
            let d = d.map_or(String::new(), |d| format!("{:.3}", ms(d)));
            let _ = writeln!(s, "\"{}\",{:.3},{d}", r.name, secs(t));
        }
    }
    s
}

/// The true p90 of each phase as a step function of time (s, ms).
fn phase_steps(p: &Phased) -> Vec<(f64, f64)> {
    p.phases
        .iter()
        .zip(&p.true_p90_ms)
        .flat_map(|(&(_, from, until), &truth)| [(secs(from), truth), (secs(until), truth)])
        .collect()
}

/// A row's delay over time as a line (cold ticks left out).
fn delay_series(name: &str, series: &[(u64, Option<u64>)]) -> Series {
    Series::solid(
        name,
        series
            .iter()
            .filter_map(|&(t, d)| d.map(|d| (secs(t), ms(d))))
            .collect(),
    )
}

/// `<scenario>-cdf.svg`: 1 − F of user latency per row, log–log.
/// The end of a scenario with an oracle row: the sweep behind it, the
/// CSV files (`<scenario>.csv`, `<scenario>_sweep.csv`, dashes as
/// underscores) and the tail and sweep plots (the adaptive rows are the
/// second and third).
fn finish_with_oracle(
    out: &mut Output,
    scenario: &str,
    title: &str,
    rows: &[Row],
    sweep: &[SweepPoint],
) {
    println!();
    print_sweep(sweep);
    println!();
    let stem = scenario.replace('-', "_");
    out.write(&format!("{stem}.csv"), &summary_csv(rows));
    out.write(&format!("{stem}_sweep.csv"), &sweep_csv(sweep));
    plot_tail(out, scenario, title, rows);
    if let [_, first, second, ..] = rows {
        plot_sweep(out, scenario, sweep, &[first, second]);
    }
}

fn plot_tail(out: &mut Output, scenario: &str, title: &str, rows: &[Row]) {
    if !out.plotting() {
        return;
    }
    let series = rows
        .iter()
        .map(|r| Series::solid(&r.name, plot::survival(&r.outcome.users)))
        .collect();
    out.plot(
        &format!("{scenario}-cdf.svg"),
        &Chart {
            title,
            x_label: "user-visible latency (ms)",
            y_label: "share of requests slower (1 − F)",
            x: Scale::Log,
            y: Scale::Log,
            legend: SeriesLabelPosition::LowerLeft,
            series,
        },
    );
}

/// `<scenario>-sweep.svg`: the oracle's p99 and p99.9 by static delay,
/// with the adaptive rows' p99.9 as dashed levels.
fn plot_sweep(out: &mut Output, scenario: &str, sweep: &[SweepPoint], adaptive: &[&Row]) {
    if !out.plotting() || sweep.is_empty() {
        return;
    }
    let xs = |f: fn(&Quantiles) -> f64| -> Vec<(f64, f64)> {
        sweep.iter().map(|p| (ms(p.delay_ns), f(&p.q))).collect()
    };
    let mut series = vec![
        Series::solid("static delay: p99.9", xs(|q| q.p999)),
        Series::solid("static delay: p99", xs(|q| q.p99)),
    ];
    let (lo, hi) = (ms(sweep[0].delay_ns), ms(sweep[sweep.len() - 1].delay_ns));
    for r in adaptive {
        series.push(Series::dashed(
            &format!("{}: p99.9", r.name),
            vec![(lo, r.q.p999), (hi, r.q.p999)],
        ));
    }
    out.plot(
        &format!("{scenario}-sweep.svg"),
        &Chart {
            title: &format!("{scenario}: the oracle's sweep (same budget)"),
            x_label: "static hedge delay (ms)",
            y_label: "user-visible latency (ms)",
            x: Scale::Log,
            y: Scale::Linear,
            legend: SeriesLabelPosition::LowerRight,
            series,
        },
    );
}

fn print_low_rate(l: &scenarios::LowRate, out: &mut Output) {
    let per_client = scenarios::LOW_RATE_PER_SEC * secs(scenarios::LOW_RATE_RUN_NS);
    println!(
        "## low-rate: {} independent clients, each Poisson at {} requests/s for {} virtual minutes (≈ {per_client:.0} requests each), lognormal(5 ms, 2 ms), 5 % of attempts ×10\n",
        l.clients,
        scenarios::LOW_RATE_PER_SEC,
        scenarios::LOW_RATE_RUN_NS / SEC / 60,
    );
    println!("Each client has its own hedger (default: p90, 20 samples before trusting the window, 30 s rotation, {}); their requests are pooled. *Data-driven*: the share of requests after the first minute whose delay came from measured latency, not from a prior or cold start (no delay).\n", default_budget());
    println!("| strategy | requests | p50 | p90 | p99 | p99.9 | extra load | data-driven delay |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &l.rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            r.name,
            r.q.count,
            tail_cells(&r.q),
            pct(r.extra_load),
            pct(l.data_driven(r))
        );
    }
    finish_with_oracle(
        out,
        "low-rate",
        "low-rate: 0.5 requests/s per client, article backend",
        &l.rows,
        &l.sweep,
    );
}

fn print_correlated(c: &scenarios::Correlated, out: &mut Output) {
    let p = &c.params;
    println!(
        "## correlated: {} replicas, Poisson {:.0} requests/s for {} s, lognormal(5 ms, 2 ms); each replica pauses {} ms at exponential gaps of mean {} s, stalling every attempt on it; primaries spread at random, a hedge to another replica\n",
        p.replicas,
        p.per_sec,
        p.run_ns / SEC,
        p.pause_ns / MS,
        secs(p.mean_gap_ns),
    );
    println!(
        "Replica time paused: {}. Same arrivals and attempt draws in every row; default {} unless named (the oracle's too); the {} row has the same traffic-scaled bank at a {} share: what the default's headroom buys.\n",
        pct(c.paused_share),
        default_budget(),
        scenarios::share_label(scenarios::TIGHT_SHARE_BPS),
        scenarios::share_label(scenarios::TIGHT_SHARE_BPS),
    );
    println!("| strategy | p50 | p90 | p99 | p99.9 | extra load | hedge wins | budget denials |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &c.rows {
        let (wins, denials) = r.stats.map_or((String::new(), String::new()), |s| {
            (s.hedge_wins.to_string(), s.budget_denials.to_string())
        });
        println!(
            "| {} | {} | {} | {wins} | {denials} |",
            r.name,
            tail_cells(&r.q),
            pct(r.extra_load),
        );
    }
    finish_with_oracle(
        out,
        "correlated",
        "correlated: 4 replicas with 50 ms pauses, 1000 requests/s",
        &c.rows,
        &c.sweep,
    );
}

fn print_heavy_tail(backends: &[scenarios::HeavyTail], run_ns: u64, out: &mut Output) {
    println!(
        "## heavy-tail: Poisson {:.0} requests/s for {} s per backend; adaptive at q = 0.9 and 0.99, default {}\n",
        scenarios::HEAVY_PER_SEC,
        run_ns / SEC,
        default_budget()
    );
    println!("*delay ÷ truth*: the hedger's delay at the end of the run over the true quantile of one attempt's latency ({} Monte Carlo draws of the model).\n", scenarios::TRUTH_DRAWS);
    for h in backends {
        println!("### {}: {}\n", h.name, h.model);
        println!("| strategy | p50 | p90 | p99 | p99.9 | extra load | final delay | true quantile | delay ÷ truth |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for r in &h.rows {
            let truth = h.truth.iter().find(|t| t.row == r.name);
            let cells = truth.map_or(" | | ".to_owned(), |t| {
                format!(
                    "{} | p{:.0} = {:.1} | {}",
                    delay_cell(t.delay_ns),
                    t.q * 100.0,
                    t.true_ms,
                    t.ratio().map_or("—".to_owned(), |x| format!("{x:.2}"))
                )
            });
            println!(
                "| {} | {} | {} | {cells} |",
                r.name,
                tail_cells(&r.q),
                pct(r.extra_load)
            );
        }
        finish_with_oracle(
            out,
            &format!("heavy-tail-{}", h.name),
            &format!("heavy-tail: {}", h.model),
            &h.rows,
            &h.sweep,
        );
    }
}

fn print_step(s: &scenarios::Step, out: &mut Output) {
    let p = &s.phased;
    let end = p.phases.last().map_or(0, |ph| ph.2);
    println!(
        "## step: Poisson {:.0} requests/s, lognormal(5 ms, 2 ms), 5 % of attempts ×10; every attempt ×{} from {} s to the end ({} s); true attempt p90 {:.1} ms before, {:.1} ms after (Monte Carlo)\n",
        scenarios::STEP_PER_SEC,
        scenarios::STEP_FACTOR,
        s.at_ns / SEC,
        end / SEC,
        p.true_p90_ms[0],
        p.true_p90_ms[1],
    );
    print_phases(p);
    for t in &s.tracking {
        let when = |x: Option<u64>| x.map_or("never".to_owned(), |x| format!("+{:.1} s", secs(x)));
        println!(
            "- {}: first within 10 % of the new true p90 at {} after the step; within 10 % from {} on",
            t.row,
            when(t.first_within_ns),
            when(t.settled_ns)
        );
    }
    println!();
    let per_row = (5 * SEC / scenarios::STEP_SAMPLE_NS) as usize;
    for t in &s.tracking {
        println!(
            "Delay (ms) every {} s, {}:\n",
            secs(scenarios::STEP_SAMPLE_NS),
            t.row
        );
        let header: Vec<String> = (0..per_row)
            .map(|i| format!("+{:.1}", secs(i as u64 * scenarios::STEP_SAMPLE_NS)))
            .collect();
        println!("| t (s) | true p90 | {} |", header.join(" | "));
        println!("|---|---|{}", "---|".repeat(per_row));
        for chunk in t.series.chunks(per_row) {
            let cells: Vec<String> = chunk.iter().map(|&(_, d, _)| delay_cell(d)).collect();
            println!(
                "| {:.0} | {:.1} | {} |",
                secs(chunk[0].0),
                ms(chunk[0].2),
                cells.join(" | ")
            );
        }
        println!();
    }
    out.write("step.csv", &phased_csv(p));
    let mut csv = "strategy,t_s,delay_ms,true_p90_ms\n".to_owned();
    for t in &s.tracking {
        for &(at, d, truth) in &t.series {
            let d = d.map_or(String::new(), |d| format!("{:.3}", ms(d)));
            let _ = writeln!(csv, "\"{}\",{:.3},{d},{:.3}", t.row, secs(at), ms(truth));
        }
    }
    out.write("step_delay.csv", &csv);
    if out.plotting() {
        let mut series: Vec<Series> = s
            .tracking
            .iter()
            .map(|t| {
                let pts = t
                    .series
                    .iter()
                    .map(|&(at, d, _)| (at, d))
                    .collect::<Vec<_>>();
                delay_series(&t.row, &pts)
            })
            .collect();
        series.push(Series::truth(
            "true attempt p90 (Monte Carlo)",
            phase_steps(p),
        ));
        out.plot(
            "step-delay.svg",
            &Chart {
                title: &format!(
                    "step: hedge delay vs the true p90 (latency ×{} from {} s)",
                    scenarios::STEP_FACTOR,
                    s.at_ns / SEC
                ),
                x_label: "virtual time (s)",
                y_label: "delay (ms)",
                x: Scale::Linear,
                y: Scale::Linear,
                legend: SeriesLabelPosition::LowerRight,
                series,
            },
        );
    }
}

fn print_many_targets(m: &scenarios::ManyTargets, run_ns: u64, out: &mut Output) {
    let n = m.popularity.targets();
    println!(
        "## many-targets: {n} targets, Poisson {:.0} requests/s for {} s; target 0 gets {}, targets 1–{} the rest ∝ 1/k (target {} gets {}); target k's latency is lognormal(5 ms, 2 ms) with 5 % ×10, times 1, 1.5, 2, 2.5 for k mod 4 = 0…3\n",
        scenarios::MANY_PER_SEC,
        run_ns / SEC,
        pct(m.popularity.share(0)),
        n - 1,
        n - 1,
        pct(m.popularity.share(n - 1)),
    );
    println!("Hedgers keyed by target (`Hedger<u32, Budget, T>`: when the table is full, a target without a slot takes the one with the fewest recent requests once it has had twice as many and two more, counts halved every 16 × T requests to targets without one), one shared default {}. A target whose own window is cold, or that has no slot, gets the delay of the aggregate window of every target's samples. *Data-driven*: requests whose delay came from measured latency, the target's own or the aggregate's; *of which aggregate*: those whose delay came from the aggregate.\n", default_budget());
    println!("| strategy | p50 | p90 | p99 | p99.9 | extra load | evictions | data-driven (hot key) | of which aggregate | data-driven (other keys) | of which aggregate |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &m.rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            tail_cells(&r.q),
            pct(r.extra_load),
            r.stats.map_or(String::new(), |s| s.evictions.to_string()),
            pct(m.data_driven(r, true)),
            pct(m.aggregate_share(r, true)),
            pct(m.data_driven(r, false)),
            pct(m.aggregate_share(r, false)),
        );
    }
    finish_with_oracle(
        out,
        "many-targets",
        "many-targets: 16 targets, hot key 50 %, 4 table slots",
        &m.rows,
        &m.sweep,
    );
}

fn print_failures(f: &scenarios::Failures, out: &mut Output) {
    println!(
        "## failures: Poisson {:.0} requests/s for {} s, lognormal(5 ms, 2 ms), 5 % of attempts ×10; {} of attempts (each independently) fail fast instead, after lognormal({}, {}) ms\n",
        scenarios::FAILURES_PER_SEC,
        f.run_ns / SEC,
        pct(scenarios::FAIL_PROB),
        scenarios::FAIL_AFTER_MS,
        scenarios::FAIL_AFTER_MS / 5.0,
    );
    println!(
        "A request the client gives up (every attempt failed, or a fatal failure) is retried by the caller as a new request, at once, up to {} tries in all; a user request's latency runs from its first try's start to its success, and it *fails* when its last try fails (latency quantiles are of the successful ones). Hedged rows: p90, default budget ({}), one hedge per request (per try). *Retryable*: a failure sends a fresh attempt at once — a retry when nothing else is in flight (up to 2 per request, no budget token: it adds no concurrent load, and the retried request keeps its hedge), a hedge when another attempt still races (budget permitting); *fatal*: it ends the request (and cancels its other attempt). The oracle reports failures as retryable. *Duplicates / user request* counts every hedge and in-hedger retry a user request's tries sent; *per hedger request* is `(hedges_sent + retries_released) / requests` from `HedgeStats` (each caller retry is a hedger request); *extra attempts / user request* adds the caller retries.\n",
        scenarios::CALLER_TRIES,
        scenarios::default_share(),
    );
    println!("| strategy | p50 | p90 | p99 | p99.9 | failed | caller retries / user request | duplicates / user request | duplicates / hedger request | extra attempts / user request | retries in the hedger | budget denials |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &f.rows {
        let (released, denials) = r.stats.map_or((String::new(), String::new()), |s| {
            (s.retries_released.to_string(), s.budget_denials.to_string())
        });
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {released} | {denials} |",
            r.name,
            tail_cells(&r.q),
            pct3(r.failure_rate()),
            pct(r.retried_share()),
            pct(r.hedges_per_user()),
            pct(r.extra_load),
            pct(r.extra_attempts_per_user()),
        );
    }
    println!();
    print_sweep(&f.sweep);
    println!();
    let mut csv = "strategy,users,p50_ms,p90_ms,p99_ms,p999_ms,failure_rate,caller_retries_per_user,hedges_per_user,hedges_per_request,extra_attempts_per_user,retries_released,budget_denials\n".to_owned();
    for r in &f.rows {
        let q = &r.q;
        let (released, denials) = r
            .stats
            .map_or((0, 0), |s| (s.retries_released, s.budget_denials));
        let _ = writeln!(
            csv,
            "\"{}\",{},{:.3},{:.3},{:.3},{:.3},{:.6},{:.5},{:.5},{:.5},{:.5},{released},{denials}",
            r.name,
            r.outcome.users.len(),
            q.p50,
            q.p90,
            q.p99,
            q.p999,
            r.failure_rate(),
            r.retried_share(),
            r.hedges_per_user(),
            r.extra_load,
            r.extra_attempts_per_user(),
        );
    }
    out.write("failures.csv", &csv);
    out.write("failures_sweep.csv", &sweep_csv(&f.sweep));
    plot_tail(
        out,
        "failures",
        &format!(
            "failures: {} of attempts fail fast, caller retries up to {} tries (successful requests)",
            pct(scenarios::FAIL_PROB),
            scenarios::CALLER_TRIES
        ),
        &f.rows,
    );
    plot_sweep(out, "failures", &f.sweep, &[&f.rows[1], &f.rows[2]]);
}

/// A share with three decimals, for small failure rates.
fn pct3(x: f64) -> String {
    format!("{:.3} %", 100.0 * x)
}
