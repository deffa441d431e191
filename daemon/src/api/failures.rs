//! The manager's failures as `GET /processes` shows them on the manager's entry: those of
//! the manager process (crashes, hangs, kills), as the root recorded them before it started
//! this incarnation, and those of the manager task inside this process (panics, errors), as
//! its supervision publishes them. Neither ever stops the workers; this says how often the
//! control plane went away and when it comes back.

use std::time::SystemTime;

use supervisor::task::TaskHealth;

use kres_wire::failures::ProcessFailureRecord;
use kres_wire::processes::ManagerFailures;

/// What `/processes` shows, from the root's record and the task's health.
pub fn manager_failures(
    process: Option<&ProcessFailureRecord>,
    task: &TaskHealth,
) -> ManagerFailures {
    let seconds = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let process_since = process.map(|p| p.since as f64);
    let task_since = task.streak_since.map(seconds);
    let since = match (process_since, task_since) {
        (Some(p), Some(t)) => Some(p.min(t)),
        (p, t) => p.or(t),
    };
    ManagerFailures {
        process_failures: process.map_or(0, |p| p.failures),
        task_failures: task.failures,
        task_failures_total: task.total_failures,
        since,
        next_attempt: task.next_attempt.map(seconds),
        last_failure: task
            .last_failure
            .clone()
            .map(|f| format!("manager task {f}"))
            .or_else(|| process.map(|p| format!("manager process: {}", p.last))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn both_kinds_of_failure_are_shown_with_the_earliest_start() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let task = TaskHealth {
            failures: 2,
            total_failures: 5,
            streak_since: Some(at(200)),
            next_attempt: Some(at(210)),
            last_failure: Some("panicked".into()),
        };
        let process = ProcessFailureRecord {
            failures: 1,
            since: 100,
            last: "exited with 1".into(),
            restarts: 1,
            last_exit: Some(supervisor::ExitStatus::Code(1)),
        };
        let shown = manager_failures(Some(&process), &task);
        assert_eq!(
            shown,
            ManagerFailures {
                process_failures: 1,
                task_failures: 2,
                task_failures_total: 5,
                since: Some(100.0),
                next_attempt: Some(210.0),
                last_failure: Some("manager task panicked".into()),
            }
        );
        let healthy = manager_failures(None, &TaskHealth::default());
        assert_eq!(
            (
                healthy.process_failures,
                healthy.task_failures,
                healthy.since
            ),
            (0, 0, None)
        );
    }
}
