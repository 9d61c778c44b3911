//! The rotating window under arbitrary timestamps (repeating, backwards,
//! jumping to the ends of `u64`) against a naive model that keeps the raw
//! samples of each half: counts match exactly, and the union quantile is
//! within α of the exact one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailguard::window::LatencyWindow;

#[derive(arbitrary::Arbitrary, Debug)]
enum Op {
    Record { dt: i32, latency: u64 },
    Advance { dt: i32 },
    Jump(u64),
    Query(u8),
    Refresh,
}

#[derive(Default)]
struct Model {
    start: Option<u64>,
    current: Vec<u64>,
    previous: Vec<u64>,
}

impl Model {
    fn advance(&mut self, now: u64, period: u64) {
        let Some(start) = self.start else {
            self.start = Some(now);
            return;
        };
        let elapsed = now.saturating_sub(start);
        if elapsed >= period.saturating_mul(2) {
            self.current.clear();
            self.previous.clear();
            self.start = Some(now);
        } else if elapsed >= period {
            self.previous = std::mem::take(&mut self.current);
            self.start = Some(start + period);
        }
    }
}

const ALPHA: f64 = 0.02;

fuzz_target!(|input: (u16, Vec<Op>)| {
    let period = u64::from(input.0).max(1) * 1_000;
    let mut w: LatencyWindow = LatencyWindow::new(ALPHA, period, 0.9).unwrap();
    let mut model = Model::default();
    let mut now: u64 = 1 << 40;
    for op in input.1.into_iter().take(2_000) {
        let step = |now: u64, dt: i32| now.saturating_add_signed(i64::from(dt));
        match op {
            Op::Record { dt, latency } => {
                now = step(now, dt);
                w.record(now, latency).unwrap();
                model.advance(now, period);
                model.current.push(latency);
            }
            Op::Advance { dt } => {
                now = step(now, dt);
                w.advance(now);
                model.advance(now, period);
            }
            Op::Jump(t) => {
                now = t;
                w.advance(now);
                model.advance(now, period);
            }
            Op::Query(q) => {
                let q = f64::from(q) / 255.0;
                let mut all: Vec<u64> = model.current.iter().chain(&model.previous).copied().collect();
                all.sort_unstable();
                match w.quantile(q).unwrap() {
                    None => assert!(all.is_empty()),
                    Some(estimate) => {
                        let rank = (q * (all.len() - 1) as f64) as usize;
                        let exact = all[rank] as f64;
                        // Above any collapsed bucket: within α. At or below one
                        // (latencies spanning more than the 1024 buckets cover):
                        // over-estimated, never under.
                        let bound = [w.current().collapse(), w.previous().collapse()]
                            .into_iter()
                            .flatten()
                            .map(|c| c.bound)
                            .fold(0.0, f64::max);
                        let slack = 1e-9 * exact + 1e-9;
                        if exact >= bound {
                            assert!(
                                (estimate - exact).abs() <= ALPHA * exact + slack,
                                "q {q}: {estimate} vs {exact}"
                            );
                        } else {
                            assert!(estimate >= exact * (1.0 - ALPHA) - slack, "q {q}: {estimate} vs {exact}");
                        }
                    }
                }
            }
            Op::Refresh => {
                w.refresh();
                assert_eq!(w.cached_quantile_f64(), w.quantile(0.9).unwrap());
            }
        }
        assert_eq!(w.current().count(), model.current.len() as u64);
        assert_eq!(w.previous().count(), model.previous.len() as u64);
    }
});
