//! The manager as its own process: `knot-resolver --manager-process …`, started and
//! supervised by the root process (`daemon`). Everything that parses untrusted input runs
//! here: configuration files on reload, API requests, watched files; so does the config-change
//! pipeline. It commands the root's supervisor through a `supervisor::remote` link on
//! descriptor [`LINK_FD`], and keeps in the root's fd store what its next incarnation needs:
//! the API's listening socket (stored by the root), the running configuration (a sealed
//! memfd) and the workers' listening sockets. A crash here loses nothing: the next incarnation
//! adopts the running workers and serves the API socket the root kept open.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use futures_util::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook_tokio::Signals;
use supervisor::remote::{Link, Parent};
use supervisor::task::{supervise_task, TaskHealth};
use supervisor::Backoff;
use tokio::sync::{mpsc, watch, Mutex};
use tokio_util::sync::CancellationToken;

use super::logging::Logging;
use super::{
    resolve_user, LogArgs, FAULT_INJECTION_VAR, LINK_FD, MANAGER_FLAG, STORED_API, STORED_CONFIG,
};
use crate::api::{self, ApiState};
use crate::config::{self, LoadedConfig, ValidationContext};
use crate::events::EventLog;
use crate::manager::listen::{Mirrored, SocketOwner, SocketTable, STORED_PREFIX};
use crate::manager::task::{self, ManagerContext, ManagerExit};
use crate::manager::{Executables, ManagerHandle};
use crate::watchdog::ConfigFiles;

/// The manager process's name (`comm`).
pub const PROCESS_NAME: &std::ffi::CStr = c"kres-manager";

/// The largest stored configuration read back.
const MAX_STORED_CONFIG: u64 = 512 << 20;

/// Manager-task failures (panics, errors) before its first start completed after which this
/// process gives up and the resolver stops: nothing runs yet that could be kept. Once the
/// start completed, the task is restarted whatever happens (backing off), never given up.
const START_MAX_FAILURES: u32 = 5;

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

/// What the manager process is told on its command line (the daemon's own arguments).
pub struct ManagerInvocation {
    /// The configuration files, as given.
    pub files: Vec<PathBuf>,
    pub socket_owner: SocketOwner,
    /// `--worker-user` or its environment form.
    pub worker_user: Option<String>,
    /// The groups of the API's roles on its unix socket.
    pub api_groups: super::ApiGroupNames,
    pub log: LogArgs,
    /// `--watch-config`: reload when a configuration file changes.
    pub watch_config: bool,
    /// `--worker-hang-timeout`: how long a worker may leave its control socket unanswered
    /// before it is killed; `None`: never.
    pub worker_hang_timeout: Option<std::time::Duration>,
}

/// Run as the manager process. Returns the exit code.
pub fn run(invocation: ManagerInvocation) -> ExitCode {
    let ManagerInvocation {
        files,
        socket_owner,
        worker_user,
        api_groups,
        log,
        watch_config,
        worker_hang_timeout,
    } = invocation;
    let logging = Logging::init(log.level, log.target, &PROCESS_NAME.to_string_lossy());
    // `ps` and `top` show the manager by this name rather than the `exe` it was started as.
    let _ = nix::sys::prctl::set_name(PROCESS_NAME);
    limit_resources();
    let link = match supervisor::os::take_inherited_fd(LINK_FD) {
        Ok(fd) => fd,
        Err(_) => {
            eprintln!("knot-resolver: {MANAGER_FLAG} is started by knot-resolver itself");
            return ExitCode::from(2);
        }
    };
    let files: Vec<PathBuf> = files
        .into_iter()
        .map(|p| std::path::absolute(&p).unwrap_or(p))
        .collect();
    let watched = if watch_config {
        ConfigFiles::Watched(files.clone())
    } else {
        ConfigFiles::Unwatched
    };
    let source = config::ConfigSource {
        files,
        checks: config::PathChecks::Manager,
        logtarget_arg: config::LogTargetArg::Given(log.target),
    };
    crate::block_on(
        "knot-resolver manager",
        serve(
            link,
            source,
            Watches {
                config: watched,
                hang_timeout: worker_hang_timeout,
            },
            socket_owner,
            worker_user,
            api_groups,
            logging,
        ),
    )
}

/// What the manager watches besides its API: files, and the workers' answers.
struct Watches {
    config: ConfigFiles,
    hang_timeout: Option<std::time::Duration>,
}

async fn serve(
    link: OwnedFd,
    source: config::ConfigSource,
    watches: Watches,
    socket_owner: SocketOwner,
    worker_user: Option<String>,
    api_groups: super::ApiGroupNames,
    logging: Option<&'static Logging>,
) -> ExitCode {
    let started_at = std::time::Instant::now();
    let parent = match Link::from_fd(link) {
        Ok(link) => Parent::connect(link).await,
        Err(e) => Err(e),
    };
    let mut parent = match parent {
        Ok(p) => p,
        Err(e) => {
            eprintln!("knot-resolver manager: {e}");
            return ExitCode::from(1);
        }
    };
    let mut stored: BTreeMap<String, OwnedFd> =
        std::mem::take(&mut parent.stored).into_iter().collect();
    let adopting = parent.incarnation > 1;
    let loaded = match stored
        .remove(STORED_CONFIG)
        .map(|fd| restore_config(fd, &source))
    {
        Some(Ok(loaded)) => Ok(loaded),
        Some(Err(e)) => {
            // Never seen; the files are the next best thing to adopt the workers with.
            eprintln!("knot-resolver: {e}; adopting the workers with the configuration files");
            source.load().map_err(|e| e.to_string())
        }
        None => source.load().map_err(|e| e.to_string()),
    };
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            eprintln!("knot-resolver: {e}");
            if !adopting {
                // Nothing runs yet: the resolver cannot start.
                let _ = parent.exit(1).await;
            }
            return ExitCode::from(1);
        }
    };
    if let Some(logging) = logging {
        logging.configure_manager(&loaded.model.logging);
    }
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let rundir = loaded.model.rundir.clone();
    if let Err(e) = std::env::set_current_dir(&rundir) {
        tracing::error!("cannot use rundir {}: {e}", rundir.display());
        let _ = parent.exit(1).await;
        return ExitCode::from(1);
    }
    let run_as = match worker_user.as_deref().map(resolve_user).transpose() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("--worker-user: {e}");
            let _ = parent.exit(1).await;
            return ExitCode::from(1);
        }
    };
    let api_socket = stored.remove(STORED_API);
    let upgrade = stored
        .remove(super::upgrade::STORED_UPGRADE)
        .and_then(|fd| read_record(fd, crate::wire::upgrade::MAX_RECORD))
        .and_then(|bytes| crate::wire::upgrade::UpgradeRecord::parse(&bytes))
        .map(Arc::new);
    let process_failures = stored
        .remove(super::recovery::STORED_FAILURES)
        .and_then(|fd| read_record(fd, crate::api::failures::MAX_RECORD))
        .and_then(|bytes| crate::api::failures::ProcessFailureRecord::parse(&bytes))
        .map(Arc::new);
    let reload_bell = stored.remove(super::recovery::STORED_RELOAD);
    let tcp_guard = api::guard::TcpGuard::from_env(
        loaded
            .model
            .management
            .interface
            .as_ref()
            .map(|i| i.socket_addr()),
    );
    let guard = tcp_guard.and_then(|tcp| {
        let groups = api_groups.resolve(&loaded.model.management)?;
        let own_uid = nix::unistd::geteuid().as_raw();
        Ok(api::guard::Guard {
            tcp,
            unix: api::roles::UnixRoles::new(groups, own_uid),
        })
    });
    let guard = match guard {
        Ok(g) => g,
        Err(e) => {
            tracing::error!("{e}");
            if !adopting {
                let _ = parent.exit(1).await;
            }
            return ExitCode::from(1);
        }
    };
    let sockets: Vec<(String, OwnedFd)> = stored
        .into_iter()
        .filter(|(name, _)| name.starts_with(STORED_PREFIX))
        .collect();
    let parent = Arc::new(parent);
    let (mirror_tx, mirror_rx) = mpsc::unbounded_channel();
    tokio::spawn(mirror_sockets(parent.clone(), mirror_rx));
    let table = SocketTable::restore(sockets, Some(mirror_tx));
    let management = loaded.model.management.clone();
    let validation = source.context();
    let (config_tx, config_rx) = watch::channel(Arc::new(loaded));
    let (command_tx, command_rx) = mpsc::channel(16);
    let (health_tx, mut health_rx) = watch::channel(TaskHealth::default());
    let handle = ManagerHandle::new(command_tx, config_rx).with_health(health_rx.clone());
    let (started_tx, mut started_rx) = watch::channel(adopting);
    let stop = CancellationToken::new();
    let events = EventLog::new(&events_epoch(parent.incarnation));
    events.publish(crate::events::Event::ManagerStarted {
        incarnation: parent.incarnation,
    });
    if let Some(record) = upgrade.as_deref() {
        if record.first_incarnation == parent.incarnation {
            events.publish(crate::events::Event::Upgrade {
                generation: record.generation,
                outcome: record.outcome,
                from: record.from.clone(),
                to: record.to.clone(),
                error: record.error.clone(),
            });
        }
    }
    // From the first table on: a first incarnation's followers can resume into its start-up.
    tokio::spawn(crate::events::follow_processes(
        parent.handle.subscribe(),
        events.clone(),
        stop.child_token(),
    ));
    let upward = parent.upward.clone();
    let ctx = ManagerContext {
        supervisor: parent.handle.clone(),
        executables: Executables {
            run_as,
            ..Executables::discover()
        },
        source,
        config: config_tx,
        commands: Arc::new(Mutex::new(command_rx)),
        started: started_tx,
        upward: upward.clone(),
        stop: stop.clone(),
        socket_owner,
        sockets: Arc::new(std::sync::Mutex::new(table)),
        events: events.clone(),
    };
    let mut manager = tokio::spawn(supervise_task(
        "manager",
        task_backoff(),
        health_tx,
        stop.clone(),
        move |inc| task::run(ctx.clone(), inc.number),
    ));
    // Ask the root to stop everything with `code`, then wait for it to stop us.
    let mut exit_requested = None;
    // A SIGHUP during start-up is a reload once started (the files may have changed since
    // they were read), never a reason to stop.
    let mut reload_once_started = false;
    let started = loop {
        break tokio::select! {
            r = started_rx.wait_for(|s| *s) => match r {
                Ok(_) => true,
                Err(_) => {
                    // The task dropped its side: it has ended; learn how.
                    exit_requested = Some(report_manager_end((&mut manager).await));
                    false
                }
            },
            r = &mut manager => {
                exit_requested = Some(report_manager_end(r));
                false
            }
            r = health_rx.wait_for(|h| h.failures >= START_MAX_FAILURES) => {
                match r.map(|h| h.failures) {
                    Ok(failures) => {
                        tracing::error!("the manager task failed {failures} times before it completed the start; stopping");
                        // Nothing runs yet that could be kept: end the supervision, stop the
                        // resolver.
                        stop.cancel();
                        exit_requested = Some(1);
                    }
                    // The supervision ended (its health went with it): learn how.
                    Err(_) => exit_requested = Some(report_manager_end((&mut manager).await)),
                }
                false
            }
            () = parent.gone.cancelled() => return ExitCode::from(1),
            Some(sig) = signals.next() => {
                if sig == SIGHUP {
                    tracing::info!("SIGHUP received during start-up; reloading once started");
                    reload_once_started = true;
                    continue;
                }
                tracing::warn!(signal = sig, "signal received during start-up; stopping");
                return ExitCode::SUCCESS;
            }
        };
    };
    let mut api_task = None;
    let mut watchdog_task = None;
    if started {
        tokio::spawn(keep_config(parent.clone(), handle.subscribe()));
        tokio::spawn(report_task_health(
            health_rx.clone(),
            upward.clone(),
            handle.clone(),
        ));
        if let Some(bell) = reload_bell {
            tokio::spawn(super::recovery::answer_reloads(bell, handle.clone()));
        }
        if reload_once_started && !handle.request_reload() {
            tracing::warn!("a reload is already queued; SIGHUP ignored");
        }
        if let Some(logging) = logging {
            tokio::spawn(logging.follow(handle.subscribe()));
        }
        if let Some(deadline) = watches.hang_timeout {
            // Ends with `stop`; nothing to wait for.
            crate::manager::liveness::start(
                parent.handle.clone(),
                handle.clone(),
                deadline,
                stop.child_token(),
            );
        }
        watchdog_task = Some(crate::watchdog::start(
            handle.clone(),
            watches.config,
            stop.child_token(),
        ));
        let state = ApiState {
            supervisor: parent.handle.clone(),
            stop: stop.clone(),
            manager: handle.clone(),
            fault_injection: std::env::var_os(FAULT_INJECTION_VAR).is_some(),
            validation,
            rendered: Default::default(),
            guard: Arc::new(guard),
            upgrade,
            process_failures,
            events,
        };
        let router = api::app(state);
        let listener = api_socket
            .ok_or_else(|| "the root process kept no API socket".to_string())
            .and_then(|fd| {
                api::server::Listener::from_fd(fd, &management).map_err(|e| e.to_string())
            });
        match listener {
            Ok(listener) => {
                api_task = Some(tokio::spawn(api::server::serve(
                    listener,
                    router,
                    stop.child_token(),
                )));
                if adopting {
                    tracing::warn!(
                        incarnation = parent.incarnation,
                        "manager process restarted; serving the API again"
                    );
                    // READY=1 again ends the reload an in-place upgrade announced; at any
                    // other time systemd takes it as the status it carries.
                    upward.ready(&crate::manager::task::ready_status(&handle.config()));
                } else {
                    tracing::info!(
                        "Manager fully initialized and running in {:.3} seconds",
                        started_at.elapsed().as_secs_f64()
                    );
                    upward.ready(&crate::manager::task::ready_status(&handle.config()));
                }
            }
            Err(e) => {
                tracing::error!("management API: {e}");
                exit_requested = Some(1);
            }
        }
    }
    if let Some(code) = exit_requested {
        let _ = parent.exit(code).await;
    }
    let mut manager_done = !started;
    loop {
        tokio::select! {
            Some(sig) = signals.next() => match sig {
                SIGHUP => {
                    tracing::info!("SIGHUP received; reloading the configuration files");
                    // The manager reports the outcome (log, RELOADING/READY upward); signals
                    // keep being handled meanwhile.
                    if !handle.request_reload() {
                        tracing::warn!("a reload is already queued; SIGHUP ignored");
                    }
                }
                // The root stops us: finish what the API is doing and go.
                _ => break,
            },
            () = stop.cancelled(), if exit_requested.is_none() => {
                // `POST /stop`: the root stops everything, us first.
                exit_requested = Some(0);
                let _ = parent.exit(0).await;
            }
            r = &mut manager, if !manager_done => {
                manager_done = true;
                if exit_requested.is_none() && !stop.is_cancelled() {
                    let code = report_manager_end(r);
                    exit_requested = Some(code);
                    let _ = parent.exit(code).await;
                }
            }
            () = parent.gone.cancelled() => break,
        }
    }
    stop.cancel();
    if let Some(task) = api_task {
        let _ = task.await;
    }
    if let Some(task) = watchdog_task {
        let _ = task.await;
    }
    ExitCode::SUCCESS
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

/// Bound what a runaway manager can take from the machine: its address space (an allocation
/// beyond aborts it, and the root starts another), and the OOM killer picks it before any
/// worker.
fn limit_resources() {
    use nix::sys::resource::{setrlimit, Resource};
    let mib = std::env::var(MEMORY_MAX_VAR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_MEMORY_MAX_MIB);
    let bytes = mib.saturating_mul(1 << 20);
    if let Err(e) = setrlimit(Resource::RLIMIT_AS, bytes, bytes) {
        eprintln!("knot-resolver manager: cannot limit its address space: {e}");
    }
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", OOM_SCORE_ADJ) {
        eprintln!("knot-resolver manager: cannot set its OOM score: {e}");
    }
    // The workers may run as our user: none of them may attach to us (ptrace) or read our
    // memory through /proc. Last, since it also makes our own /proc files root's.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("knot-resolver manager: cannot make itself undumpable: {e}");
    }
}

/// The manager's address-space limit in MiB (`KRES_MANAGER_MEMORY_MAX`); generous for
/// configurations of millions of entries, far below what a runaway request would take.
const DEFAULT_MEMORY_MAX_MIB: u64 = 4096;

/// Environment variable overriding [`DEFAULT_MEMORY_MAX_MIB`].
pub const MEMORY_MAX_VAR: &str = "KRES_MANAGER_MEMORY_MAX";

/// The manager's OOM score adjustment: the OOM killer takes it before any worker.
const OOM_SCORE_ADJ: &str = "500";

/// Read the configuration a previous incarnation stored; it was valid then, so paths are not
/// checked again (a file that vanished meanwhile must not stop the adoption).
fn restore_config(fd: OwnedFd, source: &config::ConfigSource) -> Result<LoadedConfig, String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd);
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read the stored configuration: {e}"))?
        .len();
    if len > MAX_STORED_CONFIG {
        return Err(format!("the stored configuration has {len} bytes"));
    }
    // Read at explicit offsets: the file position is shared with every copy of the descriptor.
    let mut bytes = vec![0u8; usize::try_from(len).map_err(|e| e.to_string())?];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("cannot read the stored configuration: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|e| e.to_string())?;
    let raw: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("the stored configuration is damaged: {e}"))?;
    let ctx = ValidationContext {
        checks: crate::config::PathChecks::Lenient,
        ..source.context()
    };
    let model = config::validate(&raw, &ctx).map_err(|e| e.to_string())?;
    Ok(LoadedConfig { raw, model })
}

/// The bytes of a record the root stored (at most `max`); `None` when it cannot be read.
fn read_record(fd: OwnedFd, max: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd);
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len > max {
        return None;
    }
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0).ok()?;
    Some(bytes)
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
            None => upward.status(&crate::manager::task::ready_status(&handle.config())),
        }
    }
}

/// Keep every configuration that is applied in the root's fd store.
async fn keep_config(parent: Arc<Parent>, mut config: watch::Receiver<Arc<LoadedConfig>>) {
    loop {
        let raw = config.borrow_and_update().raw.clone();
        let stored = serde_json::to_vec(&raw)
            .map_err(std::io::Error::other)
            .and_then(|bytes| supervisor::os::sealed_memfd("knot-resolver-config", &bytes));
        match stored {
            Ok(fd) => {
                if let Err(e) = parent.store(STORED_CONFIG, &fd).await {
                    tracing::warn!("cannot keep the configuration for a restart: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot keep the configuration for a restart: {e}"),
        }
        if config.changed().await.is_err() {
            return;
        }
    }
}

/// Mirror the socket table's changes into the root's fd store.
async fn mirror_sockets(parent: Arc<Parent>, mut changes: mpsc::UnboundedReceiver<Mirrored>) {
    while let Some(change) = changes.recv().await {
        let result = match &change {
            Mirrored::Keep(name, fd) => parent.store(name, fd).await,
            Mirrored::Forget(name) => parent.forget(name).await,
        };
        if let Err(e) = result {
            tracing::warn!("cannot keep the listening sockets for a restart: {e}");
        }
    }
}

/// Log how the manager task ended; the exit code the resolver should stop with.
fn report_manager_end(r: Result<Option<ManagerExit>, tokio::task::JoinError>) -> u8 {
    match r {
        Ok(Some(ManagerExit::StartFailed(e))) => {
            tracing::error!("start-up failed: {e}");
            1
        }
        Ok(Some(ManagerExit::Unstable { failed })) => {
            tracing::error!(
                "the resolver is unstable ({} failed); stopping",
                failed.join(", ")
            );
            1
        }
        Ok(Some(ManagerExit::Stopped) | None) => 0,
        Err(e) => {
            tracing::error!("manager supervision failed: {e}");
            1
        }
    }
}
