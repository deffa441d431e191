//! Deadlines, the failure streak, the start limit and the image a machine is handed over in.

use super::*;

#[test]
fn wake_instants_are_the_deadlines() {
    let mut h = Harness::new(spec(NOTIFY, RestartPolicy::Always));
    let a = h.spawn(0, 10);
    assert!(matches!(a[..], [Action::WakeAt(t)] if t == h.at(3000)));
    h.on(10, Event::ReadyReceived { pid: pid(10) });
    let a = h.on(20, STOP);
    assert!(matches!(a[..], [Action::Signal { .. }, Action::WakeAt(t)] if t == h.at(2020)));
    // A drain looks at the queues every `DRAIN_POLL`.
    let mut s = spec(NOTIFY, RestartPolicy::Always);
    s.reuseport_index = Some(0);
    let mut h = Harness::new(s);
    for (t, e) in ready_then(vec![]) {
        h.on(t, e);
    }
    let a = h.on(100, STOP_AFTER_DRAIN);
    assert!(matches!(a[..], [Action::WakeAt(t)] if t == h.at(100) + DRAIN_POLL));
    let a = h.on(102, Event::QueuesRead { queued: 1 });
    assert!(matches!(a[..], [Action::WakeAt(t)] if t == h.at(102) + DRAIN_POLL));
}

#[test]
fn failure_streak_backs_off_exponentially_then_hits_the_start_limit() {
    let mut s = spec(Readiness::None, RestartPolicy::Always);
    s.backoff = Backoff::try_new(ms(100), ms(1000), ms(0), 0, ms(5000)).expect("valid");
    s.start_limit = StartLimit {
        burst: 3,
        interval: ms(10_000),
    };
    let mut h = Harness::new(s);
    h.spawn(0, 10);
    let mut t = 10;
    let mut delays = Vec::new();
    for n in 0..3 {
        let a = h.on(
            t,
            Event::Exited {
                pid: pid(10 + n),
                status: ExitStatus::Code(1),
            },
        );
        match h.m.state() {
            State::Backoff { until, .. } => {
                delays.push(until.duration_since(h.at(t)).as_millis() as u64)
            }
            other => panic!("expected backoff, got {other:?}"),
        }
        let until = match h.m.state() {
            State::Backoff { until, .. } => *until,
            _ => unreachable!(),
        };
        t = until.duration_since(h.t0).as_millis() as u64;
        if !a.contains(&Action::Spawn) {
            assert_eq!(h.on(t, Event::Tick), vec![Action::Spawn]);
        }
        h.on(t, Event::Spawned { pid: pid(11 + n) });
        t += 10;
    }
    assert_eq!(delays, vec![0, 100, 200]);
    assert_eq!(h.m.restarts(), 3);
    let a = h.on(
        t,
        Event::Exited {
            pid: pid(13),
            status: ExitStatus::Code(1),
        },
    );
    assert_eq!(
        *h.m.state(),
        State::Failed {
            reason: FailReason::StartLimitHit,
            at: h.at(t)
        }
    );
    assert!(a.contains(&Action::Announce(Announcement::Failed {
        reason: FailReason::StartLimitHit
    })));
    // An explicit start clears the failure.
    assert_eq!(h.on(t + 1, Event::StartRequested), vec![Action::Spawn]);
    h.on(t + 1, Event::Spawned { pid: pid(20) });
    assert!(matches!(h.m.state(), State::Running { .. }));
}

#[test]
fn failed_spawns_count_against_the_start_limit() {
    let mut s = spec(Readiness::None, RestartPolicy::Always);
    s.backoff = Backoff::try_new(ms(100), ms(1000), ms(0), 0, ms(5000)).expect("valid");
    s.start_limit = StartLimit {
        burst: 2,
        interval: ms(10_000),
    };
    let mut h = Harness::new(s);
    let failed = || Event::SpawnFailed {
        error: "ENOENT".into(),
    };
    assert_eq!(h.on(0, Event::StartRequested), vec![Action::Spawn]);
    // The first failure restarts at once, the second after the base delay.
    assert!(h.on(0, failed()).contains(&Action::Spawn));
    h.on(0, failed());
    assert_eq!(*h.m.state(), backoff(h.at(100)));
    assert_eq!(h.on(100, Event::Tick), vec![Action::Spawn]);
    // Two restart attempts within the window: the third failure fails the service.
    let a = h.on(100, failed());
    assert_eq!(
        *h.m.state(),
        State::Failed {
            reason: FailReason::StartLimitHit,
            at: h.at(100)
        }
    );
    assert!(a.contains(&Action::Announce(Announcement::Failed {
        reason: FailReason::StartLimitHit
    })));
    assert_eq!(h.m.restarts(), 2);
}

#[test]
fn a_stable_run_forgives_the_streak_and_restarts_at_once() {
    let mut h = Harness::new(spec(Readiness::None, RestartPolicy::Always));
    h.spawn(0, 10);
    h.on(
        100,
        Event::Exited {
            pid: pid(10),
            status: ExitStatus::Code(1),
        },
    );
    h.on(500, Event::Tick);
    h.on(500, Event::Spawned { pid: pid(11) });
    // Second failure, not stable: base delay.
    h.on(
        600,
        Event::Exited {
            pid: pid(11),
            status: ExitStatus::Code(1),
        },
    );
    assert_eq!(*h.m.state(), backoff(h.at(1000)));
    h.on(1000, Event::Tick);
    h.on(1000, Event::Spawned { pid: pid(12) });
    // Ready for longer than stable_after (5 s): immediate restart.
    let a = h.on(
        7000,
        Event::Exited {
            pid: pid(12),
            status: ExitStatus::Signaled {
                signal: 9,
                core_dumped: false,
            },
        },
    );
    assert!(a.contains(&Action::Spawn));
    assert_eq!(*h.m.state(), restarting(h.at(7000)));
}

#[test]
fn old_restarts_leave_the_start_limit_window() {
    let mut s = spec(Readiness::None, RestartPolicy::Always);
    s.start_limit = StartLimit {
        burst: 2,
        interval: ms(1000),
    };
    s.backoff = Backoff::try_new(ms(0), ms(0), ms(0), 0, ms(1_000_000)).expect("valid");
    let mut h = Harness::new(s);
    h.spawn(0, 1);
    let mut p = 1;
    // One crash every 600 ms: never more than 2 restarts within 1 s.
    for k in 1..10u64 {
        let a = h.on(
            k * 600,
            Event::Exited {
                pid: pid(p),
                status: ExitStatus::Code(1),
            },
        );
        assert!(a.contains(&Action::Spawn), "crash {k} should restart");
        p += 1;
        h.on(k * 600, Event::Spawned { pid: pid(p) });
    }
    assert_eq!(h.m.restarts(), 9);
}

#[test]
fn an_image_carries_settled_states_and_their_history_into_another_clock() {
    let mut h = Harness::new(spec(NOTIFY, RestartPolicy::Always));
    h.spawn(0, 10);
    assert_eq!(
        h.m.image(h.at(1)),
        None,
        "a starting process is not handed over"
    );
    h.on(100, Event::ReadyReceived { pid: pid(10) });
    h.on(
        5000,
        Event::Exited {
            pid: pid(10),
            status: ExitStatus::Code(1),
        },
    );
    // In backoff until some time after 5000: 4 s into it, the image says what is left.
    let State::Backoff { until, .. } = *h.m.state() else {
        panic!("backoff expected: {:?}", h.m.state());
    };
    let image = h.m.image(h.at(5000)).expect("a settled state");
    let later = h.at(60_000);
    let m = ServiceMachine::from_image(image.clone(), later);
    assert_eq!(*m.state(), restarting(later + (until - h.at(5000))));
    assert_eq!((m.restarts(), m.streak), (h.m.restarts(), h.m.streak));
    assert_eq!(m.last_exit().map(|(s, _)| s), Some(ExitStatus::Code(1)));
    assert_eq!(m.last_exit().map(|(_, t)| later - t), Some(ms(0)));
    // Round trip: the same image again.
    assert_eq!(m.image(later), Some(image));

    // A running process keeps its pid and its age.
    let mut h = Harness::new(spec(NOTIFY, RestartPolicy::Always));
    h.spawn(0, 20);
    h.on(100, Event::ReadyReceived { pid: pid(20) });
    let image = h.m.image(h.at(1100)).expect("running is settled");
    let m = ServiceMachine::from_image(image, later);
    assert_eq!(
        *m.state(),
        State::Running {
            pid: pid(20),
            since: later - ms(1100),
            ready_at: later - ms(1000),
        }
    );
    h.on(2000, STOP);
    assert_eq!(
        h.m.image(h.at(2001)),
        None,
        "a stopping process is not handed over"
    );
}

#[test]
fn a_callers_start_during_backoff_is_not_a_restart() {
    let mut h = Harness::new(spec(Readiness::None, RestartPolicy::Always));
    h.spawn(0, 10);
    let crash = |p| Event::Exited {
        pid: pid(p),
        status: ExitStatus::Code(1),
    };
    // The first crash is restarted at once: that spawn is the restart's, and counts.
    assert!(h.on(100, crash(10)).contains(&Action::Spawn));
    assert_eq!(*h.m.state(), restarting(h.at(100)));
    h.on(100, Event::Spawned { pid: pid(11) });
    assert_eq!(h.m.restarts(), 1);
    // The second waits for its delay; a caller starts it before then: not a restart.
    h.on(200, crash(11));
    let State::Backoff { until, .. } = *h.m.state() else {
        panic!("backoff expected: {:?}", h.m.state());
    };
    assert_eq!(*h.m.state(), backoff(until));
    assert_eq!(h.on(210, Event::StartRequested), vec![Action::Spawn]);
    assert_eq!(*h.m.state(), backoff(until));
    h.on(210, Event::Spawned { pid: pid(12) });
    assert_eq!(h.m.restarts(), 1);
    assert!(matches!(h.m.state(), State::Running { .. }));
}
