//! The executor: carries out what the planner (`plan`) says a change needs, in order, and is
//! the only writer of the running configuration. One change reads top to bottom in
//! [`Manager::apply`]: the plan, then the workers' change (a roll behind a canary and the
//! policy-loader, a rules reset, or a live logging change), then the cache GC, then the new
//! configuration published and the workers told what they share. The steps on processes are
//! `processes`; the commands to running workers are `worker_control`.

use std::sync::Arc;

use tokio::sync::watch;

use super::plan::{self, ChangePlan, GcChange, Live, Restart, Roll, RulesChange, WorkerChange};
use super::processes::{PreparedSockets, Processes, ProcessesSetup};
use super::{rundir, worker_control, ApplyError};
use crate::service::WorkerId;
use kres_config::{KresConfig, LoadedConfig};

/// Remove the shared-memory files `roll` says are stale, where the workers of `cfg` open them.
fn unlink_shared_memory(cfg: &KresConfig, roll: &Roll) {
    for shared in &roll.unlink {
        let path = shared.path(cfg);
        tracing::debug!("removing shared memory {}", path.display());
        rundir::remove(&path);
    }
}

/// Owns the mapping from configuration to processes.
pub struct Manager {
    /// How the steps of a change reach the processes.
    processes: Processes,
    /// The configuration currently applied; this is its only writer.
    config: watch::Sender<Arc<LoadedConfig>>,
    /// Workers currently registered with the supervisor, in order.
    workers: Vec<WorkerId>,
    /// The query log's sockets, bound before workers with the log on start.
    query_log: Option<crate::query_log::intake::Intake>,
}

impl Manager {
    /// A manager that knows no workers yet: [`Manager::cold_start`] starts them, or
    /// [`Manager::adopt`] learns them from the supervisor.
    /// It acts on processes through `setup` and publishes the configuration it applies to
    /// `config`.
    pub fn new(setup: ProcessesSetup, config: watch::Sender<Arc<LoadedConfig>>) -> Self {
        Manager {
            processes: Processes::new(setup),
            config,
            workers: Vec::new(),
            query_log: None,
        }
    }

    /// The same manager, binding `intake`'s sockets before it starts workers of a
    /// configuration with the query log on (kresd connects while its configuration loads).
    pub fn with_query_log(mut self, intake: Option<crate::query_log::intake::Intake>) -> Self {
        self.query_log = intake;
        self
    }

    /// Before workers of `cfg` start: the query log's sockets bound if `cfg` has it on.
    fn prepare_query_log(&self, cfg: &KresConfig) {
        if let Some(intake) = &self.query_log {
            intake.prepare(cfg);
        }
    }

    /// The same manager, publishing what the policy-loader says of the RPZ zones kept by
    /// zone transfer to `loads`.
    pub fn with_rpz_loads(mut self, loads: watch::Sender<super::rpz_loads::RpzLoads>) -> Self {
        self.processes.tell_rpz_loads_to(loads);
        self
    }

    /// The configuration currently applied.
    pub fn config(&self) -> Arc<LoadedConfig> {
        self.config.borrow().clone()
    }

    /// First start: policy-loader, then every worker and the cache GC at once.
    pub async fn cold_start(&mut self) -> Result<(), ApplyError> {
        let loaded = self.config();
        let cfg = &loaded.model;
        // Bound here, before any worker exists, so kresd needs no privilege for port 53.
        let prepared = self.processes.prepare_sockets(cfg)?;
        self.processes.commit_sockets(cfg, prepared);
        self.prepare_query_log(cfg);
        self.processes.run_policy_loader(&loaded).await?;
        self.processes.write_worker_configs(&loaded).await?;
        // Every worker at once, as nothing runs yet (upstream's supervisord does the same):
        // READY waits for the slowest kresd start, not for their sum. A worker that fails
        // reports its output as any start does.
        // The cache GC is not on the query path: it starts beside the workers, so READY does
        // not wait for it after them.
        let wanted = plan::missing(cfg, &self.workers);
        let starts = wanted
            .into_iter()
            .map(|id| self.processes.spawn_worker(cfg, id));
        let gc = async {
            if cfg.cache.garbage_collector.enable {
                self.processes.start_gc(cfg).await
            } else {
                Ok(())
            }
        };
        let (started, gc) =
            futures_util::future::join(futures_util::future::join_all(starts), gc).await;
        for result in started {
            self.workers.push(result?);
        }
        gc?;
        self.workers.sort_unstable();
        worker_control::share_ticket_secret(cfg, &self.processes.running_workers()).await;
        Ok(())
    }

    /// Take over the processes a previous incarnation of the manager left running: the
    /// supervisor kept them; we only learn which workers exist.
    pub fn adopt(&mut self) -> usize {
        self.workers = self.processes.registered_workers();
        self.workers.len()
    }

    /// Make the running processes match the configuration after an adoption: start what is
    /// missing (a worker that a previous incarnation did not get to), without touching what runs.
    pub async fn reconcile(&mut self) -> Result<(), ApplyError> {
        let loaded = self.config();
        let cfg = &loaded.model;
        let missing = plan::missing(cfg, &self.workers);
        if !missing.is_empty() {
            self.prepare_query_log(cfg);
            self.processes.write_worker_configs(&loaded).await?;
            for id in missing {
                self.start_worker(cfg, id).await?;
            }
        }
        if cfg.cache.garbage_collector.enable && !self.processes.gc_registered() {
            self.processes.start_gc(cfg).await?;
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
        // Bound before any worker of `new` starts; unbound again if `new` is not applied
        // and the running configuration has the log off.
        self.prepare_query_log(cfg);
        if let Err(e) = self.change_processes(&new, &old, &mut plan).await {
            if let Some(intake) = &self.query_log {
                intake.follow(&self.config().model);
            }
            return Err(e);
        }
        self.config.send_replace(new.clone());
        self.settle(cfg, &plan.workers).await;
        Ok(plan)
    }

    /// The processes' part of [`Manager::apply`]: the workers' change, then the cache GC.
    async fn change_processes(
        &mut self,
        new: &Arc<LoadedConfig>,
        old: &Arc<LoadedConfig>,
        plan: &mut ChangePlan,
    ) -> Result<(), ApplyError> {
        match &mut plan.workers {
            WorkerChange::Roll(roll) => self.apply_roll(new, old, roll).await?,
            WorkerChange::ResetRules => self.apply_rules_reset(new).await?,
            WorkerChange::Live(live) => self.apply_live(new, old, live).await?,
        }
        if plan.gc == GcChange::Replace {
            self.processes.replace_gc(&new.model).await?;
        }
        Ok(())
    }

    /// What [`Manager::apply`] would do with `new`, proven up to the point where it would
    /// change something: the plan, new sockets bound (and closed again), the canary started
    /// with the rendered worker Lua and removed. The policy-loader does not run (it would rebuild the rules
    /// database the workers read). When the change unlinks shared memory the canary is
    /// skipped: it could not open the files the running workers hold.
    pub async fn dry_run(&self, new: &Arc<LoadedConfig>) -> Result<ChangePlan, ApplyError> {
        let old = self.config();
        let cfg = &new.model;
        let plan = plan::plan(&old.model, cfg, &self.workers, Restart::WhenNeeded)?;
        if let WorkerChange::Roll(roll) = &plan.workers {
            let _bound_then_closed = self.processes.prepare_sockets(cfg)?;
            if roll.dry_run_tries_canary() {
                self.processes.canary(new, roll.canary).await?;
            }
        }
        Ok(plan)
    }

    /// A roll: shared memory unlinked, new sockets bound, the canary, the policy-loader, then
    /// the workers replaced; a worker that does not come back rolls every worker back to
    /// `running`.
    async fn apply_roll(
        &mut self,
        new: &Arc<LoadedConfig>,
        running: &Arc<LoadedConfig>,
        roll: &Roll,
    ) -> Result<(), ApplyError> {
        let cfg = &new.model;
        unlink_shared_memory(cfg, roll);
        // New sockets are bound before anything else happens: a bind failure rejects the
        // configuration with nothing changed (prepared sockets close when dropped).
        let prepared = self.processes.prepare_sockets(cfg)?;
        self.processes.canary(new, roll.canary).await?;
        self.processes.run_policy_loader(new).await?;
        if let Err(cause) = self.roll(new, roll, prepared).await {
            return Err(self.roll_back(cfg, running, cause).await);
        }
        Ok(())
    }

    /// A rules reset: the policy-loader rebuilds the rules, every running worker reopens them
    /// and reloads its TLS files.
    async fn apply_rules_reset(&self, new: &Arc<LoadedConfig>) -> Result<(), ApplyError> {
        self.processes.run_policy_loader(new).await?;
        self.reset_rules(&new.model).await;
        Ok(())
    }

    /// A live logging change (with a rules reset around it when the rules changed too);
    /// `live.restarted` is filled in with the workers restarted instead.
    async fn apply_live(
        &mut self,
        new: &Arc<LoadedConfig>,
        running: &Arc<LoadedConfig>,
        live: &mut Live,
    ) -> Result<(), ApplyError> {
        let cfg = &new.model;
        if live.rules == RulesChange::Reset {
            self.processes.run_policy_loader(new).await?;
        }
        // Written first: a worker that restarts from now on (on its own or below) starts on
        // the new logging.
        self.processes.write_worker_configs(new).await?;
        match self.live(cfg, live).await {
            Ok(restarted) => live.restarted = restarted,
            Err(cause) => return Err(self.roll_back(cfg, running, cause).await),
        }
        if live.rules == RulesChange::Reset {
            self.reset_rules(cfg).await;
        }
        Ok(())
    }

    /// Once the new configuration is published: a fresh session-ticket secret shared by the
    /// workers that were (re)started, and the log line of the change.
    async fn settle(&self, cfg: &KresConfig, change: &WorkerChange) {
        match change {
            WorkerChange::Roll(_) => {
                worker_control::share_ticket_secret(cfg, &self.processes.running_workers()).await;
                // Upstream's wording, only when workers were (re)started: packaging checks and
                // operators grep for it.
                tracing::info!("Config applied successfully to all workers");
            }
            WorkerChange::Live(live) => {
                if !live.restarted.is_empty() {
                    // Restarted workers have a fresh session-ticket secret: share one again.
                    worker_control::share_ticket_secret(cfg, &self.processes.running_workers())
                        .await;
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
    }

    /// Carry out a roll: scale down from the top, replace the remaining workers one batch at
    /// a time (registering again those whose sockets changed), then start the new ones in
    /// parallel.
    async fn roll(
        &mut self,
        loaded: &Arc<LoadedConfig>,
        roll: &Roll,
        prepared: PreparedSockets,
    ) -> Result<(), ApplyError> {
        let cfg = &loaded.model;
        self.processes.write_worker_configs(loaded).await?;
        for id in &roll.stop {
            self.processes.remove_service(&id.name()).await?;
            rundir::remove(&id.config_file(&cfg.rundir));
            self.workers.retain(|w| w != id);
        }
        self.processes.commit_sockets(cfg, prepared);
        let batch = self
            .processes
            .restart_batch(roll.restart.len() + roll.start.len());
        for ids in roll.restart.chunks(batch) {
            let restarts = ids.iter().map(|&id| self.processes.restart_worker(cfg, id));
            for result in futures_util::future::join_all(restarts).await {
                result?;
            }
        }
        self.processes.close_unused_sockets();
        self.start_new_workers(cfg, &roll.start).await
    }

    /// Start the workers `ids` in parallel; one that does not come up is removed, not left
    /// restarting with a configuration that does not run. The first failure is the result.
    async fn start_new_workers(
        &mut self,
        cfg: &KresConfig,
        ids: &[WorkerId],
    ) -> Result<(), ApplyError> {
        let starts = ids.iter().map(|id| self.processes.spawn_worker(cfg, *id));
        let mut failed = None;
        for (id, result) in ids.iter().zip(futures_util::future::join_all(starts).await) {
            match result {
                Ok(id) => self.workers.push(id),
                Err(e) => {
                    let _ = self.processes.remove_service(&id.name()).await;
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
        running: &Arc<LoadedConfig>,
        cause: ApplyError,
    ) -> ApplyError {
        tracing::error!("{cause}; bringing every worker back to the running configuration");
        let back = async {
            let plan = plan::plan(tried, &running.model, &self.workers, Restart::Always)?;
            let WorkerChange::Roll(roll) = &plan.workers else {
                return Ok(());
            };
            let prepared = self.processes.prepare_sockets(&running.model)?;
            // A worker restarting on its own from now on (the one that did not come back)
            // starts on `running`; the workers already replaced hold shared files sized for
            // `tried`, and the policy-loader opens the cache too: they are made anew first.
            self.processes.write_worker_configs(running).await?;
            unlink_shared_memory(&running.model, roll);
            self.processes.run_policy_loader(running).await?;
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

    /// Give every worker of `live` the logging of `cfg` through its control socket; one that
    /// does not take it is restarted on the configuration already written, so that every
    /// worker ends on the same logging. Returns the workers restarted; an error when one of
    /// them did not come back.
    async fn live(&self, cfg: &KresConfig, live: &Live) -> Result<Vec<WorkerId>, ApplyError> {
        let failed = worker_control::set_logging(cfg, &live.workers).await;
        for &id in &failed {
            self.processes.restart_worker(cfg, id).await?;
        }
        Ok(failed)
    }

    /// Every running worker reopens the newest rules database and reloads its TLS files.
    async fn reset_rules(&self, cfg: &KresConfig) {
        worker_control::reset_rules(&cfg.rundir, &self.processes.running_workers()).await;
        worker_control::reload_tls_files(cfg, &self.processes.running_workers()).await;
    }

    /// Start worker `id` and count it among the registered workers once it is ready.
    async fn start_worker(&mut self, cfg: &KresConfig, id: WorkerId) -> Result<(), ApplyError> {
        let id = self.processes.spawn_worker(cfg, id).await?;
        self.workers.push(id);
        self.workers.sort_unstable();
        Ok(())
    }
}
