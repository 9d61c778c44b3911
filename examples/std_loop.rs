//! Driving the hedge state machine from a plain std loop: threads play the
//! backend, a channel carries their answers, and `recv_timeout` is the
//! timer. Run: `cargo run --example std_loop`

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, TimerAction};

/// A backend that is usually quick and sometimes straggles.
fn backend(request: u64, attempt: Attempt) -> Duration {
    let straggler = (request * 7 + u64::from(attempt.0) * 3).is_multiple_of(10);
    Duration::from_millis(if straggler { 60 } else { 2 + request % 3 })
}

fn main() {
    let epoch = Instant::now();
    let now = || epoch.elapsed().as_nanos() as u64; // the caller's clock
    let config = HedgeConfig::DEFAULT
        .min_samples(10)
        .prior_delay_ns(20_000_000);
    let mut hedger = Hedger::new(config).expect("valid configuration");

    for id in 0..60u64 {
        let (tx, rx) = mpsc::channel::<Attempt>();
        let send = |attempt: Attempt| {
            let tx = tx.clone();
            thread::spawn(move || {
                thread::sleep(backend(id, attempt));
                let _ = tx.send(attempt); // the receiver may be gone: a cancelled loser
            });
        };

        let (mut request, plan) = hedger.start((), now(), Idempotency::Idempotent);
        send(Attempt::PRIMARY);
        let winner = loop {
            // Wait for an answer, or until the machine's next timer.
            let answer = match request.next_timer() {
                Some(at) => rx
                    .recv_timeout(Duration::from_nanos(at.saturating_sub(now())))
                    .ok(),
                None => rx.recv().ok(),
            };
            match answer {
                Some(attempt) => match hedger.on_commit(&mut request, attempt, now()) {
                    CommitOutcome::Won { winner, cancel } => {
                        // A real client would abort `cancel`'s I/O here.
                        let _ = cancel;
                        break winner;
                    }
                    CommitOutcome::Late | CommitOutcome::Unknown => continue,
                },
                None => match hedger.on_timer(&mut request, now()) {
                    TimerAction::SendHedge(hedge) => send(hedge),
                    TimerAction::GiveUp { .. } => unreachable!("no deadline configured"),
                    TimerAction::Wait { .. } | TimerAction::Skip(_) => {}
                },
            }
        };
        if id % 10 == 9 || !winner.is_primary() {
            println!("request {id:2}: plan {plan:?}, winner {winner:?}");
        }
    }
    let s = hedger.stats();
    println!(
        "\n{} requests, {} hedges sent ({:.1} % extra), {} won by a hedge; delay now {:?} ns",
        s.requests,
        s.hedges_sent,
        100.0 * s.hedges_sent as f64 / s.requests as f64,
        s.hedge_wins,
        hedger.delay_ns(&()),
    );
}
