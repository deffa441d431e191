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

use futures_util::{Stream, StreamExt};
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

use super::logging::Logging;
use super::{resolve_user, LogArgs, LINK_FD, MANAGER_HANG_VAR, STORED_API, STORED_CONFIG};
use crate::config::{self, ManagementSchema};
use crate::manager::Executables;
use crate::service::{self, ServiceKind};

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
    /// `--loglevel` and `--logtarget`.
    pub log: LogArgs,
    /// `--drain-period`: how long DNS keeps being answered, readiness off, before a stop.
    pub drain_period: Duration,
    /// Our command line after the program name, passed on to the manager process unchanged.
    pub args: Vec<OsString>,
}

/// Parse, lock and run. Returns the process exit code.
pub fn run(invocation: Invocation) -> ExitCode {
    let logging = Logging::init(invocation.log.level, invocation.log.target, "knot-resolver");
    let files: Vec<PathBuf> = invocation
        .config_files
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let loaded = match config::load_files(&files, crate::config::PathChecks::Strict) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    if let Some(logging) = logging {
        logging.configure(loaded.model.logging.level, loaded.model.logging.target);
    }
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
    let mut manager_argv = vec![
        OsString::from("/proc/self/exe"),
        OsString::from(super::MANAGER_FLAG),
    ];
    manager_argv.extend(invocation.args);
    let root = Root {
        rundir,
        management,
        drain_period: invocation.drain_period,
        run_as,
        manager_argv,
        manager_cwd: cwd,
    };
    let code = crate::block_on("knot-resolver", async {
        let events = match signal_events() {
            Ok(events) => events,
            Err(e) => {
                tracing::error!("cannot install signal handlers: {e}");
                return ExitCode::from(1);
            }
        };
        root.run(events).await
    });
    drop(lock);
    code
}

/// A manager process that ran this long before it failed has its failure streak forgiven.
const MANAGER_STABLE_AFTER: Duration = Duration::from_secs(60);

/// A manager that answers no ping for this long is hung and replaced (override:
/// `KRES_MANAGER_HANG_TIMEOUT` in seconds, for tests).
const MANAGER_HANG_AFTER: Duration = Duration::from_secs(20);

/// How long the manager may take to stop (finishing API requests in flight) before SIGKILL.
const MANAGER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The root process: what it was told at start-up.
struct Root {
    rundir: PathBuf,
    management: ManagementSchema,
    /// How long a stop is announced (readiness off) while DNS keeps being answered.
    drain_period: Duration,
    run_as: Option<supervisor::Credentials>,
    /// The manager process's command line: this very binary (`/proc/self/exe`, so an
    /// upgraded file on disk never mixes versions) with the manager flag and our arguments.
    manager_argv: Vec<OsString>,
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

/// How serving ended: the manager's keeper decided why, or the root stops it now.
enum Served {
    Ended(Stop),
    StopNow,
}

/// What the root is told from outside while it runs: the signals, or a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootEvent {
    /// Re-read the configuration files (SIGHUP): passed on to the manager.
    Reload,
    /// Stop (SIGINT, SIGTERM); a second one while stopping kills every process.
    Stop,
}

/// SIGHUP, SIGINT and SIGTERM as [`RootEvent`]s.
fn signal_events() -> std::io::Result<impl Stream<Item = RootEvent> + Unpin> {
    let signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    Ok(signals.map(|sig| {
        if sig == SIGHUP {
            RootEvent::Reload
        } else {
            tracing::info!(signal = sig, "stop signal received");
            RootEvent::Stop
        }
    }))
}

/// What the start phase set up and the others use.
struct Started {
    sup: SupervisorHandle,
    sup_task: tokio::task::JoinHandle<()>,
    /// What the root keeps for the manager's incarnations (the API socket, the
    /// configuration, the workers' listening sockets).
    store: FdStore,
    /// The API's socket file, removed at the end.
    api_socket: Option<PathBuf>,
    upward: UpwardNotifier,
}

impl Root {
    /// The three phases: start, serve until `events` or the manager says stop, stop.
    async fn run(self, mut events: impl Stream<Item = RootEvent> + Unpin) -> ExitCode {
        let upward = UpwardNotifier::from_env();
        upward.status("Initializing");
        let mut started = match self.start(upward) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::from(1);
            }
        };
        let why = match &started.api_socket {
            Some(_) => self.serve(&mut started, &mut events).await,
            None => Stop::ManagerFailed,
        };
        self.stop(started, why, &mut events).await
    }

    /// Start the supervisor and bind the API's socket. A failure to bind stops the resolver,
    /// as upstream does (`api_socket` is then `None`).
    fn start(&self, upward: UpwardNotifier) -> Result<Started, String> {
        if let Err(e) = supervisor::os::cloexec_inherited_fds(&[]) {
            tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
        }
        let (sup, sup_task) = Supervisor::start(SupervisorOptions {
            notify_socket: self.rundir.join(NOTIFY_SOCKET_NAME),
        })
        .map_err(|e| format!("cannot start the supervisor: {e}"))?;
        if let Some(c) = self.run_as {
            // Children running as that user must be able to send READY=1 to our socket; the
            // kernel's credentials on each datagram still say which child sent it.
            if let Err(e) = std::os::unix::fs::chown(sup.notify_socket(), Some(c.uid), Some(c.gid))
            {
                sup_task.abort();
                return Err(format!(
                    "cannot hand the notify socket to uid {}: {e}",
                    c.uid
                ));
            }
        }
        let mut store = FdStore::default();
        // The API socket is ours, so that clients wait in its backlog while the manager
        // restarts instead of being refused.
        let bound = crate::api::server::Listener::bind(&self.management)
            .map_err(|e| e.to_string())
            .and_then(|listener| {
                tracing::info!("management API listening on {}", listener.endpoint());
                let file = listener.socket_file().map(Path::to_path_buf);
                let fd = listener
                    .into_fd()
                    .map_err(|e| format!("management API: {e}"))?;
                let _ = store.put(STORED_API.to_owned(), fd);
                Ok(file)
            });
        let api_socket = match bound {
            // A TCP endpoint has no file: an empty path marks "bound".
            Ok(file) => Some(file.unwrap_or_default()),
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        };
        Ok(Started {
            sup,
            sup_task,
            store,
            api_socket,
            upward,
        })
    }

    /// Keep the manager process running until it asks to stop, cannot be kept, or `events`
    /// says stop; reloads go to the manager. A stop is first announced for the drain period
    /// (the supervisor's snapshot says `draining`, which turns `/readyz` off) when there is
    /// one; `kresctl drain` announces it through the manager. A second stop event during the
    /// drain stops at once.
    async fn serve(
        &self,
        started: &mut Started,
        events: &mut (impl Stream<Item = RootEvent> + Unpin),
    ) -> Stop {
        let watchdog = started.upward.spawn_watchdog();
        let stop = CancellationToken::new();
        let mut snapshots = started.sup.subscribe();
        let sup = started.sup.clone();
        let upward = started.upward.clone();
        let keeper = self.keep_manager(
            &started.sup,
            &mut started.store,
            &started.upward,
            stop.clone(),
        );
        tokio::pin!(keeper);
        // When the drain ends, once it has begun.
        let mut drain_ends: Option<Instant> = None;
        let served = loop {
            let drained = async {
                match drain_ends {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                why = &mut keeper => break Served::Ended(why),
                Some(event) = events.next() => match event {
                    RootEvent::Reload => {
                        tracing::info!("SIGHUP received; the manager reloads the configuration files");
                        signal_manager(&sup, nix::sys::signal::Signal::SIGHUP);
                    }
                    RootEvent::Stop if self.drain_period.is_zero() || drain_ends.is_some() => break Served::StopNow,
                    RootEvent::Stop => {
                        // Seen below as the snapshot's `draining`, like a drain from the API.
                        if let Err(e) = sup.drain().await {
                            tracing::error!("cannot drain: {e}");
                            break Served::StopNow;
                        }
                    }
                },
                changed = snapshots.changed(), if drain_ends.is_none() => {
                    if changed.is_err() {
                        break Served::StopNow;
                    }
                    if !snapshots.borrow_and_update().draining {
                        continue;
                    }
                    if self.drain_period.is_zero() {
                        break Served::StopNow;
                    }
                    let secs = self.drain_period.as_secs();
                    tracing::info!("draining: not ready any more, answering for {secs} s, then stopping");
                    upward.stopping(&format!("Draining: answering for {secs} s, then stopping"));
                    drain_ends = Some(Instant::now() + self.drain_period);
                }
                () = drained => {
                    tracing::info!("drain period over; stopping");
                    break Served::StopNow;
                }
            }
        };
        let why = match served {
            Served::Ended(why) => why,
            Served::StopNow => {
                stop.cancel();
                // The keeper returns at once; its answer is ours anyway.
                let _ = (&mut keeper).await;
                Stop::Signal
            }
        };
        if let Some(w) = watchdog {
            w.abort();
        }
        why
    }

    /// Stop the manager first (it finishes API requests in flight), then every process; a
    /// second stop event kills them at once. Then clean the rundir. Returns the exit code.
    async fn stop(
        &self,
        started: Started,
        why: Stop,
        events: &mut (impl Stream<Item = RootEvent> + Unpin),
    ) -> ExitCode {
        let mut exit = match why {
            Stop::Signal => 0,
            Stop::Requested(code) => {
                if code == 0 {
                    tracing::info!("stopping on API request");
                }
                code
            }
            Stop::ManagerFailed => 1,
        };
        started.upward.stopping("Stopping");
        let sup = &started.sup;
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
                Some(event) = events.next() => {
                    if event == RootEvent::Stop {
                        tracing::warn!("second stop signal: killing all processes");
                        sup.kill_all();
                    }
                }
            }
        };
        let _ = started.sup_task.await;
        if let Some(path) = started.api_socket.filter(|p| !p.as_os_str().is_empty()) {
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

    /// The manager process's spec: its command line, our environment, our working directory.
    fn manager_spec(&self) -> ServiceSpec {
        let argv = self.manager_argv.clone();
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
    !store.contains(STORED_CONFIG)
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

#[cfg(test)]
mod tests {
    //! The phases driven by a test: events from a channel instead of signals, and stand-in
    //! manager programs that never speak the link's protocol.

    use std::io::Read;

    use tokio::sync::mpsc;

    use super::*;

    /// A private directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("kres-root-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir");
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn root(dir: &Path, manager_argv: &[&str]) -> Root {
        Root {
            rundir: dir.to_owned(),
            management: ManagementSchema {
                unix_socket: Some(dir.join("api.sock")),
                interface: None,
            },
            drain_period: Duration::ZERO,
            run_as: None,
            manager_argv: manager_argv.iter().map(OsString::from).collect(),
            manager_cwd: None,
        }
    }

    /// Events for `Root::run` from a channel.
    fn events(mut rx: mpsc::Receiver<RootEvent>) -> impl Stream<Item = RootEvent> + Unpin {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// One test, scenarios in sequence: the supervisor reaps with `waitpid(-1)`, so two roots in
    /// one process at once would reap each other's children.
    #[tokio::test]
    async fn phases_driven_without_signals() {
        a_manager_that_dies_during_start_up_stops_the_root_with_an_error().await;
        a_stop_event_stops_the_manager_and_exits_cleanly().await;
    }

    async fn a_manager_that_dies_during_start_up_stops_the_root_with_an_error() {
        let dir = TempDir::new("dies");
        let (_events, rx) = mpsc::channel(1);
        let code = root(&dir.0, &["/bin/sh", "-c", "exit 3"])
            .run(events(rx))
            .await;
        assert_eq!(code, ExitCode::from(1));
        assert!(
            !dir.0.join("api.sock").exists(),
            "the API socket is removed"
        );
    }

    async fn a_stop_event_stops_the_manager_and_exits_cleanly() {
        let dir = TempDir::new("stop");
        let fifo = dir.0.join("started");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        // The stand-in manager says its pid through the fifo, then waits to be stopped.
        let script = format!("echo $$ > {}; exec sleep 600", fifo.display());
        let (stop, rx) = mpsc::channel(1);
        let running = tokio::spawn(root(&dir.0, &["/bin/sh", "-c", &script]).run(events(rx)));
        let pid = tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            std::fs::File::open(&fifo)
                .and_then(|mut f| f.read_to_string(&mut text))
                .expect("the manager's pid");
            text.trim().parse::<i32>().expect("a pid")
        })
        .await
        .expect("reader");
        assert!(
            dir.0.join("api.sock").exists(),
            "the API socket is bound while serving"
        );
        stop.send(RootEvent::Stop).await.expect("root running");
        let code = tokio::time::timeout(Duration::from_secs(30), running)
            .await
            .expect("stopped in time")
            .expect("root task");
        assert_eq!(code, ExitCode::SUCCESS);
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None);
        assert_eq!(
            gone,
            Err(nix::errno::Errno::ESRCH),
            "the manager is stopped and reaped"
        );
        assert!(
            !dir.0.join("api.sock").exists(),
            "the API socket is removed"
        );
    }
}
