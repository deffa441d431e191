//! The API's listener and connection loop: one endpoint (a unix socket restricted to the
//! resolver's user and group, or TCP `ip@port`), HTTP/1 with a header-read timeout, a
//! per-request time limit, and a graceful shutdown that lets in-flight requests finish.
//!
//! We run our own accept loop (instead of `axum::serve`) because hyper's header-read timeout
//! is only reachable through its connection builder, and because every connection is
//! admitted at once and may be shed later (`api::admission`): nothing waits unaccepted behind
//! idle or unauthenticated connections. A refused request (401, 403, 421, 413) closes its
//! connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::admission::{self, Admission, PeerKey, RequestMark, RequestOutcome, Ticket};
use kres_config::ManagementSchema;

/// Largest request body accepted; larger ones get 413. A whole configuration with inline
/// zone data fits easily.
pub const BODY_LIMIT: usize = 10 * 1024 * 1024;

/// A client must send its request head within this time (from the connection's start, or
/// from the end of its previous answer), or the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Time limit of a read-only request (GET/HEAD), metrics collection included.
pub const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Time limit of a request that changes something (PUT, PATCH, DELETE, POST): a
/// configuration change waits for the policy-loader, the canary and a rolling restart of
/// every worker.
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Requests that may change something (PUT, PATCH, DELETE, POST) served at once; more wait
/// (within their time limit). Each may carry a body of up to [`BODY_LIMIT`], so this bounds
/// the memory they take; reads never wait here.
pub const MAX_CHANGES_IN_FLIGHT: usize = 32;

/// Statuses after which the connection is closed: the client was refused, and holds no
/// place it has not earned (and a body it may still be sending is not read).
const CLOSING_STATUSES: [StatusCode; 4] = [
    StatusCode::UNAUTHORIZED,
    StatusCode::FORBIDDEN,
    StatusCode::MISDIRECTED_REQUEST,
    StatusCode::PAYLOAD_TOO_LARGE,
];

/// The window over which a client that holds up its answer must read at least
/// [`MIN_READ_RATE`]: one that reads nothing for this long, or too little, is cut (its answer,
/// held in memory, is dropped).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The least a client must read of its answer, in bytes a second, while the answer waits for
/// it (the socket's buffer is full): a reader slower than this is cut after [`WRITE_TIMEOUT`].
/// Any client on a network of this century reads faster; one that takes a byte every few
/// seconds only holds the manager's memory.
pub const MIN_READ_RATE: u64 = 4096;

/// On shutdown, requests in flight get this long to finish; then their connections are
/// dropped, whatever the clients do.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Connections the kernel queues for the API before the manager accepts them (clamped to
/// `net.core.somaxconn`): a burst of connections waits there instead of being refused, or,
/// over TCP, dropped until the client's SYN is sent again a second later.
pub const LISTEN_BACKLOG: i32 = 4096;

/// Mode of the API's unix socket: read-write for the resolver's user and the socket's group
/// only (ours, or the read-only or admin group of the API's roles).
pub const SOCKET_MODE: u32 = 0o660;

/// Where the API listens, bound.
pub enum Listener {
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
    Tcp(TcpListener),
}

/// Why the API endpoint could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot listen on {endpoint}: {source}")]
    Listen {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the management section names no endpoint")]
    NoEndpoint,
}

impl Listener {
    /// Bind the endpoint the `management` section names: the unix socket (a stale socket
    /// file is replaced; mode 0660, owned by our uid and by `group`, our gid when `None`) or
    /// TCP `ip@port`.
    pub fn bind(management: &ManagementSchema, group: Option<u32>) -> Result<Listener, BindError> {
        if let Some(path) = &management.unix_socket {
            return bind_unix(path, group)
                .and_then(|listener| deepen_backlog(&listener).map(|()| listener))
                .map(|listener| Listener::Unix {
                    listener,
                    path: path.clone(),
                })
                .map_err(|source| BindError::Listen {
                    endpoint: path.display().to_string(),
                    source,
                });
        }
        if let Some(iface) = &management.interface {
            let addr = iface.socket_addr();
            let std = std::net::TcpListener::bind(addr)
                .and_then(|l| deepen_backlog(&l).map(|()| l))
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(TcpListener::from_std)
                .map_err(|source| BindError::Listen {
                    endpoint: addr.to_string(),
                    source,
                })?;
            return Ok(Listener::Tcp(std));
        }
        Err(BindError::NoEndpoint)
    }

    /// For logs: the socket path or `ip:port`.
    pub fn endpoint(&self) -> String {
        match self {
            Listener::Unix { path, .. } => path.display().to_string(),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp".into()),
        }
    }

    /// The listening descriptor, to hand to another process.
    pub fn into_fd(self) -> std::io::Result<std::os::fd::OwnedFd> {
        Ok(match self {
            Listener::Unix { listener, .. } => listener.into_std()?.into(),
            Listener::Tcp(listener) => listener.into_std()?.into(),
        })
    }

    /// A listener on a descriptor bound elsewhere (the root process) for the endpoint the
    /// `management` section names.
    pub fn from_fd(
        fd: std::os::fd::OwnedFd,
        management: &ManagementSchema,
    ) -> std::io::Result<Listener> {
        if let Some(path) = &management.unix_socket {
            let std = std::os::unix::net::UnixListener::from(fd);
            std.set_nonblocking(true)?;
            return Ok(Listener::Unix {
                listener: UnixListener::from_std(std)?,
                path: path.clone(),
            });
        }
        let std = std::net::TcpListener::from(fd);
        std.set_nonblocking(true)?;
        Ok(Listener::Tcp(TcpListener::from_std(std)?))
    }

    /// Whether `fd` listens on the endpoint `management` names: a socket kept across a restart
    /// by the service manager, to serve on instead of binding anew (clients waiting in its
    /// backlog are then answered, not refused). A unix socket must still have its file.
    pub fn kept_for(
        fd: std::os::fd::BorrowedFd<'_>,
        management: &ManagementSchema,
        group: Option<u32>,
    ) -> bool {
        use nix::sys::socket::{getsockname, getsockopt, sockopt, SockaddrIn, SockaddrIn6};
        use nix::sys::socket::{SockaddrStorage, UnixAddr};
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileTypeExt;
        if !getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false) {
            return false;
        }
        if let Some(path) = &management.unix_socket {
            let bound = getsockname::<UnixAddr>(fd.as_raw_fd())
                .ok()
                .and_then(|a| a.path().map(Path::to_path_buf));
            // Its file as `bind_unix` leaves it: ours, for the group asked for now.
            let group = group.unwrap_or_else(|| nix::unistd::getgid().as_raw());
            return bound
                .as_deref()
                .is_some_and(|bound| supervisor::os::bound_for(bound, path))
                && std::fs::symlink_metadata(path).is_ok_and(|m| {
                    use std::os::unix::fs::{MetadataExt, PermissionsExt};
                    m.file_type().is_socket()
                        && m.uid() == nix::unistd::getuid().as_raw()
                        && m.gid() == group
                        && m.permissions().mode() & 0o777 == SOCKET_MODE
                });
        }
        let Some(iface) = &management.interface else {
            return false;
        };
        let bound = getsockname::<SockaddrStorage>(fd.as_raw_fd()).ok();
        let bound: Option<std::net::SocketAddr> = bound.and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4: &SockaddrIn| std::net::SocketAddr::V4((*v4).into()))
                .or_else(|| {
                    a.as_sockaddr_in6()
                        .map(|v6: &SockaddrIn6| std::net::SocketAddr::V6((*v6).into()))
                })
        });
        bound == Some(iface.socket_addr())
    }

    /// The unix socket file to remove when the resolver stops.
    pub fn socket_file(&self) -> Option<&Path> {
        match self {
            Listener::Unix { path, .. } => Some(path),
            Listener::Tcp(_) => None,
        }
    }
}

/// Give a listening socket a backlog of [`LISTEN_BACKLOG`] (listening again only changes it).
fn deepen_backlog(listener: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    let backlog = nix::sys::socket::Backlog::new(LISTEN_BACKLOG).map_err(std::io::Error::from)?;
    nix::sys::socket::listen(listener, backlog).map_err(std::io::Error::from)
}

/// Bind a unix socket, replacing a stale socket or a link (never another kind of file: a
/// regular file or a directory at the path is an error naming it), and restrict it to our
/// user and `group` (our own when `None`), mode 0660.
///
/// The socket gets its owner and mode in a directory only we can write before it is renamed
/// into place (`supervisor::os::bind_unix_private`): nobody else can connect in between, and
/// nothing planted at the path, or swapped in while it is bound, is ever followed by `chown`
/// or `chmod`.
pub fn bind_unix(path: &Path, group: Option<u32>) -> std::io::Result<UnixListener> {
    let access = supervisor::os::SocketAccess {
        uid: nix::unistd::geteuid().as_raw(),
        gid: group.unwrap_or_else(|| nix::unistd::getegid().as_raw()),
        mode: SOCKET_MODE,
    };
    let listener = supervisor::os::bind_unix_private(path, access, |p| {
        std::os::unix::net::UnixListener::bind(p)
    })?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

/// The limits every request goes through: the body size and the time limits.
pub fn with_limits(router: Router) -> Router {
    router
        .layer(axum::middleware::from_fn(time_limit))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
}

/// Requests that may change something wait for one of [`MAX_CHANGES_IN_FLIGHT`] places
/// (within their time limit) before they run; reads never wait. Layered inside the guard, so
/// only a request it admitted ever waits (or holds a place).
pub fn with_change_places<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    let places = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CHANGES_IN_FLIGHT));
    router.layer(axum::middleware::from_fn_with_state(places, change_place))
}

async fn change_place(
    axum::extract::State(places): axum::extract::State<std::sync::Arc<tokio::sync::Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    let read = request.method() == Method::GET || request.method() == Method::HEAD;
    // Never closed: an error would only mean no place to wait for.
    let _place = match read {
        true => None,
        false => places.acquire_owned().await.ok(),
    };
    next.run(request).await
}

/// 503 when a handler runs past its time limit (the handler is dropped). Requests that may
/// change something are logged with who sent them and how they ended.
async fn time_limit(request: Request, next: Next) -> Response {
    let read = request.method() == Method::GET || request.method() == Method::HEAD;
    let limit = if read { READ_TIMEOUT } else { CHANGE_TIMEOUT };
    let audit = (!read).then(|| {
        let peer = request
            .extensions()
            .get::<Peer>()
            .cloned()
            .unwrap_or(Peer::Unknown);
        (
            request.method().clone(),
            request.uri().path().to_owned(),
            peer,
        )
    });
    let result = tokio::time::timeout(limit, next.run(request)).await;
    if let Some((method, path, peer)) = audit {
        let status = result.as_ref().map(|r| r.status().as_u16()).unwrap_or(503);
        tracing::info!("API {method} {path} from {peer}: {status}");
    }
    match result {
        Ok(response) => response,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "request processing failed:\nno answer within {} seconds\n",
                limit.as_secs()
            ),
        )
            .into_response(),
    }
}

/// Serve `router` on `listener` until `shutdown` fires; then stop accepting, let in-flight
/// requests finish (idle keep-alive connections are closed) and return. At most
/// [`admission::bound_for_this_process`] connections are open at once.
pub async fn serve(listener: Listener, router: Router, shutdown: CancellationToken) {
    let admission = Admission::new(admission::bound_for_this_process());
    serve_admitting(listener, router, shutdown, admission).await;
}

/// [`serve`], with connections admitted (and shed) by `admission`.
pub async fn serve_admitting(
    listener: Listener,
    router: Router,
    shutdown: CancellationToken,
    admission: std::sync::Arc<Admission>,
) {
    let connections = TaskTracker::new();
    loop {
        // Accept whatever comes: a connection too many sheds an idle or unproven one, so no
        // client waits in the backlog behind them.
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = accept(&listener) => accepted,
        };
        match accepted {
            Ok(accepted) => {
                let Some(ticket) = admission.admit(accepted.peer_key()) else {
                    continue;
                };
                let (router, shutdown) = (router.clone(), shutdown.clone());
                let ticket = std::sync::Arc::new(ticket);
                connections.spawn(async move {
                    let (io, peer) = accepted.into_io().await;
                    let io = Box::new(WriteDeadline::new(io, WRITE_TIMEOUT, ticket.clone()));
                    connection(io, peer, router, shutdown, ticket).await;
                });
            }
            Err(e) if is_out_of_descriptors(&e) => {
                // Free one by shedding what a new connection would; with nothing to shed, do
                // not spin.
                if !admission.shed_one() {
                    tracing::warn!("management API: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tokio::task::yield_now().await;
            }
            Err(e) => {
                tracing::warn!("management API: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    connections.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "management API: requests still in flight after {} s; closing their connections",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    // The socket file belongs to whoever bound it (the root process removes it when the
    // resolver stops; a restarted manager serves it again).
}

/// Whether an accept failed for want of descriptors (ours or the system's).
fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A connection whose writes fail with `TimedOut` once the peer, in the time its answer
/// waited for it, took less than [`MIN_READ_RATE`]: a client that never reads, or reads a
/// byte now and then, cannot hold its answer, and the shutdown, for long.
///
/// The answer waits while a write makes no progress (`Pending`, the socket's buffer full);
/// only that time counts, so an event stream that is idle for an hour, or a client that keeps
/// up, is never slow. Once the waiting adds up to a whole `window` (its timer, or the next
/// write after it), the bytes the client took since the last such check must make the rate,
/// or the connection is cut; then both counts begin again.
struct WriteDeadline<T> {
    io: T,
    /// How much waiting is judged at once.
    window: Duration,
    /// The waiting counted since the last check.
    waited: Duration,
    /// What the client took since the last check (counted from the first wait on).
    taken: u64,
    /// Since when the write in progress waits, if it does.
    waiting_since: Option<tokio::time::Instant>,
    /// When the waiting of the write in progress completes the window.
    window_end: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The connection's place: stalled (sheddable) while an answer waits for its client.
    ticket: std::sync::Arc<Ticket>,
}

impl<T> WriteDeadline<T> {
    fn new(io: T, window: Duration, ticket: std::sync::Arc<Ticket>) -> Self {
        WriteDeadline {
            io,
            window,
            waited: Duration::ZERO,
            taken: 0,
            waiting_since: None,
            window_end: None,
            ticket,
        }
    }

    /// What a write (or flush) that returned `result` means for the deadline: the result
    /// itself, or `TimedOut` when the client was too slow.
    fn after<R>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        result: std::task::Poll<std::io::Result<R>>,
        taken: impl FnOnce(&R) -> usize,
    ) -> std::task::Poll<std::io::Result<R>> {
        use std::task::Poll;
        let now = tokio::time::Instant::now();
        match result {
            Poll::Pending => {
                if self.waiting_since.is_none() {
                    self.ticket.answer_waits(true);
                }
                let since = *self.waiting_since.get_or_insert(now);
                let end = since + self.window.saturating_sub(self.waited);
                self.window_end
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(end)));
                // Polled until pending, so that the window's end wakes this task.
                while let Some(timer) = &mut self.window_end {
                    if std::future::Future::poll(timer.as_mut(), cx).is_pending() {
                        break;
                    }
                    if let Some(since) = self.waiting_since.replace(now) {
                        self.waited += now.saturating_duration_since(since);
                    }
                    if let Err(e) = self.check() {
                        return Poll::Ready(Err(e));
                    }
                    self.window_end = Some(Box::pin(tokio::time::sleep_until(now + self.window)));
                }
                Poll::Pending
            }
            Poll::Ready(Ok(value)) => {
                if let Some(since) = self.waiting_since.take() {
                    self.waited += now.saturating_duration_since(since);
                    self.window_end = None;
                    self.ticket.answer_waits(false);
                }
                // What the socket's buffer took before the answer ever waited is the
                // kernel's, not the client's.
                if !self.waited.is_zero() {
                    self.taken = self.taken.saturating_add(taken(&value) as u64);
                }
                if self.waited >= self.window {
                    self.check()?;
                }
                Poll::Ready(Ok(value))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    /// At a window's end: `TimedOut` if the client took less than [`MIN_READ_RATE`] for the
    /// time its answer waited, else the counts begin again.
    fn check(&mut self) -> std::io::Result<()> {
        let needed = (MIN_READ_RATE as f64 * self.waited.as_secs_f64()) as u64;
        if self.taken < needed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client took {} bytes of its answer while it waited {:.0} s for it: \
                     slower than {MIN_READ_RATE} bytes a second",
                    self.taken,
                    self.waited.as_secs_f64()
                ),
            ));
        }
        self.waited = Duration::ZERO;
        self.taken = 0;
        Ok(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let result = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.after(cx, result, |n| *n)
    }

    /// Forwarded, so that hyper writes a response's head and its body (a large configuration
    /// already rendered as one buffer) with one `writev` instead of copying the body into its
    /// own buffer first.
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let result = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after(cx, result, |n| *n)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match std::pin::Pin::new(&mut self.io).poll_flush(cx) {
            // A flush that is done says nothing of the client's pace (sockets flush at once).
            done @ std::task::Poll::Ready(_) => done,
            pending => self.after(cx, pending, |()| 0),
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Who is on the other end of a connection, for the log of changes and for its role (a
/// request extension).
#[derive(Debug, Clone)]
pub enum Peer {
    /// The kernel's credentials of the connecting process (`SO_PEERCRED`, `SO_PEERGROUPS`),
    /// as they were when it connected.
    Unix {
        uid: u32,
        gid: u32,
        pid: Option<i32>,
        /// Supplementary groups.
        groups: std::sync::Arc<[u32]>,
    },
    Tcp(std::net::SocketAddr),
    Unknown,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Unix { uid, gid, pid, .. } => {
                write!(f, "uid {uid} gid {gid}")?;
                match pid {
                    Some(pid) => write!(f, " pid {pid}"),
                    None => Ok(()),
                }
            }
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unknown => f.write_str("an unknown peer"),
        }
    }
}

/// A connection just accepted; who is at its other end is learnt in its own task.
enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream, std::net::SocketAddr),
}

impl Accepted {
    /// Whose share the connection counts in (a unix peer's uid is asked of the kernel here,
    /// its groups later, in the connection's own task).
    fn peer_key(&self) -> PeerKey {
        match self {
            Accepted::Unix(s) => s
                .peer_cred()
                .map_or(PeerKey::Unknown, |cred| PeerKey::Uid(cred.uid())),
            Accepted::Tcp(_, addr) => PeerKey::address(addr.ip()),
        }
    }

    /// The stream, and its peer.
    async fn into_io(self) -> (Box<dyn Io>, Peer) {
        match self {
            Accepted::Unix(s) => {
                let peer = unix_peer(&s).await;
                (Box::new(s), peer)
            }
            Accepted::Tcp(s, addr) => (Box::new(s), Peer::Tcp(addr)),
        }
    }
}

/// The credentials of a unix socket's peer. The supplementary groups come from the kernel
/// (`SO_PEERGROUPS`); before Linux 4.13, from the group database for the peer's uid.
async fn unix_peer(s: &tokio::net::UnixStream) -> Peer {
    use std::os::fd::AsFd;
    let Ok(cred) = s.peer_cred() else {
        return Peer::Unknown;
    };
    let (uid, gid) = (cred.uid(), cred.gid());
    let groups = match supervisor::os::peer_groups(s.as_fd()) {
        Ok(groups) => groups,
        Err(e) => {
            tracing::debug!("SO_PEERGROUPS: {e}; reading the groups of uid {uid}");
            tokio::task::spawn_blocking(move || groups_of_user(uid, gid))
                .await
                .unwrap_or_default()
        }
    };
    Peer::Unix {
        uid,
        gid,
        pid: cred.pid(),
        groups: groups.into(),
    }
}

/// The groups the user database gives `uid` (none when it has no name).
fn groups_of_user(uid: u32, gid: u32) -> Vec<u32> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid));
    let Ok(Some(user)) = user else {
        return Vec::new();
    };
    let Ok(name) = std::ffi::CString::new(user.name) else {
        return Vec::new();
    };
    nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
        .map(|groups| groups.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default()
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    Ok(match listener {
        Listener::Unix { listener, .. } => Accepted::Unix(listener.accept().await?.0),
        Listener::Tcp(l) => {
            let (s, addr) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Accepted::Tcp(s, addr)
        }
    })
}

/// Serve one connection until it ends, is shed, or the server stops (then after its current
/// request). Its ticket follows its requests: serving while one is in flight (until its
/// answer's body is written), then proven, or closed after a refusal.
async fn connection(
    io: Box<dyn Io>,
    peer: Peer,
    router: Router,
    shutdown: CancellationToken,
    ticket: std::sync::Arc<Ticket>,
) {
    let shed = ticket.shed().clone();
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(peer.clone());
        let mark = ticket.request_began();
        let answer = router.clone().oneshot(request);
        async move {
            let response = answer.await?;
            Ok::<_, std::convert::Infallible>(with_mark(response, mark))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        // Dropping the connection closes it.
        () = shed.cancelled() => return,
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("management API connection: {e}");
    }
}

/// The response, its connection closed after a refusal, carrying `mark` in its body so that
/// the request counts as in flight until the body is written (an event stream for as long
/// as it lasts).
fn with_mark(response: Response, mut mark: RequestMark) -> Response {
    let (mut parts, body) = response.into_parts();
    if CLOSING_STATUSES.contains(&parts.status) {
        parts.headers.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        mark.ended(RequestOutcome::Refused);
    } else {
        mark.ended(RequestOutcome::Answered);
    }
    let body = MarkedBody {
        inner: body,
        _mark: mark,
    };
    Response::from_parts(parts, axum::body::Body::new(body))
}

/// An answer's body holding its request's mark until hyper drops it (written in full, or
/// abandoned); its length, when known, stays known.
struct MarkedBody {
    inner: axum::body::Body,
    /// Dropped with the body: the connection is idle again.
    _mark: RequestMark,
}

impl hyper::body::Body for MarkedBody {
    type Data = hyper::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;
    use tokio::sync::{mpsc, Notify};

    fn socket_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kres-api-server-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join(name)
    }

    fn listener(path: &Path) -> Listener {
        Listener::Unix {
            listener: bind_unix(path, None).expect("bind"),
            path: path.to_owned(),
        }
    }

    #[tokio::test]
    async fn an_in_flight_request_finishes_after_shutdown_begins() {
        let path = socket_path("graceful.sock");
        let (entered_tx, mut entered) = mpsc::channel::<()>(1);
        let release = Arc::new(Notify::new());
        let gate = release.clone();
        let router = Router::new().route(
            "/slow",
            get(move || {
                let entered_tx = entered_tx.clone();
                let gate = gate.clone();
                async move {
                    let _ = entered_tx.send(()).await;
                    gate.notified().await;
                    "done"
                }
            }),
        );
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener(&path), router, shutdown.clone()));
        let mut client = UnixStream::connect(&path).await.expect("connect");
        client
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        entered.recv().await.expect("handler entered");
        shutdown.cancel();
        // Shutdown waits for the handler.
        tokio::task::yield_now().await;
        assert!(!server.is_finished());
        release.notify_one();
        let mut response = String::new();
        client
            .read_to_string(&mut response)
            .await
            .expect("read until the server closes");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("done"), "{response}");
        server.await.expect("server ends");
        // The socket file stays: it belongs to the root process, which bound it.
        assert!(
            path.exists(),
            "socket file kept for the next manager process"
        );
    }

    /// A server at `path` whose `GET /big` answers 8 MiB, and the token that stops it.
    fn serve_big_answers(path: &Path) -> (tokio::task::JoinHandle<()>, CancellationToken) {
        let big = "x".repeat(8 << 20);
        let router = Router::new().route(
            "/big",
            get(move || {
                let big = big.clone();
                async move { big }
            }),
        );
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener(path), router, shutdown.clone()));
        (server, shutdown)
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_its_answer_is_cut() {
        let path = socket_path("nonreader.sock");
        let (server, shutdown) = serve_big_answers(&path);
        let mut client = UnixStream::connect(&path).await.expect("connect");
        client
            .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        // Read nothing for longer than the deadline (the paused clock jumps there).
        tokio::time::sleep(WRITE_TIMEOUT + Duration::from_secs(1)).await;
        let mut got = Vec::new();
        client
            .read_to_end(&mut got)
            .await
            .expect("read until closed");
        assert!(got.len() < 8 << 20, "cut after {} bytes", got.len());
        shutdown.cancel();
        server.await.expect("server ends");
    }

    /// A client that reads a kilobyte a second of an 8 MiB answer is cut within two windows
    /// (read at full speed after them, it gets only what the sockets held);
    /// one that reads nothing for a third of a window and then all of it gets all of it.
    #[tokio::test(start_paused = true)]
    async fn a_reader_slower_than_the_least_rate_is_cut_and_a_late_fast_one_is_not() {
        let path = socket_path("slowreader.sock");
        let (server, shutdown) = serve_big_answers(&path);
        let ask = || async {
            let mut client = UnixStream::connect(&path).await.expect("connect");
            client
                .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .expect("write");
            client
        };
        let mut slow = ask().await;
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        for _ in 0..(2 * WRITE_TIMEOUT.as_secs() + 2) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let n = slow.read(&mut buf).await.expect("read");
            got.extend_from_slice(&buf[..n]);
        }
        // Cut by now: what is left is what the sockets held, not the rest of the answer.
        slow.read_to_end(&mut got).await.expect("read the rest");
        assert!(
            got.len() < 8 << 20,
            "the slow reader got {} bytes",
            got.len()
        );
        let mut fast = ask().await;
        tokio::time::sleep(WRITE_TIMEOUT / 3).await;
        let mut all = Vec::new();
        fast.read_to_end(&mut all).await.expect("read");
        assert!(all.len() > 8 << 20, "{} bytes", all.len());
        shutdown.cancel();
        server.await.expect("server ends");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_no_client_beyond_its_grace() {
        let path = socket_path("stuck.sock");
        let router = Router::new().route(
            "/stuck",
            get(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        );
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener(&path), router, shutdown.clone()));
        let mut client = UnixStream::connect(&path).await.expect("connect");
        client
            .write_all(b"GET /stuck HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        tokio::task::yield_now().await;
        let began = tokio::time::Instant::now();
        shutdown.cancel();
        server.await.expect("server ends");
        assert!(began.elapsed() <= SHUTDOWN_GRACE + Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_headers_is_disconnected() {
        let path = socket_path("slowloris.sock");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener(&path),
            Router::new().route("/", get(|| async { "ok" })),
            shutdown.clone(),
        ));
        let mut client = UnixStream::connect(&path).await.expect("connect");
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        let started = tokio::time::Instant::now();
        let mut rest = Vec::new();
        tokio::time::timeout(HEADER_READ_TIMEOUT * 2, client.read_to_end(&mut rest))
            .await
            .expect("disconnected by the server")
            .expect("read");
        assert!(started.elapsed() >= HEADER_READ_TIMEOUT);
        assert!(!String::from_utf8_lossy(&rest).contains("200"));
        shutdown.cancel();
        server.await.expect("server ends");
    }

    /// A router answering `GET /` and refusing `GET /refused` with 401.
    fn small_router() -> Router {
        Router::new().route("/", get(|| async { "ok" })).route(
            "/refused",
            get(|| async { (StatusCode::UNAUTHORIZED, "no\n") }),
        )
    }

    /// Send a keep-alive `GET path` on `client` and read until the answer's body (`ok` or
    /// `no\n`) has arrived; the answer's text.
    async fn exchange(client: &mut UnixStream, path: &str) -> String {
        client
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&answer).ends_with("ok")
            && !String::from_utf8_lossy(&answer).ends_with("no\n")
        {
            let n = client.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// Whether the server closed `client` (EOF) within `within`.
    async fn closed_within(client: &mut UnixStream, within: Duration) -> bool {
        let mut rest = Vec::new();
        matches!(
            tokio::time::timeout(within, client.read_to_end(&mut rest)).await,
            Ok(Ok(_))
        )
    }

    #[tokio::test]
    async fn idle_connections_at_the_bound_make_way_for_a_request() {
        let path = socket_path("bound.sock");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_admitting(
            listener(&path),
            small_router(),
            shutdown.clone(),
            Admission::new(8),
        ));
        let mut idle = Vec::new();
        for _ in 0..8 {
            idle.push(UnixStream::connect(&path).await.expect("connect"));
        }
        // Every place is held by a connection that sent nothing: a new one is answered, and
        // the oldest idle one is closed for it.
        let mut client = UnixStream::connect(&path).await.expect("connect");
        let answer = exchange(&mut client, "/").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("content-length: 2\r\n"), "{answer}");
        assert!(closed_within(&mut idle[0], HEADER_READ_TIMEOUT / 2).await);
        shutdown.cancel();
        server.await.expect("server ends");
    }

    #[tokio::test]
    async fn a_proven_connection_outlives_unproven_ones() {
        let path = socket_path("proven.sock");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_admitting(
            listener(&path),
            small_router(),
            shutdown.clone(),
            Admission::new(3),
        ));
        let mut proven = UnixStream::connect(&path).await.expect("connect");
        assert!(exchange(&mut proven, "/").await.starts_with("HTTP/1.1 200"));
        // Ten connections of the same peer come and sit idle: they shed each other.
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(UnixStream::connect(&path).await.expect("connect"));
        }
        let mut newest = UnixStream::connect(&path).await.expect("connect");
        assert!(exchange(&mut newest, "/").await.starts_with("HTTP/1.1 200"));
        assert!(exchange(&mut proven, "/").await.starts_with("HTTP/1.1 200"));
        shutdown.cancel();
        server.await.expect("server ends");
    }

    #[tokio::test]
    async fn a_refused_request_closes_its_connection() {
        let path = socket_path("refused.sock");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener(&path), small_router(), shutdown.clone()));
        let mut client = UnixStream::connect(&path).await.expect("connect");
        let answer = exchange(&mut client, "/refused").await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"));
        // Closed at once, not after the head deadline of an idle keep-alive connection.
        assert!(closed_within(&mut client, HEADER_READ_TIMEOUT / 2).await);
        // Another request keeps its connection.
        let mut client = UnixStream::connect(&path).await.expect("connect");
        assert!(exchange(&mut client, "/").await.starts_with("HTTP/1.1 200"));
        assert!(exchange(&mut client, "/").await.starts_with("HTTP/1.1 200"));
        shutdown.cancel();
        server.await.expect("server ends");
    }

    #[tokio::test(start_paused = true)]
    async fn changes_in_flight_are_bounded_and_reads_never_wait_for_them() {
        use axum::routing::post;
        let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let router = {
            let (entered, release) = (entered.clone(), release.clone());
            with_change_places(
                Router::new()
                    .route(
                        "/change",
                        post(move || {
                            let (entered, release) = (entered.clone(), release.clone());
                            async move {
                                entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                let _ = release.acquire().await.map(|p| p.forget());
                                "changed"
                            }
                        }),
                    )
                    .route("/livez", get(|| async { "alive" })),
            )
        };
        let send = |method: &str, uri: &str| {
            let request = Request::builder()
                .method(method)
                .uri(uri)
                .body(axum::body::Body::empty())
                .expect("request");
            tokio::spawn(router.clone().oneshot(request))
        };
        let changes: Vec<_> = (0..MAX_CHANGES_IN_FLIGHT + 1)
            .map(|_| send("POST", "/change"))
            .collect();
        // Let every request run as far as it can (the paused clock moves only when all wait).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let count = || entered.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(count(), MAX_CHANGES_IN_FLIGHT);
        let livez = send("GET", "/livez").await.expect("task").expect("answer");
        assert_eq!(livez.status(), StatusCode::OK);
        release.add_permits(1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            count(),
            MAX_CHANGES_IN_FLIGHT + 1,
            "the one waiting went on"
        );
        release.add_permits(MAX_CHANGES_IN_FLIGHT);
        for change in changes {
            let answer = change.await.expect("task").expect("answer");
            assert_eq!(answer.status(), StatusCode::OK);
        }
    }

    #[test]
    fn a_socket_bound_here_is_recognised_when_kept_across_a_restart() {
        use std::os::fd::AsFd;
        let path = socket_path("kept.sock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        let listener = bind_unix(&path, None).expect("bind");
        let management = ManagementSchema {
            unix_socket: Some(path.clone()),
            interface: None,
        };
        assert!(Listener::kept_for(listener.as_fd(), &management, None));
        let elsewhere = ManagementSchema {
            unix_socket: Some(path.with_file_name("elsewhere.sock")),
            interface: None,
        };
        assert!(!Listener::kept_for(listener.as_fd(), &elsewhere, None));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_socket_is_for_our_user_and_group_only() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let path = socket_path("mode.sock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        let _listener = bind_unix(&path, None).expect("bind");
        let meta = std::fs::metadata(&path).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o7777, SOCKET_MODE);
        assert_eq!(meta.uid(), nix::unistd::getuid().as_raw());
        assert_eq!(meta.gid(), nix::unistd::getgid().as_raw());
        // A stale socket file is replaced.
        drop(_listener);
        assert!(bind_unix(&path, None).is_ok());
        // With a group for the API's roles, the socket is that group's.
        let other = nix::unistd::getgid().as_raw() + 1;
        let _listener = bind_unix(&path, Some(other)).expect("bind for a group");
        let meta = std::fs::metadata(&path).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o7777, SOCKET_MODE);
        assert_eq!(meta.gid(), other);
        let _ = std::fs::remove_file(&path);
    }
}
