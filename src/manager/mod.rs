//! The manager: turns a validated configuration into running processes. It writes the Lua
//! files, runs the policy-loader to completion, starts the workers (a canary first, then the
//! rest in parallel) and the cache garbage collector through the supervisor, and knows the
//! process names, command lines and environments of Knot Resolver's programs.

pub mod executables;
pub mod listen;
pub mod process;
pub mod task;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use supervisor::{
    ExitStatus, Readiness, RestartPolicy, ServiceSpec, SupervisorError, SupervisorHandle,
};

use crate::config::{KresConfig, LoadedConfig, LogLevel};
use crate::{control, lua};
pub use executables::Executables;
use listen::{ListenError, SocketOwner, SocketTable};

/// How long the policy-loader may run before it is stopped and the change refused: generous,
/// for RPZ files of millions of rules. Overridden by [`POLICY_LOADER_TIMEOUT_VAR`] (seconds).
pub const POLICY_LOADER_TIMEOUT: Duration = Duration::from_secs(600);

/// Environment variable overriding [`POLICY_LOADER_TIMEOUT`], in seconds.
pub const POLICY_LOADER_TIMEOUT_VAR: &str = "KRES_POLICY_LOADER_TIMEOUT";

fn policy_loader_deadline() -> Duration {
    std::env::var(POLICY_LOADER_TIMEOUT_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(POLICY_LOADER_TIMEOUT)
}

/// How long a kresd may take between spawn and `READY=1` (upstream: 60 s).
pub const WORKER_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker that needs more than 5 automatic restarts within 30 s is failed; the manager then
/// makes bounded attempts to fix it before stopping the resolver (see `task::Instability`).
pub const WORKER_START_LIMIT: supervisor::StartLimit = supervisor::StartLimit {
    burst: 5,
    interval: Duration::from_secs(30),
};

/// Restart policy of kresd workers: a worker that was ready for 5 s and then crashed is
/// restarted at once (DNS service matters more than anything); a crash loop backs off from
/// 250 ms to 10 s with at least 1 s between spawns.
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

/// Service kinds, as shown in snapshots and `/processes`.
pub const KIND_KRESD: &str = "kresd";
pub const KIND_GC: &str = "gc";
pub const KIND_POLICY_LOADER: &str = "policy-loader";

/// The name of worker `id` (`kresd0`, `kresd1`, …).
pub fn worker_name(id: u32) -> String {
    format!("kresd{id}")
}

pub const GC_NAME: &str = "cache-gc";
pub const CANARY_NAME: &str = "canary";
pub const KIND_CANARY: &str = "canary";
pub const POLICY_LOADER_NAME: &str = "policy-loader";

/// Something went wrong while applying a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy-loader failed: {0}; the rules database was not updated")]
    PolicyLoader(String),
    #[error("worker {name} did not start: {source}")]
    Worker {
        name: String,
        source: SupervisorError,
    },
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
    /// A listening socket of `network.listen` could not be bound; nothing changed.
    #[error("[/network/listen] {0}")]
    Listen(#[from] ListenError),
    #[error("[{path}] cannot be changed at runtime; restart the resolver to change it")]
    Immutable { path: &'static str },
    #[error("the new configuration was rejected: a canary kresd {reason}{}", format_tail(.output))]
    Canary { reason: String, output: Vec<String> },
}

fn format_tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its last output:\n  {}", lines.join("\n  "))
    }
}

/// The sections whose change requires new worker processes (upstream's "worker-relevant
/// nodes"); `views` and `local-data` only need the policy-loader and a rules reset.
fn workers_affected(old: &KresConfig, new: &KresConfig) -> bool {
    old.nsid != new.nsid
        || old.hostname != new.hostname
        || old.workers != new.workers
        || old.options != new.options
        || old.network != new.network
        || old.forward != new.forward
        || old.fallback != new.fallback
        || old.cache != new.cache
        || old.dnssec != new.dnssec
        || old.dns64 != new.dns64
        || old.logging != new.logging
        || old.monitoring != new.monitoring
        || old.rate_limiting != new.rate_limiting
        || old.defer != new.defer
        || old.lua != new.lua
}

/// What one change did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    /// Workers were replaced one by one.
    pub restarted: bool,
    /// Running workers were told to reopen the rules database instead.
    pub rules_reset: bool,
    /// Workers started and stopped to match `workers`.
    pub started: usize,
    pub stopped: usize,
}

/// Owns the mapping from configuration to processes.
pub struct Manager {
    /// Where processes are started and watched.
    supervisor: SupervisorHandle,
    /// Paths of kresd and kres-cache-gc.
    executables: Executables,
    /// The environment every child starts from: ours, without what belongs to our own service
    /// manager (`NOTIFY_SOCKET`, `WATCHDOG_*`, `LISTEN_*`).
    base_env: Vec<(OsString, OsString)>,
    /// The configuration currently applied.
    current: Arc<LoadedConfig>,
    /// Worker ids currently registered with the supervisor.
    workers: Vec<u32>,
    /// Who binds the listening sockets kresd accepts as descriptors.
    owner: SocketOwner,
    /// The daemon's listening sockets; shared with later incarnations of the manager, because
    /// the supervisor's specs refer to their descriptor numbers.
    sockets: Arc<Mutex<SocketTable>>,
}

impl Manager {
    pub fn new(
        supervisor: SupervisorHandle,
        executables: Executables,
        config: Arc<LoadedConfig>,
        owner: SocketOwner,
        sockets: Arc<Mutex<SocketTable>>,
    ) -> Self {
        Manager {
            supervisor,
            executables,
            base_env: child_base_env(),
            current: config,
            workers: Vec::new(),
            owner,
            sockets,
        }
    }

    /// The socket table (a poisoned lock only means a panic elsewhere; the table is intact).
    fn table(&self) -> std::sync::MutexGuard<'_, SocketTable> {
        self.sockets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How the workers' Lua treats the sockets the daemon can bind.
    fn binding(&self) -> lua::SocketBinding {
        match self.owner {
            SocketOwner::Daemon => lua::SocketBinding::Daemon,
            SocketOwner::Kresd => lua::SocketBinding::Kresd,
        }
    }

    /// Bind the sockets `cfg` needs that the table lacks (nothing when kresd binds them).
    fn prepare_sockets(
        &self,
        cfg: &KresConfig,
    ) -> Result<Option<(listen::Prepared, Vec<listen::SocketKey>)>, ApplyError> {
        if self.owner == SocketOwner::Kresd {
            return Ok(None);
        }
        let keys = listen::wanted(&cfg.network)?;
        let prepared = self.table().prepare(&keys, cfg.workers)?;
        Ok(Some((prepared, keys)))
    }

    /// Make the prepared sockets the table's.
    fn commit_sockets(
        &self,
        cfg: &KresConfig,
        prepared: Option<(listen::Prepared, Vec<listen::SocketKey>)>,
    ) {
        if let Some((prepared, keys)) = prepared {
            self.table().commit(prepared, &keys, cfg.workers);
        }
    }

    /// Unregister a service and release the sockets it was given.
    async fn remove_service(&self, name: &str) -> Result<(), SupervisorError> {
        let result = self.supervisor.remove(name).await.map(|_| ());
        self.table().taken_back(name);
        result
    }

    pub fn config(&self) -> &Arc<LoadedConfig> {
        &self.current
    }

    pub fn supervisor(&self) -> &SupervisorHandle {
        &self.supervisor
    }

    /// Take over the processes a previous incarnation of the manager left running: the
    /// supervisor kept them; we only learn which workers exist.
    pub fn adopt(&mut self) -> usize {
        let snapshot = self.supervisor.snapshot();
        self.workers = snapshot
            .processes
            .iter()
            .filter(|p| p.kind == KIND_KRESD)
            .filter_map(|p| p.name.strip_prefix("kresd").and_then(|n| n.parse().ok()))
            .collect();
        self.workers.sort_unstable();
        self.workers.len()
    }

    /// Make the running processes match the configuration after an adoption: start what is
    /// missing (a worker that a previous incarnation did not get to), without touching what runs.
    pub async fn reconcile(&mut self) -> Result<(), ApplyError> {
        let cfg = self.current.model.clone();
        let missing: Vec<u32> = (0..cfg.workers)
            .filter(|id| !self.workers.contains(id))
            .collect();
        if !missing.is_empty() {
            self.write_worker_configs(&cfg, cfg.workers)?;
            for id in missing {
                self.start_worker(&cfg, id).await?;
            }
        }
        let snapshot = self.supervisor.snapshot();
        let gc_exists = snapshot.processes.iter().any(|p| p.name == GC_NAME);
        if cfg.cache.garbage_collector.enable && !gc_exists {
            self.supervisor.add(self.gc_spec(&cfg), Vec::new()).await?;
            self.supervisor.start(GC_NAME).await?;
        }
        Ok(())
    }

    /// Apply a new configuration: a canary worker proves it when workers are affected, the
    /// policy-loader rebuilds the rules, then the workers are replaced one at a time (scaled to
    /// the new count), or, when only policy changed, told to reopen the rules. Nothing is
    /// changed when a step before the first restart fails. `force` restarts the workers even
    /// when their configuration is unchanged.
    pub async fn apply(
        &mut self,
        new: Arc<LoadedConfig>,
        force: bool,
    ) -> Result<ApplyReport, ApplyError> {
        let old = self.current.model.clone();
        let cfg = new.model.clone();
        if old.rundir != cfg.rundir {
            return Err(ApplyError::Immutable { path: "/rundir" });
        }
        if old.management != cfg.management {
            return Err(ApplyError::Immutable {
                path: "/management",
            });
        }
        let restart = force || workers_affected(&old, &cfg);
        let mut report = ApplyReport::default();
        if restart {
            if old.rate_limiting != cfg.rate_limiting {
                let _ = std::fs::remove_file(cfg.rundir.join("ratelimiting"));
            }
            if old.workers != cfg.workers || old.defer != cfg.defer {
                let _ = std::fs::remove_file(cfg.rundir.join("defer"));
            }
        }
        // New sockets are bound before anything else happens: a bind failure rejects the
        // configuration with nothing changed (the prepared sockets close when dropped).
        let prepared = if restart {
            self.prepare_sockets(&cfg)?
        } else {
            None
        };
        if restart {
            self.canary(&cfg, old.workers.max(cfg.workers)).await?;
        }
        self.run_policy_loader(&cfg).await?;
        if restart {
            self.write_worker_configs(&cfg, cfg.workers)?;
            let current: Vec<u32> = self.workers.clone();
            // Scale down first, from the end, so the rolling restart touches fewer workers.
            for id in current.iter().rev().filter(|id| **id >= cfg.workers) {
                self.remove_service(&worker_name(*id)).await?;
                let _ = std::fs::remove_file(worker_config_path(&cfg.rundir, *id));
                self.workers.retain(|w| w != id);
                report.stopped += 1;
            }
            self.commit_sockets(&cfg, prepared);
            for id in self.workers.clone() {
                let name = worker_name(id);
                if self.table().is_current(&name, id) {
                    self.supervisor
                        .restart(&name)
                        .await
                        .map_err(|source| ApplyError::Worker { name, source })?;
                } else {
                    // Its sockets changed: register it again with the new ones.
                    self.remove_service(&name).await?;
                    self.spawn_worker_task(&cfg, id).await?;
                }
            }
            self.table().close_unused();
            report.restarted = !self.workers.is_empty();
            let missing: Vec<u32> = (0..cfg.workers)
                .filter(|id| !self.workers.contains(id))
                .collect();
            let starts = missing.iter().map(|id| self.spawn_worker_task(&cfg, *id));
            for result in futures_util::future::join_all(starts).await {
                self.workers.push(result?);
                report.started += 1;
            }
            self.workers.sort_unstable();
        } else {
            self.reset_rules().await;
            report.rules_reset = true;
            self.reload_tls_files(&cfg).await;
        }
        if old.cache.garbage_collector != cfg.cache.garbage_collector
            || old.cache.storage != cfg.cache.storage
            || old.logging != cfg.logging
        {
            self.replace_gc(&cfg).await?;
        }
        self.current = new;
        if restart {
            self.sync_tls_sticket_secret().await;
            // Upstream's wording, only when workers were (re)started: packaging checks and
            // operators grep for it.
            tracing::info!("Config applied successfully to all workers");
        } else {
            tracing::info!("Config applied; workers kept running (policy rules reloaded)");
        }
        Ok(report)
    }

    /// Start one kresd with the new configuration and wait for its READY; it is removed
    /// either way. Its failure rejects the configuration (upstream throws this verdict away).
    async fn canary(&self, cfg: &KresConfig, instance: u32) -> Result<(), ApplyError> {
        let conf = cfg.rundir.join("canary.conf");
        self.write_generated(&conf, &lua::render_worker_with(cfg, self.binding()))?;
        // The canary gets no sockets of the table: it must not take queries it would drop.
        let mut spec = self.worker_spec(cfg, instance, Vec::new());
        spec.name = CANARY_NAME.to_owned();
        spec.kind = KIND_CANARY.to_owned();
        spec.restart = RestartPolicy::Never;
        spec.argv[2] = conf.clone().into_os_string();
        // Without sockets of its own kresd's post-configuration would listen on 127.0.0.1@53
        // and ::1@53 by default: taking queries, or failing as an unprivileged user.
        spec.env
            .push((OsString::from("KRESD_NO_LISTEN"), OsString::from("1")));
        add_once(&self.supervisor, spec).await?;
        let started = self.supervisor.start(CANARY_NAME).await;
        let output = self
            .supervisor
            .output_tail(CANARY_NAME)
            .await
            .unwrap_or_default();
        let _ = self.supervisor.remove(CANARY_NAME).await;
        let _ = std::fs::remove_file(&conf);
        match started {
            Ok(_) => Ok(()),
            Err(SupervisorError::StartFailed { reason, .. }) => Err(ApplyError::Canary {
                reason: reason.to_string(),
                output,
            }),
            Err(e) => Err(ApplyError::Canary {
                reason: e.to_string(),
                output,
            }),
        }
    }

    /// Tell every running worker to reopen the newest rules database.
    async fn reset_rules(&self) {
        let ids = self.running_workers();
        for (id, result) in control::command_all(
            &self.current.model.rundir,
            &ids,
            "require('ffi').C.kr_rules_reset()",
        )
        .await
        {
            match result {
                Ok(v) if v == 0 => {}
                Ok(v) => tracing::warn!(worker = id, result = %v, "rules reset failed"),
                Err(e) => tracing::warn!(worker = id, "rules reset failed: {e}"),
            }
        }
    }

    /// Reload the TLS certificate and key in running workers (an unchanged config renewed).
    async fn reload_tls_files(&self, cfg: &KresConfig) {
        let (Some(cert), Some(key)) = (&cfg.network.tls.cert_file, &cfg.network.tls.key_file)
        else {
            return;
        };
        if !cert.exists() || !key.exists() {
            return;
        }
        tracing::info!("TLS cert files reload triggered");
        let expr = format!(
            "net.tls({}, {})",
            lua::quote_path(cert),
            lua::quote_path(key)
        );
        for (id, result) in control::command_all(&cfg.rundir, &self.running_workers(), &expr).await
        {
            if let Err(e) = result {
                tracing::warn!(worker = id, "TLS reload failed: {e}");
            }
        }
    }

    /// With several workers and no configured secret, give them all one random TLS
    /// session-ticket secret so that resumption works across workers.
    pub async fn sync_tls_sticket_secret(&self) {
        let cfg = &self.current.model;
        if cfg.workers < 2
            || cfg.network.tls.sticket_secret.is_some()
            || cfg.network.tls.sticket_secret_file.is_some()
        {
            return;
        }
        let secret = match random_hex(32) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot generate a TLS session-ticket secret: {e}");
                return;
            }
        };
        let expr = format!("net.tls_sticket_secret('{secret}')");
        for (id, result) in control::command_all(&cfg.rundir, &self.running_workers(), &expr).await
        {
            match result {
                Ok(serde_json::Value::Bool(true)) => {}
                Ok(v) if v == 0 => {}
                Ok(v) => {
                    tracing::warn!(worker = id, result = %v, "setting the TLS session-ticket secret failed")
                }
                Err(e) => tracing::warn!(
                    worker = id,
                    "setting the TLS session-ticket secret failed: {e}"
                ),
            }
        }
    }

    async fn replace_gc(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        match self.supervisor.remove(GC_NAME).await {
            Ok(_) | Err(SupervisorError::UnknownService(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if cfg.cache.garbage_collector.enable {
            add_once(&self.supervisor, self.gc_spec(cfg)).await?;
            self.supervisor.start(GC_NAME).await?;
        }
        Ok(())
    }

    /// Ids of workers that are running now.
    fn running_workers(&self) -> Vec<u32> {
        crate::metrics::running_worker_ids(&self.supervisor.snapshot())
    }

    /// Worker ids the manager knows about.
    pub fn workers(&self) -> &[u32] {
        &self.workers
    }

    /// First start: policy-loader, canary worker, the other workers in parallel, then the
    /// cache GC.
    pub async fn cold_start(&mut self) -> Result<(), ApplyError> {
        let cfg = self.current.model.clone();
        // Bound here, before any worker exists, so kresd needs no privilege for port 53.
        let prepared = self.prepare_sockets(&cfg)?;
        self.commit_sockets(&cfg, prepared);
        self.run_policy_loader(&cfg).await?;
        let count = cfg.workers;
        self.write_worker_configs(&cfg, count)?;
        // The canary proves the configuration before the rest are spawned.
        self.start_worker(&cfg, 0).await?;
        let rest = (1..count).map(|id| self.spawn_worker_task(&cfg, id));
        let results = futures_util::future::join_all(rest).await;
        for result in results {
            let id = result?;
            self.workers.push(id);
        }
        if cfg.cache.garbage_collector.enable {
            add_once(&self.supervisor, self.gc_spec(&cfg)).await?;
            self.supervisor.start(GC_NAME).await?;
        }
        self.sync_tls_sticket_secret().await;
        Ok(())
    }

    fn spawn_worker_task(
        &self,
        cfg: &KresConfig,
        id: u32,
    ) -> impl std::future::Future<Output = Result<u32, ApplyError>> {
        let (fds, args) = self.table().slot(id);
        let spec = self.worker_spec(cfg, id, args);
        self.table().given(&spec.name, fds.clone());
        let sup = self.supervisor.clone();
        async move {
            let name = spec.name.clone();
            sup.add(spec, fds).await?;
            sup.start(&name)
                .await
                .map_err(|source| ApplyError::Worker { name, source })?;
            Ok(id)
        }
    }

    async fn start_worker(&mut self, cfg: &KresConfig, id: u32) -> Result<(), ApplyError> {
        let id = self.spawn_worker_task(cfg, id).await?;
        self.workers.push(id);
        Ok(())
    }

    fn write_worker_configs(&self, cfg: &KresConfig, count: u32) -> Result<(), ApplyError> {
        let text = lua::render_worker_with(cfg, self.binding());
        for id in 0..count {
            self.write_generated(&worker_config_path(&cfg.rundir, id), &text)?;
        }
        Ok(())
    }

    /// Write a file the children read: readable by their group when they run as another user.
    fn write_generated(&self, path: &Path, text: &str) -> Result<(), ApplyError> {
        write_file_as(path, text, self.executables.run_as.map(|c| c.gid))
    }

    /// Run the policy-loader to completion; anything but exit code 0 is an error.
    pub async fn run_policy_loader(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        let path = cfg.rundir.join("policy-loader.conf");
        self.write_generated(&path, &lua::render_policy_loader(cfg))?;
        let deadline = policy_loader_deadline();
        let outcome =
            tokio::time::timeout(deadline, self.supervisor.run(self.policy_loader_spec(cfg))).await;
        if outcome.is_err() {
            // It is still running: stop it; its exit no longer matters.
            let _ = self.supervisor.stop(POLICY_LOADER_NAME).await;
        }
        let _ = std::fs::remove_file(&path);
        match outcome {
            Ok(Ok(ExitStatus::Code(0))) => Ok(()),
            Ok(Ok(status)) => Err(ApplyError::PolicyLoader(status.to_string())),
            Ok(Err(e)) => Err(ApplyError::PolicyLoader(e.to_string())),
            Err(_) => Err(ApplyError::PolicyLoader(format!(
                "it did not finish within {} s and was stopped (see {POLICY_LOADER_TIMEOUT_VAR})",
                deadline.as_secs()
            ))),
        }
    }

    fn env_with(&self, extra: &[(&str, String)]) -> Vec<(OsString, OsString)> {
        let mut env = self.base_env.clone();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((OsString::from(k), OsString::from(v)));
        }
        env
    }

    /// Worker `id`'s spec; `sockets` are its `-S FD[:tls]` arguments.
    pub fn worker_spec(&self, cfg: &KresConfig, id: u32, sockets: Vec<OsString>) -> ServiceSpec {
        let conf = worker_config_path(&cfg.rundir, id);
        let mut argv: Vec<OsString> = vec![
            self.executables.kresd.clone().into_os_string(),
            "-c".into(),
            conf.into_os_string(),
            "-n".into(),
        ];
        argv.extend(sockets);
        let mut spec = ServiceSpec::new(worker_name(id), KIND_KRESD, argv);
        spec.env = self.env_with(&[("SYSTEMD_INSTANCE", id.to_string())]);
        spec.user = self.executables.run_as;
        spec.cwd = Some(cfg.rundir.clone());
        spec.readiness = Readiness::Notify {
            timeout: WORKER_READY_TIMEOUT,
        };
        spec.restart = RestartPolicy::Always;
        spec.backoff = worker_backoff();
        spec.start_limit = WORKER_START_LIMIT;
        spec
    }

    pub fn policy_loader_spec(&self, cfg: &KresConfig) -> ServiceSpec {
        let mut spec = ServiceSpec::new(
            POLICY_LOADER_NAME,
            KIND_POLICY_LOADER,
            vec![
                self.executables.kresd.clone().into_os_string(),
                "-c".into(),
                cfg.rundir.join("policy-loader.conf").into_os_string(),
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

    pub fn gc_spec(&self, cfg: &KresConfig) -> ServiceSpec {
        let gc = &cfg.cache.garbage_collector;
        let mut argv: Vec<OsString> = vec![
            self.executables.cache_gc.clone().into_os_string(),
            "-c".into(),
            cfg.cache.storage.clone().into_os_string(),
        ];
        let numeric = [
            ("-d", gc.interval.millis()),
            ("-u", u64::from(gc.threshold)),
            ("-f", u64::from(gc.release)),
            ("-l", gc.rw_deletes),
            ("-L", gc.rw_reads),
            ("-t", gc.temp_keys_space.mbytes()),
            ("-m", gc.rw_duration.micros()),
            ("-w", gc.rw_delay.micros()),
        ];
        for (flag, value) in numeric {
            argv.push(flag.into());
            argv.push(value.to_string().into());
        }
        let debug_group = cfg.logging.groups.iter().flatten().any(|g| g == "cache-gc");
        if cfg.logging.level == LogLevel::Debug || debug_group {
            argv.push("-v".into());
        }
        if gc.dry_run {
            argv.push("-n".into());
        }
        let mut spec = ServiceSpec::new(GC_NAME, KIND_GC, argv);
        spec.env = self.env_with(&[]);
        spec.user = self.executables.run_as;
        spec.cwd = Some(cfg.rundir.clone());
        spec
    }
}

/// Remove the worker configurations we generated in the rundir (at shutdown).
pub fn remove_generated_files(rundir: &Path) {
    let Ok(entries) = std::fs::read_dir(rundir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_worker_conf = name
            .strip_prefix("kresd")
            .and_then(|rest| rest.strip_suffix(".conf"))
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
        if is_worker_conf {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// `n` random bytes from the kernel, as lowercase hex.
fn random_hex(n: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Register a service unless a previous incarnation of the manager already did.
async fn add_once(sup: &SupervisorHandle, spec: ServiceSpec) -> Result<(), SupervisorError> {
    match sup.add(spec, Vec::new()).await {
        Ok(()) | Err(SupervisorError::DuplicateService(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

pub fn worker_config_path(rundir: &Path, id: u32) -> PathBuf {
    rundir.join(format!("kresd{id}.conf"))
}

/// Mode of the files the workers read: they may hold secrets (custom Lua, TLS settings).
const GENERATED_MODE: u32 = 0o640;

/// Write `path` whole and atomically, safe against links planted in its directory (the
/// workers' user may write there): a fresh temporary name is created exclusively without
/// following links, relative to the directory opened without following a link either, then
/// renamed over `path`. Mode 0640, group `group` (the workers') when given.
fn write_file_as(path: &Path, text: &str, group: Option<u32>) -> Result<(), ApplyError> {
    use nix::fcntl::{open, openat, renameat, OFlag};
    use nix::sys::stat::Mode;
    let err = |source: std::io::Error| ApplyError::Write {
        path: path.to_owned(),
        source,
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(err(std::io::Error::other("not a file path")));
    };
    let dir = open(
        dir,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    )
    .map_err(|e| err(e.into()))?;
    let suffix = random_hex(8).map_err(err)?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{suffix}.tmp"));
    let fd = openat(
        &dir,
        tmp.as_os_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(GENERATED_MODE),
    )
    .map_err(|e| err(e.into()))?;
    let written = (|| -> std::io::Result<()> {
        if let Some(gid) = group {
            nix::unistd::fchown(&fd, None, Some(nix::unistd::Gid::from_raw(gid)))?;
        }
        // The mode is set on the descriptor: the umask may have narrowed it.
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(GENERATED_MODE))?;
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        renameat(&dir, tmp.as_os_str(), &dir, name)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = nix::unistd::unlinkat(
            &dir,
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        return Err(err(e));
    }
    Ok(())
}

/// Our environment minus what our own service manager meant for us alone.
pub(crate) fn child_base_env() -> Vec<(OsString, OsString)> {
    const PRIVATE: &[&str] = &[
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
    ];
    std::env::vars_os()
        .filter(|(k, _)| !PRIVATE.iter().any(|p| k == p))
        .collect()
}
