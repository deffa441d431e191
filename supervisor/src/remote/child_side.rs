//! The directing child's side of a link: a [`SupervisorHandle`] whose calls travel to the
//! parent, the parent's process table mirrored, pings answered.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Link, TableAssembly, ToChild, ToParent, MAX_STORED};
use crate::call::{Call, Reply, SupervisorError};
use crate::runner::{Command, SupervisorHandle};
use crate::snapshot::Snapshot;
use crate::upward::{Upward, UpwardNotifier};

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
    /// The task carrying the link's messages.
    proxy: LinkTask,
    /// Dropping the parent closes the link (the proxy task lets go of it).
    _close: tokio_util::sync::DropGuard,
}

/// The task that carries a [`Parent`]'s link, as its owner holds it: the process that
/// connected stops it, and waits for it, once nothing calls the parent any more.
#[derive(Clone)]
pub struct LinkTask {
    tracker: TaskTracker,
    close: CancellationToken,
}

impl LinkTask {
    /// Close the link and wait for its task to end: calls still waiting are answered
    /// [`SupervisorError::Gone`], and [`Parent::gone`] fires.
    pub async fn stop(&self) {
        self.close.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
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
        let ends = Ends {
            commands: commands_rx,
            upward: upward_rx,
            snapshot: snapshot_tx,
        };
        let proxy_task = LinkTask {
            tracker: TaskTracker::new(),
            close: close.clone(),
        };
        proxy_task
            .tracker
            .spawn(proxy(link.clone(), ends, gone.clone(), close.clone()));
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
            proxy: proxy_task,
            _close: close.drop_guard(),
        })
    }

    /// The task carrying the link, for the owner to stop at its end ([`LinkTask::stop`]).
    pub fn link_task(&self) -> LinkTask {
        self.proxy.clone()
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

/// The proxy's ends of the handle's channels.
struct Ends {
    /// What the handle asks.
    commands: mpsc::UnboundedReceiver<Command>,
    /// Notifications for the service manager, passed up.
    upward: mpsc::UnboundedReceiver<Upward>,
    /// The parent's process table, mirrored.
    snapshot: watch::Sender<Arc<Snapshot>>,
}

/// Calls sent and not yet answered, by id.
type Pending = std::sync::Mutex<HashMap<u64, Reply>>;

/// Turn handle commands into calls on the link and answers back into replies; mirror the
/// parent's process table; answer pings. Reading and writing are separate tasks, so that a
/// parent busy writing never waits on us writing. When the link is gone (or `close` fires),
/// what waits fails and `gone` fires.
async fn proxy(link: Arc<Link>, ends: Ends, gone: CancellationToken, close: CancellationToken) {
    let pending = Pending::default();
    let (pong_tx, pong_rx) = mpsc::unbounded_channel::<u64>();
    let Ends {
        commands,
        upward,
        snapshot,
    } = ends;
    tokio::select! {
        () = read_parent(&link, &pending, snapshot, pong_tx) => {}
        () = write_parent(&link, &pending, commands, upward, pong_rx) => {}
        () = close.cancelled() => {}
    }
    let waiting: Vec<Reply> = lock(&pending).drain().map(|(_, w)| w).collect();
    for waiter in waiting {
        let _ = waiter.send(Err(SupervisorError::Gone));
    }
    gone.cancel();
}

/// Read the parent's messages until the link fails: replies to their waiters, the process
/// table into `snapshot`, pings to the writer as pongs to send.
async fn read_parent(
    link: &Link,
    pending: &Pending,
    snapshot: watch::Sender<Arc<Snapshot>>,
    pongs: mpsc::UnboundedSender<u64>,
) {
    let mut table = TableAssembly::default();
    loop {
        match link.recv::<ToChild>().await {
            Ok(Some((ToChild::Reply { id, result }, _))) => {
                let waiter = lock(pending).remove(&id);
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
                let _ = pongs.send(seq);
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

/// Send the parent pongs, notifications and the handle's calls (each remembered in `pending`
/// until answered; one that cannot be sent is answered `Refused` at once), until every source
/// is closed.
async fn write_parent(
    link: &Link,
    pending: &Pending,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut upward: mpsc::UnboundedReceiver<Upward>,
    mut pongs: mpsc::UnboundedReceiver<u64>,
) {
    let mut next_id = 0u64;
    loop {
        // A call keeps the descriptors handed to us open until the parent has its copies.
        let msg = tokio::select! {
            Some(seq) = pongs.recv() => ToParent::Pong { seq },
            Some(note) = upward.recv() => ToParent::Upward(note),
            Some(command) = commands.recv() => {
                let Some((call, reply)) = remote_call(command) else { continue };
                next_id += 1;
                lock(pending).insert(next_id, reply);
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
            if let Some(waiter) = lock(pending).remove(&id) {
                let _ = waiter.send(Err(SupervisorError::Refused(e.to_string())));
            }
        }
    }
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
