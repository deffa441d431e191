//! The life cycle of one supervised service as a pure state machine.
//!
//! `ServiceMachine::on(event, now, entropy)` is the only way state changes. It performs no I/O:
//! it returns the actions (spawn, signal, read the queues, wake me at, forget me) that the
//! runner must carry out, and the runner feeds the results back as events. Time and randomness
//! come in as arguments, so the whole policy (readiness timeouts, restart backoff, start
//! limits, stop escalation, draining a steered process before it stops) is tested as tables
//! with a fake clock.

use std::collections::VecDeque;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::spec::{ExitStatus, Readiness, RestartPolicy, ServiceSpec};

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
    /// Waiting to be restarted at `until`.
    Backoff { until: Instant },
    /// Ended and will not be restarted by policy (a finished one-shot job, for instance).
    Exited { status: ExitStatus, at: Instant },
    /// Given up on; only an explicit start brings it back.
    Failed { reason: FailReason, at: Instant },
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
    /// Whether the pending spawn is an automatic restart (counts against the start limit).
    pending_restart: bool,
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
            pending_restart: false,
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
        use Event as E;
        use State as S;
        let mut actions = Vec::new();
        // A run is a start, a removal a stop, each with the service forgotten once down.
        let event = match event {
            E::RunRequested => {
                self.registration = Registration::UntilDown;
                E::StartRequested
            }
            E::RemoveRequested { drain } => {
                self.registration = Registration::UntilDown;
                E::StopRequested { drain }
            }
            event => event,
        };
        let steered = spec.reuseport_index.is_some();
        match (&self.state, event) {
            // Starting on request. A failed service is given a clean slate.
            (
                S::Idle | S::Exited { .. } | S::Backoff { .. },
                E::StartRequested | E::RestartRequested { .. },
            ) => {
                self.pending_restart = false;
                actions.push(Action::Spawn);
            }
            (S::Failed { .. }, E::StartRequested | E::RestartRequested { .. }) => {
                self.streak = 0;
                self.restarts_in_window.clear();
                self.pending_restart = false;
                actions.push(Action::Spawn);
            }
            (S::Starting { .. } | S::Running { .. } | S::Killed { .. }, E::StartRequested) => {}
            (S::Stopping { .. }, E::StartRequested | E::RestartRequested { .. }) => {
                self.stop_then(AfterStop::Start);
            }
            // Being drained for a stop: it comes back afterwards, as a stopping process would.
            (S::Draining { .. }, E::StartRequested) => self.drain_then(Request::Restart),

            // A steered, ready process whose share others can take is steered away from
            // before it stops; its queues are looked at every `DRAIN_POLL`.
            (
                S::Running { .. },
                E::StopRequested {
                    drain: Drain::First,
                },
            ) if steered => {
                self.withdraw(Request::Stop, now, &mut actions);
            }
            (
                S::Running { .. },
                E::RestartRequested {
                    drain: Drain::First,
                },
            ) if steered => {
                self.withdraw(Request::Restart, now, &mut actions);
            }
            // While draining, the latest request decides what follows; a stop that cannot
            // wait overtakes the drain.
            (
                S::Draining { .. },
                E::StopRequested {
                    drain: Drain::First,
                },
            ) => {
                self.drain_then(Request::Stop);
            }
            (
                S::Draining { .. },
                E::RestartRequested {
                    drain: Drain::First,
                },
            ) => {
                self.drain_then(Request::Restart);
            }
            (
                S::Starting { pid, .. }
                | S::Running { pid, .. }
                | S::Killed { pid, .. }
                | S::Draining { pid, .. },
                E::RestartRequested { .. },
            ) => {
                let pid = *pid;
                self.begin_stop(spec, pid, now, AfterStop::Start, &mut actions);
            }

            (
                S::Idle | S::Exited { .. } | S::Backoff { .. } | S::Failed { .. },
                E::Spawned { pid },
            ) => self.spawned(spec, pid, now, &mut actions),
            (_, E::SpawnFailed { error }) => {
                // A failed spawn of an automatic restart is still a restart attempt: count it
                // as `Spawned` does, or a program that cannot be executed would be retried
                // forever instead of hitting the start limit.
                self.count_restart(now);
                let reason = FailReason::SpawnFailed { error };
                actions.push(Action::Announce(Announcement::Died {
                    reason: reason.clone(),
                }));
                self.after_failure(spec, reason, LastRun::Unstable, now, entropy, &mut actions);
            }

            (S::Starting { pid, since, .. }, E::ReadyReceived { pid: sender })
                if *pid == sender =>
            {
                let (pid, since) = (*pid, *since);
                self.state = S::Running {
                    pid,
                    since,
                    ready_at: now,
                };
                actions.push(Action::Announce(Announcement::Ready { pid }));
            }
            // Killed while starting, ready before its death was reaped: it is ready, and
            // still takes no queries.
            (
                S::Killed {
                    pid,
                    since,
                    ready_at: None,
                },
                E::ReadyReceived { pid: sender },
            ) if *pid == sender => {
                let (pid, since) = (*pid, *since);
                self.state = S::Killed {
                    pid,
                    since,
                    ready_at: Some(now),
                };
                actions.push(Action::Announce(Announcement::Ready { pid }));
            }
            (_, E::ReadyReceived { .. }) => {}

            (S::Starting { pid, deadline, .. }, E::Tick) if now >= *deadline => {
                let pid = *pid;
                // Like supervisord and systemd: a process that missed its readiness deadline
                // is killed outright, then the restart policy applies.
                actions.push(Action::Signal {
                    pid,
                    signal: Signal::SIGKILL,
                });
                self.state = S::Stopping {
                    pid,
                    since: now,
                    kill_at: None,
                    then: AfterStop::Failure(FailReason::ReadinessTimeout),
                };
            }
            (
                S::Stopping {
                    pid,
                    kill_at: Some(at),
                    ..
                },
                E::Tick,
            ) if now >= *at => {
                let pid = *pid;
                self.escalate(pid, &mut actions);
            }
            (S::Backoff { until }, E::Tick) if now >= *until => {
                self.pending_restart = true;
                actions.push(Action::Spawn);
            }
            (S::Draining { .. }, E::Tick) => actions.push(Action::ReadQueues),
            (_, E::Tick) => {}

            (
                S::Draining {
                    pid,
                    deadline,
                    then,
                    ..
                },
                E::QueuesRead { queued },
            ) => {
                let (pid, then) = (*pid, *then);
                if queued > 0 && now < *deadline {
                    if let S::Draining { polls, .. } = &mut self.state {
                        *polls += 1;
                    }
                    actions.push(Action::WakeAt(now + DRAIN_POLL));
                } else {
                    self.begin_stop(spec, pid, now, then.after(), &mut actions);
                }
            }
            (_, E::QueuesRead { .. }) => {}

            (
                S::Starting { pid, .. }
                | S::Running { pid, .. }
                | S::Killed { pid, .. }
                | S::Draining { pid, .. },
                E::StopRequested { .. },
            ) => {
                let pid = *pid;
                self.begin_stop(spec, pid, now, AfterStop::Idle, &mut actions);
            }
            (S::Stopping { .. }, E::StopRequested { .. }) => self.stop_then(AfterStop::Idle),
            (S::Backoff { .. }, E::StopRequested { .. }) => {
                self.state = S::Idle;
                actions.push(Action::Announce(Announcement::Down { status: None }));
            }
            (S::Idle | S::Exited { .. } | S::Failed { .. }, E::StopRequested { .. }) => {
                actions.push(Action::Announce(Announcement::Down { status: None }));
            }

            (S::Starting { .. } | S::Running { .. }, E::KillRequested) => self.kill(&mut actions),
            (S::Killed { pid, .. } | S::Draining { pid, .. }, E::KillRequested) => {
                actions.push(Action::Signal {
                    pid: *pid,
                    signal: Signal::SIGKILL,
                });
            }
            (S::Stopping { pid, .. }, E::KillRequested) => {
                let pid = *pid;
                self.escalate(pid, &mut actions);
            }
            (_, E::KillRequested) => {}

            (S::Stopping { pid, then, .. }, E::Exited { pid: dead, status }) if *pid == dead => {
                let then = then.clone();
                self.stopped(spec, then, status, now, entropy, &mut actions);
            }
            // Its death ends the drain as it would have ended the stop that followed.
            (S::Draining { pid, then, .. }, E::Exited { pid: dead, status }) if *pid == dead => {
                let then = then.after();
                self.stopped(spec, then, status, now, entropy, &mut actions);
            }
            (
                S::Starting { pid, .. } | S::Running { pid, .. } | S::Killed { pid, .. },
                E::Exited { pid: dead, status },
            ) if *pid == dead => {
                let last_run = self.last_run(spec, now);
                self.died(spec, status, last_run, now, entropy, &mut actions);
            }
            // An exit of a process we no longer track (already handled) changes nothing.
            (_, E::Exited { .. }) => {}
            (
                S::Starting { .. }
                | S::Running { .. }
                | S::Draining { .. }
                | S::Killed { .. }
                | S::Stopping { .. },
                E::Spawned { .. },
            ) => {}
            // Turned into a start or a stop above.
            (_, E::RunRequested | E::RemoveRequested { .. }) => {}
        }
        let spawns = actions.iter().any(|a| matches!(a, Action::Spawn));
        if self.registration == Registration::UntilDown && self.is_down() && !spawns {
            actions.push(Action::Forget);
        }
        actions
    }

    /// A process was spawned: it is starting, or running at once without readiness.
    fn spawned(&mut self, spec: &ServiceSpec, pid: Pid, now: Instant, actions: &mut Vec<Action>) {
        self.last_spawn = Some(now);
        self.count_restart(now);
        match spec.readiness {
            Readiness::None => {
                self.state = State::Running {
                    pid,
                    since: now,
                    ready_at: now,
                };
                actions.push(Action::Announce(Announcement::Ready { pid }));
            }
            Readiness::Notify { timeout } => {
                let deadline = now + timeout;
                self.state = State::Starting {
                    pid,
                    since: now,
                    deadline,
                };
                actions.push(Action::WakeAt(deadline));
            }
        }
    }

    /// Count the pending spawn against the start limit if it is an automatic restart.
    fn count_restart(&mut self, now: Instant) {
        if self.pending_restart {
            self.restarts += 1;
            self.restarts_in_window.push_back(now);
            self.pending_restart = false;
        }
    }

    /// What follows the stop under way.
    fn stop_then(&mut self, after: AfterStop) {
        if let State::Stopping { then, .. } = &mut self.state {
            *then = after;
        }
    }

    /// What follows the drain under way.
    fn drain_then(&mut self, request: Request) {
        if let State::Draining { then, .. } = &mut self.state {
            *then = request;
        }
    }

    /// Steer away from the running process before `request` is carried out.
    fn withdraw(&mut self, request: Request, now: Instant, actions: &mut Vec<Action>) {
        if let State::Running {
            pid,
            since,
            ready_at,
        } = self.state
        {
            self.state = State::Draining {
                pid,
                since,
                ready_at,
                deadline: now + DRAIN_LIMIT,
                then: request,
                polls: 0,
            };
            actions.push(Action::WakeAt(now + DRAIN_POLL));
        }
    }

    /// SIGKILL a starting or running process on request; it is `Killed` until its death is
    /// reaped.
    fn kill(&mut self, actions: &mut Vec<Action>) {
        let (pid, since, ready_at) = match self.state {
            State::Starting { pid, since, .. } => (pid, since, None),
            State::Running {
                pid,
                since,
                ready_at,
            } => (pid, since, Some(ready_at)),
            _ => return,
        };
        actions.push(Action::Signal {
            pid,
            signal: Signal::SIGKILL,
        });
        self.state = State::Killed {
            pid,
            since,
            ready_at,
        };
    }

    /// SIGKILL a stopping process now: no more waiting for it to end on its own.
    fn escalate(&mut self, pid: Pid, actions: &mut Vec<Action>) {
        actions.push(Action::Signal {
            pid,
            signal: Signal::SIGKILL,
        });
        if let State::Stopping { kill_at, .. } = &mut self.state {
            *kill_at = None;
        }
    }

    /// A process that was being stopped ended with `status`: carry out what was to follow.
    fn stopped(
        &mut self,
        spec: &ServiceSpec,
        then: AfterStop,
        status: ExitStatus,
        now: Instant,
        entropy: u64,
        actions: &mut Vec<Action>,
    ) {
        self.last_exit = Some((status, now));
        match then {
            AfterStop::Idle => {
                self.state = State::Idle;
                actions.push(Action::Announce(Announcement::Down {
                    status: Some(status),
                }));
            }
            AfterStop::Start => {
                self.state = State::Idle;
                self.pending_restart = false;
                actions.push(Action::Spawn);
            }
            AfterStop::Failure(reason) => {
                actions.push(Action::Announce(Announcement::Died {
                    reason: reason.clone(),
                }));
                self.after_failure(spec, reason, LastRun::Unstable, now, entropy, actions);
            }
        }
    }

    /// How the live process has run, as of `now`.
    fn last_run(&self, spec: &ServiceSpec, now: Instant) -> LastRun {
        let ready_at = match self.state {
            State::Running { ready_at, .. } => Some(ready_at),
            State::Killed { ready_at, .. } => ready_at,
            _ => None,
        };
        match ready_at {
            Some(at) if now.duration_since(at) >= spec.backoff.stable_after() => LastRun::Stable,
            _ => LastRun::Unstable,
        }
    }

    /// A process nobody was stopping ended with `status`: it stays down, or its restart
    /// policy applies.
    fn died(
        &mut self,
        spec: &ServiceSpec,
        status: ExitStatus,
        last_run: LastRun,
        now: Instant,
        entropy: u64,
        actions: &mut Vec<Action>,
    ) {
        self.last_exit = Some((status, now));
        let restart = match spec.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => !spec.is_success(status),
            RestartPolicy::Never => false,
        };
        if !restart {
            self.state = State::Exited { status, at: now };
            actions.push(Action::Announce(Announcement::Down {
                status: Some(status),
            }));
        } else {
            let reason = FailReason::Exited { status };
            actions.push(Action::Announce(Announcement::Died {
                reason: reason.clone(),
            }));
            self.after_failure(spec, reason, last_run, now, entropy, actions);
        }
    }

    fn begin_stop(
        &mut self,
        spec: &ServiceSpec,
        pid: Pid,
        now: Instant,
        then: AfterStop,
        actions: &mut Vec<Action>,
    ) {
        let kill_at = now + spec.stop.timeout;
        actions.push(Action::Signal {
            pid,
            signal: spec.stop.signal,
        });
        actions.push(Action::WakeAt(kill_at));
        self.state = State::Stopping {
            pid,
            since: now,
            kill_at: Some(kill_at),
            then,
        };
    }

    /// The process failed: restart it after a backoff, or give up.
    fn after_failure(
        &mut self,
        spec: &ServiceSpec,
        reason: FailReason,
        last_run: LastRun,
        now: Instant,
        entropy: u64,
        actions: &mut Vec<Action>,
    ) {
        if spec.restart == RestartPolicy::Never {
            self.state = State::Failed {
                reason: reason.clone(),
                at: now,
            };
            actions.push(Action::Announce(Announcement::Failed { reason }));
            return;
        }
        if last_run == LastRun::Stable {
            self.streak = 0;
        }
        self.streak = self.streak.saturating_add(1);
        let window_start = now.checked_sub(spec.start_limit.interval);
        while let Some(first) = self.restarts_in_window.front() {
            if window_start.is_some_and(|start| *first <= start) {
                self.restarts_in_window.pop_front();
            } else {
                break;
            }
        }
        if self.restarts_in_window.len() >= spec.start_limit.burst as usize {
            let reason = FailReason::StartLimitHit;
            self.state = State::Failed {
                reason: reason.clone(),
                at: now,
            };
            actions.push(Action::Announce(Announcement::Failed { reason }));
            return;
        }
        let mut until = now + spec.backoff.delay(self.streak, entropy);
        // The first failure of a streak (the first ever, or the first after a stable run) is
        // restarted at once, however soon after its spawn: what waits in the service's
        // sockets waits for it. The floor between spawns holds from the second failure on,
        // so a crash loop still never becomes a restart storm.
        if self.streak > 1 {
            if let Some(last) = self.last_spawn {
                until = until.max(last + spec.backoff.floor());
            }
        }
        self.state = State::Backoff { until };
        if until <= now {
            self.pending_restart = true;
            actions.push(Action::Spawn);
        } else {
            actions.push(Action::WakeAt(until));
        }
    }
}

/// A service's machine as one process image hands it to the next (`crate::handover`): its
/// state and history with every instant turned into an age, since an `Instant` means nothing
/// outside the process that took it. Only settled states can be handed over; a process that
/// is starting, stopping, draining or killed waits for its outcome in the image that asked
/// for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MachineImage {
    pub state: StateImage,
    pub streak: u32,
    /// Ages of the automatic restarts within the start-limit window.
    pub restarts_in_window: Vec<Duration>,
    pub last_spawn: Option<Duration>,
    pub restarts: u32,
    pub last_exit: Option<(ExitStatus, Duration)>,
    pub pending_restart: bool,
}

/// A settled [`State`], its instants as ages (for `Backoff`, the time left).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateImage {
    Idle,
    Running {
        pid: i32,
        since: Duration,
        ready_at: Duration,
    },
    Backoff {
        left: Duration,
    },
    Exited {
        status: ExitStatus,
        at: Duration,
    },
    Failed {
        reason: FailReason,
        at: Duration,
    },
}

impl ServiceMachine {
    /// The machine as of `now`, or `None` while its process is starting, being stopped,
    /// drained or killed, or while the service is to be forgotten once down.
    pub fn image(&self, now: Instant) -> Option<MachineImage> {
        if self.registration == Registration::UntilDown {
            return None;
        }
        let age = |t: Instant| now.saturating_duration_since(t);
        let state = match &self.state {
            State::Idle => StateImage::Idle,
            State::Running {
                pid,
                since,
                ready_at,
            } => StateImage::Running {
                pid: pid.as_raw(),
                since: age(*since),
                ready_at: age(*ready_at),
            },
            State::Backoff { until } => StateImage::Backoff {
                left: until.saturating_duration_since(now),
            },
            State::Exited { status, at } => StateImage::Exited {
                status: *status,
                at: age(*at),
            },
            State::Failed { reason, at } => StateImage::Failed {
                reason: reason.clone(),
                at: age(*at),
            },
            State::Starting { .. }
            | State::Stopping { .. }
            | State::Draining { .. }
            | State::Killed { .. } => return None,
        };
        Some(MachineImage {
            state,
            streak: self.streak,
            restarts_in_window: self.restarts_in_window.iter().map(|t| age(*t)).collect(),
            last_spawn: self.last_spawn.map(age),
            restarts: self.restarts,
            last_exit: self.last_exit.map(|(s, t)| (s, age(t))),
            pending_restart: self.pending_restart,
        })
    }

    /// The machine an image describes, its ages counted back from `now`.
    pub fn from_image(image: MachineImage, now: Instant) -> ServiceMachine {
        let ago = |d: Duration| now.checked_sub(d).unwrap_or(now);
        let state = match image.state {
            StateImage::Idle => State::Idle,
            StateImage::Running {
                pid,
                since,
                ready_at,
            } => State::Running {
                pid: Pid::from_raw(pid),
                since: ago(since),
                ready_at: ago(ready_at),
            },
            StateImage::Backoff { left } => State::Backoff { until: now + left },
            StateImage::Exited { status, at } => State::Exited {
                status,
                at: ago(at),
            },
            StateImage::Failed { reason, at } => State::Failed {
                reason,
                at: ago(at),
            },
        };
        ServiceMachine {
            state,
            registration: Registration::Kept,
            streak: image.streak,
            restarts_in_window: image.restarts_in_window.into_iter().map(ago).collect(),
            last_spawn: image.last_spawn.map(ago),
            restarts: image.restarts,
            last_exit: image.last_exit.map(|(s, d)| (s, ago(d))),
            pending_restart: image.pending_restart,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backoff::Backoff;
    use crate::spec::StartLimit;

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

    #[test]
    fn transitions_table() {
        use Event as E;
        let code = |c| ExitStatus::Code(c);
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
                state: |h| State::Backoff { until: h.at(3001) },
            },
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
                state: |h| State::Backoff { until: h.at(100) },
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
                state: |h| State::Backoff { until: h.at(30) },
            },
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
                state: |h| State::Backoff { until: h.at(600) },
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
                state: |h| State::Backoff { until: h.at(3200) },
            },
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
                state: |h| State::Backoff { until: h.at(5700) },
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
                state: |h| State::Backoff { until: h.at(600) },
            },
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
                state: |h| State::Backoff { until: h.at(9000) },
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

    #[test]
    fn kill_remove_and_run_table() {
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
                state: |h| State::Backoff { until: h.at(110) },
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
            Row {
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
            },
        ]);
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
                State::Backoff { until } => {
                    delays.push(until.duration_since(h.at(t)).as_millis() as u64)
                }
                other => panic!("expected backoff, got {other:?}"),
            }
            let until = match h.m.state() {
                State::Backoff { until } => *until,
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
        assert_eq!(*h.m.state(), State::Backoff { until: h.at(100) });
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
        assert_eq!(*h.m.state(), State::Backoff { until: h.at(1000) });
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
        assert_eq!(*h.m.state(), State::Backoff { until: h.at(7000) });
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
        let State::Backoff { until } = *h.m.state() else {
            panic!("backoff expected: {:?}", h.m.state());
        };
        let image = h.m.image(h.at(5000)).expect("a settled state");
        let later = h.at(60_000);
        let m = ServiceMachine::from_image(image.clone(), later);
        assert_eq!(
            *m.state(),
            State::Backoff {
                until: later + (until - h.at(5000))
            }
        );
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
}
