//! The manager as its own process: `knot-resolver --manager-process …`, started and
//! supervised by the root process (`daemon::root`). Everything that parses untrusted input
//! runs here: configuration files on reload, API requests, watched files; so does the
//! config-change pipeline. It commands the root's supervisor through a `supervisor::remote`
//! link on descriptor [`LINK_FD`], and keeps in the root's fd store what its next incarnation
//! needs: the API's listening socket (stored by the root), the running configuration (a
//! sealed memfd) and the workers' listening sockets. A crash here loses nothing: the next
//! incarnation adopts the running workers and serves the API socket the root kept open.
//!
//! Its phases are the root's: restore (`restore`: what the root kept), start (`start`: the
//! manager task under supervision), serve (`lifecycle::serve`: a stream of
//! [`ManagerEvent`]s, signals among them, through one state machine), stop.

pub mod lifecycle;
mod restore;
mod start;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use futures_util::stream;

use super::logging::Logging;
use super::{LogArgs, LINK_FD, MANAGER_FLAG};
use crate::manager::listen::SocketOwner;
use crate::watchdog::ConfigFiles;
use kres_wire::environment::Environment;
pub use lifecycle::{ManagerEvent, START_MAX_FAILURES};
use restore::{Incarnation, NotRestored, Restored};
use start::{Running, Settings};
use supervisor::remote::Parent;

/// The manager process's name (`comm`).
pub const PROCESS_NAME: &std::ffi::CStr = c"kres-manager";

/// Whether the configuration files themselves are watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchConfig {
    /// Only reloads (`kresctl reload`, SIGHUP) read them again, as upstream.
    Off,
    /// `--watch-config`: reload when a configuration file changes.
    On,
}

/// What the manager process is told on its command line (the daemon's own arguments).
pub struct ManagerInvocation {
    /// The configuration files, as given.
    pub files: Vec<PathBuf>,
    /// Who binds the workers' listening sockets.
    pub socket_owner: SocketOwner,
    /// `--worker-user` or its environment form.
    pub worker_user: Option<String>,
    /// The groups of the API's roles on its unix socket.
    pub api_groups: super::ApiGroupNames,
    /// `--loglevel` and `--logtarget`.
    pub log: LogArgs,
    /// `--watch-config`.
    pub watch_config: WatchConfig,
    /// `--worker-hang-timeout`: how long a worker may leave its control socket unanswered
    /// before it is killed; `None`: never.
    pub worker_hang_timeout: Option<std::time::Duration>,
    /// The environment the process was started with.
    pub env: Environment,
}

/// Run as the manager process. Returns the exit code.
pub fn run(invocation: ManagerInvocation) -> ExitCode {
    let began = std::time::Instant::now();
    let log = invocation.log;
    let env = Arc::new(invocation.env);
    let logging = Logging::init(log.level, log.target, &PROCESS_NAME.to_string_lossy(), &env);
    // `ps` and `top` show the manager by this name rather than the `exe` it was started as.
    let _ = nix::sys::prctl::set_name(PROCESS_NAME);
    limit_resources(env.manager_memory_max_mib);
    let link = match supervisor::os::take_inherited_fd(LINK_FD) {
        Ok(fd) => fd,
        Err(_) => {
            eprintln!("knot-resolver: {MANAGER_FLAG} is started by knot-resolver itself");
            return ExitCode::from(2);
        }
    };
    let files: Vec<PathBuf> = invocation
        .files
        .into_iter()
        .map(|p| std::path::absolute(&p).unwrap_or(p))
        .collect();
    // A large configuration's start allocates in one burst: its heap is made ready on the
    // second core meanwhile.
    let heap = heap::prefault_heap(kres_config::load_heap_bytes(&files));
    let settings = Settings {
        watched: match invocation.watch_config {
            WatchConfig::On => ConfigFiles::Watched(files.clone()),
            WatchConfig::Off => ConfigFiles::Unwatched,
        },
        source: kres_config::ConfigSource {
            files,
            checks: kres_config::PathChecks::Manager,
            logtarget_arg: kres_config::LogTargetArg::Given(log.target),
        },
        hang_timeout: invocation.worker_hang_timeout,
        socket_owner: invocation.socket_owner,
        worker_user: invocation.worker_user,
        api_groups: invocation.api_groups,
        logging,
        began,
        heap,
        env,
    };
    crate::block_on("knot-resolver manager", async move {
        let parent = match restore::connect(link).await {
            Ok(parent) => parent,
            Err(e) => {
                eprintln!("knot-resolver manager: {e}");
                return ExitCode::from(1);
            }
        };
        // The link's task is the process's: it outlives every other task, and the process
        // ends once it has.
        let link = parent.link_task();
        let exit = manage(parent, settings).await;
        link.stop().await;
        exit
    })
}

/// The manager process once its parent welcomed it: restore what the last incarnation left,
/// start, serve until stopped, stop. Returns the exit code.
async fn manage(parent: Parent, settings: Settings) -> ExitCode {
    let restored = match Restored::take(parent, &settings.source) {
        Ok(restored) => restored,
        Err(not) => {
            let NotRestored { parent, error } = *not;
            eprintln!("knot-resolver: {error}");
            if Incarnation::of(&parent) == Incarnation::First {
                // Nothing runs yet: the resolver cannot start.
                let _ = parent.exit(1).await;
            }
            return ExitCode::from(1);
        }
    };
    if let Some(logging) = settings.logging {
        logging.configure_manager(&restored.loaded.model.logging);
    }
    let signals = match lifecycle::signal_events() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let checked = match start::check(&restored, &settings) {
        Ok(checked) => checked,
        Err(e) => {
            tracing::error!("{e}");
            if e.stops_the_resolver(restored.incarnation) {
                let _ = restored.parent.exit(1).await;
            }
            return ExitCode::from(1);
        }
    };
    let transferred = match start::first_transfers(&restored).await {
        Ok(transferred) => transferred,
        Err(e) => {
            tracing::error!("{e}");
            let _ = restored.parent.exit(1).await;
            return ExitCode::from(1);
        }
    };
    let kresd = start::learn_kresd_version(&restored, &settings.env).await;
    let (mut running, sources) = Running::start(restored, settings, checked, transferred, kresd);
    let exit = lifecycle::serve(stream::select(signals, sources), &mut running).await;
    running.stop().await;
    ExitCode::from(exit)
}

/// Bound what a runaway manager can take from the machine: its address space (an allocation
/// beyond aborts it, and the root starts another), and the OOM killer picks it before any
/// worker. `memory_max_mib` is [`MEMORY_MAX_VAR`]'s, if it set one.
fn limit_resources(memory_max_mib: Option<u64>) {
    use nix::sys::resource::{setrlimit, Resource};
    let mib = memory_max_mib.unwrap_or(DEFAULT_MEMORY_MAX_MIB);
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
pub use kres_wire::environment::MEMORY_MAX_VAR;

/// The manager's OOM score adjustment: the OOM killer takes it before any worker.
const OOM_SCORE_ADJ: &str = "500";
