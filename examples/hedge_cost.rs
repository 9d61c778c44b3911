//! Instructions per request on a warm `Hedger`'s common path, for
//! callgrind: `start` then `on_commit` (and, with `hedged`, one request in
//! ten hedged on its timer, the hedge winning and the primary recorded as
//! censored, so refreshes run Kaplan–Meier's product).
//!
//! ```text
//! cargo build --release --example hedge_cost
//! for n in 10000 20000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/hc.$n \
//!       target/release/examples/hedge_cost cubic plain $n
//! done
//! ```
//!
//! The difference of the two runs' totals over 10 000 is the cost of one
//! request (warm-up, allocation and process start cancel out); or read
//! `hedge_cost::run`'s inclusive count (`callgrind_annotate --inclusive=yes`)
//! to leave the input generation out. Mappings: `cubic` (the default),
//! `log-linear` (`LogLinearMapping`, α = 1 %, 2 048 buckets so that its
//! span matches the default's) and `log-linear-2` (α = 2 %, 1 024).
//! Modes (the second argument): `plain`, `hedged`, and `shared` /
//! `shared-hedged` for the same requests through a default
//! `SharedHedger` (cubic mapping only). `--help` lists them with the
//! defaults; anything else is refused.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use std::hint::black_box;
use tailguard::hedge::{
    Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, Request, SharedHedger, TimerAction,
};
use tailguard::store::{CollapsingLowestStore, Store};
use tailguard::{Budget, IndexMapping, LogLinearMapping};

const WARM: usize = 5_000;

/// Instructions per request on a warm hedger, for callgrind: run it at two
/// request counts and take the difference of the inclusive counts of `run`
/// (`callgrind_annotate --inclusive=yes`).
#[derive(Parser, Debug)]
#[command(
    name = "hedge_cost",
    after_help = "Example, then the same with 10000:\n  valgrind --tool=callgrind \
                  target/release/examples/hedge_cost cubic hedged 20000"
)]
struct Args {
    /// The hedger's index mapping.
    #[arg(value_enum, default_value_t = Mapping::Cubic)]
    mapping: Mapping,
    /// What each request does.
    #[arg(value_enum, default_value_t = Mode::Plain)]
    mode: Mode,
    /// Measured requests (1 to 10 000 000), after 5 000 unmeasured that
    /// warm the hedger.
    #[arg(default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    n: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mapping {
    /// The default cubic mapping
    Cubic,
    /// LogLinearMapping, α = 1 %, 2 048 buckets (the default's span)
    LogLinear,
    /// LogLinearMapping, α = 2 %, 1 024 buckets
    #[value(name = "log-linear-2")]
    LogLinear2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// A Hedger: start, then on_commit
    Plain,
    /// A Hedger, one request in ten hedged on its timer (the hedge wins)
    Hedged,
    /// Plain through a default SharedHedger (cubic mapping only)
    Shared,
    /// Hedged through a default SharedHedger (cubic mapping only)
    SharedHedged,
}

/// A value's name as typed on the command line.
fn name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

/// What [`run`] drives: a `Hedger` or a `SharedHedger`.
trait Drive {
    type K: Copy;
    fn start(&mut self, now: u64) -> Request<Self::K>;
    fn on_timer(&mut self, req: &mut Request<Self::K>, now: u64) -> TimerAction;
    fn on_commit(&mut self, req: &mut Request<Self::K>, a: Attempt, now: u64) -> CommitOutcome;
    /// Read after each request (into the checksum).
    fn read(&self, req: &Request<Self::K>) -> u64;
}

impl<M: IndexMapping, S: Store> Drive for &mut Hedger<(), Budget, 1, S, M> {
    type K = ();
    fn start(&mut self, now: u64) -> Request<()> {
        Hedger::start(self, (), now, Idempotency::Idempotent)
    }
    fn on_timer(&mut self, req: &mut Request<()>, now: u64) -> TimerAction {
        Hedger::on_timer(self, req, now)
    }
    fn on_commit(&mut self, req: &mut Request<()>, a: Attempt, now: u64) -> CommitOutcome {
        Hedger::on_commit(self, req, a, now)
    }
    fn read(&self, _: &Request<()>) -> u64 {
        self.stats().current_delay_ns.unwrap_or(0)
    }
}

impl Drive for &SharedHedger {
    type K = usize;
    fn start(&mut self, now: u64) -> Request<usize> {
        SharedHedger::start(self, 0, now, Idempotency::Idempotent)
    }
    fn on_timer(&mut self, req: &mut Request<usize>, now: u64) -> TimerAction {
        SharedHedger::on_timer(self, req, now)
    }
    fn on_commit(&mut self, req: &mut Request<usize>, a: Attempt, now: u64) -> CommitOutcome {
        SharedHedger::on_commit(self, req, a, now)
    }
    /// Not `stats()`: a snapshot of the atomic counters costs more than
    /// the request.
    fn read(&self, req: &Request<usize>) -> u64 {
        req.delay_ns().unwrap_or(0)
    }
}

#[inline(never)]
fn run<D: Drive>(mut h: D, latencies: &[u64], hedged: bool) -> u64 {
    let mut now = 1_000_000_000u64;
    let mut sum = 0u64;
    for (i, &lat) in latencies.iter().enumerate() {
        let mut req = h.start(black_box(now));
        let mut winner = Attempt::PRIMARY;
        let mut end = now + lat;
        if hedged && i % 10 == 0 {
            if let Some(t) = req.next_timer() {
                if let TimerAction::SendHedge(a) = h.on_timer(&mut req, black_box(t)) {
                    winner = a;
                    end = t + lat / 2;
                }
            }
        }
        let _ = black_box(h.on_commit(&mut req, winner, black_box(end)));
        sum = sum.wrapping_add(h.read(&req));
        now += 100_000;
    }
    sum
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let shared = matches!(args.mode, Mode::Shared | Mode::SharedHedged);
    let hedged = matches!(args.mode, Mode::Hedged | Mode::SharedHedged);
    // Refused, not run as something else: a count under the wrong name
    // would mislead.
    if shared && args.mapping != Mapping::Cubic {
        Args::command()
            .error(
                ErrorKind::ArgumentConflict,
                format!(
                    "mode {} needs the cubic mapping (a default SharedHedger), not {}",
                    name(args.mode),
                    name(args.mapping)
                ),
            )
            .exit();
    }
    let n = usize::try_from(args.n)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let dist = LogNormal::new(5e6f64.ln(), 0.5)?;
    let data: Vec<u64> = (0..WARM + n)
        .map(|_| dist.sample(&mut rng) as u64)
        .collect();
    let config = HedgeConfig::DEFAULT;
    let sum = match args.mapping {
        Mapping::Cubic if shared => run(&SharedHedger::new(config)?, &data, hedged),
        Mapping::Cubic => {
            let mut h: Hedger = Hedger::new(config)?;
            run(&mut h, &data, hedged)
        }
        Mapping::LogLinear => {
            let mut h: Hedger<(), Budget, 1, CollapsingLowestStore<2048>, LogLinearMapping> =
                Hedger::with_budget(config, Budget::default())?;
            run(&mut h, &data, hedged)
        }
        Mapping::LogLinear2 => {
            // α = 2 %: 32 buckets a power of two, the default 1 024 span
            // 1 µs to an hour.
            let config = config.relative_accuracy(0.02);
            let mut h: Hedger<(), Budget, 1, CollapsingLowestStore<1024>, LogLinearMapping> =
                Hedger::with_budget(config, Budget::default())?;
            run(&mut h, &data, hedged)
        }
    };
    println!(
        "{} {}: {} requests ({WARM} warm-up + {n}): checksum {sum}",
        name(args.mapping),
        name(args.mode),
        data.len()
    );
    Ok(())
}
