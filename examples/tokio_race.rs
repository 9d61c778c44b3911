//! Hedging from an async runtime: attempts are tokio tasks, the loser is
//! aborted, the timer is `sleep_until`. The hedger sits behind a mutex that
//! each event holds for nanoseconds, never across an `.await`.
//! Run: `cargo run --example tokio_race`

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, TimerAction};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

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

/// One hedged call: races attempts until one answers. If this future is
/// dropped midway (a caller's timeout, a `select!` that lost), `request` is
/// dropped with it: safe, its hedge stops counting against the in-flight cap
/// within the lease; `Hedger::abandon` would release it at once.
async fn hedged_call(hedger: &Mutex<Hedger>, epoch: Instant, id: u64) -> String {
    let now = || epoch.elapsed().as_nanos() as u64;
    // The timer to arm is always `next_timer()`; `request.plan()` only informs.
    let mut request = hedger
        .lock()
        .unwrap()
        .start((), now(), Idempotency::Idempotent);
    let mut attempts = JoinSet::new();
    attempts.spawn(async move { (Attempt::PRIMARY, backend(id, Attempt::PRIMARY).await) });
    loop {
        let timer = request
            .next_timer()
            .map(|at| epoch + Duration::from_nanos(at));
        tokio::select! {
            Some(Ok((attempt, answer))) = attempts.join_next() => {
                let outcome = hedger.lock().unwrap().on_commit(&mut request, attempt, now());
                if let CommitOutcome::Won { .. } = outcome {
                    attempts.abort_all(); // cancel the losers
                    return answer;
                }
            }
            _ = sleep_until(timer.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if timer.is_some() => {
                let action = hedger.lock().unwrap().on_timer(&mut request, now());
                if let TimerAction::SendHedge(hedge) = action {
                    attempts.spawn(async move { (hedge, backend(id, hedge).await) });
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let config = HedgeConfig::DEFAULT
        .min_samples(10)
        .prior_delay_ns(20_000_000);
    let hedger = Arc::new(Mutex::new(
        Hedger::new(config).expect("valid configuration"),
    ));
    let epoch = Instant::now();
    let mut clients = JoinSet::new();
    for worker in 0..4u64 {
        let hedger = Arc::clone(&hedger);
        clients.spawn(async move {
            let mut slowest = Duration::ZERO;
            for i in 0..25 {
                let started = Instant::now();
                let _answer = hedged_call(&hedger, epoch, worker * 100 + i).await;
                slowest = slowest.max(started.elapsed());
            }
            slowest
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(Ok(s)) = clients.join_next().await {
        slowest = slowest.max(s);
    }
    let s = hedger.lock().unwrap().stats();
    println!(
        "{} requests, {} hedges ({} won), {} denied by the budget, {} in cold start;\n\
         slowest call {:?} (a straggler alone takes 80 ms: the early ones ran before\n\
         the budget, a share of the traffic, had earned a token)",
        s.requests, s.hedges_sent, s.hedge_wins, s.budget_denials, s.cold_starts, slowest
    );
}
