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
    #[error("policy-loader failed: {}; the rules database was not updated{}", .0, format_tail(.0.output()))]
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

/// How the policy-loader failed; what it wrote last (kresd's reason: a zone file that does
/// not parse, a file it cannot open) goes with it, as with a canary.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLoaderFailure {
    /// It ran and ended with anything but exit code 0.
    #[error("{status}")]
    Exited {
        status: ExitStatus,
        /// Its last lines of output.
        output: Vec<String>,
    },
    /// The supervisor could not run it.
    #[error("{0}")]
    NotRun(#[source] SupervisorError),
    /// It overran its time limit and was stopped.
    #[error("it did not finish within {} s and was stopped (see {POLICY_LOADER_TIMEOUT_VAR})", .limit.as_secs())]
    TimedOut {
        limit: Duration,
        /// Its last lines of output.
        output: Vec<String>,
    },
}

impl PolicyLoaderFailure {
    /// What it wrote last, if it ran.
    pub fn output(&self) -> &[String] {
        match self {
            PolicyLoaderFailure::Exited { output, .. }
            | PolicyLoaderFailure::TimedOut { output, .. } => output,
            PolicyLoaderFailure::NotRun(_) => &[],
        }
    }
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
        let zone = "[rules ] error parsing zone file `/run/policy-loader.conf:1`, unexpected data";
        let rows = [
            (
                PolicyLoaderFailure::Exited {
                    status: ExitStatus::Code(1),
                    output: vec![],
                },
                "policy-loader failed: exit code 1; the rules database was not updated".to_owned(),
            ),
            (
                PolicyLoaderFailure::Exited {
                    status: ExitStatus::Code(1),
                    output: vec![zone.to_owned(), "[system] error while loading config".to_owned()],
                },
                format!(
                    "policy-loader failed: exit code 1; the rules database was not updated; its \
                     last output:\n  {zone}\n  [system] error while loading config"
                ),
            ),
            (
                PolicyLoaderFailure::NotRun(SupervisorError::UnknownService("policy-loader".into())),
                "policy-loader failed: no service named \"policy-loader\"; the rules database was not updated".to_owned(),
            ),
            (
                PolicyLoaderFailure::TimedOut {
                    limit: Duration::from_secs(2),
                    output: vec!["[rules ] loading".to_owned()],
                },
                "policy-loader failed: it did not finish within 2 s and was stopped (see \
                 KRES_POLICY_LOADER_TIMEOUT); the rules database was not updated; its last \
                 output:\n  [rules ] loading"
                    .to_owned(),
            ),
        ];
        for (failure, want) in rows {
            assert_eq!(ApplyError::from(failure).to_string(), want);
        }
    }
}
