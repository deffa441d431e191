//! The supervisor specs of Knot Resolver's programs: command lines, environments, users,
//! readiness and restart policies of kresd workers, the canary, the policy-loader and
//! kres-cache-gc. Pure: building a spec starts nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use supervisor::command_line::{Arg, CommandLine};
use supervisor::{Readiness, RestartPolicy, ServiceSpec};

use crate::service::{self, ServiceKind, WorkerId};
use kres_config::{KresConfig, LogLevel};
use kres_wire::environment::Environment;

use super::Executables;

/// How long a kresd may take between spawn and `READY=1` (upstream: 60 s).
pub const WORKER_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker that needs more than 5 automatic restarts within 30 s is failed; the manager then
/// makes bounded attempts to fix it before stopping the resolver (see `repairs`).
pub const WORKER_START_LIMIT: supervisor::StartLimit = supervisor::StartLimit {
    burst: 5,
    interval: Duration::from_secs(30),
};

/// The policy-loader's generated configuration, in the rundir.
pub const POLICY_LOADER_CONF: &str = "policy-loader.conf";

/// The canary's generated configuration, in the rundir.
pub const CANARY_CONF: &str = "canary.conf";

/// Restart policy of kresd workers: the first crash of a streak (a worker that had been ready
/// for 5 s, or the first ever) is restarted at once, however young the worker (what waits in
/// its sockets waits for it; DNS service matters more than anything); a crash loop backs off
/// from 250 ms to 10 s with at least 1 s between spawns.
fn worker_backoff() -> supervisor::Backoff {
    supervisor::Backoff::try_new(
        Duration::from_millis(250),
        Duration::from_secs(10),
        Duration::from_secs(1),
        100,
        Duration::from_secs(5),
    )
    .unwrap_or_default()
}

/// Builds specs for one set of executables.
#[derive(Debug, Clone)]
pub struct Specs {
    /// Paths of kresd and kres-cache-gc, the user they run as and the environment they
    /// start from.
    executables: Executables,
}

impl Specs {
    pub fn new(executables: Executables) -> Specs {
        Specs { executables }
    }

    /// The user the children run as, when another than this process's.
    pub fn workers_user(&self) -> Option<supervisor::Credentials> {
        self.executables.run_as
    }

    /// The group generated files must be readable by (the workers'), when they run as
    /// another user.
    pub fn workers_group(&self) -> Option<u32> {
        self.executables.run_as.map(|c| c.gid)
    }

    fn env_with(&self, extra: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        let mut env = self.executables.base_env.clone();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((OsString::from(k), OsString::from(v)));
        }
        env
    }

    /// A kresd running `conf`, as instance `id`, in `rundir`, with the `-S FD[:tls]`
    /// arguments `sockets`.
    fn kresd(
        &self,
        name: String,
        kind: ServiceKind,
        conf: PathBuf,
        id: WorkerId,
        rundir: &Path,
        sockets: Vec<OsString>,
    ) -> ServiceSpec {
        let mut argv: Vec<OsString> = vec![
            self.executables.kresd.clone().into_os_string(),
            "-c".into(),
            conf.into_os_string(),
            "-n".into(),
        ];
        argv.extend(sockets);
        let mut spec = ServiceSpec::new(name, kind.as_str(), argv);
        spec.env = self.env_with(&[(INSTANCE_VAR, &id.0.to_string())]);
        spec.user = self.executables.run_as;
        spec.cwd = Some(rundir.to_owned());
        spec.readiness = Readiness::Notify {
            timeout: WORKER_READY_TIMEOUT,
        };
        spec
    }

    /// Worker `id`'s spec; `sockets` are its `-S FD[:tls]` arguments.
    pub fn worker(&self, cfg: &KresConfig, id: WorkerId, sockets: Vec<OsString>) -> ServiceSpec {
        let conf = id.config_file(&cfg.rundir);
        let mut spec = self.kresd(
            id.name(),
            ServiceKind::Kresd,
            conf,
            id,
            &cfg.rundir,
            sockets,
        );
        spec.restart = RestartPolicy::Always;
        spec.backoff = worker_backoff();
        spec.start_limit = WORKER_START_LIMIT;
        spec
    }

    /// The canary: a worker of the new configuration run as instance `id` without sockets,
    /// never restarted.
    pub fn canary(&self, cfg: &KresConfig, id: WorkerId) -> ServiceSpec {
        let conf = cfg.rundir.join(CANARY_CONF);
        let name = service::CANARY.to_owned();
        let mut spec = self.kresd(name, ServiceKind::Canary, conf, id, &cfg.rundir, Vec::new());
        spec.restart = RestartPolicy::Never;
        // Without sockets of its own kresd's post-configuration would listen on 127.0.0.1@53
        // and ::1@53 by default: taking queries, or failing as an unprivileged user.
        spec.env
            .push((OsString::from(NO_LISTEN_VAR), OsString::from("1")));
        spec
    }

    pub fn policy_loader(&self, cfg: &KresConfig) -> ServiceSpec {
        let mut spec = ServiceSpec::new(
            service::POLICY_LOADER,
            ServiceKind::PolicyLoader.as_str(),
            vec![
                self.executables.kresd.clone().into_os_string(),
                "-c".into(),
                cfg.rundir.join(POLICY_LOADER_CONF).into_os_string(),
                // `-c -`: do not load kresd's postconfig defaults.
                "-c".into(),
                "-".into(),
                "-n".into(),
            ],
        );
        spec.env = self.env_with(&[]);
        spec.user = self.executables.run_as;
        spec.cwd = Some(cfg.rundir.clone());
        spec.restart = RestartPolicy::Never;
        // Stopped only when it overran its deadline (busy in Lua, deaf to SIGTERM) or on
        // shutdown: SIGKILL soon.
        spec.stop.timeout = Duration::from_secs(2);
        spec
    }

    pub fn cache_gc(&self, cfg: &KresConfig) -> ServiceSpec {
        let gc = &cfg.cache.garbage_collector;
        let mut argv: Vec<OsString> = vec![
            self.executables.cache_gc.clone().into_os_string(),
            "-c".into(),
            cfg.cache.storage.clone().into_os_string(),
        ];
        let values = [
            gc.interval.millis(),
            u64::from(gc.threshold),
            u64::from(gc.release),
            gc.rw_deletes,
            gc.rw_reads,
            gc.temp_keys_space.mbytes(),
            gc.rw_duration.micros(),
            gc.rw_delay.micros(),
        ];
        for (flag, value) in CACHE_GC_NUMERIC_FLAGS.into_iter().zip(values) {
            argv.push(flag.into());
            argv.push(value.to_string().into());
        }
        if cache_gc_verbose(cfg) {
            argv.push("-v".into());
        }
        if gc.dry_run {
            argv.push("-n".into());
        }
        let mut spec = ServiceSpec::new(service::CACHE_GC, ServiceKind::CacheGc.as_str(), argv);
        spec.env = self.env_with(&[]);
        spec.user = self.executables.run_as;
        spec.cwd = Some(cfg.rundir.clone());
        spec
    }
}

/// kres-cache-gc's numeric options, in the order its command line has them: interval (ms),
/// threshold and release (%), deletes and reads per transaction, temporary keys' space (MB),
/// transaction duration and delay (µs).
const CACHE_GC_NUMERIC_FLAGS: [&str; 8] = ["-d", "-u", "-f", "-l", "-L", "-t", "-m", "-w"];

/// The shapes of every command line [`Specs`] builds for `executables` in `rundir`, exactly:
/// what the root process lets the manager run (a worker or the canary, the policy-loader,
/// kres-cache-gc). kresd reads only a file directly in the rundir.
pub(crate) fn command_lines(executables: &Executables, rundir: &Path) -> Vec<CommandLine> {
    let kresd = || {
        CommandLine::program(&executables.kresd)
            .flag("-c")
            .then(Arg::FileIn(rundir.to_owned()))
    };
    // A worker with its `-S FD[:tls]` sockets; the canary has none.
    let worker = kresd().flag("-n").repeated(vec![
        Arg::exactly("-S"),
        Arg::Descriptor(vec![OsString::from(":tls")]),
    ]);
    let policy_loader = kresd().flag("-c").flag("-").flag("-n");
    let cache_gc = CACHE_GC_NUMERIC_FLAGS.into_iter().fold(
        CommandLine::program(&executables.cache_gc)
            .flag("-c")
            .then(Arg::Path),
        |line, flag| line.flag(flag).then(Arg::Number),
    );
    let cache_gc = cache_gc.maybe(Arg::exactly("-v")).maybe(Arg::exactly("-n"));
    vec![worker, policy_loader, cache_gc]
}

/// Whether kres-cache-gc runs verbose (`-v`): at level `debug` or with the `cache-gc` group,
/// as upstream decides. The only part of `logging` the GC reads; it cannot change it live.
pub fn cache_gc_verbose(cfg: &KresConfig) -> bool {
    cfg.logging.level == LogLevel::Debug
        || cfg.logging.groups.iter().flatten().any(|g| g == "cache-gc")
}

/// Where a new image of the daemon finds its state after an in-place upgrade
/// (`daemon::upgrade`); never passed to a child.
pub use kres_wire::environment::UPGRADE_STATE_VAR;

/// The variables a spec adds to [`child_base_env`] (the root lets specs add no other).
pub(crate) const ADDED_VARIABLES: &[&str] = &[INSTANCE_VAR, NO_LISTEN_VAR];

/// Which worker a kresd is (`SYSTEMD_INSTANCE`, as under systemd's `kresd@N`).
const INSTANCE_VAR: &str = "SYSTEMD_INSTANCE";

/// Set for the canary: kresd listens on nothing by default.
const NO_LISTEN_VAR: &str = "KRESD_NO_LISTEN";

/// Our environment minus what our own service manager meant for us alone.
pub(crate) fn child_base_env(env: &Environment) -> Vec<(OsString, OsString)> {
    const PRIVATE: &[&str] = &[
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        UPGRADE_STATE_VAR,
    ];
    env.vars_except(PRIVATE)
}
