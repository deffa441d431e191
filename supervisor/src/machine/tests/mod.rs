//! The machine's tables: rows of (time, event) with the actions and the state expected after
//! the last, on a fake clock, checked through one [`check`].

mod drain_and_kill;
mod history;
mod transitions;

use std::time::Duration;

use super::*;
use crate::backoff::Backoff;
use crate::spec::{Readiness, RestartPolicy, StartLimit};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn spec(readiness: Readiness, restart: RestartPolicy) -> ServiceSpec {
    let mut s = ServiceSpec::new("svc", "test", vec!["/bin/true".into()]);
    s.readiness = readiness;
    s.restart = restart;
    s.backoff = Backoff::try_new(ms(100), ms(1000), ms(500), 0, ms(5000)).expect("valid");
    s.start_limit = StartLimit {
        burst: 3,
        interval: ms(10_000),
    };
    s.stop.timeout = ms(2000);
    s
}

/// A caller's stop or restart with nobody to take the service's queries.
const STOP: Event = Event::StopRequested { drain: Drain::Skip };
const RESTART: Event = Event::RestartRequested { drain: Drain::Skip };

const NOTIFY: Readiness = Readiness::Notify {
    timeout: Duration::from_millis(3000),
};

struct Harness {
    spec: ServiceSpec,
    m: ServiceMachine,
    t0: Instant,
}

impl Harness {
    fn new(spec: ServiceSpec) -> Self {
        Harness {
            spec,
            m: ServiceMachine::new(),
            t0: Instant::now(),
        }
    }
    fn at(&self, offset_ms: u64) -> Instant {
        self.t0 + ms(offset_ms)
    }
    fn on(&mut self, offset_ms: u64, e: Event) -> Vec<Action> {
        let now = self.at(offset_ms);
        self.m.on(&self.spec, e, now, 0)
    }
    /// Start and spawn as pid `pid` at `t`.
    fn spawn(&mut self, t: u64, pid: i32) -> Vec<Action> {
        let a = self.on(t, Event::StartRequested);
        assert_eq!(a, vec![Action::Spawn]);
        self.on(
            t,
            Event::Spawned {
                pid: Pid::from_raw(pid),
            },
        )
    }
}

fn pid(n: i32) -> Pid {
    Pid::from_raw(n)
}

/// One row: a sequence of (time, event) and the expected actions and state after the last.
struct Row {
    name: &'static str,
    readiness: Readiness,
    restart: RestartPolicy,
    steps: Vec<(u64, Event)>,
    last_actions: Vec<Action>,
    state: fn(&Harness) -> State,
}

fn check(rows: Vec<Row>) {
    check_with(rows, |_| {});
}

/// Rows of a service steered among others ([`ServiceSpec::reuseport_index`]).
fn check_steered(rows: Vec<Row>) {
    check_with(rows, |s| s.reuseport_index = Some(0));
}

fn check_with(rows: Vec<Row>, edit: fn(&mut ServiceSpec)) {
    for row in rows {
        let mut s = spec(row.readiness, row.restart);
        edit(&mut s);
        let mut h = Harness::new(s);
        let mut last = Vec::new();
        for (t, e) in row.steps {
            last = h.on(t, e);
        }
        assert_eq!(last, row.last_actions, "actions of row `{}`", row.name);
        assert_eq!(*h.m.state(), (row.state)(&h), "state of row `{}`", row.name);
    }
}

/// WakeAt instants above are placeholders; compare them separately here.
impl PartialEq for Action {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Action::WakeAt(_), Action::WakeAt(_)) => true,
            (Action::Spawn, Action::Spawn) => true,
            (Action::ReadQueues, Action::ReadQueues) => true,
            (Action::Forget, Action::Forget) => true,
            (Action::Signal { pid: a, signal: s }, Action::Signal { pid: b, signal: t }) => {
                a == b && s == t
            }
            (Action::Announce(a), Action::Announce(b)) => a == b,
            _ => false,
        }
    }
}

/// In backoff until `until`, its restart not asked for yet.
fn backoff(until: Instant) -> State {
    State::Backoff {
        until,
        retry: Retry::Waiting,
    }
}

/// In backoff until `until`, its restart's spawn asked for.
fn restarting(until: Instant) -> State {
    State::Backoff {
        until,
        retry: Retry::Spawning,
    }
}

/// Started, spawned as pid 10 at 0 and ready at 10, then `more`.
fn ready_then(more: Vec<(u64, Event)>) -> Vec<(u64, Event)> {
    let mut steps = vec![
        (0, Event::StartRequested),
        (0, Event::Spawned { pid: pid(10) }),
        (10, Event::ReadyReceived { pid: pid(10) }),
    ];
    steps.extend(more);
    steps
}

const STOP_AFTER_DRAIN: Event = Event::StopRequested {
    drain: Drain::First,
};
const RESTART_AFTER_DRAIN: Event = Event::RestartRequested {
    drain: Drain::First,
};
