//! The callers' side of the actor: each command and call carried out, answered at once or
//! once the outcome it waits for is announced.

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::unistd::Pid;
use tokio::sync::oneshot;

use crate::call::{Answer, Call, Reply};
use crate::machine::{Drain, Event, State};
use crate::os::FdPass;
use crate::spec::ServiceSpec;
use crate::text;

use super::{Notice, Phase, Service, ShutdownReport, Stopping, Supervisor};
use crate::call::SupervisorError;

impl Supervisor {
    /// Carry out a call, answering it now or once its outcome is known.
    pub(super) fn on_call(&mut self, call: Call, reply: Reply) {
        let answer = match call {
            Call::Add { spec, fds, handed } => self.add(*spec, fds, handed).map(|()| Answer::Done),
            Call::Start { name } => return self.start_service(name, reply),
            Call::Restart { name } => {
                if self.phase.is_stopping() {
                    Err(SupervisorError::ShuttingDown)
                } else {
                    let restart = |drain| Event::RestartRequested { drain };
                    return self.stop_service(name, Outcome::Ready, restart, reply);
                }
            }
            Call::Stop { name } => {
                let stop = |drain| Event::StopRequested { drain };
                return self.stop_service(name, Outcome::Down, stop, reply);
            }
            Call::Remove { name } => {
                let remove = |drain| Event::RemoveRequested { drain };
                return self.stop_service(name, Outcome::Down, remove, reply);
            }
            Call::Run { spec } => return self.run_job(*spec, reply),
            Call::Tail { name } => {
                let forgotten = || {
                    self.forgotten_tails
                        .iter()
                        .rev()
                        .find(|(n, _)| *n == name)
                        .map(|(_, tail)| tail)
                };
                match self
                    .services
                    .get(&name)
                    .map(|svc| &svc.tail)
                    .or_else(forgotten)
                {
                    Some(tail) => Ok(Answer::Tail(
                        tail.lock()
                            .map(|t| t.iter().cloned().collect())
                            .unwrap_or_default(),
                    )),
                    None => Err(SupervisorError::UnknownService(name)),
                }
            }
            Call::Kill { name, reason } => self.kill(name, &reason).map(|()| Answer::Done),
            // In this process the owner re-executes through `hand_over`; only a directing
            // child asks, over its link.
            Call::Reexec => Err(SupervisorError::Refused(
                "re-executing is asked of the parent of a directing child".into(),
            )),
            Call::Drain => {
                self.announce_drain();
                Ok(Answer::Done)
            }
        };
        let _ = reply.send(answer);
    }

    fn start_service(&mut self, name: String, reply: Reply) {
        if self.phase.is_stopping() {
            let _ = reply.send(Err(SupervisorError::ShuttingDown));
            return;
        }
        let Some(svc) = self.services.get_mut(&name) else {
            let _ = reply.send(Err(SupervisorError::UnknownService(name)));
            return;
        };
        if let Some(pid) = svc.machine.ready_pid() {
            let _ = reply.send(Ok(Answer::Pid(pid.as_raw())));
            return;
        }
        svc.ready_waiters.push(reply);
        self.feed(&name, Event::StartRequested);
    }

    /// Stop, restart or remove `name` as `event` says, the caller waiting for `outcome`.
    fn stop_service(
        &mut self,
        name: String,
        outcome: Outcome,
        event: fn(Drain) -> Event,
        reply: Reply,
    ) {
        let Some(svc) = self.services.get_mut(&name) else {
            let _ = reply.send(Err(SupervisorError::UnknownService(name)));
            return;
        };
        match outcome {
            Outcome::Ready => svc.ready_waiters.push(reply),
            Outcome::Down => svc.down_waiters.push(reply),
        }
        let drain = self.drain_for(&name);
        self.feed(&name, event(drain));
    }

    /// Whether a stop of `name` may drain its queues first: not while everything stops;
    /// otherwise when it is being drained already (its share went to others then), or every
    /// group of its sockets has another member that takes queries.
    fn drain_for(&self, name: &str) -> Drain {
        let services = &self.services;
        let draining = services
            .get(name)
            .is_some_and(|s| matches!(s.machine.state(), State::Draining { .. }));
        let others = || {
            self.steering.others_take_over(name, |n| {
                services.get(n).is_some_and(Service::takes_queries)
            })
        };
        if !self.phase.is_stopping() && (draining || others()) {
            Drain::First
        } else {
            Drain::Skip
        }
    }

    fn run_job(&mut self, spec: ServiceSpec, reply: Reply) {
        if self.phase.is_stopping() {
            let _ = reply.send(Err(SupervisorError::ShuttingDown));
            return;
        }
        let name = spec.name.clone();
        if let Err(e) = self.add(spec, Vec::new(), Vec::new()) {
            let _ = reply.send(Err(e));
            return;
        }
        if let Some(svc) = self.services.get_mut(&name) {
            svc.run_waiter = Some(reply);
        }
        self.feed(&name, Event::RunRequested);
    }

    /// SIGKILL `name`'s process on request, recording why.
    pub(super) fn kill(&mut self, name: String, reason: &str) -> Result<(), SupervisorError> {
        // Cut where it is received: it is kept in every snapshot from now on.
        let reason = text::one_line(reason, text::MAX_STATUS);
        let Some(svc) = self.services.get_mut(&name) else {
            return Err(SupervisorError::UnknownService(name));
        };
        let Some(pid) = svc.machine.pid() else {
            return Err(SupervisorError::NotRunning(name));
        };
        tracing::warn!(name, pid = pid.as_raw(), reason, "killing");
        svc.kill_reason = Some((pid, reason));
        self.feed(&name, Event::KillRequested);
        Ok(())
    }

    /// SIGKILL every live process at once.
    pub(super) fn kill_all(&mut self) {
        let live: Vec<(String, Pid)> = self
            .services
            .iter()
            .filter_map(|(name, svc)| Some((name.clone(), svc.machine.pid()?)))
            .collect();
        for (name, pid) in live {
            tracing::warn!(name, pid = pid.as_raw(), "killing at once");
            self.feed(&name, Event::KillRequested);
        }
    }

    /// Snapshots say `draining` from now on.
    fn announce_drain(&mut self) {
        match &mut self.phase {
            Phase::Serving => self.phase = Phase::Draining,
            Phase::Stopping(stopping) => stopping.notice = Notice::Announced,
            Phase::Draining | Phase::HandedOver => {}
        }
    }

    /// Register a service; `handed`, when not empty, are the descriptors to own, in the order
    /// of `fds` (see [`Call::Add`]).
    pub(super) fn add(
        &mut self,
        spec: ServiceSpec,
        fds: Vec<RawFd>,
        handed: Vec<OwnedFd>,
    ) -> Result<(), SupervisorError> {
        if self.services.contains_key(&spec.name) {
            return Err(SupervisorError::DuplicateService(spec.name));
        }
        let pass: Vec<FdPass> = if handed.is_empty() {
            fds.iter()
                .map(|&fd| FdPass {
                    ours: fd,
                    child: fd,
                })
                .collect()
        } else if handed.len() == fds.len() {
            handed
                .iter()
                .zip(&fds)
                .map(|(ours, &child)| FdPass {
                    ours: ours.as_raw_fd(),
                    child,
                })
                .collect()
        } else {
            return Err(SupervisorError::Refused(
                "descriptor count does not match".into(),
            ));
        };
        let name = spec.name.clone();
        if let Some(index) = spec.reuseport_index {
            let ours: Vec<RawFd> = pass.iter().map(|p| p.ours).collect();
            self.steering.join(&name, index, &ours);
        }
        self.services.insert(name, Service::new(spec, pass, handed));
        Ok(())
    }

    /// Stop everything (`reply` waits for the report), overtaking any drain.
    pub(super) fn shut_down(&mut self, reply: Option<oneshot::Sender<ShutdownReport>>) {
        let notice = match &mut self.phase {
            Phase::Stopping(stopping) => {
                if reply.is_some() {
                    stopping.reply = reply;
                }
                return;
            }
            Phase::Draining => Notice::Announced,
            Phase::Serving | Phase::HandedOver => Notice::Unannounced,
        };
        self.phase = Phase::Stopping(Stopping {
            notice,
            reply,
            killed: BTreeSet::new(),
        });
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            self.feed(&name, Event::StopRequested { drain: Drain::Skip });
        }
    }
}

/// What a caller of a stop waits for.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// The process started again and is ready (a restart).
    Ready,
    /// The process is down (a stop, a removal).
    Down,
}
