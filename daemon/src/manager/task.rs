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

use super::handle::{Base, ChangeError, ChangeResult, ManagerCommand, ReloadResult, Reloaded};
use super::listen::{SocketOwner, SocketTable};
use super::plan::{ChangePlan, Restart, Stage};
use super::repairs::{GaveUp, Repairs};
use super::rpz_loads::{self, RpzLoads};
use super::{ApplyError, Executables, Manager, ProcessesSetup};
use crate::events::{self, Cause, Event, EventLog, Origin};
use crate::service;
use kres_config::LoadedConfig;
use serde_json::Value;

/// What outlives any one incarnation of the manager task.
#[derive(Clone)]
pub struct ManagerContext {
    /// Where processes are started and watched.
    pub supervisor: SupervisorHandle,
    /// Where Knot Resolver's programs are, and as whom they run.
    pub executables: Executables,
    /// How long the policy-loader may run.
    pub policy_loader_timeout: std::time::Duration,
    /// The configuration files given on the command line and how they are validated (for
    /// reloads).
    pub source: kres_config::ConfigSource,
    /// The configuration currently applied: written by the incarnation's `Manager` only;
    /// the API and the file watcher hold receivers.
    pub config: watch::Sender<Arc<LoadedConfig>>,
    /// Commands; the receiver is handed from incarnation to incarnation.
    pub commands: Arc<Mutex<mpsc::Receiver<ManagerCommand>>>,
    /// Flipped to true once the first start completed.
    pub started: watch::Sender<bool>,
    /// The service manager above us (systemd): start, reload and status notifications.
    pub upward: UpwardNotifier,
    /// Fires when the daemon stops.
    pub stop: CancellationToken,
    /// Who binds the listening sockets kresd accepts as descriptors.
    pub socket_owner: SocketOwner,
    /// The daemon's listening sockets; they outlive every incarnation.
    pub sockets: Arc<std::sync::Mutex<SocketTable>>,
    /// Where every change's outcome is told to followers of `/events`.
    pub events: EventLog,
    /// What the policy-loader's last run said of the RPZ zones kept by zone transfer; the
    /// secondary and the status line read it.
    pub rpz_loads: watch::Sender<RpzLoads>,
    /// The configuration the files made when they were last applied (at the first start, at
    /// each reload), for a reload to tell which changes made through the API it undoes;
    /// `None` when unknown (this manager process took over a running configuration).
    pub files_applied: Arc<std::sync::Mutex<Option<Arc<LoadedConfig>>>>,
    /// The query log's sockets, bound before workers with the log on start (`None`: no
    /// query log, in tests).
    pub query_log: Option<crate::query_log::intake::Intake>,
}

impl ManagerContext {
    /// A manager (an executor) over this context's supervisor, sockets and configuration.
    fn manager(&self) -> Manager {
        let setup = ProcessesSetup {
            supervisor: self.supervisor.clone(),
            executables: self.executables.clone(),
            owner: self.socket_owner,
            sockets: self.sockets.clone(),
            upward: self.upward.clone(),
            events: self.events.clone(),
            policy_loader_timeout: self.policy_loader_timeout,
        };
        Manager::new(setup, self.config.clone())
            .with_rpz_loads(self.rpz_loads.clone())
            .with_query_log(self.query_log.clone())
    }
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

/// What systemd shows as the service's status while it serves `config`.
pub fn ready_status(config: &kres_config::LoadedConfig, loads: &RpzLoads) -> String {
    let workers = config.model.workers;
    let plural = if workers == 1 { "" } else { "s" };
    let zones = rpz_loads::status_suffix(loads);
    format!("Ready: {workers} worker{plural} configured{zones}")
}

/// What wakes the manager task between commands.
enum Wake {
    /// The daemon is stopping (or a source the task listens to is gone).
    Stopped,
    /// The supervisor's process table changed.
    TableChanged,
    /// Someone asked for something.
    Command(ManagerCommand),
}

/// One incarnation. The first one starts everything; later ones adopt.
pub async fn run(ctx: ManagerContext, number: u32) -> Result<ManagerExit, ApplyError> {
    let mut manager = ctx.manager();
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
    Ok(serve(&ctx, &mut manager).await)
}

/// Serve commands one at a time, and repair failed processes between them, until the daemon
/// stops or the processes keep failing.
async fn serve(ctx: &ManagerContext, manager: &mut Manager) -> ManagerExit {
    let mut commands = ctx.commands.lock().await;
    let mut table = ctx.supervisor.subscribe();
    let mut repairs = Repairs::new(ctx.supervisor.clone());
    loop {
        let wake = tokio::select! {
            () = ctx.stop.cancelled() => Wake::Stopped,
            changed = table.changed() => match changed {
                Ok(()) => Wake::TableChanged,
                Err(_) => Wake::Stopped,
            },
            command = commands.recv() => command.map_or(Wake::Stopped, Wake::Command),
        };
        match wake {
            Wake::Stopped => return ManagerExit::Stopped,
            Wake::TableChanged => {
                let failed = service::failed_essentials(&table.borrow_and_update());
                if let Err(GaveUp(failed)) = repairs.fix(failed).await {
                    return ManagerExit::Unstable { failed };
                }
            }
            Wake::Command(command) => dispatch(ctx, manager, command).await,
        }
    }
}

/// Carry out one command and answer whoever asked; every change's outcome is told to
/// followers of `/events`.
async fn dispatch(ctx: &ManagerContext, manager: &mut Manager, command: ManagerCommand) {
    let (result, reply) = match command {
        ManagerCommand::Apply {
            config,
            base,
            reply,
        } => (change(ctx, manager, *config, base).await, reply),
        ManagerCommand::DryRun {
            config,
            base,
            reply,
        } => (dry_run(manager, Arc::from(config), base).await, reply),
        ManagerCommand::Reload {
            restart,
            origin,
            reply,
        } => {
            let _ = reply.send(reload(ctx, manager, restart, origin).await);
            return;
        }
        ManagerCommand::Renew {
            restart,
            origin,
            reply,
        } => (renew(ctx, manager, restart, origin).await, reply),
        ManagerCommand::Panic => panic!("fault injection: manager task panic requested"),
    };
    let _ = reply.send(result);
}

/// Apply `config`, computed from the document whose ETag is `base`, unless another
/// configuration runs by now.
async fn change(
    ctx: &ManagerContext,
    manager: &mut Manager,
    config: LoadedConfig,
    base: Option<Base>,
) -> ChangeResult {
    let result = match current(manager, base) {
        Ok(()) => {
            ctx.events.publish(Event::ConfigChanging);
            apply(manager, Arc::new(config), Restart::WhenNeeded).await
        }
        Err(conflict) => Err(conflict),
    };
    tell(&ctx.events, Cause::Api, &result);
    result
}

/// What applying `config` would do, unless another configuration than `base` runs by now.
async fn dry_run(manager: &Manager, config: Arc<LoadedConfig>, base: Option<Base>) -> ChangeResult {
    current(manager, base)?;
    Ok(manager.dry_run(&config).await?)
}

/// Read the configuration files again and apply them. Whatever asked (SIGHUP, `kresctl
/// reload` as systemd's ExecReload, the API), the service manager sees the reload begin and
/// end.
async fn reload(
    ctx: &ManagerContext,
    manager: &mut Manager,
    restart: Restart,
    origin: Origin,
) -> ReloadResult {
    ctx.upward.reloading("Reloading configuration");
    ctx.events.publish(Event::ConfigReloading {
        force: restart == Restart::Always,
        origin,
    });
    let running = manager.config();
    let source = ctx.source.clone();
    let (result, discarded) = match super::off_thread(move || source.load()).await {
        Ok(loaded) => {
            let loaded = Arc::new(loaded);
            let result = apply(manager, loaded.clone(), restart).await;
            let discarded = match &result {
                Ok(_) => discard_api_changes(ctx, &running, loaded),
                Err(_) => Vec::new(),
            };
            (result, discarded)
        }
        Err(e) => {
            let e = e.of_files(&ctx.source.files);
            tracing::error!("reload failed; the running configuration is unchanged: {e}");
            (Err(e.into()), Vec::new())
        }
    };
    let mut status = ready_status(&manager.config(), &ctx.rpz_loads.borrow());
    if result.is_err() {
        status.push_str("; the last reload failed, see the log");
    }
    ctx.upward.ready(&status);
    tell(&ctx.events, Cause::Reload, &result);
    result.map(|plan| Reloaded { plan, discarded })
}

/// The files' configuration `loaded` was applied over `running`: remember it, and tell
/// (returned, and logged) which changes made through the API since the files were last
/// applied it undid.
fn discard_api_changes(
    ctx: &ManagerContext,
    running: &LoadedConfig,
    loaded: Arc<LoadedConfig>,
) -> Vec<String> {
    let Ok(mut files) = ctx.files_applied.lock() else {
        return Vec::new();
    };
    let before = files.replace(loaded.clone());
    let Some(before) = before else {
        return Vec::new();
    };
    let discarded = undone_changes(&before.raw, &running.raw, &loaded.raw);
    if !discarded.is_empty() {
        tracing::warn!(
            "the reload discarded changes made through the API: {}",
            discarded.join(", ")
        );
    }
    discarded
}

/// The pointers where `running` differs from `files_before` (changes made since the files
/// were applied) and `files_now` does not keep the running value.
fn undone_changes(files_before: &Value, running: &Value, files_now: &Value) -> Vec<String> {
    kres_config::document_diff::differences(files_before, running)
        .iter()
        .map(|d| d.path().to_owned())
        .filter(|path| running.pointer(path) != files_now.pointer(path))
        .collect()
}

/// Apply the running configuration again.
async fn renew(
    ctx: &ManagerContext,
    manager: &mut Manager,
    restart: Restart,
    origin: Origin,
) -> ChangeResult {
    ctx.events.publish(Event::ConfigRenewing {
        force: restart == Restart::Always,
        origin,
    });
    let current = manager.config();
    let result = apply(manager, current, restart).await;
    if result.is_ok() {
        tracing::info!("Renewing configuration has finished");
    }
    tell(&ctx.events, Cause::Renew, &result);
    result
}

/// `Conflict` when the change was computed from `base`, which is no longer what runs.
fn current(manager: &Manager, base: Option<Base>) -> Result<(), ChangeError> {
    match base {
        Some(base) if !base.is(&manager.config()) => Err(ChangeError::Conflict),
        _ => Ok(()),
    }
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
    Event::ConfigApplied {
        cause,
        change: plan.summary(Stage::Applied),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::manager::plan::{
        GcChange, Immutable, Live, Roll, RulesChange, Section, WorkerChange,
    };
    use crate::manager::ManagerHandle;
    use crate::manager::PolicyLoaderFailure;
    use crate::service::WorkerId;
    use futures_util::FutureExt;
    use kres_wire::change::{ChangeSummary, GcAction, WorkersAction};

    /// The manager task serving commands without kresd: a real supervisor, programs that do
    /// not exist, a configuration in a directory of its own; asked through a real handle.
    struct World {
        /// How the tests ask.
        handle: ManagerHandle,
        /// The configuration's directory (its rundir too).
        dir: PathBuf,
        /// What the task told the service manager above it.
        upward: mpsc::UnboundedReceiver<supervisor::upward::Upward>,
        /// Every event published since the world was made.
        follower: events::Follower,
        /// The supervisor's actor, ended with the world.
        _actor: supervisor::runner::ActorTask,
    }

    impl World {
        async fn new(name: &str) -> World {
            let dir = std::env::temp_dir().join(format!("kres-task-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let loaded = write_config(&dir);
            let (supervisor, actor) =
                supervisor::Supervisor::start(supervisor::SupervisorOptions {
                    notify_socket: dir.join("notify"),
                    notify_senders: None,
                    line_levels: supervisor::output::levels_by_stream,
                })
                .expect("supervisor");
            let (upward_tx, upward) = mpsc::unbounded_channel();
            let (commands, commands_rx) = mpsc::channel(1);
            let ctx = ManagerContext {
                supervisor,
                executables: Executables {
                    kresd: dir.join("no-kresd"),
                    cache_gc: dir.join("no-kres-cache-gc"),
                    run_as: None,
                    base_env: Vec::new(),
                },
                policy_loader_timeout: crate::manager::POLICY_LOADER_TIMEOUT,
                source: kres_config::ConfigSource {
                    files: vec![dir.join("config.yaml")],
                    checks: kres_config::PathChecks::Manager,
                    logtarget_arg: Default::default(),
                },
                config: watch::channel(Arc::new(loaded)).0,
                commands: Arc::new(Mutex::new(commands_rx)),
                started: watch::channel(true).0,
                upward: UpwardNotifier::forwarding(upward_tx),
                stop: CancellationToken::new(),
                socket_owner: SocketOwner::Kresd,
                sockets: Default::default(),
                events: EventLog::new("test"),
                rpz_loads: watch::Sender::new(RpzLoads::default()),
                files_applied: Default::default(),
                query_log: None,
            };
            let handle = ManagerHandle::new(commands, ctx.config.subscribe());
            let follower = ctx
                .events
                .follow(None, events::FollowerClass::Privileged)
                .expect("a follower");
            tokio::spawn(async move {
                let mut manager = ctx.manager();
                serve(&ctx, &mut manager).await
            });
            World {
                handle,
                dir,
                upward,
                follower,
                _actor: actor,
            }
        }

        /// The events published since the last call, oldest first.
        fn events(&mut self) -> Vec<Event> {
            let mut seen = Vec::new();
            while let Some(Some(record)) = self.follower.next().now_or_never() {
                seen.push(record.event.clone());
            }
            seen
        }
    }

    impl Drop for World {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A configuration of one worker with its rundir and cache in `dir`.
    fn write_config(dir: &std::path::Path) -> LoadedConfig {
        std::fs::create_dir_all(dir.join("cache")).expect("a directory");
        let file = dir.join("config.yaml");
        std::fs::write(
            &file,
            format!(
                "workers: 1\nrundir: {run}\ncache:\n  storage: {run}/cache\nmanagement:\n  unix-socket: {run}/api.sock\n",
                run = dir.display()
            ),
        )
        .expect("a configuration file");
        kres_config::load_files(&[file], kres_config::PathChecks::Strict, Default::default())
            .expect("a valid configuration")
    }

    #[tokio::test]
    async fn a_change_computed_from_another_configuration_is_a_conflict_and_no_event() {
        let mut world = World::new("conflict").await;
        let running = world.handle.config();
        let base = Some(Base {
            config: Arc::new((*running).clone()),
            tag: "\"not-the-running-one\"".to_owned(),
        });
        let applied = world.handle.apply((*running).clone(), base.clone()).await;
        assert!(matches!(applied, Err(ChangeError::Conflict)), "{applied:?}");
        let dry = world.handle.dry_run((*running).clone(), base).await;
        assert!(matches!(dry, Err(ChangeError::Conflict)), "{dry:?}");
        assert_eq!(world.events(), []);
        assert!(Arc::ptr_eq(&world.handle.config(), &running));
    }

    #[tokio::test]
    async fn a_change_of_an_immutable_section_is_refused_before_anything_runs() {
        let mut world = World::new("immutable").await;
        let moved = write_config(&world.dir.join("elsewhere"));
        let running = world.handle.config();
        let base = Some(Base {
            tag: crate::etag::etag(&running.raw),
            config: running.clone(),
        });
        let result = world.handle.apply(moved, base).await;
        assert!(
            matches!(result, Err(ChangeError::Apply(ApplyError::Immutable(_)))),
            "{result:?}"
        );
        assert!(matches!(
            world.events().as_slice(),
            [Event::ConfigChanging, Event::ConfigRefused { cause: Cause::Api, reason }] if reason.starts_with("[/rundir]")
        ));
        assert!(Arc::ptr_eq(&world.handle.config(), &running));
    }

    #[tokio::test]
    async fn a_reload_of_files_that_do_not_load_is_told_upward_and_as_events() {
        let mut world = World::new("reload").await;
        std::fs::write(world.dir.join("config.yaml"), "workers: [").expect("a broken file");
        let result = world.handle.reload(Restart::Always, Origin::Signal).await;
        assert!(matches!(result, Err(ChangeError::Config(_))), "{result:?}");
        let reloading = Event::ConfigReloading {
            force: true,
            origin: Origin::Signal,
        };
        let result = result.map(|reloaded| reloaded.plan);
        assert_eq!(world.events(), [reloading, told(Cause::Reload, &result)]);
        use supervisor::upward::Upward;
        assert_eq!(
            world.upward.try_recv().ok(),
            Some(Upward::Reloading("Reloading configuration".into()))
        );
        assert_eq!(
            world.upward.try_recv().ok(),
            Some(Upward::Ready(
                "Ready: 1 worker configured; the last reload failed, see the log".into()
            ))
        );
    }

    #[tokio::test]
    async fn a_renew_whose_policy_loader_cannot_run_is_refused_and_leaves_no_file() {
        let mut world = World::new("renew").await;
        let result = world.handle.renew(Restart::WhenNeeded, Origin::Api).await;
        assert!(
            matches!(result, Err(ChangeError::Apply(ApplyError::PolicyLoader(_)))),
            "{result:?}"
        );
        let renewing = Event::ConfigRenewing {
            force: false,
            origin: Origin::Api,
        };
        assert_eq!(world.events(), [renewing, told(Cause::Renew, &result)]);
        assert!(!world
            .dir
            .join(crate::manager::specs::POLICY_LOADER_CONF)
            .exists());
    }

    /// The event that tells the outcome `result` of a change asked by `cause`.
    fn told(cause: Cause, result: &ChangeResult) -> Event {
        outcome(cause, result).expect("an event")
    }

    fn refused(reason: &str) -> Event {
        Event::ConfigRefused {
            cause: Cause::Api,
            reason: reason.into(),
        }
    }

    #[test]
    fn a_reload_undoes_the_api_changes_the_files_do_not_keep() {
        let before = serde_json::json!({"workers": 2, "local-data": {"ttl": "5m"}});
        let running = serde_json::json!({"workers": 3, "local-data": {"ttl": "5m",
            "records": "a. A 192.0.2.1"}, "logging": {"level": "info"}});
        let rows = [
            // The files unchanged: every change made since is undone.
            (
                before.clone(),
                vec!["/local-data/records", "/logging", "/workers"],
            ),
            // The files now say what the API set: nothing of that is lost.
            (
                serde_json::json!({"workers": 3, "local-data": {"ttl": "5m"}}),
                vec!["/local-data/records", "/logging"],
            ),
            // A file edit alone is no API change.
            (
                serde_json::json!({"workers": 3, "local-data": {"ttl": "1m",
                "records": "a. A 192.0.2.1"}, "logging": {"level": "info"}}),
                vec![],
            ),
        ];
        for (now, want) in rows {
            assert_eq!(undone_changes(&before, &running, &now), want, "{now}");
        }
        assert!(
            undone_changes(&before, &before, &running).is_empty(),
            "no API change"
        );
    }

    #[test]
    fn every_outcome_of_a_change_is_told_as_its_event() {
        let failed = || {
            Box::new(ApplyError::PolicyLoader(PolicyLoaderFailure::Exited {
                status: supervisor::ExitStatus::Code(1),
                output: vec![],
            }))
        };
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
                    change: ChangeSummary {
                        changed: vec!["workers".into(), "cache".into()],
                        workers: WorkersAction::Restart {
                            canary: true,
                            stop: vec!["kresd2".into()],
                            restart: vec!["kresd0".into(), "kresd1".into()],
                            start: vec![],
                            unlink: vec![],
                        },
                        cache_gc: GcAction::Replace,
                    },
                }),
            ),
            (
                "a rules reset",
                Ok(ChangePlan::default()),
                Some(Event::ConfigApplied {
                    cause: Cause::Api,
                    change: ChangeSummary {
                        changed: vec![],
                        workers: WorkersAction::RulesReset,
                        cache_gc: GcAction::Keep,
                    },
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
                    change: ChangeSummary {
                        changed: vec!["logging".into()],
                        workers: WorkersAction::Live {
                            workers: vec!["kresd0".into(), "kresd1".into()],
                            restarted: Some(vec!["kresd1".into()]),
                            rules_reset: true,
                        },
                        cache_gc: GcAction::Keep,
                    },
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
