//! The steps of a service's machine, one per kind of event, and the policy they share:
//! readiness, stops and their escalation, drains, restarts under backoff and the start limit.

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::{
    Action, AfterStop, Announcement, Drain, FailReason, LastRun, Request, Retry, ServiceMachine,
    State, Step, DRAIN_LIMIT, DRAIN_POLL,
};
use crate::spec::{ExitStatus, Readiness, RestartPolicy};

/// The steps, one per event.
impl ServiceMachine {
    /// Start on request. A failed service is given a clean slate.
    pub(super) fn start_requested(&mut self, step: &mut Step<'_>) {
        match self.state {
            State::Idle | State::Exited { .. } | State::Backoff { .. } | State::Failed { .. } => {
                self.spawn_on_request(step)
            }
            State::Starting { .. } | State::Running { .. } | State::Killed { .. } => {}
            State::Stopping { .. } => self.stop_then(AfterStop::Start),
            // Being drained for a stop: it comes back afterwards, as a stopping process would.
            State::Draining { .. } => self.drain_then(Request::Restart),
        }
    }

    /// Stop on request (the service stays down). A steered, ready process whose share others
    /// can take is steered away from before it stops; while draining, the latest request
    /// decides what follows, and a stop that cannot wait overtakes the drain.
    pub(super) fn stop_requested(&mut self, drain: Drain, step: &mut Step<'_>) {
        if self.stop_live(Request::Stop, drain, step) {
            return;
        }
        if matches!(self.state, State::Backoff { .. }) {
            self.state = State::Idle;
        }
        step.announce(Announcement::Down { status: None });
    }

    /// Stop, then start again, on request; draining first as a stop does. With no process
    /// live, it starts at once.
    pub(super) fn restart_requested(&mut self, drain: Drain, step: &mut Step<'_>) {
        if !self.stop_live(Request::Restart, drain, step) {
            self.spawn_on_request(step);
        }
    }

    /// What a stop and a restart do to a live process: steer away from it first (steered,
    /// ready, `Drain::First`), or let the latest request decide what follows the drain or the
    /// stop under way, or stop it now. False when no process is live.
    fn stop_live(&mut self, request: Request, drain: Drain, step: &mut Step<'_>) -> bool {
        let steered = step.spec.reuseport_index.is_some();
        match (&self.state, drain) {
            (State::Running { .. }, Drain::First) if steered => self.withdraw(request, step),
            (State::Draining { .. }, Drain::First) => self.drain_then(request),
            (
                State::Starting { pid, .. }
                | State::Running { pid, .. }
                | State::Killed { pid, .. }
                | State::Draining { pid, .. },
                _,
            ) => {
                let pid = *pid;
                self.begin_stop(pid, request.after(), step);
            }
            (State::Stopping { .. }, _) => self.stop_then(request.after()),
            (
                State::Idle | State::Backoff { .. } | State::Exited { .. } | State::Failed { .. },
                _,
            ) => return false,
        }
        true
    }

    /// SIGKILL the process now: it stopped answering, or everything must end at once.
    pub(super) fn kill_requested(&mut self, step: &mut Step<'_>) {
        match self.state {
            State::Starting { .. } | State::Running { .. } => self.kill(step),
            State::Killed { pid, .. } | State::Draining { pid, .. } => step.push(kill_signal(pid)),
            State::Stopping { pid, .. } => self.escalate(pid, step),
            State::Idle | State::Backoff { .. } | State::Exited { .. } | State::Failed { .. } => {}
        }
    }

    /// A process was spawned; one that is already live makes it nothing new.
    pub(super) fn on_spawned(&mut self, pid: Pid, step: &mut Step<'_>) {
        if matches!(
            self.state,
            State::Idle | State::Exited { .. } | State::Backoff { .. } | State::Failed { .. }
        ) {
            self.spawned(pid, step);
        }
    }

    /// The spawn failed. A failed spawn of an automatic restart is still a restart attempt:
    /// it counts as a spawn does, or a program that cannot be executed would be retried
    /// forever instead of hitting the start limit.
    pub(super) fn spawn_failed(&mut self, error: String, step: &mut Step<'_>) {
        self.count_restart(step);
        let reason = FailReason::SpawnFailed { error };
        step.announce(Announcement::Died {
            reason: reason.clone(),
        });
        self.after_failure(reason, LastRun::Unstable, step);
    }

    /// `READY=1` from `sender`: the starting process is running. Killed while starting and
    /// ready before its death was reaped, it is ready, and still takes no queries.
    pub(super) fn ready_received(&mut self, sender: Pid, step: &mut Step<'_>) {
        let now = step.now;
        match self.state {
            State::Starting { pid, since, .. } if pid == sender => {
                self.state = State::Running {
                    pid,
                    since,
                    ready_at: now,
                };
                step.announce(Announcement::Ready { pid });
            }
            State::Killed {
                pid,
                since,
                ready_at: None,
            } if pid == sender => {
                self.state = State::Killed {
                    pid,
                    since,
                    ready_at: Some(now),
                };
                step.announce(Announcement::Ready { pid });
            }
            _ => {}
        }
    }

    /// The process `dead` ended with `status`. A death during a drain ends the drain as it
    /// would have ended the stop that followed; an exit of a process we no longer track
    /// (already handled) changes nothing.
    pub(super) fn exited(&mut self, dead: Pid, status: ExitStatus, step: &mut Step<'_>) {
        match &self.state {
            State::Stopping { pid, then, .. } if *pid == dead => {
                let then = then.clone();
                self.stopped(then, status, step);
            }
            State::Draining { pid, then, .. } if *pid == dead => {
                let then = then.after();
                self.stopped(then, status, step);
            }
            State::Starting { pid, .. }
            | State::Running { pid, .. }
            | State::Killed { pid, .. }
                if *pid == dead =>
            {
                self.died(status, step);
            }
            _ => {}
        }
    }

    /// What waits in a draining process's sockets: it is looked at again every
    /// [`DRAIN_POLL`] while anything waits, until the drain's deadline; then it is stopped.
    pub(super) fn queues_read(&mut self, queued: u64, step: &mut Step<'_>) {
        let State::Draining {
            pid,
            deadline,
            then,
            ref mut polls,
            ..
        } = self.state
        else {
            return;
        };
        if queued > 0 && step.now < deadline {
            *polls += 1;
            step.push(Action::WakeAt(step.now + DRAIN_POLL));
        } else {
            self.begin_stop(pid, then.after(), step);
        }
    }

    /// Time has passed: the deadlines that are due are acted on. Like supervisord and
    /// systemd, a process that missed its readiness deadline is killed outright, then the
    /// restart policy applies.
    pub(super) fn ticked(&mut self, step: &mut Step<'_>) {
        let now = step.now;
        match self.state {
            State::Starting { pid, deadline, .. } if now >= deadline => {
                step.push(kill_signal(pid));
                self.state = State::Stopping {
                    pid,
                    since: now,
                    kill_at: None,
                    then: AfterStop::Failure(FailReason::ReadinessTimeout),
                };
            }
            State::Stopping {
                pid,
                kill_at: Some(at),
                ..
            } if now >= at => self.escalate(pid, step),
            State::Backoff { until, .. } if now >= until => {
                self.state = State::Backoff {
                    until,
                    retry: Retry::Spawning,
                };
                step.push(Action::Spawn);
            }
            State::Draining { .. } => step.push(Action::ReadQueues),
            _ => {}
        }
    }
}

/// The policy the steps share.
impl ServiceMachine {
    /// Spawn on a caller's request: not a restart, so it does not count against the start
    /// limit; a failed service starts with a clean slate.
    fn spawn_on_request(&mut self, step: &mut Step<'_>) {
        match self.state {
            State::Failed { .. } => {
                self.streak = 0;
                self.restarts_in_window.clear();
            }
            State::Backoff { until, .. } => {
                self.state = State::Backoff {
                    until,
                    retry: Retry::Waiting,
                };
            }
            _ => {}
        }
        step.push(Action::Spawn);
    }

    /// A process was spawned: it is starting, or running at once without readiness.
    fn spawned(&mut self, pid: Pid, step: &mut Step<'_>) {
        let now = step.now;
        self.last_spawn = Some(now);
        self.count_restart(step);
        match step.spec.readiness {
            Readiness::None => {
                self.state = State::Running {
                    pid,
                    since: now,
                    ready_at: now,
                };
                step.announce(Announcement::Ready { pid });
            }
            Readiness::Notify { timeout } => {
                let deadline = now + timeout;
                self.state = State::Starting {
                    pid,
                    since: now,
                    deadline,
                };
                step.push(Action::WakeAt(deadline));
            }
        }
    }

    /// Count the spawn just made or failed against the start limit if it was an automatic
    /// restart's.
    fn count_restart(&mut self, step: &Step<'_>) {
        if let State::Backoff {
            retry: Retry::Spawning,
            ..
        } = self.state
        {
            self.restarts += 1;
            self.restarts_in_window.push_back(step.now);
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

    /// Steer away from the running process before `request` is carried out; its queues are
    /// looked at every [`DRAIN_POLL`].
    fn withdraw(&mut self, request: Request, step: &mut Step<'_>) {
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
                deadline: step.now + DRAIN_LIMIT,
                then: request,
                polls: 0,
            };
            step.push(Action::WakeAt(step.now + DRAIN_POLL));
        }
    }

    /// SIGKILL a starting or running process on request; it is `Killed` until its death is
    /// reaped.
    fn kill(&mut self, step: &mut Step<'_>) {
        let (pid, since, ready_at) = match self.state {
            State::Starting { pid, since, .. } => (pid, since, None),
            State::Running {
                pid,
                since,
                ready_at,
            } => (pid, since, Some(ready_at)),
            _ => return,
        };
        step.push(kill_signal(pid));
        self.state = State::Killed {
            pid,
            since,
            ready_at,
        };
    }

    /// SIGKILL a stopping process now: no more waiting for it to end on its own.
    fn escalate(&mut self, pid: Pid, step: &mut Step<'_>) {
        step.push(kill_signal(pid));
        if let State::Stopping { kill_at, .. } = &mut self.state {
            *kill_at = None;
        }
    }

    /// Send the stop signal to `pid`, SIGKILL at the stop timeout; `then` follows its end.
    fn begin_stop(&mut self, pid: Pid, then: AfterStop, step: &mut Step<'_>) {
        let kill_at = step.now + step.spec.stop.timeout;
        step.push(Action::Signal {
            pid,
            signal: step.spec.stop.signal,
        });
        step.push(Action::WakeAt(kill_at));
        self.state = State::Stopping {
            pid,
            since: step.now,
            kill_at: Some(kill_at),
            then,
        };
    }

    /// A process that was being stopped ended with `status`: carry out what was to follow.
    fn stopped(&mut self, then: AfterStop, status: ExitStatus, step: &mut Step<'_>) {
        self.last_exit = Some((status, step.now));
        match then {
            AfterStop::Idle => {
                self.state = State::Idle;
                step.announce(Announcement::Down {
                    status: Some(status),
                });
            }
            AfterStop::Start => {
                self.state = State::Idle;
                step.push(Action::Spawn);
            }
            AfterStop::Failure(reason) => {
                step.announce(Announcement::Died {
                    reason: reason.clone(),
                });
                self.after_failure(reason, LastRun::Unstable, step);
            }
        }
    }

    /// How the live process has run, as of now.
    fn last_run(&self, step: &Step<'_>) -> LastRun {
        let ready_at = match self.state {
            State::Running { ready_at, .. } => Some(ready_at),
            State::Killed { ready_at, .. } => ready_at,
            _ => None,
        };
        match ready_at {
            Some(at) if step.now.duration_since(at) >= step.spec.backoff.stable_after() => {
                LastRun::Stable
            }
            _ => LastRun::Unstable,
        }
    }

    /// A process nobody was stopping ended with `status`: it stays down, or its restart
    /// policy applies.
    fn died(&mut self, status: ExitStatus, step: &mut Step<'_>) {
        let last_run = self.last_run(step);
        self.last_exit = Some((status, step.now));
        let restart = match step.spec.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => !step.spec.is_success(status),
            RestartPolicy::Never => false,
        };
        if !restart {
            self.state = State::Exited {
                status,
                at: step.now,
            };
            step.announce(Announcement::Down {
                status: Some(status),
            });
        } else {
            let reason = FailReason::Exited { status };
            step.announce(Announcement::Died {
                reason: reason.clone(),
            });
            self.after_failure(reason, last_run, step);
        }
    }

    /// The process failed: restart it after a backoff, or give up.
    fn after_failure(&mut self, reason: FailReason, last_run: LastRun, step: &mut Step<'_>) {
        if step.spec.restart == RestartPolicy::Never {
            return self.give_up(reason, step);
        }
        if last_run == LastRun::Stable {
            self.streak = 0;
        }
        self.streak = self.streak.saturating_add(1);
        if self.start_limit_hit(step) {
            return self.give_up(FailReason::StartLimitHit, step);
        }
        let now = step.now;
        let mut until = now + step.spec.backoff.delay(self.streak, step.entropy);
        // The first failure of a streak (the first ever, or the first after a stable run) is
        // restarted at once, however soon after its spawn: what waits in the service's
        // sockets waits for it. The floor between spawns holds from the second failure on,
        // so a crash loop still never becomes a restart storm.
        if self.streak > 1 {
            if let Some(last) = self.last_spawn {
                until = until.max(last + step.spec.backoff.floor());
            }
        }
        if until <= now {
            self.state = State::Backoff {
                until,
                retry: Retry::Spawning,
            };
            step.push(Action::Spawn);
        } else {
            self.state = State::Backoff {
                until,
                retry: Retry::Waiting,
            };
            step.push(Action::WakeAt(until));
        }
    }

    /// Whether the automatic restarts within the start-limit window (those older leave it
    /// now) reached the limit's burst.
    fn start_limit_hit(&mut self, step: &Step<'_>) -> bool {
        let window_start = step.now.checked_sub(step.spec.start_limit.interval);
        while let Some(first) = self.restarts_in_window.front() {
            if window_start.is_some_and(|start| *first <= start) {
                self.restarts_in_window.pop_front();
            } else {
                break;
            }
        }
        self.restarts_in_window.len() >= step.spec.start_limit.burst as usize
    }

    /// The service failed for good: only an explicit start brings it back.
    fn give_up(&mut self, reason: FailReason, step: &mut Step<'_>) {
        self.state = State::Failed {
            reason: reason.clone(),
            at: step.now,
        };
        step.announce(Announcement::Failed { reason });
    }
}

/// SIGKILL to the process group led by `pid`.
fn kill_signal(pid: Pid) -> Action {
    Action::Signal {
        pid,
        signal: Signal::SIGKILL,
    }
}
