//! Hedging over real sockets: loopback HTTP servers with the
//! simulation's `article` latency model, a closed-loop hyper client, and
//! the same requests sent without hedging, through tailguard's tower layer,
//! through tailguard's `Hedger` wired by hand, and through tower's `hedge`
//! middleware. Needs the `tower` feature:
//!
//! ```text
//! cargo run --release --features tower --example http_hedge -- [--requests N] [--duration S]
//!     [--servers N] [--concurrency W] [--pause-ms X] [--check]
//! ```
//! `--help` lists every flag with its default. Sends only to 127.0.0.1;
//! stops by itself (60 s at most by default); progress on stderr, the
//! table on stdout.

mod client;
mod report;
mod server;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use tailguard::hedge::HedgeConfig;
use tailguard::RatioBudget;
use tokio::time::Instant;

use client::{Driver, Targets};
use report::{Quantiles, Row};
use server::{Model, Pauses};

/// Hedged requests over real sockets: N loopback HTTP servers answering
/// after a per-attempt delay drawn from the article's model (lognormal
/// mean 5 ms, sd 2 ms; 5 % of attempts ×10), and a closed-loop hyper
/// client sending the same load without hedging, through tailguard's tower
/// layer, through tailguard's `Hedger` wired by hand, and through tower's
/// `hedge` middleware (p90 of the last second, no budget).
///
/// Prints user-visible latency quantiles (ms, from the client: send to
/// response headers), extra load (attempts the servers received per
/// request, minus one) and backend work (server busy time against no
/// hedging), in the simulation's table layout. Sends only to 127.0.0.1;
/// timer resolution is tokio's (1 ms).
#[derive(Parser, Debug)]
#[command(name = "http_hedge", version)]
struct Args {
    /// Requests per strategy (closed loop; fewer if --duration ends first).
    #[arg(long, value_name = "N", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Wall-clock bound of the whole run in seconds, shared equally by the
    /// strategies run.
    #[arg(long, value_name = "S", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(5..=3600))]
    duration: u64,
    /// Loopback servers; a hedge goes to the server after its primary's.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(2..=64))]
    servers: u64,
    /// Closed-loop workers (each waits for its answer before the next).
    #[arg(long, value_name = "W", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    concurrency: u64,
    /// Correlated pauses: each server stalls every attempt for this many ms
    /// (a stop-the-world GC); 0: no pauses. At most 10 000 (longer ones
    /// would outlast the run, and overflow its clock arithmetic).
    #[arg(long, value_name = "MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pause_ms: u64,
    /// Mean gap between one server's pauses, ms (exponential gaps).
    #[arg(long, value_name = "MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pause_gap_ms: u64,
    /// Share of attempts ×10 slower (the model's stragglers).
    #[arg(long, value_name = "P", default_value_t = 0.05, value_parser = probability)]
    slow_prob: f64,
    /// Which strategies to run (the first is the baseline of the notes).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "none,layer,hedger,tower"
    )]
    strategies: Vec<Strategy>,
    /// Seed of the servers' latency and pause draws.
    #[arg(long, value_name = "S", default_value_t = 42)]
    seed: u64,
    /// Exit non-zero unless, for each of tailguard's strategies run, p99 is
    /// below no hedging's and extra load within the default budget's share
    /// (plus 2 points), and no request failed. Needs none and layer or
    /// hedger among --strategies.
    #[arg(long)]
    check: bool,
}

/// The strategies of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Strategy {
    /// One attempt, no hedging
    None,
    /// tailguard's tower layer (HedgeLayer over a SharedHedger with a
    /// window per server; default config and budget)
    Layer,
    /// tailguard's Hedger (default config and budget) wired by hand
    Hedger,
    /// tower's hedge middleware: p90 of the last 1 s, at least 100 points
    Tower,
}

impl Strategy {
    fn label(self) -> String {
        match self {
            Self::None => "no hedging".to_owned(),
            Self::Layer => format!(
                "adaptive p90 (tailguard tower layer, default: {} budget)",
                share_label()
            ),
            Self::Hedger => format!(
                "adaptive p90 (tailguard Hedger, default: {} budget)",
                share_label()
            ),
            Self::Tower => format!(
                "tower hedge (p{:.0} of last {} s, ≥ {} points, no budget)",
                100.0 * client::TOWER_PERCENTILE,
                client::TOWER_PERIOD.as_secs(),
                client::TOWER_MIN_DATA_POINTS
            ),
        }
    }
}

/// Slack of the `--check` load assertion over the budget's share: the
/// budget also lends its floor of tokens and its bank.
const CHECK_SLACK: f64 = 0.02;

/// Requests each checked row needs: a p99 of fewer is a handful of samples.
const CHECK_MIN_REQUESTS: u64 = 1_000;

fn share() -> f64 {
    f64::from(RatioBudget::DEFAULT_SHARE_BPS) / 10_000.0
}

fn share_label() -> String {
    format!("{:.0} %", 100.0 * share())
}

fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s} is not a probability in [0, 1]")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Refused before the servers start, not after a whole run.
    let has = |s: Strategy| args.strategies.contains(&s);
    if args.check && !(has(Strategy::None) && (has(Strategy::Layer) || has(Strategy::Hedger))) {
        Args::command()
            .error(
                ErrorKind::ArgumentConflict,
                "--check compares layer or hedger against none: \
                 --strategies must include none and layer or hedger",
            )
            .exit();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let model = Model {
        slow_prob: args.slow_prob,
        ..Model::ARTICLE
    };
    let pauses = (args.pause_ms > 0).then(|| Pauses {
        pause: Duration::from_millis(args.pause_ms),
        mean_gap: Duration::from_millis(args.pause_gap_ms),
    });
    let total = Duration::from_secs(args.duration);
    let run_started = Instant::now();
    let servers = usize::try_from(args.servers).expect("at most 64");
    let workers = usize::try_from(args.concurrency).expect("at most 1000");
    let (addrs, counters) = match server::start(servers, model, pauses, total, args.seed).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start the loopback servers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let targets = Arc::new(Targets::new(&addrs));
    // What each strategy may take: the bound, less a drain per strategy
    // (stragglers and pauses end before the next starts) and a warm-up.
    let drain = Duration::from_millis(300 + 2 * args.pause_ms);
    let n = u32::try_from(args.strategies.len()).unwrap_or(u32::MAX);
    let slot = total
        .saturating_sub(Duration::from_secs(1))
        .checked_div(n)
        .unwrap_or_default()
        .saturating_sub(drain);

    println!(
        "## http_hedge: {} requests a strategy (at most {:.1} s each), {} workers, {} loopback servers, lognormal({} ms, {} ms), {:.0} % of attempts ×{}{}\n",
        args.requests,
        slot.as_secs_f64(),
        workers,
        servers,
        model.mean_ms,
        model.sd_ms,
        100.0 * model.slow_prob,
        model.slow_factor,
        pauses.map_or(String::new(), |p| format!(
            ", each server pausing {} ms at exponential gaps of mean {} ms",
            p.pause.as_millis(),
            p.mean_gap.as_millis()
        ))
    );

    // Warm the connection pool, unmeasured, so no strategy pays for it.
    let warm = Arc::new(Driver::Plain(Arc::clone(&targets)));
    let _ = client::closed_loop(
        warm,
        servers,
        workers,
        (4 * workers) as u64,
        Instant::now() + Duration::from_secs(1),
        "warm-up",
    )
    .await;
    tokio::time::sleep(drain).await;
    counters.take();

    let mut rows = Vec::new();
    for &strategy in &args.strategies {
        let label = strategy.label();
        eprintln!("[http_hedge] {label} …");
        let driver = Arc::new(match strategy {
            Strategy::None => Driver::Plain(Arc::clone(&targets)),
            Strategy::Layer => Driver::layer(Arc::clone(&targets), HedgeConfig::DEFAULT),
            Strategy::Hedger => Driver::hedger(Arc::clone(&targets), HedgeConfig::DEFAULT),
            Strategy::Tower => Driver::tower(Arc::clone(&targets)),
        });
        let deadline = Instant::now() + slot;
        let m = client::closed_loop(
            Arc::clone(&driver),
            servers,
            workers,
            args.requests,
            deadline,
            &label,
        )
        .await;
        // Losers still running on the servers finish (or are dropped)
        // before the counters are read.
        tokio::time::sleep(drain).await;
        let (attempts, busy_ns) = counters.take();
        let requests = m.latency_us.len() + m.errors;
        let per_request = |x: u64| x as f64 / requests.max(1) as f64;
        rows.push(Row {
            name: label,
            q: Quantiles::of(&m.latency_us),
            requests,
            errors: m.errors,
            extra_load: per_request(attempts) - 1.0,
            work_ms: per_request(busy_ns) / 1e6,
            rps: requests as f64 / m.elapsed.as_secs_f64(),
            stats: driver.stats(),
        });
    }
    eprintln!(
        "[http_hedge] done in {:.1} s (wall clock)",
        run_started.elapsed().as_secs_f64()
    );
    report::print(&rows, model.mean_ms());
    if args.check {
        return check(&rows);
    }
    ExitCode::SUCCESS
}

/// The `--check` verdict: each of tailguard's rows run (the layer, the
/// hand-wired hedger; at least one) against no hedging's.
fn check(rows: &[Row]) -> ExitCode {
    let find = |s: Strategy| rows.iter().find(|r| r.name == s.label());
    let ours: Vec<&Row> = [Strategy::Layer, Strategy::Hedger]
        .into_iter()
        .filter_map(find)
        .collect();
    let Some(none) = find(Strategy::None).filter(|_| !ours.is_empty()) else {
        eprintln!("check FAILED: --check needs the none strategy and layer or hedger");
        return ExitCode::FAILURE;
    };
    let limit = share() + CHECK_SLACK;
    let mut failed = Vec::new();
    for r in ours.iter().chain([&none]) {
        if r.requests < CHECK_MIN_REQUESTS {
            failed.push(format!(
                "{}: {} requests, fewer than the {CHECK_MIN_REQUESTS} a p99 needs to mean something",
                r.name, r.requests
            ));
        }
    }
    for r in &ours {
        if r.q.p99 >= none.q.p99 {
            failed.push(format!(
                "{}: p99 {:.1} ms is not below no hedging's {:.1} ms",
                r.name, r.q.p99, none.q.p99
            ));
        }
        if r.extra_load > limit {
            failed.push(format!(
                "{}: extra load {:.1} % is above the budget's {} share + {:.0} points",
                r.name,
                100.0 * r.extra_load,
                share_label(),
                100.0 * CHECK_SLACK
            ));
        }
    }
    let errors: u64 = rows.iter().map(|r| r.errors).sum();
    if errors > 0 {
        failed.push(format!("{errors} requests failed"));
    }
    if !failed.is_empty() {
        for f in failed {
            eprintln!("check FAILED: {f}");
        }
        return ExitCode::FAILURE;
    }
    for r in ours {
        eprintln!(
            "check passed: {}: p99 {:.1} ms against {:.1} ms without hedging, extra load {:.1} % ≤ {:.0} %",
            r.name,
            r.q.p99,
            none.q.p99,
            100.0 * r.extra_load,
            100.0 * limit
        );
    }
    ExitCode::SUCCESS
}
