//! The `knot-resolver` daemon: the root of the process tree. It reads the operator's
//! configuration files once, at start-up, for what cannot change at run time (rundir, API
//! endpoint, log level), takes the rundir lock, owns the supervisor, the notify socket, the
//! API's listening socket and the upward sd_notify, and runs the manager as a supervised child
//! process (`manager::process`) that does everything else. Nothing that arrives later (API
//! requests, reloaded or watched files) is parsed here: if the manager crashes, overflows, is
//! killed or hangs, it is restarted and adopts the running workers.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook_tokio::Signals;
use supervisor::remote::{self, ChildEnd, ChildPolicy, ChildService, FdStore, Link};
use supervisor::upward::UpwardNotifier;
use supervisor::{
    Backoff, Output, Readiness, RestartPolicy, ServiceSpec, StopPolicy, Supervisor,
    SupervisorHandle, SupervisorOptions,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ManagementSchema};
use crate::manager::process::{LINK_FD, STORED_API};
use crate::manager::Executables;
use crate::service::{self, ServiceKind};

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
    Locked(PathBuf, String),
    #[error("cannot start: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Apply(#[from] crate::manager::ApplyError),
}

/// How the daemon was started: what the manager process is given too.
pub struct Invocation {
    /// The configuration files, as given.
    pub config_files: Vec<PathBuf>,
    /// `--worker-user` or its environment form.
    pub worker_user: Option<String>,
    /// Our command line after the program name, passed on to the manager process unchanged.
    pub args: Vec<OsString>,
}

/// Parse, lock and run. Returns the process exit code.
pub fn run(invocation: Invocation) -> ExitCode {
    let files: Vec<PathBuf> = invocation
        .config_files
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
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
    let management = loaded.model.management.clone();
    drop(loaded);
    let cwd = std::env::current_dir().ok();
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
    let lock = match RundirLock::acquire(&rundir) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let run_as = match invocation
        .worker_user
        .as_deref()
        .map(resolve_user)
        .transpose()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("--worker-user: {e}");
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
    let root = Root {
        rundir,
        management,
        run_as,
        manager_args: invocation.args,
        manager_cwd: cwd,
    };
    let code = runtime.block_on(root.serve());
    drop(lock);
    code
}

/// Log to stderr in one format for the root and the manager process (which shares the
/// root's stderr).
pub(crate) fn init_tracing(level: &str) {
    let level = match level {
        "crit" | "err" => "error",
        "warning" => "warn",
        "notice" | "info" => "info",
        "debug" => "debug",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KRES_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},child=info")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = builder.try_init();
}

/// A manager process that ran this long before it failed has its failure streak forgiven.
const MANAGER_STABLE_AFTER: Duration = Duration::from_secs(60);

/// A manager that answers no ping for this long is hung and replaced (override:
/// `KRES_MANAGER_HANG_TIMEOUT` in seconds, for tests).
const MANAGER_HANG_AFTER: Duration = Duration::from_secs(20);

/// How long the manager may take to stop (finishing API requests in flight) before SIGKILL.
const MANAGER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Set (to anything) to enable `POST /debug/panic-manager`, for tests of manager recovery.
pub const FAULT_INJECTION_VAR: &str = "KRES_FAULT_INJECTION";

/// Set (to anything but `0` or empty) to let kresd bind its own listening sockets, like the
/// `--kresd-binds-sockets` flag.
pub const KRESD_BINDS_SOCKETS_VAR: &str = "KRES_KRESD_BINDS_SOCKETS";

/// Environment form of `--worker-user`.
pub const WORKER_USER_VAR: &str = "KRES_WORKER_USER";

/// Seconds without an answer after which the manager counts as hung.
pub const MANAGER_HANG_VAR: &str = "KRES_MANAGER_HANG_TIMEOUT";

/// The root process: what it was told at start-up.
struct Root {
    rundir: PathBuf,
    management: ManagementSchema,
    run_as: Option<supervisor::Credentials>,
    /// Our arguments, for the manager process.
    manager_args: Vec<OsString>,
    /// Where we were started (relative paths on the command line resolve there).
    manager_cwd: Option<PathBuf>,
}

/// Why the root stops.
enum Stop {
    /// A signal (SIGINT/SIGTERM).
    Signal,
    /// The manager asked, with this exit code (API `/stop`: 0; start-up failure: 1).
    Requested(u8),
    /// The manager could not be kept running.
    ManagerFailed,
}

impl Root {
    async fn serve(self) -> ExitCode {
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
        let (sup, sup_task) = match Supervisor::start(SupervisorOptions {
            notify_socket: self.rundir.join(NOTIFY_SOCKET_NAME),
        }) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot start the supervisor: {e}");
                return ExitCode::from(1);
            }
        };
        if let Some(c) = self.run_as {
            // Children running as that user must be able to send READY=1 to our socket; the
            // kernel's credentials on each datagram still say which child sent it.
            if let Err(e) = std::os::unix::fs::chown(sup.notify_socket(), Some(c.uid), Some(c.gid))
            {
                tracing::error!("cannot hand the notify socket to uid {}: {e}", c.uid);
                return ExitCode::from(1);
            }
        }
        let mut store = FdStore::default();
        // The API socket is ours, so that clients wait in its backlog while the manager
        // restarts instead of being refused.
        let api_socket = match crate::api::server::Listener::bind(&self.management) {
            Ok(listener) => {
                tracing::info!("management API listening on {}", listener.endpoint());
                let file = listener.socket_file().map(Path::to_path_buf);
                match listener.into_fd() {
                    Ok(fd) => {
                        let _ = store.put(STORED_API.to_owned(), fd);
                        file
                    }
                    Err(e) => {
                        tracing::error!("management API: {e}");
                        return self.finish(&sup, sup_task, &mut signals, 1, None).await;
                    }
                }
            }
            Err(e) => {
                // Upstream stops the whole resolver when the API cannot listen.
                tracing::error!("{e}");
                return self.finish(&sup, sup_task, &mut signals, 1, None).await;
            }
        };
        let watchdog = upward.spawn_watchdog();
        let stop = CancellationToken::new();
        let keeper = self.keep_manager(&sup, &mut store, &upward, stop.clone());
        tokio::pin!(keeper);
        let why = loop {
            tokio::select! {
                why = &mut keeper => break why,
                Some(sig) = signals.next() => match sig {
                    SIGHUP => {
                        tracing::info!("SIGHUP received; the manager reloads the configuration files");
                        signal_manager(&sup, nix::sys::signal::Signal::SIGHUP);
                    }
                    _ => {
                        tracing::info!(signal = sig, "stopping on signal");
                        stop.cancel();
                        // The keeper returns at once; its answer is ours anyway.
                        let _ = (&mut keeper).await;
                        break Stop::Signal;
                    }
                },
            }
        };
        if let Some(w) = watchdog {
            w.abort();
        }
        let exit = match why {
            Stop::Signal => 0,
            Stop::Requested(code) => {
                if code == 0 {
                    tracing::info!("stopping on API request");
                }
                code
            }
            Stop::ManagerFailed => 1,
        };
        upward.stopping("Stopping");
        self.finish(&sup, sup_task, &mut signals, exit, api_socket)
            .await
    }

    /// Stop the manager first (it finishes API requests in flight), then every process; a
    /// second SIGINT/SIGTERM kills them at once. Then clean the rundir.
    async fn finish(
        &self,
        sup: &SupervisorHandle,
        sup_task: tokio::task::JoinHandle<()>,
        signals: &mut Signals,
        mut exit: u8,
        api_socket: Option<PathBuf>,
    ) -> ExitCode {
        let manager_stopped = sup.remove(service::MANAGER);
        tokio::pin!(manager_stopped);
        let shutdown = async {
            let _ = (&mut manager_stopped).await;
            sup.shutdown().await
        };
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
        if let Some(path) = api_socket {
            let _ = std::fs::remove_file(path);
        }
        crate::manager::rundir::remove_generated_files(&self.rundir);
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

    /// The manager process's spec: this very binary (`/proc/self/exe`, so an upgraded file on
    /// disk never mixes versions), our arguments, our environment, our working directory.
    fn manager_spec(&self) -> ServiceSpec {
        let mut argv = vec![
            OsString::from("/proc/self/exe"),
            OsString::from(crate::manager::process::MANAGER_FLAG),
        ];
        argv.extend(self.manager_args.iter().cloned());
        let mut spec = ServiceSpec::new(service::MANAGER, ServiceKind::Manager.as_str(), argv);
        spec.env = crate::manager::specs::child_base_env();
        spec.cwd = self.manager_cwd.clone();
        spec.readiness = Readiness::None;
        spec.restart = RestartPolicy::Never;
        spec.output = Output::Inherited;
        spec.stop = StopPolicy {
            signal: nix::sys::signal::Signal::SIGTERM,
            timeout: MANAGER_STOP_TIMEOUT,
        };
        spec
    }

    /// Run the manager process, again and again when it fails, until it asks us to stop, it
    /// cannot be kept running, or `stop` fires.
    async fn keep_manager(
        &self,
        sup: &SupervisorHandle,
        store: &mut FdStore,
        upward: &UpwardNotifier,
        stop: CancellationToken,
    ) -> Stop {
        let executables = Executables::discover();
        let policy = ChildPolicy {
            programs: vec![executables.kresd, executables.cache_gc],
        };
        let hang_after = std::env::var(MANAGER_HANG_VAR)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(MANAGER_HANG_AFTER);
        let service = ChildService {
            sup,
            policy: &policy,
            upward,
            hang_after,
        };
        let backoff = Backoff::default();
        let mut failures = 0u32;
        let mut incarnation = 0u32;
        loop {
            incarnation += 1;
            let (link, theirs) = match Link::pair() {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!("cannot create the manager's link: {e}");
                    return Stop::ManagerFailed;
                }
            };
            let started = Instant::now();
            let end = match self.start_manager(sup, theirs).await {
                Ok(pid) => {
                    tracing::debug!(pid, incarnation, "manager process started");
                    // The link's other end stays open in the supervisor until the service is
                    // removed, so an exit shows in the process table, not as end of file.
                    tokio::select! {
                        end = remote::serve_child(link, incarnation, &service, store, stop.clone()) => end,
                        () = exited(sup, pid) => ChildEnd::Gone,
                    }
                }
                Err(e) => ChildEnd::Misbehaved(format!("cannot start: {e}")),
            };
            match end {
                ChildEnd::Exit(code) => return Stop::Requested(code),
                ChildEnd::Stopped => return Stop::Signal,
                ChildEnd::Hung => {
                    tracing::error!(
                        "the manager process answered nothing for {} s; replacing it",
                        hang_after.as_secs()
                    );
                    // Not trusted to stop gracefully: it would take connections waiting in
                    // the backlog with it instead of leaving them to its successor.
                    signal_manager(sup, nix::sys::signal::Signal::SIGKILL);
                }
                ChildEnd::Misbehaved(why) => {
                    tracing::error!("the manager process failed: {why}");
                    signal_manager(sup, nix::sys::signal::Signal::SIGKILL);
                }
                ChildEnd::Gone => {}
            }
            let last_exit = sup
                .snapshot()
                .processes
                .iter()
                .find(|p| p.name == service::MANAGER)
                .and_then(|p| p.last_exit);
            match sup.remove(service::MANAGER).await {
                Ok(status) => match status.or(last_exit) {
                    Some(status) => tracing::error!("the manager process ended: {status}"),
                    None => tracing::error!("the manager process ended"),
                },
                Err(e) => tracing::error!("the manager process: {e}"),
            }
            if incarnation == 1 && store_lacks_config(store) {
                // It never finished the first start: there is nothing running to keep.
                tracing::error!("the manager failed during start-up; stopping");
                return Stop::ManagerFailed;
            }
            // Never given up on while the workers serve: a request that crashes the manager
            // again and again costs the API, not DNS. The delay grows to the backoff's cap and
            // is forgiven after a stable period.
            if started.elapsed() >= MANAGER_STABLE_AFTER {
                failures = 0;
            }
            failures += 1;
            let delay = backoff.delay(failures, 0);
            tracing::warn!(
                "restarting the manager process in {} ms; the workers keep running",
                delay.as_millis()
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return Stop::Signal,
            }
        }
    }

    async fn start_manager(&self, sup: &SupervisorHandle, link: OwnedFd) -> Result<i32, String> {
        sup.add_handing(self.manager_spec(), vec![(link, LINK_FD)])
            .await
            .map_err(|e| e.to_string())?;
        sup.start(service::MANAGER)
            .await
            .map(|p| p.as_raw())
            .map_err(|e| e.to_string())
    }
}

/// Wait until process `pid` of the manager service has exited.
async fn exited(sup: &SupervisorHandle, pid: i32) {
    let mut snapshots = sup.subscribe();
    let _ = snapshots
        .wait_for(|s| {
            !s.processes
                .iter()
                .any(|p| p.name == service::MANAGER && p.pid == Some(pid))
        })
        .await;
}

/// Whether the manager never stored the configuration it runs, i.e. never finished a start.
fn store_lacks_config(store: &FdStore) -> bool {
    !store.contains(crate::manager::process::STORED_CONFIG)
}

/// Send `signal` to the manager process, if it runs.
fn signal_manager(sup: &SupervisorHandle, signal: nix::sys::signal::Signal) {
    let snapshot = sup.snapshot();
    let pid = snapshot
        .processes
        .iter()
        .find(|p| p.name == service::MANAGER)
        .and_then(|p| p.pid);
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// The uid and gid of `name`, from the user database.
pub(crate) fn resolve_user(name: &str) -> Result<supervisor::Credentials, String> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(supervisor::Credentials {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }),
        Ok(None) => Err(format!("no user named {name:?}")),
        Err(e) => Err(format!("cannot look up user {name:?}: {e}")),
    }
}

/// The rundir lock: `knot-resolver.pid`, held with `flock` for the life of the root process
/// (two starters at the same instant never both run; the kernel drops the lock when its holder
/// dies, so a stale file, or a pid in it reused by another process, never blocks a start).
/// It holds our pid for operators; it is removed on drop.
struct RundirLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl RundirLock {
    fn acquire(rundir: &Path) -> Result<RundirLock, DaemonError> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let path = rundir.join(PID_FILE_NAME);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| DaemonError::Rundir {
                path: rundir.to_owned(),
                source,
            })?;
        if !supervisor::os::try_lock_exclusive(&file)? {
            let mut holder = String::new();
            let _ = Read::by_ref(&mut file).take(32).read_to_string(&mut holder);
            return Err(DaemonError::Locked(
                rundir.to_owned(),
                holder.trim().to_owned(),
            ));
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        Ok(RundirLock { path, _file: file })
    }
}

impl Drop for RundirLock {
    fn drop(&mut self) {
        // Still locked by us while we remove it.
        let _ = std::fs::remove_file(&self.path);
    }
}
