//! The actor's handle: what callers hold to command it, and the closed [`Command`] enum that
//! reaches it.

use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot, watch};

use crate::call::{self, Answer, Call, FromAnswer, Reply};
use crate::handover::Handover;
use crate::snapshot::Snapshot;
use crate::spec::{ExitStatus, ServiceSpec};

use crate::call::SupervisorError;

/// What reaches the actor: a call with where its answer goes, or an order only the process
/// that owns the supervisor gives.
pub(crate) enum Command {
    Call {
        call: Call,
        reply: Reply,
    },
    /// Stop every service and end the actor.
    Shutdown {
        reply: oneshot::Sender<ShutdownReport>,
    },
    /// SIGKILL every live process group at once.
    KillAll,
    /// End the actor and give its table up.
    HandOver {
        reply: oneshot::Sender<Result<Handover, SupervisorError>>,
    },
}

/// How a shutdown went.
#[derive(Debug, Clone, Default)]
pub struct ShutdownReport {
    /// Services that had to be SIGKILLed or had failed before.
    pub unclean: Vec<String>,
}

/// A cheap, cloneable way to command the supervisor.
#[derive(Clone)]
pub struct SupervisorHandle {
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) snapshot: watch::Receiver<Arc<Snapshot>>,
    pub(crate) notify_socket: PathBuf,
}

impl SupervisorHandle {
    /// Make `call` and wait for its answer, as it comes.
    pub(crate) async fn forward(&self, call: Call) -> Result<Answer, SupervisorError> {
        call::ask(&self.commands, |reply| Command::Call { call, reply }).await?
    }

    /// Make `call` and wait for its answer, typed as the call returns it.
    async fn call<T: FromAnswer>(&self, call: Call) -> Result<T, SupervisorError> {
        call::typed(self.forward(call).await)
    }

    /// Register a service (not started). `fds` are descriptors the child inherits at the
    /// same numbers; the caller keeps them open for as long as the service exists.
    pub async fn add(&self, spec: ServiceSpec, fds: Vec<RawFd>) -> Result<(), SupervisorError> {
        self.call(Call::Add {
            spec: Box::new(spec),
            fds,
            handed: Vec::new(),
        })
        .await
    }

    /// Register a service (not started) that is handed `fds`: each descriptor appears in the
    /// child at the number paired with it. The supervisor owns them from now on and closes
    /// them when the service is removed.
    pub async fn add_handing(
        &self,
        spec: ServiceSpec,
        fds: Vec<(OwnedFd, RawFd)>,
    ) -> Result<(), SupervisorError> {
        let (handed, fds) = fds.into_iter().unzip();
        self.call(Call::Add {
            spec: Box::new(spec),
            fds,
            handed,
        })
        .await
    }

    /// Start a registered service and wait until it is ready (or fails to become ready).
    pub async fn start(&self, name: &str) -> Result<Pid, SupervisorError> {
        let name = name.to_owned();
        self.call(Call::Start { name }).await
    }

    /// Stop a service and wait until its process is gone.
    pub async fn stop(&self, name: &str) -> Result<Option<ExitStatus>, SupervisorError> {
        let name = name.to_owned();
        self.call(Call::Stop { name }).await
    }

    /// Stop and start again, waiting for readiness.
    pub async fn restart(&self, name: &str) -> Result<Pid, SupervisorError> {
        let name = name.to_owned();
        self.call(Call::Restart { name }).await
    }

    /// Stop a service and forget it.
    pub async fn remove(&self, name: &str) -> Result<Option<ExitStatus>, SupervisorError> {
        let name = name.to_owned();
        self.call(Call::Remove { name }).await
    }

    /// Run a one-shot job to completion and return how it ended.
    pub async fn run(&self, spec: ServiceSpec) -> Result<ExitStatus, SupervisorError> {
        self.call(Call::Run {
            spec: Box::new(spec),
        })
        .await
    }

    /// Stop every service (in parallel, each with its own stop timeout) and end the actor.
    pub async fn shutdown(&self) -> Result<ShutdownReport, SupervisorError> {
        call::ask(&self.commands, |reply| Command::Shutdown { reply }).await
    }

    /// The last lines (up to `output::TAIL_LINES`) the service's current or last process wrote;
    /// of a service just forgotten (a finished job, a removed service), of its last process.
    pub async fn output_tail(&self, name: &str) -> Result<Vec<String>, SupervisorError> {
        let name = name.to_owned();
        self.call(Call::Tail { name }).await
    }

    /// Announce the stop to come: the snapshot says `draining` from now on, while every
    /// service keeps running. Only the main process decides when the stop comes.
    pub async fn drain(&self) -> Result<(), SupervisorError> {
        self.call(Call::Drain).await
    }

    /// SIGKILL the process group of `name`'s current process, recording `reason` in the
    /// snapshot; its restart policy then applies as to any death by signal. For a process
    /// that stopped answering (stopped, looping, deadlocked), which no SIGTERM would end.
    pub async fn kill(&self, name: &str, reason: &str) -> Result<(), SupervisorError> {
        let (name, reason) = (name.to_owned(), reason.to_owned());
        self.call(Call::Kill { name, reason }).await
    }

    /// End the actor and hand its process table over, for the next image of this process
    /// (an in-place upgrade) or for [`Supervisor::adopt`] in this one: every child keeps
    /// running, unwatched until then. `Busy` while a process is starting or stopping.
    pub async fn hand_over(&self) -> Result<Handover, SupervisorError> {
        call::ask(&self.commands, |reply| Command::HandOver { reply }).await?
    }

    /// Ask the process that owns the supervisor to re-execute itself, keeping every child (an
    /// in-place upgrade), if it offers that: the request of a directing child travels over
    /// its link to the parent ([`crate::remote::ChildService::reexec`]). The answer says
    /// whether the re-execution begins; the caller is stopped in its course.
    pub async fn request_reexec(&self) -> Result<(), SupervisorError> {
        self.call(Call::Reexec).await
    }

    /// SIGKILL every live process group at once (a second SIGINT/SIGTERM).
    pub fn kill_all(&self) {
        let _ = self.commands.send(Command::KillAll);
    }

    /// The latest process table.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    /// Watch the process table change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshot.clone()
    }

    /// The socket children report readiness to.
    pub fn notify_socket(&self) -> &std::path::Path {
        &self.notify_socket
    }
}
