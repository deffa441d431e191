//! `ManagerHandle`: how the API, signal handlers and the file watcher ask the manager for a
//! change, with typed methods and one request/reply helper (like `SupervisorHandle`), and how
//! they read the configuration it owns. The manager task is the only writer of the running
//! configuration; everyone else holds a `watch` receiver. A change is answered only once the
//! configuration it applied is kept for the next incarnation (`with_keeper`): a manager
//! killed right after its answer never comes back with an older one.

use std::sync::Arc;
use std::time::Duration;

use supervisor::task::TaskHealth;
use tokio::sync::{mpsc, oneshot, watch};

use super::plan::{ChangePlan, Restart};
use super::rpz_loads::RpzLoads;
use super::ApplyError;
use crate::events::Origin;
use kres_config::{ConfigError, LoadedConfig};

/// Why a change was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The configuration files could not be read or are invalid (reload).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configuration is valid but cannot be applied (canary, policy-loader, immutable
    /// sections); the running configuration is unchanged.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("the manager is restarting; try again")]
    Unavailable,
    /// The configuration changed since the change was computed (optimistic concurrency).
    #[error("the configuration changed meanwhile")]
    Conflict,
}

/// What a change did, or why it did nothing.
pub type ChangeResult = Result<ChangePlan, ChangeError>;

/// Where the manager sends the outcome of a command.
pub type ChangeReply = oneshot::Sender<ChangeResult>;

/// What a reload of the configuration files did.
#[derive(Debug)]
pub struct Reloaded {
    /// The change it made.
    pub plan: ChangePlan,
    /// The JSON pointers of changes made through the API since the files were last applied
    /// that the reload undid (the files say otherwise there); empty when none were, or when
    /// the manager cannot tell (it restarted since the files were applied).
    pub discarded: Vec<String>,
}

/// What a reload did, or why it did nothing.
pub type ReloadResult = Result<Reloaded, ChangeError>;

/// Where the manager sends the outcome of a reload.
pub type ReloadReply = oneshot::Sender<ReloadResult>;

/// The configuration a change was computed from: the version read, and its ETag.
#[derive(Debug, Clone)]
pub struct Base {
    pub config: Arc<LoadedConfig>,
    pub tag: String,
}

impl Base {
    /// Whether `running` is still this base: the same version (no document hashed), or one
    /// with the same ETag (files reloaded unchanged).
    pub fn is(&self, running: &Arc<LoadedConfig>) -> bool {
        Arc::ptr_eq(&self.config, running) || crate::etag::etag(&running.raw) == self.tag
    }
}

/// Requests to the manager task. Public so that tests can stand in for the manager.
#[derive(Debug)]
pub enum ManagerCommand {
    /// Apply a validated configuration (API PUT/PATCH/DELETE). `base` is the configuration
    /// the change was computed from; if the current one differs, nothing happens and the reply
    /// is `Conflict`.
    Apply {
        config: Box<LoadedConfig>,
        base: Option<Base>,
        reply: ChangeReply,
    },
    /// Everything `Apply` does before it changes anything (plan, sockets bound, the canary),
    /// then nothing: the reply is the plan an `Apply` would carry out now.
    DryRun {
        config: Box<LoadedConfig>,
        base: Option<Base>,
        reply: ChangeReply,
    },
    /// Re-read the configuration files given on the command line and apply them.
    Reload {
        restart: Restart,
        /// Who asked (for followers of `/events`).
        origin: Origin,
        reply: ReloadReply,
    },
    /// Apply the current configuration again (policy-loader, rules reset, TLS reload).
    Renew {
        restart: Restart,
        /// Who asked (for followers of `/events`).
        origin: Origin,
        reply: ChangeReply,
    },
    /// Fault injection (only when enabled at start-up): make this incarnation panic.
    Panic,
}

/// The longest an answer waits for its configuration to be kept; past it the answer is
/// given anyway (keeping failed and was logged, or the keeper is stuck).
const KEEP_TIMEOUT: Duration = Duration::from_secs(10);

/// The manager's address: cheap to clone, one per caller.
#[derive(Clone)]
pub struct ManagerHandle {
    commands: mpsc::Sender<ManagerCommand>,
    config: watch::Receiver<Arc<LoadedConfig>>,
    /// How the manager task fares (failures, next attempt), as its supervision publishes it:
    /// for `/processes`, and to refuse an injected panic while no incarnation runs.
    health: watch::Receiver<TaskHealth>,
    /// The configuration last kept for the next incarnation (the root's fd store), when
    /// something keeps it: answers to changes wait until it is the running one.
    kept: Option<watch::Receiver<Option<Arc<LoadedConfig>>>>,
    /// What the policy-loader's last run said of the RPZ zones kept by zone transfer.
    rpz_loads: watch::Receiver<RpzLoads>,
}

impl ManagerHandle {
    /// A handle sending to `commands` and reading the configuration from `config`.
    pub fn new(
        commands: mpsc::Sender<ManagerCommand>,
        config: watch::Receiver<Arc<LoadedConfig>>,
    ) -> ManagerHandle {
        ManagerHandle {
            commands,
            config,
            health: watch::channel(TaskHealth::default()).1,
            kept: None,
            rpz_loads: watch::channel(RpzLoads::default()).1,
        }
    }

    /// The same handle, answering changes only once `kept` holds the running configuration.
    pub fn with_keeper(self, kept: watch::Receiver<Option<Arc<LoadedConfig>>>) -> ManagerHandle {
        ManagerHandle {
            kept: Some(kept),
            ..self
        }
    }

    /// The same handle, reading what the policy-loader says of RPZ zones from `loads`.
    pub fn with_rpz_loads(self, loads: watch::Receiver<RpzLoads>) -> ManagerHandle {
        ManagerHandle {
            rpz_loads: loads,
            ..self
        }
    }

    /// What the policy-loader's runs say of the RPZ zones kept by zone transfer, from now on
    /// (the last run's at once). Never changes on a handle made without it.
    pub fn rpz_loads(&self) -> watch::Receiver<RpzLoads> {
        self.rpz_loads.clone()
    }

    /// The same handle, reading the manager task's health from `health`.
    pub fn with_health(self, health: watch::Receiver<TaskHealth>) -> ManagerHandle {
        ManagerHandle { health, ..self }
    }

    /// How the manager task fares now.
    pub fn health(&self) -> TaskHealth {
        self.health.borrow().clone()
    }

    /// The configuration currently applied.
    pub fn config(&self) -> Arc<LoadedConfig> {
        self.config.borrow().clone()
    }

    /// Every configuration from now on, as it is applied.
    pub fn subscribe(&self) -> watch::Receiver<Arc<LoadedConfig>> {
        self.config.clone()
    }

    /// What applying `config` would do, proven as far as it can be without changing anything.
    pub async fn dry_run(&self, config: LoadedConfig, base: Option<Base>) -> ChangeResult {
        self.ask(|reply| ManagerCommand::DryRun {
            config: Box::new(config),
            base,
            reply,
        })
        .await
    }

    /// Apply `config`, unless the running configuration is no longer `base`.
    pub async fn apply(&self, config: LoadedConfig, base: Option<Base>) -> ChangeResult {
        self.ask(|reply| ManagerCommand::Apply {
            config: Box::new(config),
            base,
            reply,
        })
        .await
    }

    /// Re-read the configuration files and apply them, as `origin` asks.
    pub async fn reload(&self, restart: Restart, origin: Origin) -> ReloadResult {
        self.ask(|reply| ManagerCommand::Reload {
            restart,
            origin,
            reply,
        })
        .await
    }

    /// Apply the running configuration again, as `origin` asks.
    pub async fn renew(&self, restart: Restart, origin: Origin) -> ChangeResult {
        self.ask(|reply| ManagerCommand::Renew {
            restart,
            origin,
            reply,
        })
        .await
    }

    /// Queue a reload without waiting for it (a signal handler must not block); the manager
    /// logs and reports its outcome. False when the queue is full or the manager gone.
    pub fn request_reload(&self) -> bool {
        let (reply, _ignored) = oneshot::channel();
        self.commands
            .try_send(ManagerCommand::Reload {
                restart: Restart::WhenNeeded,
                origin: Origin::Signal,
                reply,
            })
            .is_ok()
    }

    /// Fault injection: make the manager task panic. False when it is not running (gone, or
    /// waiting in its restart backoff: the panic would only be queued for the next one).
    pub async fn panic(&self) -> bool {
        if self.health.borrow().next_attempt.is_some() {
            return false;
        }
        self.commands.send(ManagerCommand::Panic).await.is_ok()
    }

    /// Send one command and wait for its reply; a manager that is gone or drops the reply
    /// (it panicked meanwhile) is `Unavailable`.
    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<T, ChangeError>>) -> ManagerCommand,
    ) -> Result<T, ChangeError> {
        let (reply, result) = oneshot::channel();
        if self.commands.send(command(reply)).await.is_err() {
            return Err(ChangeError::Unavailable);
        }
        let result = result.await.unwrap_or(Err(ChangeError::Unavailable));
        if result.is_ok() {
            self.until_kept().await;
        }
        result
    }

    /// Wait until the running configuration is kept for the next incarnation (at most
    /// [`KEEP_TIMEOUT`]).
    async fn until_kept(&self) {
        let Some(mut kept) = self.kept.clone() else {
            return;
        };
        let running = &self.config;
        let is_running = |k: &Option<Arc<LoadedConfig>>| {
            k.as_ref()
                .is_some_and(|k| Arc::ptr_eq(k, &running.borrow()))
        };
        let waited = tokio::time::timeout(KEEP_TIMEOUT, async {
            // (an error: the keeper is gone with its incarnation; nothing to wait for)
            let _ = kept.wait_for(is_running).await;
        })
        .await;
        if waited.is_err() {
            tracing::warn!(
                "the configuration is not yet kept for a restart after {} s; answering anyway",
                KEEP_TIMEOUT.as_secs()
            );
        }
    }
}
