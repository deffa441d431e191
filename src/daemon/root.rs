//! The `knot-resolver` daemon: the root of the process tree. It reads the operator's
//! configuration files once, at start-up, for what cannot change at run time (rundir, API
//! endpoint, log level), takes the rundir lock, owns the supervisor, the notify socket, the
//! API's listening socket and the upward sd_notify, and runs the manager as a supervised child
//! process (`manager::process`) that does everything else. Nothing that arrives later (API
//! requests, reloaded or watched files) is parsed here: if the manager crashes, overflows, is
//! killed or hangs, it is restarted and adopts the running workers.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR2};
use signal_hook_tokio::Signals;
use supervisor::remote::{
    self, ChildEnd, ChildPolicy, ChildService, EnvironmentPolicy, FdStore, FileArgument, Link,
};
use supervisor::upward::UpwardNotifier;
use supervisor::{
    Backoff, Output, Readiness, RestartPolicy, ServiceSpec, StopPolicy, Supervisor,
    SupervisorHandle, SupervisorOptions,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::logging::Logging;
use super::{
    recovery, resolve_user, upgrade, LogArgs, LINK_FD, MANAGER_HANG_VAR, STORED_API, STORED_CONFIG,
};
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
    /// `--api-admin-group`, `--api-read-only-group` or their environment forms.
    pub api_groups: super::ApiGroupNames,
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
    if let Some(inherited) = upgrade::inherited() {
        return resume(invocation, inherited, logging);
    }
    raise_open_files_limit();
    let files: Vec<PathBuf> = invocation
        .config_files
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let loaded = match config::load_files(
        &files,
        crate::config::PathChecks::Strict,
        config::LogTargetArg::Given(invocation.log.target),
    ) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    if let Some(logging) = logging {
        logging.configure(loaded.model.logging.level, loaded.model.logging.target);
    }
    let log = (loaded.model.logging.level, loaded.model.logging.target);
    let rundir = loaded.model.rundir.clone();
    let management = loaded.model.management.clone();
    drop(loaded);
    let api_groups = match invocation.api_groups.resolve(&management) {
        Ok(groups) => groups,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
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
    let Ok(run_as) = worker_credentials(&invocation) else {
        return ExitCode::from(1);
    };
    if let Some(workers) = run_as {
        if let Err(e) = keep_rundir_from_workers(&rundir, workers) {
            tracing::error!("cannot secure rundir {}: {e}", rundir.display());
            return ExitCode::from(1);
        }
    }
    let lock = match RundirLock::acquire(&rundir) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            tracing::error!("cannot tell which binary runs: {e}");
            return ExitCode::from(1);
        }
    };
    let root = Root {
        rundir,
        drain_period: invocation.drain_period,
        api_socket_group: api_groups.socket_group(),
        run_as,
        manager_argv: manager_argv(&invocation.args),
        manager_cwd: cwd,
        exe,
        argv: std::env::args_os().collect(),
        log,
        probe_timeout: PROBE_TIMEOUT,
    };
    serve_root(root, Begin::Start(management, Some(lock)))
}

/// Raise our soft limit on open descriptors to the hard one (the children inherit it); the
/// manager counts what a configuration needs against the result.
fn raise_open_files_limit() {
    match supervisor::os::raise_open_files_limit() {
        Ok(limit) if limit.now > limit.was => tracing::debug!(
            "raised the limit on open descriptors from {} to {}",
            limit.was,
            limit.now
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the limit on open descriptors: {e}"),
    }
}

/// Run the root process from `begin` on its runtime, its events the signals.
fn serve_root(root: Root, begin: Begin) -> ExitCode {
    crate::block_on("knot-resolver", async {
        let events = match signal_events() {
            Ok(events) => events,
            Err(e) => {
                tracing::error!("cannot install signal handlers: {e}");
                return ExitCode::from(1);
            }
        };
        root.run(begin, events).await
    })
}

/// The credentials of `--worker-user`, if given; an error is logged.
fn worker_credentials(invocation: &Invocation) -> Result<Option<supervisor::Credentials>, ()> {
    invocation
        .worker_user
        .as_deref()
        .map(resolve_user)
        .transpose()
        .map_err(|e| tracing::error!("--worker-user: {e}"))
}

/// Mode of the rundir when the workers run as another user: they create their control
/// sockets in it (group write), but the sticky bit keeps them from removing or replacing what
/// the root and the manager keep there (the API and notify sockets, the pid file, the
/// generated Lua), or squatting it between two binds.
const SHARED_RUNDIR_MODE: u32 = 0o1770;

/// When we run as root and the workers as `workers`: make the rundir ours, the workers'
/// group's, mode 1770, whatever made it (a Kubernetes `emptyDir` is 0777, an older image gave
/// it to the workers' user), and hand the regular files root left there (generated by a
/// manager that ran as root: an older version, a crash) to the workers' user, as whom the
/// manager process now writes them. Done through a descriptor opened without following a
/// link; the pid file stays ours.
fn keep_rundir_from_workers(
    rundir: &Path,
    workers: supervisor::Credentials,
) -> std::io::Result<()> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fchmod, fstat, Mode};
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let dir = open(
        rundir,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    hand_generated_files_over(&dir, workers)?;
    let meta = fstat(&dir)?;
    let mode = meta.st_mode & 0o7777;
    if meta.st_uid == 0 && meta.st_gid == workers.gid && mode == SHARED_RUNDIR_MODE {
        return Ok(());
    }
    nix::unistd::fchown(
        &dir,
        Some(nix::unistd::Uid::from_raw(0)),
        Some(nix::unistd::Gid::from_raw(workers.gid)),
    )?;
    fchmod(&dir, Mode::from_bits_truncate(SHARED_RUNDIR_MODE))?;
    tracing::info!(
        "rundir {}: owner 0, group {}, mode {SHARED_RUNDIR_MODE:o} (was owner {}, group {}, mode {mode:o}), so the workers cannot replace the daemon's sockets and files",
        rundir.display(),
        workers.gid,
        meta.st_uid,
        meta.st_gid
    );
    Ok(())
}

/// Give root's regular files in the directory `dir` (but the pid file, and any file with
/// another link) to `workers`.
fn hand_generated_files_over(
    dir: &OwnedFd,
    workers: supervisor::Credentials,
) -> std::io::Result<()> {
    use nix::fcntl::AtFlags;
    use nix::sys::stat::{fstatat, SFlag};
    use std::os::fd::AsRawFd;
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name == PID_FILE_NAME {
            continue;
        }
        let Ok(meta) = fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        let regular = SFlag::from_bits_truncate(meta.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
        // A file with another link is not ours to give away (a hard link planted to another
        // file would make us chown that file).
        if regular && meta.st_uid == 0 && meta.st_nlink == 1 {
            nix::unistd::fchownat(
                dir,
                name.as_os_str(),
                Some(nix::unistd::Uid::from_raw(workers.uid)),
                Some(nix::unistd::Gid::from_raw(workers.gid)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?;
        }
    }
    Ok(())
}

/// The manager process's command line: this very binary (`/proc/self/exe`, so that a file
/// replaced on disk never mixes versions) with the manager flag and our arguments.
fn manager_argv(args: &[OsString]) -> Vec<OsString> {
    let mut argv = vec![
        OsString::from("/proc/self/exe"),
        OsString::from(super::MANAGER_FLAG),
    ];
    argv.extend(args.iter().cloned());
    argv
}

/// Run as the new image of an in-place upgrade: adopt what the old one handed over, or fall
/// back to the old binary when that cannot be read.
fn resume(
    invocation: Invocation,
    inherited: Result<upgrade::Inherited, String>,
    logging: Option<&'static Logging>,
) -> ExitCode {
    let inherited = match inherited {
        Ok(i) => i,
        Err(e) => {
            tracing::error!("cannot adopt the running processes: {e}");
            return ExitCode::from(1);
        }
    };
    let image = upgrade::read_image(&inherited.state).and_then(|image| {
        upgrade::check_descriptors(&image)?;
        if inherited.fallback.is_some() && upgrade::refusal_injected() {
            return Err("refused by fault injection".into());
        }
        Ok(image)
    });
    let image = match image {
        Ok(image) => image,
        Err(e) => {
            tracing::error!("cannot adopt the running processes: {e}");
            if let Some(old) = &inherited.fallback {
                tracing::error!("falling back to the binary that ran before");
                let argv: Vec<OsString> = std::env::args_os().collect();
                let e = upgrade::exec_fallback(old, inherited.state, &argv);
                tracing::error!("cannot fall back to the binary that ran before: {e}");
            }
            return ExitCode::from(1);
        }
    };
    if let Some(logging) = logging {
        logging.configure(image.log_level, image.log_target);
    }
    let adopted = Adopted::take(&image);
    if let Err(e) = supervisor::os::cloexec_inherited_fds(&[]) {
        tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
    }
    let adopted = match adopted {
        Ok(a) => a,
        Err(e) => {
            tracing::error!("cannot adopt the running processes: {e}");
            return ExitCode::from(1);
        }
    };
    let Ok(run_as) = worker_credentials(&invocation) else {
        return ExitCode::from(1);
    };
    if let Some(workers) = run_as {
        // The image before may have run its manager as root.
        if let Err(e) = keep_rundir_from_workers(&image.rundir, workers) {
            tracing::warn!("cannot secure rundir {}: {e}", image.rundir.display());
        }
    }
    let root = Root {
        rundir: image.rundir.clone(),
        drain_period: invocation.drain_period,
        // The API socket is adopted as it was bound.
        api_socket_group: None,
        run_as,
        manager_argv: manager_argv(&invocation.args),
        manager_cwd: image.manager_cwd.clone(),
        exe: image.exe.clone(),
        argv: image.argv.clone(),
        log: (image.log_level, image.log_target),
        probe_timeout: PROBE_TIMEOUT,
    };
    let outcome = match inherited.fallback {
        Some(_) => None,
        None => Some(
            "the new binary could not adopt the running processes; the one before runs again"
                .to_owned(),
        ),
    };
    let begin = Begin::Resume {
        adopted,
        from: image.version,
        failed: outcome,
    };
    serve_root(root, begin)
}

/// What a new image takes over from the old one's [`upgrade::RootImage`].
struct Adopted {
    lock: Option<RundirLock>,
    store: FdStore,
    handover: supervisor::handover::Handover,
    api_socket: Option<PathBuf>,
    incarnations: u32,
    generation: u32,
}

impl Adopted {
    /// Take every descriptor the image names.
    fn take(image: &upgrade::RootImage) -> Result<Adopted, String> {
        let lock = image
            .lock_fd
            .map(upgrade::take_back)
            .transpose()
            .map_err(|e| format!("the rundir lock: {e}"))?;
        let mut entries = Vec::with_capacity(image.store.len());
        for (name, fd) in &image.store {
            let fd = upgrade::take_back(*fd).map_err(|e| format!("stored {name}: {e}"))?;
            entries.push((name.clone(), fd));
        }
        let handover = supervisor::handover::Handover::claim(image.supervisor.clone())
            .map_err(|e| format!("the process table: {e}"))?;
        Ok(Adopted {
            lock: lock.map(|fd| RundirLock::adopt(&image.rundir, fd)),
            store: FdStore::from_entries(entries),
            handover,
            api_socket: image.api_socket.clone(),
            incarnations: image.incarnations,
            generation: image.generation,
        })
    }
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
    log: (crate::config::LogLevel, crate::config::LogTarget),
    /// How long the new binary may take to answer its upgrade probe ([`PROBE_TIMEOUT`]).
    probe_timeout: Duration,
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

/// How serving ended: the manager's keeper decided why, or the root stops it now, or an
/// upgrade begins.
enum Served {
    Ended(Stop),
    StopNow,
    Upgrade,
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
    sup_task: tokio::task::JoinHandle<()>,
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
        let upward = UpwardNotifier::from_env();
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
                record_upgrade(&mut started, &from, Some(error));
                continue;
            }
            return self.stop(started, why, &mut events).await;
        }
    }

    /// Adopt what an old image handed over; the next manager incarnation adopts the workers.
    fn adopt(
        &self,
        adopted: Adopted,
        from: &str,
        failed: Option<String>,
        upward: UpwardNotifier,
    ) -> Result<Started, String> {
        let (sup, sup_task) = Supervisor::adopt(adopted.handover)
            .map_err(|e| format!("cannot adopt the process table: {e}"))?;
        let mut started = Started {
            sup,
            sup_task,
            store: adopted.store,
            api_socket: adopted.api_socket,
            upward,
            lock: adopted.lock,
            incarnations: adopted.incarnations,
            generation: adopted.generation,
            own_binary: upgrade::open_own_binary().ok(),
            reload_bell: None,
        };
        // A new doorbell: the old image's write end closed with it (a ring it held is lost
        // with the manager incarnation the upgrade replaced).
        started.reload_bell = install_reload_bell(&mut started.store);
        let workers = started.sup.snapshot().processes.len();
        match &failed {
            None => tracing::info!(
                from,
                to = crate::build_version(),
                "upgraded in place; adopted {workers} processes"
            ),
            Some(why) => tracing::error!("{why}"),
        }
        record_upgrade(&mut started, from, failed);
        Ok(started)
    }

    /// Start the supervisor and bind the API's socket. A failure to bind stops the resolver,
    /// as upstream does (`api_socket` is then `None`).
    fn start(
        &self,
        management: &ManagementSchema,
        lock: Option<RundirLock>,
        upward: UpwardNotifier,
    ) -> Result<Started, String> {
        if let Err(e) = supervisor::os::cloexec_inherited_fds(&[]) {
            tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
        }
        // Children running as another user must be able to send READY=1 to our socket.
        let (sup, sup_task) = Supervisor::start(SupervisorOptions {
            notify_socket: self.rundir.join(NOTIFY_SOCKET_NAME),
            notify_senders: self.run_as.map(|c| c.gid),
        })
        .map_err(|e| format!("cannot start the supervisor: {e}"))?;
        let mut store = FdStore::default();
        let mut kept_api = None;
        // What systemd kept for us across a restart (`FDSTORE=1`): the API socket and the
        // workers' listening sockets, with queries and connections waiting in them.
        for (name, fd) in supervisor::upward::listen_fds(remote::MAX_STORED) {
            if name == STORED_API {
                kept_api = Some(fd);
            } else if keeps_upward(&name) {
                let _ = store.put(name, fd);
            } else {
                tracing::warn!("closing a descriptor passed as {name:?}, which is not ours");
            }
        }
        if !store.is_empty() || kept_api.is_some() {
            tracing::info!(
                "the service manager kept {} listening sockets for us",
                store.len() + usize::from(kept_api.is_some())
            );
        }
        // The API socket is ours, so that clients wait in its backlog while the manager
        // restarts instead of being refused.
        let kept_api = kept_api.filter(|fd| {
            let kept = crate::api::server::Listener::kept_for(
                fd.as_fd(),
                management,
                self.api_socket_group,
            );
            if !kept {
                upward.remove_stored_fd(STORED_API);
            }
            kept
        });
        let bound = match kept_api {
            Some(fd) => {
                let file = management.unix_socket.clone();
                tracing::info!(
                    "management API listening on {} (kept across the restart)",
                    file.as_deref()
                        .map_or_else(String::new, |p| p.display().to_string())
                );
                let _ = store.put(STORED_API.to_owned(), fd);
                Ok(file)
            }
            None => crate::api::server::Listener::bind(management, self.api_socket_group)
                .map_err(|e| e.to_string())
                .and_then(|listener| {
                    tracing::info!("management API listening on {}", listener.endpoint());
                    let file = listener.socket_file().map(Path::to_path_buf);
                    let fd = listener
                        .into_fd()
                        .map_err(|e| format!("management API: {e}"))?;
                    upward.store_fd(STORED_API, fd.as_fd());
                    let _ = store.put(STORED_API.to_owned(), fd);
                    Ok(file)
                }),
        };
        let api_socket = match bound {
            // A TCP endpoint has no file: an empty path marks "bound".
            Ok(file) => Some(file.unwrap_or_default()),
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        };
        let reload_bell = install_reload_bell(&mut store);
        Ok(Started {
            sup,
            sup_task,
            store,
            reload_bell,
            api_socket,
            upward,
            lock,
            incarnations: 0,
            generation: 0,
            own_binary: upgrade::open_own_binary()
                .inspect_err(|e| {
                    tracing::warn!(
                        "cannot open our own binary (an upgrade could not fall back): {e}"
                    )
                })
                .ok(),
        })
    }

    /// Ask the binary at our path whether it can adopt what we would hand it; its exit
    /// status says (a missing, broken or older binary fails here, before anything stops).
    async fn probe(&self, sup: &SupervisorHandle) -> Result<(), String> {
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
        spec.env = crate::manager::specs::child_base_env();
        spec.readiness = Readiness::None;
        spec.restart = RestartPolicy::Never;
        let exe = self.exe.display();
        match tokio::time::timeout(self.probe_timeout, sup.run(spec)).await {
            Ok(Ok(supervisor::ExitStatus::Code(0))) => Ok(()),
            Ok(Ok(status)) => Err(format!(
                "{exe} cannot adopt the running processes ({} {}: {status})",
                upgrade::PROBE_FLAG,
                upgrade::STATE_FORMAT
            )),
            Ok(Err(e)) => Err(format!("{exe}: {e}")),
            Err(_) => {
                let _ = sup.remove(service::UPGRADE_PROBE).await;
                Err(format!(
                    "{exe} did not answer its probe within {} s",
                    self.probe_timeout.as_secs()
                ))
            }
        }
    }

    /// Carry out an upgrade whose probe passed, the manager process stopped: hand the process
    /// table over, and re-execute. Returns only when that fails, why, with everything taken
    /// back and supervised again.
    async fn upgrade(&self, started: &mut Started) -> String {
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
        let error = upgrade::exec(&self.exe, &image, started.own_binary.as_ref());
        let error = format!("cannot execute {}: {error}", self.exe.display());
        // Still this image: take everything back.
        match Adopted::take(&image) {
            Ok(adopted) => match Supervisor::adopt(adopted.handover) {
                Ok((sup, task)) => {
                    started.sup = sup;
                    started.sup_task = task;
                    started.store = adopted.store;
                    started.lock = adopted.lock;
                }
                Err(e) => tracing::error!("cannot supervise the processes again: {e}"),
            },
            Err(e) => tracing::error!("cannot take the processes back: {e}"),
        }
        error
    }

    /// The image of this process for the next one, every descriptor it names left open.
    /// On failure, the image of what was passed on so far (to take back) and why.
    fn pass_on(
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
        let (reexec_tx, mut reexec_rx) = tokio::sync::mpsc::unbounded_channel();
        let reload_bell = started.reload_bell.as_ref();
        let keeper = self.keep_manager(
            Keeper {
                sup: &started.sup,
                store: &mut started.store,
                upward: &started.upward,
                incarnations: &mut started.incarnations,
                reexec: &reexec_tx,
            },
            stop.clone(),
        );
        tokio::pin!(keeper);
        // When the drain ends, once it has begun.
        let mut drain_ends: Option<Instant> = None;
        // The upgrade probe under way, if any, and the managers' requests waiting for its
        // outcome: it runs beside the loop, so signals are handled meanwhile.
        let mut probing: Option<futures_util::future::BoxFuture<'_, Result<(), String>>> = None;
        let mut waiting_for_probe: Vec<tokio::sync::oneshot::Sender<Result<(), String>>> =
            Vec::new();
        let served = loop {
            let drained = async {
                match drain_ends {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                why = &mut keeper => break Served::Ended(why),
                begins = async { probing.as_mut().expect("polled only while probing").await }, if probing.is_some() => {
                    probing = None;
                    for reply in waiting_for_probe.drain(..) {
                        let _ = reply.send(begins.clone());
                    }
                    match begins {
                        Ok(()) => break Served::Upgrade,
                        Err(e) => tracing::error!("upgrade refused: {e}"),
                    }
                }
                Some(request) = reexec_rx.recv() => {
                    waiting_for_probe.push(request.reply);
                    if probing.is_none() {
                        probing = Some(Box::pin(self.probe(&sup)));
                    }
                }
                Some(event) = events.next() => match event {
                    RootEvent::Reload => match reload_bell {
                        Some(bell) => {
                            tracing::info!("SIGHUP received; the manager reloads the configuration files (now, or once it is back)");
                            bell.ring();
                        }
                        None => tracing::error!("SIGHUP received; no way to pass it on to the manager"),
                    },
                    RootEvent::Upgrade if probing.is_some() => {
                        tracing::info!("SIGUSR2 received; an upgrade is being probed already");
                    }
                    RootEvent::Upgrade => {
                        tracing::info!("SIGUSR2 received; upgrading in place");
                        probing = Some(Box::pin(self.probe(&sup)));
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
        if probing.take().is_some() {
            // A stop (or the manager's end) during the probe cancels the upgrade; the probe
            // process is stopped with the rest, or here when serving goes on.
            tracing::warn!("the upgrade probe is cancelled: the resolver stops");
            for reply in waiting_for_probe.drain(..) {
                let _ = reply.send(Err("cancelled: the resolver stops".to_owned()));
            }
            let _ = sup.remove(service::UPGRADE_PROBE).await;
        }
        let why = match served {
            Served::Ended(why) => why,
            Served::StopNow => {
                stop.cancel();
                // The keeper returns at once; its answer is ours anyway.
                let _ = (&mut keeper).await;
                Stop::Signal
            }
            Served::Upgrade => {
                stop.cancel();
                let _ = (&mut keeper).await;
                Stop::Upgrade
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
            Stop::Signal | Stop::Upgrade => 0,
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
        // A socket systemd keeps for our next start keeps its file too (clients connecting
        // during a restart wait in its backlog); otherwise nobody listens on it any more.
        let kept = started.upward.fd_store_capacity() > 0;
        if let Some(path) = started
            .api_socket
            .filter(|p| !kept && !p.as_os_str().is_empty())
        {
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
        // The manager parses everything that comes from outside: when we are root and the
        // workers have a user of their own, it runs as that user, with no_new_privs and no
        // capability but binding the workers' ports (it binds their listening sockets).
        if let Some(workers) = self.run_as.filter(|_| nix::unistd::geteuid().is_root()) {
            spec.user = Some(workers);
            spec.keep = supervisor::KeptCapabilities::BindServicePorts;
        }
        spec
    }

    /// Run the manager process, again and again when it fails, until it asks us to stop, it
    /// cannot be kept running, or `stop` fires.
    async fn keep_manager(&self, keeper: Keeper<'_>, stop: CancellationToken) -> Stop {
        let Keeper {
            sup,
            store,
            upward,
            incarnations,
            reexec,
        } = keeper;
        let executables = Executables::discover();
        // Exactly what the manager's specs hold (`manager::specs`): our programs, as the
        // workers' user, in the rundir, with our environment and an instance number, reading
        // their configuration from the rundir.
        let policy = ChildPolicy {
            programs: vec![executables.kresd.clone(), executables.cache_gc],
            user: self.run_as,
            cwd: Some(self.rundir.clone()),
            env: Some(EnvironmentPolicy {
                inherited: crate::manager::specs::child_base_env(),
                added: crate::manager::specs::ADDED_VARIABLES
                    .iter()
                    .map(OsString::from)
                    .collect(),
            }),
            file_arguments: vec![FileArgument {
                program: executables.kresd,
                flag: OsString::from("-c"),
                inside: self.rundir.clone(),
            }],
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
            reexec: Some(reexec),
            keep_upward: keeps_upward,
        };
        let backoff = Backoff::default();
        let mut failures = 0u32;
        // When the first of the unforgiven failures happened.
        let mut streak_since = std::time::SystemTime::now();
        let first = *incarnations + 1;
        loop {
            *incarnations += 1;
            let incarnation = *incarnations;
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
            let mut why = match end {
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
                    format!("answered nothing for {} s", hang_after.as_secs())
                }
                ChildEnd::Misbehaved(why) => {
                    tracing::error!("the manager process failed: {why}");
                    signal_manager(sup, nix::sys::signal::Signal::SIGKILL);
                    why
                }
                // Not its fault: it is stopped as gracefully as at any replacement.
                ChildEnd::LinkFailed(why) => {
                    tracing::error!("the link to the manager process failed: {why}; replacing it");
                    format!("its link failed: {why}")
                }
                ChildEnd::Gone => String::new(),
            };
            let last_exit = sup
                .snapshot()
                .processes
                .iter()
                .find(|p| p.name == service::MANAGER)
                .and_then(|p| p.last_exit);
            match sup.remove(service::MANAGER).await {
                Ok(status) => match status.or(last_exit) {
                    Some(status) => {
                        tracing::error!("the manager process ended: {status}");
                        if why.is_empty() {
                            why = status.to_string();
                        }
                    }
                    None => tracing::error!("the manager process ended"),
                },
                Err(e) => tracing::error!("the manager process: {e}"),
            }
            if incarnation == first && store_lacks_config(store) {
                // It never finished the first start: there is nothing running to keep.
                tracing::error!("the manager failed during start-up; stopping");
                return Stop::ManagerFailed;
            }
            // Never given up on while the workers serve: a request that crashes the manager
            // again and again costs the API, not DNS. The delay grows to the backoff's cap and
            // is forgiven after a stable period.
            if started.elapsed() >= MANAGER_STABLE_AFTER || failures == 0 {
                failures = 0;
                streak_since = std::time::SystemTime::now();
            }
            failures = failures.saturating_add(1);
            let delay = backoff.delay(failures, 0);
            let within = streak_since.elapsed().unwrap_or_default().as_secs();
            tracing::warn!(
                "the manager process failed {failures} times within {within} s; restarting it in {} ms; the workers keep running",
                delay.as_millis()
            );
            upward.status(&format!(
                "Manager restarting after {failures} failures within {within} s; workers serving"
            ));
            let record = crate::api::failures::ProcessFailureRecord {
                failures,
                since: streak_since
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                last: if why.is_empty() {
                    "ended".to_owned()
                } else {
                    why
                },
            };
            let kept = recovery::failure_record(&record)
                .map_err(|e| e.to_string())
                .and_then(|fd| store.put(recovery::STORED_FAILURES.to_owned(), fd));
            if let Err(e) = kept {
                tracing::warn!("cannot record the manager's failures: {e}");
            }
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

/// What keeps the manager process running: the supervisor, the fd store, systemd above us,
/// the incarnation count, and where its upgrade requests go.
struct Keeper<'a> {
    sup: &'a SupervisorHandle,
    store: &'a mut FdStore,
    upward: &'a UpwardNotifier,
    incarnations: &'a mut u32,
    reexec: &'a tokio::sync::mpsc::UnboundedSender<supervisor::remote::ReexecRequest>,
}

/// How long the new binary may take to answer its probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an upgrade waits for the process table to settle (no process starting or
/// stopping) before it gives up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Stop the manager process (it finishes API requests in flight), wait until no process is
/// starting or stopping, and take the table from the supervisor.
async fn settle_and_hand_over(
    sup: &SupervisorHandle,
) -> Result<supervisor::handover::Handover, String> {
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
                    Ok(Err(_)) => return Err("the supervisor is gone".into()),
                    Err(_) => return Err(format!("the processes did not settle: {why}")),
                }
            }
            Err(e) => return Err(format!("cannot hand the process table over: {e}")),
        }
    }
}

/// Record how an upgrade ended in the fd store, for every manager incarnation to come.
fn record_upgrade(started: &mut Started, from: &str, failed: Option<String>) {
    started.generation += 1;
    let record = crate::wire::upgrade::UpgradeRecord {
        generation: started.generation,
        outcome: match failed {
            None => crate::wire::upgrade::UpgradeOutcome::Upgraded,
            Some(_) => crate::wire::upgrade::UpgradeOutcome::Failed,
        },
        from: from.to_owned(),
        to: crate::build_version(),
        at: std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        error: failed,
        first_incarnation: started.incarnations + 1,
    };
    let kept = upgrade::record(&record)
        .map_err(|e| e.to_string())
        .and_then(|fd| started.store.put(upgrade::STORED_UPGRADE.to_owned(), fd));
    if let Err(e) = kept {
        tracing::warn!("cannot record the upgrade: {e}");
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

/// A new reload doorbell, its read end kept in `store` for every manager incarnation.
fn install_reload_bell(store: &mut FdStore) -> Option<recovery::ReloadBell> {
    let made = recovery::ReloadBell::new().map_err(|e| e.to_string());
    let kept = made.and_then(|(bell, reader)| {
        store.put(recovery::STORED_RELOAD.to_owned(), reader)?;
        Ok(bell)
    });
    kept.inspect_err(|e| tracing::error!("cannot pass reloads on to the manager: {e}"))
        .ok()
}

/// Which stored descriptors systemd keeps for us across restarts too: the API socket and the
/// workers' listening sockets (not the configuration, which a restart reads anew).
fn keeps_upward(name: &str) -> bool {
    name == STORED_API || name.starts_with(crate::manager::listen::STORED_PREFIX)
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
    /// `None` once handed to the next image, which removes the file at its stop.
    file: Option<std::fs::File>,
}

impl RundirLock {
    fn acquire(rundir: &Path) -> Result<RundirLock, DaemonError> {
        use std::io::{Read, Seek, Write};
        let path = rundir.join(PID_FILE_NAME);
        let mut file = open_pid_file(&path).map_err(|source| DaemonError::Rundir {
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
        Ok(RundirLock {
            path,
            file: Some(file),
        })
    }

    /// The lock an earlier image of this process held (same pid, same lock).
    fn adopt(rundir: &Path, fd: OwnedFd) -> RundirLock {
        RundirLock {
            path: rundir.join(PID_FILE_NAME),
            file: Some(std::fs::File::from(fd)),
        }
    }

    /// The locked file, for the next image; the file stays.
    fn into_fd(mut self) -> Option<OwnedFd> {
        self.file.take().map(OwnedFd::from)
    }
}

/// Open the pid file for locking and writing, never through a link and never into a file
/// that is not ours: a file there is used only when it is a regular file of our user with a
/// single link (a stale one of an earlier run); anything else (a link, a hard link to another
/// file, someone else's file, a fifo) is removed and the file created anew with `O_EXCL`.
fn open_pid_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let ours = |meta: &std::fs::Metadata| {
        meta.is_file() && meta.uid() == nix::unistd::geteuid().as_raw() && meta.nlink() == 1
    };
    for _ in 0..4 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if ours(&meta) => {
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                    .open(path)
                {
                    // Checked again through the descriptor: the name may have been replaced
                    // since the `lstat`.
                    Ok(file) if ours(&file.metadata()?) => return Ok(file),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {}
                    Err(e) => return Err(e),
                }
                tracing::warn!("replacing {}, which is not our pid file", path.display());
                remove_if_present(path)?;
            }
            Ok(meta) if meta.is_dir() => {
                return Err(std::io::Error::other(format!(
                    "{} is a directory",
                    path.display()
                )))
            }
            Ok(meta) => {
                if meta.is_file() && held_by_another(path)? {
                    // Another resolver's lock, running as another user: keep out of its way
                    // (the caller's own lock attempt reports who holds it).
                    return std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                        .open(path);
                }
                tracing::warn!("replacing {}, which is not our pid file", path.display());
                remove_if_present(path)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(path)
                {
                    Ok(file) => return Ok(file),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} keeps being replaced",
        path.display()
    )))
}

/// Whether the regular file at `path` is locked by a live process (opened read-only, never
/// through a link, only to ask).
fn held_by_another(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(file.metadata()?.is_file() && !supervisor::os::try_lock_exclusive(&file)?)
}

/// Remove `path` (never what a link there points to); already gone is fine.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Drop for RundirLock {
    fn drop(&mut self) {
        if self.file.is_none() {
            return;
        }
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
            drain_period: Duration::ZERO,
            api_socket_group: None,
            run_as: None,
            manager_argv: manager_argv.iter().map(OsString::from).collect(),
            manager_cwd: None,
            exe: PathBuf::from("/nonexistent"),
            argv: Vec::new(),
            log: (
                crate::config::LogLevel::Info,
                crate::config::LogTarget::Stderr,
            ),
            probe_timeout: PROBE_TIMEOUT,
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
        let probe = tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            std::fs::File::open(&fifo)
                .and_then(|mut f| f.read_to_string(&mut text))
                .expect("the probe's pid");
            text.trim().parse::<i32>().expect("a pid")
        })
        .await
        .expect("reader");
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

    #[test]
    fn the_pid_file_never_writes_through_a_link_or_into_a_file_not_ours() {
        use std::os::unix::fs::MetadataExt;
        let dir = TempDir::new("pidfile");
        let target = dir.0.join("precious");
        std::fs::write(&target, "keep me").expect("target");
        let pid_file = dir.0.join(PID_FILE_NAME);
        std::os::unix::fs::symlink(&target, &pid_file).expect("plant a link");
        let lock = RundirLock::acquire(&dir.0).expect("lock through a planted link");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
        let meta = std::fs::symlink_metadata(&pid_file).expect("stat");
        assert!(meta.is_file(), "the link was replaced by our own file");
        assert_eq!(
            std::fs::read_to_string(&pid_file).expect("pid file").trim(),
            std::process::id().to_string()
        );
        drop(lock);
        // A hard link to another file is never truncated.
        std::fs::hard_link(&target, &pid_file).expect("plant a hard link");
        let lock = RundirLock::acquire(&dir.0).expect("lock beside a hard link");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
        assert_eq!(std::fs::metadata(&target).expect("stat").nlink(), 1);
        drop(lock);
    }

    #[test]
    fn a_pid_file_locked_by_another_process_is_reported_not_replaced() {
        let dir = TempDir::new("pidfile-held");
        let held = RundirLock::acquire(&dir.0).expect("first");
        match RundirLock::acquire(&dir.0) {
            Err(DaemonError::Locked(_, holder)) => {
                assert_eq!(holder, std::process::id().to_string())
            }
            other => panic!("expected the lock to be held, got {:?}", other.err()),
        }
        drop(held);
        RundirLock::acquire(&dir.0).expect("free again");
    }

    #[test]
    fn a_rundir_the_workers_could_write_is_made_sticky_and_ours() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // Only root changes owners, and the daemon does this only as root.
        assert!(nix::unistd::geteuid().is_root(), "the tests run as root");
        let dir = TempDir::new("rundir-shared");
        let workers = supervisor::Credentials {
            uid: 4242,
            gid: 4243,
        };
        // A Kubernetes emptyDir, and a directory given to the workers' user.
        for (uid, mode) in [(0, 0o777), (workers.uid, 0o755)] {
            std::os::unix::fs::chown(&dir.0, Some(uid), Some(0)).expect("chown");
            std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(mode)).expect("mode");
            keep_rundir_from_workers(&dir.0, workers).expect("secured");
            let meta = std::fs::metadata(&dir.0).expect("stat");
            assert_eq!(
                (meta.uid(), meta.gid(), meta.mode() & 0o7777),
                (0, workers.gid, SHARED_RUNDIR_MODE)
            );
        }
        // What a manager running as root left there is handed to the workers' user; the pid
        // file is not.
        std::fs::write(dir.0.join("kresd0.conf"), "-- generated").expect("file");
        std::fs::write(dir.0.join(PID_FILE_NAME), "1").expect("pid file");
        keep_rundir_from_workers(&dir.0, workers).expect("secured");
        let owner = |name: &str| std::fs::metadata(dir.0.join(name)).expect("stat").uid();
        assert_eq!(owner("kresd0.conf"), workers.uid);
        assert_eq!(owner(PID_FILE_NAME), 0);
        // Never through a hard link to another file.
        let elsewhere = dir.0.join("elsewhere");
        std::fs::write(&elsewhere, "root's").expect("file");
        std::fs::hard_link(&elsewhere, dir.0.join("kresd1.conf")).expect("hard link");
        keep_rundir_from_workers(&dir.0, workers).expect("secured");
        assert_eq!(owner("elsewhere"), 0, "a hard link is not followed");
        // A link is never followed.
        let link = dir.0.join("link");
        std::os::unix::fs::symlink(&dir.0, &link).expect("link");
        keep_rundir_from_workers(&link, workers).expect_err("a link is refused");
    }
}
