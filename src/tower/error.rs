//! The layer's error.

use core::fmt;

/// Why a hedged request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HedgeError<E> {
    /// An attempt failed (a fatal failure, or the last attempt standing
    /// failed with nothing left to send), with the inner service's error.
    Service(E),
    /// The hedger's [`deadline_ns`](crate::hedge::HedgeConfig::deadline_ns)
    /// passed before any attempt answered.
    Deadline,
    /// The policy refused to copy a request it had copied before (see
    /// [`Policy::clone_request`](super::Policy::clone_request)) for a hedge
    /// released on the timer, and the hedger then gave the request up (its
    /// deadline passed in between): no attempt's error to report. (An
    /// attempt a *failure* released and the policy could not copy fails the
    /// request with that failure's error.)
    NotCloned,
}

impl<E> HedgeError<E> {
    /// The inner service's error, if that is what this is.
    pub fn into_service(self) -> Option<E> {
        match self {
            Self::Service(e) => Some(e),
            _ => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for HedgeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Service(e) => write!(f, "hedged request failed: {e}"),
            Self::Deadline => f.write_str("hedged request gave up: the hedger's deadline passed"),
            Self::NotCloned => f.write_str(
                "hedged request failed: the policy refused to copy it for another attempt",
            ),
        }
    }
}

// An error whatever the inner error is, `BoxError` (`Box<dyn Error + Send
// + Sync>`, not an `Error` itself) included: a hedged buffered, timed-out or
// boxed service then still turns into a `BoxError` for the layers around
// it. Without `source`: `Display` already says the inner error (a reporter
// would print it twice), and `HedgeError::Service` or `into_service` hands
// it over whole.
impl<E: fmt::Debug + fmt::Display> std::error::Error for HedgeError<E> {}
