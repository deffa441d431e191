//! The manager: turns a validated configuration into running processes. It asks the planner
//! (`plan`) what a change needs and carries the plan out through the supervisor: it writes the
//! Lua files, runs the policy-loader to completion, proves a new configuration with a canary,
//! replaces the workers one at a time (or has them reset their rules, or take a logging change
//! through their control sockets), and replaces the cache garbage collector. It is the only
//! owner of the running configuration.
//!
//! Submodules: `handle` (how others ask for changes), `task` (the loop that serves them),
//! `plan` (what a change needs), `specs` (command
//! lines of Knot Resolver's programs), `rundir` (the files it writes), `listen` (the listening
//! sockets), `executables` (where the programs are).

pub mod executables;
pub mod handle;
pub mod listen;
pub mod liveness;
pub mod plan;
pub mod rundir;
pub mod specs;
pub mod task;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use supervisor::upward::UpwardNotifier;
use supervisor::{ExitStatus, ServiceSpec, SupervisorError, SupervisorHandle};
use tokio::sync::watch;

use crate::config::{KresConfig, LoadedConfig};
use crate::service::{self, WorkerId};
use crate::{control, lua};
pub use executables::Executables;
pub use handle::{ChangeError, ManagerHandle};
use listen::{ListenError, SocketOwner, SocketTable, Steering};
use plan::{ChangePlan, GcChange, Live, Restart, Roll, RulesChange, WorkerChange};
use specs::Specs;

/// How long the policy-loader may run before it is stopped and the change refused: generous,
/// for RPZ files of millions of rules. Overridden by [`POLICY_LOADER_TIMEOUT_VAR`] (seconds).
pub const POLICY_LOADER_TIMEOUT: Duration = Duration::from_secs(600);

/// While a policy-loader runs, systemd is told every [`EXTEND_TIMEOUT_EVERY`] (the first
/// time after [`EXTEND_TIMEOUT_AFTER`]) to wait [`EXTEND_TIMEOUT_BY`] longer.
const EXTEND_TIMEOUT_AFTER: Duration = Duration::from_millis(500);
const EXTEND_TIMEOUT_EVERY: Duration = Duration::from_secs(10);
const EXTEND_TIMEOUT_BY: Duration = Duration::from_secs(30);

/// Environment variable overriding [`POLICY_LOADER_TIMEOUT`], in seconds.
pub const POLICY_LOADER_TIMEOUT_VAR: &str = "KRES_POLICY_LOADER_TIMEOUT";

fn policy_loader_deadline() -> Duration {
    std::env::var(POLICY_LOADER_TIMEOUT_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(POLICY_LOADER_TIMEOUT)
}

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
    #[error(transparent)]
    Immutable(#[from] plan::Immutable),
    #[error("the new configuration was rejected: a canary kresd {reason}{}", format_tail(.output))]
    Canary { reason: String, output: Vec<String> },
    /// A worker did not come back during the roll although the canary passed; every worker
    /// was brought back to the running configuration.
    #[error("the new configuration was not applied: {0}; every worker was brought back to the running configuration")]
    RolledBack(Box<ApplyError>),
    /// As [`ApplyError::RolledBack`], but going back failed too: the workers may be running
    /// two configurations.
    #[error("the new configuration was not applied: {cause}; going back to the running configuration failed too: {back}")]
    RollbackFailed {
        cause: Box<ApplyError>,
        back: Box<ApplyError>,
    },
}

fn format_tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its last output:\n  {}", lines.join("\n  "))
    }
}

/// Sockets bound for a configuration but not yet in the table, with the keys they serve.
type PreparedSockets = Option<(listen::Prepared, Vec<listen::SocketKey>)>;

/// Owns the mapping from configuration to processes.
pub struct Manager {
    /// Where processes are started and watched.
    supervisor: SupervisorHandle,
    /// Command lines and environments of the programs.
    specs: Specs,
    /// The configuration currently applied; this is its only writer.
    config: watch::Sender<Arc<LoadedConfig>>,
    /// Workers currently registered with the supervisor, in order.
    workers: Vec<WorkerId>,
    /// Who binds the listening sockets kresd accepts as descriptors.
    owner: SocketOwner,
    /// The daemon's listening sockets; shared with later incarnations of the manager, because
    /// the supervisor's specs refer to their descriptor numbers.
    sockets: Arc<Mutex<SocketTable>>,
    /// The service manager above us (systemd): told to wait longer while a policy-loader runs.
    upward: UpwardNotifier,
}

impl Manager {
    pub fn new(
        supervisor: SupervisorHandle,
        executables: Executables,
        config: watch::Sender<Arc<LoadedConfig>>,
        owner: SocketOwner,
        sockets: Arc<Mutex<SocketTable>>,
        upward: UpwardNotifier,
    ) -> Self {
        Manager {
            supervisor,
            specs: Specs::new(executables),
            config,
            workers: Vec::new(),
            owner,
            sockets,
            upward,
        }
    }

    /// The socket table (a poisoned lock only means a panic elsewhere; the table is intact).
    fn table(&self) -> std::sync::MutexGuard<'_, SocketTable> {
        self.sockets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the Lua is rendered for: how it treats the sockets the daemon can bind, and whose
    /// permissions script files are read with.
    fn render_context(&self) -> lua::RenderContext {
        let binding = match self.owner {
            SocketOwner::Daemon(_) => lua::SocketBinding::Daemon,
            SocketOwner::Kresd => lua::SocketBinding::Kresd,
        };
        lua::RenderContext {
            binding,
            read_as: self.specs.workers_user(),
        }
    }

    /// Bind the sockets `cfg` needs that the table lacks (nothing when kresd binds them).
    fn prepare_sockets(&self, cfg: &KresConfig) -> Result<PreparedSockets, ApplyError> {
        if self.owner == SocketOwner::Kresd {
            return Ok(None);
        }
        let keys = listen::wanted(&cfg.network)?;
        match supervisor::os::open_files_limit() {
            Ok(limit) => listen::check_descriptors(cfg.workers, keys.len(), limit)?,
            Err(e) => tracing::warn!("cannot read the limit on open descriptors: {e}"),
        }
        let prepared = self.table().prepare(&keys, cfg.workers)?;
        Ok(Some((prepared, keys)))
    }

    /// Make the prepared sockets the table's.
    fn commit_sockets(&self, cfg: &KresConfig, prepared: PreparedSockets) {
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

    /// The configuration currently applied.
    pub fn config(&self) -> Arc<LoadedConfig> {
        self.config.borrow().clone()
    }

    /// Take over the processes a previous incarnation of the manager left running: the
    /// supervisor kept them; we only learn which workers exist.
    pub fn adopt(&mut self) -> usize {
        self.workers = service::workers(&self.supervisor.snapshot());
        self.workers.len()
    }

    /// Make the running processes match the configuration after an adoption: start what is
    /// missing (a worker that a previous incarnation did not get to), without touching what runs.
    pub async fn reconcile(&mut self) -> Result<(), ApplyError> {
        let loaded = self.config();
        let cfg = &loaded.model;
        let missing = plan::missing(cfg, &self.workers);
        if !missing.is_empty() {
            self.write_worker_configs(cfg)?;
            for id in missing {
                self.start_worker(cfg, id).await?;
            }
        }
        let snapshot = self.supervisor.snapshot();
        let gc_exists = snapshot
            .processes
            .iter()
            .any(|p| p.name == service::CACHE_GC);
        if cfg.cache.garbage_collector.enable && !gc_exists {
            self.start_gc(cfg).await?;
        }
        Ok(())
    }

    /// Apply a new configuration as the planner says: for a roll, a canary proves it, the
    /// policy-loader rebuilds the rules, then the workers are replaced one at a time (scaled
    /// to the new count); otherwise the policy-loader runs and the workers reopen the rules.
    /// Nothing is changed when a step before the first restart fails. Returns the plan that
    /// was carried out.
    pub async fn apply(
        &mut self,
        new: Arc<LoadedConfig>,
        restart: Restart,
    ) -> Result<ChangePlan, ApplyError> {
        let old = self.config();
        let cfg = &new.model;
        let mut plan = plan::plan(&old.model, cfg, &self.workers, restart)?;
        match &mut plan.workers {
            WorkerChange::Roll(roll) => {
                for shared in &roll.unlink {
                    rundir::remove(&cfg.rundir.join(shared.file_name()));
                }
                // New sockets are bound before anything else happens: a bind failure rejects
                // the configuration with nothing changed (prepared sockets close when dropped).
                let prepared = self.prepare_sockets(cfg)?;
                self.canary(cfg, roll.canary).await?;
                self.run_policy_loader(cfg).await?;
                if let Err(cause) = self.roll(cfg, roll, prepared).await {
                    return Err(self.roll_back(cfg, &old.model, cause).await);
                }
            }
            WorkerChange::ResetRules => {
                self.run_policy_loader(cfg).await?;
                self.reset_rules(cfg).await;
                self.reload_tls_files(cfg).await;
            }
            WorkerChange::Live(live) => {
                if live.rules == RulesChange::Reset {
                    self.run_policy_loader(cfg).await?;
                }
                // Written first: a worker that restarts from now on (on its own or below)
                // starts on the new logging.
                self.write_worker_configs(cfg)?;
                match self.live(cfg, live).await {
                    Ok(restarted) => live.restarted = restarted,
                    Err(cause) => return Err(self.roll_back(cfg, &old.model, cause).await),
                }
                if live.rules == RulesChange::Reset {
                    self.reset_rules(cfg).await;
                    self.reload_tls_files(cfg).await;
                }
            }
        }
        if plan.gc == GcChange::Replace {
            self.replace_gc(cfg).await?;
        }
        self.config.send_replace(new.clone());
        match &plan.workers {
            WorkerChange::Roll(_) => {
                self.sync_tls_sticket_secret(cfg).await;
                // Upstream's wording, only when workers were (re)started: packaging checks and
                // operators grep for it.
                tracing::info!("Config applied successfully to all workers");
            }
            WorkerChange::Live(live) => {
                if !live.restarted.is_empty() {
                    // Restarted workers have a fresh session-ticket secret: share one again.
                    self.sync_tls_sticket_secret(cfg).await;
                }
                tracing::info!(
                    workers = live.workers.len(),
                    restarted = live.restarted.len(),
                    "Config applied; logging changed live in the running workers"
                );
            }
            WorkerChange::ResetRules => {
                tracing::info!("Config applied; workers kept running (policy rules reloaded)")
            }
        }
        Ok(plan)
    }

    /// What [`Manager::apply`] would do with `new`, proven up to the point where it would
    /// change something: the plan, new sockets bound (and closed again), the canary started
    /// with the rendered worker Lua and removed. The policy-loader does not run (it would rebuild the rules
    /// database the workers read). When the change unlinks shared memory the canary is
    /// skipped: it could not open the files the running workers hold.
    pub async fn dry_run(&self, new: &LoadedConfig) -> Result<ChangePlan, ApplyError> {
        let old = self.config();
        let cfg = &new.model;
        let plan = plan::plan(&old.model, cfg, &self.workers, Restart::WhenNeeded)?;
        if let WorkerChange::Roll(roll) = &plan.workers {
            let _bound_then_closed = self.prepare_sockets(cfg)?;
            if roll.unlink.is_empty() {
                self.canary(cfg, roll.canary).await?;
            }
        }
        Ok(plan)
    }

    /// Carry out a roll: scale down from the top, replace the remaining workers one at a time
    /// (registering again those whose sockets changed), then start the new ones in parallel.
    async fn roll(
        &mut self,
        cfg: &KresConfig,
        roll: &Roll,
        prepared: PreparedSockets,
    ) -> Result<(), ApplyError> {
        self.write_worker_configs(cfg)?;
        for id in &roll.stop {
            self.remove_service(&id.name()).await?;
            rundir::remove(&id.config_file(&cfg.rundir));
            self.workers.retain(|w| w != id);
        }
        self.commit_sockets(cfg, prepared);
        let batch = restart_batch(roll.restart.len() + roll.start.len(), self.owner);
        for ids in roll.restart.chunks(batch) {
            let restarts = ids.iter().map(|&id| self.restart_worker(cfg, id));
            for result in futures_util::future::join_all(restarts).await {
                result?;
            }
        }
        self.table().close_unused();
        let starts = roll.start.iter().map(|id| self.spawn_worker_task(cfg, *id));
        let mut failed = None;
        for (id, result) in roll
            .start
            .iter()
            .zip(futures_util::future::join_all(starts).await)
        {
            match result {
                Ok(id) => self.workers.push(id),
                Err(e) => {
                    // Not left restarting with a configuration that does not run.
                    let _ = self.remove_service(&id.name()).await;
                    failed.get_or_insert(e);
                }
            }
        }
        self.workers.sort_unstable();
        failed.map_or(Ok(()), Err)
    }

    /// A roll failed after the canary passed (a worker did not come back): bring every worker
    /// back to `running` (the policy-loader's rules too), so that workers never serve two
    /// configurations. No canary: `running` is known to run. Returns what the change ends in.
    async fn roll_back(
        &mut self,
        tried: &KresConfig,
        running: &KresConfig,
        cause: ApplyError,
    ) -> ApplyError {
        tracing::error!("{cause}; bringing every worker back to the running configuration");
        let back = async {
            let plan = plan::plan(tried, running, &self.workers, Restart::Always)?;
            let WorkerChange::Roll(roll) = &plan.workers else {
                return Ok(());
            };
            let prepared = self.prepare_sockets(running)?;
            self.run_policy_loader(running).await?;
            self.roll(running, roll, prepared).await
        };
        match back.await {
            Ok(()) => {
                tracing::warn!("every worker is back on the running configuration");
                ApplyError::RolledBack(Box::new(cause))
            }
            Err(back) => ApplyError::RollbackFailed {
                cause: Box::new(cause),
                back: Box::new(back),
            },
        }
    }

    /// Restart worker `id` with the new configuration and wait for its READY.
    async fn restart_worker(&self, cfg: &KresConfig, id: WorkerId) -> Result<(), ApplyError> {
        let name = id.name();
        if self.table().is_current(&name, id.0) {
            self.supervisor
                .restart(&name)
                .await
                .map_err(|source| ApplyError::Worker { name, source })?;
        } else {
            // Its sockets changed: register it again with the new ones.
            self.remove_service(&name).await?;
            self.spawn_worker_task(cfg, id).await?;
        }
        Ok(())
    }

    /// Start one kresd with the new configuration and wait for its READY; it is removed
    /// either way. Its failure rejects the configuration (upstream throws this verdict away).
    async fn canary(&self, cfg: &KresConfig, instance: WorkerId) -> Result<(), ApplyError> {
        let conf = cfg.rundir.join(specs::CANARY_CONF);
        self.write_generated(&conf, &lua::render_worker_with(cfg, &self.render_context()))?;
        // The canary gets no sockets of the table: it must not take queries it would drop.
        add_once(&self.supervisor, self.specs.canary(cfg, instance)).await?;
        let started = self.supervisor.start(service::CANARY).await;
        let output = self
            .supervisor
            .output_tail(service::CANARY)
            .await
            .unwrap_or_default();
        let _ = self.supervisor.remove(service::CANARY).await;
        rundir::remove(&conf);
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

    /// Give every worker of `live` the logging of `cfg` through its control socket; one that
    /// does not take it (its socket fails, does not answer in time, or answers anything but
    /// the new level) is restarted on the configuration already written, so that every worker
    /// ends on the same logging. Returns the workers restarted; an error when one of them did
    /// not come back.
    async fn live(&self, cfg: &KresConfig, live: &Live) -> Result<Vec<WorkerId>, ApplyError> {
        let (expr, level) = lua::live_logging(cfg);
        let mut failed = Vec::new();
        for (id, result) in control::command_all(&cfg.rundir, &live.workers, &expr).await {
            match result {
                Ok(serde_json::Value::String(s)) if s == level => {}
                Ok(other) => {
                    tracing::warn!(worker = %id, answer = %other, "did not take the logging change live; restarting it");
                    failed.push(id);
                }
                Err(e) => {
                    tracing::warn!(worker = %id, "did not take the logging change live: {e}; restarting it");
                    failed.push(id);
                }
            }
        }
        for &id in &failed {
            self.restart_worker(cfg, id).await?;
        }
        Ok(failed)
    }

    /// Tell every running worker to reopen the newest rules database.
    async fn reset_rules(&self, cfg: &KresConfig) {
        let ids = self.running_workers();
        for (id, result) in
            control::command_all(&cfg.rundir, &ids, "require('ffi').C.kr_rules_reset()").await
        {
            match result {
                Ok(v) if v == 0 => {}
                Ok(v) => tracing::warn!(worker = %id, result = %v, "rules reset failed"),
                Err(e) => tracing::warn!(worker = %id, "rules reset failed: {e}"),
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
                tracing::warn!(worker = %id, "TLS reload failed: {e}");
            }
        }
    }

    /// With several workers and no configured secret, give them all one random TLS
    /// session-ticket secret so that resumption works across workers.
    async fn sync_tls_sticket_secret(&self, cfg: &KresConfig) {
        if cfg.workers < 2
            || cfg.network.tls.sticket_secret.is_some()
            || cfg.network.tls.sticket_secret_file.is_some()
        {
            return;
        }
        let secret = match rundir::random_hex(32) {
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
                    tracing::warn!(worker = %id, result = %v, "setting the TLS session-ticket secret failed")
                }
                Err(e) => tracing::warn!(
                    worker = %id,
                    "setting the TLS session-ticket secret failed: {e}"
                ),
            }
        }
    }

    async fn replace_gc(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        match self.supervisor.remove(service::CACHE_GC).await {
            Ok(_) | Err(SupervisorError::UnknownService(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if cfg.cache.garbage_collector.enable {
            add_once(&self.supervisor, self.specs.cache_gc(cfg)).await?;
            self.supervisor.start(service::CACHE_GC).await?;
        }
        Ok(())
    }

    /// Workers that are running now.
    fn running_workers(&self) -> Vec<WorkerId> {
        service::running_workers(&self.supervisor.snapshot())
    }

    /// First start: policy-loader, the first worker (it plays the canary), the other workers
    /// in parallel, then the cache GC.
    pub async fn cold_start(&mut self) -> Result<(), ApplyError> {
        let loaded = self.config();
        let cfg = &loaded.model;
        // Bound here, before any worker exists, so kresd needs no privilege for port 53.
        let prepared = self.prepare_sockets(cfg)?;
        self.commit_sockets(cfg, prepared);
        self.run_policy_loader(cfg).await?;
        self.write_worker_configs(cfg)?;
        let mut wanted = plan::missing(cfg, &self.workers).into_iter();
        if let Some(first) = wanted.next() {
            self.start_worker(cfg, first).await?;
        }
        let rest = wanted.map(|id| self.spawn_worker_task(cfg, id));
        for result in futures_util::future::join_all(rest).await {
            self.workers.push(result?);
        }
        if cfg.cache.garbage_collector.enable {
            self.start_gc(cfg).await?;
        }
        self.sync_tls_sticket_secret(cfg).await;
        Ok(())
    }

    async fn start_gc(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        add_once(&self.supervisor, self.specs.cache_gc(cfg)).await?;
        self.supervisor.start(service::CACHE_GC).await?;
        Ok(())
    }

    /// Register and start worker `id` with its slot's sockets; resolves to `id` once it is
    /// ready. Not `async fn`: the sockets are taken from the table now, not when polled.
    fn spawn_worker_task(
        &self,
        cfg: &KresConfig,
        id: WorkerId,
    ) -> impl std::future::Future<Output = Result<WorkerId, ApplyError>> {
        let (fds, args) = self.table().slot(id.0);
        let mut spec = self.specs.worker(cfg, id, args);
        if self.owner == SocketOwner::Daemon(Steering::Live) && !fds.is_empty() {
            // Every slot's socket is index `slot` of its reuseport group (`listen`).
            spec.reuseport_index = Some(id.0);
        }
        self.table().given(&spec.name, id.0);
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

    async fn start_worker(&mut self, cfg: &KresConfig, id: WorkerId) -> Result<(), ApplyError> {
        let id = self.spawn_worker_task(cfg, id).await?;
        self.workers.push(id);
        self.workers.sort_unstable();
        Ok(())
    }

    /// Write the configuration of every worker `cfg` wants.
    fn write_worker_configs(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        let text = lua::render_worker_with(cfg, &self.render_context());
        for id in WorkerId::all(cfg.workers) {
            self.write_generated(&id.config_file(&cfg.rundir), &text)?;
        }
        Ok(())
    }

    /// Write a file the children read: readable by their group when they run as another user.
    fn write_generated(&self, path: &std::path::Path, text: &str) -> Result<(), ApplyError> {
        rundir::write_file_as(path, text, self.specs.workers_group()).map_err(|source| {
            ApplyError::Write {
                path: path.to_owned(),
                source,
            }
        })
    }

    /// Run the policy-loader to completion; anything but exit code 0 is an error.
    async fn run_policy_loader(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        let path = cfg.rundir.join(specs::POLICY_LOADER_CONF);
        self.write_generated(
            &path,
            &lua::render_policy_loader_with(cfg, &self.render_context()),
        )?;
        let deadline = policy_loader_deadline();
        let run =
            tokio::time::timeout(deadline, self.supervisor.run(self.specs.policy_loader(cfg)));
        tokio::pin!(run);
        // A large RPZ takes minutes: systemd's start (or reload) timeout moves forward while
        // the policy-loader runs, within its own deadline, so units need no huge
        // TimeoutStartSec. The first extension comes after a moment, so the usual quick run
        // sends none.
        let mut extend = tokio::time::interval_at(
            tokio::time::Instant::now() + EXTEND_TIMEOUT_AFTER,
            EXTEND_TIMEOUT_EVERY,
        );
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                _ = extend.tick() => self.upward.extend_timeout(EXTEND_TIMEOUT_BY),
            }
        };
        if outcome.is_err() {
            // It is still running: stop it; its exit no longer matters.
            let _ = self.supervisor.stop(service::POLICY_LOADER).await;
        }
        rundir::remove(&path);
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
}

/// How many workers a roll restarts at once. With the daemon's sockets a restarting
/// worker's queries wait in its socket (kresd starts in about 25 ms), so a quarter of the
/// workers restart together and three quarters keep serving; when kresd binds its own
/// sockets, they close while it restarts, so one at a time.
fn restart_batch(workers: usize, owner: SocketOwner) -> usize {
    match owner {
        SocketOwner::Daemon(_) => (workers / 4).max(1),
        SocketOwner::Kresd => 1,
    }
}

/// Register a service unless a previous incarnation of the manager already did.
async fn add_once(sup: &SupervisorHandle, spec: ServiceSpec) -> Result<(), SupervisorError> {
    match sup.add(spec, Vec::new()).await {
        Ok(()) | Err(SupervisorError::DuplicateService(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
