//! The manager as a supervised task. The daemon runs one incarnation at a time; if it panics,
//! the daemon starts a new one after a backoff. Processes never depend on the manager task:
//! the supervisor keeps them running, and a new incarnation adopts them from its table, so DNS
//! service is not interrupted. Commands (config changes, reloads) are processed one at a time,
//! which serializes every change of the running configuration.

use std::sync::Arc;

use supervisor::upward::UpwardNotifier;
use supervisor::SupervisorHandle;
use tokio::sync::{mpsc, watch, Mutex};
use tokio_util::sync::CancellationToken;

use super::handle::{ChangeError, ChangeResult, ManagerCommand};
use super::listen::{SocketOwner, SocketTable};
use super::plan::{ChangePlan, GcChange, Restart, RulesChange, WorkerChange};
use super::{ApplyError, Executables, Manager};
use crate::config::{self, LoadedConfig};
use crate::events::{self, Cause, Event, EventLog, GcChanged, WorkersChanged};
use crate::service;

/// What outlives any one incarnation of the manager task.
#[derive(Clone)]
pub struct ManagerContext {
    pub supervisor: SupervisorHandle,
    pub executables: Executables,
    /// The configuration files given on the command line and how they are validated (for
    /// reloads).
    pub source: config::ConfigSource,
    /// The configuration currently applied: written by the incarnation's `Manager` only;
    /// the API and the file watcher hold receivers.
    pub config: watch::Sender<Arc<LoadedConfig>>,
    /// Commands; the receiver is handed from incarnation to incarnation.
    pub commands: Arc<Mutex<mpsc::Receiver<ManagerCommand>>>,
    /// Flipped to true once the first start completed.
    pub started: watch::Sender<bool>,
    pub upward: UpwardNotifier,
    /// Fires when the daemon stops.
    pub stop: CancellationToken,
    /// Who binds the listening sockets kresd accepts as descriptors.
    pub socket_owner: SocketOwner,
    /// The daemon's listening sockets; they outlive every incarnation.
    pub sockets: Arc<std::sync::Mutex<SocketTable>>,
    /// Where every change's outcome is told to followers of `/events`.
    pub events: EventLog,
}

/// How an incarnation ended on purpose. Errors are not here: an incarnation that returns an
/// error is restarted.
#[derive(Debug)]
pub enum ManagerExit {
    /// The daemon is stopping.
    Stopped,
    /// The first start failed (the policy-loader or a worker failed): the resolver cannot run
    /// this configuration and must stop with an error, not retry.
    StartFailed(ApplyError),
    /// Processes kept failing after the allowed fix attempts: stop in a controlled way.
    Unstable { failed: Vec<String> },
}

/// Bounded fix attempts for failed processes: at most `MAX_FIX_ATTEMPTS` within
/// `FIX_WINDOW`; one more failure means the resolver is unstable and stops.
struct Instability {
    attempts: std::collections::VecDeque<std::time::Instant>,
}

const MAX_FIX_ATTEMPTS: usize = 2;
const FIX_WINDOW: std::time::Duration = std::time::Duration::from_secs(30 * 60);

impl Instability {
    /// Whether another fix attempt is allowed now (and count it).
    fn allow_attempt(&mut self) -> bool {
        let now = std::time::Instant::now();
        while self
            .attempts
            .front()
            .is_some_and(|t| now.duration_since(*t) > FIX_WINDOW)
        {
            self.attempts.pop_front();
        }
        if self.attempts.len() >= MAX_FIX_ATTEMPTS {
            return false;
        }
        self.attempts.push_back(now);
        true
    }
}

/// What systemd shows as the service's status while it serves `config`.
pub fn ready_status(config: &crate::config::LoadedConfig) -> String {
    let workers = config.model.workers;
    let plural = if workers == 1 { "" } else { "s" };
    format!("Ready: {workers} worker{plural} configured")
}

/// One incarnation. The first one starts everything; later ones adopt.
pub async fn run(ctx: ManagerContext, number: u32) -> Result<ManagerExit, ApplyError> {
    let mut manager = Manager::new(
        ctx.supervisor.clone(),
        ctx.executables.clone(),
        ctx.config.clone(),
        ctx.socket_owner,
        ctx.sockets.clone(),
        ctx.upward.clone(),
    );
    if !*ctx.started.borrow() {
        ctx.upward.status("Starting services");
        if let Err(e) = manager.cold_start().await {
            return Ok(ManagerExit::StartFailed(e));
        }
        ctx.started.send_replace(true);
    } else {
        let adopted = manager.adopt();
        tracing::warn!(
            incarnation = number,
            adopted,
            "manager restarted; adopted the running workers"
        );
        manager.reconcile().await?;
    }
    let mut commands = ctx.commands.lock().await;
    let mut processes = ctx.supervisor.subscribe();
    let mut instability = Instability {
        attempts: Default::default(),
    };
    loop {
        let command = tokio::select! {
            () = ctx.stop.cancelled() => return Ok(ManagerExit::Stopped),
            changed = processes.changed() => {
                if changed.is_err() {
                    return Ok(ManagerExit::Stopped);
                }
                let failed = service::failed_essentials(&processes.borrow_and_update());
                if failed.is_empty() {
                    continue;
                }
                if !instability.allow_attempt() {
                    tracing::error!(failed = %failed.join(", "), "processes keep failing after {MAX_FIX_ATTEMPTS} fix attempts; stopping the resolver");
                    return Ok(ManagerExit::Unstable { failed });
                }
                tracing::warn!(failed = %failed.join(", "), "processes failed; attempting to fix them by starting them again");
                for name in &failed {
                    if let Err(e) = ctx.supervisor.start(name).await {
                        tracing::warn!(name, "fix attempt failed: {e}");
                    }
                }
                continue;
            }
            command = commands.recv() => match command {
                Some(c) => c,
                None => return Ok(ManagerExit::Stopped),
            },
        };
        match command {
            ManagerCommand::Apply {
                config,
                base,
                reply,
            } => {
                let result = match stale(&manager, base) {
                    Some(conflict) => Err(conflict),
                    None => apply(&mut manager, Arc::new(*config), Restart::WhenNeeded).await,
                };
                tell(&ctx.events, Cause::Api, &result);
                let _ = reply.send(result);
            }
            ManagerCommand::DryRun {
                config,
                base,
                reply,
            } => {
                let result = match stale(&manager, base) {
                    Some(conflict) => Err(conflict),
                    None => manager.dry_run(&config).await.map_err(ChangeError::from),
                };
                let _ = reply.send(result);
            }
            ManagerCommand::Reload {
                restart,
                origin,
                reply,
            } => {
                // Whatever asked (SIGHUP, `kresctl reload` as systemd's ExecReload, the API),
                // the service manager sees the reload begin and end.
                ctx.upward.reloading("Reloading configuration");
                ctx.events.publish(Event::ConfigReloading {
                    force: restart == Restart::Always,
                    origin,
                });
                let result = match ctx.source.load() {
                    Ok(loaded) => apply(&mut manager, Arc::new(loaded), restart).await,
                    Err(e) => {
                        tracing::error!(
                            "reload failed; the running configuration is unchanged: {e}"
                        );
                        Err(e.into())
                    }
                };
                let mut status = ready_status(&manager.config());
                if result.is_err() {
                    status.push_str("; the last reload failed, see the log");
                }
                ctx.upward.ready(&status);
                tell(&ctx.events, Cause::Reload, &result);
                let _ = reply.send(result);
            }
            ManagerCommand::Renew {
                restart,
                origin,
                reply,
            } => {
                ctx.events.publish(Event::ConfigRenewing {
                    force: restart == Restart::Always,
                    origin,
                });
                let current = manager.config();
                let result = apply(&mut manager, current, restart).await;
                if result.is_ok() {
                    tracing::info!("Renewing configuration has finished");
                }
                tell(&ctx.events, Cause::Renew, &result);
                let _ = reply.send(result);
            }
            ManagerCommand::Panic => panic!("fault injection: manager task panic requested"),
        }
    }
}

/// `Conflict` when the change was computed from `base`, which is no longer what runs.
fn stale(manager: &Manager, base: Option<String>) -> Option<ChangeError> {
    let current = crate::etag::etag(&manager.config().raw);
    base.is_some_and(|b| b != current)
        .then_some(ChangeError::Conflict)
}

/// Apply `config`; a refusal is logged here, once, and answered to whoever asked.
async fn apply(manager: &mut Manager, config: Arc<LoadedConfig>, restart: Restart) -> ChangeResult {
    manager.apply(config, restart).await.map_err(|e| {
        tracing::error!("configuration not applied: {e}");
        ChangeError::from(e)
    })
}

/// Tell followers of `/events` how a change asked by `cause` ended. A conflict or an absent
/// manager is no change of the configuration: nothing is told.
fn tell(log: &EventLog, cause: Cause, result: &ChangeResult) {
    if let Some(event) = outcome(cause, result) {
        log.publish(event);
    }
}

/// The event of a change's outcome.
fn outcome(cause: Cause, result: &ChangeResult) -> Option<Event> {
    let reason = |e: &dyn std::fmt::Display| events::bounded_reason(&e.to_string());
    match result {
        Ok(plan) => Some(applied(cause, plan)),
        Err(ChangeError::Conflict | ChangeError::Unavailable) => None,
        Err(ChangeError::Apply(e @ ApplyError::RolledBack(_))) => Some(Event::ConfigRolledBack {
            cause,
            reason: reason(e),
            recovered: true,
        }),
        Err(ChangeError::Apply(e @ ApplyError::RollbackFailed { .. })) => {
            Some(Event::ConfigRolledBack {
                cause,
                reason: reason(e),
                recovered: false,
            })
        }
        Err(e) => Some(Event::ConfigRefused {
            cause,
            reason: reason(e),
        }),
    }
}

/// What an applied plan did, as followers read it.
fn applied(cause: Cause, plan: &ChangePlan) -> Event {
    let names = |ids: &[service::WorkerId]| ids.iter().map(|id| id.name()).collect();
    Event::ConfigApplied {
        cause,
        sections: plan.changed.iter().map(|s| s.key().to_owned()).collect(),
        workers: match &plan.workers {
            WorkerChange::ResetRules => WorkersChanged::RulesReset,
            WorkerChange::Live(live) => WorkersChanged::Live {
                workers: names(&live.workers),
                restarted: names(&live.restarted),
                rules_reset: live.rules == RulesChange::Reset,
            },
            WorkerChange::Roll(roll) => WorkersChanged::Restart {
                stop: names(&roll.stop),
                restart: names(&roll.restart),
                start: names(&roll.start),
            },
        },
        cache_gc: match plan.gc {
            GcChange::Keep => GcChanged::Keep,
            GcChange::Replace => GcChanged::Replace,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::plan::{Immutable, Live, Roll, Section};
    use crate::service::WorkerId;

    fn refused(reason: &str) -> Event {
        Event::ConfigRefused {
            cause: Cause::Api,
            reason: reason.into(),
        }
    }

    #[test]
    fn every_outcome_of_a_change_is_told_as_its_event() {
        let failed = || Box::new(ApplyError::PolicyLoader("exit code 1".into()));
        let roll = ChangePlan {
            changed: vec![Section::Workers, Section::Cache],
            workers: WorkerChange::Roll(Roll {
                canary: WorkerId(3),
                unlink: vec![],
                stop: vec![WorkerId(2)],
                restart: vec![WorkerId(0), WorkerId(1)],
                start: vec![],
            }),
            gc: GcChange::Replace,
        };
        let rows: Vec<(&str, ChangeResult, Option<Event>)> = vec![
            (
                "a roll",
                Ok(roll),
                Some(Event::ConfigApplied {
                    cause: Cause::Api,
                    sections: vec!["workers".into(), "cache".into()],
                    workers: WorkersChanged::Restart {
                        stop: vec!["kresd2".into()],
                        restart: vec!["kresd0".into(), "kresd1".into()],
                        start: vec![],
                    },
                    cache_gc: GcChanged::Replace,
                }),
            ),
            (
                "a rules reset",
                Ok(ChangePlan::default()),
                Some(Event::ConfigApplied {
                    cause: Cause::Api,
                    sections: vec![],
                    workers: WorkersChanged::RulesReset,
                    cache_gc: GcChanged::Keep,
                }),
            ),
            (
                "a live logging change, one worker restarted instead",
                Ok(ChangePlan {
                    changed: vec![Section::Logging],
                    workers: WorkerChange::Live(Live {
                        workers: vec![WorkerId(0), WorkerId(1)],
                        rules: RulesChange::Reset,
                        restarted: vec![WorkerId(1)],
                    }),
                    gc: GcChange::Keep,
                }),
                Some(Event::ConfigApplied {
                    cause: Cause::Api,
                    sections: vec!["logging".into()],
                    workers: WorkersChanged::Live {
                        workers: vec!["kresd0".into(), "kresd1".into()],
                        restarted: vec!["kresd1".into()],
                        rules_reset: true,
                    },
                    cache_gc: GcChanged::Keep,
                }),
            ),
            (
                "an immutable section",
                Err(ApplyError::Immutable(Immutable(Section::Rundir)).into()),
                Some(refused(
                    "[/rundir] cannot be changed at runtime; restart the resolver to change it",
                )),
            ),
            (
                "rolled back",
                Err(ApplyError::RolledBack(failed()).into()),
                Some(Event::ConfigRolledBack {
                    cause: Cause::Api,
                    reason: ApplyError::RolledBack(failed()).to_string(),
                    recovered: true,
                }),
            ),
            (
                "rolled back, and that failed too",
                Err(ApplyError::RollbackFailed {
                    cause: failed(),
                    back: failed(),
                }
                .into()),
                Some(Event::ConfigRolledBack {
                    cause: Cause::Api,
                    reason: ApplyError::RollbackFailed {
                        cause: failed(),
                        back: failed(),
                    }
                    .to_string(),
                    recovered: false,
                }),
            ),
            (
                "a conflict: nothing changed",
                Err(ChangeError::Conflict),
                None,
            ),
            ("no manager", Err(ChangeError::Unavailable), None),
        ];
        for (name, result, want) in rows {
            assert_eq!(outcome(Cause::Api, &result), want, "{name}");
        }
    }
}
