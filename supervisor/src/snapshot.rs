//! Read-only views of the process table, published by the actor through a `watch` channel
//! for `/processes`, `kresctl processes` and metrics. Readers never lock the actor.

use std::time::SystemTime;

use serde::Serialize;
use tokio::time::Instant;

use crate::machine::{ServiceMachine, State};
use crate::spec::ExitStatus;

/// The whole table at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    pub processes: Vec<ProcessSnapshot>,
    pub shutting_down: bool,
}

/// One service as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessSnapshot {
    pub name: String,
    pub kind: String,
    pub pid: Option<i32>,
    /// `idle`, `starting`, `running`, `stopping`, `backoff`, `exited`, `failed`.
    pub state: &'static str,
    /// When the service entered its current state (wall clock, for display).
    #[serde(with = "unix_seconds")]
    pub since: Option<SystemTime>,
    /// When the current process became ready.
    #[serde(with = "unix_seconds")]
    pub ready_at: Option<SystemTime>,
    pub restarts: u32,
    pub last_exit: Option<ExitStatus>,
    /// Why it failed, in the failed state.
    pub failure: Option<String>,
    /// The last `STATUS=` line the process sent.
    pub status_text: Option<String>,
}

impl ProcessSnapshot {
    pub(crate) fn of(
        name: &str,
        kind: String,
        m: &ServiceMachine,
        _now: Instant,
        since: Option<SystemTime>,
        ready: Option<SystemTime>,
        status_text: Option<String>,
    ) -> Self {
        let (state, failure) = match m.state() {
            State::Idle => ("idle", None),
            State::Starting { .. } => ("starting", None),
            State::Running { .. } => ("running", None),
            State::Stopping { .. } => ("stopping", None),
            State::Backoff { .. } => ("backoff", None),
            State::Exited { .. } => ("exited", None),
            State::Failed { reason, .. } => ("failed", Some(reason.to_string())),
        };
        ProcessSnapshot {
            name: name.to_owned(),
            kind,
            pid: m.pid().map(|p| p.as_raw()),
            state,
            since,
            ready_at: if state == "running" { ready } else { None },
            restarts: m.restarts(),
            last_exit: m.last_exit().map(|(s, _)| s),
            failure,
            status_text,
        }
    }
}

mod unix_seconds {
    use std::time::SystemTime;

    pub fn serialize<S: serde::Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}
