//! The start of the root process: from the command line and the configuration files (a
//! start), or from the image an in-place upgrade handed over (a resume), to a running
//! supervisor, the API's listening socket, the fd store and the reload doorbell.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use supervisor::remote::{self, FdStore};
use supervisor::upward::UpwardNotifier;
use supervisor::{Supervisor, SupervisorOptions};

use super::super::logging::{self, Logging};
use super::super::{recovery, resolve_user, upgrade, STORED_API};
use super::lock::RundirLock;
use super::rundir::{keep_rundir_from_workers, make_missing_rundir, refuse_foreign_entries};
use super::{
    keep_in, record_upgrade, signal_events, Begin, DaemonError, Invocation, KeepError, Root,
    Started, NOTIFY_SOCKET_NAME, PROBE_TIMEOUT,
};
use kres_config::ManagementSchema;

/// Why the root's start failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    #[error("cannot start the supervisor: {0}")]
    Supervisor(#[source] std::io::Error),
    #[error("cannot adopt the process table: {0}")]
    Adopt(#[source] std::io::Error),
}

/// Why the API's endpoint could not be bound.
#[derive(Debug, thiserror::Error)]
enum BindFailed {
    #[error("{0}")]
    Bind(#[source] crate::api::server::BindError),
    #[error("management API: {0}")]
    Descriptor(#[source] std::io::Error),
}

/// Why a new image could not take what the old one handed over.
#[derive(Debug, thiserror::Error)]
pub(super) enum AdoptError {
    #[error("the rundir lock: {0}")]
    Lock(#[source] std::io::Error),
    #[error("stored {name}: {source}")]
    Stored {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the process table: {0}")]
    Table(#[source] std::io::Error),
}

/// Parse, lock and run. Returns the process exit code.
pub fn run(invocation: Invocation) -> ExitCode {
    let logging = Logging::init(
        invocation.log.level,
        invocation.log.target,
        "knot-resolver",
        &invocation.env,
    );
    if let Some(inherited) = upgrade::inherited(&invocation.env) {
        return resume(invocation, inherited, logging);
    }
    raise_open_files_limit();
    let files: Vec<PathBuf> = invocation
        .config_files
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    // Only what the root needs; the manager validates the whole configuration (and a
    // failure there stops the resolver before anything serves).
    let view = match load_root_view(
        &files,
        kres_config::LogTargetArg::Given(invocation.log.target),
    ) {
        Ok(view) => view,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    };
    if let Some(logging) = logging {
        logging.configure(view.logging.level, view.logging.target);
    }
    let log = (view.logging.level, view.logging.target);
    let kres_config::RootView {
        rundir, management, ..
    } = view;
    // A configuration in another form than the plain block one is parsed whole (~60 MiB of
    // heap for 100,000 records): its pages go back to the kernel now, not at the resolver's end.
    heap::release_free_heap();
    heap::release_unused_text();
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
    if let Err(e) = refuse_foreign_entries(&rundir) {
        tracing::error!("{e}");
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
        env: std::sync::Arc::new(invocation.env),
    };
    serve_root(root, Begin::Start(management, Some(lock)))
}

/// The root's view of the configuration, its paths checked. A rundir that is not there but
/// whose directory is gets made (as systemd makes a `RuntimeDirectory`), then the view is
/// checked again: our image ships no rundir, so that a runtime's plain `--tmpfs` over it is
/// root's, mode 1777, rather than a copy of the image's directory narrowed by the runtime's
/// umask (podman `--read-only` gives 1750, which no other UID can write).
fn load_root_view(
    files: &[PathBuf],
    target: kres_config::LogTargetArg,
) -> Result<kres_config::RootView, kres_config::ConfigError> {
    let load = |checks| kres_config::load_root_view(files, checks, target.clone());
    let checked = load(kres_config::PathChecks::Strict);
    if checked.is_ok() {
        return checked;
    }
    match load(kres_config::PathChecks::Lenient) {
        Ok(view) if make_missing_rundir(&view.rundir) => load(kres_config::PathChecks::Strict),
        _ => checked,
    }
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

/// The credentials of `--worker-user`, if given and we are root (an error is logged). Not
/// root, we cannot switch users: every process runs as we do, which is said when the user
/// named is another.
fn worker_credentials(invocation: &Invocation) -> Result<Option<supervisor::Credentials>, ()> {
    let Some(name) = invocation.worker_user.as_deref() else {
        return Ok(None);
    };
    let requested = resolve_user(name).map_err(|e| tracing::error!("--worker-user: {e}"))?;
    let euid = nix::unistd::geteuid();
    if euid.is_root() {
        return Ok(Some(requested));
    }
    if requested.uid != euid.as_raw() {
        tracing::warn!(
            "--worker-user {name}: not root (uid {euid}), so kresd, the policy-loader and kres-cache-gc run as uid {euid} too"
        );
    }
    Ok(None)
}

/// The manager process's command line: this very binary (`/proc/self/exe`, so that a file
/// replaced on disk never mixes versions) with the manager flag and our arguments.
fn manager_argv(args: &[OsString]) -> Vec<OsString> {
    let mut argv = vec![
        OsString::from("/proc/self/exe"),
        OsString::from(super::super::MANAGER_FLAG),
    ];
    argv.extend(args.iter().cloned());
    argv
}

/// Run as the new image of an in-place upgrade: adopt what the old one handed over, or fall
/// back to the old binary when that cannot be read.
fn resume(
    invocation: Invocation,
    inherited: Result<upgrade::Inherited, upgrade::StateError>,
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
        if inherited.fallback.is_some() && upgrade::refusal_injected(&invocation.env) {
            return Err(upgrade::StateError::RefusedByFaultInjection);
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
                let e = upgrade::exec_fallback(old, inherited.state, &argv, &invocation.env);
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
        env: std::sync::Arc::new(invocation.env),
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
pub(super) struct Adopted {
    /// The rundir lock the old image held.
    pub(super) lock: Option<RundirLock>,
    /// The fd store.
    pub(super) store: FdStore,
    /// The supervisor's process table.
    pub(super) handover: supervisor::handover::Handover,
    /// The API's socket file, removed at the stop.
    pub(super) api_socket: Option<PathBuf>,
    /// Manager incarnations so far, upgrades tried so far.
    pub(super) incarnations: u32,
    pub(super) generation: u32,
}

impl Adopted {
    /// Take every descriptor the image names.
    pub(super) fn take(image: &upgrade::RootImage) -> Result<Adopted, AdoptError> {
        let lock = image
            .lock_fd
            .map(upgrade::take_back)
            .transpose()
            .map_err(AdoptError::Lock)?;
        let mut entries = Vec::with_capacity(image.store.len());
        for (name, fd) in &image.store {
            let fd = upgrade::take_back(*fd).map_err(|source| AdoptError::Stored {
                name: name.clone(),
                source,
            })?;
            entries.push((name.clone(), fd));
        }
        let handover = supervisor::handover::Handover::claim(image.supervisor.clone())
            .map_err(AdoptError::Table)?;
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

impl Root {
    /// Adopt what an old image handed over; the next manager incarnation adopts the workers.
    pub(super) fn adopt(
        &self,
        adopted: Adopted,
        from: &str,
        failed: Option<String>,
        upward: UpwardNotifier,
    ) -> Result<Started, StartError> {
        let (sup, sup_task) = Supervisor::adopt(adopted.handover, logging::child_line_level)
            .map_err(StartError::Adopt)?;
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
    pub(super) fn start(
        &self,
        management: &ManagementSchema,
        lock: Option<RundirLock>,
        upward: UpwardNotifier,
    ) -> Result<Started, StartError> {
        if let Err(e) = supervisor::os::cloexec_inherited_fds(&[]) {
            tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
        }
        // Children running as another user must be able to send READY=1 to our socket.
        let (sup, sup_task) = Supervisor::start(SupervisorOptions {
            notify_socket: self.rundir.join(NOTIFY_SOCKET_NAME),
            notify_senders: self.run_as.map(|c| c.gid),
            line_levels: logging::child_line_level,
        })
        .map_err(StartError::Supervisor)?;
        let mut store = FdStore::default();
        let api_socket = self.bind_api(management, &mut store, &upward);
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

    /// The API's listening socket, into `store`: the one the service manager kept for us
    /// (`FDSTORE=1`) when it still listens on the configured endpoint, else bound anew; with
    /// the workers' listening sockets it kept. The socket is ours, so that clients wait in
    /// its backlog while the manager restarts instead of being refused. Its file (an empty
    /// path for TCP), or `None` when it cannot be bound (logged).
    fn bind_api(
        &self,
        management: &ManagementSchema,
        store: &mut FdStore,
        upward: &UpwardNotifier,
    ) -> Option<PathBuf> {
        let kept_api = take_kept_sockets(&self.env.service_manager, store).filter(|fd| {
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
                .map_err(BindFailed::Bind)
                .and_then(|listener| {
                    tracing::info!("management API listening on {}", listener.endpoint());
                    let file = listener.socket_file().map(Path::to_path_buf);
                    let fd = listener.into_fd().map_err(BindFailed::Descriptor)?;
                    upward.store_fd(STORED_API, fd.as_fd());
                    let _ = store.put(STORED_API.to_owned(), fd);
                    Ok(file)
                }),
        };
        match bound {
            // A TCP endpoint has no file: an empty path marks "bound".
            Ok(file) => Some(file.unwrap_or_default()),
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        }
    }
}

/// Take what systemd kept for us across a restart (`FDSTORE=1`): the workers' listening
/// sockets into `store`, with queries and connections waiting in them; the API socket is
/// returned. Anything else is closed.
fn take_kept_sockets(
    vars: &supervisor::upward::ServiceManagerVars,
    store: &mut FdStore,
) -> Option<OwnedFd> {
    let mut kept_api = None;
    for (name, fd) in supervisor::upward::listen_fds(vars, remote::MAX_STORED) {
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
    kept_api
}

/// A new reload doorbell, its read end kept in `store` for every manager incarnation.
fn install_reload_bell(store: &mut FdStore) -> Option<recovery::ReloadBell> {
    let made = recovery::ReloadBell::new().map_err(KeepError::Make);
    let kept = made.and_then(|(bell, reader)| {
        keep_in(store, recovery::STORED_RELOAD, Ok(reader))?;
        Ok(bell)
    });
    kept.inspect_err(|e| tracing::error!("cannot pass reloads on to the manager: {e}"))
        .ok()
}

/// Which stored descriptors systemd keeps for us across restarts too: the API socket and the
/// workers' listening sockets (not the configuration, which a restart reads anew).
pub(super) fn keeps_upward(name: &str) -> bool {
    name == STORED_API || name.starts_with(crate::manager::listen::STORED_PREFIX)
}
