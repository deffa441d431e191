//! The manager as a supervised task. The daemon runs one incarnation at a time; if it panics,
//! the daemon starts a new one after a backoff. Processes never depend on the manager task:
//! the supervisor keeps them running, and a new incarnation adopts them from its table, so DNS
//! service is not interrupted.

use std::sync::Arc;

use supervisor::upward::UpwardNotifier;
use supervisor::SupervisorHandle;
use tokio::sync::{mpsc, watch, Mutex};
use tokio_util::sync::CancellationToken;

use crate::config::LoadedConfig;
use crate::manager::{ApplyError, Executables, Manager};

/// Requests to the manager, from the API and the daemon.
#[derive(Debug)]
pub enum ManagerCommand {
    /// Fault injection (only when enabled at start-up): make this incarnation panic.
    Panic,
}

/// What outlives any one incarnation of the manager task.
#[derive(Clone)]
pub struct ManagerContext {
    pub supervisor: SupervisorHandle,
    pub executables: Executables,
    /// The configuration currently applied; the API reads it.
    pub config: watch::Sender<Arc<LoadedConfig>>,
    /// Commands; the receiver is handed from incarnation to incarnation.
    pub commands: Arc<Mutex<mpsc::Receiver<ManagerCommand>>>,
    /// Flipped to true once the first start completed.
    pub started: watch::Sender<bool>,
    pub upward: UpwardNotifier,
    /// Fires when the daemon stops.
    pub stop: CancellationToken,
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

/// One incarnation. `number` 0 starts everything; later ones adopt.
pub async fn run(ctx: ManagerContext, number: u32) -> Result<ManagerExit, ApplyError> {
    let config = ctx.config.borrow().clone();
    let mut manager = Manager::new(ctx.supervisor.clone(), ctx.executables.clone(), config);
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
    // One command at a time; more commands (reload, config changes) join this select.
    tokio::select! {
        () = ctx.stop.cancelled() => Ok(ManagerExit::Stopped),
        command = commands.recv() => match command {
            Some(ManagerCommand::Panic) => panic!("fault injection: manager task panic requested"),
            None => Ok(ManagerExit::Stopped),
        },
    }
}
