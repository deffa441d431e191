//! The process table handed from one actor to the next: given up ([`Supervisor::hand_over`])
//! and adopted ([`Supervisor::adopt`]), every child as it runs.

use std::cmp::Reverse;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use nix::unistd::Pid;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::handover::{self, Handover, ServiceImage, SupervisorImage};
use crate::machine::{ServiceMachine, State};
use crate::notify::NotifySocket;
use crate::os::{self, FdPass};
use crate::output;

use super::{ActorTask, Phase, Service, Supervisor, SupervisorHandle};
use crate::call::SupervisorError;

impl Supervisor {
    /// Take over the process table `handover` describes, from an earlier image of this process
    /// (after `execve`, through [`Handover::claim`]) or from an actor of this one whose
    /// handover was not used: every child is adopted as it runs, none is restarted. Children
    /// that exited meanwhile are reaped at once and their restart policy applies.
    /// `line_levels` is the level of each line the children write, as
    /// [`SupervisorOptions::line_levels`].
    pub fn adopt(
        handover: Handover,
        line_levels: output::LineLevels,
    ) -> io::Result<(SupervisorHandle, ActorTask)> {
        os::become_subreaper()?;
        let (image, mut fds) = handover.into_parts();
        let mut take = |fd: RawFd| {
            fds.remove(&fd)
                .ok_or_else(|| io::Error::other(format!("descriptor {fd} was not handed over")))
        };
        let notify = NotifySocket::from_fd(take(image.notify_fd)?, image.notify_socket)?;
        let (mut sup, handle) = Supervisor::new(notify, line_levels)?;
        if image.draining {
            sup.phase = Phase::Draining;
        }
        let now = Instant::now();
        for service in image.services {
            let mut owned = Vec::with_capacity(service.fds.len());
            for &(ours, _) in &service.fds {
                owned.push(take(ours)?);
            }
            let output = match service.output {
                Some((out, err)) => Some((take(out)?, take(err)?)),
                None => None,
            };
            let machine = ServiceMachine::from_image(service.machine, now);
            if let State::Backoff { until, .. } = machine.state() {
                sup.timers.push(Reverse(*until));
            }
            let name = service.spec.name.clone();
            let fds = service
                .fds
                .iter()
                .map(|&(ours, child)| FdPass { ours, child })
                .collect();
            let mut svc = Service::new(service.spec, fds, owned);
            svc.machine = machine;
            svc.since_wall = handover::wall_from_image(service.since_wall);
            svc.ready_wall = handover::wall_from_image(service.ready_wall);
            svc.status_text = service.status_text;
            svc.kill_reason = service
                .kill_reason
                .map(|(pid, reason)| (Pid::from_raw(pid), reason));
            if let Some(index) = svc.spec.reuseport_index {
                let handed: Vec<RawFd> = svc.fds.iter().map(|p| p.ours).collect();
                sup.steering.join(&name, index, &handed);
            }
            sup.services.insert(name.clone(), svc);
            if let (Some(pid), Some((out, err))) = (sup.services[&name].machine.pid(), output) {
                sup.drain_output(&name, pid, out, err);
            }
        }
        // Whatever exited while nobody watched is a zombie waiting for us.
        sup.reap();
        sup.steer();
        sup.publish();
        Ok((handle, AbortOnDropHandle::new(tokio::spawn(sup.run()))))
    }

    /// Give up the table (see [`SupervisorHandle::hand_over`]); the actor ends after this pass.
    pub(super) fn hand_over(&mut self) -> Result<Handover, SupervisorError> {
        let draining = match self.phase {
            Phase::Serving => false,
            Phase::Draining => true,
            Phase::Stopping(_) | Phase::HandedOver => return Err(SupervisorError::ShuttingDown),
        };
        if !self.lingering_groups.is_empty() {
            return Err(SupervisorError::Busy(
                "process groups are still emptying".into(),
            ));
        }
        let now = Instant::now();
        let mut images = Vec::with_capacity(self.services.len());
        for (name, svc) in &self.services {
            let waited_on = !svc.ready_waiters.is_empty()
                || !svc.down_waiters.is_empty()
                || svc.run_waiter.is_some();
            let machine = svc.machine.image(now).filter(|_| !waited_on);
            let Some(machine) = machine else {
                return Err(SupervisorError::Busy(format!(
                    "{name} is starting or stopping"
                )));
            };
            if svc.fds.len() != svc.owned.len() {
                return Err(SupervisorError::Refused(format!(
                    "{name} holds descriptors the supervisor does not own"
                )));
            }
            images.push(ServiceImage {
                spec: svc.spec.clone(),
                machine,
                fds: svc.fds.iter().map(|p| (p.ours, p.child)).collect(),
                output: None,
                since_wall: handover::wall_to_image(svc.since_wall),
                ready_wall: handover::wall_to_image(svc.ready_wall),
                status_text: svc.status_text.clone(),
                kill_reason: svc
                    .kill_reason
                    .as_ref()
                    .map(|(pid, reason)| (pid.as_raw(), reason.clone())),
            });
        }
        let notify = self
            .notify
            .hand_over()
            .map_err(|e| SupervisorError::Refused(format!("notify socket: {e}")))?;
        let mut fds = vec![];
        let notify_fd = notify.as_raw_fd();
        fds.push(notify);
        for (image, svc) in images.iter_mut().zip(self.services.values_mut()) {
            fds.append(&mut svc.owned);
            if svc.machine.pid().is_some() {
                if let Some((out, err)) = svc.output.take() {
                    image.output = Some((out.as_raw_fd(), err.as_raw_fd()));
                    fds.push(out);
                    fds.push(err);
                }
            }
        }
        // From here on the next image reads the pipes; ours stop reading.
        self.output_stop.cancel();
        self.services.clear();
        self.phase = Phase::HandedOver;
        Ok(Handover {
            image: SupervisorImage {
                notify_socket: self.notify.path().to_owned(),
                notify_fd,
                draining,
                services: images,
            },
            fds,
        })
    }
}
