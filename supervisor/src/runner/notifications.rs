//! What arrives on the notify socket: a service's notification fed to its machine, and the
//! noise (strangers, malformed datagrams, descriptors) counted and logged at a bounded rate.

use std::os::fd::OwnedFd;

use nix::unistd::Pid;
use tokio::time::Instant;

use super::Supervisor;
use crate::machine::Event;
use crate::notify::{Datagram, Noise, Notification};

impl Supervisor {
    /// Take up to `budget` datagrams that are already queued.
    pub(super) fn drain_notifications(&mut self, budget: usize) {
        for _ in 0..budget {
            match self.notify.try_recv() {
                Ok(Some(datagram)) => self.on_datagram(datagram),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "notify socket read failed");
                    break;
                }
            }
        }
    }

    /// Count `count` of `noise` and log what is due.
    fn noted(&mut self, noise: Noise, count: u64, example: impl FnOnce() -> String) {
        if let Some(line) = self.noise.record(noise, count, example, Instant::now()) {
            tracing::warn!("{line}");
        }
    }

    pub(super) fn on_datagram(&mut self, datagram: Datagram) {
        let received = match datagram {
            Datagram::Received(received) => received,
            Datagram::Refused {
                why,
                sender,
                descriptors,
            } => {
                let sender = sender.map(Pid::as_raw);
                self.dispose(descriptors, sender);
                self.noted(why, 1, || match sender {
                    Some(pid) => format!("pid {pid}: {why}"),
                    None => why.to_string(),
                });
                return;
            }
        };
        let pid = received.pid;
        self.dispose(received.descriptors, Some(pid.as_raw()));
        let Some(name) = self.service_of(pid) else {
            self.noted(Noise::UnknownSender, 1, || {
                format!("pid {}: not one of our services", pid.as_raw())
            });
            return;
        };
        let note = match Notification::parse(&received.payload) {
            Ok(n) => n,
            Err(e) => {
                self.noted(Noise::Malformed, 1, || {
                    format!("{name} (pid {}): {e}", pid.as_raw())
                });
                return;
            }
        };
        if let Some(svc) = self.services.get_mut(&name) {
            if let Some(status) = &note.status {
                svc.status_text = Some(status.clone());
            }
        }
        if note.ready {
            self.feed(&name, Event::ReadyReceived { pid });
        }
        if note.stopping {
            tracing::debug!(name, pid = pid.as_raw(), "child announced STOPPING");
        }
    }

    /// Close descriptors that came with a datagram, off the actor, and count them.
    fn dispose(&mut self, descriptors: Vec<OwnedFd>, sender: Option<i32>) {
        let count = descriptors.len() as u64;
        self.closer.close(descriptors);
        self.noted(Noise::Descriptor, count, || match sender {
            Some(pid) => format!("pid {pid}: sent {count} descriptors"),
            None => format!("{count} descriptors"),
        });
    }

    pub(super) fn service_of(&self, pid: Pid) -> Option<String> {
        self.services
            .iter()
            .find(|(_, s)| s.machine.pid() == Some(pid))
            .map(|(n, _)| n.clone())
    }
}
