//! Hung workers: a kresd that is stopped (SIGSTOP), loops in Lua or deadlocks keeps its pid
//! and its sockets, so neither the supervisor (no exit) nor the kernel (the socket still
//! queues) notices. Every running worker is asked a trivial expression on its control socket
//! at a fixed interval; one that gives no answer within the deadline is killed (SIGKILL of its
//! process group, the reason recorded in the process table and the log) and the supervisor
//! restarts it as after any crash. A worker whose control socket cannot be reached at all
//! (starting, stopping) is not hung: only a connection that hangs counts.

use std::time::Duration;

use supervisor::{ProcessState, SupervisorHandle};
use tokio_util::sync::CancellationToken;

use crate::control::{self, ControlError};
use crate::manager::ManagerHandle;
use crate::service::{ServiceKind, WorkerId};

/// How long a worker may take to answer its control socket (`--worker-hang-timeout`).
pub const DEFAULT_HANG_TIMEOUT: Duration = Duration::from_secs(15);

/// Workers are asked this often, relative to the deadline.
fn interval(deadline: Duration) -> Duration {
    (deadline / 2).max(Duration::from_millis(500))
}

/// Watch the workers until `stop`, killing those that hang for `deadline` (run on the
/// owner's tracker, which waits for it at its stop).
pub async fn run(
    sup: SupervisorHandle,
    manager: ManagerHandle,
    deadline: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval(deadline));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let rundir = manager.config().model.rundir.clone();
        let snapshot = sup.snapshot();
        let running: Vec<(WorkerId, i32)> = snapshot
            .processes
            .iter()
            .filter(|p| {
                ServiceKind::of(p) == Some(ServiceKind::Kresd) && p.state == ProcessState::Running
            })
            .filter_map(|p| Some((WorkerId::from_name(&p.name)?, p.pid?)))
            .collect();
        let asks = running.into_iter().map(|(worker, pid)| {
            let path = worker.control_socket(&rundir);
            async move { (worker, pid, control::command(&path, "1", deadline).await) }
        });
        let answers = tokio::select! {
            () = stop.cancelled() => return,
            answers = futures_util::future::join_all(asks) => answers,
        };
        for (worker, pid, answer) in answers {
            if let Err(ControlError::Timeout { .. }) = answer {
                kill_if_same(&sup, worker, pid, deadline).await;
            }
        }
    }
}

/// Kill `worker` if its process is still `pid` (it may have been restarted meanwhile).
async fn kill_if_same(sup: &SupervisorHandle, worker: WorkerId, pid: i32, deadline: Duration) {
    let name = worker.name();
    let same = sup
        .snapshot()
        .processes
        .iter()
        .any(|p| p.name == name && p.pid == Some(pid));
    if !same {
        return;
    }
    let reason = format!(
        "hung: no answer on its control socket within {} ms",
        deadline.as_millis()
    );
    tracing::error!(worker = %name, pid, "{reason}; killing it to be restarted");
    if let Err(e) = sup.kill(&name, &reason).await {
        tracing::warn!(worker = %name, "cannot kill the hung worker: {e}");
    }
}
