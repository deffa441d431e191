//! A native process supervisor for long-running services and one-shot jobs.
//!
//! It knows processes, never DNS: it spawns each child in its own process group with an
//! explicit environment, owns `waitpid` (and reaps orphans as a subreaper or PID 1), receives
//! sd_notify readiness from children on its own socket, restarts with backoff under a start
//! limit, stops with signal-then-SIGKILL escalation, drains child output into tracing, and
//! reports upward to systemd. The policy lives in a pure state machine ([`machine`]); the
//! [`runner`] actor carries out its actions; every call a handle makes, in this process or
//! across a link ([`remote`]), is described once ([`call`]); raw system calls live in [`os`].

pub mod backoff;
pub mod call;
pub mod command_line;
pub mod handover;
pub mod machine;
pub mod notify;
pub mod os;
pub mod output;
pub mod remote;
pub mod runner;
pub mod snapshot;
pub mod spec;
pub mod steering;
pub mod task;
pub mod text;
pub mod upward;

pub use backoff::Backoff;
pub use nix::sys::signal::Signal;
pub use nix::unistd::Pid;
pub use runner::{
    ShutdownReport, Supervisor, SupervisorError, SupervisorHandle, SupervisorOptions,
};
pub use snapshot::{ProcessSnapshot, ProcessState, Snapshot};
pub use spec::{
    Credentials, ExitStatus, KeptCapabilities, Output, Readiness, RestartPolicy, ServiceSpec,
    StartLimit, StopPolicy,
};
