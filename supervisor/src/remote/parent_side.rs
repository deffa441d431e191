//! The parent's side of a link: serving one incarnation of a directing child, its calls
//! checked against its policy and executed on the parent's own handle, its stored
//! descriptors kept, its notifications passed upward, the process table pushed to it, and
//! pings it must answer.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::call::{Answer, Call, SupervisorError};
use crate::runner::SupervisorHandle;
use crate::snapshot::Snapshot;
use crate::upward::UpwardNotifier;

use super::fd_store::StoreRefused;
use super::policy::check_name;
use super::table::send_table;
use super::{ChildPolicy, FdStore, Link, ToChild, ToParent, PING_INTERVAL};

/// How serving a child ended.
#[derive(Debug)]
pub enum ChildEnd {
    /// The link closed: the child is gone (or closed it, which means the same).
    Gone,
    /// The child sent something that is not of the protocol, or could not be started.
    Misbehaved(Misbehaviour),
    /// No answer to pings for the deadline.
    Hung,
    /// What we had to send could not be sent (why): the child cannot follow the process
    /// table any more, and is to be replaced.
    LinkFailed(LinkFailure),
    /// The child asked for everything to stop.
    Exit(u8),
    /// `stop` fired.
    Stopped,
}

/// What a directing child did wrong.
#[derive(Debug, thiserror::Error)]
pub enum Misbehaviour {
    /// Its process could not be started.
    #[error("cannot start: {0}")]
    NotStarted(#[source] SupervisorError),
    /// A message that is not of the protocol, or a link that could not be read.
    #[error("{0}")]
    Unreadable(#[source] io::Error),
    #[error("store without exactly one descriptor")]
    StoreWithoutOneDescriptor,
    #[error(transparent)]
    StoreRefused(#[from] StoreRefused),
    #[error("more than {MAX_IN_FLIGHT} calls in flight")]
    TooManyCalls,
}

/// Why the link to a directing child failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkFailure {
    /// A message could not be sent, and the child is not gone.
    #[error("cannot send {what}: {source}")]
    Unsent {
        /// What it was: the welcome, an answer, the process table…
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The task writing to the child ended abnormally.
    #[error("the link's writer ended: {0}")]
    WriterEnded(#[source] tokio::task::JoinError),
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
    pub reply: oneshot::Sender<Result<(), ReexecRefused>>,
}

/// Why the parent's owner will not re-execute, in its own words (the child is told them).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ReexecRefused(pub String);

/// Serve one incarnation of a directing child on `link`: welcome it with `store`, execute
/// its calls (several at once), keep its descriptors, pass its notifications upward, push
/// every new process table, and ping it; one that does not answer in time is hung.
///
/// Its tasks (the writer, a task a call) are its own: when it returns, they have ended. A
/// call still waiting then is dropped unanswered; what it asked of the supervisor, if it got
/// there, is done all the same.
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
    let mut writer = JoinSet::new();
    writer.spawn(write_to_child(link.clone(), out_rx, snapshots));
    let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
    let mut session = Session {
        service,
        out: out_tx,
        calls: Calls::default(),
        seq: 0,
        answered: Instant::now(),
    };
    let end = loop {
        tokio::select! {
            () = stop.cancelled() => break ChildEnd::Stopped,
            // A writer that ended without an error (the supervisor is gone) has nothing more
            // to send; the set is empty from then on, and this branch stays off.
            Some(written) = writer.join_next() => match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => break unsent(e.error, e.what),
                Err(e) => break ChildEnd::LinkFailed(LinkFailure::WriterEnded(e)),
            },
            received = link.recv::<ToParent>() => {
                let (msg, fds) = match received {
                    Ok(Some(m)) => m,
                    Ok(None) => break ChildEnd::Gone,
                    // It closed its end with our messages (snapshots) still unread in it.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break ChildEnd::Gone,
                    Err(e) => break ChildEnd::Misbehaved(Misbehaviour::Unreadable(e)),
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
    // The session's sender goes with it: the writer ends once the calls' answers are sent.
    let calls = session.calls.clone();
    drop(session);
    calls.tasks.close();
    if matches!(end, ChildEnd::Stopped) && !writer.is_empty() {
        // The child lives on for a moment (it is stopped next): answers on their way, such
        // as a re-execution's go-ahead, still reach it. Calls that take longer are dropped
        // unanswered (what they asked is done on the supervisor all the same).
        let _ = tokio::time::timeout(FLUSH_ON_STOP, async {
            calls.tasks.wait().await;
            writer.join_next().await
        })
        .await;
    }
    calls.end.cancel();
    calls.tasks.wait().await;
    writer.shutdown().await;
    end
}

/// The calls of one incarnation executing now, each a task of its own: counted (at most
/// [`MAX_IN_FLIGHT`]), and ended with serving.
#[derive(Clone, Default)]
struct Calls {
    tasks: TaskTracker,
    /// Fires when serving ends: a call still waiting is dropped.
    end: CancellationToken,
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
    calls: Calls,
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
                        Misbehaviour::StoreWithoutOneDescriptor,
                    ));
                };
                if keep_upward(&name) {
                    upward.store_fd(&name, fd.as_fd());
                }
                store
                    .put(name, fd)
                    .map_err(|e| ChildEnd::Misbehaved(e.into()))?;
            }
            ToParent::Forget { name } => {
                if keep_upward(&name) && store.contains(&name) {
                    upward.remove_stored_fd(&name);
                }
                store.forget(&name);
            }
            ToParent::Upward(note) => {
                if matches!(note, crate::upward::Upward::Ready(_)) {
                    // The child's start (or reload) is done, and so is ours: the heap and
                    // program text it took are given back before the service manager hears
                    // of it, so that what runs on is what is counted from then on.
                    heap::release_free_heap();
                    heap::release_unused_text();
                }
                upward.send_upward(&self.service.policy.passed_upward(&note))
            }
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
        if self.calls.tasks.len() >= MAX_IN_FLIGHT {
            return Err(ChildEnd::Misbehaved(Misbehaviour::TooManyCalls));
        }
        let sup = self.service.sup.clone();
        let policy = self.service.policy.clone();
        let reexec = self.service.reexec.cloned();
        let out = self.out.clone();
        let end = self.calls.end.clone();
        self.calls.tasks.spawn(async move {
            tokio::select! {
                result = execute(&sup, &policy, reexec, call, fds) => {
                    let _ = out.send(ToChild::Reply { id, result });
                }
                () = end.cancelled() => {}
            }
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
fn unsent(error: io::Error, what: &'static str) -> ChildEnd {
    match error.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => ChildEnd::Gone,
        _ => ChildEnd::LinkFailed(LinkFailure::Unsent {
            what,
            source: error,
        }),
    }
}

/// A send of the writer that failed.
struct WriteFailed {
    /// What it was sending, for the reason serving ends with.
    what: &'static str,
    /// Why it failed: a child that is gone, or a message the link cannot carry.
    error: io::Error,
}

/// Pass a re-execution request to the parent's owner and wait for its answer.
async fn request_reexec(
    to: Option<mpsc::UnboundedSender<ReexecRequest>>,
) -> Result<Answer, SupervisorError> {
    let to = to.ok_or_else(|| SupervisorError::Refused("re-executing is not offered".into()))?;
    match crate::call::ask(&to, |reply| ReexecRequest { reply }).await? {
        Ok(()) => Ok(Answer::Done),
        Err(ReexecRefused(why)) => Err(SupervisorError::Refused(why)),
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
