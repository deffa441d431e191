//! The supervisor's calls, written once: [`Call`] is every request a
//! [`crate::SupervisorHandle`] makes and [`Answer`] every result, whether the actor runs in
//! this process (the call travels with a reply channel) or across a link
//! ([`crate::remote`]: the call travels as JSON, its descriptors attached). The handle's
//! typed methods turn an answer into what each call returns ([`FromAnswer`]).

use std::os::fd::{OwnedFd, RawFd};

use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::machine::FailReason;
use crate::spec::{ExitStatus, ServiceSpec};

/// Errors returned to callers of the handle.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupervisorError {
    #[error("no service named {0:?}")]
    UnknownService(String),
    #[error("a service named {0:?} already exists")]
    DuplicateService(String),
    #[error("{name} failed to start: {reason}")]
    StartFailed { name: String, reason: FailReason },
    #[error("{name} went down while starting")]
    StoppedWhileStarting { name: String },
    #[error("{0} has no process")]
    NotRunning(String),
    #[error("the supervisor is shutting down")]
    ShuttingDown,
    #[error("the supervisor is gone")]
    Gone,
    /// The process table is not settled (a process starting or stopping); try again.
    #[error("busy: {0}")]
    Busy(String),
    /// A remote caller asked for something it may not have, or the link failed.
    #[error("refused: {0}")]
    Refused(String),
}

/// A supervisor call.
#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    /// Register a service (not started). `fds` names the number each descriptor gets in the
    /// service's processes.
    Add {
        spec: Box<ServiceSpec>,
        fds: Vec<RawFd>,
        /// The descriptors, in the order of `fds`, when the supervisor is to own them (and
        /// close them with the service): given to `add_handing`, or attached to the message
        /// on a link. Empty: the caller's own descriptors at those very numbers, which it
        /// keeps open for as long as the service exists.
        #[serde(skip)]
        handed: Vec<OwnedFd>,
    },
    /// Start and answer once ready: [`Answer::Pid`].
    Start { name: String },
    /// Stop and answer once down: [`Answer::Down`].
    Stop { name: String },
    /// Stop, start again, answer once ready: [`Answer::Pid`].
    Restart { name: String },
    /// Stop, forget, answer once down: [`Answer::Down`].
    Remove { name: String },
    /// Run a one-shot job to its end: [`Answer::Exited`].
    Run { spec: Box<ServiceSpec> },
    /// The last lines of output: [`Answer::Tail`].
    Tail { name: String },
    /// Announce the stop to come.
    Drain,
    /// SIGKILL the process group, recording why.
    Kill { name: String, reason: String },
    /// Ask the parent to re-execute itself, keeping its children (an in-place upgrade); the
    /// answer says whether it begins.
    Reexec,
}

/// A call's result.
#[derive(Debug, Serialize, Deserialize)]
pub enum Answer {
    Done,
    Pid(i32),
    Down(Option<ExitStatus>),
    Exited(ExitStatus),
    Tail(Vec<String>),
}

/// Where the answer to one call goes.
pub(crate) type Reply = oneshot::Sender<Result<Answer, SupervisorError>>;

/// What a call returns to its caller, taken from its answer (`None`: an answer of another
/// kind).
pub(crate) trait FromAnswer: Sized {
    fn from_answer(answer: Answer) -> Option<Self>;
}

impl FromAnswer for () {
    fn from_answer(answer: Answer) -> Option<Self> {
        matches!(answer, Answer::Done).then_some(())
    }
}

impl FromAnswer for Pid {
    fn from_answer(answer: Answer) -> Option<Self> {
        match answer {
            Answer::Pid(pid) => Some(Pid::from_raw(pid)),
            _ => None,
        }
    }
}

impl FromAnswer for Option<ExitStatus> {
    fn from_answer(answer: Answer) -> Option<Self> {
        match answer {
            Answer::Down(status) => Some(status),
            _ => None,
        }
    }
}

impl FromAnswer for ExitStatus {
    fn from_answer(answer: Answer) -> Option<Self> {
        match answer {
            Answer::Exited(status) => Some(status),
            _ => None,
        }
    }
}

impl FromAnswer for Vec<String> {
    fn from_answer(answer: Answer) -> Option<Self> {
        match answer {
            Answer::Tail(lines) => Some(lines),
            _ => None,
        }
    }
}

/// Send the request `make` builds around its reply channel to `to`, and wait for the reply:
/// the one request/reply helper of the crate (a handle's commands to the actor, a directing
/// child's re-execution request to the owner of the parent). A receiver that is gone, or
/// that drops the request unanswered, is [`SupervisorError::Gone`].
pub(crate) async fn ask<R, T>(
    to: &mpsc::UnboundedSender<R>,
    make: impl FnOnce(oneshot::Sender<T>) -> R,
) -> Result<T, SupervisorError> {
    let (reply, answer) = oneshot::channel();
    to.send(make(reply)).map_err(|_| SupervisorError::Gone)?;
    answer.await.map_err(|_| SupervisorError::Gone)
}

/// Turn `result` into what the caller expects.
pub(crate) fn typed<T: FromAnswer>(
    result: Result<Answer, SupervisorError>,
) -> Result<T, SupervisorError> {
    T::from_answer(result?)
        .ok_or_else(|| SupervisorError::Refused("answer of the wrong kind".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_typed_as_their_calls_return_them() {
        assert_eq!(typed::<Pid>(Ok(Answer::Pid(7))), Ok(Pid::from_raw(7)));
        assert_eq!(typed::<()>(Ok(Answer::Done)), Ok(()));
        assert_eq!(
            typed::<Option<ExitStatus>>(Ok(Answer::Down(None))),
            Ok(None)
        );
        assert_eq!(
            typed::<ExitStatus>(Ok(Answer::Exited(ExitStatus::Code(3)))),
            Ok(ExitStatus::Code(3))
        );
        assert_eq!(
            typed::<Vec<String>>(Ok(Answer::Tail(vec!["line".into()]))),
            Ok(vec!["line".to_owned()])
        );
        assert_eq!(
            typed::<()>(Ok(Answer::Pid(7))),
            Err(SupervisorError::Refused("answer of the wrong kind".into()))
        );
        assert_eq!(
            typed::<Pid>(Err(SupervisorError::Gone)),
            Err(SupervisorError::Gone)
        );
    }

    #[test]
    fn an_add_travels_with_its_numbers_and_without_its_descriptors() {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().expect("a pair");
        let call = Call::Add {
            spec: Box::new(ServiceSpec::new("svc", "test", vec!["/bin/true".into()])),
            fds: vec![3],
            handed: vec![OwnedFd::from(ours)],
        };
        let json = serde_json::to_string(&call).expect("serialises");
        assert!(!json.contains("handed"), "{json}");
        match serde_json::from_str::<Call>(&json).expect("parses") {
            Call::Add { fds, handed, .. } => {
                assert_eq!(fds, vec![3]);
                assert!(
                    handed.is_empty(),
                    "descriptors travel attached, not as JSON"
                );
            }
            other => panic!("not an add: {other:?}"),
        }
    }
}
