//! Why a configuration was not applied: one error type for every step the executor takes, so
//! that the reply to whoever asked, the log line and the event all say the same thing.

use std::path::PathBuf;

use supervisor::SupervisorError;

use super::listen::ListenError;
use super::plan;

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
