//! The life cycle of one supervised service as a pure state machine.
//!
//! `ServiceMachine::on(event, now, entropy)` is the only way state changes. It performs no I/O:
//! it returns the actions (spawn, signal, read the queues, wake me at, forget me) that the
//! runner must carry out, and the runner feeds the results back as events. Time and randomness
//! come in as arguments, so the whole policy (readiness timeouts, restart backoff, start
//! limits, stop escalation, draining a steered process before it stops) is tested as tables
//! with a fake clock.
//!
//! [`ServiceMachine::on`] hands each kind of event to a step of its own ([`steps`]), which
//! works on the [`State`] and a step context (the spec, the time, the entropy, the actions
//! asked for so far); a machine's image for another process image is in [`image`].

mod image;
mod steps;

pub use image::{MachineImage, StateImage};

use std::collections::VecDeque;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::spec::{ExitStatus, ServiceSpec};

/// The longest a stop or restart of a steered service waits for its queues to empty.
pub const DRAIN_LIMIT: Duration = Duration::from_millis(1500);

/// How often the queues of a service being drained are looked at.
pub const DRAIN_POLL: Duration = Duration::from_millis(2);

/// Where a service is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Registered, not running, not asked to run.
    Idle,
    /// Spawned; waiting for `READY=1` until `deadline`.
    Starting {
        pid: Pid,
        since: Instant,
        deadline: Instant,
    },
    /// Up and ready.
    Running {
        pid: Pid,
        since: Instant,
        ready_at: Instant,
    },
    /// Up and ready, but steered away from: the stop or restart asked for (`then`) waits
    /// until its sockets' queues are empty, or until `deadline`; `polls` counts the looks at
    /// them.
    Draining {
        pid: Pid,
        since: Instant,
        ready_at: Instant,
        deadline: Instant,
        then: Request,
        polls: u32,
    },
    /// SIGKILLed on request: it takes no new queries, and once its death is reaped the
    /// restart policy applies as to any death by signal. `ready_at`: when it became ready
    /// (`None`: it was still starting).
    Killed {
        pid: Pid,
        since: Instant,
        ready_at: Option<Instant>,
    },
    /// Asked to stop; SIGKILL to the group at `kill_at` (None once it was sent).
    Stopping {
        pid: Pid,
        since: Instant,
        kill_at: Option<Instant>,
        then: AfterStop,
    },
    /// Waiting to be restarted at `until`; `retry` says whether the automatic restart's spawn
    /// was asked for already.
    Backoff { until: Instant, retry: Retry },
    /// Ended and will not be restarted by policy (a finished one-shot job, for instance).
    Exited { status: ExitStatus, at: Instant },
    /// Given up on; only an explicit start brings it back.
    Failed { reason: FailReason, at: Instant },
}

/// Where the automatic restart of a service in [`State::Backoff`] is: the restart accounting
/// travels with the state, so a spawn counts against the start limit only when it is the
/// restart's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The restart waits for its time, or a caller's start overtook it.
    Waiting,
    /// Its spawn was asked for ([`Action::Spawn`]): made or failed, it counts against the
    /// start limit.
    Spawning,
}

/// What to do once a stopping process has exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterStop {
    /// Stay down.
    Idle,
    /// Start again at once (a requested restart).
    Start,
    /// It was killed because it failed: apply the restart policy.
    Failure(FailReason),
}

/// What a caller's stop leads to once the process is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// It stays down.
    Stop,
    /// It starts again.
    Restart,
}

impl Request {
    fn after(self) -> AfterStop {
        match self {
            Request::Stop => AfterStop::Idle,
            Request::Restart => AfterStop::Start,
        }
    }
}

/// How a caller's stop treats the queries waiting in a steered process's sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Other services can take its share: a steered, ready process is steered away from
    /// first ([`State::Draining`]) and stopped once its queues are empty, or at
    /// [`DRAIN_LIMIT`].
    First,
    /// Stop at once: nobody else could take its share, or everything stops. A drain in
    /// progress is overtaken.
    Skip,
}

/// Whether the service stays registered once it is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// It can be started again.
    Kept,
    /// It is forgotten ([`Action::Forget`]) as soon as it is down: removed on request, or a
    /// one-shot run.
    UntilDown,
}

/// Why a service failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum FailReason {
    /// It exited with a status that is not a success.
    Exited { status: ExitStatus },
    /// `READY=1` did not arrive in time.
    ReadinessTimeout,
    /// The executable could not be started.
    SpawnFailed { error: String },
    /// Too many starts within the start-limit interval.
    StartLimitHit,
}

impl std::fmt::Display for FailReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailReason::Exited { status } => write!(f, "{status}"),
            FailReason::ReadinessTimeout => write!(f, "no READY=1 within the readiness timeout"),
            FailReason::SpawnFailed { error } => write!(f, "spawn failed: {error}"),
            FailReason::StartLimitHit => write!(f, "start limit hit"),
        }
    }
}

/// Something that happened to a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    StartRequested,
    /// A one-shot run: start it, and forget the service once it is down.
    RunRequested,
    StopRequested {
        drain: Drain,
    },
    RestartRequested {
        drain: Drain,
    },
    /// Stop it, and forget the service once it is down.
    RemoveRequested {
        drain: Drain,
    },
    /// SIGKILL its process now: it stopped answering, or everything must end at once.
    KillRequested,
    Spawned {
        pid: Pid,
    },
    SpawnFailed {
        error: String,
    },
    ReadyReceived {
        pid: Pid,
    },
    Exited {
        pid: Pid,
        status: ExitStatus,
    },
    /// What waits in a draining process's sockets (bytes of datagrams, connections to
    /// accept), read as [`Action::ReadQueues`] asked.
    QueuesRead {
        queued: u64,
    },
    /// Time has passed; the machine checks its deadlines against `now`.
    Tick,
}

/// What the runner must do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Spawn the process and report `Spawned` or `SpawnFailed`.
    Spawn,
    /// Send a signal to the process group led by `pid`.
    Signal { pid: Pid, signal: Signal },
    /// Deliver a `Tick` no later than this instant.
    WakeAt(Instant),
    /// Read what waits in the service's sockets and report `QueuesRead`.
    ReadQueues,
    /// Tell whoever waits on this service what happened.
    Announce(Announcement),
    /// Unregister the service: it is down for good.
    Forget,
}

/// Outcomes that callers can wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    Ready {
        pid: Pid,
    },
    /// The process ended and stays down (stopped on request, or exited under its policy).
    Down {
        status: Option<ExitStatus>,
    },
    /// The process exited or failed while starting, or died unexpectedly; a restart may follow.
    Died {
        reason: FailReason,
    },
    Failed {
        reason: FailReason,
    },
}

/// How the process that failed had been running, for the streak of failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastRun {
    /// Ready for at least the backoff's `stable_after`: the streak is forgiven.
    Stable,
    /// Not ready, or not for long: the streak goes on.
    Unstable,
}

/// The state of one service plus the history its policies need.
#[derive(Debug, Clone)]
pub struct ServiceMachine {
    state: State,
    /// Whether the service is forgotten once it is down.
    registration: Registration,
    /// Consecutive failures not yet forgiven by a stable run.
    streak: u32,
    /// Spawn times of automatic restarts within the start-limit window.
    restarts_in_window: VecDeque<Instant>,
    /// When the current or last process was spawned.
    last_spawn: Option<Instant>,
    /// Automatic restarts since registration.
    restarts: u32,
    /// How the last process ended.
    last_exit: Option<(ExitStatus, Instant)>,
}

impl Default for ServiceMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl ServiceMachine {
    pub fn new() -> Self {
        ServiceMachine {
            state: State::Idle,
            registration: Registration::Kept,
            streak: 0,
            restarts_in_window: VecDeque::new(),
            last_spawn: None,
            restarts: 0,
            last_exit: None,
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn registration(&self) -> Registration {
        self.registration
    }

    /// The live process, if any.
    pub fn pid(&self) -> Option<Pid> {
        match self.state {
            State::Starting { pid, .. }
            | State::Running { pid, .. }
            | State::Draining { pid, .. }
            | State::Killed { pid, .. }
            | State::Stopping { pid, .. } => Some(pid),
            _ => None,
        }
    }

    /// The live process, once it has become ready, while nobody is stopping it: what a start
    /// request is answered with at once.
    pub fn ready_pid(&self) -> Option<Pid> {
        match self.state {
            State::Running { pid, .. }
            | State::Killed {
                pid,
                ready_at: Some(_),
                ..
            } => Some(pid),
            _ => None,
        }
    }

    /// Whether no process is live and none is due to start (idle, exited or failed).
    pub fn is_down(&self) -> bool {
        matches!(
            self.state,
            State::Idle | State::Exited { .. } | State::Failed { .. }
        )
    }

    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    pub fn last_exit(&self) -> Option<(ExitStatus, Instant)> {
        self.last_exit
    }

    /// Apply one event. `entropy` picks the backoff jitter.
    pub fn on(
        &mut self,
        spec: &ServiceSpec,
        event: Event,
        now: Instant,
        entropy: u64,
    ) -> Vec<Action> {
        let mut step = Step {
            spec,
            now,
            entropy,
            actions: Vec::new(),
        };
        self.dispatch(event, &mut step);
        let spawns = step.actions.iter().any(|a| matches!(a, Action::Spawn));
        if self.registration == Registration::UntilDown && self.is_down() && !spawns {
            step.actions.push(Action::Forget);
        }
        step.actions
    }

    /// Hand `event` to its step. A run is a start, a removal a stop, each with the service
    /// forgotten once down.
    fn dispatch(&mut self, event: Event, step: &mut Step<'_>) {
        match event {
            Event::StartRequested => self.start_requested(step),
            Event::RunRequested => {
                self.registration = Registration::UntilDown;
                self.start_requested(step);
            }
            Event::StopRequested { drain } => self.stop_requested(drain, step),
            Event::RemoveRequested { drain } => {
                self.registration = Registration::UntilDown;
                self.stop_requested(drain, step);
            }
            Event::RestartRequested { drain } => self.restart_requested(drain, step),
            Event::KillRequested => self.kill_requested(step),
            Event::Spawned { pid } => self.on_spawned(pid, step),
            Event::SpawnFailed { error } => self.spawn_failed(error, step),
            Event::ReadyReceived { pid } => self.ready_received(pid, step),
            Event::Exited { pid, status } => self.exited(pid, status, step),
            Event::QueuesRead { queued } => self.queues_read(queued, step),
            Event::Tick => self.ticked(step),
        }
    }
}

/// What one step of a machine works with: what it knows of the service, the time and the
/// entropy it was given, and the actions it asks for so far.
struct Step<'a> {
    spec: &'a ServiceSpec,
    now: Instant,
    /// Picks the backoff jitter.
    entropy: u64,
    actions: Vec<Action>,
}

impl Step<'_> {
    fn push(&mut self, action: Action) {
        self.actions.push(action);
    }

    /// Announce `announcement` to whoever waits on the service.
    fn announce(&mut self, announcement: Announcement) {
        self.actions.push(Action::Announce(announcement));
    }
}

#[cfg(test)]
mod tests;
