//! The reads whose answers are large or slow to make — a list of the query log (up to
//! [`ANSWER_CAP`] of JSON), a trace (a worker resolving for up to a minute) — run only a few
//! at a time: a request past the bound is answered 429 at once, with `Retry-After`, instead
//! of waiting. Each holds a permit for as long as its answer exists: a list's permit goes with
//! its body, so a client that reads slowly keeps its place (and nobody else's) until the
//! connection's write deadline (`server::WriteDeadline`) cuts it. What these requests can make
//! the manager hold is so bounded by `places × cap`, however many clients ask.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;

/// Lists of the query log (`GET /query-log`) made or being sent at once.
pub const MAX_QUERY_LOG_READS: usize = 4;

/// Traces (`GET /trace/…`) at once.
pub const MAX_TRACES: usize = 4;

/// The most JSON one list of the query log holds: the newest answers that fit, and
/// `Query-Log-Truncated` says how many were left out.
pub const ANSWER_CAP: usize = 8 << 20;

/// The places of the heavy reads, shared by every connection of the API.
#[derive(Debug, Clone)]
pub struct HeavyReads {
    /// Permits of [`MAX_QUERY_LOG_READS`].
    query_log: Arc<Semaphore>,
    /// Permits of [`MAX_TRACES`].
    traces: Arc<Semaphore>,
}

impl Default for HeavyReads {
    fn default() -> HeavyReads {
        HeavyReads {
            query_log: Arc::new(Semaphore::new(MAX_QUERY_LOG_READS)),
            traces: Arc::new(Semaphore::new(MAX_TRACES)),
        }
    }
}

impl HeavyReads {
    /// A place for one list of the query log, or 429.
    pub fn query_log(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        take(
            &self.query_log,
            format!(
                "too many reads of the query log at once (at most {MAX_QUERY_LOG_READS}); \
                 try again"
            ),
        )
    }

    /// A place for one trace, or 429.
    pub fn trace(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        take(
            &self.traces,
            format!("too many traces at once (at most {MAX_TRACES}); try again"),
        )
    }
}

/// A permit of `places` now, or [`ApiError::TooMany`] with `why`.
fn take(places: &Arc<Semaphore>, why: String) -> Result<OwnedSemaphorePermit, ApiError> {
    places
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooMany(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_given_back_with_their_permits() {
        let heavy = HeavyReads::default();
        let held: Vec<_> = (0..MAX_TRACES)
            .map(|_| heavy.trace().expect("a place"))
            .collect();
        assert!(matches!(heavy.trace(), Err(ApiError::TooMany(_))));
        // The query log's places are its own.
        let list = heavy.query_log().expect("a list's place");
        drop(held);
        assert!(heavy.trace().is_ok());
        drop(list);
    }
}
