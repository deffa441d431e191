//! What the actor tells the world: announcements to the callers waiting on a service, the
//! snapshot readers see, and the steering of the reuseport groups.

use std::sync::Arc;

use crate::call::Answer;
use crate::machine::{Announcement, FailReason};
use crate::snapshot::Snapshot;

use super::{Service, Supervisor};
use crate::call::SupervisorError;

impl Supervisor {
    pub(super) fn announce(&mut self, name: &str, announcement: Announcement) {
        let Some(svc) = self.services.get_mut(name) else {
            return;
        };
        match announcement {
            Announcement::Ready { pid } => {
                tracing::info!(name, pid = pid.as_raw(), "ready");
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Ok(Answer::Pid(pid.as_raw())));
                }
            }
            Announcement::Died { reason } => {
                tracing::warn!(name, %reason, "process died");
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Err(SupervisorError::StartFailed {
                        name: name.to_owned(),
                        reason: reason.clone(),
                    }));
                }
            }
            Announcement::Failed { reason } => {
                tracing::error!(name, %reason, "service failed");
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Err(SupervisorError::StartFailed {
                        name: name.to_owned(),
                        reason: reason.clone(),
                    }));
                }
                for w in svc.down_waiters.drain(..) {
                    let _ = w.send(Ok(Answer::Down(svc.machine.last_exit().map(|(s, _)| s))));
                }
                if let Some(w) = svc.run_waiter.take() {
                    let result = match svc.machine.last_exit() {
                        Some((status, _)) if !matches!(reason, FailReason::SpawnFailed { .. }) => {
                            Ok(Answer::Exited(status))
                        }
                        _ => Err(SupervisorError::StartFailed {
                            name: name.to_owned(),
                            reason,
                        }),
                    };
                    let _ = w.send(result);
                }
            }
            Announcement::Down { status } => {
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Err(SupervisorError::StoppedWhileStarting {
                        name: name.to_owned(),
                    }));
                }
                for w in svc.down_waiters.drain(..) {
                    let _ = w.send(Ok(Answer::Down(status)));
                }
                if let Some(w) = svc.run_waiter.take() {
                    let _ = w.send(status.map(Answer::Exited).ok_or(
                        SupervisorError::StoppedWhileStarting {
                            name: name.to_owned(),
                        },
                    ));
                }
            }
        }
    }

    pub(super) fn publish(&mut self) {
        let processes = self
            .services
            .iter()
            .map(|(name, svc)| {
                let mut p = svc.snapshot(name);
                p.takes_queries = svc
                    .spec
                    .reuseport_index
                    .map(|_| svc.takes_queries() && self.steering.is_member(name));
                p
            })
            .collect();
        let snapshot = Arc::new(Snapshot {
            processes,
            shutting_down: self.phase.is_stopping(),
            draining: self.phase.draining(),
        });
        self.snapshot_tx.send_if_modified(|old| {
            if **old == *snapshot {
                false
            } else {
                *old = snapshot;
                true
            }
        });
    }

    /// Point every reuseport group at the services that take queries now.
    pub(super) fn steer(&mut self) {
        let services = &self.services;
        self.steering
            .update(|n| services.get(n).is_some_and(Service::takes_queries));
    }
}
