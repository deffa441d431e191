//! The transitions of one service, event by event.

use super::*;

/// Starts, and readiness as `READY=1` says.
#[test]
fn start_and_readiness_table() {
    use Event as E;
    check(vec![
        Row {
            name: "start request spawns",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![(0, E::StartRequested)],
            last_actions: vec![Action::Spawn],
            state: |_| State::Idle,
        },
        Row {
            name: "notify service waits for readiness with a deadline",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![(0, E::StartRequested), (0, E::Spawned { pid: pid(10) })],
            last_actions: vec![Action::WakeAt(Instant::now())],
            state: |h| State::Starting {
                pid: pid(10),
                since: h.at(0),
                deadline: h.at(3000),
            },
        },
        Row {
            name: "service without readiness is ready when spawned",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![(0, E::StartRequested), (5, E::Spawned { pid: pid(10) })],
            last_actions: vec![Action::Announce(Announcement::Ready { pid: pid(10) })],
            state: |h| State::Running {
                pid: pid(10),
                since: h.at(5),
                ready_at: h.at(5),
            },
        },
        Row {
            name: "READY=1 from the child makes it running",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (40, E::ReadyReceived { pid: pid(10) }),
            ],
            last_actions: vec![Action::Announce(Announcement::Ready { pid: pid(10) })],
            state: |h| State::Running {
                pid: pid(10),
                since: h.at(0),
                ready_at: h.at(40),
            },
        },
        Row {
            name: "READY=1 from another pid is ignored",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (40, E::ReadyReceived { pid: pid(11) }),
            ],
            last_actions: vec![],
            state: |h| State::Starting {
                pid: pid(10),
                since: h.at(0),
                deadline: h.at(3000),
            },
        },
        Row {
            name: "a second READY=1 changes nothing",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (40, E::ReadyReceived { pid: pid(10) }),
                (50, E::ReadyReceived { pid: pid(10) }),
            ],
            last_actions: vec![],
            state: |h| State::Running {
                pid: pid(10),
                since: h.at(0),
                ready_at: h.at(40),
            },
        },
    ]);
}

/// An early tick, and a missed readiness deadline.
#[test]
fn readiness_timeout_table() {
    use Event as E;
    check(vec![
        Row {
            name: "an early tick does nothing",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (2999, E::Tick),
            ],
            last_actions: vec![],
            state: |h| State::Starting {
                pid: pid(10),
                since: h.at(0),
                deadline: h.at(3000),
            },
        },
        Row {
            name: "readiness timeout kills the process",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (3000, E::Tick),
            ],
            last_actions: vec![Action::Signal {
                pid: pid(10),
                signal: Signal::SIGKILL,
            }],
            state: |h| State::Stopping {
                pid: pid(10),
                since: h.at(3000),
                kill_at: None,
                then: AfterStop::Failure(FailReason::ReadinessTimeout),
            },
        },
        Row {
            name: "after a readiness timeout the restart policy applies (floor from spawn)",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (3000, E::Tick),
                (
                    3001,
                    E::Exited {
                        pid: pid(10),
                        status: ExitStatus::Signaled {
                            signal: 9,
                            core_dumped: false,
                        },
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::ReadinessTimeout,
                }),
                Action::Spawn,
            ],
            state: |h| restarting(h.at(3001)),
        },
    ]);
}

/// Stops on request: the signal, the escalation, staying down.
#[test]
fn stop_table() {
    use Event as E;
    check(vec![
        Row {
            name: "stop request signals the group and arms the kill timer",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (100, STOP),
            ],
            last_actions: vec![
                Action::Signal {
                    pid: pid(10),
                    signal: Signal::SIGTERM,
                },
                Action::WakeAt(Instant::now()),
            ],
            state: |h| State::Stopping {
                pid: pid(10),
                since: h.at(100),
                kill_at: Some(h.at(2100)),
                then: AfterStop::Idle,
            },
        },
        Row {
            name: "stop timeout escalates to SIGKILL",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (100, STOP),
                (2100, E::Tick),
            ],
            last_actions: vec![Action::Signal {
                pid: pid(10),
                signal: Signal::SIGKILL,
            }],
            state: |h| State::Stopping {
                pid: pid(10),
                since: h.at(100),
                kill_at: None,
                then: AfterStop::Idle,
            },
        },
        Row {
            name: "a stopped process stays down and is never restarted",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (100, STOP),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: ExitStatus::Signaled {
                            signal: 15,
                            core_dumped: false,
                        },
                    },
                ),
            ],
            last_actions: vec![Action::Announce(Announcement::Down {
                status: Some(ExitStatus::Signaled {
                    signal: 15,
                    core_dumped: false,
                }),
            })],
            state: |_| State::Idle,
        },
    ]);
}

/// Restarts on request, a stop during backoff, and first crashes restarted at once.
#[test]
fn restart_and_first_crash_table() {
    use Event as E;
    let code = |c| ExitStatus::Code(c);
    check(vec![
        Row {
            name: "restart request stops then spawns again",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (100, RESTART),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: code(0),
                    },
                ),
            ],
            last_actions: vec![Action::Spawn],
            state: |_| State::Idle,
        },
        Row {
            name: "stop during backoff cancels the restart",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
                (200, STOP),
            ],
            last_actions: vec![Action::Announce(Announcement::Down { status: None })],
            state: |_| State::Idle,
        },
        Row {
            name: "a first crash soon after the spawn restarts at once (no floor)",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited { status: code(1) },
                }),
                Action::Spawn,
            ],
            state: |h| restarting(h.at(100)),
        },
        Row {
            name: "a first crash of a notify service before READY=1 restarts at once",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    30,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited { status: code(1) },
                }),
                Action::Spawn,
            ],
            state: |h| restarting(h.at(30)),
        },
    ]);
}

/// Second crashes wait for the delay, and for the floor between spawns.
#[test]
fn second_crash_table() {
    use Event as E;
    let code = |c| ExitStatus::Code(c);
    check(vec![
        Row {
            name: "a second crash soon after the restart waits for the delay and the floor",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
                (100, E::Spawned { pid: pid(11) }),
                (
                    200,
                    E::Exited {
                        pid: pid(11),
                        status: code(1),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited { status: code(1) },
                }),
                Action::WakeAt(Instant::now()),
            ],
            // Delay 100 ms (until 300), floor 500 ms after the spawn at 100.
            state: |h| backoff(h.at(600)),
        },
        Row {
            name: "a second crash long after the restart waits for the delay only",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
                (100, E::Spawned { pid: pid(11) }),
                (
                    // Within the stable period (5 s): the streak goes on.
                    3100,
                    E::Exited {
                        pid: pid(11),
                        status: code(1),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited { status: code(1) },
                }),
                Action::WakeAt(Instant::now()),
            ],
            state: |h| backoff(h.at(3200)),
        },
    ]);
}

/// A stable run forgives the streak; the tick of a backoff spawns.
#[test]
fn stable_run_and_backoff_table() {
    use Event as E;
    let code = |c| ExitStatus::Code(c);
    check(vec![
        Row {
            name: "a crash after a stable run is a first crash again: restarted at once",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
                (100, E::Spawned { pid: pid(11) }),
                (
                    200,
                    E::Exited {
                        pid: pid(11),
                        status: code(1),
                    },
                ),
                (600, E::Tick),
                (600, E::Spawned { pid: pid(12) }),
                (
                    // Ready (no readiness protocol) for 5 s: the streak is forgiven.
                    5700,
                    E::Exited {
                        pid: pid(12),
                        status: code(1),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited { status: code(1) },
                }),
                Action::Spawn,
            ],
            state: |h| restarting(h.at(5700)),
        },
        Row {
            name: "backoff tick spawns",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(1),
                    },
                ),
                (100, E::Spawned { pid: pid(11) }),
                (
                    200,
                    E::Exited {
                        pid: pid(11),
                        status: code(1),
                    },
                ),
                (600, E::Tick),
            ],
            last_actions: vec![Action::Spawn],
            state: |h| restarting(h.at(600)),
        },
    ]);
}

/// What each restart policy makes of an exit.
#[test]
fn exit_policy_table() {
    use Event as E;
    let code = |c| ExitStatus::Code(c);
    check(vec![
        Row {
            name: "death by signal is a failure and keeps its signal",
            readiness: Readiness::None,
            restart: RestartPolicy::OnFailure,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    9000,
                    E::Exited {
                        pid: pid(10),
                        status: ExitStatus::Signaled {
                            signal: 9,
                            core_dumped: false,
                        },
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited {
                        status: ExitStatus::Signaled {
                            signal: 9,
                            core_dumped: false,
                        },
                    },
                }),
                Action::Spawn,
            ],
            state: |h| restarting(h.at(9000)),
        },
        Row {
            name: "on-failure does not restart a clean exit",
            readiness: Readiness::None,
            restart: RestartPolicy::OnFailure,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(0),
                    },
                ),
            ],
            last_actions: vec![Action::Announce(Announcement::Down {
                status: Some(code(0)),
            })],
            state: |h| State::Exited {
                status: ExitStatus::Code(0),
                at: h.at(100),
            },
        },
        Row {
            name: "one-shot job ends in Exited with its status",
            readiness: Readiness::None,
            restart: RestartPolicy::Never,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(10),
                        status: code(3),
                    },
                ),
            ],
            last_actions: vec![Action::Announce(Announcement::Down {
                status: Some(code(3)),
            })],
            state: |h| State::Exited {
                status: ExitStatus::Code(3),
                at: h.at(100),
            },
        },
    ]);
}

/// A failed spawn, an exit of a stranger, a start while stopping, a stop of an idle service.
#[test]
fn spawn_failure_and_strays_table() {
    use Event as E;
    let code = |c| ExitStatus::Code(c);
    check(vec![
        Row {
            name: "spawn failure of a never-restart job fails it",
            readiness: Readiness::None,
            restart: RestartPolicy::Never,
            steps: vec![
                (0, E::StartRequested),
                (
                    0,
                    E::SpawnFailed {
                        error: "ENOENT".into(),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::SpawnFailed {
                        error: "ENOENT".into(),
                    },
                }),
                Action::Announce(Announcement::Failed {
                    reason: FailReason::SpawnFailed {
                        error: "ENOENT".into(),
                    },
                }),
            ],
            state: |h| State::Failed {
                reason: FailReason::SpawnFailed {
                    error: "ENOENT".into(),
                },
                at: h.at(0),
            },
        },
        Row {
            name: "exit of an unknown pid is ignored",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    100,
                    E::Exited {
                        pid: pid(99),
                        status: code(1),
                    },
                ),
            ],
            last_actions: vec![],
            state: |h| State::Running {
                pid: pid(10),
                since: h.at(0),
                ready_at: h.at(0),
            },
        },
        Row {
            name: "start while stopping restarts after the exit",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (100, STOP),
                (110, E::StartRequested),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: code(0),
                    },
                ),
            ],
            last_actions: vec![Action::Spawn],
            state: |_| State::Idle,
        },
        Row {
            name: "stop of an idle service reports it down",
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            steps: vec![(0, STOP)],
            last_actions: vec![Action::Announce(Announcement::Down { status: None })],
            state: |_| State::Idle,
        },
    ]);
}
