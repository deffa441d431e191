//! The supervisor across a process boundary. A service that directs other services (the
//! resolver's manager) runs as a child of the supervisor's process and commands it through a
//! [`SupervisorHandle`] like any in-process caller; the calls travel over a `SOCK_SEQPACKET`
//! link, descriptors with them (`SCM_RIGHTS`). If that child crashes, hangs or is killed,
//! the supervisor and every service it started stay up; the next incarnation is welcomed with
//! what the last one stored (an fd store, like systemd's `FDSTORE=1`) and the current process
//! table, and adopts them.
//!
//! The parent's side ([`serve_child`]) parses only small, bounded JSON messages of a closed
//! set and executes them on its own handle; it never interprets what is stored.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::os::{self, FdPass};
use crate::runner::{Command, SupervisorError, SupervisorHandle};
use crate::snapshot::Snapshot;
use crate::spec::{ExitStatus, ServiceSpec};
use crate::upward::{Upward, UpwardNotifier};

/// Largest message on the link, either way.
pub const MAX_MESSAGE: usize = 256 * 1024;
/// The most entries the fd store keeps.
pub const MAX_STORED: usize = 8192;
/// The longest name of a stored descriptor.
pub const MAX_NAME: usize = 256;
/// The longest status text passed upward.
pub const MAX_STATUS: usize = 512;
/// The longest output line a tail carries over the link.
const MAX_TAIL_LINE: usize = 1024;
/// How often the parent asks the child whether it is alive.
pub const PING_INTERVAL: Duration = Duration::from_secs(5);

/// One end of a link.
pub struct Link {
    /// A `SOCK_SEQPACKET` socket; tokio's stream type only provides readiness, every read and
    /// write is one `recvmsg`/`sendmsg` of a whole packet.
    socket: tokio::net::UnixStream,
}

impl Link {
    /// A new link: our end, and the child's end to hand it (at a known descriptor number).
    pub fn pair() -> io::Result<(Link, OwnedFd)> {
        let (ours, theirs) = os::seqpacket_pair()?;
        Ok((Link::from_fd(ours)?, theirs))
    }

    /// Wrap an inherited end (it is made non-blocking and close-on-exec).
    pub fn from_fd(fd: OwnedFd) -> io::Result<Link> {
        os::set_nonblocking(&fd)?;
        os::set_cloexec(&fd)?;
        let socket = tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))?;
        Ok(Link { socket })
    }

    /// Send one message with `fds` attached.
    pub async fn send<T: Serialize>(&self, msg: &T, fds: &[RawFd]) -> io::Result<()> {
        let data = serde_json::to_vec(msg).map_err(io::Error::other)?;
        if data.len() > MAX_MESSAGE {
            return Err(io::Error::other(format!(
                "message of {} bytes exceeds the link's {MAX_MESSAGE}",
                data.len()
            )));
        }
        if fds.len() > os::MAX_PACKET_FDS {
            return Err(io::Error::other("too many descriptors in one message"));
        }
        loop {
            self.socket.writable().await?;
            match self.socket.try_io(Interest::WRITABLE, || {
                os::send_packet(self.socket.as_fd(), &data, fds)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => return result,
            }
        }
    }

    /// Receive one message; `None` at the end of file (the peer is gone). A message that is
    /// too large, cut short or not of the expected shape is an error.
    pub async fn recv<T: for<'de> Deserialize<'de>>(
        &self,
    ) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
        let mut buf = vec![0u8; MAX_MESSAGE + 1];
        let packet = loop {
            self.socket.readable().await?;
            match self.socket.try_io(Interest::READABLE, || {
                os::recv_packet(self.socket.as_fd(), &mut buf)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => break result?,
            }
        };
        if packet.len == 0 && packet.fds.is_empty() {
            return Ok(None);
        }
        if packet.truncated || packet.len > MAX_MESSAGE {
            return Err(io::Error::other("oversize message on the link"));
        }
        let msg = serde_json::from_slice(&buf[..packet.len]).map_err(io::Error::other)?;
        Ok(Some((msg, packet.fds)))
    }
}

/// What the directing child asks of the supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToParent {
    /// A supervisor call; answered by [`ToChild::Reply`] with the same id.
    Call { id: u64, call: Call },
    /// Keep the one attached descriptor under `name` (replacing what was there).
    Store { name: String },
    /// Drop the descriptor kept under `name`.
    Forget { name: String },
    /// Tell the service manager above us (systemd).
    Upward(Upward),
    /// Stop everything and exit with `code`.
    Exit { code: u8 },
    /// Answer to [`ToChild::Ping`].
    Pong { seq: u64 },
}

/// A supervisor call. `Add` carries its descriptors attached, in the order of `fds`, which
/// names the number each gets in the service's process.
#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    Add {
        spec: Box<ServiceSpec>,
        fds: Vec<RawFd>,
    },
    Start {
        name: String,
    },
    Stop {
        name: String,
    },
    Restart {
        name: String,
    },
    Remove {
        name: String,
    },
    Run {
        spec: Box<ServiceSpec>,
    },
    Tail {
        name: String,
    },
    Drain,
    Kill {
        name: String,
        reason: String,
    },
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

/// What the supervisor tells the directing child.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToChild {
    /// First message: which incarnation this is, where services send `READY=1`, and how many
    /// [`ToChild::Stored`] messages follow.
    Welcome {
        incarnation: u32,
        notify_socket: PathBuf,
        stored: usize,
    },
    /// A stored descriptor (attached), after `Welcome`.
    Stored {
        name: String,
    },
    Reply {
        id: u64,
        result: Result<Answer, SupervisorError>,
    },
    /// The process table changed.
    Snapshot(Arc<Snapshot>),
    Ping {
        seq: u64,
    },
}

/// Descriptors kept for the directing child across its incarnations.
#[derive(Default)]
pub struct FdStore {
    entries: BTreeMap<String, OwnedFd>,
}

impl FdStore {
    /// Keep `fd` under `name`; refused beyond [`MAX_STORED`] entries or [`MAX_NAME`] bytes.
    pub fn put(&mut self, name: String, fd: OwnedFd) -> Result<(), String> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(format!("stored name of {} bytes", name.len()));
        }
        if self.entries.len() >= MAX_STORED && !self.entries.contains_key(&name) {
            return Err(format!("the fd store is full ({MAX_STORED} entries)"));
        }
        self.entries.insert(name, fd);
        Ok(())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    pub fn forget(&mut self, name: &str) {
        self.entries.remove(name);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry, by name (for the next image of the process that holds the store).
    pub fn into_entries(self) -> Vec<(String, OwnedFd)> {
        self.entries.into_iter().collect()
    }

    /// A store holding `entries` (from an earlier image of this process), unchecked.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, OwnedFd)>) -> FdStore {
        FdStore {
            entries: entries.into_iter().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Rules for what a directing child may ask.
#[derive(Debug, Clone, Default)]
pub struct ChildPolicy {
    /// Programs services may run (`argv[0]`); empty allows any.
    pub programs: Vec<PathBuf>,
}

impl ChildPolicy {
    fn check(&self, spec: &ServiceSpec) -> Result<(), SupervisorError> {
        let allowed = self.programs.is_empty()
            || spec
                .argv
                .first()
                .is_some_and(|p| self.programs.iter().any(|a| a.as_os_str() == p));
        if allowed {
            Ok(())
        } else {
            Err(SupervisorError::Refused(format!(
                "{} may not run {:?}",
                spec.name,
                spec.argv.first()
            )))
        }
    }
}

/// How serving a child ended.
#[derive(Debug)]
pub enum ChildEnd {
    /// The link closed: the child is gone (or closed it, which means the same).
    Gone,
    /// The child sent something that is not of the protocol.
    Misbehaved(String),
    /// No answer to pings for the deadline.
    Hung,
    /// The child asked for everything to stop.
    Exit(u8),
    /// `stop` fired.
    Stopped,
}

/// What serves a directing child, whichever incarnation.
pub struct ChildService<'a> {
    /// Executes its calls.
    pub sup: &'a SupervisorHandle,
    /// What it may ask.
    pub policy: &'a ChildPolicy,
    /// Receives its notifications for the service manager above us.
    pub upward: &'a UpwardNotifier,
    /// A child that answers no ping for this long is hung.
    pub hang_after: Duration,
    /// Where its re-execution requests go, if the parent offers that.
    pub reexec: Option<&'a mpsc::UnboundedSender<ReexecRequest>>,
    /// Which of its stored descriptors also go to the service manager's store through
    /// `upward` (kept across restarts of the whole service), by name.
    pub keep_upward: fn(&str) -> bool,
}

/// A directing child's request that the parent re-execute itself: `reply` says whether it
/// begins (the child is stopped in the course of it) or why not.
pub struct ReexecRequest {
    pub reply: oneshot::Sender<Result<(), String>>,
}

/// Serve one incarnation of a directing child on `link`: welcome it with `store`, execute
/// its calls (several at once), keep its descriptors, pass its notifications upward, push
/// every new process table, and ping it; one that does not answer in time is hung.
pub async fn serve_child(
    link: Link,
    incarnation: u32,
    service: &ChildService<'_>,
    store: &mut FdStore,
    stop: CancellationToken,
) -> ChildEnd {
    let ChildService {
        sup,
        policy,
        upward,
        hang_after,
        reexec,
        keep_upward,
    } = *service;
    let link = Arc::new(link);
    let welcome = ToChild::Welcome {
        incarnation,
        notify_socket: sup.notify_socket().to_owned(),
        stored: store.len(),
    };
    if link.send(&welcome, &[]).await.is_err() {
        return ChildEnd::Gone;
    }
    for (name, fd) in &store.entries {
        let msg = ToChild::Stored { name: name.clone() };
        if link.send(&msg, &[fd.as_raw_fd()]).await.is_err() {
            return ChildEnd::Gone;
        }
    }
    let mut snapshots = sup.subscribe();
    let first = snapshots.borrow_and_update().clone();
    if link.send(&ToChild::Snapshot(first), &[]).await.is_err() {
        return ChildEnd::Gone;
    }
    // Everything we send goes through one writer, so that reading never waits on a child
    // that does not read: replies queue (bounded by the calls in flight), snapshots coalesce.
    let (out_tx, out_rx) = mpsc::unbounded_channel::<ToChild>();
    let mut writer = tokio::spawn(write_to_child(link.clone(), out_rx, snapshots));
    let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
    let mut seq = 0u64;
    let mut answered = Instant::now();
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let end = loop {
        tokio::select! {
            () = stop.cancelled() => break ChildEnd::Stopped,
            received = link.recv::<ToParent>() => {
                let (msg, mut fds) = match received {
                    Ok(Some(m)) => m,
                    Ok(None) => break ChildEnd::Gone,
                    // It closed its end with our messages (snapshots) still unread in it.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break ChildEnd::Gone,
                    Err(e) => break ChildEnd::Misbehaved(e.to_string()),
                };
                match msg {
                    ToParent::Call { id, call } => {
                        use std::sync::atomic::Ordering;
                        if in_flight.fetch_add(1, Ordering::Relaxed) >= MAX_IN_FLIGHT {
                            break ChildEnd::Misbehaved(format!("more than {MAX_IN_FLIGHT} calls in flight"));
                        }
                        let sup = sup.clone();
                        let out = out_tx.clone();
                        let policy = policy.clone();
                        let in_flight = in_flight.clone();
                        let reexec = reexec.cloned();
                        tokio::spawn(async move {
                            let result = match call {
                                Call::Reexec => request_reexec(reexec).await,
                                call => execute(&sup, &policy, call, fds).await,
                            };
                            in_flight.fetch_sub(1, Ordering::Relaxed);
                            let _ = out.send(ToChild::Reply { id, result });
                        });
                    }
                    ToParent::Store { name } => {
                        let Some(fd) = fds.pop().filter(|_| fds.is_empty()) else {
                            break ChildEnd::Misbehaved("store without exactly one descriptor".into());
                        };
                        if keep_upward(&name) {
                            upward.store_fd(&name, fd.as_fd());
                        }
                        if let Err(e) = store.put(name, fd) {
                            break ChildEnd::Misbehaved(e);
                        }
                    }
                    ToParent::Forget { name } => {
                        if keep_upward(&name) && store.contains(&name) {
                            upward.remove_stored_fd(&name);
                        }
                        store.forget(&name);
                    }
                    ToParent::Upward(note) => upward.send_upward(&note.bounded(MAX_STATUS)),
                    ToParent::Exit { code } => break ChildEnd::Exit(code),
                    ToParent::Pong { seq: s } => {
                        if s == seq {
                            answered = Instant::now();
                        }
                    }
                }
            }
            _ = ping.tick() => {
                if answered.elapsed() > hang_after {
                    break ChildEnd::Hung;
                }
                seq += 1;
                let _ = out_tx.send(ToChild::Ping { seq });
            }
        }
    };
    if matches!(end, ChildEnd::Stopped) {
        // The child lives on for a moment (it is stopped next): answers on their way, such
        // as a re-execution's go-ahead, still reach it. Calls that take longer finish on the
        // supervisor unanswered.
        drop(out_tx);
        let _ = tokio::time::timeout(FLUSH_ON_STOP, &mut writer).await;
    }
    writer.abort();
    end
}

/// Pass a re-execution request to the parent's owner and wait for its answer.
async fn request_reexec(
    to: Option<mpsc::UnboundedSender<ReexecRequest>>,
) -> Result<Answer, SupervisorError> {
    let to = to.ok_or_else(|| SupervisorError::Refused("re-executing is not offered".into()))?;
    let (reply, answer) = oneshot::channel();
    to.send(ReexecRequest { reply })
        .map_err(|_| SupervisorError::Gone)?;
    match answer.await {
        Ok(Ok(())) => Ok(Answer::Done),
        Ok(Err(why)) => Err(SupervisorError::Refused(why)),
        Err(_) => Err(SupervisorError::Gone),
    }
}

/// How long answers still on their way may take to reach a child when serving it stops.
const FLUSH_ON_STOP: Duration = Duration::from_secs(1);

/// The most supervisor calls a child may have waiting at once.
const MAX_IN_FLIGHT: usize = 4096;

/// Send queued messages and every new process table to the child, until the link fails.
async fn write_to_child(
    link: Arc<Link>,
    mut out: mpsc::UnboundedReceiver<ToChild>,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
) {
    loop {
        let msg = tokio::select! {
            msg = out.recv() => match msg {
                Some(msg) => msg,
                // Serving stops, and every answer was sent.
                None => return,
            },
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return;
                }
                ToChild::Snapshot(snapshots.borrow_and_update().clone())
            }
        };
        if link.send(&msg, &[]).await.is_err() {
            return;
        }
    }
}

async fn execute(
    sup: &SupervisorHandle,
    policy: &ChildPolicy,
    call: Call,
    fds: Vec<OwnedFd>,
) -> Result<Answer, SupervisorError> {
    match call {
        Call::Add { spec, fds: numbers } => {
            policy.check(&spec)?;
            if numbers.len() != fds.len() {
                return Err(SupervisorError::Refused(
                    "descriptor count does not match".into(),
                ));
            }
            sup.add_handing(*spec, fds.into_iter().zip(numbers).collect())
                .await
                .map(|()| Answer::Done)
        }
        Call::Start { name } => sup.start(&name).await.map(|p| Answer::Pid(p.as_raw())),
        Call::Stop { name } => sup.stop(&name).await.map(Answer::Down),
        Call::Restart { name } => sup.restart(&name).await.map(|p| Answer::Pid(p.as_raw())),
        Call::Remove { name } => sup.remove(&name).await.map(Answer::Down),
        Call::Run { spec } => {
            policy.check(&spec)?;
            sup.run(*spec).await.map(Answer::Exited)
        }
        Call::Drain => sup.drain().await.map(|()| Answer::Done),
        Call::Reexec => Err(SupervisorError::Refused(
            "re-executing is not offered".into(),
        )),
        Call::Kill { name, mut reason } => {
            truncate_utf8(&mut reason, MAX_STATUS);
            sup.kill(&name, &reason).await.map(|()| Answer::Done)
        }
        Call::Tail { name } => sup.output_tail(&name).await.map(|lines| {
            Answer::Tail(
                lines
                    .into_iter()
                    .map(|mut l| {
                        truncate_utf8(&mut l, MAX_TAIL_LINE);
                        l
                    })
                    .collect(),
            )
        }),
    }
}

/// Cut `s` to at most `max` bytes on a character boundary.
pub(crate) fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

/// The directing child's side of the link.
pub struct Parent {
    /// Commands the supervisor in the parent.
    pub handle: SupervisorHandle,
    /// Which incarnation we are (1 for the first).
    pub incarnation: u32,
    /// Descriptors the last incarnation stored, by name.
    pub stored: Vec<(String, OwnedFd)>,
    /// Notifications for the service manager above the parent.
    pub upward: UpwardNotifier,
    /// Fires when the link is gone (the parent died or closed it).
    pub gone: CancellationToken,
    link: Arc<Link>,
    /// Dropping the parent closes the link (the proxy task lets go of it).
    _close: tokio_util::sync::DropGuard,
}

/// How long the child waits for its welcome.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(30);

impl Parent {
    /// Read the welcome on `link` and start serving calls.
    pub async fn connect(link: Link) -> io::Result<Parent> {
        let link = Arc::new(link);
        let welcome = tokio::time::timeout(WELCOME_TIMEOUT, async {
            let Some((
                ToChild::Welcome {
                    incarnation,
                    notify_socket,
                    stored,
                },
                _,
            )) = link.recv::<ToChild>().await?
            else {
                return Err(io::Error::other("no welcome from the supervisor"));
            };
            let mut kept = Vec::with_capacity(stored.min(MAX_STORED));
            for _ in 0..stored {
                match link.recv::<ToChild>().await? {
                    Some((ToChild::Stored { name }, mut fds)) if fds.len() == 1 => {
                        if let Some(fd) = fds.pop() {
                            kept.push((name, fd));
                        }
                    }
                    _ => return Err(io::Error::other("expected a stored descriptor")),
                }
            }
            let Some((ToChild::Snapshot(first), _)) = link.recv::<ToChild>().await? else {
                return Err(io::Error::other("expected the process table"));
            };
            Ok((incarnation, notify_socket, kept, first))
        })
        .await
        .map_err(|_| io::Error::other("no welcome from the supervisor in time"))??;
        let (incarnation, notify_socket, stored, first) = welcome;
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let (snapshot_tx, snapshot_rx) = watch::channel(first);
        let (upward_tx, upward_rx) = mpsc::unbounded_channel();
        let gone = CancellationToken::new();
        let close = CancellationToken::new();
        tokio::spawn(proxy(
            link.clone(),
            commands_rx,
            upward_rx,
            snapshot_tx,
            gone.clone(),
            close.clone(),
        ));
        Ok(Parent {
            handle: SupervisorHandle {
                commands: commands_tx,
                snapshot: snapshot_rx,
                notify_socket,
            },
            incarnation,
            stored,
            upward: UpwardNotifier::forwarding(upward_tx),
            gone,
            link,
            _close: close.drop_guard(),
        })
    }

    /// Keep `fd` under `name` in the parent for later incarnations.
    pub async fn store(&self, name: &str, fd: &impl AsRawFd) -> io::Result<()> {
        let msg = ToParent::Store {
            name: name.to_owned(),
        };
        self.link.send(&msg, &[fd.as_raw_fd()]).await
    }

    /// Drop what is kept under `name`.
    pub async fn forget(&self, name: &str) -> io::Result<()> {
        let msg = ToParent::Forget {
            name: name.to_owned(),
        };
        self.link.send(&msg, &[]).await
    }

    /// Ask the parent to stop everything and exit with `code`.
    pub async fn exit(&self, code: u8) -> io::Result<()> {
        self.link.send(&ToParent::Exit { code }, &[]).await
    }
}

/// A call waiting for its answer, typed as its caller expects it.
enum Pending {
    Done(oneshot::Sender<Result<(), SupervisorError>>),
    Pid(oneshot::Sender<Result<nix::unistd::Pid, SupervisorError>>),
    Down(oneshot::Sender<Result<Option<ExitStatus>, SupervisorError>>),
    Exited(oneshot::Sender<Result<ExitStatus, SupervisorError>>),
    Tail(oneshot::Sender<Result<Vec<String>, SupervisorError>>),
}

impl Pending {
    fn answer(self, result: Result<Answer, SupervisorError>) {
        let mismatch = || SupervisorError::Refused("answer of the wrong kind".into());
        match self {
            Pending::Done(tx) => {
                let _ = tx.send(result.and_then(|a| match a {
                    Answer::Done => Ok(()),
                    _ => Err(mismatch()),
                }));
            }
            Pending::Pid(tx) => {
                let _ = tx.send(result.and_then(|a| match a {
                    Answer::Pid(p) => Ok(nix::unistd::Pid::from_raw(p)),
                    _ => Err(mismatch()),
                }));
            }
            Pending::Down(tx) => {
                let _ = tx.send(result.and_then(|a| match a {
                    Answer::Down(s) => Ok(s),
                    _ => Err(mismatch()),
                }));
            }
            Pending::Exited(tx) => {
                let _ = tx.send(result.and_then(|a| match a {
                    Answer::Exited(s) => Ok(s),
                    _ => Err(mismatch()),
                }));
            }
            Pending::Tail(tx) => {
                let _ = tx.send(result.and_then(|a| match a {
                    Answer::Tail(t) => Ok(t),
                    _ => Err(mismatch()),
                }));
            }
        }
    }
}

/// Turn handle commands into calls on the link and answers back into replies; mirror the
/// parent's process table; answer pings. Reading and writing are separate tasks, so that a
/// parent busy writing never waits on us writing. When the link is gone, what waits fails.
async fn proxy(
    link: Arc<Link>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut upward: mpsc::UnboundedReceiver<Upward>,
    snapshot: watch::Sender<Arc<Snapshot>>,
    gone: CancellationToken,
    close: CancellationToken,
) {
    let pending: Arc<std::sync::Mutex<HashMap<u64, Pending>>> = Default::default();
    let (pong_tx, mut pong_rx) = mpsc::unbounded_channel::<u64>();
    let reader = {
        let link = link.clone();
        let pending = pending.clone();
        async move {
            loop {
                match link.recv::<ToChild>().await {
                    Ok(Some((ToChild::Reply { id, result }, _))) => {
                        let waiter = lock(&pending).remove(&id);
                        if let Some(waiter) = waiter {
                            waiter.answer(result);
                        }
                    }
                    Ok(Some((ToChild::Snapshot(s), _))) => {
                        snapshot.send_replace(s);
                    }
                    Ok(Some((ToChild::Ping { seq }, _))) => {
                        let _ = pong_tx.send(seq);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return,
                }
            }
        }
    };
    let writer = async {
        let mut next_id = 0u64;
        loop {
            // `owned` keeps descriptors handed to us open until the parent has its copies.
            let (msg, fds, owned) = tokio::select! {
                Some(seq) = pong_rx.recv() => (ToParent::Pong { seq }, Vec::new(), Vec::new()),
                Some(note) = upward.recv() => (ToParent::Upward(note), Vec::new(), Vec::new()),
                Some(command) = commands.recv() => {
                    next_id += 1;
                    let id = next_id;
                    let Some((call, fds, waiter, owned)) = to_call(command) else { continue };
                    lock(&pending).insert(id, waiter);
                    (ToParent::Call { id, call }, fds, owned)
                }
                else => return,
            };
            let sent = link.send(&msg, &fds).await;
            drop(owned);
            if let Err(e) = sent {
                if let ToParent::Call { id, .. } = msg {
                    if let Some(waiter) = lock(&pending).remove(&id) {
                        waiter.answer(Err(SupervisorError::Refused(e.to_string())));
                    }
                }
            }
        }
    };
    tokio::select! {
        () = reader => {}
        () = writer => {}
        () = close.cancelled() => {}
    }
    let waiting: Vec<Pending> = lock(&pending).drain().map(|(_, w)| w).collect();
    for waiter in waiting {
        waiter.answer(Err(SupervisorError::Gone));
    }
    gone.cancel();
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A handle command as a call: the call, the descriptors to attach, who waits for the answer,
/// and descriptors to keep open until the call is sent. Commands only the parent may give
/// (shutdown, kill all) are answered here and give `None`.
fn to_call(command: Command) -> Option<(Call, Vec<RawFd>, Pending, Vec<OwnedFd>)> {
    Some(match command {
        Command::Add {
            spec,
            fds,
            owned,
            reply,
        } => {
            let numbers = fds.iter().map(|p: &FdPass| p.child).collect();
            let ours = fds.iter().map(|p| p.ours).collect();
            (
                Call::Add {
                    spec: Box::new(spec),
                    fds: numbers,
                },
                ours,
                Pending::Done(reply),
                owned,
            )
        }
        Command::Start { name, reply } => {
            (Call::Start { name }, vec![], Pending::Pid(reply), vec![])
        }
        Command::Stop { name, reply } => {
            (Call::Stop { name }, vec![], Pending::Down(reply), vec![])
        }
        Command::Restart { name, reply } => {
            (Call::Restart { name }, vec![], Pending::Pid(reply), vec![])
        }
        Command::Remove { name, reply } => {
            (Call::Remove { name }, vec![], Pending::Down(reply), vec![])
        }
        Command::Run { spec, reply } => (
            Call::Run {
                spec: Box::new(spec),
            },
            vec![],
            Pending::Exited(reply),
            vec![],
        ),
        Command::Tail { name, reply } => {
            (Call::Tail { name }, vec![], Pending::Tail(reply), vec![])
        }
        Command::Shutdown { reply } => {
            let _ = reply.send(Default::default());
            return None;
        }
        Command::Drain { reply } => (Call::Drain, vec![], Pending::Done(reply), vec![]),
        Command::Kill {
            name,
            reason,
            reply,
        } => (
            Call::Kill { name, reason },
            vec![],
            Pending::Done(reply),
            vec![],
        ),
        Command::Reexec { reply } => (Call::Reexec, vec![], Pending::Done(reply), vec![]),
        Command::KillAll => return None,
        Command::HandOver { reply } => {
            let _ = reply.send(Err(SupervisorError::Refused(
                "only the supervisor's own process hands it over".into(),
            )));
            return None;
        }
    })
}
