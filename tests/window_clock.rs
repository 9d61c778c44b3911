//! The window's time under clocks that disagree: threads whose clocks lag
//! (by less than two periods, or by an hour), clocks stepped back for a
//! moment or for good, clocks jumped ahead. The window's time is the latest
//! non-stale timestamp it has seen; a timestamp behind it by less than two
//! periods is recorded but moves neither that time nor the rotation
//! period's start; a stale one (two periods or more behind) neither, until
//! a run of `STALE_RUN` distinct ones spanning more than two periods takes
//! the new clock. Each property is
//! checked on `LatencyWindow` and through `Hedger` and `SharedHedger`
//! (publishing every sample at once, and in batches of 64), with numbers.

use tailguard::budget::Budget;
use tailguard::hedge::{Attempt, CommitOutcome, HedgeConfig, Hedger, Idempotency, SharedHedger};
use tailguard::window::LatencyWindow;
use tailguard::CubicMapping;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const HOUR: u64 = 3_600 * SEC;
/// The rotation period of every window here.
const PERIOD: u64 = 10 * SEC;
/// The relative accuracy of every window here (the default).
const ALPHA: f64 = 0.01;
const RUN: u64 = LatencyWindow::<CubicMapping>::STALE_RUN as u64;

fn window() -> LatencyWindow {
    LatencyWindow::new(ALPHA, PERIOD, 0.9).unwrap()
}

/// `b` is within α of `a` (both present, or both absent).
fn within_alpha(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) as f64 <= ALPHA * a as f64,
        (None, None) => true,
        _ => false,
    }
}

// ---------------------------------------------------------------------
// `LatencyWindow`
// ---------------------------------------------------------------------

/// Two samples stamped 1.9 periods behind (a thread whose clock lags, a
/// clock stepped back a little and returned), then the true time 1.5 s
/// later: nothing is emptied, every sample is kept, the estimate stays.
#[test]
fn two_samples_lagging_under_two_periods_empty_nothing() {
    let mut w = window();
    for i in 0..100u64 {
        w.record(100 * SEC + i * MS, MS).unwrap();
    }
    let t = 100 * SEC + 99 * MS;
    let lag = 19 * SEC; // 1.9 periods
    w.record(t - lag, MS).unwrap();
    w.record(t - lag + 1, MS).unwrap();
    let back = t + 1_500 * MS;
    assert!(!w.is_idle_at(back), "the true time read as an idle gap");
    assert_eq!(w.count_at(back), 102);
    w.record(back, MS).unwrap();
    assert_eq!(w.count(), 103, "emptied");
    assert_eq!(w.rotations(), 0);
    let q = w.quantile_at(back + 1).expect("warm");
    assert!(q.abs_diff(MS) as f64 <= ALPHA * MS as f64, "{q}");
}

/// Two threads feed one window: A at the true time, ten samples a second
/// for 20 s; B, whose clock reads 1.9 periods late, two samples every 2 s.
/// The count never drops (one rotation, of an empty previous half) and
/// every sample is kept.
#[test]
fn a_thread_lagging_under_two_periods_empties_nothing() {
    let mut w = window();
    let base = 1_000 * SEC;
    let lag = 19 * SEC;
    let mut last = 0;
    for i in 0..200u64 {
        let t = base + i * 100 * MS;
        w.record(t, MS).unwrap();
        if i % 20 == 0 {
            w.record(t - lag, MS).unwrap();
            w.record(t - lag + 1, MS).unwrap();
        }
        assert!(
            w.count() >= last,
            "dropped from {last} to {} at {i}",
            w.count()
        );
        last = w.count();
    }
    assert_eq!(w.count(), 220);
    assert_eq!(
        w.rotations(),
        1,
        "the period ended once in 20 s of true time"
    );
}

/// A thread whose clock is an hour behind records every tenth sample, for
/// 1 s of true time at 1 kHz: no period has passed, so nothing rotates and
/// every one of the 1 100 samples is kept.
#[test]
fn a_thread_an_hour_behind_neither_rotates_nor_empties() {
    let mut w = window();
    let base = 10_000 * SEC;
    for i in 0..1_000u64 {
        let t = base + i * MS;
        w.record(t, MS).unwrap();
        if i % 10 == 9 {
            w.record(t - HOUR, MS).unwrap();
        }
    }
    assert_eq!(w.rotations(), 0);
    assert_eq!(w.count(), 1_100);
}

/// A thread lagging half a period records once a second beside one at the
/// true time: the window rotates exactly as it does without it, every
/// period of true time.
#[test]
fn a_lagging_thread_does_not_hasten_rotation() {
    let run = |lagging: bool| {
        let mut w = window();
        let base = 1_000 * SEC;
        for i in 0..1_000u64 {
            let t = base + i * 100 * MS; // 100 s of true time
            w.record(t, MS).unwrap();
            if lagging && i % 10 == 5 {
                w.record(t - PERIOD / 2, MS).unwrap();
            }
        }
        (w.rotations(), w.count())
    };
    let (rotations, count) = run(false);
    assert_eq!(rotations, 9, "every 10 s from the first sample");
    assert_eq!(count, 200);
    let (lagging, count) = run(true);
    assert_eq!(lagging, rotations, "rotations with a lagging thread");
    assert_eq!(count, 220);
}

/// A clock stepped back for good by 1.5 periods: the window's time waits
/// for the new clock to pass it, so the next rotation comes at most 1.5
/// periods late (here exactly: 20 s after the step instead of 5 s), within
/// two periods and the step, and every period after that.
#[test]
fn a_clock_stepped_back_under_two_periods_for_good_still_rotates() {
    let mut w = window();
    let base = 1_000 * SEC;
    let mut t = base;
    // 25 s at ten samples a second: rotations at 10 s and 20 s.
    while t < base + 25 * SEC {
        w.record(t, MS).unwrap();
        t += 100 * MS;
    }
    assert_eq!(w.rotations(), 2);
    let step = 15 * SEC;
    let mut clock = t - step;
    let mut rotated_after = Vec::new();
    let mut counts = Vec::new();
    for i in 0..450u64 {
        let before = w.rotations();
        w.record(clock, MS).unwrap();
        if w.rotations() > before {
            rotated_after.push(i * 100 * MS); // true time since the step
        }
        counts.push(w.count());
        clock += 100 * MS;
    }
    // Without the step the next rotation was due 5 s after it (30 s).
    let first = rotated_after[0];
    assert!(
        first <= 5 * SEC + step,
        "first rotation {first} ns after the step"
    );
    assert!(first <= 2 * PERIOD + step);
    assert_eq!(first, 20 * SEC);
    // Then every period.
    for pair in rotated_after.windows(2) {
        assert_eq!(pair[1] - pair[0], PERIOD, "{rotated_after:?}");
    }
    assert_eq!(rotated_after.len(), 3, "{rotated_after:?}");
    // Never emptied: at least a period's 100 samples all along.
    assert!(counts.iter().all(|&c| c >= 100), "{counts:?}");
}

/// A clock stepped back two periods or more for good is taken once
/// `STALE_RUN` (16) distinct timestamps on it (repeats count once, a
/// timestamp behind the window's time by less than two periods breaks no
/// run) span more than two periods of it: the last becomes the window's
/// time and the period restarts there. Fifteen timestamps over fourteen
/// periods, or sixteen over two periods less 5 ns, are not taken.
#[test]
fn a_clock_stepped_back_for_good_is_taken_after_sixteen_timestamps_over_two_periods() {
    let over_two = 2 * PERIOD / (RUN - 1) + 1; // 15 gaps: 2 periods + 10 ns
    for (stale, gap) in [
        (RUN - 1, PERIOD),
        (RUN, MS),
        (RUN, over_two - 1),
        (RUN, over_two),
    ] {
        let mut w = window();
        let t = 7_200 * SEC;
        for i in 0..50 {
            w.record(t + i * MS, MS).unwrap();
        }
        let t = t + 49 * MS;
        let back = t - HOUR;
        for i in 0..stale {
            // Each timestamp twice (once), and a thread lagging 1 s between.
            w.record(back + i * gap, 2 * MS).unwrap();
            w.record(back + i * gap, 2 * MS).unwrap();
            if i + 1 < stale {
                w.record(t - SEC, MS).unwrap();
            }
        }
        let recorded = 50 + 2 * stale + stale - 1;
        assert_eq!(w.count(), recorded);
        let last = back + (stale - 1) * gap;
        if last - back < 2 * PERIOD || stale < RUN {
            // Not taken: the true time is still the window's time.
            assert!(!w.is_idle_at(t + 2 * PERIOD - 1), "gap {gap}");
            assert!(w.is_idle_at(t + 2 * PERIOD));
            w.record(t + MS, MS).unwrap();
            assert_eq!(w.count(), recorded + 1);
        } else {
            // Taken: the true time is now an hour ahead, an idle gap...
            assert_eq!(gap, over_two);
            assert!(w.is_idle_at(t + MS));
            assert!(!w.is_idle_at(last + 2 * PERIOD - 1));
            // ...and the period restarted at the 16th: a period on the
            // new clock rotates, not before.
            w.record(last + PERIOD - 1, MS).unwrap();
            assert_eq!(w.rotations(), 0);
            w.record(last + PERIOD, MS).unwrap();
            assert_eq!(w.rotations(), 1);
            assert_eq!(w.count(), recorded + 2);
        }
    }
}

/// A timestamp two periods or more ahead of the window's time empties it
/// (cold start), one less than two periods ahead does not.
#[test]
fn a_timestamp_two_periods_ahead_empties() {
    let mut w = window();
    let base = 100 * SEC;
    for i in 0..50 {
        w.record(base + i * MS, MS).unwrap();
    }
    let t = base + 49 * MS;
    w.record(t - 19 * SEC, MS).unwrap(); // lagging: the window's time stays
    assert!(!w.is_idle_at(t + 2 * PERIOD - 1));
    assert!(w.is_idle_at(t + 2 * PERIOD));
    assert_eq!(w.quantile_at(t + 2 * PERIOD), None);
    w.record(t + 2 * PERIOD - 1, MS).unwrap();
    assert_eq!(w.count(), 52);
    let t = t + 2 * PERIOD - 1;
    w.record(t + 2 * PERIOD, MS).unwrap();
    assert_eq!(w.count(), 1);
    assert_eq!(w.rotations(), 1, "the period ended once before the gap");
}

// ---------------------------------------------------------------------
// Through the hedgers
// ---------------------------------------------------------------------

/// One request at a time, primary answering after `latency`, no timer.
trait Drive {
    fn request(&mut self, at: u64, latency: u64);
    fn delay(&self, now: u64) -> Option<u64>;
}

impl Drive for Hedger {
    fn request(&mut self, at: u64, latency: u64) {
        let mut r = self.start((), at, Idempotency::Idempotent);
        let won = self.on_commit(&mut r, Attempt::PRIMARY, at + latency);
        assert!(matches!(won, CommitOutcome::Won { .. }), "{won:?}");
    }

    fn delay(&self, now: u64) -> Option<u64> {
        self.delay_ns(&(), now)
    }
}

impl Drive for SharedHedger {
    fn request(&mut self, at: u64, latency: u64) {
        let mut r = self.start(0, at, Idempotency::Idempotent);
        let won = self.on_commit(&mut r, Attempt::PRIMARY, at + latency);
        assert!(matches!(won, CommitOutcome::Won { .. }), "{won:?}");
    }

    fn delay(&self, now: u64) -> Option<u64> {
        self.delay_ns(0, now)
    }
}

/// The three hedgers a scenario runs on, by name.
const HEDGERS: [&str; 3] = ["Hedger", "SharedHedger batch 1", "SharedHedger batch 64"];

fn hedger(name: &str, config: HedgeConfig) -> Box<dyn Drive> {
    match name {
        "Hedger" => Box::new(Hedger::with_budget(config, Budget::Unlimited).unwrap()),
        "SharedHedger batch 1" => Box::new(
            SharedHedger::with_budget(config, Budget::Unlimited)
                .unwrap()
                .with_batch(1),
        ),
        _ => {
            let h = SharedHedger::with_budget(config, Budget::Unlimited).unwrap();
            assert_eq!(h.batch(), 64);
            Box::new(h)
        }
    }
}

fn config() -> HedgeConfig {
    HedgeConfig::DEFAULT.rotation_period_ns(PERIOD)
}

/// Warm at 2 ms, then (with `lag`) two requests committed by a thread
/// 19 s behind, then one at the true time 1.5 s on: the delay after it.
fn two_lagging_requests(h: &mut dyn Drive, lag: bool) -> Option<u64> {
    let mut t = 100 * SEC;
    for _ in 0..100 {
        h.request(t, 2 * MS);
        t += 10 * MS;
    }
    assert!(h.delay(t).is_some(), "warm");
    if lag {
        for k in 0..2 {
            h.request(t - 19 * SEC + k * MS, 2 * MS);
        }
    }
    let back = t + 1_500 * MS;
    assert!(
        h.delay(back).is_some(),
        "cold before the true time's request"
    );
    h.request(back, 2 * MS);
    h.delay(back + 3 * MS)
}

#[test]
fn two_requests_lagging_under_two_periods_leave_the_delay() {
    for name in HEDGERS {
        let lagging = two_lagging_requests(&mut *hedger(name, config()), true);
        let plain = two_lagging_requests(&mut *hedger(name, config()), false);
        assert!(plain.is_some_and(|d| d.abs_diff(2 * MS) <= 2 * MS / 50));
        assert!(
            within_alpha(plain, lagging),
            "{name}: {lagging:?}, without the lag {plain:?}"
        );
    }
}

/// Through `Hedger`, whose window is public: all 103 samples are kept.
#[test]
fn two_requests_lagging_under_two_periods_keep_every_sample() {
    let mut h: Hedger = Hedger::with_budget(config(), Budget::Unlimited).unwrap();
    assert!(two_lagging_requests(&mut h, true).is_some());
    let w = h.window(&()).unwrap();
    assert_eq!((w.count(), w.rotations()), (103, 0));
}

/// 5 000 requests `gap` apart (1 ms, and 20 ms one request in 13: p95 =
/// 20 ms), with a thread an hour behind committing a 1 ms request after
/// every tenth: the delay read every 250 requests.
fn an_hour_behind(h: &mut dyn Drive, gap: u64, stale: bool) -> Vec<Option<u64>> {
    let base = 10_000 * SEC;
    let mut delays = Vec::new();
    for i in 0..5_000u64 {
        let t = base + i * gap;
        let latency = if i % 13 == 0 { 20 * MS } else { MS };
        h.request(t, latency);
        if stale && i % 10 == 9 {
            h.request(t - HOUR, MS);
        }
        if i % 250 == 0 && i > 0 {
            delays.push(h.delay(t));
        }
    }
    delays
}

#[test]
fn a_thread_an_hour_behind_leaves_the_delay() {
    let config = config().quantile(0.95);
    // At 1 kHz every sample is published at once; at 10 kHz the default
    // lane batches them.
    for (name, gap) in HEDGERS.into_iter().flat_map(|n| [(n, MS), (n, MS / 10)]) {
        let with = an_hour_behind(&mut *hedger(name, config), gap, true);
        let without = an_hour_behind(&mut *hedger(name, config), gap, false);
        assert_eq!(without.len(), 19);
        assert!(
            without
                .iter()
                .all(|d| d.is_some_and(|d| d.abs_diff(20 * MS) <= 20 * MS / 50)),
            "{name}, gap {gap}: {without:?}"
        );
        let off = with
            .iter()
            .zip(&without)
            .filter(|(a, b)| !within_alpha(**b, **a))
            .count();
        assert_eq!(off, 0, "{name}, gap {gap}: {with:?}\nwithout: {without:?}");
    }
}

/// `clocks` threads, each an hour behind the one before, taking turns in
/// runs of `run` requests each (a scheduler's time slices, a lane's
/// batch), 1 ms apart on each clock, with the latencies of
/// [`an_hour_behind`] (p95 = 20 ms): the delay read by each thread on its
/// own clock after every run.
fn turns_an_hour_apart(h: &mut dyn Drive, clocks: u64, run: u64) -> Vec<(u64, Option<u64>)> {
    let base = 10_000 * SEC;
    let mut delays = Vec::new();
    for i in 0..8_000u64 {
        let clock = (i / run) % clocks;
        let t = base + i * MS - clock * HOUR;
        let latency = if i % 13 == 0 { 20 * MS } else { MS };
        h.request(t, latency);
        if i >= 1_000 && (i + 1) % run == 0 {
            delays.push((clock, h.delay(t + MS)));
        }
    }
    delays
}

/// Turns of threads an hour behind one another (two or three clocks), of
/// any number of requests shorter than two periods (the others then still
/// within two periods of the window's time), leave the window its clock
/// and every sample: every
/// delay read on either clock is the p95, 20 ms, within α. (A run of
/// `STALE_RUN` stale timestamps takes a clock only once it also spans
/// more than two periods.)
#[test]
fn a_thread_an_hour_behind_taking_turns_leaves_the_delay() {
    let config = config().quantile(0.95);
    for name in HEDGERS {
        for (clocks, run) in [2, 3]
            .into_iter()
            .flat_map(|c| [RUN - 1, RUN, 20, 64, 200, 1_000].map(|r| (c, r)))
        {
            let delays = turns_an_hour_apart(&mut *hedger(name, config), clocks, run);
            assert!(delays.len() >= 7, "{name}, {clocks} clocks, run {run}");
            let off: Vec<_> = delays
                .iter()
                .filter(|(_, d)| !within_alpha(Some(20 * MS), *d))
                .collect();
            assert!(
                off.is_empty(),
                "{name}, {clocks} clocks, run {run}: {} of {} reads off: {:?}",
                off.len(),
                delays.len(),
                &off[..off.len().min(5)]
            );
        }
    }
}

/// Through `Hedger`, whose window is public: the thread an hour behind
/// adds its samples and rotates nothing (the window rotates on count, as
/// it does without it: 2 000 samples for p95).
#[test]
fn a_thread_an_hour_behind_rotates_the_hedgers_window_on_count_only() {
    let config = config().quantile(0.95);
    for stale in [false, true] {
        let mut h: Hedger = Hedger::with_budget(config, Budget::Unlimited).unwrap();
        an_hour_behind(&mut h, MS, stale);
        let w = h.window(&()).unwrap();
        assert_eq!(w.rotations(), 2, "stale {stale}");
        let samples = if stale { 5_500 } else { 5_000 };
        assert_eq!(w.count(), samples - 2_000, "stale {stale}");
    }
}

/// A clock stepped back 1.5 periods for good while the backend slows from
/// 2 ms to 4 ms: the delay is the new one within two periods and the step
/// (of true time), and stays warm throughout.
#[test]
fn a_clock_stepped_back_under_two_periods_for_good_is_followed() {
    for name in HEDGERS {
        let mut h = hedger(name, config());
        let mut t = 100 * SEC;
        for _ in 0..300 {
            h.request(t, 2 * MS);
            t += 100 * MS;
        }
        let mut clock = t - 15 * SEC;
        let mut followed = None;
        for i in 0..400u64 {
            h.request(clock, 4 * MS);
            clock += 100 * MS;
            let d = h.delay(clock);
            assert!(d.is_some(), "{name}: cold at {i}");
            if followed.is_none() && within_alpha(Some(4 * MS), d) {
                followed = Some(i * 100 * MS);
            }
        }
        let followed = followed.expect("followed");
        assert!(
            followed <= 2 * PERIOD + 15 * SEC,
            "{name}: after {followed} ns"
        );
    }
}

/// What held before still holds, through every hedger: a clock stepped back
/// an hour for good is taken once its requests span more than two periods
/// (before, the delay is read on either clock; after, the old time is an
/// idle gap), a timestamp two periods ahead reads cold, and the delay
/// recovers to within α of the new latency.
#[test]
fn a_clock_stepped_back_for_good_and_a_jump_ahead_are_recovered_from() {
    for name in HEDGERS {
        let mut h = hedger(name, config());
        let mut t = 7_200 * SEC;
        for _ in 0..300 {
            h.request(t, 2 * MS);
            t += 10 * MS;
        }
        // Requests an hour back, 100 ms apart, over two periods: the true
        // time is still warm, and the new clock reads the delay too.
        let back = t - HOUR;
        let spanning = 2 * PERIOD / (100 * MS);
        for i in 0..spanning {
            h.request(back + i * 100 * MS, 3 * MS);
            let now = back + i * 100 * MS + 4 * MS;
            assert!(
                h.delay(now).is_some(),
                "{name}: cold at {i} on the new clock"
            );
        }
        assert!(h.delay(t).is_some(), "{name}: cold after two periods");
        // The next spans more than two periods: the new clock is the
        // window's time.
        h.request(back + spanning * 100 * MS, 3 * MS);
        let last = back + spanning * 100 * MS + 3 * MS;
        assert!(h.delay(last + MS).is_some(), "{name}");
        assert_eq!(h.delay(t), None, "{name}: the old time is an idle gap now");
        // Traffic on the new clock, 4 ms: followed within two periods.
        let mut clock = last + 10 * MS;
        for _ in 0..2_100 {
            h.request(clock, 4 * MS);
            clock += 10 * MS;
        }
        assert!(
            within_alpha(Some(4 * MS), h.delay(clock)),
            "{name}: {:?}",
            h.delay(clock)
        );
        // Two periods ahead: cold; then warm again at the new latency after
        // `min_samples` (20) answers.
        let ahead = clock + 2 * PERIOD + 4 * MS;
        assert_eq!(h.delay(ahead), None, "{name}");
        let mut clock = ahead;
        for _ in 0..20 {
            h.request(clock, 5 * MS);
            clock += 10 * MS;
        }
        assert!(
            within_alpha(Some(5 * MS), h.delay(clock)),
            "{name}: {:?}",
            h.delay(clock)
        );
    }
}
