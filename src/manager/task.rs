//! The manager as a supervised task. The daemon runs one incarnation at a time; if it panics,
//! the daemon starts a new one after a backoff. Processes never depend on the manager task:
//! the supervisor keeps them running, and a new incarnation adopts them from its table, so DNS
//! service is not interrupted. Commands (config changes, reloads) are processed one at a time,
//! which serializes every change of the running configuration.

use std::path::PathBuf;
use std::sync::Arc;

use supervisor::upward::UpwardNotifier;
use supervisor::SupervisorHandle;
use tokio::sync::{mpsc, oneshot, watch, Mutex};
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigError, LoadedConfig};
use crate::manager::listen::{SocketOwner, SocketTable};
use crate::manager::{ApplyError, ApplyReport, Executables, Manager};

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

pub type ChangeReply = oneshot::Sender<Result<ApplyReport, ChangeError>>;

/// Requests to the manager, from the API and the daemon.
#[derive(Debug)]
pub enum ManagerCommand {
    /// Apply a validated configuration (API PUT/PATCH/DELETE). `base` is the ETag of the
    /// document the change was computed from; if the current one differs, nothing happens and
    /// the reply is `Conflict`.
    Apply {
        config: Box<LoadedConfig>,
        base: Option<String>,
        reply: ChangeReply,
    },
    /// Re-read the configuration files given on the command line and apply them.
    Reload { force: bool, reply: ChangeReply },
    /// Apply the current configuration again (policy-loader, rules reset, TLS reload).
    Renew { force: bool, reply: ChangeReply },
    /// Fault injection (only when enabled at start-up): make this incarnation panic.
    Panic,
}

/// What outlives any one incarnation of the manager task.
#[derive(Clone)]
pub struct ManagerContext {
    pub supervisor: SupervisorHandle,
    pub executables: Executables,
    /// The configuration files given on the command line (for reloads).
    pub files: Vec<PathBuf>,
    /// The configuration currently applied; the API reads it.
    pub config: watch::Sender<Arc<LoadedConfig>>,
    /// Commands; the receiver is handed from incarnation to incarnation.
    pub commands: Arc<Mutex<mpsc::Receiver<ManagerCommand>>>,
    /// Flipped to true once the first start completed.
    pub started: watch::Sender<bool>,
    pub upward: UpwardNotifier,
    /// Fires when the daemon stops.
    pub stop: CancellationToken,
    /// Who binds the listening sockets kresd accepts as descriptors.
    pub socket_owner: SocketOwner,
    /// The daemon's listening sockets; they outlive every incarnation.
    pub sockets: Arc<std::sync::Mutex<SocketTable>>,
}

/// How an incarnation ended on purpose. Errors are not here: an incarnation that returns an
/// error is restarted.
#[derive(Debug)]
pub enum ManagerExit {
    /// The daemon is stopping.
    Stopped,
    /// The first start failed (the policy-loader or a worker failed): the resolver cannot run
    /// this configuration and must stop with an error, not retry.
    StartFailed(ApplyError),
}

/// One incarnation. The first one starts everything; later ones adopt.
pub async fn run(ctx: ManagerContext, number: u32) -> Result<ManagerExit, ApplyError> {
    let config = ctx.config.borrow().clone();
    let mut manager = Manager::new(
        ctx.supervisor.clone(),
        ctx.executables.clone(),
        config,
        ctx.socket_owner,
        ctx.sockets.clone(),
    );
    if !*ctx.started.borrow() {
        ctx.upward.status("Starting services");
        if let Err(e) = manager.cold_start().await {
            return Ok(ManagerExit::StartFailed(e));
        }
        ctx.started.send_replace(true);
    } else {
        let adopted = manager.adopt();
        tracing::warn!(
            incarnation = number,
            adopted,
            "manager restarted; adopted the running workers"
        );
        manager.reconcile().await?;
    }
    let mut commands = ctx.commands.lock().await;
    loop {
        let command = tokio::select! {
            () = ctx.stop.cancelled() => return Ok(ManagerExit::Stopped),
            command = commands.recv() => match command {
                Some(c) => c,
                None => return Ok(ManagerExit::Stopped),
            },
        };
        match command {
            ManagerCommand::Apply {
                config,
                base,
                reply,
            } => {
                let current = crate::etag::etag(&manager.config().raw);
                let result = if base.is_some_and(|b| b != current) {
                    Err(ChangeError::Conflict)
                } else {
                    apply(&ctx, &mut manager, Arc::new(*config), false).await
                };
                let _ = reply.send(result);
            }
            ManagerCommand::Reload { force, reply } => {
                let result = match config::load_files(&ctx.files, true) {
                    Ok(loaded) => apply(&ctx, &mut manager, Arc::new(loaded), force).await,
                    Err(e) => {
                        tracing::error!(
                            "reload failed; the running configuration is unchanged: {e}"
                        );
                        Err(e.into())
                    }
                };
                let _ = reply.send(result);
            }
            ManagerCommand::Renew { force, reply } => {
                let current = manager.config().clone();
                let result = apply(&ctx, &mut manager, current, force).await;
                if result.is_ok() {
                    tracing::info!("Renewing configuration has finished");
                }
                let _ = reply.send(result);
            }
            ManagerCommand::Panic => panic!("fault injection: manager task panic requested"),
        }
    }
}

async fn apply(
    ctx: &ManagerContext,
    manager: &mut Manager,
    config: Arc<LoadedConfig>,
    force: bool,
) -> Result<ApplyReport, ChangeError> {
    match manager.apply(config.clone(), force).await {
        Ok(report) => {
            ctx.config.send_replace(config);
            Ok(report)
        }
        Err(e) => {
            tracing::error!("configuration not applied: {e}");
            Err(e.into())
        }
    }
}
