//! The supervisor actor: the single owner of the process table, of `waitpid` and of the
//! notify socket. It consumes one closed event type per loop pass (a notification, a reaped
//! child, a command, a timer), feeds the per-service state machines and carries out their
//! actions. Others talk to it through a [`SupervisorHandle`] and read [`Snapshot`]s.
//!
//! The loop is fair: each pass takes whichever source is ready (chosen at random among the
//! ready ones, not in a fixed order) and at most a budget of its events, so no flood of
//! notifications or commands holds up reaping, commands or timers.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
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

use crate::call::{self, Answer, Call, FromAnswer, Reply};
use crate::handover::{self, Handover, ServiceImage, SupervisorImage};
use crate::machine::{Action, Announcement, Drain, Event, FailReason, ServiceMachine, State};
use crate::notify::{Datagram, DescriptorCloser, Noise, NoiseLog, Notification, NotifySocket};
use crate::os::{self, FdPass};
use crate::output::{self, Stream};
use crate::snapshot::{ProcessSnapshot, ProcessState, Snapshot};
use crate::spec::{ExitStatus, Readiness, ServiceSpec};
use crate::steering::Steering;
use crate::text;

pub use crate::call::SupervisorError;

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
    /// The level each line the children write is logged at.
    pub line_levels: output::LineLevels,
}

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
    /// Send a command and wait for its reply.
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

    /// Make `call` and wait for its answer, as it comes.
    pub(crate) async fn forward(&self, call: Call) -> Result<Answer, SupervisorError> {
        self.ask(|reply| Command::Call { call, reply }).await?
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
        self.ask(|reply| Command::Shutdown { reply }).await
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
        self.ask(|reply| Command::HandOver { reply }).await?
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
    /// Callers waiting for readiness (answered with [`Answer::Pid`]).
    ready_waiters: Vec<Reply>,
    /// Callers waiting for the process to be down for good ([`Answer::Down`]).
    down_waiters: Vec<Reply>,
    /// One-shot callers waiting for the exit status ([`Answer::Exited`]).
    run_waiter: Option<Reply>,
    /// Wall-clock anchor of the current state, for snapshots.
    since_wall: Option<SystemTime>,
    ready_wall: Option<SystemTime>,
    /// Last `STATUS=` the child sent.
    status_text: Option<String>,
    /// The last lines of output of the current or last process.
    tail: output::Tail,
    /// Which of its processes was last killed on request, and why.
    kill_reason: Option<(Pid, String)>,
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
            since_wall: None,
            ready_wall: None,
            status_text: None,
            tail: output::Tail::default(),
            kill_reason: None,
        }
    }

    /// Whether the steering programs may send it new datagrams and connections: it opted in,
    /// and its process is ready and not being drained, stopped or killed.
    fn takes_queries(&self) -> bool {
        self.spec.reuseport_index.is_some() && matches!(self.machine.state(), State::Running { .. })
    }

    /// Anchor the wall-clock times of the snapshot to a change of its state from `before`.
    fn note_change(&mut self, before: &State) {
        let now = ProcessState::of(self.machine.state());
        if ProcessState::of(before) != now {
            self.since_wall = Some(SystemTime::now());
            if now == ProcessState::Running {
                self.ready_wall = self.since_wall;
            }
        }
    }
}

/// Where the actor is in its life.
enum Phase {
    /// Services start, stop and restart as asked.
    Serving,
    /// The stop to come was announced ([`SupervisorHandle::drain`]): everything still runs
    /// and serves, the snapshot says `draining`.
    Draining,
    /// Every service is being stopped, and no spawn is made any more; the actor ends once
    /// all are down.
    Stopping(Stopping),
    /// The table was handed over: the actor ends after this pass.
    HandedOver,
}

/// What a stop of everything keeps until its end.
struct Stopping {
    /// Whether it was announced first: snapshots keep saying `draining`.
    notice: Notice,
    /// Who waits for the report (the last caller of `shutdown`).
    reply: Option<oneshot::Sender<ShutdownReport>>,
    /// Services SIGKILLed while stopping.
    killed: BTreeSet<String>,
}

/// Whether a stop was announced before it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notice {
    Announced,
    Unannounced,
}

impl Phase {
    fn is_stopping(&self) -> bool {
        matches!(self, Phase::Stopping(_))
    }

    /// What snapshots say of an announced stop.
    fn draining(&self) -> bool {
        match self {
            Phase::Draining => true,
            Phase::Stopping(stopping) => stopping.notice == Notice::Announced,
            Phase::Serving | Phase::HandedOver => false,
        }
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
    /// Serving, draining, stopping, or handed over.
    phase: Phase,
    rng: u64,
    output_tasks: TaskTracker,
    /// Ends the output drain tasks when the pipes are handed over.
    output_stop: CancellationToken,
    /// The level each output line is logged at.
    line_levels: output::LineLevels,
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
    /// The output tails of the last services forgotten (a finished job, a removed service),
    /// newest last, at most [`FORGOTTEN_TAILS`]: what a job said before it failed can still be
    /// asked once it is gone.
    forgotten_tails: VecDeque<(String, output::Tail)>,
}

/// How many forgotten services' output tails are kept.
const FORGOTTEN_TAILS: usize = 8;

impl Supervisor {
    /// Bind the notify socket, become a subreaper, install the SIGCHLD handler and spawn the
    /// actor on the current tokio runtime. Must be called before any child is spawned.
    pub fn start(
        options: SupervisorOptions,
    ) -> io::Result<(SupervisorHandle, tokio::task::JoinHandle<()>)> {
        os::become_subreaper()?;
        let notify = NotifySocket::bind(&options.notify_socket, options.notify_senders)?;
        let (sup, handle) = Supervisor::new(notify, options.line_levels)?;
        Ok((handle, tokio::spawn(sup.run())))
    }

    /// Take over the process table `handover` describes, from an earlier image of this process
    /// (after `execve`, through [`Handover::claim`]) or from an actor of this one whose
    /// handover was not used: every child is adopted as it runs, none is restarted. Children
    /// that exited meanwhile are reaped at once and their restart policy applies.
    /// `line_levels` is the level of each line the children write, as
    /// [`SupervisorOptions::line_levels`].
    pub fn adopt(
        handover: Handover,
        line_levels: output::LineLevels,
    ) -> io::Result<(SupervisorHandle, tokio::task::JoinHandle<()>)> {
        os::become_subreaper()?;
        let (image, mut fds) = handover.into_parts();
        let mut take = |fd: RawFd| {
            fds.remove(&fd)
                .ok_or_else(|| io::Error::other(format!("descriptor {fd} was not handed over")))
        };
        let notify = NotifySocket::from_fd(take(image.notify_fd)?, image.notify_socket)?;
        let (mut sup, handle) = Supervisor::new(notify, line_levels)?;
        if image.draining {
            sup.phase = Phase::Draining;
        }
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
            if let State::Backoff { until, .. } = machine.state() {
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

    fn new(
        notify: NotifySocket,
        line_levels: output::LineLevels,
    ) -> io::Result<(Supervisor, SupervisorHandle)> {
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
            phase: Phase::Serving,
            rng: seed | 1,
            output_tasks: TaskTracker::new(),
            output_stop: CancellationToken::new(),
            line_levels,
            lingering_groups: Vec::new(),
            steering: Steering::default(),
            noise: NoiseLog::default(),
            forgotten_tails: VecDeque::new(),
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
                            if matches!(self.phase, Phase::HandedOver) {
                                break;
                            }
                            match self.commands.try_recv() {
                                Ok(c) => self.on_command(c),
                                Err(_) => break,
                            }
                        }
                    }
                    // Every handle is gone: nobody can command us any more; stop all.
                    None => self.shut_down(None),
                },
                () = sleep_until_opt(wake) => self.on_timer(),
            }
            if matches!(self.phase, Phase::HandedOver) {
                // Nothing of the table is left here; the next image publishes it.
                return;
            }
            self.steer();
            self.publish();
            if self.phase.is_stopping() && self.all_down() && self.lingering_groups.is_empty() {
                break;
            }
        }
        self.output_tasks.close();
        if let Phase::Stopping(stopping) = &mut self.phase {
            let unclean = self
                .services
                .iter()
                .filter(|(name, s)| {
                    stopping.killed.contains(*name)
                        || matches!(s.machine.state(), State::Failed { .. })
                })
                .map(|(n, _)| n.clone())
                .collect();
            if let Some(reply) = stopping.reply.take() {
                let _ = reply.send(ShutdownReport { unclean });
            }
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
                        self.feed(&name, Event::Exited { pid, status });
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
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            self.feed(&name, Event::Tick);
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Call { call, reply } => self.on_call(call, reply),
            Command::Shutdown { reply } => self.shut_down(Some(reply)),
            Command::KillAll => self.kill_all(),
            Command::HandOver { reply } => {
                let _ = reply.send(self.hand_over());
            }
        }
    }

    /// Carry out a call, answering it now or once its outcome is known.
    fn on_call(&mut self, call: Call, reply: Reply) {
        let answer = match call {
            Call::Add { spec, fds, handed } => self.add(*spec, fds, handed).map(|()| Answer::Done),
            Call::Start { name } => return self.start_service(name, reply),
            Call::Restart { name } => {
                if self.phase.is_stopping() {
                    Err(SupervisorError::ShuttingDown)
                } else {
                    let restart = |drain| Event::RestartRequested { drain };
                    return self.stop_service(name, Outcome::Ready, restart, reply);
                }
            }
            Call::Stop { name } => {
                let stop = |drain| Event::StopRequested { drain };
                return self.stop_service(name, Outcome::Down, stop, reply);
            }
            Call::Remove { name } => {
                let remove = |drain| Event::RemoveRequested { drain };
                return self.stop_service(name, Outcome::Down, remove, reply);
            }
            Call::Run { spec } => return self.run_job(*spec, reply),
            Call::Tail { name } => {
                let forgotten = || {
                    self.forgotten_tails
                        .iter()
                        .rev()
                        .find(|(n, _)| *n == name)
                        .map(|(_, tail)| tail)
                };
                match self
                    .services
                    .get(&name)
                    .map(|svc| &svc.tail)
                    .or_else(forgotten)
                {
                    Some(tail) => Ok(Answer::Tail(
                        tail.lock()
                            .map(|t| t.iter().cloned().collect())
                            .unwrap_or_default(),
                    )),
                    None => Err(SupervisorError::UnknownService(name)),
                }
            }
            Call::Kill { name, reason } => self.kill(name, &reason).map(|()| Answer::Done),
            // In this process the owner re-executes through `hand_over`; only a directing
            // child asks, over its link.
            Call::Reexec => Err(SupervisorError::Refused(
                "re-executing is asked of the parent of a directing child".into(),
            )),
            Call::Drain => {
                self.announce_drain();
                Ok(Answer::Done)
            }
        };
        let _ = reply.send(answer);
    }

    fn start_service(&mut self, name: String, reply: Reply) {
        if self.phase.is_stopping() {
            let _ = reply.send(Err(SupervisorError::ShuttingDown));
            return;
        }
        let Some(svc) = self.services.get_mut(&name) else {
            let _ = reply.send(Err(SupervisorError::UnknownService(name)));
            return;
        };
        if let Some(pid) = svc.machine.ready_pid() {
            let _ = reply.send(Ok(Answer::Pid(pid.as_raw())));
            return;
        }
        svc.ready_waiters.push(reply);
        self.feed(&name, Event::StartRequested);
    }

    /// Stop, restart or remove `name` as `event` says, the caller waiting for `outcome`.
    fn stop_service(
        &mut self,
        name: String,
        outcome: Outcome,
        event: fn(Drain) -> Event,
        reply: Reply,
    ) {
        let Some(svc) = self.services.get_mut(&name) else {
            let _ = reply.send(Err(SupervisorError::UnknownService(name)));
            return;
        };
        match outcome {
            Outcome::Ready => svc.ready_waiters.push(reply),
            Outcome::Down => svc.down_waiters.push(reply),
        }
        let drain = self.drain_for(&name);
        self.feed(&name, event(drain));
    }

    /// Whether a stop of `name` may drain its queues first: not while everything stops;
    /// otherwise when it is being drained already (its share went to others then), or every
    /// group of its sockets has another member that takes queries.
    fn drain_for(&self, name: &str) -> Drain {
        let services = &self.services;
        let draining = services
            .get(name)
            .is_some_and(|s| matches!(s.machine.state(), State::Draining { .. }));
        let others = || {
            self.steering.others_take_over(name, |n| {
                services.get(n).is_some_and(Service::takes_queries)
            })
        };
        if !self.phase.is_stopping() && (draining || others()) {
            Drain::First
        } else {
            Drain::Skip
        }
    }

    fn run_job(&mut self, spec: ServiceSpec, reply: Reply) {
        if self.phase.is_stopping() {
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
        }
        self.feed(&name, Event::RunRequested);
    }

    /// SIGKILL `name`'s process on request, recording why.
    fn kill(&mut self, name: String, reason: &str) -> Result<(), SupervisorError> {
        // Cut where it is received: it is kept in every snapshot from now on.
        let reason = text::one_line(reason, text::MAX_STATUS);
        let Some(svc) = self.services.get_mut(&name) else {
            return Err(SupervisorError::UnknownService(name));
        };
        let Some(pid) = svc.machine.pid() else {
            return Err(SupervisorError::NotRunning(name));
        };
        tracing::warn!(name, pid = pid.as_raw(), reason, "killing");
        svc.kill_reason = Some((pid, reason));
        self.feed(&name, Event::KillRequested);
        Ok(())
    }

    /// SIGKILL every live process at once.
    fn kill_all(&mut self) {
        let live: Vec<(String, Pid)> = self
            .services
            .iter()
            .filter_map(|(name, svc)| Some((name.clone(), svc.machine.pid()?)))
            .collect();
        for (name, pid) in live {
            tracing::warn!(name, pid = pid.as_raw(), "killing at once");
            self.feed(&name, Event::KillRequested);
        }
    }

    /// Snapshots say `draining` from now on.
    fn announce_drain(&mut self) {
        match &mut self.phase {
            Phase::Serving => self.phase = Phase::Draining,
            Phase::Stopping(stopping) => stopping.notice = Notice::Announced,
            Phase::Draining | Phase::HandedOver => {}
        }
    }

    /// Register a service; `handed`, when not empty, are the descriptors to own, in the order
    /// of `fds` (see [`Call::Add`]).
    fn add(
        &mut self,
        spec: ServiceSpec,
        fds: Vec<RawFd>,
        handed: Vec<OwnedFd>,
    ) -> Result<(), SupervisorError> {
        if self.services.contains_key(&spec.name) {
            return Err(SupervisorError::DuplicateService(spec.name));
        }
        let pass: Vec<FdPass> = if handed.is_empty() {
            fds.iter()
                .map(|&fd| FdPass {
                    ours: fd,
                    child: fd,
                })
                .collect()
        } else if handed.len() == fds.len() {
            handed
                .iter()
                .zip(&fds)
                .map(|(ours, &child)| FdPass {
                    ours: ours.as_raw_fd(),
                    child,
                })
                .collect()
        } else {
            return Err(SupervisorError::Refused(
                "descriptor count does not match".into(),
            ));
        };
        let name = spec.name.clone();
        if let Some(index) = spec.reuseport_index {
            let ours: Vec<RawFd> = pass.iter().map(|p| p.ours).collect();
            self.steering.join(&name, index, &ours);
        }
        self.services.insert(name, Service::new(spec, pass, handed));
        Ok(())
    }

    /// Point every reuseport group at the services that take queries now.
    fn steer(&mut self) {
        let services = &self.services;
        self.steering
            .update(|n| services.get(n).is_some_and(Service::takes_queries));
    }

    /// Stop everything (`reply` waits for the report), overtaking any drain.
    fn shut_down(&mut self, reply: Option<oneshot::Sender<ShutdownReport>>) {
        let notice = match &mut self.phase {
            Phase::Stopping(stopping) => {
                if reply.is_some() {
                    stopping.reply = reply;
                }
                return;
            }
            Phase::Draining => Notice::Announced,
            Phase::Serving | Phase::HandedOver => Notice::Unannounced,
        };
        self.phase = Phase::Stopping(Stopping {
            notice,
            reply,
            killed: BTreeSet::new(),
        });
        let names: Vec<String> = self.services.keys().cloned().collect();
        for name in names {
            self.feed(&name, Event::StopRequested { drain: Drain::Skip });
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
            let before = svc.machine.state().clone();
            let queued = match event {
                Event::QueuesRead { queued } => Some(queued),
                _ => None,
            };
            let actions = svc.machine.on(&svc.spec, event, Instant::now(), entropy);
            svc.note_change(&before);
            log_drain(name, &before, svc.machine.state(), queued);
            for action in actions {
                if let Some(next) = self.carry_out(name, action) {
                    queue.push(next);
                }
            }
        }
    }

    /// Carry out one action of `name`'s machine; what it leads to is the next event.
    fn carry_out(&mut self, name: &str, action: Action) -> Option<Event> {
        match action {
            // No restarts once stopping: report the service down instead.
            Action::Spawn if self.phase.is_stopping() => {
                Some(Event::StopRequested { drain: Drain::Skip })
            }
            Action::Spawn => Some(self.spawn(name)),
            Action::Signal { pid, signal } => {
                self.signal(name, pid, signal);
                None
            }
            Action::WakeAt(at) => {
                self.timers.push(Reverse(at));
                None
            }
            Action::ReadQueues => Some(Event::QueuesRead {
                queued: self.steering.queued(name),
            }),
            Action::Announce(a) => {
                self.announce(name, a);
                None
            }
            Action::Forget => {
                if let Some(svc) = self.services.remove(name) {
                    self.forgotten_tails.retain(|(n, _)| n != name);
                    if self.forgotten_tails.len() >= FORGOTTEN_TAILS {
                        self.forgotten_tails.pop_front();
                    }
                    self.forgotten_tails.push_back((name.to_owned(), svc.tail));
                }
                self.steering.leave(name);
                None
            }
        }
    }

    fn signal(&mut self, name: &str, pid: Pid, signal: Signal) {
        if let Err(e) = os::signal_group(pid, signal) {
            tracing::warn!(name, pid = pid.as_raw(), error = %e, "cannot signal process group");
        }
        // Like systemd: a stopped process would leave the stop signal pending until the
        // SIGKILL; SIGCONT lets it handle the signal now.
        if signal != Signal::SIGKILL && signal != Signal::SIGCONT {
            let _ = os::signal_group(pid, Signal::SIGCONT);
        }
        if signal == Signal::SIGKILL {
            if let Phase::Stopping(stopping) = &mut self.phase {
                stopping.killed.insert(name.to_owned());
            }
            tracing::warn!(name, pid = pid.as_raw(), "sent SIGKILL");
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
                self.line_levels,
                self.output_stop.clone(),
            ));
        }
    }

    /// Give up the table (see [`SupervisorHandle::hand_over`]); the actor ends after this pass.
    fn hand_over(&mut self) -> Result<Handover, SupervisorError> {
        let draining = match self.phase {
            Phase::Serving => false,
            Phase::Draining => true,
            Phase::Stopping(_) | Phase::HandedOver => return Err(SupervisorError::ShuttingDown),
        };
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
                || svc.run_waiter.is_some();
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
        self.phase = Phase::HandedOver;
        Ok(Handover {
            image: SupervisorImage {
                notify_socket: self.notify.path().to_owned(),
                notify_fd,
                draining,
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
                    let _ = w.send(Ok(Answer::Pid(pid.as_raw())));
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
                    let _ = w.send(Ok(Answer::Down(svc.machine.last_exit().map(|(s, _)| s))));
                }
                if let Some(w) = svc.run_waiter.take() {
                    let result = match svc.machine.last_exit() {
                        Some((status, _)) if !matches!(reason, FailReason::SpawnFailed { .. }) => {
                            Ok(Answer::Exited(status))
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
                    let _ = w.send(Ok(Answer::Down(status)));
                }
                if let Some(w) = svc.run_waiter.take() {
                    let _ = w.send(status.map(Answer::Exited).ok_or(
                        SupervisorError::StoppedWhileStarting {
                            name: name.to_owned(),
                        },
                    ));
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
            shutting_down: self.phase.is_stopping(),
            draining: self.phase.draining(),
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

/// What a caller of a stop waits for.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// The process started again and is ready (a restart).
    Ready,
    /// The process is down (a stop, a removal).
    Down,
}

/// Say what became of a drain: begun, still waiting for the queues, or over.
fn log_drain(name: &str, before: &State, after: &State, queued: Option<u64>) {
    match (before, after, queued) {
        (State::Running { .. }, State::Draining { .. }, _) => {
            tracing::debug!(
                name,
                "steered away from; draining its queues before it stops"
            );
        }
        (State::Draining { polls: 0, .. }, State::Draining { .. }, Some(queued)) => {
            tracing::debug!(name, queued, "queues not empty yet; waiting");
        }
        (State::Draining { .. }, State::Draining { .. }, _) | (_, _, None) => {}
        (State::Draining { .. }, _, Some(queued)) if queued > 0 => {
            tracing::debug!(name, queued, "queues not drained in time; stopping anyway");
        }
        (State::Draining { polls, .. }, _, Some(_)) => {
            tracing::debug!(name, polls = polls + 1, "queues drained; stopping");
        }
        (_, _, Some(_)) => {}
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
