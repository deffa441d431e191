//! The in-place upgrade as the root carries it out (`daemon::upgrade` has the image and the
//! `execve`): probe the new binary beside the serve loop, stop the manager process, let the
//! process table settle, hand it over and re-execute; take everything back when that fails.
//! And the record of how an upgrade ended, for every manager incarnation to come.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use supervisor::{Readiness, RestartPolicy, ServiceSpec, Supervisor, SupervisorHandle};
use tokio::time::Instant;

use super::super::upgrade;
use super::lock::RundirLock;
use super::start::Adopted;
use super::{keep_in, Root, Started};
use crate::service::{self, ServiceKind};

/// Why the new binary's probe refused the upgrade.
#[derive(Debug, thiserror::Error)]
pub(super) enum ProbeError {
    #[error(
        "{} cannot adopt the running processes ({} {}: {status})",
        exe.display(),
        upgrade::PROBE_FLAG,
        upgrade::STATE_FORMAT
    )]
    Refused {
        exe: PathBuf,
        status: supervisor::ExitStatus,
    },
    #[error("{}: {source}", exe.display())]
    Run {
        exe: PathBuf,
        #[source]
        source: supervisor::SupervisorError,
    },
    #[error("{} did not answer its probe within {secs} s", exe.display())]
    Silent { exe: PathBuf, secs: u64 },
}

/// Why an upgrade whose probe passed failed; this image serves on.
#[derive(Debug, thiserror::Error)]
pub(super) enum UpgradeError {
    #[error("the supervisor is gone")]
    SupervisorGone,
    #[error("the processes did not settle: {0}")]
    NotSettled(String),
    #[error("cannot hand the process table over: {0}")]
    HandOver(#[source] supervisor::SupervisorError),
    #[error("cannot execute {}: {source}", exe.display())]
    Exec {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Root {
    /// Ask the binary at our path whether it can adopt what we would hand it; its exit
    /// status says (a missing, broken or older binary fails here, before anything stops).
    pub(super) async fn probe(&self, sup: &SupervisorHandle) -> Result<(), ProbeError> {
        let argv = vec![
            self.exe.clone().into_os_string(),
            OsString::from(upgrade::PROBE_FLAG),
            OsString::from(upgrade::STATE_FORMAT.to_string()),
        ];
        let mut spec = ServiceSpec::new(
            service::UPGRADE_PROBE,
            ServiceKind::UpgradeProbe.as_str(),
            argv,
        );
        spec.env = crate::manager::specs::child_base_env(&self.env);
        spec.readiness = Readiness::None;
        spec.restart = RestartPolicy::Never;
        let exe = self.exe.clone();
        match tokio::time::timeout(self.probe_timeout, sup.run(spec)).await {
            Ok(Ok(supervisor::ExitStatus::Code(0))) => Ok(()),
            Ok(Ok(status)) => Err(ProbeError::Refused { exe, status }),
            Ok(Err(source)) => Err(ProbeError::Run { exe, source }),
            Err(_) => {
                let _ = sup.remove(service::UPGRADE_PROBE).await;
                Err(ProbeError::Silent {
                    exe,
                    secs: self.probe_timeout.as_secs(),
                })
            }
        }
    }

    /// Carry out an upgrade whose probe passed, the manager process stopped: hand the process
    /// table over, and re-execute. Returns only when that fails, why, with everything taken
    /// back and supervised again.
    pub(super) async fn upgrade(&self, started: &mut Started) -> UpgradeError {
        started.upward.reloading(&format!(
            "Upgrading in place: re-executing {}",
            self.exe.display()
        ));
        let handover = match settle_and_hand_over(&started.sup).await {
            Ok(h) => h,
            Err(e) => return e,
        };
        let _ = (&mut started.sup_task).await;
        let image = self.pass_on(started, handover);
        tracing::info!(exe = %self.exe.display(), "re-executing");
        let error = UpgradeError::Exec {
            exe: self.exe.clone(),
            source: upgrade::exec(&self.exe, &image, started.own_binary.as_ref(), &self.env),
        };
        // Still this image: take everything back.
        match Adopted::take(&image) {
            Ok(adopted) => {
                match Supervisor::adopt(adopted.handover, crate::daemon::logging::child_line_level)
                {
                    Ok((sup, task)) => {
                        started.sup = sup;
                        started.sup_task = task;
                        started.store = adopted.store;
                        started.lock = adopted.lock;
                    }
                    Err(e) => tracing::error!("cannot supervise the processes again: {e}"),
                }
            }
            Err(e) => tracing::error!("cannot take the processes back: {e}"),
        }
        error
    }

    /// The image of this process for the next one, every descriptor it names left open.
    /// On failure, the image of what was passed on so far (to take back) and why.
    pub(super) fn pass_on(
        &self,
        started: &mut Started,
        handover: supervisor::handover::Handover,
    ) -> upgrade::RootImage {
        upgrade::RootImage {
            format: upgrade::STATE_FORMAT,
            version: crate::build_version(),
            exe: self.exe.clone(),
            argv: self.argv.clone(),
            rundir: self.rundir.clone(),
            manager_cwd: self.manager_cwd.clone(),
            api_socket: started.api_socket.clone(),
            log_level: self.log.0,
            log_target: self.log.1,
            lock_fd: started
                .lock
                .take()
                .and_then(RundirLock::into_fd)
                .map(upgrade::pass_on),
            store: std::mem::take(&mut started.store)
                .into_entries()
                .into_iter()
                .map(|(name, fd)| (name, upgrade::pass_on(fd)))
                .collect(),
            supervisor: handover.release(),
            incarnations: started.incarnations,
            generation: started.generation,
        }
    }
}

/// How long the new binary may take to answer its probe.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an upgrade waits for the process table to settle (no process starting or
/// stopping) before it gives up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Stop the manager process (it finishes API requests in flight), wait until no process is
/// starting or stopping, and take the table from the supervisor.
async fn settle_and_hand_over(
    sup: &SupervisorHandle,
) -> Result<supervisor::handover::Handover, UpgradeError> {
    let _ = sup.remove(service::MANAGER).await;
    let mut snapshots = sup.subscribe();
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        snapshots.borrow_and_update();
        match sup.hand_over().await {
            Ok(handover) => return Ok(handover),
            Err(supervisor::SupervisorError::Busy(why)) => {
                match tokio::time::timeout_at(deadline, snapshots.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(UpgradeError::SupervisorGone),
                    Err(_) => return Err(UpgradeError::NotSettled(why)),
                }
            }
            Err(e) => return Err(UpgradeError::HandOver(e)),
        }
    }
}

/// Record how an upgrade ended in the fd store, for every manager incarnation to come.
pub(super) fn record_upgrade(started: &mut Started, from: &str, failed: Option<String>) {
    started.generation += 1;
    let record = kres_wire::upgrade::UpgradeRecord {
        generation: started.generation,
        outcome: match failed {
            None => kres_wire::upgrade::UpgradeOutcome::Upgraded,
            Some(_) => kres_wire::upgrade::UpgradeOutcome::Failed,
        },
        from: from.to_owned(),
        to: crate::build_version(),
        at: std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        error: failed,
        first_incarnation: started.incarnations + 1,
    };
    let made = upgrade::record(&record);
    if let Err(e) = keep_in(&mut started.store, upgrade::STORED_UPGRADE, made) {
        tracing::warn!("cannot record the upgrade: {e}");
    }
}
