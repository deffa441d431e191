//! The `knot-resolver` daemon: the root of the process tree. It reads the operator's
//! configuration files once, at start-up, for what cannot change at run time (rundir, API
//! endpoint, log level), takes the rundir lock, owns the supervisor, the notify socket, the
//! API's listening socket and the upward sd_notify, and runs the manager as a supervised child
//! process (`daemon::manager_process`) that does everything else. Nothing that arrives later (API
//! requests, reloaded or watched files) is parsed here: if the manager crashes, overflows, is
//! killed or hangs, it is restarted and adopts the running workers.
//!
//! Its phases: start (`start`: from the configuration, or from an upgrade's image), serve
//! (`serve`: a stream of [`RootEvent`]s, signals or a test's, while the manager keeper
//! (`keeper`) runs the manager process), upgrade (`handover`), stop (`stop`). The rundir
//! lock (`lock`) and the rundir's ownership (`rundir`) are the start's.

mod handover;
mod keeper;
mod lock;
mod rundir;
mod serve;
mod start;
mod stop;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR2};
use signal_hook_tokio::Signals;
use supervisor::remote::FdStore;
use supervisor::upward::UpwardNotifier;
use supervisor::SupervisorHandle;

use super::{recovery, LogArgs};
use handover::{record_upgrade, PROBE_TIMEOUT};
use kres_config::ManagementSchema;
use kres_wire::environment::Environment;
use lock::RundirLock;
pub use start::run;
use start::Adopted;

/// Name of the socket kresd workers send `READY=1` to, in the rundir.
pub const NOTIFY_SOCKET_NAME: &str = "supervisor-notify-socket";

/// Name of the rundir lock file.
pub const PID_FILE_NAME: &str = "knot-resolver.pid";

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The rundir cannot be entered, or its pid file cannot be opened.
    #[error("cannot use rundir {path}: {source}")]
    Rundir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another resolver holds the rundir lock (its pid, as its pid file says).
    #[error("another manager is running in {0} (pid {1})")]
    Locked(PathBuf, String),
    /// The pid file cannot be locked or written.
    #[error("cannot start: {0}")]
    Io(#[from] std::io::Error),
}

/// How the daemon was started: what the manager process is given too.
pub struct Invocation {
    /// The configuration files, as given.
    pub config_files: Vec<PathBuf>,
    /// `--worker-user` or its environment form.
    pub worker_user: Option<String>,
    /// `--api-admin-group`, `--api-read-only-group` or their environment forms.
    pub api_groups: super::ApiGroupNames,
    /// `--loglevel` and `--logtarget`.
    pub log: LogArgs,
    /// `--drain-period`: how long DNS keeps being answered, readiness off, before a stop.
    pub drain_period: Duration,
    /// Our command line after the program name, passed on to the manager process unchanged.
    pub args: Vec<OsString>,
    /// The environment the daemon was started with.
    pub env: Environment,
}

/// How the root begins: a start from the configuration, or the adoption of an upgrade.
enum Begin {
    /// Bind the API's endpoint, and run holding the rundir lock (none in unit tests).
    Start(ManagementSchema, Option<RundirLock>),
    /// Adopt an old image's processes; `failed` when the upgrade failed and this is the old
    /// binary again.
    Resume {
        adopted: Adopted,
        from: String,
        failed: Option<String>,
    },
}

/// The root process: what it was told at start-up.
struct Root {
    rundir: PathBuf,
    /// How long a stop is announced (readiness off) while DNS keeps being answered.
    drain_period: Duration,
    /// The group the API's unix socket is given to (the read-only or admin group of the
    /// API's roles), when not ours.
    api_socket_group: Option<u32>,
    run_as: Option<supervisor::Credentials>,
    /// The manager process's command line: this very binary (`/proc/self/exe`, so an
    /// upgraded file on disk never mixes versions) with the manager flag and our arguments.
    manager_argv: Vec<OsString>,
    /// Where we were started (relative paths on the command line resolve there).
    manager_cwd: Option<PathBuf>,
    /// What an upgrade re-executes: the daemon's original path, and our command line.
    exe: PathBuf,
    argv: Vec<OsString>,
    /// The log level and target the configuration set at start-up.
    log: (kres_config::LogLevel, kres_config::LogTarget),
    /// How long the new binary may take to answer its upgrade probe ([`PROBE_TIMEOUT`]).
    probe_timeout: Duration,
    /// The environment we were started with: what the manager process and an upgrade's new
    /// image are given, and the settings it holds.
    env: Arc<Environment>,
}

/// Why the root stops serving.
enum Stop {
    /// An upgrade begins: the new binary passed its probe and the manager is stopped.
    Upgrade,
    /// A signal (SIGINT/SIGTERM).
    Signal,
    /// The manager asked, with this exit code (API `/stop`: 0; start-up failure: 1).
    Requested(u8),
    /// The manager could not be kept running.
    ManagerFailed,
}

/// What the root is told from outside while it runs: the signals, or a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootEvent {
    /// Re-read the configuration files (SIGHUP): passed on to the manager.
    Reload,
    /// Stop (SIGINT, SIGTERM); a second one while stopping kills every process.
    Stop,
    /// Upgrade in place (SIGUSR2): re-execute the binary at the daemon's original path.
    Upgrade,
}

/// SIGHUP, SIGINT, SIGTERM and SIGUSR2 as [`RootEvent`]s.
fn signal_events() -> std::io::Result<impl Stream<Item = RootEvent> + Unpin> {
    let signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR2])?;
    Ok(signals.map(|sig| match sig {
        SIGHUP => RootEvent::Reload,
        SIGUSR2 => RootEvent::Upgrade,
        _ => {
            tracing::info!(signal = sig, "stop signal received");
            RootEvent::Stop
        }
    }))
}

/// What the start phase set up and the others use.
struct Started {
    sup: SupervisorHandle,
    sup_task: supervisor::runner::ActorTask,
    /// What the root keeps for the manager's incarnations (the API socket, the
    /// configuration, the workers' listening sockets).
    store: FdStore,
    /// The API's socket file, removed at the end.
    api_socket: Option<PathBuf>,
    upward: UpwardNotifier,
    /// The rundir lock, held for the life of the process (none in unit tests).
    lock: Option<RundirLock>,
    /// Manager incarnations so far, upgrades tried so far.
    incarnations: u32,
    generation: u32,
    /// The binary this image runs, opened at its start: an upgrade's fallback.
    own_binary: Option<OwnedFd>,
    /// Rung at SIGHUP: the manager reloads, now or once its next incarnation serves (its
    /// read end is in `store`). `None` when no pipe could be made; SIGHUP is then logged.
    reload_bell: Option<recovery::ReloadBell>,
}

impl Root {
    /// The phases: start (or adopt), serve until `events` or the manager says stop or
    /// upgrade, upgrade (which ends this image, or serves on when it fails), stop.
    async fn run(
        self,
        begin: Begin,
        mut events: impl Stream<Item = RootEvent> + Unpin,
    ) -> ExitCode {
        let upward = UpwardNotifier::new(&self.env.service_manager);
        let started = match begin {
            Begin::Start(management, lock) => {
                upward.status("Initializing");
                self.start(&management, lock, upward)
            }
            Begin::Resume {
                adopted,
                from,
                failed,
            } => self.adopt(adopted, &from, failed, upward),
        };
        let mut started = match started {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::from(1);
            }
        };
        loop {
            let why = match &started.api_socket {
                Some(_) => self.serve(&mut started, &mut events).await,
                None => Stop::ManagerFailed,
            };
            if let Stop::Upgrade = why {
                // Returns only when the upgrade failed; this image serves on.
                let error = self.upgrade(&mut started).await;
                tracing::error!("upgrade failed: {error}; serving on");
                let from = crate::build_version();
                record_upgrade(&mut started, &from, Some(error.to_string()));
                continue;
            }
            return self.stop(started, why, &mut events).await;
        }
    }
}

/// Why a descriptor could not be kept in the fd store.
#[derive(Debug, thiserror::Error)]
enum KeepError {
    /// It could not be made.
    #[error("{0}")]
    Make(#[source] std::io::Error),
    /// The store refused it.
    #[error(transparent)]
    Refused(#[from] supervisor::remote::StoreRefused),
}

/// Keep the descriptor just `made` in `store` under `name`.
fn keep_in(
    store: &mut FdStore,
    name: &str,
    made: std::io::Result<OwnedFd>,
) -> Result<(), KeepError> {
    let fd = made.map_err(KeepError::Make)?;
    store.put(name.to_owned(), fd).map_err(KeepError::Refused)
}

#[cfg(test)]
mod tests {
    //! The phases driven by a test: events from a channel instead of signals, and stand-in
    //! manager programs that never speak the link's protocol.

    use std::io::Read;
    use std::path::Path;

    use tokio::sync::mpsc;

    use super::*;

    /// A private directory, removed on drop.
    pub(super) struct TempDir(pub(super) PathBuf);

    impl TempDir {
        pub(super) fn new(name: &str) -> TempDir {
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

    pub(super) fn root(dir: &Path, manager_argv: &[&str]) -> Root {
        Root {
            rundir: dir.to_owned(),
            drain_period: Duration::ZERO,
            api_socket_group: None,
            run_as: None,
            manager_argv: manager_argv.iter().map(OsString::from).collect(),
            manager_cwd: None,
            exe: PathBuf::from("/nonexistent"),
            argv: Vec::new(),
            log: (kres_config::LogLevel::Info, kres_config::LogTarget::Stderr),
            probe_timeout: PROBE_TIMEOUT,
            env: Default::default(),
        }
    }

    /// A start with the API on a socket in `dir`, without the rundir lock.
    fn begin(dir: &Path) -> Begin {
        Begin::Start(
            ManagementSchema {
                unix_socket: Some(dir.join("api.sock")),
                interface: None,
            },
            None,
        )
    }

    /// The pid a stand-in program writes into `fifo` once it runs.
    async fn pid_written_to(fifo: PathBuf) -> i32 {
        tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            std::fs::File::open(&fifo)
                .and_then(|mut f| f.read_to_string(&mut text))
                .expect("a pid written");
            text.trim().parse::<i32>().expect("a pid")
        })
        .await
        .expect("reader")
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
        a_stop_during_an_upgrade_probe_cancels_the_upgrade_and_stops().await;
    }

    /// The new binary's probe blocks (its time limit an hour): a stop that arrives meanwhile
    /// is handled at once, the probe is stopped with everything else, and the root exits
    /// cleanly.
    async fn a_stop_during_an_upgrade_probe_cancels_the_upgrade_and_stops() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new("probe");
        let fifo = dir.0.join("probing");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let new_binary = dir.0.join("new-binary");
        std::fs::write(
            &new_binary,
            format!("#!/bin/sh\necho $$ > {}\nexec sleep 600\n", fifo.display()),
        )
        .expect("probe script");
        std::fs::set_permissions(&new_binary, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let mut root = root(&dir.0, &["/bin/sh", "-c", "exec sleep 600"]);
        root.exe = new_binary;
        root.probe_timeout = Duration::from_secs(3600);
        let (events_tx, rx) = mpsc::channel(4);
        let running = tokio::spawn(root.run(begin(&dir.0), events(rx)));
        events_tx
            .send(RootEvent::Upgrade)
            .await
            .expect("root running");
        let probe = pid_written_to(fifo).await;
        // Both handled while the probe blocks: a reload (passed on), then the stop.
        events_tx
            .send(RootEvent::Reload)
            .await
            .expect("root running");
        events_tx.send(RootEvent::Stop).await.expect("root running");
        let begun = std::time::Instant::now();
        let code = tokio::time::timeout(Duration::from_secs(60), running)
            .await
            .expect("the root stops while the probe still blocks")
            .expect("root task");
        eprintln!(
            "stop during a blocked upgrade probe: the root exited {} ms after the signal",
            begun.elapsed().as_millis()
        );
        assert_eq!(code, ExitCode::SUCCESS);
        assert_eq!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(probe), None),
            Err(nix::errno::Errno::ESRCH),
            "the probe is stopped and reaped"
        );
    }

    async fn a_manager_that_dies_during_start_up_stops_the_root_with_an_error() {
        let dir = TempDir::new("dies");
        let (_events, rx) = mpsc::channel(1);
        let code = root(&dir.0, &["/bin/sh", "-c", "exit 3"])
            .run(begin(&dir.0), events(rx))
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
        let running =
            tokio::spawn(root(&dir.0, &["/bin/sh", "-c", &script]).run(begin(&dir.0), events(rx)));
        let pid = pid_written_to(fifo).await;
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
