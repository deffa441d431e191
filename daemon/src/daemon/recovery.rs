//! What the root carries from a failed manager process to the next incarnation, besides the
//! configuration and the sockets: the record of the failures (for `/processes`), and the
//! reloads asked while no manager could carry them out.
//!
//! Reloads travel through a doorbell, not a signal: a pipe whose read end sits in the fd
//! store ([`STORED_RELOAD`]), so every incarnation receives it, while the root keeps the
//! write end ([`ReloadBell`]). SIGHUP to the root rings it (a byte); an incarnation, once it
//! serves, reads every byte waiting and queues one reload. A ring while the manager is away
//! (crashed, hung, in its backoff, starting) waits in the pipe for the next incarnation, and
//! several rings become one reload. A signal sent to the manager process instead would be
//! lost with it, or would stop one that has not installed its handlers yet.

use std::io::Write;
use std::os::fd::OwnedFd;

use crate::events::Origin;
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;
use kres_wire::failures::ProcessFailureRecord;

/// Fd store name of the version of the kresd the workers run (its text in a sealed memfd):
/// `kresd --version` runs once, in the first manager process, and its successors read it.
pub const STORED_KRESD_VERSION: &str = "kresd-version";

/// Fd store name of the record of the manager process's failures (JSON in a sealed memfd).
pub const STORED_FAILURES: &str = "manager-failures";

/// Fd store name of the read end of the reload doorbell.
pub const STORED_RELOAD: &str = "reload";

/// The root's end of the reload doorbell.
pub struct ReloadBell {
    /// The pipe's write end (non-blocking: ringing never waits).
    writer: std::fs::File,
}

impl ReloadBell {
    /// A new doorbell, and the read end to keep in the fd store.
    pub fn new() -> std::io::Result<(ReloadBell, OwnedFd)> {
        let (reader, writer) = supervisor::os::doorbell_pipe()?;
        Ok((
            ReloadBell {
                writer: std::fs::File::from(writer),
            },
            reader,
        ))
    }

    /// Ask the manager for a reload, now or whenever the next incarnation serves.
    pub fn ring(&self) {
        match (&self.writer).write(&[1]) {
            Ok(_) => {}
            // Full: rung many times already, and one reload answers them all.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => tracing::error!("cannot pass the reload on to the manager: {e}"),
        }
    }
}

/// The record of the manager process's failures, to keep in the fd store.
pub fn failure_record(record: &ProcessFailureRecord) -> std::io::Result<OwnedFd> {
    let text = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    supervisor::os::sealed_memfd("knot-resolver-manager-failures", &text)
}

/// In the manager process, once it serves: answer the rings of the doorbell with reloads, one
/// at a time; rings that arrive together, or during a reload, make one more. Ends when the
/// root's end is closed.
pub async fn answer_reloads(bell: OwnedFd, handle: ManagerHandle) {
    let reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(bell) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot wait for reloads the root passes on: {e}");
            return;
        }
    };
    let mut buf = [0u8; 512];
    loop {
        if let Err(e) = reader.readable().await {
            tracing::error!("cannot wait for reloads the root passes on: {e}");
            return;
        }
        let mut rings = 0usize;
        loop {
            match reader.try_read(&mut buf) {
                // The root's end is closed: the root is gone or re-executing.
                Ok(0) if rings == 0 => return,
                Ok(0) => break,
                Ok(n) => rings += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::error!("cannot read reloads the root passes on: {e}");
                    return;
                }
            }
        }
        if rings == 0 {
            continue;
        }
        tracing::info!(
            rings,
            "reload asked of the root (SIGHUP); reloading the configuration files"
        );
        // The manager task logs and publishes the outcome; rings meanwhile wait in the pipe.
        let _ = handle.reload(Restart::WhenNeeded, Origin::Signal).await;
    }
}
