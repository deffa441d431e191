//! The `knot-resolver` daemon: the root of the process tree. It loads the configuration,
//! takes the rundir lock, starts the supervisor and the manager, serves the API, reports to
//! systemd, and turns signals into an orderly shutdown.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use futures_util::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook_tokio::Signals;
use supervisor::task::supervise_task;
use supervisor::upward::UpwardNotifier;
use supervisor::Backoff;
use supervisor::{Supervisor, SupervisorOptions};
use tokio::sync::{mpsc, watch, Mutex};
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::config::{self, LoadedConfig};
use crate::manager::listen::SocketOwner;
use crate::manager::task::{self, ManagerCommand, ManagerContext, ManagerExit};
use crate::manager::Executables;

/// The default configuration file, as upstream.
pub const DEFAULT_CONFIG: &str = "/etc/knot-resolver/config.yaml";

/// Name of the socket kresd workers send `READY=1` to, in the rundir.
pub const NOTIFY_SOCKET_NAME: &str = "supervisor-notify-socket";

/// Name of the rundir lock file.
pub const PID_FILE_NAME: &str = "knot-resolver.pid";

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("cannot use rundir {path}: {source}")]
    Rundir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another manager is running in {0} (pid {1})")]
    Locked(PathBuf, i32),
    #[error("cannot start: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Apply(#[from] crate::manager::ApplyError),
}

/// Parse, lock and run. Returns the process exit code.
pub fn run(
    config_files: Vec<PathBuf>,
    socket_owner: SocketOwner,
    worker_user: Option<String>,
) -> ExitCode {
    let files: Vec<PathBuf> = config_files
        .into_iter()
        .map(|p| std::path::absolute(&p).unwrap_or(p))
        .collect();
    let loaded = match config::load_files(&files, true) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("knot-resolver: {e}");
            return ExitCode::from(1);
        }
    };
    init_tracing(loaded.model.logging.level.as_str());
    let rundir = loaded.model.rundir.clone();
    if let Err(source) = std::env::set_current_dir(&rundir) {
        tracing::error!(
            "{}",
            DaemonError::Rundir {
                path: rundir,
                source
            }
        );
        return ExitCode::from(1);
    }
    let lock = match PidLock::acquire(&rundir) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let run_as = match worker_user.as_deref().map(resolve_user).transpose() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("--worker-user: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(serve(loaded, files, socket_owner, run_as));
    drop(lock);
    code
}

fn init_tracing(level: &str) {
    let level = match level {
        "crit" | "err" => "error",
        "warning" => "warn",
        "notice" | "info" => "info",
        "debug" => "debug",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KRES_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},child=info")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

async fn serve(
    loaded: LoadedConfig,
    files: Vec<PathBuf>,
    socket_owner: SocketOwner,
    run_as: Option<supervisor::Credentials>,
) -> ExitCode {
    let started_at = std::time::Instant::now();
    let upward = UpwardNotifier::from_env();
    upward.status("Initializing");
    if let Err(e) = supervisor::os::cloexec_inherited_fds(&[]) {
        tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
    }
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let rundir = loaded.model.rundir.clone();
    let (sup, sup_task) = match Supervisor::start(SupervisorOptions {
        notify_socket: rundir.join(NOTIFY_SOCKET_NAME),
    }) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start the supervisor: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(c) = run_as {
        // Children running as that user must be able to send READY=1 to our socket; the
        // kernel's credentials on each datagram still say which child sent it.
        if let Err(e) = std::os::unix::fs::chown(sup.notify_socket(), Some(c.uid), Some(c.gid)) {
            tracing::error!("cannot hand the notify socket to uid {}: {e}", c.uid);
            return ExitCode::from(1);
        }
    }
    let management = loaded.model.management.clone();
    let resolve_root = files
        .first()
        .and_then(|f| f.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let (config_tx, config_rx) = watch::channel(Arc::new(loaded));
    let (command_tx, command_rx) = mpsc::channel(16);
    let (started_tx, mut started_rx) = watch::channel(false);
    let stop = CancellationToken::new();
    let ctx = ManagerContext {
        supervisor: sup.clone(),
        executables: Executables {
            run_as,
            ..Executables::discover()
        },
        files,
        config: config_tx,
        commands: Arc::new(Mutex::new(command_rx)),
        started: started_tx,
        upward: upward.clone(),
        stop: stop.clone(),
        socket_owner,
        sockets: Default::default(),
    };
    let mut manager = tokio::spawn(supervise_task(
        "manager",
        Backoff::default(),
        MANAGER_MAX_FAILURES,
        stop.clone(),
        move |inc| task::run(ctx.clone(), inc.number),
    ));

    let mut exit = 0u8;
    let mut manager_done = false;
    let started = tokio::select! {
        r = started_rx.wait_for(|s| *s) => match r {
            Ok(_) => true,
            Err(_) => {
                // The manager dropped its side: it has ended; learn how.
                manager_done = true;
                exit = 1;
                report_manager_end((&mut manager).await);
                false
            }
        },
        r = &mut manager => {
            manager_done = true;
            exit = 1;
            report_manager_end(r);
            false
        }
        Some(sig) = signals.next() => {
            tracing::warn!(signal = sig, "signal received during start-up; stopping");
            false
        }
    };
    let mut api_task = None;
    let mut watchdog_task = None;
    if started {
        watchdog_task = Some(crate::watchdog::start(
            config_rx.clone(),
            command_tx.clone(),
            stop.child_token(),
        ));
        let state = ApiState {
            config: config_rx,
            supervisor: sup.clone(),
            stop: stop.clone(),
            manager: command_tx.clone(),
            fault_injection: std::env::var_os(FAULT_INJECTION_VAR).is_some(),
            resolve_root,
            rendered: Default::default(),
        };
        let router = api::app(state);
        let api_stop = stop.child_token();
        match api::server::Listener::bind(&management) {
            Ok(listener) => {
                let endpoint = listener.endpoint();
                tracing::info!("management API listening on {endpoint}");
                api_task = Some(tokio::spawn(api::server::serve(listener, router, api_stop)));
            }
            Err(e) => {
                // Upstream stops the whole resolver when the API cannot listen.
                tracing::error!("{e}");
                exit = 1;
                stop.cancel();
            }
        }
        if !stop.is_cancelled() {
            tracing::info!(
                "Manager fully initialized and running in {:.3} seconds",
                started_at.elapsed().as_secs_f64()
            );
            upward.ready("Ready");
        }
        let watchdog = upward.spawn_watchdog();
        loop {
            tokio::select! {
                Some(sig) = signals.next() => match sig {
                    SIGHUP => {
                        tracing::info!("SIGHUP received; reloading the configuration files");
                        let (reply, _result) = tokio::sync::oneshot::channel();
                        // The manager reports the outcome (log, RELOADING/READY upward); signals
                        // keep being handled meanwhile.
                        let _ = command_tx.send(ManagerCommand::Reload { force: false, reply }).await;
                    }
                    _ => {
                        tracing::info!(signal = sig, "stopping on signal");
                        break;
                    }
                },
                () = stop.cancelled() => {
                    if exit == 0 {
                        tracing::info!("stopping on API request");
                    }
                    break;
                }
                r = &mut manager, if !manager_done => {
                    manager_done = true;
                    if stop.is_cancelled() {
                        // It ended because a stop was requested (API): not a failure.
                        tracing::info!("stopping on API request");
                        break;
                    }
                    exit = 1;
                    report_manager_end(r);
                    tracing::error!("the manager cannot continue; stopping the resolver");
                    break;
                }
            }
        }
        if let Some(w) = watchdog {
            w.abort();
        }
    }
    upward.stopping("Stopping");
    stop.cancel();
    if !manager_done {
        let _ = manager.await;
    }
    if let Some(task) = api_task {
        let _ = task.await;
    }
    if let Some(task) = watchdog_task {
        let _ = task.await;
    }
    // Stop every process; a second SIGINT/SIGTERM kills them at once.
    let shutdown = sup.shutdown();
    tokio::pin!(shutdown);
    let report = loop {
        tokio::select! {
            r = &mut shutdown => break r,
            Some(sig) = signals.next() => {
                if sig != SIGHUP {
                    tracing::warn!(signal = sig, "second stop signal: killing all processes");
                    sup.kill_all();
                }
            }
        }
    };
    let _ = sup_task.await;
    crate::manager::remove_generated_files(&rundir);
    match report {
        Ok(r) if !r.unclean.is_empty() => {
            tracing::warn!(
                "processes that did not stop cleanly: {}",
                r.unclean.join(", ")
            );
            exit = 1;
        }
        Ok(_) => {}
        Err(e) => {
            tracing::error!("supervisor: {e}");
            exit = 1;
        }
    }
    tracing::info!("stopped");
    ExitCode::from(exit)
}

/// Consecutive manager-task failures before the resolver gives up and stops.
const MANAGER_MAX_FAILURES: u32 = 5;

/// Set (to anything) to enable `POST /debug/panic-manager`, for tests of manager recovery.
pub const FAULT_INJECTION_VAR: &str = "KRES_FAULT_INJECTION";

/// Set (to anything but `0` or empty) to let kresd bind its own listening sockets, like the
/// `--kresd-binds-sockets` flag.
pub const KRESD_BINDS_SOCKETS_VAR: &str = "KRES_KRESD_BINDS_SOCKETS";

/// Environment form of `--worker-user`.
pub const WORKER_USER_VAR: &str = "KRES_WORKER_USER";

/// The uid and gid of `name`, from the user database.
fn resolve_user(name: &str) -> Result<supervisor::Credentials, String> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(supervisor::Credentials {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }),
        Ok(None) => Err(format!("no user named {name:?}")),
        Err(e) => Err(format!("cannot look up user {name:?}: {e}")),
    }
}

fn report_manager_end(
    r: Result<Result<Option<ManagerExit>, supervisor::task::TaskGaveUp>, tokio::task::JoinError>,
) {
    match r {
        Ok(Ok(Some(ManagerExit::StartFailed(e)))) => tracing::error!("start-up failed: {e}"),
        Ok(Ok(Some(ManagerExit::Unstable { failed }))) => {
            tracing::error!(
                "the resolver is unstable ({} failed); stopping",
                failed.join(", ")
            )
        }
        Ok(Ok(Some(ManagerExit::Stopped) | None)) => {
            tracing::error!("the manager ended unexpectedly")
        }
        Ok(Err(e)) => tracing::error!("{e}"),
        Err(e) => tracing::error!("manager supervision failed: {e}"),
    }
}

/// The rundir lock: `knot-resolver.pid` created exclusively; a stale one (dead pid) is taken
/// over once. Removed on drop.
struct PidLock {
    path: PathBuf,
}

impl PidLock {
    fn acquire(rundir: &Path) -> Result<PidLock, DaemonError> {
        use std::io::Write;
        let path = rundir.join(PID_FILE_NAME);
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    writeln!(f, "{}", std::process::id())?;
                    return Ok(PidLock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    match text.trim().parse::<i32>() {
                        Ok(pid)
                            if pid > 0 && pid_alive(pid) && pid != std::process::id() as i32 =>
                        {
                            return Err(DaemonError::Locked(rundir.to_owned(), pid));
                        }
                        _ => {
                            tracing::warn!("removing stale lock {}", path.display());
                            std::fs::remove_file(&path)?;
                        }
                    }
                }
                Err(source) => {
                    return Err(DaemonError::Rundir {
                        path: rundir.to_owned(),
                        source,
                    })
                }
            }
        }
        Err(DaemonError::Locked(rundir.to_owned(), 0))
    }
}

fn pid_alive(pid: i32) -> bool {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

impl Drop for PidLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
