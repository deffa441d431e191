//! The steps the executor takes on processes, one at a time, through the supervisor: register
//! and start a worker with its slot's sockets, restart or remove one, prove a configuration
//! with a canary, run the policy-loader to completion, start or replace the cache GC, write
//! the files they read, bind and commit the listening sockets. Each step is whole on its own;
//! which steps a change takes, and in what order, is the executor's (`executor`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use supervisor::upward::UpwardNotifier;
use supervisor::{ExitStatus, ServiceSpec, SupervisorError, SupervisorHandle};
use tokio::sync::watch;

use super::error::PolicyLoaderFailure;
use super::listen::{self, SocketOwner, SocketTable, Steering};
use super::rpz_loads::{self, RpzLoads};
use super::specs::{self, Specs};
use super::{rundir, ApplyError, Executables};
use crate::events::{Event, EventLog};
use crate::service::{self, WorkerId};
use kres_config::{KresConfig, LoadedConfig};

/// How long the policy-loader may run before it is stopped and the change refused: generous,
/// for RPZ files of millions of rules. Overridden by [`POLICY_LOADER_TIMEOUT_VAR`] (seconds).
pub const POLICY_LOADER_TIMEOUT: Duration = Duration::from_secs(600);

/// Environment variable overriding [`POLICY_LOADER_TIMEOUT`], in seconds.
pub use kres_wire::environment::POLICY_LOADER_TIMEOUT_VAR;

/// While a policy-loader runs, systemd is told every [`EXTEND_TIMEOUT_EVERY`] (the first
/// time after [`EXTEND_TIMEOUT_AFTER`]) to wait [`EXTEND_TIMEOUT_BY`] longer.
const EXTEND_TIMEOUT_AFTER: Duration = Duration::from_millis(500);
const EXTEND_TIMEOUT_EVERY: Duration = Duration::from_secs(10);
const EXTEND_TIMEOUT_BY: Duration = Duration::from_secs(30);

/// What the steps on processes act through and with, given whole to `Manager::new`.
#[derive(Clone)]
pub struct ProcessesSetup {
    /// Where processes are started and watched.
    pub supervisor: SupervisorHandle,
    /// The programs, the user they run as and the environment they start from.
    pub executables: Executables,
    /// Who binds the listening sockets kresd accepts as descriptors.
    pub owner: SocketOwner,
    /// The daemon's listening sockets, shared with later incarnations of the manager.
    pub sockets: Arc<Mutex<SocketTable>>,
    /// The service manager above us (systemd).
    pub upward: UpwardNotifier,
    /// Where each policy-loader run is told.
    pub events: EventLog,
    /// How long the policy-loader may run: [`POLICY_LOADER_TIMEOUT_VAR`] when the
    /// environment sets it to a number of seconds, else [`POLICY_LOADER_TIMEOUT`].
    pub policy_loader_timeout: Duration,
}

/// The policy-loader's time limit `env` sets, else [`POLICY_LOADER_TIMEOUT`].
pub fn policy_loader_timeout(env: &kres_wire::environment::Environment) -> Duration {
    env.policy_loader_timeout.unwrap_or(POLICY_LOADER_TIMEOUT)
}

/// Which Lua a configuration is rendered to.
#[derive(Debug, Clone, Copy)]
enum Lua {
    /// A worker's (and the canary's).
    Worker,
    /// The one-shot policy-loader's.
    PolicyLoader,
}

/// Sockets bound for a configuration but not yet in the table, with the keys they serve.
pub type PreparedSockets = Option<(listen::Prepared, Vec<listen::SocketKey>)>;

/// What the executor needs to act on processes.
pub struct Processes {
    /// Where processes are started and watched.
    supervisor: SupervisorHandle,
    /// Command lines and environments of the programs.
    specs: Specs,
    /// Who binds the listening sockets kresd accepts as descriptors.
    owner: SocketOwner,
    /// The daemon's listening sockets; shared with later incarnations of the manager, because
    /// the supervisor's specs refer to their descriptor numbers.
    sockets: Arc<Mutex<SocketTable>>,
    /// The service manager above us (systemd): told to wait longer while a policy-loader runs.
    upward: UpwardNotifier,
    /// How long the policy-loader may run.
    policy_loader_timeout: Duration,
    /// Where each policy-loader run is told (`policy-loader-finished`, `rpz-zone-broken`).
    events: EventLog,
    /// What the policy-loader's last run said of the RPZ zones kept by zone transfer (a
    /// channel of the task's context, which outlives this manager, once it is given).
    rpz_loads: watch::Sender<RpzLoads>,
}

impl Processes {
    /// Steps through `setup`'s supervisor, with specs of its executables, sockets bound as
    /// its owner says into its sockets.
    pub fn new(setup: ProcessesSetup) -> Processes {
        let ProcessesSetup {
            supervisor,
            executables,
            owner,
            sockets,
            upward,
            events,
            policy_loader_timeout,
        } = setup;
        Processes {
            supervisor,
            specs: Specs::new(executables),
            owner,
            sockets,
            upward,
            policy_loader_timeout,
            events,
            rpz_loads: watch::Sender::new(RpzLoads::default()),
        }
    }

    /// Publish what the policy-loader says of the RPZ zones kept by zone transfer to `loads`.
    pub fn tell_rpz_loads_to(&mut self, loads: watch::Sender<RpzLoads>) {
        self.rpz_loads = loads;
    }

    /// The socket table (a poisoned lock only means a panic elsewhere; the table is intact).
    fn table(&self) -> MutexGuard<'_, SocketTable> {
        self.sockets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the Lua is rendered for: how it treats the sockets the daemon can bind, and whose
    /// permissions script files are read with.
    fn render_context(&self) -> kres_lua::RenderContext {
        let binding = match self.owner {
            SocketOwner::Daemon(_) => kres_lua::SocketBinding::Daemon,
            SocketOwner::Kresd => kres_lua::SocketBinding::Kresd,
        };
        kres_lua::RenderContext {
            binding,
            read_as: self.specs.workers_user(),
        }
    }

    /// Workers registered with the supervisor now, in order.
    pub fn registered_workers(&self) -> Vec<WorkerId> {
        service::workers(&self.supervisor.snapshot())
    }

    /// Workers that are running now.
    pub fn running_workers(&self) -> Vec<WorkerId> {
        service::running_workers(&self.supervisor.snapshot())
    }

    /// Whether the cache GC is registered with the supervisor.
    pub fn gc_registered(&self) -> bool {
        self.supervisor
            .snapshot()
            .processes
            .iter()
            .any(|p| p.name == service::CACHE_GC)
    }

    /// How many workers a roll of `workers` restarts at once.
    pub fn restart_batch(&self, workers: usize) -> usize {
        restart_batch(workers, self.owner)
    }

    /// Bind the sockets `cfg` needs that the table lacks (nothing when kresd binds them).
    pub fn prepare_sockets(&self, cfg: &KresConfig) -> Result<PreparedSockets, ApplyError> {
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
    pub fn commit_sockets(&self, cfg: &KresConfig, prepared: PreparedSockets) {
        if let Some((prepared, keys)) = prepared {
            self.table().commit(prepared, &keys, cfg.workers);
        }
    }

    /// Close the sockets no registered worker was given.
    pub fn close_unused_sockets(&self) {
        self.table().close_unused();
    }

    /// Unregister a service and release the sockets it was given.
    pub async fn remove_service(&self, name: &str) -> Result<(), SupervisorError> {
        let result = self.supervisor.remove(name).await.map(|_| ());
        self.table().taken_back(name);
        result
    }

    /// Register and start worker `id` with its slot's sockets; resolves to `id` once it is
    /// ready. Not `async fn`: the sockets are taken from the table now, not when polled.
    pub fn spawn_worker(
        &self,
        cfg: &KresConfig,
        id: WorkerId,
    ) -> impl Future<Output = Result<WorkerId, ApplyError>> {
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

    /// Restart worker `id` with the configuration written for it and wait for its READY.
    pub async fn restart_worker(&self, cfg: &KresConfig, id: WorkerId) -> Result<(), ApplyError> {
        let name = id.name();
        if self.table().is_current(&name, id.0) {
            self.supervisor
                .restart(&name)
                .await
                .map_err(|source| ApplyError::Worker { name, source })?;
        } else {
            // Its sockets changed: register it again with the new ones.
            self.remove_service(&name).await?;
            self.spawn_worker(cfg, id).await?;
        }
        Ok(())
    }

    /// Start one kresd with the new configuration and wait for its READY; it is removed
    /// either way. Its failure rejects the configuration (upstream throws this verdict away).
    pub async fn canary(
        &self,
        loaded: &Arc<LoadedConfig>,
        instance: WorkerId,
    ) -> Result<(), ApplyError> {
        let cfg = &loaded.model;
        let conf = cfg.rundir.join(specs::CANARY_CONF);
        self.write_rendered(loaded, Lua::Worker, vec![conf.clone()])
            .await?;
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

    /// Register and start the cache GC, unless a previous incarnation registered it.
    pub async fn start_gc(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        add_once(&self.supervisor, self.specs.cache_gc(cfg)).await?;
        self.supervisor.start(service::CACHE_GC).await?;
        Ok(())
    }

    /// Remove the cache GC and, when `cfg` enables it, start it with `cfg`'s arguments.
    pub async fn replace_gc(&self, cfg: &KresConfig) -> Result<(), ApplyError> {
        match self.supervisor.remove(service::CACHE_GC).await {
            Ok(_) | Err(SupervisorError::UnknownService(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if cfg.cache.garbage_collector.enable {
            self.start_gc(cfg).await?;
        }
        Ok(())
    }

    /// Write the configuration of every worker `loaded` wants.
    pub async fn write_worker_configs(&self, loaded: &Arc<LoadedConfig>) -> Result<(), ApplyError> {
        let cfg = &loaded.model;
        let paths = WorkerId::all(cfg.workers)
            .map(|id| id.config_file(&cfg.rundir))
            .collect();
        self.write_rendered(loaded, Lua::Worker, paths).await
    }

    /// Render `lua` for `loaded` and write it to each of `paths`, readable by the children's
    /// group when they run as another user. Rendering and writing (tens of megabytes for a
    /// large configuration) happen on the blocking pool.
    async fn write_rendered(
        &self,
        loaded: &Arc<LoadedConfig>,
        lua: Lua,
        paths: Vec<PathBuf>,
    ) -> Result<(), ApplyError> {
        let (loaded, ctx, group) = (
            loaded.clone(),
            self.render_context(),
            self.specs.workers_group(),
        );
        super::off_thread(move || {
            let text = match lua {
                Lua::Worker => kres_lua::render_worker_with(&loaded.model, &ctx),
                Lua::PolicyLoader => kres_lua::render_policy_loader_with(&loaded.model, &ctx),
            };
            for path in paths {
                rundir::write_file_as(&path, &text, group)
                    .map_err(|source| ApplyError::Write { path, source })?;
            }
            Ok(())
        })
        .await
    }

    /// Run the policy-loader to completion; anything but exit code 0 is an error.
    pub async fn run_policy_loader(&self, loaded: &Arc<LoadedConfig>) -> Result<(), ApplyError> {
        let cfg = &loaded.model;
        let report = cfg.rundir.join(kres_lua::RPZ_REPORT);
        // What an earlier run reported is no report of this one.
        rundir::remove(&report);
        let path = cfg.rundir.join(specs::POLICY_LOADER_CONF);
        self.write_rendered(loaded, Lua::PolicyLoader, vec![path.clone()])
            .await?;
        let deadline = self.policy_loader_timeout;
        let began = std::time::Instant::now();
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
        let seconds = began.elapsed().as_secs_f64();
        if outcome.is_err() {
            // It is still running: stop it; its exit no longer matters.
            let _ = self.supervisor.stop(service::POLICY_LOADER).await;
        }
        let finished = |status| Event::PolicyLoaderFinished { seconds, status };
        let told = match &outcome {
            Ok(Ok(status)) => Some(finished(Some(*status))),
            Err(_) => Some(finished(None)),
            // It never started: there was no run.
            Ok(Err(_)) => None,
        };
        if let Some(event) = told {
            self.events.publish(event);
        }
        rundir::remove_soon(&path);
        // What it wrote last says why it failed (kept by the supervisor once the job is gone).
        let output = || async {
            self.supervisor
                .output_tail(service::POLICY_LOADER)
                .await
                .unwrap_or_default()
        };
        match outcome {
            Ok(Ok(ExitStatus::Code(0))) => {
                self.rpz_loaded(cfg, &report);
                rundir::remove(&report);
                Ok(())
            }
            Ok(Ok(status)) => Err(PolicyLoaderFailure::Exited {
                status,
                output: output().await,
            }
            .into()),
            Ok(Err(e)) => Err(PolicyLoaderFailure::NotRun(e).into()),
            Err(_) => Err(PolicyLoaderFailure::TimedOut {
                limit: deadline,
                output: output().await,
            }
            .into()),
        }
    }
}

impl Processes {
    /// Read what the policy-loader of `cfg` reported at `report` of the RPZ zones kept by
    /// zone transfer; tell the zones it left out (and those loaded again) and publish it. A
    /// report that cannot be read is logged, and the last one known stands.
    fn rpz_loaded(&self, cfg: &KresConfig, report: &Path) {
        let broken = if rpz_loads::reports(cfg) {
            match rpz_loads::read_report(report, cfg) {
                Ok(broken) => broken,
                Err(e) => {
                    let cause = std::error::Error::source(&e)
                        .map(|cause| format!(": {cause}"))
                        .unwrap_or_default();
                    tracing::error!(
                        "the policy-loader's report of the RPZ zones kept by zone transfer: \
                         {e}{cause}; the last report stands"
                    );
                    return;
                }
            }
        } else {
            Default::default()
        };
        let before = self.rpz_loads.borrow().broken.clone();
        for (zone, b) in &broken {
            tracing::error!(
                zone,
                file = %b.file.display(),
                "kresd cannot load the stored RPZ zone ({}); it is left out, the rest of the policy is in force, and it is transferred whole again",
                b.reason
            );
            self.events.publish(Event::RpzZoneBroken {
                zone: zone.clone(),
                file: b.file.display().to_string(),
                reason: b.reason.clone(),
            });
        }
        let kept: Vec<String> = cfg
            .local_data
            .rpz
            .iter()
            .flatten()
            .filter_map(|rpz| rpz.transfer.as_ref())
            .filter_map(|t| kres_config::xfr::zone_name(t.zone.as_str()).ok())
            .collect();
        for zone in before.keys() {
            if !broken.contains_key(zone) && kept.contains(zone) {
                tracing::info!(zone, "the stored RPZ zone is loaded again");
                self.events
                    .publish(Event::RpzZoneLoaded { zone: zone.clone() });
            }
        }
        self.rpz_loads.send_modify(|loads| {
            loads.runs += 1;
            loads.broken = broken;
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_workers_restart_at_once_only_when_their_sockets_stay_open() {
        let daemon = SocketOwner::Daemon(Steering::Live);
        let rows = [
            (1, daemon, 1),
            (3, daemon, 1),
            (4, daemon, 1),
            (8, daemon, 2),
            (17, SocketOwner::Daemon(Steering::Off), 4),
            (16, SocketOwner::Kresd, 1),
        ];
        for (workers, owner, want) in rows {
            assert_eq!(restart_batch(workers, owner), want, "{workers} {owner:?}");
        }
    }
}
