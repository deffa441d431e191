//! The stop of the root process: the manager first (it finishes API requests in flight),
//! then every other process; a second stop event kills them at once. Then the rundir is
//! cleaned.

use std::process::ExitCode;

use futures_util::{Stream, StreamExt};

use super::{Root, RootEvent, Started, Stop};
use crate::service;

impl Root {
    /// Stop the manager first (it finishes API requests in flight), then every process; a
    /// second stop event kills them at once. Then clean the rundir. Returns the exit code.
    pub(super) async fn stop(
        &self,
        started: Started,
        why: Stop,
        events: &mut (impl Stream<Item = RootEvent> + Unpin),
    ) -> ExitCode {
        let mut exit = match why {
            Stop::Signal | Stop::Upgrade => 0,
            Stop::Requested(code) => {
                if code == 0 {
                    tracing::info!("stopping on API request");
                }
                code
            }
            Stop::ManagerFailed => 1,
        };
        started.upward.stopping("Stopping");
        let sup = &started.sup;
        let manager_stopped = sup.remove(service::MANAGER);
        tokio::pin!(manager_stopped);
        let shutdown = async {
            let _ = (&mut manager_stopped).await;
            sup.shutdown().await
        };
        tokio::pin!(shutdown);
        let report = loop {
            tokio::select! {
                r = &mut shutdown => break r,
                Some(event) = events.next() => {
                    if event == RootEvent::Stop {
                        tracing::warn!("second stop signal: killing all processes");
                        sup.kill_all();
                    }
                }
            }
        };
        let _ = started.sup_task.await;
        // A socket systemd keeps for our next start keeps its file too (clients connecting
        // during a restart wait in its backlog); otherwise nobody listens on it any more.
        let kept = started.upward.fd_store_capacity() > 0;
        if let Some(path) = started
            .api_socket
            .filter(|p| !kept && !p.as_os_str().is_empty())
        {
            let _ = std::fs::remove_file(path);
        }
        crate::manager::rundir::remove_generated_files(&self.rundir);
        match report {
            Ok(r) if !r.unclean.is_empty() => {
                tracing::warn!(
                    "processes that did not stop cleanly: {}",
                    r.unclean.join(", ")
                );
                exit = 1;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!("supervisor: {e}");
                exit = 1;
            }
        }
        tracing::info!("stopped");
        ExitCode::from(exit)
    }
}
