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
    Attempt, CommitOutcome, HedgeConfig, Idempotency, SharedHedger, TimerAction,
};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, timeout, Instant};

/// Hedging from tokio by hand: attempts are tasks, the loser is aborted,
/// the timer is `sleep_until`; one SharedHedger serves 100 calls from 4
/// clients on 2 worker threads, and a last call cut short by a 1 ms
/// timeout is given up at once. Takes no arguments.
#[derive(Parser)]
#[command(name = "tokio_race")]
struct Args {}

/// The backend: 3-5 ms, but one attempt in eight straggles for 80 ms.
async fn backend(request: u64, attempt: Attempt) -> String {
    let straggler = (request * 5 + u64::from(attempt.0)).is_multiple_of(8);
    sleep(Duration::from_millis(if straggler {
        80
    } else {
        3 + request % 3
    }))
    .await;
    format!("answer to {request} from {attempt:?}")
}

/// One hedged call: races attempts until one answers. Dropping this future
/// drops `request`, which gives the request up in the hedger (its hedges
/// leave the in-flight count, its attempts are recorded as censored) and
/// `attempts`, which aborts the tasks.
async fn hedged_call(hedger: &Arc<SharedHedger>, clock: MonotonicClock, id: u64) -> String {
    let mut request = RequestGuard::start(Arc::clone(hedger), clock, 0, Idempotency::Idempotent);
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
                if let CommitOutcome::Won { .. } = request.on_commit(attempt) {
                    attempts.abort_all(); // cancel the losers
                    return answer;
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
            let mut slowest = Duration::ZERO;
            for i in 0..25 {
                let started = Instant::now();
                let _answer = hedged_call(&hedger, clock, worker * 100 + i).await;
                slowest = slowest.max(started.elapsed());
            }
            slowest
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(Ok(s)) = clients.join_next().await {
        slowest = slowest.max(s);
    }
    // A caller that gives up after 1 ms drops the call midway: the guard
    // gives the request up, and no hedge stays counted in flight.
    let cut_short = timeout(Duration::from_millis(1), hedged_call(&hedger, clock, 7)).await;
    let now = clock.now_ns();
    let s = hedger.stats();
    println!(
        "{} requests, {} hedges ({} won), {} denied by the budget, {} in cold start;\n\
         slowest call {:?} (a straggler alone takes 80 ms: the early ones ran before\n\
         the budget, a share of the traffic, had earned a token);\n\
         a call cut short by its caller's 1 ms timeout ({}): given up {} time(s), \
         {} hedge(s) still counted in flight",
        s.requests,
        s.hedges_sent,
        s.hedge_wins,
        s.budget_denials,
        s.cold_starts,
        slowest,
        if cut_short.is_err() {
            "timed out"
        } else {
            "answered"
        },
        s.gave_up,
        hedger.hedges_in_flight(now),
    );
}
