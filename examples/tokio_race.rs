//! Hedging from an async runtime, by hand: attempts are tokio tasks, the
//! loser is aborted, the timer is `sleep_until`. One `SharedHedger` serves
//! every task on every worker thread with no mutex, and each call holds a
//! `RequestGuard`, so a call dropped midway (a caller's timeout, a
//! `select!` that lost) gives its request up on the spot. (For a
//! `tower::Service`, the `tower` feature's `HedgeLayer` does all of this.)
//!
//! Run: `cargo run --features std --example tokio_race`

use clap::Parser;
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{Clock, MonotonicClock};
use tailguard::guard::RequestGuard;
use tailguard::hedge::{
    Attempt, CommitOutcome, HedgeConfig, Idempotency, Plan, SharedHedger, TimerAction,
};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

/// Hedging from tokio by hand: attempts are tasks, the loser is aborted,
/// the timer is `sleep_until`; one SharedHedger serves 100 calls from 4
/// clients on 2 worker threads, and a last call, to a stalled backend, is
/// dropped by its caller with its hedge in flight and given up at once.
/// Takes no arguments.
#[derive(Parser)]
#[command(name = "tokio_race")]
struct Args {}

/// How long a straggling attempt takes.
const STRAGGLER: Duration = Duration::from_millis(80);
/// The last call's id: every attempt of it straggles (a stalled backend).
const STALLED: u64 = u64::MAX;

/// Whether `attempt` of call `request` straggles: the primary of one call
/// in 20 (ids 4, 24, 44, ...), 5 % of them, well below the 10 % that
/// hedging at p90 leaves above the delay (see `HedgeConfig::quantile`:
/// with more stragglers than `1 − quantile`, the delay climbs to the
/// stragglers' own latency and they go unhedged); hedges do not straggle.
fn straggles(request: u64, attempt: Attempt) -> bool {
    request == STALLED || (attempt == Attempt::PRIMARY && request % 20 == 4)
}

/// The backend: 3–5 ms, or 80 ms for a straggler.
async fn backend(request: u64, attempt: Attempt) -> String {
    sleep(if straggles(request, attempt) {
        STRAGGLER
    } else {
        Duration::from_millis(3 + request % 3)
    })
    .await;
    format!("answer to {request} from {attempt:?}")
}

/// One hedged call: races attempts until one answers, and returns the
/// answer, the attempt that won and the plan made at the start. Dropping
/// this future drops `request`, which gives the request up in the hedger
/// (its hedges leave the in-flight count, its attempts are recorded as
/// censored) and `attempts`, which aborts the tasks.
async fn hedged_call(
    hedger: &Arc<SharedHedger>,
    clock: MonotonicClock,
    id: u64,
) -> (String, Attempt, Plan) {
    let mut request = RequestGuard::start(Arc::clone(hedger), clock, 0, Idempotency::Idempotent);
    let plan = request.plan();
    let mut attempts = JoinSet::new();
    attempts.spawn(async move { (Attempt::PRIMARY, backend(id, Attempt::PRIMARY).await) });
    loop {
        // The timer to arm is always `next_timer()`; `plan()` only informs.
        let timer = request
            .next_timer()
            .and_then(|at| clock.instant(at))
            .map(Instant::from_std);
        tokio::select! {
            Some(joined) = attempts.join_next() => {
                // A task that panicked passes its panic on (matching only
                // `Ok` would disable this branch, and with no timer armed
                // `select!` would panic on its own); tasks are aborted
                // only below, once the call is over.
                let (attempt, answer) = match joined {
                    Ok(done) => done,
                    Err(e) => std::panic::resume_unwind(e.into_panic()),
                };
                if let CommitOutcome::Won { winner, .. } = request.on_commit(attempt) {
                    attempts.abort_all(); // cancel the losers
                    return (answer, winner, plan);
                }
            }
            _ = sleep_until(timer.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if timer.is_some() => {
                if let TimerAction::SendHedge(hedge) = request.on_timer() {
                    attempts.spawn(async move { (hedge, backend(id, hedge).await) });
                }
            }
        }
    }
}

fn describe(plan: Plan) -> String {
    match plan {
        Plan::Hedge { delay_ns, source } => {
            format!("hedge at {:.1} ms ({source:?})", delay_ns as f64 / 1e6)
        }
        Plan::NoHedge(why) => format!("no hedge ({why:?})"),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Args {} = Args::parse(); // --help, or an error for any argument
    let config = HedgeConfig::DEFAULT
        .min_samples(10)
        .prior_delay_ns(20_000_000);
    let hedger = Arc::new(SharedHedger::new(config).expect("valid configuration"));
    let clock = MonotonicClock::new(); // the shared time base: every `new` clock agrees
    let mut clients = JoinSet::new();
    for worker in 0..4u64 {
        let hedger = Arc::clone(&hedger);
        clients.spawn(async move {
            let mut calls = Vec::new();
            for i in 0..25 {
                let id = worker * 25 + i; // ids 0 to 99
                let started = Instant::now();
                let (_answer, winner, plan) = hedged_call(&hedger, clock, id).await;
                calls.push((id, started.elapsed(), winner, plan));
            }
            calls
        });
    }
    let mut calls = Vec::new();
    while let Some(Ok(c)) = clients.join_next().await {
        calls.extend(c);
    }
    calls.sort_by_key(|c| c.0);
    println!(
        "calls whose primary straggled ({} ms):",
        STRAGGLER.as_millis()
    );
    for &(id, elapsed, winner, plan) in &calls {
        if straggles(id, Attempt::PRIMARY) {
            println!(
                "  call {id:2}: {}, {:.1} ms, won by {}",
                describe(plan),
                elapsed.as_secs_f64() * 1e3,
                if winner == Attempt::PRIMARY {
                    "the primary"
                } else {
                    "the hedge"
                },
            );
        }
    }
    let others = calls
        .iter()
        .filter(|c| !straggles(c.0, Attempt::PRIMARY))
        .map(|c| c.1)
        .max()
        .unwrap_or_default();
    let s = hedger.stats();
    println!(
        "{} calls: {} hedges sent ({} won), {} denied by the budget, {} in cold start; \
         slowest other call {:.1} ms; delay now {}",
        s.requests,
        s.hedges_sent,
        s.hedge_wins,
        s.budget_denials,
        s.cold_starts,
        others.as_secs_f64() * 1e3,
        s.current_delay_ns
            .map_or("none".into(), |d| format!("{:.1} ms", d as f64 / 1e6)),
    );

    // A call to a stalled backend (every attempt takes 80 ms): its hedge
    // goes out after the delay, and at 30 ms its caller gives up and drops
    // the call. The guard gives the request up there and then, so its
    // hedge no longer counts in flight (nothing waits for a lease to run out).
    let mut call = Box::pin(hedged_call(&hedger, clock, STALLED));
    let during = tokio::select! {
        _ = &mut call => unreachable!("every attempt of this call takes 80 ms"),
        () = sleep(Duration::from_millis(30)) => hedger.hedges_in_flight(clock.now_ns()),
    };
    drop(call);
    let after = hedger.hedges_in_flight(clock.now_ns());
    let s = hedger.stats();
    println!(
        "a call to a stalled backend, dropped by its caller after 30 ms: \
         {during} hedge(s) in flight before the drop, {after} after; given up {} time(s)",
        s.gave_up,
    );
}
