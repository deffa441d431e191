//! The process table as readers see it: the supervisor's actor publishes it through a
//! `watch` channel (and over a link), for `/processes`, `kresctl processes` and metrics.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::ExitStatus;

/// The whole table at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub processes: Vec<ProcessSnapshot>,
    pub shutting_down: bool,
    /// The main process announced its stop (a drain): every service still runs and serves, but clients should be steered elsewhere until the stop.
    #[serde(default)]
    pub draining: bool,
}

/// One service as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProcessSnapshot {
    pub name: String,
    pub kind: String,
    pub pid: Option<i32>,
    /// `idle`, `starting`, `running`, `stopping`, `backoff`, `exited`, `failed`.
    pub state: ProcessState,
    /// When the service entered its current state (wall clock, for display), seconds since
    /// the epoch.
    #[serde(with = "unix_seconds")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub since: Option<SystemTime>,
    /// When the current process became ready, seconds since the epoch.
    #[serde(with = "unix_seconds")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub ready_at: Option<SystemTime>,
    pub restarts: u32,
    pub last_exit: Option<ExitStatus>,
    /// Why it failed, in the failed state.
    pub failure: Option<String>,
    /// The last `STATUS=` line the process sent.
    pub status_text: Option<String>,
    /// Why the last process of this service was killed on request (it stopped answering,
    /// say).
    #[serde(default)]
    pub kill_reason: Option<String>,
    /// For a service whose sockets are steered (a worker): whether new datagrams and
    /// connections of its sockets' groups go to it now (ready, not being stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takes_queries: Option<bool>,
    /// The pid of the process [`ProcessSnapshot::kill_reason`] is about: every kill on request
    /// names another, so a reader comparing snapshots tells a second kill from the first.
    #[serde(default)]
    pub killed_pid: Option<i32>,
}

/// A service's state as snapshots show it, serialised as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Idle,
    Starting,
    Running,
    Stopping,
    Backoff,
    Exited,
    Failed,
}

impl ProcessState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Idle => "idle",
            ProcessState::Starting => "starting",
            ProcessState::Running => "running",
            ProcessState::Stopping => "stopping",
            ProcessState::Backoff => "backoff",
            ProcessState::Exited => "exited",
            ProcessState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ProcessState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ProcessState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

mod unix_seconds {
    use std::time::{Duration, SystemTime};

    use serde::Deserialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        let secs = Option::<f64>::deserialize(d)?;
        Ok(secs
            .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e12)
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(s)))
    }

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
