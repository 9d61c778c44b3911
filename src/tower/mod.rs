//! A [tower] layer that hedges requests (feature `tower`).
//!
//! [`HedgeLayer`] wraps a service in [`HedgeService`]: each call sends the
//! primary at once and, while no attempt has answered, sends the hedges the
//! [`SharedHedger`](crate::hedge::SharedHedger) releases — at its adaptive
//! delay, within its budget and in-flight cap — on tokio timers. The first
//! attempt to give its *commit signal* wins; the losers are cancelled by
//! dropping their futures. The hedger learns from every attempt exactly as
//! [`crate::hedge`] describes (winner exact, losers censored, failures
//! nothing), timed by the same signal that decides the race.
//!
//! The caller's [`Policy`] says which requests may be duplicated (nothing
//! is, unless it says so), how to copy one, which target each attempt goes
//! to, and which errors are worth another attempt; a [`CommitSignal`] says
//! when a response counts as answered (by default, [`OnResponse`]: as soon
//! as the inner service returns it — for HTTP, the headers; a hook for the
//! first body frame or first token).
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tailguard::hedge::{HedgeConfig, SharedHedger};
//! use tailguard::tower::{AllIdempotent, HedgeLayer};
//! use tokio::time::{sleep, Instant};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! // (Paused clock: the example's sleeps take no real time.)
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Until 20 answers are in, hedge after a 5 ms prior delay.
//! let config = HedgeConfig::DEFAULT.prior_delay_ns(5_000_000);
//! let hedger = Arc::new(SharedHedger::new(config)?);
//! // A backend answering in 1 ms, but its 11th call straggles for 100 ms.
//! let calls = Arc::new(AtomicU32::new(0));
//! let backend = service_fn(move |key: u32| {
//!     let n = calls.fetch_add(1, Ordering::Relaxed);
//!     async move {
//!         sleep(Duration::from_millis(if n == 10 { 100 } else { 1 })).await;
//!         Ok::<_, std::convert::Infallible>(key * 2)
//!     }
//! });
//! // Every request here is a read: `AllIdempotent` may copy them all.
//! let service = HedgeLayer::new(Arc::clone(&hedger), AllIdempotent).layer(backend);
//!
//! // The default budget lets hedges add 15 % to the traffic: ten requests
//! // earn one and a half.
//! for key in 0..10 {
//!     assert_eq!(service.clone().oneshot(key).await?, key * 2);
//! }
//! // The straggler: hedged at 5 ms, the hedge answers 1 ms later and the
//! // straggling attempt is dropped.
//! let started = Instant::now();
//! assert_eq!(service.clone().oneshot(21).await?, 42);
//! assert_eq!(started.elapsed(), Duration::from_millis(6));
//! let stats = hedger.stats();
//! assert_eq!((stats.hedges_sent, stats.hedge_wins), (1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! # Costs
//! A request that answers at its first poll, or that will not hedge, reads
//! the clock twice (start, commit), builds no timer and allocates nothing;
//! one still pending at its first poll with a hedge ahead arms a tokio
//! timer for it, boxed with the state of its race (one allocation, which a
//! failure's retry makes too, without a timer). A duplicable request keeps
//! one copy of the request and one clone of the inner service to make
//! extra attempts from. Extra attempts are boxed. Every call clones the
//! policy and the commit signal into its future: keep them `Copy`, or put
//! what they own (a `String`, a table) behind an `Arc`, or each call
//! allocates for them. See `benches/tower.rs` and the README for
//! measurements.
//!
//! # Runtime
//! The layer runs on tokio and needs its **time driver** (`enable_time`,
//! or `enable_all`) whenever the hedger may hedge or has a deadline. A
//! runtime without one works until the first request that needs a timer,
//! and that one panics (tokio's "timers are disabled"): with the default
//! configuration, not at the first request but once the hedger is warm
//! (20 answers), so a smoke test does not show it. Only a hedger that
//! never hedges and has no deadline (retries only) runs without timers.
//!
//! # Errors
//! A request fails with a [`HedgeError`]: an attempt's error as
//! [`Policy::failure`] classifies it (a fatal one fails the request; a
//! retryable one sends another attempt at once, budget and `max_retries`
//! permitting, and fails the request only when none is left), or the
//! hedger's deadline.
//!
//! Hedging can raise the error rate: the first attempt to *fail* fatally
//! ends the request too, even while another attempt would have answered.
//! A load shedder below the layer (tower's `LoadShed` over a
//! `ConcurrencyLimit`, a server's 503) refuses the hedge at once, because
//! its own primary holds the place, and with [`AllIdempotent`] (every error
//! fatal) that refusal is the request's answer. Classify overload errors
//! as [`Failure::Retryable`](crate::hedge::Failure::Retryable) in your
//! [`Policy::failure`]: a retryable failure of one attempt leaves the
//! others racing. It also releases a replacement at once, budget
//! permitting, into the backend that just refused one (up to
//! `max_retries` replacements a request, 2 by default; the retry throttle
//! counts only retries sent with nothing else in flight): where the
//! backend sheds load, set
//! [`max_retries(0)`](crate::hedge::HedgeConfig::max_retries) (a tight
//! budget curbs only the replacements sent while another attempt races).
//!
//! A backend whose latency rises with its load (a queue, a saturated
//! pool) is another matter: near its capacity the default budget's bursts
//! push it into the slowness that asks for more hedges, and the tail gets
//! far worse than without hedging; replicas that queue attempts a
//! cancellation does not remove gain little from about half their
//! capacity and lose from 60–75 %, sooner when every hedge goes to the
//! same other replica (route each hedge, in `Policy::route`, to a replica
//! other than the primary's, picked at random); replicas that drop a
//! cancelled attempt before they start it gain at every load the README
//! simulates (the losing copy leaves its queue), so let the attempts this
//! layer drops reach the servers as cancellations. Cap the
//! hedges in flight there
//! ([`max_hedges_in_flight`](crate::hedge::HedgeConfig::max_hedges_in_flight),
//! whose docs say how to size it), and do not hedge a backend whose
//! utilisation times `1 +` the budget's share reaches 1, or whose
//! throughput falls as its queue grows.
//!
//! [`HedgeError<E>`] is an error for every inner error `E` that is
//! `Debug + Display`, tower's `BoxError` included, so it turns into a
//! `BoxError` (`?`, `Into`) for the layers around it (`Timeout`,
//! `Buffer`, load shedding). Its message includes the inner error's, and
//! it has no `source` (a reporter would print the inner message twice):
//! match [`HedgeError::Service`] to get the inner error back.
//!
//! # Readiness
//! See [`HedgeService`]: the primary uses the service readied by
//! `poll_ready`; each extra attempt waits for its own clone's readiness,
//! and a clone whose readiness fails ends the request's extra attempts.
//!
//! # Cancellation
//! Dropping the response future — a `select!` that lost, a timeout, an
//! aborted task — drops every attempt and gives the request up in the
//! hedger at once ([`crate::guard::RequestGuard`]): its hedges leave the
//! in-flight count and its attempts are recorded as censored.
//!
//! [tower]: https://docs.rs/tower

mod clock;
mod error;
mod future;
mod layer;
mod policy;
mod service;

pub use clock::TokioClock;
pub use error::HedgeError;
pub use future::ResponseFuture;
pub use layer::HedgeLayer;
pub use policy::{AllIdempotent, CommitSignal, OnResponse, Policy};
pub use service::HedgeService;
