//! Why a configuration was not applied: one error type for every step the executor takes, so
//! that the reply to whoever asked, the log line and the event all say the same thing.

use std::path::PathBuf;
use std::time::Duration;

use supervisor::{ExitStatus, SupervisorError};

use super::listen::ListenError;
use super::{plan, POLICY_LOADER_TIMEOUT_VAR};

/// Something went wrong while applying a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy-loader failed: {0}; the rules database was not updated")]
    PolicyLoader(#[from] PolicyLoaderFailure),
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

/// How the policy-loader failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLoaderFailure {
    /// It ran and ended with anything but exit code 0.
    #[error("{0}")]
    Exited(ExitStatus),
    /// The supervisor could not run it.
    #[error("{0}")]
    NotRun(#[source] SupervisorError),
    /// It overran its time limit and was stopped.
    #[error("it did not finish within {} s and was stopped (see {POLICY_LOADER_TIMEOUT_VAR})", .0.as_secs())]
    TimedOut(Duration),
}

fn format_tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its last output:\n  {}", lines.join("\n  "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_loader_failure_says_how_it_failed() {
        let rows = [
            (
                PolicyLoaderFailure::Exited(ExitStatus::Code(1)),
                "policy-loader failed: exit code 1; the rules database was not updated",
            ),
            (
                PolicyLoaderFailure::NotRun(SupervisorError::UnknownService("policy-loader".into())),
                "policy-loader failed: no service named \"policy-loader\"; the rules database was not updated",
            ),
            (
                PolicyLoaderFailure::TimedOut(Duration::from_secs(2)),
                "policy-loader failed: it did not finish within 2 s and was stopped (see \
                 KRES_POLICY_LOADER_TIMEOUT); the rules database was not updated",
            ),
        ];
        for (failure, want) in rows {
            assert_eq!(ApplyError::from(failure).to_string(), want);
        }
    }
}
