//! A service's machine as one process image hands it to the next: instants turned into ages.

use std::time::Duration;

use nix::unistd::Pid;
use tokio::time::Instant;

use super::{FailReason, Registration, Retry, ServiceMachine, State};
use crate::spec::ExitStatus;

/// A service's machine as one process image hands it to the next (`crate::handover`): its
/// state and history with every instant turned into an age, since an `Instant` means nothing
/// outside the process that took it. Only settled states can be handed over; a process that
/// is starting, stopping, draining or killed waits for its outcome in the image that asked
/// for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MachineImage {
    pub state: StateImage,
    pub streak: u32,
    /// Ages of the automatic restarts within the start-limit window.
    pub restarts_in_window: Vec<Duration>,
    pub last_spawn: Option<Duration>,
    pub restarts: u32,
    pub last_exit: Option<(ExitStatus, Duration)>,
    /// Whether a restart's spawn was asked for ([`Retry::Spawning`]); it never is in a
    /// settled table, and the field stays for the images of earlier versions.
    pub pending_restart: bool,
}

/// A settled [`State`], its instants as ages (for `Backoff`, the time left).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateImage {
    Idle,
    Running {
        pid: i32,
        since: Duration,
        ready_at: Duration,
    },
    Backoff {
        left: Duration,
    },
    Exited {
        status: ExitStatus,
        at: Duration,
    },
    Failed {
        reason: FailReason,
        at: Duration,
    },
}

impl ServiceMachine {
    /// The machine as of `now`, or `None` while its process is starting, being stopped,
    /// drained or killed, or while the service is to be forgotten once down.
    pub fn image(&self, now: Instant) -> Option<MachineImage> {
        if self.registration == Registration::UntilDown {
            return None;
        }
        let age = |t: Instant| now.saturating_duration_since(t);
        let state = match &self.state {
            State::Idle => StateImage::Idle,
            State::Running {
                pid,
                since,
                ready_at,
            } => StateImage::Running {
                pid: pid.as_raw(),
                since: age(*since),
                ready_at: age(*ready_at),
            },
            State::Backoff { until, .. } => StateImage::Backoff {
                left: until.saturating_duration_since(now),
            },
            State::Exited { status, at } => StateImage::Exited {
                status: *status,
                at: age(*at),
            },
            State::Failed { reason, at } => StateImage::Failed {
                reason: reason.clone(),
                at: age(*at),
            },
            State::Starting { .. }
            | State::Stopping { .. }
            | State::Draining { .. }
            | State::Killed { .. } => return None,
        };
        Some(MachineImage {
            state,
            streak: self.streak,
            restarts_in_window: self.restarts_in_window.iter().map(|t| age(*t)).collect(),
            last_spawn: self.last_spawn.map(age),
            restarts: self.restarts,
            last_exit: self.last_exit.map(|(s, t)| (s, age(t))),
            pending_restart: matches!(
                self.state,
                State::Backoff {
                    retry: Retry::Spawning,
                    ..
                }
            ),
        })
    }

    /// The machine an image describes, its ages counted back from `now`.
    pub fn from_image(image: MachineImage, now: Instant) -> ServiceMachine {
        let ago = |d: Duration| now.checked_sub(d).unwrap_or(now);
        let state = match image.state {
            StateImage::Idle => State::Idle,
            StateImage::Running {
                pid,
                since,
                ready_at,
            } => State::Running {
                pid: Pid::from_raw(pid),
                since: ago(since),
                ready_at: ago(ready_at),
            },
            StateImage::Backoff { left } => State::Backoff {
                until: now + left,
                retry: if image.pending_restart {
                    Retry::Spawning
                } else {
                    Retry::Waiting
                },
            },
            StateImage::Exited { status, at } => State::Exited {
                status,
                at: ago(at),
            },
            StateImage::Failed { reason, at } => State::Failed {
                reason,
                at: ago(at),
            },
        };
        ServiceMachine {
            state,
            registration: Registration::Kept,
            streak: image.streak,
            restarts_in_window: image.restarts_in_window.into_iter().map(ago).collect(),
            last_spawn: image.last_spawn.map(ago),
            restarts: image.restarts,
            last_exit: image.last_exit.map(|(s, d)| (s, ago(d))),
        }
    }
}
