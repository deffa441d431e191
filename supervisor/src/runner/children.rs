//! The children's side of the actor: reaping them (the only `waitpid`), their timers, their
//! machines fed with events and the actions those ask for carried out (spawns, signals,
//! output drains).

use std::cmp::Reverse;
use std::ffi::OsString;
use std::os::fd::OwnedFd;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::time::Instant;

use super::{Phase, Supervisor, FORGOTTEN_TAILS, MAX_DRAINED_BEFORE_REAPING};
use crate::machine::{Action, Drain, Event, State};
use crate::os;
use crate::output::{self, Stream};
use crate::spec::Readiness;

impl Supervisor {
    pub(super) fn reap(&mut self) {
        // Attribute any READY=1 sent just before an exit: drain notifications first, but
        // never without end (a child flooding the socket must not hold up reaping).
        self.drain_notifications(MAX_DRAINED_BEFORE_REAPING);
        loop {
            match os::reap_one() {
                Ok(Some((pid, status))) => match self.service_of(pid) {
                    Some(name) => {
                        // Sweep what may remain of its process group (forked helpers). The
                        // members die asynchronously; remember the group until it is empty.
                        let _ = os::signal_group(pid, Signal::SIGKILL);
                        self.lingering_groups.push(pid);
                        tracing::info!(name, pid = pid.as_raw(), %status, "process exited");
                        self.feed(&name, Event::Exited { pid, status });
                    }
                    None => {
                        tracing::info!(pid = pid.as_raw(), %status, "reaped an orphaned process")
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "waitpid failed");
                    break;
                }
            }
        }
        // A group is empty once its last member was reaped: the members are reparented to us
        // (we are a subreaper or PID 1), so their SIGCHLD brings us back here.
        self.lingering_groups
            .retain(|&group| os::group_exists(group));
    }

    pub(super) fn on_timer(&mut self) {
        let now = Instant::now();
        if let Some(line) = self.noise.flush(now) {
            tracing::warn!("{line}");
        }
        while matches!(self.timers.peek(), Some(Reverse(t)) if *t <= now) {
            self.timers.pop();
        }
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            self.feed(&name, Event::Tick);
        }
    }

    /// Feed one event to one service and carry out what its machine asks for.
    pub(super) fn feed(&mut self, name: &str, event: Event) {
        let mut queue = vec![event];
        while let Some(event) = queue.pop() {
            let entropy = self.next_entropy();
            let Some(svc) = self.services.get_mut(name) else {
                return;
            };
            let before = svc.machine.state().clone();
            let queued = match event {
                Event::QueuesRead { queued } => Some(queued),
                _ => None,
            };
            let actions = svc.machine.on(&svc.spec, event, Instant::now(), entropy);
            svc.note_change(&before);
            log_drain(name, &before, svc.machine.state(), queued);
            for action in actions {
                if let Some(next) = self.carry_out(name, action) {
                    queue.push(next);
                }
            }
        }
    }

    /// Carry out one action of `name`'s machine; what it leads to is the next event.
    fn carry_out(&mut self, name: &str, action: Action) -> Option<Event> {
        match action {
            // No restarts once stopping: report the service down instead.
            Action::Spawn if self.phase.is_stopping() => {
                Some(Event::StopRequested { drain: Drain::Skip })
            }
            Action::Spawn => Some(self.spawn(name)),
            Action::Signal { pid, signal } => {
                self.signal(name, pid, signal);
                None
            }
            Action::WakeAt(at) => {
                self.timers.push(Reverse(at));
                None
            }
            Action::ReadQueues => Some(Event::QueuesRead {
                queued: self.steering.queued(name),
            }),
            Action::Announce(a) => {
                self.announce(name, a);
                None
            }
            Action::Forget => {
                if let Some(svc) = self.services.remove(name) {
                    self.forgotten_tails.retain(|(n, _)| n != name);
                    if self.forgotten_tails.len() >= FORGOTTEN_TAILS {
                        self.forgotten_tails.pop_front();
                    }
                    self.forgotten_tails.push_back((name.to_owned(), svc.tail));
                }
                self.steering.leave(name);
                None
            }
        }
    }

    pub(super) fn signal(&mut self, name: &str, pid: Pid, signal: Signal) {
        if let Err(e) = os::signal_group(pid, signal) {
            tracing::warn!(name, pid = pid.as_raw(), error = %e, "cannot signal process group");
        }
        // Like systemd: a stopped process would leave the stop signal pending until the
        // SIGKILL; SIGCONT lets it handle the signal now.
        if signal != Signal::SIGKILL && signal != Signal::SIGCONT {
            let _ = os::signal_group(pid, Signal::SIGCONT);
        }
        if signal == Signal::SIGKILL {
            if let Phase::Stopping(stopping) = &mut self.phase {
                stopping.killed.insert(name.to_owned());
            }
            tracing::warn!(name, pid = pid.as_raw(), "sent SIGKILL");
        }
    }

    pub(super) fn spawn(&mut self, name: &str) -> Event {
        let notify_path = self.notify.path().to_owned();
        let Some(svc) = self.services.get_mut(name) else {
            return Event::SpawnFailed {
                error: "service vanished".into(),
            };
        };
        let mut env = svc.spec.env.clone();
        if matches!(svc.spec.readiness, Readiness::Notify { .. }) {
            env.retain(|(k, _)| k != "NOTIFY_SOCKET");
            env.push((
                OsString::from("NOTIFY_SOCKET"),
                notify_path.into_os_string(),
            ));
        }
        match os::spawn(
            &svc.spec.argv,
            &env,
            svc.spec.cwd.as_deref(),
            &svc.fds,
            svc.spec.user.map(|u| (u, svc.spec.keep)),
            svc.spec.output,
        ) {
            Ok(spawned) => {
                tracing::info!(name, pid = spawned.pid.as_raw(), "process spawned");
                svc.status_text = None;
                if let Ok(mut t) = svc.tail.lock() {
                    t.clear();
                }
                svc.output = None;
                if let Some((stdout, stderr)) = spawned.output {
                    self.drain_output(name, spawned.pid, stdout, stderr);
                }
                Event::Spawned { pid: spawned.pid }
            }
            Err(e) => {
                tracing::error!(name, error = %e, "cannot spawn");
                Event::SpawnFailed {
                    error: e.to_string(),
                }
            }
        }
    }

    /// Log what process `pid` of `name` writes, keeping copies of the pipes for a handover.
    pub(super) fn drain_output(&mut self, name: &str, pid: Pid, stdout: OwnedFd, stderr: OwnedFd) {
        let Some(svc) = self.services.get_mut(name) else {
            return;
        };
        match (stdout.try_clone(), stderr.try_clone()) {
            (Ok(out), Ok(err)) => svc.output = Some((out, err)),
            // Without copies the pipes cannot be handed over; the process would lose its
            // output at an upgrade, not its life.
            _ => tracing::warn!(name, "cannot keep copies of the output pipes"),
        }
        for (fd, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
            let lines = output::Lines {
                name: name.to_owned(),
                pid,
                stream,
                tail: svc.tail.clone(),
                levels: self.line_levels,
            };
            self.output_tasks
                .spawn(output::drain(fd, lines, self.output_stop.clone()));
        }
    }
}

/// Say what became of a drain: begun, still waiting for the queues, or over.
fn log_drain(name: &str, before: &State, after: &State, queued: Option<u64>) {
    match (before, after, queued) {
        (State::Running { .. }, State::Draining { .. }, _) => {
            tracing::debug!(
                name,
                "steered away from; draining its queues before it stops"
            );
        }
        (State::Draining { polls: 0, .. }, State::Draining { .. }, Some(queued)) => {
            tracing::debug!(name, queued, "queues not empty yet; waiting");
        }
        (State::Draining { .. }, State::Draining { .. }, _) | (_, _, None) => {}
        (State::Draining { .. }, _, Some(queued)) if queued > 0 => {
            tracing::debug!(name, queued, "queues not drained in time; stopping anyway");
        }
        (State::Draining { polls, .. }, _, Some(_)) => {
            tracing::debug!(name, polls = polls + 1, "queues drained; stopping");
        }
        (_, _, Some(_)) => {}
    }
}
