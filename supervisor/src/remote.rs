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
//!
//! Every message the parent sends fits what the link carries: the link's buffers are sized
//! for [`MAX_MESSAGE`] when it is made, free text is cut where it is received
//! ([`crate::text`]), and a process table of any size goes in parts of at most
//! [`TABLE_PART`] bytes. A message that still cannot be sent ends serving that incarnation
//! with [`ChildEnd::LinkFailed`], which says why.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::call::{Answer, Call, Reply, SupervisorError};
use crate::command_line::CommandLine;
use crate::os;
use crate::runner::{Command, SupervisorHandle};
use crate::snapshot::{ProcessSnapshot, Snapshot};
use crate::spec::{Credentials, KeptCapabilities, ServiceSpec};
use crate::upward::{Upward, UpwardNotifier};

/// Largest message on the link, either way.
pub const MAX_MESSAGE: usize = 256 * 1024;
/// The most entries the fd store keeps.
pub const MAX_STORED: usize = 8192;
/// The longest name of a stored descriptor.
pub const MAX_NAME: usize = 256;
/// The longest status text passed upward (and kept in snapshots).
pub use crate::text::MAX_STATUS;
/// The most bytes of processes one message of a process table carries: far below what any
/// link carries (the default send buffer takes packets of 212,960 bytes), so a table of any
/// size goes over in parts ([`ToChild::SnapshotPart`]).
pub const TABLE_PART: usize = 64 * 1024;
/// What a message of a table takes beside its processes (the envelope and the table's flags),
/// at most.
const TABLE_ENVELOPE: usize = 256;
/// The most processes a table assembled from parts may have.
const MAX_TABLE_PROCESSES: usize = 1 << 16;
/// How often the parent asks the child whether it is alive.
pub const PING_INTERVAL: Duration = Duration::from_secs(5);

/// One end of a link.
pub struct Link {
    /// A `SOCK_SEQPACKET` socket; tokio's stream type only provides readiness, every read and
    /// write is one `recvmsg`/`sendmsg` of a whole packet.
    socket: tokio::net::UnixStream,
    /// The longest message this end can send: [`MAX_MESSAGE`], or less when the kernel
    /// would not give the send buffer that takes it. Checked before every send, so that an
    /// oversize message is an error that says so, not an `EMSGSIZE`.
    capacity: usize,
    /// The longest message received so far, in bytes (for diagnostics and measurements).
    largest_received: AtomicUsize,
}

impl Link {
    /// A new link: our end, and the child's end to hand it (at a known descriptor number).
    /// Both ends' buffers are sized for [`MAX_MESSAGE`] here, by the process that may force
    /// them past the system's default limits.
    pub fn pair() -> io::Result<(Link, OwnedFd)> {
        let (ours, theirs) = os::seqpacket_pair()?;
        for end in [&ours, &theirs] {
            let capacity = os::size_packet_buffers(end.as_fd(), MAX_MESSAGE)?;
            if capacity < MAX_MESSAGE {
                tracing::debug!(
                    capacity,
                    "the link carries messages of {capacity} bytes at most (net.core.wmem_max)"
                );
            }
        }
        Ok((Link::from_fd(ours)?, theirs))
    }

    /// Wrap an inherited end (it is made non-blocking and close-on-exec). Its buffers stay as
    /// the process that made the link sized them.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Link> {
        os::set_nonblocking(&fd)?;
        os::set_cloexec(&fd)?;
        let capacity = os::packet_capacity(fd.as_fd())?.min(MAX_MESSAGE);
        let socket = tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))?;
        Ok(Link {
            socket,
            capacity,
            largest_received: AtomicUsize::new(0),
        })
    }

    /// The longest message this end can send.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The longest message this end received so far, in bytes.
    pub fn largest_received(&self) -> usize {
        self.largest_received.load(Ordering::Relaxed)
    }

    /// Send one message with `fds` attached.
    pub async fn send<T: Serialize>(&self, msg: &T, fds: &[RawFd]) -> io::Result<()> {
        let data = serde_json::to_vec(msg).map_err(io::Error::other)?;
        if data.len() > self.capacity {
            return Err(io::Error::other(format!(
                "a message of {} bytes exceeds the link's {}",
                data.len(),
                self.capacity
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
        self.largest_received
            .fetch_max(packet.len, Ordering::Relaxed);
        let msg = serde_json::from_slice(&buf[..packet.len]).map_err(io::Error::other)?;
        Ok(Some((msg, packet.fds)))
    }
}

/// What the directing child asks of the supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToParent {
    /// A supervisor call; answered by [`ToChild::Reply`] with the same id. `Add` carries
    /// its descriptors attached, in the order of its numbers.
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
    /// The process table changed: this is the table, or, after [`ToChild::SnapshotPart`]s,
    /// the table's last processes and its flags.
    Snapshot(Arc<Snapshot>),
    /// The first processes of a table too large for one message; more parts and a
    /// [`ToChild::Snapshot`] with the rest follow.
    SnapshotPart(Vec<ProcessSnapshot>),
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
#[derive(Debug, Clone)]
pub struct ChildPolicy {
    /// Programs services may run (`argv[0]`); empty allows any.
    pub programs: Vec<PathBuf>,
    /// The user every service must run as: `None`, as we do (no switch of user).
    pub user: Option<Credentials>,
    /// The working directory services may have (or none); `None` allows any.
    pub cwd: Option<PathBuf>,
    /// What services' environments may hold; `None` allows anything.
    pub env: Option<EnvironmentPolicy>,
    /// The command lines services may have, each exactly of one of these shapes; `None`
    /// allows any arguments.
    pub command_lines: Option<Vec<CommandLine>>,
    /// The longest extension of the service manager's timeout (`EXTEND_TIMEOUT_USEC`)
    /// passed upward at once: a longer one is cut to it, so that a child cannot hold a
    /// start, reload or stop for an hour.
    pub max_extension: Duration,
}

/// The longest extension of the service manager's timeout a child's notification passes on
/// unless its policy says otherwise: five minutes, several times any one step a child asks
/// for, and an extension can be asked again as the step goes on.
pub const MAX_EXTENSION: Duration = Duration::from_secs(300);

/// The environment a service may have: what we pass on, unchanged, and a few more names.
#[derive(Debug, Clone, Default)]
pub struct EnvironmentPolicy {
    /// Variables passed on to every child, each with the value it must have.
    pub inherited: Vec<(OsString, OsString)>,
    /// Names of variables a spec may add with any value of at most 64 printable bytes.
    pub added: Vec<OsString>,
}

impl ChildPolicy {
    /// Services may run `programs` with any user, directory, environment and arguments our
    /// own user may (tests, fixtures).
    pub fn programs(programs: Vec<PathBuf>) -> ChildPolicy {
        ChildPolicy {
            programs,
            user: None,
            cwd: None,
            env: None,
            command_lines: None,
            max_extension: MAX_EXTENSION,
        }
    }

    /// Whether a manager may have `spec` run: its whole spec, not only its program, since a
    /// manager taken over by hostile input must not make the root run anything else, as
    /// anyone else, with other arguments, or with a preloaded library.
    pub fn check(&self, spec: &ServiceSpec) -> Result<(), SupervisorError> {
        // Both are in every process table from now on: bounded, so that tables fit the link.
        check_name(&spec.name)?;
        if spec.kind.len() > MAX_NAME {
            return Err(SupervisorError::Refused(format!(
                "a kind of {} bytes",
                spec.kind.len()
            )));
        }
        let refuse = |why: String| Err(SupervisorError::Refused(format!("{}: {why}", spec.name)));
        let program = spec.argv.first();
        let allowed = self.programs.is_empty()
            || program.is_some_and(|p| self.programs.iter().any(|a| a.as_os_str() == p));
        if !allowed {
            return refuse(format!("may not run {program:?}"));
        }
        if spec.user != self.user {
            return refuse(format!("may not run as {:?}", spec.user));
        }
        if spec.keep != KeptCapabilities::None {
            return refuse(format!("may not keep capabilities ({:?})", spec.keep));
        }
        if let (Some(cwd), Some(allowed)) = (&spec.cwd, &self.cwd) {
            if cwd != allowed {
                return refuse(format!("may not run in {}", cwd.display()));
            }
        }
        if let Some(env) = &self.env {
            for (key, value) in &spec.env {
                if !env.allows(key, value) {
                    return refuse(format!("may not set {key:?}"));
                }
            }
        }
        if let Some(shapes) = &self.command_lines {
            if !shapes.iter().any(|shape| shape.matches(&spec.argv)) {
                return refuse(format!(
                    "may not run the command line {}",
                    shown_command_line(&spec.argv)
                ));
            }
        }
        Ok(())
    }

    /// What of a child's notification goes upward: its status text one printable line of
    /// at most [`MAX_STATUS`] bytes, an extension of the timeout at most `max_extension`.
    pub fn passed_upward(&self, note: &Upward) -> Upward {
        match note.bounded(MAX_STATUS) {
            Upward::ExtendTimeout(by) => Upward::ExtendTimeout(by.min(self.max_extension)),
            bounded => bounded,
        }
    }
}

/// A refused command line for its error: quoted, at most [`MAX_SHOWN_ARGUMENTS`] arguments
/// of it, each one cut to a bounded printable line.
fn shown_command_line(argv: &[OsString]) -> String {
    let mut shown: Vec<String> = argv
        .iter()
        .take(MAX_SHOWN_ARGUMENTS)
        .map(|a| {
            format!(
                "{:?}",
                crate::text::one_line(&a.to_string_lossy(), MAX_NAME)
            )
        })
        .collect();
    if argv.len() > MAX_SHOWN_ARGUMENTS {
        shown.push(format!("and {} more", argv.len() - MAX_SHOWN_ARGUMENTS));
    }
    shown.join(" ")
}

/// The most arguments of a refused command line its error shows.
const MAX_SHOWN_ARGUMENTS: usize = 16;

impl EnvironmentPolicy {
    fn allows(&self, key: &OsString, value: &OsString) -> bool {
        self.inherited.iter().any(|(k, v)| k == key && v == value)
            || (self.added.contains(key)
                && value.len() <= 64
                && value
                    .as_encoded_bytes()
                    .iter()
                    .all(|b| b.is_ascii_graphic()))
    }
}

/// Refuse a service name longer than [`MAX_NAME`]: it would travel in every table and reply.
fn check_name(name: &str) -> Result<(), SupervisorError> {
    if name.len() > MAX_NAME {
        return Err(SupervisorError::Refused(format!(
            "a service name of {} bytes",
            name.len()
        )));
    }
    Ok(())
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
    /// What we had to send could not be sent (why): the child cannot follow the process
    /// table any more, and is to be replaced.
    LinkFailed(String),
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
    let link = Arc::new(link);
    let snapshots = match welcome(&link, incarnation, service.sup, store).await {
        Ok(snapshots) => snapshots,
        Err(end) => return end,
    };
    // Everything we send goes through one writer, so that reading never waits on a child
    // that does not read: replies queue (bounded by the calls in flight), snapshots coalesce.
    let (out_tx, out_rx) = mpsc::unbounded_channel::<ToChild>();
    let mut writer = tokio::spawn(write_to_child(link.clone(), out_rx, snapshots));
    // Set once the writer ended without an error (the supervisor is gone): nothing more to
    // send, and a finished task must not be polled again.
    let mut writer_ended = false;
    let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
    let mut session = Session {
        service,
        out: out_tx,
        in_flight: Arc::new(AtomicUsize::new(0)),
        seq: 0,
        answered: Instant::now(),
    };
    let end = loop {
        tokio::select! {
            () = stop.cancelled() => break ChildEnd::Stopped,
            written = &mut writer, if !writer_ended => match written {
                Ok(Ok(())) => writer_ended = true,
                Ok(Err(e)) => break unsent(e.error, e.what),
                Err(e) => break ChildEnd::LinkFailed(format!("the link's writer ended: {e}")),
            },
            received = link.recv::<ToParent>() => {
                let (msg, fds) = match received {
                    Ok(Some(m)) => m,
                    Ok(None) => break ChildEnd::Gone,
                    // It closed its end with our messages (snapshots) still unread in it.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break ChildEnd::Gone,
                    Err(e) => break ChildEnd::Misbehaved(e.to_string()),
                };
                if let Err(end) = session.on_message(msg, fds, store) {
                    break end;
                }
            }
            _ = ping.tick() => {
                if let Err(end) = session.ping() {
                    break end;
                }
            }
        }
    };
    if matches!(end, ChildEnd::Stopped) && !writer.is_finished() {
        // The child lives on for a moment (it is stopped next): answers on their way, such
        // as a re-execution's go-ahead, still reach it. Calls that take longer finish on the
        // supervisor unanswered.
        drop(session);
        let _ = tokio::time::timeout(FLUSH_ON_STOP, &mut writer).await;
    }
    writer.abort();
    end
}

/// Send the first messages of an incarnation: the welcome, the stored descriptors, the
/// process table. The table's receiver, the table marked as seen, follows it from there.
async fn welcome(
    link: &Link,
    incarnation: u32,
    sup: &SupervisorHandle,
    store: &FdStore,
) -> Result<watch::Receiver<Arc<Snapshot>>, ChildEnd> {
    let welcome = ToChild::Welcome {
        incarnation,
        notify_socket: sup.notify_socket().to_owned(),
        stored: store.len(),
    };
    link.send(&welcome, &[])
        .await
        .map_err(|e| unsent(e, "the welcome"))?;
    for (name, fd) in &store.entries {
        let msg = ToChild::Stored { name: name.clone() };
        link.send(&msg, &[fd.as_raw_fd()])
            .await
            .map_err(|e| unsent(e, "a stored descriptor"))?;
    }
    let mut snapshots = sup.subscribe();
    let first = snapshots.borrow_and_update().clone();
    send_table(link, &first)
        .await
        .map_err(|e| unsent(e, "the process table"))?;
    Ok(snapshots)
}

/// What serving one incarnation keeps between its messages.
struct Session<'s, 'a> {
    service: &'s ChildService<'a>,
    /// To the writer: replies and pings.
    out: mpsc::UnboundedSender<ToChild>,
    /// Calls executing now.
    in_flight: Arc<AtomicUsize>,
    /// The last ping sent.
    seq: u64,
    /// When the last ping was answered.
    answered: Instant,
}

impl Session<'_, '_> {
    /// Take one message of the child; an error ends serving.
    fn on_message(
        &mut self,
        msg: ToParent,
        mut fds: Vec<OwnedFd>,
        store: &mut FdStore,
    ) -> Result<(), ChildEnd> {
        let ChildService {
            upward,
            keep_upward,
            ..
        } = *self.service;
        match msg {
            ToParent::Call { id, call } => self.execute(id, call, fds)?,
            ToParent::Store { name } => {
                let Some(fd) = fds.pop().filter(|_| fds.is_empty()) else {
                    return Err(ChildEnd::Misbehaved(
                        "store without exactly one descriptor".into(),
                    ));
                };
                if keep_upward(&name) {
                    upward.store_fd(&name, fd.as_fd());
                }
                store.put(name, fd).map_err(ChildEnd::Misbehaved)?;
            }
            ToParent::Forget { name } => {
                if keep_upward(&name) && store.contains(&name) {
                    upward.remove_stored_fd(&name);
                }
                store.forget(&name);
            }
            ToParent::Upward(note) => upward.send_upward(&self.service.policy.passed_upward(&note)),
            ToParent::Exit { code } => return Err(ChildEnd::Exit(code)),
            ToParent::Pong { seq } => {
                if seq == self.seq {
                    self.answered = Instant::now();
                }
            }
        }
        Ok(())
    }

    /// Execute a call in a task of its own, its answer sent when it comes.
    fn execute(&self, id: u64, call: Call, fds: Vec<OwnedFd>) -> Result<(), ChildEnd> {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= MAX_IN_FLIGHT {
            return Err(ChildEnd::Misbehaved(format!(
                "more than {MAX_IN_FLIGHT} calls in flight"
            )));
        }
        let sup = self.service.sup.clone();
        let policy = self.service.policy.clone();
        let reexec = self.service.reexec.cloned();
        let out = self.out.clone();
        let in_flight = self.in_flight.clone();
        tokio::spawn(async move {
            let result = execute(&sup, &policy, reexec, call, fds).await;
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let _ = out.send(ToChild::Reply { id, result });
        });
        Ok(())
    }

    /// Ping the child, unless it left the last pings unanswered for too long.
    fn ping(&mut self) -> Result<(), ChildEnd> {
        if self.answered.elapsed() > self.service.hang_after {
            return Err(ChildEnd::Hung);
        }
        self.seq += 1;
        let _ = self.out.send(ToChild::Ping { seq: self.seq });
        Ok(())
    }
}

/// How serving ends when sending `what` failed with `error`: a child that is gone is gone;
/// anything else is a link that failed, and says why.
fn unsent(error: io::Error, what: &str) -> ChildEnd {
    match error.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => ChildEnd::Gone,
        _ => ChildEnd::LinkFailed(format!("cannot send {what}: {error}")),
    }
}

/// A send of the writer that failed.
struct WriteFailed {
    /// What it was sending, for the reason serving ends with.
    what: &'static str,
    /// Why it failed: a child that is gone, or a message the link cannot carry.
    error: io::Error,
}

/// Send `table`: in one message when it fits in a part, else in parts of [`TABLE_PART`]
/// bytes, or of what the link carries where that is less (`net.core.wmem_max` set low).
async fn send_table(link: &Link, table: &Arc<Snapshot>) -> io::Result<()> {
    let part = TABLE_PART.min(link.capacity().saturating_sub(TABLE_ENVELOPE));
    for msg in table_messages(table, part) {
        link.send(&msg, &[]).await?;
    }
    Ok(())
}

/// The messages that carry `table`: [`ToChild::SnapshotPart`]s of at most `part_bytes` bytes
/// of processes while the rest does not fit in one, then a [`ToChild::Snapshot`] of the rest
/// with the table's flags. A small table is one `Snapshot`, shared, not copied. A process
/// larger than `part_bytes` (none is: its free text is bounded) goes alone.
pub fn table_messages(table: &Arc<Snapshot>, part_bytes: usize) -> Vec<ToChild> {
    // The size of each process as JSON, and one byte for the comma that separates it.
    let sizes: Vec<usize> = table
        .processes
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(part_bytes, |json| json.len() + 1))
        .collect();
    if sizes.iter().sum::<usize>() <= part_bytes {
        return vec![ToChild::Snapshot(table.clone())];
    }
    let mut messages = Vec::new();
    let mut part = Vec::new();
    let mut bytes = 0;
    for (process, size) in table.processes.iter().zip(sizes) {
        if bytes + size > part_bytes && !part.is_empty() {
            messages.push(ToChild::SnapshotPart(std::mem::take(&mut part)));
            bytes = 0;
        }
        part.push(process.clone());
        bytes += size;
    }
    messages.push(ToChild::Snapshot(Arc::new(Snapshot {
        processes: part,
        shutting_down: table.shutting_down,
        draining: table.draining,
    })));
    messages
}

/// A process table arriving in parts ([`ToChild::SnapshotPart`], then
/// [`ToChild::Snapshot`]), on the receiving side.
#[derive(Default)]
pub struct TableAssembly {
    /// The processes of the parts received so far.
    first: Vec<ProcessSnapshot>,
}

impl TableAssembly {
    /// Take a part; a table of more than [`MAX_TABLE_PROCESSES`] is refused.
    pub fn part(&mut self, processes: Vec<ProcessSnapshot>) -> io::Result<()> {
        if self.first.len() + processes.len() > MAX_TABLE_PROCESSES {
            return Err(io::Error::other(format!(
                "a process table of more than {MAX_TABLE_PROCESSES} processes"
            )));
        }
        self.first.extend(processes);
        Ok(())
    }

    /// The whole table, given its last message.
    pub fn complete(&mut self, last: Arc<Snapshot>) -> Arc<Snapshot> {
        if self.first.is_empty() {
            return last;
        }
        let mut processes = std::mem::take(&mut self.first);
        processes.extend(last.processes.iter().cloned());
        Arc::new(Snapshot {
            processes,
            shutting_down: last.shutting_down,
            draining: last.draining,
        })
    }
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

/// Send queued messages and every new process table to the child, until serving stops or a
/// send fails (which ends serving: [`ChildEnd::LinkFailed`]).
async fn write_to_child(
    link: Arc<Link>,
    mut out: mpsc::UnboundedReceiver<ToChild>,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
) -> Result<(), WriteFailed> {
    loop {
        tokio::select! {
            msg = out.recv() => match msg {
                Some(msg) => link.send(&msg, &[]).await.map_err(|error| WriteFailed {
                    what: "an answer",
                    error,
                })?,
                // Serving stops, and every answer was sent.
                None => return Ok(()),
            },
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let table = snapshots.borrow_and_update().clone();
                send_table(&link, &table).await.map_err(|error| WriteFailed {
                    what: "the process table",
                    error,
                })?;
            }
        }
    }
}

/// Carry out a child's call on `sup`, once its policy admits it; a re-execution goes to
/// the parent's owner.
async fn execute(
    sup: &SupervisorHandle,
    policy: &ChildPolicy,
    reexec: Option<mpsc::UnboundedSender<ReexecRequest>>,
    call: Call,
    fds: Vec<OwnedFd>,
) -> Result<Answer, SupervisorError> {
    match admit(policy, call, fds)? {
        Call::Reexec => request_reexec(reexec).await,
        call => sup.forward(call).await,
    }
}

/// Check a child's call against `policy`, giving `Add` the descriptors attached to it
/// (descriptors attached to any other call are closed).
fn admit(policy: &ChildPolicy, call: Call, fds: Vec<OwnedFd>) -> Result<Call, SupervisorError> {
    match call {
        Call::Add {
            spec, fds: numbers, ..
        } => {
            policy.check(&spec)?;
            if numbers.len() != fds.len() {
                return Err(SupervisorError::Refused(
                    "descriptor count does not match".into(),
                ));
            }
            Ok(Call::Add {
                spec,
                fds: numbers,
                handed: fds,
            })
        }
        Call::Run { spec } => {
            policy.check(&spec)?;
            Ok(Call::Run { spec })
        }
        // The supervisor cuts a kill's reason where it receives it; a tail's lines were cut
        // as they were read (`output::TAIL_LINE`), so a tail fits a message.
        Call::Start { ref name }
        | Call::Stop { ref name }
        | Call::Restart { ref name }
        | Call::Remove { ref name }
        | Call::Tail { ref name }
        | Call::Kill { ref name, .. } => {
            check_name(name)?;
            Ok(call)
        }
        Call::Drain | Call::Reexec => Ok(call),
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
            let mut table = TableAssembly::default();
            let first = loop {
                match link.recv::<ToChild>().await? {
                    Some((ToChild::SnapshotPart(part), _)) => table.part(part)?,
                    Some((ToChild::Snapshot(last), _)) => break table.complete(last),
                    _ => return Err(io::Error::other("expected the process table")),
                }
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

    /// The longest message received from the parent so far, in bytes.
    pub fn largest_message(&self) -> usize {
        self.link.largest_received()
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
    let pending: Arc<std::sync::Mutex<HashMap<u64, Reply>>> = Default::default();
    let (pong_tx, mut pong_rx) = mpsc::unbounded_channel::<u64>();
    let reader = {
        let link = link.clone();
        let pending = pending.clone();
        async move {
            let mut table = TableAssembly::default();
            loop {
                match link.recv::<ToChild>().await {
                    Ok(Some((ToChild::Reply { id, result }, _))) => {
                        let waiter = lock(&pending).remove(&id);
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(result);
                        }
                    }
                    Ok(Some((ToChild::Snapshot(last), _))) => {
                        snapshot.send_replace(table.complete(last));
                    }
                    Ok(Some((ToChild::SnapshotPart(part), _))) => {
                        if let Err(e) = table.part(part) {
                            tracing::error!("the link to the supervisor failed: {e}");
                            return;
                        }
                    }
                    Ok(Some((ToChild::Ping { seq }, _))) => {
                        let _ = pong_tx.send(seq);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(e) => {
                        tracing::error!("the link to the supervisor failed: {e}");
                        return;
                    }
                }
            }
        }
    };
    let writer = async {
        let mut next_id = 0u64;
        loop {
            // A call keeps the descriptors handed to us open until the parent has its copies.
            let msg = tokio::select! {
                Some(seq) = pong_rx.recv() => ToParent::Pong { seq },
                Some(note) = upward.recv() => ToParent::Upward(note),
                Some(command) = commands.recv() => {
                    let Some((call, reply)) = remote_call(command) else { continue };
                    next_id += 1;
                    lock(&pending).insert(next_id, reply);
                    ToParent::Call { id: next_id, call }
                }
                else => return,
            };
            let (id, fds) = match &msg {
                ToParent::Call { id, call } => (Some(*id), attached(call)),
                _ => (None, Vec::new()),
            };
            let sent = link.send(&msg, &fds).await;
            drop(msg);
            if let (Err(e), Some(id)) = (sent, id) {
                if let Some(waiter) = lock(&pending).remove(&id) {
                    let _ = waiter.send(Err(SupervisorError::Refused(e.to_string())));
                }
            }
        }
    };
    tokio::select! {
        () = reader => {}
        () = writer => {}
        () = close.cancelled() => {}
    }
    let waiting: Vec<Reply> = lock(&pending).drain().map(|(_, w)| w).collect();
    for waiter in waiting {
        let _ = waiter.send(Err(SupervisorError::Gone));
    }
    gone.cancel();
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A handle's command as a call to send, with where its answer goes. Commands only the
/// supervisor's own process may give (shutdown, kill all, hand over) are answered here and
/// give `None`.
fn remote_call(command: Command) -> Option<(Call, Reply)> {
    match command {
        Command::Call { call, reply } => return Some((call, reply)),
        Command::Shutdown { reply } => {
            let _ = reply.send(Default::default());
        }
        Command::KillAll => {}
        Command::HandOver { reply } => {
            let _ = reply.send(Err(SupervisorError::Refused(
                "only the supervisor's own process hands it over".into(),
            )));
        }
    }
    None
}

/// The descriptors to attach to `call`: what `Add` hands over, or, when the caller keeps its
/// own, those at the numbers it names.
fn attached(call: &Call) -> Vec<RawFd> {
    match call {
        Call::Add { fds, handed, .. } if handed.is_empty() => fds.clone(),
        Call::Add { handed, .. } => handed.iter().map(AsRawFd::as_raw_fd).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command_line::Arg;
    use crate::snapshot::ProcessState;
    use crate::spec::ExitStatus;
    use crate::text::{one_line, MAX_STATUS};

    #[test]
    fn the_child_policy_checks_the_whole_spec() {
        let workers = Credentials { uid: 995, gid: 995 };
        let policy = ChildPolicy {
            programs: vec![PathBuf::from("/usr/sbin/kresd")],
            user: Some(workers),
            cwd: Some(PathBuf::from("/run/knot-resolver")),
            env: Some(EnvironmentPolicy {
                inherited: vec![("PATH".into(), "/usr/bin".into())],
                added: vec!["SYSTEMD_INSTANCE".into()],
            }),
            command_lines: Some(vec![CommandLine::program("/usr/sbin/kresd")
                .flag("-c")
                .then(Arg::FileIn(PathBuf::from("/run/knot-resolver")))
                .flag("-c")
                .flag("-")
                .flag("-n")]),
            max_extension: MAX_EXTENSION,
        };
        let worker = || {
            let mut spec = ServiceSpec::new(
                "kresd0",
                "kresd",
                vec![
                    "/usr/sbin/kresd".into(),
                    "-c".into(),
                    "/run/knot-resolver/kresd0.conf".into(),
                    "-c".into(),
                    "-".into(),
                    "-n".into(),
                ],
            );
            spec.user = Some(workers);
            spec.cwd = Some(PathBuf::from("/run/knot-resolver"));
            spec.env = vec![
                ("PATH".into(), "/usr/bin".into()),
                ("SYSTEMD_INSTANCE".into(), "0".into()),
            ];
            spec
        };
        policy.check(&worker()).expect("what the manager asks for");
        type Edit = fn(&mut ServiceSpec);
        let refused: &[(&str, Edit)] = &[
            ("another program", |s| s.argv[0] = "/bin/sh".into()),
            ("root", |s| s.user = Some(Credentials { uid: 0, gid: 0 })),
            ("our own user", |s| s.user = None),
            ("capabilities", |s| {
                s.keep = KeptCapabilities::BindServicePorts;
            }),
            ("another directory", |s| s.cwd = Some(PathBuf::from("/"))),
            ("a preloaded library", |s| {
                s.env.push(("LD_PRELOAD".into(), "/tmp/evil.so".into()));
            }),
            ("an inherited variable changed", |s| {
                s.env[0].1 = "/tmp/evil".into();
            }),
            ("an added variable of control bytes", |s| {
                s.env[1].1 = "0\n1".into();
            }),
            ("a configuration outside the rundir", |s| {
                s.argv[2] = "/tmp/evil.lua".into();
            }),
            ("a configuration climbing out", |s| {
                s.argv[2] = "/run/knot-resolver/../../tmp/evil.lua".into();
            }),
            ("a relative configuration", |s| {
                s.argv[4] = "evil.lua".into()
            }),
            ("a relative configuration climbing out", |s| {
                s.argv[4] = "../evil.lua".into();
            }),
            ("the configuration joined to its flag (-cX)", |s| {
                s.argv.splice(1..3, ["-c/tmp/evil.lua".into()]);
            }),
            ("the configuration as --config=X", |s| {
                s.argv.splice(1..3, ["--config=/tmp/evil.lua".into()]);
            }),
            ("a positional rundir", |s| s.argv.push("/tmp".into())),
            ("an extra flag", |s| s.argv.insert(5, "-v".into())),
            ("no arguments", |s| s.argv.truncate(1)),
        ];
        for (what, edit) in refused {
            let mut spec = worker();
            edit(&mut spec);
            assert!(
                matches!(policy.check(&spec), Err(SupervisorError::Refused(_))),
                "{what} was allowed"
            );
        }
        // Without a working directory it runs in ours: allowed, as the cache collector does.
        let mut spec = worker();
        spec.cwd = None;
        policy.check(&spec).expect("no directory");
        // An extension of the timeout passes upward up to the policy's bound, and no further.
        let rows = [
            (Duration::from_secs(30), Duration::from_secs(30)),
            (MAX_EXTENSION, MAX_EXTENSION),
            (Duration::from_secs(3600), MAX_EXTENSION),
            (Duration::MAX, MAX_EXTENSION),
        ];
        for (asked, passed) in rows {
            assert_eq!(
                policy.passed_upward(&Upward::ExtendTimeout(asked)),
                Upward::ExtendTimeout(passed),
                "{asked:?}"
            );
        }
        // The permissive policy of tests checks the program and the user only.
        let loose = ChildPolicy::programs(vec![PathBuf::from("/usr/sbin/kresd")]);
        let mut spec = worker();
        spec.user = None;
        spec.env.push(("ANYTHING".into(), "goes".into()));
        loose.check(&spec).expect("loose");
    }

    /// A process whose every free-text field is as long as the supervisor keeps it, of the
    /// characters that cost the most JSON.
    fn widest_process(i: usize) -> ProcessSnapshot {
        let worst: String = "\"\\".repeat(MAX_STATUS);
        ProcessSnapshot {
            name: format!("{i:0>width$}", width = MAX_NAME),
            kind: "k".repeat(MAX_NAME),
            pid: Some(i32::MAX),
            state: ProcessState::Failed,
            since: Some(std::time::SystemTime::now()),
            ready_at: Some(std::time::SystemTime::now()),
            restarts: u32::MAX,
            last_exit: Some(ExitStatus::Code(255)),
            failure: Some("spawn failed: ".repeat(20)),
            status_text: Some(one_line(&worst, MAX_STATUS)),
            kill_reason: Some(one_line(&worst, MAX_STATUS)),
            takes_queries: Some(true),
            killed_pid: Some(i32::MAX),
        }
    }

    fn table(processes: usize) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            processes: (0..processes).map(widest_process).collect(),
            shutting_down: false,
            draining: true,
        })
    }

    /// Every message of `table` is within a part's bytes (plus its envelope), and the parts
    /// assemble into the table.
    fn check(table: &Arc<Snapshot>, expected_messages: usize) {
        let messages = table_messages(table, TABLE_PART);
        assert_eq!(messages.len(), expected_messages);
        let mut assembly = TableAssembly::default();
        let mut assembled = None;
        for (i, msg) in messages.into_iter().enumerate() {
            let json = serde_json::to_vec(&msg).expect("serialises");
            assert!(
                json.len() <= TABLE_PART + TABLE_ENVELOPE,
                "{} bytes",
                json.len()
            );
            // As the link carries it.
            match serde_json::from_slice::<ToChild>(&json).expect("parses") {
                ToChild::SnapshotPart(part) => {
                    assert!(i + 1 < expected_messages, "a part last");
                    assembly.part(part).expect("a part");
                }
                ToChild::Snapshot(last) => {
                    assert_eq!(i + 1, expected_messages, "the table's end first");
                    assembled = Some(assembly.complete(last));
                }
                other => panic!("not a table: {other:?}"),
            }
        }
        let assembled = assembled.expect("a whole table");
        assert_eq!(assembled.processes.len(), table.processes.len());
        assert_eq!(assembled.draining, table.draining);
        // Times travel as float seconds; everything else exactly.
        for (got, sent) in assembled.processes.iter().zip(&table.processes) {
            assert_eq!(got.name, sent.name);
            assert_eq!(got.status_text, sent.status_text);
            assert_eq!(got.kill_reason, sent.kill_reason);
        }
    }

    #[test]
    fn tables_of_any_size_go_in_parts_that_fit_the_link() {
        let widest = serde_json::to_vec(&widest_process(0)).expect("json").len();
        let per_part = TABLE_PART / (widest + 1);
        eprintln!("the widest process takes {widest} bytes: {per_part} to a part");
        assert!(per_part >= 16, "{widest} bytes");
        check(&table(0), 1);
        check(&table(1), 1);
        check(&table(per_part), 1);
        check(&table(per_part + 1), 2);
        check(&table(256), 256usize.div_ceil(per_part));
        check(&table(4096), 4096usize.div_ceil(per_part));
    }

    #[test]
    fn an_assembly_refuses_a_table_without_end() {
        let mut assembly = TableAssembly::default();
        let part: Vec<ProcessSnapshot> = (0..1000).map(widest_process).collect();
        for _ in 0..MAX_TABLE_PROCESSES / 1000 {
            assembly.part(part.clone()).expect("within bounds");
        }
        assert!(assembly.part(part).is_err());
    }

    #[tokio::test]
    async fn a_link_carries_its_largest_message_and_refuses_a_larger_one() {
        let (ours, theirs) = Link::pair().expect("a link");
        let theirs = Link::from_fd(theirs).expect("their end");
        eprintln!(
            "link capacity: {} bytes this way, {} the other",
            ours.capacity(),
            theirs.capacity()
        );
        // As root (the daemon's root process) the buffers are forced; without privileges the
        // default limits still give twice 212,992 bytes.
        assert_eq!(ours.capacity(), MAX_MESSAGE);
        assert_eq!(theirs.capacity(), MAX_MESSAGE);
        // The largest message: a string that makes the JSON exactly MAX_MESSAGE bytes.
        let largest = "x".repeat(MAX_MESSAGE - 2);
        let (sent, received) = tokio::join!(ours.send(&largest, &[]), theirs.recv::<String>());
        sent.expect("the largest message is sent");
        let (got, _) = received.expect("received").expect("not the end");
        assert_eq!(got.len(), largest.len());
        assert_eq!(theirs.largest_received(), MAX_MESSAGE);
        let err = ours
            .send(&"x".repeat(MAX_MESSAGE), &[])
            .await
            .expect_err("too large");
        assert!(err.to_string().contains("exceeds the link's"), "{err}");
    }
}
