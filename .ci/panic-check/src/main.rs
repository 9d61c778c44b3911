//! Links only if no panic path in tailguard's public API survives
//! optimisation: the panic handler calls a function that is never defined.
#![no_std]
#![no_main]

use core::hint::black_box;
use tailguard::budget::{Budget, HedgeBudget, RatioBudget, TokenBucket};
use tailguard::hedge::{Attempt, Failure, HedgeConfig, Hedger, Idempotency, SharedHedger};
use tailguard::window::{LatencyWindow, Rotation};
use tailguard::{
    CollapsingHighestStore, DDSketch, IndexMapping, LinearMapping, LogLinearMapping,
    LogarithmicMapping, SignedSketch,
};

extern "C" {
    /// Deliberately undefined: referenced only from the panic handler.
    fn tailguard_panic_path_is_reachable() -> !;
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: never runs; the link fails first if this is reachable.
    unsafe { tailguard_panic_path_is_reachable() }
}

fn sketches() {
    let alpha = black_box(0.01);
    if let Ok(mut s) = DDSketch::new(alpha) {
        let _ = s.add(black_box(1.5));
        let _ = s.add_all(black_box(&[2.5, -1.0, 7.0]));
        let _ = s.add_weighted(black_box(-2.0), black_box(7));
        let _ = black_box(s.quantile(black_box(0.99)));
        let _ = black_box(s.quantiles(&[black_box(0.5), black_box(0.9)]));
        let _ = black_box(s.rank(black_box(3.0)));
        let other = s.clone();
        let _ = s.merge(&other);
        let _ = black_box(s.quantile_with(&other, black_box(0.5)));
        let _ = black_box((s.count(), s.min(), s.max(), s.mean(), s.collapse()));
        s.clear();
    }
    if let Ok(mut s) =
        SignedSketch::<LogarithmicMapping, CollapsingHighestStore<64>>::with_accuracy(alpha)
    {
        let _ = s.add(black_box(-1e300));
        let _ = black_box(s.quantile(black_box(0.1)));
        let _ = black_box(s.rank(black_box(-3.0)));
    }
    if let Ok(mut s) = DDSketch::<LogLinearMapping>::with_accuracy(alpha) {
        let _ = s.add_u64(black_box(4_000_000));
        let _ = s.add_u64(black_box(0));
        let _ = s.add(black_box(2.5));
        let _ = black_box((s.quantile(black_box(0.99)), s.sum(), s.min(), s.max()));
        let m = *s.mapping();
        let _ = black_box((m.index_u64(black_box(u64::MAX)), m.value(black_box(-7))));
        let _ = black_box(LogLinearMapping::with_gamma(
            black_box(1.01),
            black_box(3.0),
        ));
        let _ = black_box(LogLinearMapping::with_bits(black_box(9), black_box(-5)));
    }
    if let Ok(mut s) = DDSketch::new(alpha) {
        let _ = s.add_u64(black_box(u64::MAX));
    }
    if let Ok(mut s) = SignedSketch::<LinearMapping>::with_accuracy(alpha) {
        let _ = s.add(black_box(1e-300));
        let _ = black_box(s.quantiles(&[black_box(0.3)]));
    }
}

fn window() {
    if let Ok(mut w) = LatencyWindow::<tailguard::CubicMapping>::new(
        black_box(0.01),
        black_box(1_000),
        black_box(0.9),
    ) {
        let _ = w.record(black_box(5), black_box(1_000_000));
        let _ = w.record_censored(black_box(7), black_box(3_000_000));
        w.advance(black_box(u64::MAX));
        let _ = black_box((w.cached_quantile(), w.quantile(black_box(0.5))));
        let _ = black_box((w.quantile_at(black_box(3)), w.count_at(black_box(u64::MAX))));
    }
    let rotation = Rotation {
        period_ns: black_box(0),
        min_samples: black_box(3),
        max_samples: black_box(1),
    };
    if let Ok(mapping) = tailguard::CubicMapping::new(black_box(0.02)) {
        if let Ok(mut w) = LatencyWindow::<_>::with_rotation(mapping, rotation, black_box(0.99)) {
            let _ = w.record_censored(black_box(u64::MAX), black_box(u64::MAX));
            let _ = w.record(black_box(0), black_box(0));
            let _ = black_box((
                w.cached_quantile(),
                w.rotations(),
                Rotation::samples_for_quantile(black_box(0.999)),
            ));
        }
    }
}

fn budgets() {
    if let Ok(b) = TokenBucket::new(black_box(10), black_box(3)) {
        let _ = black_box(b.try_acquire(black_box(7)));
        let _ = black_box(b.stats());
    }
    if let Ok(b) = TokenBucket::from_share(black_box(1_000), black_box(500), black_box(2)) {
        let _ = black_box(b.balance_at(black_box(9)));
    }
    if let Ok(b) = RatioBudget::new(black_box(1_000), black_box(10)) {
        b.on_request(black_box(1));
        let _ = black_box(b.try_acquire(black_box(2)));
    }
}

fn hedging() {
    let config = HedgeConfig::DEFAULT
        .max_hedges(black_box(3))
        .prior_delay_ns(black_box(1_000))
        .max_hedges_in_flight(black_box(1))
        .in_flight_lease_ns(black_box(7))
        .deadline_ns(black_box(9_000));
    if let Ok(mut h) = Hedger::<u8, Budget, 2>::with_budget(config, Budget::default()) {
        let mut r = h.start(black_box(1), black_box(10), Idempotency::Idempotent);
        black_box((r.plan(), r.next_timer()));
        let _ = black_box(h.on_timer(&mut r, black_box(2_000)));
        let _ = black_box(r.route(Attempt(black_box(1)), black_box(2)));
        let _ = black_box(h.on_failure(
            &mut r,
            Attempt(black_box(1)),
            black_box(2_500),
            Failure::Retryable,
        ));
        let _ = black_box(h.on_commit(&mut r, Attempt(black_box(0)), black_box(3_000)));
        let _ = black_box(h.abandon(&mut r, black_box(u64::MAX)));
        let mut dropped = h.start(
            black_box(2),
            black_box(u64::MAX / 2),
            Idempotency::Idempotent,
        );
        let _ = black_box(h.on_timer(&mut dropped, black_box(u64::MAX)));
        drop(dropped); // mid-race, without an event
        let mut failed = h.start(black_box(0), black_box(3), Idempotency::Idempotent);
        let _ = black_box(h.on_failure(
            &mut failed,
            Attempt(black_box(0)),
            black_box(5),
            Failure::Fatal,
        ));
        let _ = black_box((
            h.stats(),
            h.delay_ns(&1, black_box(4)),
            h.plan(&2, black_box(5)),
        ));
        let _ = black_box((
            h.hedges_in_flight(black_box(6)),
            h.evict_idle(black_box(5), black_box(1)),
        ));
        let _ = black_box((h.budget_stats(&1), h.targets()));
    }
    if let Ok(mut h) = Hedger::<u8, Budget, 3>::with_budget_per_target(config, Budget::default()) {
        let mut r = h.start(black_box(7), black_box(1), Idempotency::NotIdempotent);
        let _ = black_box(h.on_timer(&mut r, black_box(20_000)));
        let _ = black_box((h.budget_stats(&7), h.stats()));
    }
    // The integer record path: keys, representatives and the refresh.
    type LogLinear = Hedger<u8, Budget, 2, tailguard::CollapsingLowestStore<64>, LogLinearMapping>;
    if let Ok(m) = LogLinearMapping::with_bits(black_box(23), black_box(-5)) {
        if let Ok(mut h) = LogLinear::with_mapping(config, Budget::default(), m) {
            let mut r = h.start(black_box(1), black_box(10), Idempotency::Idempotent);
            let _ = black_box(h.on_timer(&mut r, black_box(u64::MAX)));
            let _ = black_box(h.on_commit(&mut r, Attempt(black_box(1)), black_box(7)));
            let _ = black_box(h.mapping().value_u64(black_box(i32::MIN)));
            if let Some(w) = h.window(&1) {
                let _ = black_box(w.quantile(black_box(0.3)));
            }
        }
    }
}

fn shared_hedging() {
    let config = HedgeConfig::DEFAULT
        .max_hedges(black_box(3))
        .min_samples(black_box(1))
        .rotation_samples(black_box(2))
        .prior_delay_ns(black_box(1_000))
        .max_hedges_in_flight(black_box(1))
        .in_flight_lease_ns(black_box(7))
        .deadline_ns(black_box(9_000));
    if let Ok(h) = SharedHedger::<Budget, 2>::with_budget(config, Budget::default()) {
        for (target, t) in [(1, 10), (0, 3), (usize::MAX, 1 << 40), (5, u64::MAX)] {
            let (target, t) = (black_box(target), black_box(t));
            let mut r = h.start(target, t, Idempotency::Idempotent);
            black_box((r.plan(), r.next_timer()));
            let _ = black_box(h.on_timer(&mut r, t.saturating_add(2_000)));
            let _ = black_box(r.route(Attempt(black_box(1)), black_box(target)));
            let _ = black_box(h.on_failure(&mut r, Attempt(1), t, Failure::Retryable));
            let _ = black_box(h.on_commit(&mut r, Attempt(black_box(0)), black_box(3_000)));
            let _ = black_box(h.abandon(&mut r, black_box(u64::MAX)));
        }
        let _ = black_box((
            h.stats(),
            h.delay_ns(1, black_box(4)),
            h.plan(7, black_box(5)),
        ));
        let _ = black_box((
            h.hedges_in_flight(black_box(6)),
            h.budget_stats(),
            h.targets(),
        ));
    }
}

#[no_mangle]
pub extern "C" fn _start() -> ! {
    sketches();
    window();
    budgets();
    hedging();
    shared_hedging();
    loop {
        core::hint::spin_loop();
    }
}
