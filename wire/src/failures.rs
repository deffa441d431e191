//! How often the manager process failed: the record the root writes into its fd store after
//! each failure of the manager process (`daemon::root`), and the next manager process reads
//! back (`daemon::manager_process`) to show on the manager's entry of `GET /processes`
//! (`api::failures`).

use serde::{Deserialize, Serialize};

/// The manager process's failures, as the root records them in its fd store for the next
/// incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProcessFailureRecord {
    /// Failures of the manager process not yet forgiven by a stable run, the one before this
    /// incarnation included.
    pub failures: u32,
    /// When the first of them happened, seconds since the epoch.
    pub since: u64,
    /// How the last one ended, as logged.
    pub last: String,
    /// Failures since the root started, forgiven or not: how often the manager process was
    /// restarted (0 in a record of a version before this field).
    #[serde(default)]
    pub restarts: u32,
    /// The last failed process's exit status, when it was reaped (a death by signal keeps
    /// its signal).
    #[serde(default)]
    pub last_exit: Option<supervisor_types::ExitStatus>,
}

/// The largest record read back.
pub const MAX_RECORD: usize = 16 * 1024;

impl ProcessFailureRecord {
    /// A record as JSON text, `None` when it does not parse or is too large.
    pub fn parse(bytes: &[u8]) -> Option<ProcessFailureRecord> {
        super::parse_bounded(bytes, MAX_RECORD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_bounds_its_size() {
        let record = ProcessFailureRecord {
            failures: 3,
            since: 1_700_000_000,
            last: "killed by SIGKILL".into(),
            restarts: 4,
            last_exit: Some(supervisor_types::ExitStatus::Signaled {
                signal: 9,
                core_dumped: false,
            }),
        };
        let text = serde_json::to_vec(&record).expect("JSON");
        assert_eq!(ProcessFailureRecord::parse(&text), Some(record));
        assert_eq!(ProcessFailureRecord::parse(b"{"), None);
        assert_eq!(
            ProcessFailureRecord::parse(&vec![b' '; MAX_RECORD + 1]),
            None
        );
    }
}
