//! The minimal embedded hedger: a `Hedger` over `LogLinearMapping` (α = 2 %,
//! 32 buckets a power of two: 1 024 buckets span 1 µs to over an hour)
//! driven through start, timer, commit and stats, its inputs read through
//! `black_box` so that nothing folds. `.ci/run` reports its flash size
//! (`.text + .rodata + .data`; gated at 16 KiB, the goal is 8 KiB) and checks that no software
//! double-precision routine is reachable from `tailguard_hedger_start`,
//! `tailguard_hedger_timer` or `tailguard_hedger_commit` (construction
//! may use floats: it runs once).
#![no_std]
#![no_main]

mod common;

use core::hint::black_box;
use tailguard::hedge::{
    Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, Request, TimerAction,
};
use tailguard::{CollapsingLowestStore, LogLinearMapping, RatioBudget};

type Embedded = Hedger<(), RatioBudget, 1, CollapsingLowestStore<1024>, LogLinearMapping>;

/// Root of the walk: a request starts (reads the cached delay).
#[no_mangle]
#[inline(never)]
pub fn tailguard_hedger_start(h: &mut Embedded, now: u64) -> Request<()> {
    h.start((), now, Idempotency::Idempotent)
}

/// Root of the walk: the timer fires (may send a hedge).
#[no_mangle]
#[inline(never)]
pub fn tailguard_hedger_timer(
    h: &mut Embedded,
    req: &mut Request<()>,
    now: u64,
) -> Option<Attempt> {
    match h.on_timer(req, now) {
        TimerAction::SendHedge(a) => Some(a),
        _ => None,
    }
}

/// Root of the walk: the record path (samples recorded, windows rotated
/// and their cached delay refreshed).
#[no_mangle]
#[inline(never)]
pub fn tailguard_hedger_commit(
    h: &mut Embedded,
    req: &mut Request<()>,
    a: Attempt,
    now: u64,
) -> bool {
    matches!(h.on_commit(req, a, now), CommitOutcome::Won { .. })
}

#[no_mangle]
pub extern "C" fn _start() -> ! {
    // A constant configuration and mapping: construction folds at compile
    // time (with the accuracy behind `black_box` it links the soft-float
    // routines `validate` and `LogLinearMapping::new` use, once).
    let config = HedgeConfig::DEFAULT.relative_accuracy(0.02);
    let built = LogLinearMapping::with_bits(5, 0)
        .ok()
        .and_then(|m| Embedded::with_mapping(config, RatioBudget::default(), m).ok());
    if let Some(mut h) = built {
        loop {
            let now = black_box(0u64);
            let mut req = tailguard_hedger_start(&mut h, now);
            let winner = tailguard_hedger_timer(&mut h, &mut req, black_box(now))
                .unwrap_or(Attempt::PRIMARY);
            black_box(tailguard_hedger_commit(
                &mut h,
                &mut req,
                winner,
                black_box(now),
            ));
            let stats = h.stats();
            black_box((stats.samples, stats.current_delay_ns));
            if black_box(false) {
                break;
            }
        }
    }
    common::park()
}
