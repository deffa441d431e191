//! What a supervised process is: its command line, environment and the policies that govern
//! its start, readiness, restarts and stop. Specs are plain data, validated once on
//! construction, so the state machine never meets an impossible policy.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::backoff::Backoff;
pub use supervisor_types::{Credentials, ExitStatus};

/// Everything needed to start, watch and stop one service.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServiceSpec {
    /// Unique name, used in logs, snapshots and commands (`kresd0`, `cache-gc`).
    pub name: String,
    /// Free-form label that groups services for snapshots (`kresd`, `gc`, `policy-loader`).
    pub kind: String,
    /// Program and arguments; `argv[0]` is the executable path.
    pub argv: Vec<OsString>,
    /// The complete environment of the child. Nothing is inherited implicitly; the supervisor
    /// only adds `NOTIFY_SOCKET` for services with notify readiness.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of the child.
    pub cwd: Option<PathBuf>,
    /// How the service tells us that it is ready.
    pub readiness: Readiness,
    /// What happens when the process exits on its own.
    pub restart: RestartPolicy,
    /// Delays between restarts.
    pub backoff: Backoff,
    /// The most starts allowed within an interval before the service is failed.
    pub start_limit: StartLimit,
    /// How the process is asked to stop.
    pub stop: StopPolicy,
    /// Exit codes that count as success (a one-shot job's expected codes).
    pub success_codes: BTreeSet<i32>,
    /// Run the child as this user and group instead of ours (root dropping to an unprivileged
    /// user: supplementary groups are cleared, every capability but `keep` is lost in the
    /// switch, and the child can never gain privileges again through `execve`: no_new_privs).
    pub user: Option<Credentials>,
    /// What a child that runs as another `user` keeps of our capabilities.
    #[serde(default)]
    pub keep: KeptCapabilities,
    /// Where the child's stdout and stderr go.
    #[serde(default)]
    pub output: Output,
    /// Opt-in steering ([`crate::steering`]): the index the sockets handed to this service
    /// have in their `SO_REUSEPORT` groups. New datagrams and connections of those groups go
    /// only to members that are ready and not being stopped; a stop or restart first steers
    /// away from it and waits (at most [`crate::machine::DRAIN_LIMIT`]) until its queues are
    /// empty; a kill on request steers away at once. `None`: its sockets are left alone.
    #[serde(default)]
    pub reuseport_index: Option<u32>,
}

/// Where a child writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Output {
    /// Into pipes we drain into our log, each line with the service's name and pid.
    #[default]
    Captured,
    /// Onto our own stdout and stderr, as ours: for a part of ourselves that logs in our
    /// format (the resolver's manager process).
    Inherited,
}

/// The capabilities a child that runs as another user keeps through the switch, as ambient
/// capabilities, so that they survive its `execve` (and only those: its bounding set is left,
/// and no_new_privs keeps it from gaining more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum KeptCapabilities {
    /// None: the usual drop to an unprivileged user.
    #[default]
    None,
    /// `CAP_NET_BIND_SERVICE` alone: a child that binds its own workers' listening sockets on
    /// ports below 1024 (the resolver's manager process).
    BindServicePorts,
}

impl ServiceSpec {
    /// A long-running service with sensible defaults: no readiness protocol, restart always,
    /// SIGTERM then SIGKILL after 10 s.
    pub fn new(name: impl Into<String>, kind: impl Into<String>, argv: Vec<OsString>) -> Self {
        ServiceSpec {
            name: name.into(),
            kind: kind.into(),
            argv,
            env: Vec::new(),
            cwd: None,
            readiness: Readiness::None,
            restart: RestartPolicy::Always,
            backoff: Backoff::default(),
            start_limit: StartLimit::default(),
            stop: StopPolicy::default(),
            success_codes: BTreeSet::from([0]),
            user: None,
            keep: KeptCapabilities::None,
            output: Output::Captured,
            reuseport_index: None,
        }
    }

    /// Whether an exit status counts as a success for this service.
    pub fn is_success(&self, status: ExitStatus) -> bool {
        match status {
            ExitStatus::Code(code) => self.success_codes.contains(&code),
            ExitStatus::Signaled { .. } => false,
        }
    }
}

/// How a service reports readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Readiness {
    /// Ready as soon as it is spawned.
    None,
    /// Ready when it sends `READY=1` over sd_notify; killed if that takes longer than `timeout`.
    Notify { timeout: Duration },
}

/// What to do when the process exits without being asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RestartPolicy {
    /// Restart whatever the exit status.
    Always,
    /// Restart only when the exit status is not a success.
    OnFailure,
    /// Never restart: one-shot jobs and services that must stay down once they exit.
    Never,
}

/// At most `burst` starts within `interval`; one more fails the service (like systemd's
/// `StartLimitBurst=` / `StartLimitIntervalSec=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StartLimit {
    pub burst: u32,
    pub interval: Duration,
}

impl Default for StartLimit {
    fn default() -> Self {
        StartLimit {
            burst: 10,
            interval: Duration::from_secs(60),
        }
    }
}

/// How a process is stopped: `signal` to its process group, then SIGKILL to the group after
/// `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StopPolicy {
    #[serde(with = "signal_number")]
    pub signal: Signal,
    pub timeout: Duration,
}

impl Default for StopPolicy {
    fn default() -> Self {
        StopPolicy {
            signal: Signal::SIGTERM,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A signal as its number on the wire; an unknown number is an error, never a guess.
mod signal_number {
    use nix::sys::signal::Signal;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(signal: &Signal, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(*signal as i32)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
        let n = i32::deserialize(d)?;
        Signal::try_from(n).map_err(|_| serde::de::Error::custom(format!("no signal {n}")))
    }
}
