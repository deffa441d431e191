//! Drains of steered services, kills, removals and one-shot runs.

use super::*;

/// Pid 10 of [`ready_then`], drained since 100.
fn draining(h: &Harness, then: Request, polls: u32) -> State {
    State::Draining {
        pid: pid(10),
        since: h.at(0),
        ready_at: h.at(10),
        deadline: h.at(100) + DRAIN_LIMIT,
        then,
        polls,
    }
}

/// Pid 10 stopped with the stop signal at `since`.
fn stopping(h: &Harness, since: u64, then: AfterStop) -> State {
    State::Stopping {
        pid: pid(10),
        since: h.at(since),
        kill_at: Some(h.at(since + 2000)),
        then,
    }
}

/// A steered process is drained before it stops: ticks, queue reads, the deadline, the latest request.
#[test]
fn drain_table() {
    use Event as E;
    let term = Action::Signal {
        pid: pid(10),
        signal: Signal::SIGTERM,
    };
    check_steered(vec![
        Row {
            name: "a steered ready process others cover is steered away from before it stops",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, STOP_AFTER_DRAIN)]),
            last_actions: vec![Action::WakeAt(Instant::now())],
            state: |h| draining(h, Request::Stop, 0),
        },
        Row {
            name: "a tick while draining asks for the queues",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, STOP_AFTER_DRAIN), (102, E::Tick)]),
            last_actions: vec![Action::ReadQueues],
            state: |h| draining(h, Request::Stop, 0),
        },
        Row {
            name: "queues not empty: look again later",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, STOP_AFTER_DRAIN),
                (102, E::QueuesRead { queued: 5 }),
            ]),
            last_actions: vec![Action::WakeAt(Instant::now())],
            state: |h| draining(h, Request::Stop, 1),
        },
        Row {
            name: "queues empty: the stop goes ahead",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, STOP_AFTER_DRAIN),
                (102, E::QueuesRead { queued: 5 }),
                (104, E::QueuesRead { queued: 0 }),
            ]),
            last_actions: vec![term.clone(), Action::WakeAt(Instant::now())],
            state: |h| stopping(h, 104, AfterStop::Idle),
        },
        Row {
            name: "the drain's deadline passes with queues full: stopped anyway",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, STOP_AFTER_DRAIN),
                (1600, E::QueuesRead { queued: 5 }),
            ]),
            last_actions: vec![term.clone(), Action::WakeAt(Instant::now())],
            state: |h| stopping(h, 1600, AfterStop::Idle),
        },
        Row {
            name: "a drained restart starts again after the stop",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, RESTART_AFTER_DRAIN),
                (104, E::QueuesRead { queued: 0 }),
            ]),
            last_actions: vec![term.clone(), Action::WakeAt(Instant::now())],
            state: |h| stopping(h, 104, AfterStop::Start),
        },
        Row {
            name: "a start while draining turns the stop into a restart",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, STOP_AFTER_DRAIN), (110, E::StartRequested)]),
            last_actions: vec![],
            state: |h| draining(h, Request::Restart, 0),
        },
        Row {
            name: "while draining the latest request decides",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, RESTART_AFTER_DRAIN), (110, STOP_AFTER_DRAIN)]),
            last_actions: vec![],
            state: |h| draining(h, Request::Stop, 0),
        },
        Row {
            name: "a stop that cannot wait overtakes the drain",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, RESTART_AFTER_DRAIN), (120, STOP)]),
            last_actions: vec![term.clone(), Action::WakeAt(Instant::now())],
            state: |h| stopping(h, 120, AfterStop::Idle),
        },
    ]);
}

/// What ends a drain besides its queues (a death, a kill); a process not ready is not drained.
#[test]
fn drain_ends_table() {
    use Event as E;
    let term = Action::Signal {
        pid: pid(10),
        signal: Signal::SIGTERM,
    };
    check_steered(vec![
        Row {
            name: "a death while draining ends the stop",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, STOP_AFTER_DRAIN),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: ExitStatus::Code(0),
                    },
                ),
            ]),
            last_actions: vec![Action::Announce(Announcement::Down {
                status: Some(ExitStatus::Code(0)),
            })],
            state: |_| State::Idle,
        },
        Row {
            name: "a death while draining for a restart starts it again",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, RESTART_AFTER_DRAIN),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: ExitStatus::Code(1),
                    },
                ),
            ]),
            last_actions: vec![Action::Spawn],
            state: |_| State::Idle,
        },
        Row {
            name: "a kill while draining leaves the stop to its death",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, STOP_AFTER_DRAIN), (110, E::KillRequested)]),
            last_actions: vec![Action::Signal {
                pid: pid(10),
                signal: Signal::SIGKILL,
            }],
            state: |h| draining(h, Request::Stop, 0),
        },
        Row {
            name: "a process not ready yet takes no queries: stopped at once",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (100, STOP_AFTER_DRAIN),
            ],
            last_actions: vec![term.clone(), Action::WakeAt(Instant::now())],
            state: |h| stopping(h, 100, AfterStop::Idle),
        },
    ]);
    check(vec![Row {
        name: "a process that is not steered is stopped at once",
        readiness: NOTIFY,
        restart: RestartPolicy::Always,
        steps: ready_then(vec![(100, STOP_AFTER_DRAIN)]),
        last_actions: vec![term, Action::WakeAt(Instant::now())],
        state: |h| stopping(h, 100, AfterStop::Idle),
    }]);
}

/// Kills on request, and the removal of an idle service.
#[test]
fn kill_table() {
    use Event as E;
    let kill = Action::Signal {
        pid: pid(10),
        signal: Signal::SIGKILL,
    };
    let by_signal = |signal| ExitStatus::Signaled {
        signal,
        core_dumped: false,
    };
    check(vec![
        Row {
            name: "a kill on request SIGKILLs and withdraws the running process",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, E::KillRequested)]),
            last_actions: vec![kill.clone()],
            state: |h| State::Killed {
                pid: pid(10),
                since: h.at(0),
                ready_at: Some(h.at(10)),
            },
        },
        Row {
            name: "the death of a killed process goes through the restart policy",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, E::KillRequested),
                (
                    110,
                    E::Exited {
                        pid: pid(10),
                        status: by_signal(9),
                    },
                ),
            ]),
            last_actions: vec![
                Action::Announce(Announcement::Died {
                    reason: FailReason::Exited {
                        status: by_signal(9),
                    },
                }),
                Action::Spawn,
            ],
            state: |h| restarting(h.at(110)),
        },
        Row {
            name: "killed while starting, READY=1 before its death: ready, still withdrawn",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![
                (0, E::StartRequested),
                (0, E::Spawned { pid: pid(10) }),
                (5, E::KillRequested),
                (6, E::ReadyReceived { pid: pid(10) }),
            ],
            last_actions: vec![Action::Announce(Announcement::Ready { pid: pid(10) })],
            state: |h| State::Killed {
                pid: pid(10),
                since: h.at(0),
                ready_at: Some(h.at(6)),
            },
        },
        Row {
            name: "a kill of a stopping process is its SIGKILL now",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![(100, STOP), (110, E::KillRequested)]),
            last_actions: vec![kill],
            state: |h| State::Stopping {
                pid: pid(10),
                since: h.at(100),
                kill_at: None,
                then: AfterStop::Idle,
            },
        },
        Row {
            name: "a kill of an idle service does nothing",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![(0, E::KillRequested)],
            last_actions: vec![],
            state: |_| State::Idle,
        },
        Row {
            name: "removing an idle service forgets it",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: vec![(0, E::RemoveRequested { drain: Drain::Skip })],
            last_actions: vec![
                Action::Announce(Announcement::Down { status: None }),
                Action::Forget,
            ],
            state: |_| State::Idle,
        },
    ]);
}

/// Removals and one-shot runs are forgotten once down.
#[test]
fn remove_and_run_table() {
    use Event as E;
    let _kill = Action::Signal {
        pid: pid(10),
        signal: Signal::SIGKILL,
    };
    let by_signal = |signal| ExitStatus::Signaled {
        signal,
        core_dumped: false,
    };
    check(vec![
        Row {
            name: "removing a running service forgets it once down",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, E::RemoveRequested { drain: Drain::Skip }),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: by_signal(15),
                    },
                ),
            ]),
            last_actions: vec![
                Action::Announce(Announcement::Down {
                    status: Some(by_signal(15)),
                }),
                Action::Forget,
            ],
            state: |_| State::Idle,
        },
        Row {
            name: "removed, then started while stopping: forgotten only once down",
            readiness: NOTIFY,
            restart: RestartPolicy::Always,
            steps: ready_then(vec![
                (100, E::RemoveRequested { drain: Drain::Skip }),
                (110, E::StartRequested),
                (
                    150,
                    E::Exited {
                        pid: pid(10),
                        status: by_signal(15),
                    },
                ),
            ]),
            last_actions: vec![Action::Spawn],
            state: |_| State::Idle,
        },
        Row {
            name: "a one-shot run is forgotten once it ends",
            readiness: Readiness::None,
            restart: RestartPolicy::Never,
            steps: vec![
                (0, E::RunRequested),
                (0, E::Spawned { pid: pid(10) }),
                (
                    50,
                    E::Exited {
                        pid: pid(10),
                        status: ExitStatus::Code(0),
                    },
                ),
            ],
            last_actions: vec![
                Action::Announce(Announcement::Down {
                    status: Some(ExitStatus::Code(0)),
                }),
                Action::Forget,
            ],
            state: |h| State::Exited {
                status: ExitStatus::Code(0),
                at: h.at(50),
            },
        },
    ]);
}

/// A one-shot run that cannot be spawned.
#[test]
fn failed_run_table() {
    use Event as E;
    let _kill = Action::Signal {
        pid: pid(10),
        signal: Signal::SIGKILL,
    };
    let _by_signal = |signal| ExitStatus::Signaled {
        signal,
        core_dumped: false,
    };
    check(vec![Row {
        name: "a one-shot run that cannot be spawned is forgotten once failed",
        readiness: Readiness::None,
        restart: RestartPolicy::Never,
        steps: vec![
            (0, E::RunRequested),
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
            Action::Forget,
        ],
        state: |h| State::Failed {
            reason: FailReason::SpawnFailed {
                error: "ENOENT".into(),
            },
            at: h.at(0),
        },
    }]);
}

#[test]
fn drained_killed_and_removed_services_are_not_handed_over() {
    let mut s = spec(NOTIFY, RestartPolicy::Always);
    s.reuseport_index = Some(0);
    for last in [STOP_AFTER_DRAIN, Event::KillRequested] {
        let mut h = Harness::new(s.clone());
        for (t, e) in ready_then(vec![(100, last)]) {
            h.on(t, e);
        }
        assert_eq!(h.m.image(h.at(200)), None, "{:?}", h.m.state());
    }
    // A one-shot run, even once settled in `Running`, is not handed over.
    let mut h = Harness::new(spec(Readiness::None, RestartPolicy::Never));
    h.on(0, Event::RunRequested);
    h.on(0, Event::Spawned { pid: pid(10) });
    assert!(matches!(h.m.state(), State::Running { .. }));
    assert_eq!(h.m.image(h.at(10)), None);
}
