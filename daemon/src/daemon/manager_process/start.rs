//! The start and stop phases of the manager process, and what its serve loop's actions act
//! on ([`Running`]): the manager task under supervision, the sources of its events, and, once
//! the task's first start completed, the API, the file watchdog and the helpers that follow
//! the configuration.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt};
use supervisor::remote::Parent;
use supervisor::task::{supervise_task, TaskHealth};
use supervisor::Backoff;
use tokio::sync::{mpsc, watch, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::logging::Logging;
use super::super::{resolve_user, ApiGroupNames, ApiGroupsError, LookupError, STORED_CONFIG};
use super::lifecycle::{Action, Effects, ManagerEvent, TaskEnd, START_MAX_FAILURES};
use super::restore::{Incarnation, Restored};
use crate::api::{self, ApiState};
use crate::events::EventLog;
use crate::manager::listen::{Mirrored, SocketOwner, SocketTable};
use crate::manager::rpz_loads::RpzLoads;
use crate::manager::task::{self, ManagerContext};
use crate::manager::{Executables, ManagerHandle};
use crate::metrics::ControlPlane;
use crate::rpz::secondary::{FirstTransferFailed, FirstTransfers};
use crate::watchdog::ConfigFiles;
use kres_config::{LoadedConfig, ManagementSchema};
use kres_wire::environment::Environment;

/// How the manager task is restarted: at once after its first failure, then 200 ms doubling
/// up to 30 s; 60 s of running (as for the manager process) forgive the failures before.
fn task_backoff() -> Backoff {
    Backoff::try_new(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_secs(30),
        std::time::Duration::ZERO,
        100,
        std::time::Duration::from_secs(60),
    )
    .unwrap_or_default()
}

/// What the manager process is set up with, besides what it restored.
pub struct Settings {
    /// The configuration files (absolute), and how they are validated.
    pub source: kres_config::ConfigSource,
    /// The files watched for changes, if any.
    pub watched: ConfigFiles,
    /// How long a worker may leave its control socket unanswered; `None`: never checked.
    pub hang_timeout: Option<std::time::Duration>,
    pub socket_owner: SocketOwner,
    /// `--worker-user` or its environment form.
    pub worker_user: Option<String>,
    /// The groups of the API's roles on its unix socket.
    pub api_groups: ApiGroupNames,
    /// The process's logging, when this process installed it.
    pub logging: Option<&'static Logging>,
    /// When the process began, for the start-up's duration in the log.
    pub began: std::time::Instant,
    /// The heap made ready for a large configuration's start (its load, rendering and
    /// policy-loader run), until serving begins.
    pub heap: heap::HeapPrefault,
    /// The environment the process was started with.
    pub env: Arc<Environment>,
}

/// Why the manager process could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartFailed {
    #[error("cannot use rundir {}: {source}", path.display())]
    Rundir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--worker-user: {0}")]
    WorkerUser(#[source] LookupError),
    /// The API's bearer tokens cannot be read.
    #[error("{0}")]
    Guard(#[source] api::guard::TokenError),
    /// The groups of the API's roles cannot be used.
    #[error("{0}")]
    Groups(#[source] ApiGroupsError),
    /// An RPZ zone kept by zone transfer has no stored file and no primary gave it in time.
    #[error("{0}")]
    FirstTransfer(#[source] FirstTransferFailed),
}

/// Why serving could not begin.
#[derive(Debug, thiserror::Error)]
enum ServeFailed {
    #[error("the root process kept no API socket")]
    NoApiSocket,
    #[error("{0}")]
    Listener(#[source] std::io::Error),
}

/// The manager process, started: what its serve loop's actions act on.
pub struct Running {
    parent: Arc<Parent>,
    handle: ManagerHandle,
    /// Cancels everything this process runs: the manager task's supervision, the API, the
    /// watchers.
    stop: CancellationToken,
    /// What serving needs; taken when it begins.
    to_serve: Option<ToServe>,
    /// Every task this process runs, each ending with `stop`: from the start (the manager
    /// task's supervision, the event log's and the query log's followers, the mirror of the
    /// socket table), and once serving begins (the API server, the file watchdog, the RPZ
    /// tasks, the fleet's, the helpers that follow the configuration); waited for at the
    /// stop (requests in flight finish), within [`TASKS_STOP_BOUND`].
    tasks: TaskTracker,
}

/// How long the stop waits for the process's tasks: the API's grace for requests in flight
/// and a second more (the root kills the process 5 s after asking it to stop).
const TASKS_STOP_BOUND: std::time::Duration =
    api::server::SHUTDOWN_GRACE.saturating_add(std::time::Duration::from_secs(1));

/// What serving needs, prepared at the start.
struct ToServe {
    incarnation: Incarnation,
    began: std::time::Instant,
    logging: Option<&'static Logging>,
    watched: ConfigFiles,
    hang_timeout: Option<std::time::Duration>,
    health: watch::Receiver<TaskHealth>,
    reload_bell: Option<OwnedFd>,
    api_socket: Option<OwnedFd>,
    management: ManagementSchema,
    api: ApiState,
    /// The RPZ zones the start transferred, told to the event log by their tasks.
    transferred: FirstTransfers,
    /// The subscribed lists' task's end of the API's handle.
    lists: crate::rpz::lists::ListsInbox,
    heap: heap::HeapPrefault,
    /// Where the configuration last kept in the root's fd store is published (the handle's
    /// answers wait for it).
    kept: watch::Sender<Option<Arc<LoadedConfig>>>,
    /// Fault injection (`slow-keeper`): how long each changed configuration waits before it
    /// is kept, to prove that answers wait for it.
    keep_delay: Option<std::time::Duration>,
}

/// What the start checked in the environment: the workers' user, the API's guard.
pub struct Checked {
    run_as: Option<supervisor::Credentials>,
    guard: api::guard::Guard,
}

impl StartFailed {
    /// Whether the root is asked to stop the resolver: always when the rundir or the workers'
    /// user cannot be had; for the API's guard only at the first start (a successor leaves
    /// the workers serving and the root starts another).
    pub fn stops_the_resolver(&self, incarnation: Incarnation) -> bool {
        match self {
            StartFailed::Rundir { .. }
            | StartFailed::WorkerUser(_)
            | StartFailed::FirstTransfer(_) => true,
            StartFailed::Guard(_) | StartFailed::Groups(_) => incarnation == Incarnation::First,
        }
    }
}

/// Check the environment for the start: enter the rundir, find the workers' user, set up the
/// API's guard.
pub fn check(restored: &Restored, settings: &Settings) -> Result<Checked, StartFailed> {
    let model = &restored.loaded.model;
    std::env::set_current_dir(&model.rundir).map_err(|source| StartFailed::Rundir {
        path: model.rundir.clone(),
        source,
    })?;
    let run_as = settings
        .worker_user
        .as_deref()
        .map(resolve_user)
        .transpose()
        .map_err(StartFailed::WorkerUser)?
        .and_then(crate::daemon::reachable_worker_user);
    let management = &model.management;
    let endpoint = management.interface.as_ref().map(|i| i.socket_addr());
    let tcp = api::guard::TcpGuard::from_files(
        endpoint,
        settings.env.token_file.as_deref(),
        settings.env.read_only_token_file.as_deref(),
    )
    .map_err(StartFailed::Guard)?;
    let groups = settings
        .api_groups
        .resolve(management)
        .map_err(StartFailed::Groups)?;
    let guard = api::guard::Guard {
        tcp,
        unix: api::roles::UnixRoles::new(groups, nix::unistd::geteuid().as_raw()),
    };
    Ok(Checked { run_as, guard })
}

/// Before the first policy-loader run of the resolver's first manager process: the first
/// transfer of every RPZ zone kept by zone transfer that has no stored file, each within its
/// deadline. A zone with a stored file waits for nothing (READY never waits for the network
/// then), and a successor's workers already serve, so it waits for nothing either.
pub async fn first_transfers(restored: &Restored) -> Result<FirstTransfers, StartFailed> {
    if restored.incarnation != Incarnation::First {
        return Ok(FirstTransfers::default());
    }
    crate::rpz::secondary::first_transfers(&restored.loaded.model)
        .await
        .map_err(StartFailed::FirstTransfer)
}

impl Running {
    /// Start: run the manager task under supervision. The process, and the events of its
    /// task, its API's `/stop` and its link.
    /// `kresd` is the version of kresd ([`learn_kresd_version`]), or why it is unknown.
    pub fn start(
        restored: Restored,
        settings: Settings,
        checked: Checked,
        transferred: FirstTransfers,
        kresd: Result<String, KresdVersionError>,
    ) -> (Running, impl Stream<Item = ManagerEvent> + Unpin) {
        let parent = Arc::new(restored.parent);
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        let table = mirrored_table(&parent, restored.sockets, &tasks, &stop);
        let validation = settings.source.context();
        let faults = Faults::injected(&settings.env);
        let loaded = Arc::new(restored.loaded);
        // (a successor may run changes made through the API since the files were applied)
        let files_applied = (restored.incarnation == Incarnation::First).then(|| loaded.clone());
        let (config_tx, config_rx) = watch::channel(loaded);
        let (command_tx, command_rx) = mpsc::channel(16);
        let (health_tx, health_rx) = watch::channel(TaskHealth::default());
        let (kept_tx, kept_rx) = watch::channel(None);
        let rpz_loads = watch::Sender::new(RpzLoads::default());
        let handle = ManagerHandle::new(command_tx, config_rx)
            .with_health(health_rx.clone())
            .with_keeper(kept_rx)
            .with_rpz_loads(rpz_loads.subscribe());
        let (started_tx, started_rx) =
            watch::channel(restored.incarnation == Incarnation::Successor);
        let events = start_event_log(&parent, restored.upgrade.as_deref(), &tasks, &stop);
        let executables = Executables {
            run_as: checked.run_as,
            ..Executables::discover(&settings.env)
        };
        let kresd = announce(&executables, kresd, &settings.source.files, &parent);
        // Before the manager task, which starts the workers.
        let (query_log, intake) =
            start_query_log(&handle, &parent, &tasks, &stop, executables.run_as);
        let ctx = ManagerContext {
            supervisor: parent.handle.clone(),
            executables,
            policy_loader_timeout: crate::manager::policy_loader_timeout(&settings.env),
            source: settings.source.clone(),
            config: config_tx,
            commands: Arc::new(Mutex::new(command_rx)),
            started: started_tx,
            upward: parent.upward.clone(),
            stop: stop.clone(),
            socket_owner: settings.socket_owner,
            sockets: Arc::new(std::sync::Mutex::new(table)),
            events: events.clone(),
            rpz_loads,
            files_applied: Arc::new(std::sync::Mutex::new(files_applied)),
            query_log: Some(intake),
        };
        let task = spawn_task(ctx, health_tx, &tasks, &stop);
        let sources = task_events(task, started_rx, health_rx.clone(), &stop, &parent);
        let control_plane = ControlPlane::follow(&events, &tasks, stop.child_token());
        let (rpz_lists, lists) = crate::rpz::lists::ListsHandle::new();
        let api = ApiState {
            supervisor: parent.handle.clone(),
            stop: stop.clone(),
            manager: handle.clone(),
            fault_injection: faults.api,
            validation,
            rendered: Default::default(),
            guard: Arc::new(checked.guard),
            upgrade: restored.upgrade,
            process_failures: restored.process_failures,
            events,
            control_plane,
            kresd_version: kresd,
            query_log,
            heavy: Default::default(),
            fleet: membership(&handle, settings.source),
            rpz_lists,
        };
        let to_serve = ToServe {
            incarnation: restored.incarnation,
            began: settings.began,
            logging: settings.logging,
            watched: settings.watched,
            hang_timeout: settings.hang_timeout,
            health: health_rx,
            reload_bell: restored.reload_bell,
            api_socket: restored.api_socket,
            management: handle.config().model.management.clone(),
            api,
            transferred,
            lists,
            heap: settings.heap,
            kept: kept_tx,
            keep_delay: faults.keep_delay,
        };
        let running = Running {
            parent,
            handle,
            stop,
            to_serve: Some(to_serve),
            tasks,
        };
        (running, sources)
    }

    /// Stop: cancel everything, and wait for every task of the process (requests in flight
    /// finish), within [`TASKS_STOP_BOUND`]; said in the log.
    pub async fn stop(self) {
        let (running, began) = (self.tasks.len(), std::time::Instant::now());
        match stop_tasks(&self.stop, &self.tasks, TASKS_STOP_BOUND).await {
            0 => tracing::info!(
                "manager process stopped: all its tasks ended (the last {running} within {} ms)",
                began.elapsed().as_millis()
            ),
            left => tracing::warn!(
                "manager process stopping with {left} of its tasks still running {} s after \
                 the stop",
                TASKS_STOP_BOUND.as_secs()
            ),
        }
    }

    /// Serve: the helpers that follow the configuration, the file watchdog, the API; then
    /// tell the service manager above the root that we are ready.
    fn begin_serving(&mut self) -> Result<(), ServeFailed> {
        let Some(to_serve) = self.to_serve.take() else {
            return Ok(());
        };
        let upward = &self.parent.upward;
        let owned = |task| until(self.stop.child_token(), task);
        self.tasks.spawn(owned(Box::pin(keep_config(
            self.parent.clone(),
            self.handle.subscribe(),
            to_serve.api.rendered.clone(),
            to_serve.kept,
            to_serve.keep_delay,
        ))));
        self.tasks.spawn(owned(Box::pin(report_task_health(
            to_serve.health,
            upward.clone(),
            self.handle.clone(),
        ))));
        self.tasks.spawn(owned(Box::pin(report_rpz_loads(
            upward.clone(),
            self.handle.clone(),
        ))));
        if let Some(bell) = to_serve.reload_bell {
            self.tasks
                .spawn(owned(Box::pin(super::super::recovery::answer_reloads(
                    bell,
                    self.handle.clone(),
                ))));
        }
        if let Some(logging) = to_serve.logging {
            self.tasks
                .spawn(owned(Box::pin(logging.follow(self.handle.subscribe()))));
        }
        if let Some(deadline) = to_serve.hang_timeout {
            self.tasks.spawn(crate::manager::liveness::run(
                self.parent.handle.clone(),
                self.handle.clone(),
                deadline,
                self.stop.child_token(),
            ));
        }
        crate::fleet::start(
            to_serve.api.fleet.clone(),
            self.handle.clone(),
            self.parent.handle.clone(),
            &self.tasks,
            &self.stop,
        );
        self.tasks.spawn(crate::watchdog::start(
            self.handle.clone(),
            to_serve.watched,
            self.stop.child_token(),
        ));
        self.tasks.spawn(crate::rpz::secondary::start(
            self.handle.clone(),
            to_serve.api.events.clone(),
            to_serve.transferred,
            self.stop.child_token(),
        ));
        self.tasks.spawn(crate::rpz::lists::start(
            self.handle.clone(),
            to_serve.api.events.clone(),
            to_serve.lists,
            self.stop.child_token(),
        ));
        let listener = to_serve
            .api_socket
            .ok_or(ServeFailed::NoApiSocket)
            .and_then(|fd| {
                api::server::Listener::from_fd(fd, &to_serve.management)
                    .map_err(ServeFailed::Listener)
            })?;
        let router = api::app(to_serve.api);
        self.tasks.spawn(api::server::serve(
            listener,
            router,
            self.stop.child_token(),
        ));
        announce_serving(
            to_serve.incarnation,
            self.parent.incarnation,
            to_serve.began,
        );
        // Start-up's temporary allocations (the first configuration's parse, validation and
        // rendering, the API's route table) are freed by now: their pages are given back
        // before READY=1, so that the memory counted from then on is what runs on.
        drop(to_serve.heap);
        heap::release_free_heap();
        heap::release_unused_text();
        // After an in-place upgrade, READY=1 again ends the reload it announced; at any other
        // time systemd takes it as the status it carries.
        upward.ready(&task::ready_status(
            &self.handle.config(),
            &self.handle.rpz_loads().borrow(),
        ));
        Ok(())
    }
}

/// Say in the log that serving began: the first incarnation's start-up time, or that a
/// successor serves the API again.
fn announce_serving(incarnation: Incarnation, number: u32, began: std::time::Instant) {
    match incarnation {
        Incarnation::Successor => tracing::warn!(
            incarnation = number,
            "manager process restarted; serving the API again"
        ),
        Incarnation::First => tracing::info!(
            "Manager fully initialized and running in {:.3} seconds",
            began.elapsed().as_secs_f64()
        ),
    }
}

impl Effects for Running {
    async fn carry_out(&mut self, action: Action) -> Option<ManagerEvent> {
        match action {
            Action::Tell(notice) => notice.log(),
            Action::Reload => {
                if !self.handle.request_reload() {
                    tracing::warn!("a reload is already queued; SIGHUP ignored");
                }
            }
            Action::BeginServing => {
                if let Err(e) = self.begin_serving() {
                    tracing::error!("management API: {e}");
                    return Some(ManagerEvent::ServingFailed);
                }
            }
            Action::GiveUpTask => self.stop.cancel(),
            Action::AskRootToStop { code } => {
                let _ = self.parent.exit(code).await;
            }
        }
        None
    }
}

/// The query log: its socket bound (when the configuration has it on) before the manager
/// task starts any worker, for the workers' user (`run_as`, else ours); its socket and its
/// settings following the configuration (the manager task binds it before the workers of a
/// configuration with the log on start, `Intake::prepare`). A socket that cannot be bound
/// leaves the log empty (logged, and said by its status); the workers serve without it.
fn start_query_log(
    handle: &ManagerHandle,
    parent: &Parent,
    tasks: &TaskTracker,
    stop: &CancellationToken,
    run_as: Option<supervisor::Credentials>,
) -> (crate::query_log::QueryLog, crate::query_log::intake::Intake) {
    use crate::query_log::access::Access;
    use crate::query_log::intake::Intake;
    use crate::query_log::{QueryLog, Settings};
    let settings_of = |loaded: &LoadedConfig| Settings::of(&loaded.model.monitoring.query_log);
    let mut configs = handle.subscribe();
    let first = configs.borrow_and_update().clone();
    let log = QueryLog::new(settings_of(&first));
    // A batch's worker is its sender's, by the pid the kernel tells, in the process table.
    let table = parent.handle.subscribe();
    let worker_of = move |pid: i32| {
        let table = table.borrow();
        let process = table.processes.iter().find(|p| p.pid == Some(pid))?;
        crate::service::WorkerId::from_name(&process.name).map(|w| w.0)
    };
    let intake = Intake::new(
        log.clone(),
        Access::for_workers(run_as),
        Arc::new(worker_of),
        tasks.clone(),
        stop.child_token(),
    );
    intake.follow(&first.model);
    let follower = log.clone();
    let following = intake.clone();
    let stop = stop.child_token();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = configs.changed() => if changed.is_err() { return },
            }
            let loaded = configs.borrow_and_update().clone();
            // Turned off: nothing is read any more before the ring is emptied.
            following.follow(&loaded.model);
            follower.configure(settings_of(&loaded));
        }
    });
    (log, intake)
}

/// The event log of this process, with its first events: the start, and the last upgrade
/// when this is the first incarnation after it.
/// Fault injection as `KRES_FAULT_INJECTION` asks (tests of recovery only), read once.
struct Faults {
    /// Whether the routes that make this process fail are served.
    api: api::fault::FaultInjection,
    /// `slow-keeper`: how long each changed configuration waits before it is kept, to prove
    /// that answers wait for it.
    keep_delay: Option<std::time::Duration>,
}

impl Faults {
    fn injected(env: &Environment) -> Faults {
        let asked = env.fault_injection.clone();
        Faults {
            api: match asked {
                Some(_) => api::fault::FaultInjection::On,
                None => api::fault::FaultInjection::Off,
            },
            keep_delay: asked
                .filter(|v| v.contains("slow-keeper"))
                .map(|_| std::time::Duration::from_secs(2)),
        }
    }
}

/// This incarnation's event log, with its start (and an upgrade's outcome) told, and the
/// process table followed into it from the first table on (until `stop`): a first
/// incarnation's followers can resume into its start-up.
fn start_event_log(
    parent: &Parent,
    upgrade: Option<&kres_wire::upgrade::UpgradeRecord>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> EventLog {
    let events = EventLog::new(&events_epoch(parent.incarnation));
    events.publish(crate::events::Event::ManagerStarted {
        incarnation: parent.incarnation,
    });
    if let Some(record) = upgrade.filter(|r| r.first_incarnation == parent.incarnation) {
        events.publish(crate::events::Event::Upgrade {
            generation: record.generation,
            outcome: record.outcome,
            from: record.from.clone(),
            to: record.to.clone(),
            error: record.error.clone(),
        });
    }
    tasks.spawn(crate::events::follow_processes(
        parent.handle.subscribe(),
        events.clone(),
        stop.child_token(),
    ));
    events
}

/// The node's place in its fleet, when its configuration has `fleet` (a password file that
/// cannot be read leaves it out of the fleet, said in the log).
fn membership(
    handle: &ManagerHandle,
    source: kres_config::ConfigSource,
) -> Option<Arc<crate::fleet::Membership>> {
    let fleet = handle.config().model.fleet.clone()?;
    crate::fleet::Membership::of(&fleet, source)
        .map_err(|e| tracing::error!("fleet: not following the fleet: {e}"))
        .ok()
}

/// The manager task, run with `ctx` under supervision (restarted with backoff after a panic,
/// its health told to `health`) on `tasks` until `stop`.
fn spawn_task(
    ctx: ManagerContext,
    health: watch::Sender<TaskHealth>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<Option<task::ManagerExit>> {
    tasks.spawn(supervise_task(
        "manager",
        task_backoff(),
        health,
        stop.clone(),
        move |inc| task::run(ctx.clone(), inc.number),
    ))
}

/// The events of the manager task (its first start, or its failures before; its end), of
/// the API's `/stop` and of the link to the root.
fn task_events(
    task: tokio::task::JoinHandle<Option<task::ManagerExit>>,
    mut started: watch::Receiver<bool>,
    mut health: watch::Receiver<TaskHealth>,
    stop: &CancellationToken,
    parent: &Parent,
) -> impl Stream<Item = ManagerEvent> + Unpin {
    let start = async move {
        tokio::select! {
            r = started.wait_for(|s| *s) => r.ok().map(|_| ManagerEvent::TaskStarted),
            r = health.wait_for(|h| h.failures >= START_MAX_FAILURES) => {
                r.ok().map(|h| ManagerEvent::StartGivenUp { failures: h.failures })
            }
        }
    };
    let stopped = stop.clone();
    let ended = async move {
        let end = TaskEnd::of(task.await);
        // An end after a stop was asked is the stop's doing.
        let end = if stopped.is_cancelled() {
            TaskEnd::Stopped
        } else {
            end
        };
        Some(ManagerEvent::TaskEnded(end))
    };
    let stop = stop.clone();
    let asked = async move {
        stop.cancelled().await;
        Some(ManagerEvent::StopAsked)
    };
    let gone = parent.gone.clone();
    let gone = async move {
        gone.cancelled().await;
        Some(ManagerEvent::RootGone)
    };
    let sources: [BoxStream<'static, Option<ManagerEvent>>; 4] = [
        stream::once(start).boxed(),
        stream::once(ended).boxed(),
        stream::once(asked).boxed(),
        stream::once(gone).boxed(),
    ];
    stream::select_all(sources).filter_map(std::future::ready)
}

/// The version of the kresd the workers run, or why it is unknown: the one an earlier
/// manager process learned, else `kresd --version`, run here once (on a thread of its own,
/// bounded in time and output) before anything else starts, and kept in the root's fd store
/// for the successors, so no incarnation but the first runs it.
pub async fn learn_kresd_version(
    restored: &Restored,
    env: &Environment,
) -> Result<String, KresdVersionError> {
    if let Some(version) = &restored.kresd_version {
        return Ok(version.clone());
    }
    let program = Executables::discover(env).kresd;
    let version =
        tokio::task::spawn_blocking(move || crate::manager::executables::kresd_version(&program))
            .await??;
    match supervisor::os::sealed_memfd("knot-resolver-kresd-version", version.as_bytes()) {
        Ok(fd) => {
            if let Err(e) = restored
                .parent
                .store(super::super::recovery::STORED_KRESD_VERSION, &fd)
                .await
            {
                tracing::warn!("cannot keep kresd's version for the next manager process: {e}");
            }
        }
        Err(e) => tracing::warn!("cannot keep kresd's version for the next manager process: {e}"),
    }
    Ok(version)
}

/// Why kresd's version is unknown.
#[derive(Debug, thiserror::Error)]
pub enum KresdVersionError {
    /// `kresd --version` did not tell it.
    #[error(transparent)]
    Asked(#[from] crate::manager::executables::VersionError),
    /// The thread that asked was lost (the runtime stops).
    #[error(transparent)]
    Lost(#[from] tokio::task::JoinError),
}

/// Say, in one line, what runs: our version and kresd's, the configuration files, and who
/// the manager process and the workers run as. kresd's version, for the API, once known.
fn announce(
    executables: &Executables,
    kresd: Result<String, KresdVersionError>,
    files: &[std::path::PathBuf],
    parent: &Parent,
) -> Arc<std::sync::OnceLock<String>> {
    let incarnation = parent.incarnation;
    let text = match &kresd {
        Ok(version) => format!("kresd {version} ({})", executables.kresd.display()),
        Err(e) => format!("kresd of unknown version ({e})"),
    };
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let manager_uid = nix::unistd::geteuid().as_raw();
    let workers = executables.run_as.map_or(manager_uid, |c| c.uid);
    tracing::info!(
        incarnation,
        "knot-resolver {} driving {text}; configuration {}; manager process as {}, workers as {}",
        crate::build_version(),
        files.join(", "),
        user_name(manager_uid),
        user_name(workers),
    );
    Arc::new(
        kresd
            .ok()
            .map(std::sync::OnceLock::from)
            .unwrap_or_default(),
    )
}

/// `name (uid)`, or the uid alone when the user database does not name it.
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("user {} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// The epoch of the event ids of this manager process: its incarnation and its start
/// (microseconds since the Unix epoch, in hex), so ids of an earlier incarnation, or of an
/// earlier run of the resolver, are never taken for ours.
fn events_epoch(incarnation: u32) -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!("{incarnation}.{started:x}")
}

/// Tell the service manager above us when the manager task fails and when it runs again: the
/// workers serve meanwhile, and changes wait.
async fn report_task_health(
    mut health: watch::Receiver<TaskHealth>,
    upward: supervisor::upward::UpwardNotifier,
    handle: ManagerHandle,
) {
    loop {
        if health.changed().await.is_err() {
            return;
        }
        let h = health.borrow_and_update().clone();
        if h.failures == 0 {
            continue;
        }
        match h.next_attempt {
            Some(_) => upward.status(&format!(
                "Manager task restarting after {} failures within {} s; workers serving",
                h.failures,
                h.streak_age().as_secs()
            )),
            None => upward.status(&task::ready_status(
                &handle.config(),
                &handle.rpz_loads().borrow(),
            )),
        }
    }
}

/// Tell the service manager above us when RPZ zones kept by zone transfer break or load
/// again: the status line names the zones kresd cannot load.
async fn report_rpz_loads(upward: supervisor::upward::UpwardNotifier, handle: ManagerHandle) {
    let mut loads = handle.rpz_loads();
    let mut told = loads
        .borrow_and_update()
        .broken
        .keys()
        .cloned()
        .collect::<Vec<_>>();
    while loads.changed().await.is_ok() {
        let now = loads.borrow_and_update().clone();
        let broken: Vec<String> = now.broken.keys().cloned().collect();
        if broken != told {
            upward.status(&task::ready_status(&handle.config(), &now));
            told = broken;
        }
    }
}

/// Keep every configuration that is applied in the root's fd store, and publish each one
/// kept (or given up on, which is logged) in `kept`; `delay` (fault injection) holds back
/// every changed one.
async fn keep_config(
    parent: Arc<Parent>,
    mut config: watch::Receiver<Arc<LoadedConfig>>,
    rendered: api::config::RenderedCache,
    kept: watch::Sender<Option<Arc<LoadedConfig>>>,
    delay: Option<std::time::Duration>,
) {
    let mut first = true;
    loop {
        let current = config.borrow_and_update().clone();
        // The same bytes `GET /v1/config` serves: rendered once per version, for both. The
        // first version right here (the first request after READY would make it anyway);
        // a changed one off the runtime's thread: a large configuration takes tens of
        // milliseconds, which the runtime's other requests must not wait for (the answer to
        // the change waits until it is kept).
        let version = if first {
            first = false;
            Ok(rendered.get(&current))
        } else {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            let rendered = rendered.clone();
            let current = current.clone();
            tokio::task::spawn_blocking(move || rendered.get(&current)).await
        };
        let stored = match version {
            Ok(version) => supervisor::os::sealed_memfd("knot-resolver-config", &version.json),
            Err(e) => Err(std::io::Error::other(e)),
        };
        match stored {
            Ok(fd) => {
                if let Err(e) = parent.store(STORED_CONFIG, &fd).await {
                    tracing::warn!("cannot keep the configuration for a restart: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot keep the configuration for a restart: {e}"),
        }
        kept.send_replace(Some(current));
        if config.changed().await.is_err() {
            return;
        }
    }
}

/// `task` until `stop`: a helper that follows the configuration or the manager ends with the
/// process's stop, which waits for it.
async fn until(
    stop: CancellationToken,
    task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = task => {}
    }
}

/// The workers' sockets the root kept, as a table whose changes are mirrored into the root's
/// fd store (on `tasks`, until `stop`).
fn mirrored_table(
    parent: &Arc<Parent>,
    sockets: Vec<(String, OwnedFd)>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> SocketTable {
    let (mirror_tx, mirror_rx) = mpsc::unbounded_channel();
    tasks.spawn(mirror_sockets(
        parent.clone(),
        mirror_rx,
        stop.child_token(),
    ));
    SocketTable::restore(sockets, Some(mirror_tx))
}

/// Mirror the socket table's changes into the root's fd store, until the table is gone or
/// `stop` (then the changes already made are mirrored still, and no more are waited for).
async fn mirror_sockets(
    parent: Arc<Parent>,
    mut changes: mpsc::UnboundedReceiver<Mirrored>,
    stop: CancellationToken,
) {
    loop {
        let change = tokio::select! {
            biased;
            change = changes.recv() => change,
            () = stop.cancelled() => changes.try_recv().ok(),
        };
        let Some(change) = change else {
            return;
        };
        let result = match &change {
            Mirrored::Keep(name, fd) => parent.store(name, fd).await,
            Mirrored::Forget(name) => parent.forget(name).await,
        };
        if let Err(e) = result {
            tracing::warn!("cannot keep the listening sockets for a restart: {e}");
        }
    }
}

/// Cancel `stop` and wait for every task on `tasks`, at most `bound`: how many are still
/// running then.
async fn stop_tasks(
    stop: &CancellationToken,
    tasks: &TaskTracker,
    bound: std::time::Duration,
) -> usize {
    stop.cancel();
    tasks.close();
    // Those still running after the bound are told in the log and end with the process.
    let _ = tokio::time::timeout(bound, tasks.wait()).await;
    tasks.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_stop_waits_for_the_tasks_that_end_with_it_and_counts_the_others() {
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        let (ended_tx, mut ended) = mpsc::unbounded_channel();
        for _ in 0..3 {
            let (token, ended_tx) = (stop.child_token(), ended_tx.clone());
            tasks.spawn(async move {
                token.cancelled().await;
                let _ = ended_tx.send(());
            });
        }
        assert_eq!(stop_tasks(&stop, &tasks, TASKS_STOP_BOUND).await, 0);
        assert!(tasks.is_closed() && tasks.is_empty());
        drop(ended_tx);
        let mut count = 0;
        while ended.recv().await.is_some() {
            count += 1;
        }
        assert_eq!(count, 3, "every task ran to its end");

        // A task that does not heed the stop is left after the bound, and told.
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        let token = stop.child_token();
        tasks.spawn(async move { token.cancelled().await });
        tasks.spawn(std::future::pending::<()>());
        let began = tokio::time::Instant::now();
        assert_eq!(stop_tasks(&stop, &tasks, TASKS_STOP_BOUND).await, 1);
        assert_eq!(began.elapsed(), TASKS_STOP_BOUND);
    }
}
