//! The supervisor actor: the single owner of the process table, of `waitpid` and of the
//! notify socket. It consumes one closed event type per loop pass (a notification, a reaped
//! child, a command, a timer), feeds the per-service state machines and carries out their
//! actions. Others talk to it through a [`SupervisorHandle`] and read [`Snapshot`]s.
//!
//! The loop is fair: each pass takes whichever source is ready (chosen at random among the
//! ready ones, not in a fixed order) and at most a budget of its events, so no flood of
//! notifications or commands holds up reaping, commands or timers.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::StreamExt;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::consts::SIGCHLD;
use signal_hook_tokio::Signals;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::handover::{self, Handover, ServiceImage, SupervisorImage};
use crate::machine::{Action, Announcement, Event, FailReason, ServiceMachine, State};
use crate::notify::{Datagram, DescriptorCloser, Noise, NoiseLog, Notification, NotifySocket};
use crate::os::{self, FdPass};
use crate::output::{self, Stream};
use crate::snapshot::{ProcessSnapshot, Snapshot};
use crate::spec::{ExitStatus, Readiness, ServiceSpec};
use crate::steering::{self, Steering};
use crate::text;

/// Errors returned to callers of the handle.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Notifications read before reaping, at most; a flood beyond waits for the next pass.
const MAX_DRAINED_BEFORE_REAPING: usize = 1024;

/// Datagrams taken from the notify socket in one pass of the loop, at most.
const DATAGRAMS_PER_PASS: usize = 64;

/// Commands taken in one pass of the loop, at most.
const COMMANDS_PER_PASS: usize = 16;

/// How the supervisor was set up.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// Where children send sd_notify messages (`NOTIFY_SOCKET` of notify services).
    pub notify_socket: PathBuf,
    /// The group whose processes may send there besides our own user: the children's, when
    /// they run as another user. The kernel's credentials on each datagram still say which
    /// child sent it.
    pub notify_senders: Option<u32>,
}

/// What becomes of a service once it is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterStop {
    /// It stays registered and can be started again.
    Keep,
    /// It is unregistered.
    Remove,
}

pub(crate) enum Command {
    Add {
        spec: ServiceSpec,
        fds: Vec<FdPass>,
        owned: Vec<OwnedFd>,
        reply: oneshot::Sender<Result<(), SupervisorError>>,
    },
    Start {
        name: String,
        reply: oneshot::Sender<Result<Pid, SupervisorError>>,
    },
    Stop {
        name: String,
        reply: oneshot::Sender<Result<Option<ExitStatus>, SupervisorError>>,
    },
    Restart {
        name: String,
        reply: oneshot::Sender<Result<Pid, SupervisorError>>,
    },
    Remove {
        name: String,
        reply: oneshot::Sender<Result<Option<ExitStatus>, SupervisorError>>,
    },
    Run {
        spec: ServiceSpec,
        reply: oneshot::Sender<Result<ExitStatus, SupervisorError>>,
    },
    Shutdown {
        reply: oneshot::Sender<ShutdownReport>,
    },
    KillAll,
    Drain {
        reply: oneshot::Sender<Result<(), SupervisorError>>,
    },
    Kill {
        name: String,
        reason: String,
        reply: oneshot::Sender<Result<(), SupervisorError>>,
    },
    Tail {
        name: String,
        reply: oneshot::Sender<Result<Vec<String>, SupervisorError>>,
    },
    HandOver {
        reply: oneshot::Sender<Result<Handover, SupervisorError>>,
    },
    Reexec {
        reply: oneshot::Sender<Result<(), SupervisorError>>,
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
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, SupervisorError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .map_err(|_| SupervisorError::Gone)?;
        rx.await.map_err(|_| SupervisorError::Gone)
    }

    /// Register a service (not started). `fds` are descriptors the child inherits at the
    /// same numbers; the caller keeps them open for as long as the service exists.
    pub async fn add(&self, spec: ServiceSpec, fds: Vec<RawFd>) -> Result<(), SupervisorError> {
        let fds = fds
            .into_iter()
            .map(|fd| FdPass {
                ours: fd,
                child: fd,
            })
            .collect();
        self.ask(|reply| Command::Add {
            spec,
            fds,
            owned: Vec::new(),
            reply,
        })
        .await?
    }

    /// Register a service (not started) that is handed `fds`: each descriptor appears in the
    /// child at the number paired with it. The supervisor owns them from now on and closes
    /// them when the service is removed.
    pub async fn add_handing(
        &self,
        spec: ServiceSpec,
        fds: Vec<(OwnedFd, RawFd)>,
    ) -> Result<(), SupervisorError> {
        let pass = fds
            .iter()
            .map(|(fd, child)| FdPass {
                ours: fd.as_raw_fd(),
                child: *child,
            })
            .collect();
        let owned = fds.into_iter().map(|(fd, _)| fd).collect();
        self.ask(|reply| Command::Add {
            spec,
            fds: pass,
            owned,
            reply,
        })
        .await?
    }

    /// Start a registered service and wait until it is ready (or fails to become ready).
    pub async fn start(&self, name: &str) -> Result<Pid, SupervisorError> {
        let name = name.to_owned();
        self.ask(|reply| Command::Start { name, reply }).await?
    }

    /// Stop a service and wait until its process is gone.
    pub async fn stop(&self, name: &str) -> Result<Option<ExitStatus>, SupervisorError> {
        let name = name.to_owned();
        self.ask(|reply| Command::Stop { name, reply }).await?
    }

    /// Stop and start again, waiting for readiness.
    pub async fn restart(&self, name: &str) -> Result<Pid, SupervisorError> {
        let name = name.to_owned();
        self.ask(|reply| Command::Restart { name, reply }).await?
    }

    /// Stop a service and forget it.
    pub async fn remove(&self, name: &str) -> Result<Option<ExitStatus>, SupervisorError> {
        let name = name.to_owned();
        self.ask(|reply| Command::Remove { name, reply }).await?
    }

    /// Run a one-shot job to completion and return how it ended.
    pub async fn run(&self, spec: ServiceSpec) -> Result<ExitStatus, SupervisorError> {
        self.ask(|reply| Command::Run { spec, reply }).await?
    }

    /// Stop every service (in parallel, each with its own stop timeout) and end the actor.
    pub async fn shutdown(&self) -> Result<ShutdownReport, SupervisorError> {
        self.ask(|reply| Command::Shutdown { reply }).await
    }

    /// The last lines (up to `output::TAIL_LINES`) the service's current or last process wrote.
    pub async fn output_tail(&self, name: &str) -> Result<Vec<String>, SupervisorError> {
        let name = name.to_owned();
        self.ask(|reply| Command::Tail { name, reply }).await?
    }

    /// Announce the stop to come: the snapshot says `draining` from now on, while every
    /// service keeps running. Only the main process decides when the stop comes.
    pub async fn drain(&self) -> Result<(), SupervisorError> {
        self.ask(|reply| Command::Drain { reply }).await?
    }

    /// SIGKILL the process group of `name`'s current process, recording `reason` in the
    /// snapshot; its restart policy then applies as to any death by signal. For a process
    /// that stopped answering (stopped, looping, deadlocked), which no SIGTERM would end.
    pub async fn kill(&self, name: &str, reason: &str) -> Result<(), SupervisorError> {
        let (name, reason) = (name.to_owned(), reason.to_owned());
        self.ask(|reply| Command::Kill {
            name,
            reason,
            reply,
        })
        .await?
    }

    /// End the actor and hand its process table over, for the next image of this process
    /// (an in-place upgrade) or for [`Supervisor::adopt`] in this one: every child keeps
    /// running, unwatched until then. `Busy` while a process is starting or stopping.
    pub async fn hand_over(&self) -> Result<Handover, SupervisorError> {
        self.ask(|reply| Command::HandOver { reply }).await?
    }

    /// Ask the process that owns the supervisor to re-execute itself, keeping every child (an
    /// in-place upgrade), if it offers that: the request of a directing child travels over
    /// its link to the parent ([`crate::remote::ChildService::reexec`]). The answer says
    /// whether the re-execution begins; the caller is stopped in its course.
    pub async fn request_reexec(&self) -> Result<(), SupervisorError> {
        self.ask(|reply| Command::Reexec { reply }).await?
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

/// A stop the caller asked for, carried out once a steered service's queues are drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    Stop,
    Restart,
}

impl StopKind {
    fn event(self) -> Event {
        match self {
            StopKind::Stop => Event::StopRequested,
            StopKind::Restart => Event::RestartRequested,
        }
    }
}

/// Why a steered service whose process runs and is ready takes no new queries.
#[derive(Debug, Clone, Copy)]
enum Withdrawal {
    /// Steered away before `then`, which goes ahead once its sockets' queues are empty or at
    /// `deadline`, whichever comes first; `polls` counts the looks at its queues.
    Draining {
        deadline: Instant,
        then: StopKind,
        polls: u32,
    },
    /// Killed on request; its death is yet to be reaped.
    Killed,
}

/// One registered service.
struct Service {
    spec: ServiceSpec,
    machine: ServiceMachine,
    /// Descriptors passed to the child, and at which numbers.
    fds: Vec<FdPass>,
    /// Descriptors the supervisor was handed with the service; closed with it.
    owned: Vec<OwnedFd>,
    /// Copies of the read ends of the current process's output pipes, for a handover (the
    /// drain tasks read the originals).
    output: Option<(OwnedFd, OwnedFd)>,
    /// Callers waiting for readiness.
    ready_waiters: Vec<oneshot::Sender<Result<Pid, SupervisorError>>>,
    /// Callers waiting for the process to be down for good.
    down_waiters: Vec<oneshot::Sender<Result<Option<ExitStatus>, SupervisorError>>>,
    /// One-shot callers waiting for the exit status.
    run_waiter: Option<oneshot::Sender<Result<ExitStatus, SupervisorError>>>,
    /// Forget the service once it is down.
    remove_when_down: bool,
    /// Was it SIGKILLed during shutdown.
    killed: bool,
    /// Wall-clock anchor of the current state, for snapshots.
    since_wall: Option<SystemTime>,
    ready_wall: Option<SystemTime>,
    /// Last `STATUS=` the child sent.
    status_text: Option<String>,
    /// The last lines of output of the current or last process.
    tail: output::Tail,
    /// Which of its processes was last killed on request, and why.
    kill_reason: Option<(Pid, String)>,
    /// Set while a steered service's running process is steered away from.
    withdrawal: Option<Withdrawal>,
}

impl Service {
    /// A service just registered: idle, nothing known of a process yet.
    fn new(spec: ServiceSpec, fds: Vec<FdPass>, owned: Vec<OwnedFd>) -> Service {
        Service {
            spec,
            machine: ServiceMachine::new(),
            fds,
            owned,
            output: None,
            ready_waiters: Vec::new(),
            down_waiters: Vec::new(),
            run_waiter: None,
            remove_when_down: false,
            killed: false,
            since_wall: None,
            ready_wall: None,
            status_text: None,
            tail: output::Tail::default(),
            kill_reason: None,
            withdrawal: None,
        }
    }

    /// Whether the steering programs may send it new datagrams and connections: it opted in,
    /// its process is ready, and nobody is stopping or killing it.
    fn takes_queries(&self) -> bool {
        self.spec.reuseport_index.is_some()
            && matches!(self.machine.state(), State::Running { .. })
            && self.withdrawal.is_none()
    }
}

/// The actor. Create with [`Supervisor::start`].
pub struct Supervisor {
    services: BTreeMap<String, Service>,
    notify: NotifySocket,
    sigchld: Signals,
    commands: mpsc::UnboundedReceiver<Command>,
    snapshot_tx: watch::Sender<Arc<Snapshot>>,
    timers: BinaryHeap<Reverse<Instant>>,
    shutdown_reply: Option<oneshot::Sender<ShutdownReport>>,
    shutting_down: bool,
    /// Set by [`SupervisorHandle::drain`]; never cleared (a drain ends in the stop).
    draining: bool,
    rng: u64,
    output_tasks: TaskTracker,
    /// Ends the output drain tasks when the pipes are handed over.
    output_stop: CancellationToken,
    /// The table was handed over: the actor ends after this pass.
    handed_over: bool,
    /// Process groups whose leader we reaped and swept with SIGKILL, while members may still
    /// be dying. Shutdown waits until they are empty, so that nothing of a service outlives
    /// the supervisor and every member is reaped here rather than left a zombie.
    lingering_groups: Vec<Pid>,
    /// The reuseport groups of the steered services' sockets, and their programs.
    steering: Steering,
    /// What came on the notify socket that is not a service's notification: counted, and
    /// logged once a second at most, whatever the flood.
    noise: NoiseLog,
    /// Closes descriptors that came with notifications, off the actor (a close can block).
    closer: DescriptorCloser,
}

impl Supervisor {
    /// Bind the notify socket, become a subreaper, install the SIGCHLD handler and spawn the
    /// actor on the current tokio runtime. Must be called before any child is spawned.
    pub fn start(
        options: SupervisorOptions,
    ) -> io::Result<(SupervisorHandle, tokio::task::JoinHandle<()>)> {
        os::become_subreaper()?;
        let notify = NotifySocket::bind(&options.notify_socket, options.notify_senders)?;
        let (sup, handle) = Supervisor::new(notify)?;
        Ok((handle, tokio::spawn(sup.run())))
    }

    /// Take over the process table `handover` describes, from an earlier image of this process
    /// (after `execve`, through [`Handover::claim`]) or from an actor of this one whose
    /// handover was not used: every child is adopted as it runs, none is restarted. Children
    /// that exited meanwhile are reaped at once and their restart policy applies.
    pub fn adopt(
        handover: Handover,
    ) -> io::Result<(SupervisorHandle, tokio::task::JoinHandle<()>)> {
        os::become_subreaper()?;
        let (image, mut fds) = handover.into_parts();
        let mut take = |fd: RawFd| {
            fds.remove(&fd)
                .ok_or_else(|| io::Error::other(format!("descriptor {fd} was not handed over")))
        };
        let notify = NotifySocket::from_fd(take(image.notify_fd)?, image.notify_socket)?;
        let (mut sup, handle) = Supervisor::new(notify)?;
        sup.draining = image.draining;
        let now = Instant::now();
        for service in image.services {
            let mut owned = Vec::with_capacity(service.fds.len());
            for &(ours, _) in &service.fds {
                owned.push(take(ours)?);
            }
            let output = match service.output {
                Some((out, err)) => Some((take(out)?, take(err)?)),
                None => None,
            };
            let machine = ServiceMachine::from_image(service.machine, now);
            if let State::Backoff { until } = machine.state() {
                sup.timers.push(Reverse(*until));
            }
            let name = service.spec.name.clone();
            let fds = service
                .fds
                .iter()
                .map(|&(ours, child)| FdPass { ours, child })
                .collect();
            let mut svc = Service::new(service.spec, fds, owned);
            svc.machine = machine;
            svc.since_wall = handover::wall_from_image(service.since_wall);
            svc.ready_wall = handover::wall_from_image(service.ready_wall);
            svc.status_text = service.status_text;
            svc.kill_reason = service
                .kill_reason
                .map(|(pid, reason)| (Pid::from_raw(pid), reason));
            if let Some(index) = svc.spec.reuseport_index {
                let handed: Vec<RawFd> = svc.fds.iter().map(|p| p.ours).collect();
                sup.steering.join(&name, index, &handed);
            }
            sup.services.insert(name.clone(), svc);
            if let (Some(pid), Some((out, err))) = (sup.services[&name].machine.pid(), output) {
                sup.drain_output(&name, pid, out, err);
            }
        }
        // Whatever exited while nobody watched is a zombie waiting for us.
        sup.reap();
        sup.steer();
        sup.publish();
        Ok((handle, tokio::spawn(sup.run())))
    }

    fn new(notify: NotifySocket) -> io::Result<(Supervisor, SupervisorHandle)> {
        let sigchld = Signals::new([SIGCHLD])?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (snapshot_tx, snapshot_rx) = watch::channel(Arc::new(Snapshot::default()));
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15)
            ^ u64::from(std::process::id());
        let handle = SupervisorHandle {
            commands: tx,
            snapshot: snapshot_rx,
            notify_socket: notify.path().to_owned(),
        };
        let sup = Supervisor {
            services: BTreeMap::new(),
            notify,
            sigchld,
            commands: rx,
            snapshot_tx,
            timers: BinaryHeap::new(),
            shutdown_reply: None,
            shutting_down: false,
            draining: false,
            rng: seed | 1,
            output_tasks: TaskTracker::new(),
            output_stop: CancellationToken::new(),
            handed_over: false,
            lingering_groups: Vec::new(),
            steering: Steering::default(),
            noise: NoiseLog::default(),
            closer: DescriptorCloser::start()?,
        };
        Ok((sup, handle))
    }

    async fn run(mut self) {
        loop {
            let wake = match (self.timers.peek().map(|Reverse(t)| *t), self.noise.due()) {
                (Some(timer), Some(noise)) => Some(timer.min(noise)),
                (timer, noise) => timer.or(noise),
            };
            // Not biased: among the sources that are ready, one is picked at random, and each
            // takes a bounded share of the pass.
            tokio::select! {
                received = self.notify.recv() => match received {
                    Ok(datagram) => {
                        self.on_datagram(datagram);
                        self.drain_notifications(DATAGRAMS_PER_PASS - 1);
                    }
                    Err(e) => tracing::warn!(error = %e, "notify socket read failed"),
                },
                Some(_) = self.sigchld.next() => self.reap(),
                command = self.commands.recv() => match command {
                    Some(c) => {
                        self.on_command(c);
                        // A handover ends the actor: what follows waits for the next one.
                        for _ in 1..COMMANDS_PER_PASS {
                            if self.handed_over {
                                break;
                            }
                            match self.commands.try_recv() {
                                Ok(c) => self.on_command(c),
                                Err(_) => break,
                            }
                        }
                    }
                    None => {
                        // Every handle is gone: nobody can command us any more; stop all.
                        if !self.shutting_down {
                            self.begin_shutdown();
                        }
                    }
                },
                () = sleep_until_opt(wake) => self.on_timer(),
            }
            if self.handed_over {
                // Nothing of the table is left here; the next image publishes it.
                return;
            }
            self.steer();
            self.publish();
            if self.shutting_down && self.all_down() && self.lingering_groups.is_empty() {
                break;
            }
        }
        self.output_tasks.close();
        let unclean = self
            .services
            .iter()
            .filter(|(_, s)| s.killed || matches!(s.machine.state(), State::Failed { .. }))
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(reply) = self.shutdown_reply.take() {
            let _ = reply.send(ShutdownReport { unclean });
        }
    }

    fn next_entropy(&mut self) -> u64 {
        // xorshift64: jitter needs spread, not cryptographic quality.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn all_down(&self) -> bool {
        self.services.values().all(|s| {
            s.machine.pid().is_none() && !matches!(s.machine.state(), State::Backoff { .. })
        })
    }

    /// Take up to `budget` datagrams that are already queued.
    fn drain_notifications(&mut self, budget: usize) {
        for _ in 0..budget {
            match self.notify.try_recv() {
                Ok(Some(datagram)) => self.on_datagram(datagram),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "notify socket read failed");
                    break;
                }
            }
        }
    }

    /// Count `count` of `noise` and log what is due.
    fn noted(&mut self, noise: Noise, count: u64, example: impl FnOnce() -> String) {
        if let Some(line) = self.noise.record(noise, count, example, Instant::now()) {
            tracing::warn!("{line}");
        }
    }

    fn on_datagram(&mut self, datagram: Datagram) {
        let received = match datagram {
            Datagram::Received(received) => received,
            Datagram::Refused {
                why,
                sender,
                descriptors,
            } => {
                let sender = sender.map(Pid::as_raw);
                self.dispose(descriptors, sender);
                self.noted(why, 1, || match sender {
                    Some(pid) => format!("pid {pid}: {why}"),
                    None => why.to_string(),
                });
                return;
            }
        };
        let pid = received.pid;
        self.dispose(received.descriptors, Some(pid.as_raw()));
        let Some(name) = self.service_of(pid) else {
            self.noted(Noise::UnknownSender, 1, || {
                format!("pid {}: not one of our services", pid.as_raw())
            });
            return;
        };
        let note = match Notification::parse(&received.payload) {
            Ok(n) => n,
            Err(e) => {
                self.noted(Noise::Malformed, 1, || {
                    format!("{name} (pid {}): {e}", pid.as_raw())
                });
                return;
            }
        };
        if let Some(svc) = self.services.get_mut(&name) {
            if let Some(status) = &note.status {
                svc.status_text = Some(status.clone());
            }
        }
        if note.ready {
            self.feed(&name, Event::ReadyReceived { pid });
        }
        if note.stopping {
            tracing::debug!(name, pid = pid.as_raw(), "child announced STOPPING");
        }
    }

    /// Close descriptors that came with a datagram, off the actor, and count them.
    fn dispose(&mut self, descriptors: Vec<OwnedFd>, sender: Option<i32>) {
        let count = descriptors.len() as u64;
        self.closer.close(descriptors);
        self.noted(Noise::Descriptor, count, || match sender {
            Some(pid) => format!("pid {pid}: sent {count} descriptors"),
            None => format!("{count} descriptors"),
        });
    }

    fn service_of(&self, pid: Pid) -> Option<String> {
        self.services
            .iter()
            .find(|(_, s)| s.machine.pid() == Some(pid))
            .map(|(n, _)| n.clone())
    }

    fn reap(&mut self) {
        // Attribute any READY=1 sent just before an exit: drain notifications first, but
        // never without end (a child flooding the socket must not hold up reaping).
        self.drain_notifications(MAX_DRAINED_BEFORE_REAPING);
        loop {
            match os::reap_one() {
                Ok(Some((pid, status))) => match self.service_of(pid) {
                    Some(name) => {
                        // Sweep what may remain of its process group (forked helpers). The
                        // members die asynchronously; remember the group until it is empty.
                        let _ = os::signal_group(pid, Signal::SIGKILL);
                        self.lingering_groups.push(pid);
                        tracing::info!(name, pid = pid.as_raw(), %status, "process exited");
                        let withdrawn = self
                            .services
                            .get_mut(&name)
                            .and_then(|s| s.withdrawal.take());
                        self.feed(&name, Event::Exited { pid, status });
                        // A stop that waited for the queues is still owed to its callers.
                        if let Some(Withdrawal::Draining { then, .. }) = withdrawn {
                            self.feed(&name, then.event());
                        }
                    }
                    None => {
                        tracing::info!(pid = pid.as_raw(), %status, "reaped an orphaned process")
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "waitpid failed");
                    break;
                }
            }
        }
        // A group is empty once its last member was reaped: the members are reparented to us
        // (we are a subreaper or PID 1), so their SIGCHLD brings us back here.
        self.lingering_groups
            .retain(|&group| os::group_exists(group));
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        if let Some(line) = self.noise.flush(now) {
            tracing::warn!("{line}");
        }
        while matches!(self.timers.peek(), Some(Reverse(t)) if *t <= now) {
            self.timers.pop();
        }
        self.check_drains(now);
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            self.feed(&name, Event::Tick);
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Add {
                spec,
                fds,
                owned,
                reply,
            } => {
                let _ = reply.send(self.add(spec, fds, owned));
            }
            Command::Start { name, reply } => {
                if self.shutting_down {
                    let _ = reply.send(Err(SupervisorError::ShuttingDown));
                    return;
                }
                let Some(svc) = self.services.get_mut(&name) else {
                    let _ = reply.send(Err(SupervisorError::UnknownService(name)));
                    return;
                };
                if let Some(Withdrawal::Draining { then, .. }) = &mut svc.withdrawal {
                    // Being stopped: it comes back afterwards, as a stopping process would.
                    *then = StopKind::Restart;
                    svc.ready_waiters.push(reply);
                    return;
                }
                if let State::Running { pid, .. } = svc.machine.state() {
                    let _ = reply.send(Ok(*pid));
                    return;
                }
                svc.ready_waiters.push(reply);
                self.feed(&name, Event::StartRequested);
            }
            Command::Restart { name, reply } => {
                if self.shutting_down {
                    let _ = reply.send(Err(SupervisorError::ShuttingDown));
                    return;
                }
                let Some(svc) = self.services.get_mut(&name) else {
                    let _ = reply.send(Err(SupervisorError::UnknownService(name)));
                    return;
                };
                svc.ready_waiters.push(reply);
                self.stop_or_drain(&name, StopKind::Restart);
            }
            Command::Stop { name, reply } => self.stop(name, reply, AfterStop::Keep),
            Command::Remove { name, reply } => self.stop(name, reply, AfterStop::Remove),
            Command::Run { spec, reply } => {
                if self.shutting_down {
                    let _ = reply.send(Err(SupervisorError::ShuttingDown));
                    return;
                }
                let name = spec.name.clone();
                if let Err(e) = self.add(spec, Vec::new(), Vec::new()) {
                    let _ = reply.send(Err(e));
                    return;
                }
                if let Some(svc) = self.services.get_mut(&name) {
                    svc.run_waiter = Some(reply);
                    svc.remove_when_down = true;
                }
                self.feed(&name, Event::StartRequested);
            }
            Command::Shutdown { reply } => {
                self.shutdown_reply = Some(reply);
                if !self.shutting_down {
                    self.begin_shutdown();
                }
            }
            Command::Tail { name, reply } => {
                let result = match self.services.get(&name) {
                    Some(svc) => Ok(svc
                        .tail
                        .lock()
                        .map(|t| t.iter().cloned().collect())
                        .unwrap_or_default()),
                    None => Err(SupervisorError::UnknownService(name)),
                };
                let _ = reply.send(result);
            }
            Command::Kill {
                name,
                reason,
                reply,
            } => {
                // Cut where it is received: it is kept in every snapshot from now on.
                let reason = text::one_line(&reason, text::MAX_STATUS);
                let result = match self.services.get_mut(&name) {
                    None => Err(SupervisorError::UnknownService(name)),
                    Some(svc) => match svc.machine.pid() {
                        None => Err(SupervisorError::NotRunning(name)),
                        Some(pid) => {
                            tracing::warn!(name, pid = pid.as_raw(), reason, "killing");
                            svc.kill_reason = Some((pid, reason));
                            if svc.spec.reuseport_index.is_some() && svc.withdrawal.is_none() {
                                svc.withdrawal = Some(Withdrawal::Killed);
                            }
                            let _ = os::signal_group(pid, Signal::SIGKILL);
                            Ok(())
                        }
                    },
                };
                let _ = reply.send(result);
            }
            Command::HandOver { reply } => {
                let _ = reply.send(self.hand_over());
            }
            Command::Reexec { reply } => {
                // In this process the owner re-executes through `hand_over`; only a
                // directing child asks, over its link.
                let _ = reply.send(Err(SupervisorError::Refused(
                    "re-executing is asked of the parent of a directing child".into(),
                )));
            }
            Command::Drain { reply } => {
                self.draining = true;
                let _ = reply.send(Ok(()));
            }
            Command::KillAll => {
                for (name, svc) in &mut self.services {
                    if let Some(pid) = svc.machine.pid() {
                        tracing::warn!(name, pid = pid.as_raw(), "killing at once");
                        svc.killed = true;
                        let _ = os::signal_group(pid, Signal::SIGKILL);
                    }
                }
            }
        }
    }

    fn add(
        &mut self,
        spec: ServiceSpec,
        fds: Vec<FdPass>,
        owned: Vec<OwnedFd>,
    ) -> Result<(), SupervisorError> {
        if self.services.contains_key(&spec.name) {
            return Err(SupervisorError::DuplicateService(spec.name));
        }
        let name = spec.name.clone();
        if let Some(index) = spec.reuseport_index {
            let handed: Vec<RawFd> = fds.iter().map(|p| p.ours).collect();
            self.steering.join(&name, index, &handed);
        }
        self.services.insert(name, Service::new(spec, fds, owned));
        Ok(())
    }

    fn stop(
        &mut self,
        name: String,
        reply: oneshot::Sender<Result<Option<ExitStatus>, SupervisorError>>,
        after: AfterStop,
    ) {
        let Some(svc) = self.services.get_mut(&name) else {
            let _ = reply.send(Err(SupervisorError::UnknownService(name)));
            return;
        };
        svc.down_waiters.push(reply);
        svc.remove_when_down |= after == AfterStop::Remove;
        self.stop_or_drain(&name, StopKind::Stop);
    }

    /// Stop or restart `name` now, or, when it takes queries and others can take its share,
    /// steer away from it first and carry the stop out once its queues are empty
    /// ([`Supervisor::check_drains`]).
    fn stop_or_drain(&mut self, name: &str, kind: StopKind) {
        let Some(svc) = self.services.get_mut(name) else {
            return;
        };
        if let Some(Withdrawal::Draining { then, .. }) = &mut svc.withdrawal {
            // The latest request decides, as for a process that is already stopping.
            *then = kind;
            return;
        }
        let services = &self.services;
        let drain = !self.shutting_down
            && services.get(name).is_some_and(Service::takes_queries)
            && self.steering.others_take_over(name, |n| {
                services.get(n).is_some_and(Service::takes_queries)
            });
        if !drain {
            self.feed(name, kind.event());
            return;
        }
        let now = Instant::now();
        if let Some(svc) = self.services.get_mut(name) {
            tracing::debug!(
                name,
                "steered away from; draining its queues before it stops"
            );
            svc.withdrawal = Some(Withdrawal::Draining {
                deadline: now + steering::DRAIN_LIMIT,
                then: kind,
                polls: 0,
            });
        }
        self.timers.push(Reverse(now + steering::DRAIN_POLL));
    }

    /// Carry out the stops of drained services: their queues are empty, or they waited long
    /// enough.
    fn check_drains(&mut self, now: Instant) {
        let draining: Vec<String> = self
            .services
            .iter()
            .filter(|(_, s)| matches!(s.withdrawal, Some(Withdrawal::Draining { .. })))
            .map(|(name, _)| name.clone())
            .collect();
        let mut again = false;
        for name in draining {
            let queued = self.steering.queued(&name);
            let Some(Some(Withdrawal::Draining {
                deadline,
                then,
                polls,
            })) = self.services.get_mut(&name).map(|s| &mut s.withdrawal)
            else {
                continue;
            };
            let (then, polls_so_far) = (*then, *polls);
            *polls += 1;
            if queued > 0 && now < *deadline {
                if polls_so_far == 0 {
                    tracing::debug!(name, queued, "queues not empty yet; waiting");
                }
                again = true;
                continue;
            }
            if queued > 0 {
                tracing::debug!(name, queued, "queues not drained in time; stopping anyway");
            } else {
                tracing::debug!(name, polls = polls_so_far + 1, "queues drained; stopping");
            }
            if let Some(svc) = self.services.get_mut(&name) {
                svc.withdrawal = None;
            }
            self.feed(&name, then.event());
        }
        if again {
            self.timers.push(Reverse(now + steering::DRAIN_POLL));
        }
    }

    /// Point every reuseport group at the services that take queries now.
    fn steer(&mut self) {
        let services = &self.services;
        self.steering
            .update(|n| services.get(n).is_some_and(Service::takes_queries));
    }

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            // Everything stops now; a drain in progress is overtaken.
            if let Some(svc) = self.services.get_mut(&name) {
                if matches!(svc.withdrawal, Some(Withdrawal::Draining { .. })) {
                    svc.withdrawal = None;
                }
            }
            self.feed(&name, Event::StopRequested);
        }
    }

    /// Feed one event to one service and carry out what its machine asks for.
    fn feed(&mut self, name: &str, event: Event) {
        let mut queue = vec![event];
        while let Some(event) = queue.pop() {
            let entropy = self.next_entropy();
            let Some(svc) = self.services.get_mut(name) else {
                return;
            };
            let before = std::mem::discriminant(svc.machine.state());
            let actions = svc.machine.on(&svc.spec, event, Instant::now(), entropy);
            if std::mem::discriminant(svc.machine.state()) != before {
                svc.since_wall = Some(SystemTime::now());
                if matches!(svc.machine.state(), State::Running { .. }) {
                    svc.ready_wall = svc.since_wall;
                }
            }
            for action in actions {
                match action {
                    Action::Spawn => {
                        if self.shutting_down {
                            // No restarts once stopping: report the service down instead.
                            queue.push(Event::StopRequested);
                            continue;
                        }
                        queue.push(self.spawn(name));
                    }
                    Action::Signal { pid, signal } => {
                        if let Err(e) = os::signal_group(pid, signal) {
                            tracing::warn!(name, pid = pid.as_raw(), error = %e, "cannot signal process group");
                        }
                        // Like systemd: a stopped process would leave the stop signal pending
                        // until the SIGKILL; SIGCONT lets it handle the signal now.
                        if signal != Signal::SIGKILL && signal != Signal::SIGCONT {
                            let _ = os::signal_group(pid, Signal::SIGCONT);
                        }
                        if signal == Signal::SIGKILL {
                            if let Some(svc) = self.services.get_mut(name) {
                                if self.shutting_down {
                                    svc.killed = true;
                                }
                            }
                            tracing::warn!(name, pid = pid.as_raw(), "sent SIGKILL");
                        }
                    }
                    Action::WakeAt(at) => self.timers.push(Reverse(at)),
                    Action::Announce(a) => self.announce(name, a),
                }
            }
        }
        if let Some(svc) = self.services.get(name) {
            let down = svc.machine.pid().is_none()
                && !matches!(svc.machine.state(), State::Backoff { .. })
                && svc.down_waiters.is_empty()
                && svc.ready_waiters.is_empty()
                && svc.run_waiter.is_none();
            if svc.remove_when_down && down {
                self.services.remove(name);
                self.steering.leave(name);
            }
        }
    }

    fn spawn(&mut self, name: &str) -> Event {
        let notify_path = self.notify.path().to_owned();
        let Some(svc) = self.services.get_mut(name) else {
            return Event::SpawnFailed {
                error: "service vanished".into(),
            };
        };
        let mut env = svc.spec.env.clone();
        if matches!(svc.spec.readiness, Readiness::Notify { .. }) {
            env.retain(|(k, _)| k != "NOTIFY_SOCKET");
            env.push((
                OsString::from("NOTIFY_SOCKET"),
                notify_path.into_os_string(),
            ));
        }
        match os::spawn(
            &svc.spec.argv,
            &env,
            svc.spec.cwd.as_deref(),
            &svc.fds,
            svc.spec.user.map(|u| (u, svc.spec.keep)),
            svc.spec.output,
        ) {
            Ok(spawned) => {
                tracing::info!(name, pid = spawned.pid.as_raw(), "process spawned");
                svc.status_text = None;
                if let Ok(mut t) = svc.tail.lock() {
                    t.clear();
                }
                svc.output = None;
                if let Some((stdout, stderr)) = spawned.output {
                    self.drain_output(name, spawned.pid, stdout, stderr);
                }
                Event::Spawned { pid: spawned.pid }
            }
            Err(e) => {
                tracing::error!(name, error = %e, "cannot spawn");
                Event::SpawnFailed {
                    error: e.to_string(),
                }
            }
        }
    }

    /// Log what process `pid` of `name` writes, keeping copies of the pipes for a handover.
    fn drain_output(&mut self, name: &str, pid: Pid, stdout: OwnedFd, stderr: OwnedFd) {
        let Some(svc) = self.services.get_mut(name) else {
            return;
        };
        match (stdout.try_clone(), stderr.try_clone()) {
            (Ok(out), Ok(err)) => svc.output = Some((out, err)),
            // Without copies the pipes cannot be handed over; the process would lose its
            // output at an upgrade, not its life.
            _ => tracing::warn!(name, "cannot keep copies of the output pipes"),
        }
        for (fd, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
            self.output_tasks.spawn(output::drain(
                fd,
                name.to_owned(),
                pid,
                stream,
                svc.tail.clone(),
                self.output_stop.clone(),
            ));
        }
    }

    /// Give up the table (see [`SupervisorHandle::hand_over`]); the actor ends after this pass.
    fn hand_over(&mut self) -> Result<Handover, SupervisorError> {
        if self.shutting_down {
            return Err(SupervisorError::ShuttingDown);
        }
        if !self.lingering_groups.is_empty() {
            return Err(SupervisorError::Busy(
                "process groups are still emptying".into(),
            ));
        }
        let now = Instant::now();
        let mut images = Vec::with_capacity(self.services.len());
        for (name, svc) in &self.services {
            let waited_on = !svc.ready_waiters.is_empty()
                || !svc.down_waiters.is_empty()
                || svc.run_waiter.is_some()
                || svc.remove_when_down
                || svc.withdrawal.is_some();
            let machine = svc.machine.image(now).filter(|_| !waited_on);
            let Some(machine) = machine else {
                return Err(SupervisorError::Busy(format!(
                    "{name} is starting or stopping"
                )));
            };
            if svc.fds.len() != svc.owned.len() {
                return Err(SupervisorError::Refused(format!(
                    "{name} holds descriptors the supervisor does not own"
                )));
            }
            images.push(ServiceImage {
                spec: svc.spec.clone(),
                machine,
                fds: svc.fds.iter().map(|p| (p.ours, p.child)).collect(),
                output: None,
                since_wall: handover::wall_to_image(svc.since_wall),
                ready_wall: handover::wall_to_image(svc.ready_wall),
                status_text: svc.status_text.clone(),
                kill_reason: svc
                    .kill_reason
                    .as_ref()
                    .map(|(pid, reason)| (pid.as_raw(), reason.clone())),
            });
        }
        let notify = self
            .notify
            .hand_over()
            .map_err(|e| SupervisorError::Refused(format!("notify socket: {e}")))?;
        let mut fds = vec![];
        let notify_fd = notify.as_raw_fd();
        fds.push(notify);
        for (image, svc) in images.iter_mut().zip(self.services.values_mut()) {
            fds.append(&mut svc.owned);
            if svc.machine.pid().is_some() {
                if let Some((out, err)) = svc.output.take() {
                    image.output = Some((out.as_raw_fd(), err.as_raw_fd()));
                    fds.push(out);
                    fds.push(err);
                }
            }
        }
        // From here on the next image reads the pipes; ours stop reading.
        self.output_stop.cancel();
        self.services.clear();
        self.handed_over = true;
        Ok(Handover {
            image: SupervisorImage {
                notify_socket: self.notify.path().to_owned(),
                notify_fd,
                draining: self.draining,
                services: images,
            },
            fds,
        })
    }

    fn announce(&mut self, name: &str, announcement: Announcement) {
        let Some(svc) = self.services.get_mut(name) else {
            return;
        };
        match announcement {
            Announcement::Ready { pid } => {
                tracing::info!(name, pid = pid.as_raw(), "ready");
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Ok(pid));
                }
            }
            Announcement::Died { reason } => {
                tracing::warn!(name, %reason, "process died");
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Err(SupervisorError::StartFailed {
                        name: name.to_owned(),
                        reason: reason.clone(),
                    }));
                }
            }
            Announcement::Failed { reason } => {
                tracing::error!(name, %reason, "service failed");
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Err(SupervisorError::StartFailed {
                        name: name.to_owned(),
                        reason: reason.clone(),
                    }));
                }
                for w in svc.down_waiters.drain(..) {
                    let _ = w.send(Ok(svc.machine.last_exit().map(|(s, _)| s)));
                }
                if let Some(w) = svc.run_waiter.take() {
                    let result = match svc.machine.last_exit() {
                        Some((status, _)) if !matches!(reason, FailReason::SpawnFailed { .. }) => {
                            Ok(status)
                        }
                        _ => Err(SupervisorError::StartFailed {
                            name: name.to_owned(),
                            reason,
                        }),
                    };
                    let _ = w.send(result);
                }
            }
            Announcement::Down { status } => {
                for w in svc.ready_waiters.drain(..) {
                    let _ = w.send(Err(SupervisorError::StoppedWhileStarting {
                        name: name.to_owned(),
                    }));
                }
                for w in svc.down_waiters.drain(..) {
                    let _ = w.send(Ok(status));
                }
                if let Some(w) = svc.run_waiter.take() {
                    let _ = w.send(status.ok_or(SupervisorError::StoppedWhileStarting {
                        name: name.to_owned(),
                    }));
                }
            }
        }
    }

    fn publish(&mut self) {
        let processes = self
            .services
            .iter()
            .map(|(name, svc)| {
                let mut p = ProcessSnapshot::of(
                    name,
                    svc.spec.kind.clone(),
                    &svc.machine,
                    svc.since_wall,
                    svc.ready_wall,
                    svc.status_text.clone(),
                    svc.kill_reason.as_ref(),
                );
                p.takes_queries = svc
                    .spec
                    .reuseport_index
                    .map(|_| svc.takes_queries() && self.steering.is_member(name));
                p
            })
            .collect();
        let snapshot = Arc::new(Snapshot {
            processes,
            shutting_down: self.shutting_down,
            draining: self.draining,
        });
        self.snapshot_tx.send_if_modified(|old| {
            if **old == *snapshot {
                false
            } else {
                *old = snapshot;
                true
            }
        });
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
