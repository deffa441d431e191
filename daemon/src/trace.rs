//! Trace one query: a worker resolves a name with kresd's request tracing (`req.trace_log`,
//! as Knot Resolver 5's `http_trace` and kresd's own watchdog do), and its verbose log and
//! final answer come back to the caller. Only that request is traced: the workers' log level
//! and groups stay as they are, and nothing of it reaches the workers' log.
//!
//! The control socket answers one command at a time, in the worker's event loop, so the
//! resolution cannot be waited for inside a command. One command starts it, with callbacks
//! that collect the log (up to [`LOG_LIMIT`] bytes) and the answer into a table of the
//! worker keyed by a random trace id; short polls read that entry until the answer is in or
//! the deadline passes, and a last command forgets an entry nobody will read.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use kres_lua::trace::{render_forget, render_poll};
pub use kres_lua::trace::{QueryError, TraceQuery, LOG_LIMIT, MAX_TIMEOUT};

use crate::control::{self, ControlError};
use kres_wire::trace::Trace;

/// How long a trace may take when the caller gives no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a trace may take and how much log it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLimits {
    /// How long to wait for the answer, the start and every poll included.
    pub timeout: Duration,
    /// The most log kept, in bytes.
    pub log_bytes: usize,
}

impl TraceLimits {
    /// `timeout`, and the log limited to [`LOG_LIMIT`].
    pub fn with_timeout(timeout: Duration) -> TraceLimits {
        TraceLimits {
            timeout,
            log_bytes: LOG_LIMIT,
        }
    }
}

/// How long forgetting a trace may take (a worker that does not answer keeps the entry,
/// which its callbacks bound).
const FORGET_TIMEOUT: Duration = Duration::from_secs(1);

/// The first pause between two polls; it doubles up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(2);

/// The longest pause between two polls.
const POLL_MAX: Duration = Duration::from_millis(50);

/// Why a trace was not made.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("the timeout must be between 1 ms and {max:?}", max = MAX_TIMEOUT)]
    InvalidTimeout,
    #[error("the worker refused the trace: {0}")]
    Refused(String),
    #[error("the worker's control socket failed")]
    Control(#[source] ControlError),
    #[error("the worker gave no answer within {0:?}")]
    TimedOut(Duration),
    #[error("the worker answered an unexpected {0}")]
    Unexpected(Value),
}

/// What a worker answers a poll with, once the trace is over.
#[derive(Debug, Deserialize)]
struct Finished {
    /// Absent when kresd dropped the answer.
    rcode: Option<String>,
    /// The answer section's RRsets, each as text (one line per record).
    #[serde(default, deserialize_with = "lua_list")]
    answer: Vec<String>,
    /// The log entries, each ending with a newline.
    #[serde(default, deserialize_with = "lua_list")]
    log: Vec<String>,
    #[serde(default)]
    truncated: bool,
}

/// A Lua list of strings, which kresd's JSON writes as `{}` when it is empty.
fn lua_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Array(items) => Ok(items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect()),
        Value::Object(o) if o.is_empty() => Ok(Vec::new()),
        other => Err(serde::de::Error::custom(format!(
            "expected a list of strings, not {other}"
        ))),
    }
}

/// Every line of `entries`, in order, without their line ends.
fn lines(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|e| e.lines())
        .map(str::to_owned)
        .collect()
}

/// Trace `query` on the worker whose control socket is `socket` (named `worker` in the
/// result), within `limits`.
pub async fn run(
    socket: &Path,
    worker: &str,
    query: &TraceQuery,
    limits: TraceLimits,
) -> Result<Trace, TraceError> {
    let timeout = limits.timeout;
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(TraceError::InvalidTimeout);
    }
    let began = Instant::now();
    let deadline = began + timeout;
    let id = crate::manager::rundir::random_hex(8).map_err(|source| {
        TraceError::Control(ControlError::Io {
            path: "/dev/urandom".into(),
            source,
        })
    })?;
    let command = |expr: String| async move {
        let left = deadline.saturating_duration_since(Instant::now());
        control::command(socket, &expr, left.max(Duration::from_millis(1)))
            .await
            .map_err(|e| match e {
                ControlError::Timeout { .. } => TraceError::TimedOut(timeout),
                other => TraceError::Control(other),
            })
    };
    let started = match command(query.render_start(&id, limits.log_bytes)).await {
        Ok(answer) => answer,
        Err(e) => {
            // The worker may have started it all the same.
            forget(socket, &id).await;
            return Err(e);
        }
    };
    match &started {
        Value::Object(o) if o.get("started") == Some(&Value::Bool(true)) => {}
        Value::Object(o) if o.get("unknown_type") == Some(&Value::Bool(true)) => {
            return Err(TraceError::Query(QueryError::UnknownType(
                query.rr_type().to_owned(),
            )));
        }
        Value::Object(o) => match o.get("error") {
            Some(Value::String(e)) => return Err(TraceError::Refused(e.clone())),
            _ => return Err(TraceError::Unexpected(started)),
        },
        // kresd answers a Lua error as its text.
        Value::String(e) => return Err(TraceError::Refused(e.clone())),
        _ => return Err(TraceError::Unexpected(started)),
    }
    let mut pause = POLL_FIRST;
    let finished = loop {
        let answer = match command(render_poll(&id)).await {
            Ok(a) => a,
            Err(e) => {
                forget(socket, &id).await;
                return Err(e);
            }
        };
        if answer.get("done") == Some(&Value::Bool(true)) {
            break serde_json::from_value::<Finished>(answer.clone())
                .map_err(|_| TraceError::Unexpected(answer))?;
        }
        if answer.get("done") != Some(&Value::Bool(false)) {
            return Err(TraceError::Unexpected(answer));
        }
        let now = Instant::now();
        if now >= deadline {
            forget(socket, &id).await;
            return Err(TraceError::TimedOut(timeout));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(POLL_MAX);
    };
    Ok(Trace {
        worker: worker.to_owned(),
        name: query.name().to_owned(),
        r#type: query.rr_type().to_owned(),
        rcode: finished.rcode,
        answer: lines(&finished.answer),
        log: lines(&finished.log),
        truncated: finished.truncated,
        elapsed_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Forget trace `id` in the worker: the caller stopped waiting for it. Bounded by
/// [`FORGET_TIMEOUT`], past the caller's deadline.
async fn forget(socket: &Path, id: &str) {
    if let Err(e) = control::command(socket, &render_forget(id), FORGET_TIMEOUT).await {
        tracing::warn!("cannot forget trace {id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_trace_reads_with_empty_lua_lists() {
        let answer = serde_json::json!({"done": true, "rcode": "NXDOMAIN", "answer": {},
                                        "log": ["[plan  ] one\n[plan  ] two\n", "three\n"],
                                        "truncated": false});
        let f: Finished = serde_json::from_value(answer).expect("reads");
        assert_eq!(f.rcode.as_deref(), Some("NXDOMAIN"));
        assert!(f.answer.is_empty());
        assert_eq!(lines(&f.log), ["[plan  ] one", "[plan  ] two", "three"]);
    }
}
