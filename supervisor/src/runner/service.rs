//! One registered service as the actor keeps it: its spec, its machine, and who waits on it.

use std::os::fd::OwnedFd;
use std::time::SystemTime;

use nix::unistd::Pid;

use crate::call::Reply;
use crate::machine::{ServiceMachine, State};
use crate::os::FdPass;
use crate::output;
use crate::snapshot::{ProcessSnapshot, ProcessState};
use crate::spec::ServiceSpec;

/// One registered service.
pub(super) struct Service {
    pub(super) spec: ServiceSpec,
    pub(super) machine: ServiceMachine,
    /// Descriptors passed to the child, and at which numbers.
    pub(super) fds: Vec<FdPass>,
    /// Descriptors the supervisor was handed with the service; closed with it.
    pub(super) owned: Vec<OwnedFd>,
    /// Copies of the read ends of the current process's output pipes, for a handover (the
    /// drain tasks read the originals).
    pub(super) output: Option<(OwnedFd, OwnedFd)>,
    /// Callers waiting for readiness (answered with [`Answer::Pid`]).
    pub(super) ready_waiters: Vec<Reply>,
    /// Callers waiting for the process to be down for good ([`Answer::Down`]).
    pub(super) down_waiters: Vec<Reply>,
    /// One-shot callers waiting for the exit status ([`Answer::Exited`]).
    pub(super) run_waiter: Option<Reply>,
    /// Wall-clock anchor of the current state, for snapshots.
    pub(super) since_wall: Option<SystemTime>,
    pub(super) ready_wall: Option<SystemTime>,
    /// Last `STATUS=` the child sent.
    pub(super) status_text: Option<String>,
    /// The last lines of output of the current or last process.
    pub(super) tail: output::Tail,
    /// Which of its processes was last killed on request, and why.
    pub(super) kill_reason: Option<(Pid, String)>,
}

impl Service {
    /// A service just registered: idle, nothing known of a process yet.
    pub(super) fn new(spec: ServiceSpec, fds: Vec<FdPass>, owned: Vec<OwnedFd>) -> Service {
        Service {
            spec,
            machine: ServiceMachine::new(),
            fds,
            owned,
            output: None,
            ready_waiters: Vec::new(),
            down_waiters: Vec::new(),
            run_waiter: None,
            since_wall: None,
            ready_wall: None,
            status_text: None,
            tail: output::Tail::default(),
            kill_reason: None,
        }
    }

    /// Whether the steering programs may send it new datagrams and connections: it opted in,
    /// and its process is ready and not being drained, stopped or killed.
    pub(super) fn takes_queries(&self) -> bool {
        self.spec.reuseport_index.is_some() && matches!(self.machine.state(), State::Running { .. })
    }

    /// Anchor the wall-clock times of the snapshot to a change of its state from `before`.
    pub(super) fn note_change(&mut self, before: &State) {
        let now = crate::snapshot::shown(self.machine.state());
        if crate::snapshot::shown(before) != now {
            self.since_wall = Some(SystemTime::now());
            if now == ProcessState::Running {
                self.ready_wall = self.since_wall;
            }
        }
    }

    /// What snapshots show of the service named `name`; whether it takes queries is the
    /// steering's to say.
    pub(super) fn snapshot(&self, name: &str) -> ProcessSnapshot {
        let m = &self.machine;
        let state = crate::snapshot::shown(m.state());
        let failure = match m.state() {
            State::Failed { reason, .. } => Some(reason.to_string()),
            _ => None,
        };
        let kill = self.kill_reason.as_ref();
        ProcessSnapshot {
            name: name.to_owned(),
            kind: self.spec.kind.clone(),
            pid: m.pid().map(|p| p.as_raw()),
            state,
            since: self.since_wall,
            ready_at: self.ready_wall.filter(|_| state == ProcessState::Running),
            restarts: m.restarts(),
            last_exit: m.last_exit().map(|(s, _)| s),
            failure,
            status_text: self.status_text.clone(),
            kill_reason: kill.map(|(_, reason)| reason.clone()),
            killed_pid: kill.map(|(pid, _)| pid.as_raw()),
            takes_queries: None,
        }
    }
}
