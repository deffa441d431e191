//! Process events derived from the process table: the supervisor publishes snapshots, not
//! what happened, and coalesces them, so [`process_events`] (pure) infers the steps between
//! any two tables and [`follow_processes`] publishes them as the tables come.

use std::sync::Arc;

use supervisor::{ProcessSnapshot, ProcessState, Snapshot};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{bounded_reason, EventLog};
use kres_wire::events::Event;

/// What happened between two process tables, in the order it happened for each service.
/// Tables arrive coalesced, so steps in between may be missing: a new pid means the old
/// process exited (its status is the table's last exit) and a new one started.
pub fn process_events(old: &Snapshot, new: &Snapshot) -> Vec<Event> {
    let mut events = Vec::new();
    for p in &new.processes {
        let before = old.processes.iter().find(|o| o.name == p.name);
        service_events(before, p, &mut events);
    }
    for o in &old.processes {
        if !new.processes.iter().any(|p| p.name == o.name) {
            if let Some(pid) = o.pid {
                events.push(Event::ProcessExited {
                    name: o.name.clone(),
                    pid,
                    status: None,
                });
            }
            events.push(Event::ProcessRemoved {
                name: o.name.clone(),
            });
        }
    }
    if new.draining && !old.draining {
        events.push(Event::Draining);
    }
    events
}

/// The events of one service between its entries `old` (none: just registered) and `new`.
fn service_events(old: Option<&ProcessSnapshot>, new: &ProcessSnapshot, events: &mut Vec<Event>) {
    let name = || new.name.clone();
    let old_pid = old.and_then(|o| o.pid);
    let kill = |p: &ProcessSnapshot| (p.killed_pid, p.kill_reason.clone());
    if let (Some(pid), Some(reason)) = (new.killed_pid, &new.kill_reason) {
        if old.is_none_or(|o| kill(o) != kill(new)) {
            events.push(Event::ProcessHung {
                name: name(),
                pid,
                reason: bounded_reason(reason),
            });
        }
    }
    if let Some(pid) = old_pid.filter(|&pid| new.pid != Some(pid)) {
        events.push(Event::ProcessExited {
            name: name(),
            pid,
            status: new.last_exit,
        });
    }
    if let Some(pid) = new.pid.filter(|&pid| old_pid != Some(pid)) {
        let restarted = old.is_some_and(|o| new.restarts > o.restarts);
        events.push(if restarted {
            Event::ProcessRestarted {
                name: name(),
                pid,
                restarts: new.restarts,
            }
        } else {
            Event::ProcessSpawned { name: name(), pid }
        });
    }
    if let Some(pid) = new.pid.filter(|_| new.state == ProcessState::Running) {
        let was_ready = old.is_some_and(|o| o.state == ProcessState::Running && o.pid == Some(pid));
        if !was_ready {
            events.push(Event::ProcessReady { name: name(), pid });
        }
    }
    if new.state == ProcessState::Failed && old.is_none_or(|o| o.state != ProcessState::Failed) {
        events.push(Event::ProcessFailed {
            name: name(),
            reason: new.failure.as_deref().map(bounded_reason),
        });
    }
}

/// Publish what happens in the process table from now on, until `stop` or the table's end.
pub async fn follow_processes(
    mut table: watch::Receiver<Arc<Snapshot>>,
    log: EventLog,
    stop: CancellationToken,
) {
    let mut last = table.borrow_and_update().clone();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = table.changed() => if changed.is_err() {
                return;
            },
        }
        let now = table.borrow_and_update().clone();
        for event in process_events(&last, &now) {
            log.publish(event);
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use supervisor::ExitStatus;

    use super::*;

    /// A service's entry with the fields the diff reads.
    fn proc(name: &str, pid: Option<i32>, state: ProcessState) -> ProcessSnapshot {
        ProcessSnapshot {
            name: name.into(),
            kind: "kresd".into(),
            pid,
            state,
            since: None,
            ready_at: None,
            restarts: 0,
            last_exit: None,
            failure: None,
            status_text: None,
            kill_reason: None,
            killed_pid: None,
            takes_queries: None,
        }
    }

    fn table(processes: Vec<ProcessSnapshot>) -> Snapshot {
        Snapshot {
            processes,
            ..Snapshot::default()
        }
    }

    fn restarts(mut p: ProcessSnapshot, n: u32) -> ProcessSnapshot {
        p.restarts = n;
        p
    }

    fn exited(mut p: ProcessSnapshot, status: ExitStatus) -> ProcessSnapshot {
        p.last_exit = Some(status);
        p
    }

    fn killed(mut p: ProcessSnapshot, pid: i32, reason: &str) -> ProcessSnapshot {
        p.killed_pid = Some(pid);
        p.kill_reason = Some(reason.into());
        p
    }

    fn failed(mut p: ProcessSnapshot, reason: &str) -> ProcessSnapshot {
        p.failure = Some(reason.into());
        p
    }

    const SIGKILL: ExitStatus = ExitStatus::Signaled {
        signal: 9,
        core_dumped: false,
    };

    struct Row {
        name: &'static str,
        old: Snapshot,
        new: Snapshot,
        want: Vec<Event>,
    }

    fn check(rows: Vec<Row>) {
        for row in rows {
            assert_eq!(
                process_events(&row.old, &row.new),
                row.want,
                "row: {}",
                row.name
            );
        }
    }

    fn s(v: &str) -> String {
        v.to_owned()
    }

    #[test]
    fn process_tables_diff_into_events() {
        use ProcessState::*;
        let k = "kresd0";
        check(vec![
            Row {
                name: "nothing changed",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![],
            },
            Row {
                name: "spawned",
                old: table(vec![proc(k, None, Idle)]),
                new: table(vec![proc(k, Some(10), Starting)]),
                want: vec![Event::ProcessSpawned {
                    name: s(k),
                    pid: 10,
                }],
            },
            Row {
                name: "registered and started at once",
                old: table(vec![]),
                new: table(vec![proc(k, Some(10), Starting)]),
                want: vec![Event::ProcessSpawned {
                    name: s(k),
                    pid: 10,
                }],
            },
            Row {
                name: "registered without a process",
                old: table(vec![]),
                new: table(vec![proc(k, None, Idle)]),
                want: vec![],
            },
            Row {
                name: "ready",
                old: table(vec![proc(k, Some(10), Starting)]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![Event::ProcessReady {
                    name: s(k),
                    pid: 10,
                }],
            },
            Row {
                name: "spawned and ready between two tables",
                old: table(vec![proc(k, None, Idle)]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![
                    Event::ProcessSpawned {
                        name: s(k),
                        pid: 10,
                    },
                    Event::ProcessReady {
                        name: s(k),
                        pid: 10,
                    },
                ],
            },
            Row {
                name: "exited, waiting to be restarted",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![exited(proc(k, None, Backoff), SIGKILL)]),
                want: vec![Event::ProcessExited {
                    name: s(k),
                    pid: 10,
                    status: Some(SIGKILL),
                }],
            },
            Row {
                name: "restarted after the exit",
                old: table(vec![exited(proc(k, None, Backoff), SIGKILL)]),
                new: table(vec![restarts(
                    exited(proc(k, Some(11), Starting), SIGKILL),
                    1,
                )]),
                want: vec![Event::ProcessRestarted {
                    name: s(k),
                    pid: 11,
                    restarts: 1,
                }],
            },
            Row {
                name: "exited and restarted between two tables, then ready",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![restarts(
                    exited(proc(k, Some(11), Running), SIGKILL),
                    1,
                )]),
                want: vec![
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(SIGKILL),
                    },
                    Event::ProcessRestarted {
                        name: s(k),
                        pid: 11,
                        restarts: 1,
                    },
                    Event::ProcessReady {
                        name: s(k),
                        pid: 11,
                    },
                ],
            },
            Row {
                name: "replaced on request (a change): exited, spawned, no restart counted",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![exited(
                    proc(k, Some(11), Starting),
                    ExitStatus::Code(0),
                )]),
                want: vec![
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(ExitStatus::Code(0)),
                    },
                    Event::ProcessSpawned {
                        name: s(k),
                        pid: 11,
                    },
                ],
            },
            Row {
                name: "failed for good",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![failed(
                    exited(proc(k, None, Failed), ExitStatus::Code(1)),
                    "start limit hit",
                )]),
                want: vec![
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(ExitStatus::Code(1)),
                    },
                    Event::ProcessFailed {
                        name: s(k),
                        reason: Some(s("start limit hit")),
                    },
                ],
            },
            Row {
                name: "still failed: said once",
                old: table(vec![failed(proc(k, None, Failed), "x")]),
                new: table(vec![failed(proc(k, None, Failed), "x")]),
                want: vec![],
            },
            Row {
                name: "hung: the kill seen before the exit",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![killed(proc(k, Some(10), Running), 10, "hung: x")]),
                want: vec![Event::ProcessHung {
                    name: s(k),
                    pid: 10,
                    reason: s("hung: x"),
                }],
            },
            Row {
                name: "hung: then its exit, the reason not repeated",
                old: table(vec![killed(proc(k, Some(10), Running), 10, "hung: x")]),
                new: table(vec![killed(
                    exited(proc(k, None, Backoff), SIGKILL),
                    10,
                    "hung: x",
                )]),
                want: vec![Event::ProcessExited {
                    name: s(k),
                    pid: 10,
                    status: Some(SIGKILL),
                }],
            },
            Row {
                name: "hung, killed and restarted between two tables",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![restarts(
                    killed(exited(proc(k, Some(11), Starting), SIGKILL), 10, "hung: x"),
                    1,
                )]),
                want: vec![
                    Event::ProcessHung {
                        name: s(k),
                        pid: 10,
                        reason: s("hung: x"),
                    },
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(SIGKILL),
                    },
                    Event::ProcessRestarted {
                        name: s(k),
                        pid: 11,
                        restarts: 1,
                    },
                ],
            },
            Row {
                name: "hung again with the same reason: another pid, another event",
                old: table(vec![restarts(
                    killed(proc(k, Some(11), Running), 10, "hung: x"),
                    1,
                )]),
                new: table(vec![restarts(
                    killed(proc(k, Some(11), Running), 11, "hung: x"),
                    1,
                )]),
                want: vec![Event::ProcessHung {
                    name: s(k),
                    pid: 11,
                    reason: s("hung: x"),
                }],
            },
            Row {
                name: "a crash after an old kill is no hang",
                old: table(vec![killed(proc(k, Some(11), Running), 10, "hung: x")]),
                new: table(vec![killed(
                    exited(proc(k, None, Backoff), SIGKILL),
                    10,
                    "hung: x",
                )]),
                want: vec![Event::ProcessExited {
                    name: s(k),
                    pid: 11,
                    status: Some(SIGKILL),
                }],
            },
            Row {
                name: "removed while running",
                old: table(vec![
                    proc(k, Some(10), Running),
                    proc("kresd1", Some(12), Running),
                ]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![
                    Event::ProcessExited {
                        name: s("kresd1"),
                        pid: 12,
                        status: None,
                    },
                    Event::ProcessRemoved { name: s("kresd1") },
                ],
            },
            Row {
                name: "draining",
                old: table(vec![]),
                new: Snapshot {
                    processes: vec![],
                    shutting_down: false,
                    draining: true,
                },
                want: vec![Event::Draining],
            },
        ]);
    }
}
