//! The supervisor actor: the single owner of the process table, of `waitpid` and of the
//! notify socket. Each pass of its loop takes one [`LoopEvent`] (a notification, children
//! exited, a command, a timer fired) and hands it to one dispatcher ([`Supervisor::dispatch`]),
//! which feeds the per-service state machines and carries out their actions. Others talk to
//! it through a [`SupervisorHandle`] and read [`Snapshot`]s.
//!
//! The loop is fair: each pass takes whichever source is ready (chosen at random among the
//! ready ones, not in a fixed order) and at most a budget of its events, so no flood of
//! notifications or commands holds up reaping, commands or timers.
//!
//! One file per side of the actor: [`handle`] (what callers hold), [`calls`] (what they ask),
//! [`notifications`] (what children say), [`children`] (reaping, spawning, signalling),
//! [`publish`] (announcements and snapshots), [`takeover`] (the table handed over), and
//! [`service`] (one service as the actor keeps it).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::StreamExt;
use nix::unistd::Pid;
use signal_hook::consts::SIGCHLD;
use signal_hook_tokio::Signals;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::machine::State;
use crate::notify::{Datagram, DescriptorCloser, NoiseLog, NotifySocket};
use crate::os;
use crate::output;
use crate::snapshot::Snapshot;
use crate::steering::Steering;

pub use crate::call::SupervisorError;

mod calls;
mod children;
mod handle;
mod notifications;
mod publish;
mod service;
mod takeover;

pub(crate) use handle::Command;
pub use handle::{ShutdownReport, SupervisorHandle};

/// The supervisor's actor as a task its caller holds: awaited for its end, aborted when
/// dropped.
pub type ActorTask = AbortOnDropHandle<()>;
use service::Service;

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
    /// actor on the current tokio runtime. Must be called before any child is spawned. The
    /// actor is its caller's: it ends when the handle returned is dropped.
    pub fn start(options: SupervisorOptions) -> io::Result<(SupervisorHandle, ActorTask)> {
        os::become_subreaper()?;
        let notify = NotifySocket::bind(&options.notify_socket, options.notify_senders)?;
        let (sup, handle) = Supervisor::new(notify, options.line_levels)?;
        Ok((handle, AbortOnDropHandle::new(tokio::spawn(sup.run()))))
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
            let event = self.next_event().await;
            self.dispatch(event);
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
        self.report_shutdown();
    }

    /// Wait for the next event of whichever source is ready. Not biased: among the sources
    /// that are ready, one is picked at random.
    async fn next_event(&mut self) -> LoopEvent {
        let wake = match (self.timers.peek().map(|Reverse(t)| *t), self.noise.due()) {
            (Some(timer), Some(noise)) => Some(timer.min(noise)),
            (timer, noise) => timer.or(noise),
        };
        tokio::select! {
            received = self.notify.recv() => LoopEvent::Notified(received),
            Some(_) = self.sigchld.next() => LoopEvent::ChildrenExited,
            command = self.commands.recv() => LoopEvent::Commanded(command),
            () = sleep_until_opt(wake) => LoopEvent::TimerFired,
        }
    }

    /// The single source of truth of the loop: one event, and what it leads to. Each source
    /// takes a bounded share of the pass, so no flood holds up the others.
    fn dispatch(&mut self, event: LoopEvent) {
        match event {
            LoopEvent::Notified(Ok(datagram)) => {
                self.on_datagram(datagram);
                self.drain_notifications(DATAGRAMS_PER_PASS - 1);
            }
            LoopEvent::Notified(Err(e)) => tracing::warn!(error = %e, "notify socket read failed"),
            LoopEvent::ChildrenExited => self.reap(),
            LoopEvent::Commanded(Some(command)) => {
                self.on_command(command);
                // A handover ends the actor: what follows waits for the next one.
                for _ in 1..COMMANDS_PER_PASS {
                    if matches!(self.phase, Phase::HandedOver) {
                        break;
                    }
                    match self.commands.try_recv() {
                        Ok(command) => self.on_command(command),
                        Err(_) => break,
                    }
                }
            }
            // Every handle is gone: nobody can command us any more; stop all.
            LoopEvent::Commanded(None) => self.shut_down(None),
            LoopEvent::TimerFired => self.on_timer(),
        }
    }

    /// Carry out one command of a handle.
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

    /// Tell the last caller of a shutdown which services did not end cleanly.
    fn report_shutdown(&mut self) {
        let Phase::Stopping(stopping) = &mut self.phase else {
            return;
        };
        let unclean = self
            .services
            .iter()
            .filter(|(name, s)| {
                stopping.killed.contains(*name) || matches!(s.machine.state(), State::Failed { .. })
            })
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(reply) = stopping.reply.take() {
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
}

/// What one pass of the actor's loop takes: exactly one of these, from whichever source was
/// ready first.
enum LoopEvent {
    /// A datagram came on the notify socket (or reading it failed).
    Notified(io::Result<Datagram>),
    /// SIGCHLD: children exited, to be reaped.
    ChildrenExited,
    /// A handle's command; `None` once every handle is gone.
    Commanded(Option<Command>),
    /// The earliest deadline (a machine's, or the noise log's) has come.
    TimerFired,
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
