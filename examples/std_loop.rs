//! Driving the hedge state machine from a plain std loop: threads play the
//! backend, a channel carries their answers, and `recv_timeout` is the
//! timer. Run: `cargo run --example std_loop`
//!
//! Sixty requests, one after the other, to a backend that answers in
//! 2-4 ms except that one attempt in ten straggles for 60 ms: the primary
//! of every request whose id ends in 0, never the hedge of that request.
//! The output shows the three things a hedger decides:
//! * *when* to hedge: the first ten requests are in cold start and use
//!   the configured prior (`source: Prior`, 20 ms); from then on the delay
//!   is the measured p90 of the window (`source: Target`), a few ms (more
//!   on a loaded machine, whose sleeps overrun);
//! * *whether* it may: request 0 straggles but is not hedged, because the
//!   budget starts empty and is earned by traffic (a share of a token per
//!   request);
//! * *who won*: from request 10 on, each straggling primary gets a hedge
//!   at the delay, the hedge wins (`winner Attempt(1)`), and the request
//!   takes the delay plus a few ms instead of 60 ms.
//!
//! It prints the requests whose primary straggles, the last of each ten
//! and any other a hedge won, then a summary: about one hedge per
//! straggler after the first, well under the budget's share.

use clap::Parser;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, TimerAction};

/// The hedge state machine driven from a plain std loop: sixty requests to
/// a threaded backend whose every tenth primary straggles for 60 ms; prints
/// when each request would hedge, what the budget allowed and who won.
/// Takes no arguments.
#[derive(Parser)]
#[command(name = "std_loop")]
struct Args {}

/// A backend that is usually quick and sometimes straggles.
fn backend(request: u64, attempt: Attempt) -> Duration {
    let straggler = (request * 7 + u64::from(attempt.0) * 3).is_multiple_of(10);
    Duration::from_millis(if straggler { 60 } else { 2 + request % 3 })
}

fn main() {
    let Args {} = Args::parse(); // --help, or an error for any argument
    let epoch = Instant::now();
    let now = || epoch.elapsed().as_nanos() as u64; // the caller's clock
    let config = HedgeConfig::DEFAULT
        .min_samples(10)
        .prior_delay_ns(20_000_000);
    let mut hedger = Hedger::new(config).expect("valid configuration");
    println!(
        "60 requests; the backend answers in 2-4 ms, but the primary of requests\n\
         0, 10, 20, ... straggles for 60 ms. Expect: a 20 ms prior delay during\n\
         cold start (requests 0-9), then a delay near the measured p90; request 0\n\
         unhedged (the budget starts empty); requests 10, 20, ... won by their\n\
         hedge in a few ms past the delay instead of 60 ms. Shown: the requests\n\
         whose primary straggles, the last of each ten, and any a hedge won.\n"
    );

    for id in 0..60u64 {
        let (tx, rx) = mpsc::channel::<Attempt>();
        let send = |attempt: Attempt| {
            let tx = tx.clone();
            thread::spawn(move || {
                thread::sleep(backend(id, attempt));
                let _ = tx.send(attempt); // the receiver may be gone: a cancelled loser
            });
        };

        let started = now();
        let mut request = hedger.start((), started, Idempotency::Idempotent);
        let plan = request.plan();
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
        let took_ms = now().saturating_sub(started) as f64 / 1e6;
        if id % 10 == 0 || id % 10 == 9 || !winner.is_primary() {
            println!("request {id:2}: plan {plan:?}, winner {winner:?} in {took_ms:.1} ms");
        }
    }
    let s = hedger.stats();
    let delay_ms = hedger.delay_ns(&(), now()).map(|d| d as f64 / 1e6);
    println!(
        "\n{} requests, {} hedges sent ({:.1} % extra), {} won by a hedge, {} denied by the\n\
         budget; delay now {delay_ms:.1?} ms",
        s.requests,
        s.hedges_sent,
        100.0 * s.hedges_sent as f64 / s.requests as f64,
        s.hedge_wins,
        s.budget_denials,
    );
}
