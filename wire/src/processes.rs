//! One process of `GET /processes` (and `/processes/{kind}`): the supervisor's snapshot of a
//! service with upstream's `type` and `status`, and on the manager's entry its failures. The
//! API serves it (`api`), `kresctl processes` reads it back.

use serde::{Deserialize, Serialize};
pub use supervisor_types::{ExitStatus, ProcessSnapshot, ProcessState};

/// One process of `GET /processes`: the supervisor's snapshot with upstream's `type` and
/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProcessEntry {
    /// The supervisor's view of the service.
    #[serde(flatten)]
    pub process: ProcessSnapshot,
    /// Upstream's kind: `KRESD`, `GC`, `POLICY_LOADER`, or `UNKNOWN`.
    pub r#type: String,
    /// Upstream's status: `RUNNING`, `FATAL`, `EXITED`, `UNEXPECTED`, or `UNKNOWN`.
    pub status: String,
    /// On the manager's entry only: how often the manager process and its task failed, and
    /// when a task waiting in its restart backoff runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<ManagerFailures>,
}

/// The `failures` field of the manager's entry in `GET /processes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ManagerFailures {
    /// Failures of the manager process (crash, hang, kill) in the streak that preceded this
    /// incarnation; 0 when it started after a stable run, or first.
    pub process_failures: u32,
    /// Failures of the manager task in this process (panic, error) not yet forgiven by a
    /// stable run (60 s).
    pub task_failures: u32,
    /// Failures of the manager task in this process since it started, forgiven or not.
    pub task_failures_total: u32,
    /// When the first of the failures counted here happened, seconds since the epoch.
    pub since: Option<f64>,
    /// While the manager task waits in its restart backoff: when it runs again, seconds
    /// since the epoch (changes wait until then).
    pub next_attempt: Option<f64>,
    /// The last failure, as logged.
    pub last_failure: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_entry_reads_back_as_served() {
        let served = json!({
            "name": "manager", "kind": "manager", "pid": 7, "state": "running",
            "since": 1700000000.5, "ready_at": null, "restarts": 0, "last_exit": null,
            "failure": null, "status_text": null, "kill_reason": null, "killed_pid": null,
            "type": "UNKNOWN", "status": "RUNNING",
            "failures": {"process_failures": 1, "task_failures": 0, "task_failures_total": 2,
                         "since": 1700000000.0, "next_attempt": null,
                         "last_failure": "manager process: killed by SIGKILL"},
        });
        let entry: ProcessEntry = serde_json::from_value(served.clone()).expect("reads");
        assert_eq!(entry.process.pid, Some(7));
        assert_eq!(entry.status, "RUNNING");
        assert_eq!(entry.failures.as_ref().map(|f| f.process_failures), Some(1));
        assert_eq!(serde_json::to_value(&entry).expect("JSON"), served);
    }
}
