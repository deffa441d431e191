//! The sd_notify protocol, sending side: what we tell our own service manager (systemd)
//! about the resolver as a whole. `NOTIFY_SOCKET` is read once, at construction, and never
//! passed on to children (their environment is built explicitly). Both filesystem paths and
//! Linux abstract addresses (`@name`) are supported; messages are formatted by `sd-notify`.

use std::time::Duration;

use sd_notify::NotifyState;
pub use supervisor_types::ServiceManagerVars;

/// One notification for the service manager, as a process that is not the main one (the
/// resolver's manager) hands it to the main process to send.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Upward {
    Ready(String),
    Status(String),
    Reloading(String),
    Stopping(String),
    /// `EXTEND_TIMEOUT_USEC`: the current start, reload or stop takes this much longer.
    ExtendTimeout(Duration),
}

impl Upward {
    /// The same notification with its status text made one printable line of at most `max`
    /// bytes ([`crate::text::one_line`]).
    pub fn bounded(&self, max: usize) -> Upward {
        let cut = |s: &String| crate::text::one_line(s, max);
        match self {
            Upward::Ready(s) => Upward::Ready(cut(s)),
            Upward::Status(s) => Upward::Status(cut(s)),
            Upward::Reloading(s) => Upward::Reloading(cut(s)),
            Upward::Stopping(s) => Upward::Stopping(cut(s)),
            Upward::ExtendTimeout(by) => Upward::ExtendTimeout(*by),
        }
    }
}

/// Notifications to the manager that started us, if any.
#[derive(Debug, Clone)]
pub struct UpwardNotifier {
    /// Where to send, from `NOTIFY_SOCKET` at start-up; `None` sends nothing.
    target: Option<std::ffi::OsString>,
    /// Hand notifications to the main process instead of sending them ([`Self::forwarding`]).
    forward: Option<tokio::sync::mpsc::UnboundedSender<Upward>>,
    /// Keepalive interval asked for by `WATCHDOG_USEC` (meant for us: `WATCHDOG_PID` unset or ours).
    watchdog: Option<Duration>,
    /// How many descriptors the service manager keeps for us across restarts (`FDSTORE`,
    /// set by systemd ≥ 254 from `FileDescriptorStoreMax=`); 0 when it keeps none.
    fd_store: usize,
}

impl UpwardNotifier {
    /// The notifier the service manager's variables ask for (read once, at the binary's
    /// edge, into [`ServiceManagerVars`]).
    pub fn new(vars: &ServiceManagerVars) -> Self {
        UpwardNotifier {
            target: vars.notify_socket.clone(),
            forward: None,
            watchdog: vars.watchdog,
            fd_store: vars.fd_store,
        }
    }

    /// The same notifier, told the service manager keeps up to `max` descriptors for us.
    pub fn with_fd_store(mut self, max: usize) -> Self {
        self.fd_store = max;
        self
    }

    /// How many descriptors the service manager keeps for us across restarts (0: none).
    pub fn fd_store_capacity(&self) -> usize {
        if self.target.is_some() {
            self.fd_store
        } else {
            0
        }
    }

    /// Hand a duplicate of `fd` to the service manager's descriptor store under `name`
    /// (`FDSTORE=1`, `FDNAME=` encoded by [`encode_fd_name`]), replacing what it kept under
    /// that name. It hands the descriptor back at our next start ([`listen_fds`]). Nothing is
    /// sent when the service manager keeps no descriptors for us.
    pub fn store_fd(&self, name: &str, fd: std::os::fd::BorrowedFd<'_>) {
        use std::os::fd::AsRawFd;
        if self.fd_store_capacity() == 0 {
            return;
        }
        let Some(encoded) = encode_fd_name(name) else {
            tracing::warn!("cannot keep {name:?} in the service manager's store: name too long");
            return;
        };
        let Some(target) = &self.target else { return };
        let remove = format!("FDSTOREREMOVE=1\nFDNAME={encoded}\n");
        let store = format!("FDSTORE=1\nFDNAME={encoded}\n");
        let sent = send_datagram(target, remove.as_bytes(), &[])
            .and_then(|()| send_datagram(target, store.as_bytes(), &[fd.as_raw_fd()]));
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot keep {name:?} in the service manager's store");
        }
    }

    /// Have the service manager close what it keeps under `name` (`FDSTOREREMOVE=1`).
    pub fn remove_stored_fd(&self, name: &str) {
        if self.fd_store_capacity() == 0 {
            return;
        }
        let (Some(target), Some(encoded)) = (&self.target, encode_fd_name(name)) else {
            return;
        };
        let msg = format!("FDSTOREREMOVE=1\nFDNAME={encoded}\n");
        if let Err(e) = send_datagram(target, msg.as_bytes(), &[]) {
            tracing::warn!(error = %e, "cannot remove {name:?} from the service manager's store");
        }
    }

    /// A notifier sending to `socket` (a path, or `@name` for an abstract address).
    pub fn to_socket(socket: impl Into<std::ffi::OsString>) -> Self {
        UpwardNotifier {
            target: Some(socket.into()),
            forward: None,
            watchdog: None,
            fd_store: 0,
        }
    }

    /// Send `WATCHDOG=1` keepalives at half of `interval` (what `WATCHDOG_USEC` asks for).
    pub fn with_watchdog(mut self, interval: Duration) -> Self {
        self.watchdog = Some(interval);
        self
    }

    /// A notifier that sends nothing (tests, and runs outside a service manager).
    pub fn disabled() -> Self {
        UpwardNotifier {
            target: None,
            forward: None,
            watchdog: None,
            fd_store: 0,
        }
    }

    /// A notifier that hands every notification to `tx` (the link to the main process).
    pub fn forwarding(tx: tokio::sync::mpsc::UnboundedSender<Upward>) -> Self {
        UpwardNotifier {
            target: None,
            forward: Some(tx),
            watchdog: None,
            fd_store: 0,
        }
    }

    /// Send a notification another process handed us.
    pub fn send_upward(&self, note: &Upward) {
        match note {
            Upward::Ready(s) => self.ready(s),
            Upward::Status(s) => self.status(s),
            Upward::Reloading(s) => self.reloading(s),
            Upward::Stopping(s) => self.stopping(s),
            Upward::ExtendTimeout(by) => self.extend_timeout(*by),
        }
    }

    fn forwarded(&self, note: impl FnOnce() -> Upward) -> bool {
        match &self.forward {
            Some(tx) => {
                let _ = tx.send(note());
                true
            }
            None => false,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.target.is_some() || self.forward.is_some()
    }

    fn send(&self, states: &[NotifyState]) {
        self.send_as(states, Delivery::Wait);
    }

    fn send_as(&self, states: &[NotifyState], delivery: Delivery) {
        let Some(target) = &self.target else { return };
        let mut msg = String::new();
        for s in states {
            msg.push_str(&s.to_string());
            msg.push('\n');
        }
        match send_datagram_as(target, msg.as_bytes(), &[], delivery) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => match delivery {
                Delivery::UnlessFull => {
                    tracing::debug!("the service manager's notify queue is full; status dropped")
                }
                Delivery::Wait => tracing::warn!(
                    message = msg.lines().next().unwrap_or(""),
                    "the service manager took no notification for {} s; dropped",
                    MUST_ARRIVE_WAIT.as_secs()
                ),
            },
            Err(e) => tracing::warn!(error = %e, "cannot notify the service manager"),
        }
    }

    pub fn ready(&self, status: &str) {
        if self.forwarded(|| Upward::Ready(status.to_owned())) {
            return;
        }
        self.send(&[NotifyState::Ready, NotifyState::Status(&one_line(status))]);
    }

    pub fn status(&self, status: &str) {
        if self.forwarded(|| Upward::Status(status.to_owned())) {
            return;
        }
        // A status alone is superseded by the next: never worth waiting for a service
        // manager that does not read (a loop that reports its failures must not block on it).
        self.send_as(
            &[NotifyState::Status(&one_line(status))],
            Delivery::UnlessFull,
        );
    }

    /// `RELOADING=1` with the `MONOTONIC_USEC` systemd needs to accept it; follow with
    /// [`ready`](Self::ready) when done.
    pub fn reloading(&self, status: &str) {
        if self.forwarded(|| Upward::Reloading(status.to_owned())) {
            return;
        }
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[
                NotifyState::Reloading,
                now,
                NotifyState::Status(&one_line(status)),
            ]),
            Err(e) => tracing::warn!(error = %e, "cannot read the monotonic clock"),
        }
    }

    pub fn stopping(&self, status: &str) {
        if self.forwarded(|| Upward::Stopping(status.to_owned())) {
            return;
        }
        self.send(&[
            NotifyState::Stopping,
            NotifyState::Status(&one_line(status)),
        ]);
    }

    /// `EXTEND_TIMEOUT_USEC`: whatever the service manager is waiting for (start, reload,
    /// stop) may take `by` longer from now. Capped at what the protocol carries (71 minutes).
    pub fn extend_timeout(&self, by: Duration) {
        if self.forwarded(|| Upward::ExtendTimeout(by)) {
            return;
        }
        let usec = u32::try_from(by.as_micros()).unwrap_or(u32::MAX);
        self.send(&[NotifyState::ExtendTimeoutUsec(usec)]);
    }

    /// Send `WATCHDOG=1` every half interval, if the service manager asked for it, until the
    /// returned task is aborted or dropped.
    pub fn spawn_watchdog(&self) -> Option<tokio_util::task::AbortOnDropHandle<()>> {
        let interval = self.watchdog?;
        self.target.as_ref()?;
        let me = self.clone();
        Some(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            async move {
                let mut tick = tokio::time::interval(interval / 2);
                loop {
                    tick.tick().await;
                    me.send(&[NotifyState::Watchdog]);
                }
            },
        )))
    }
}

/// `status` fit for a `STATUS=` line: a newline in it would end the assignment and start
/// another (`READY=1`, `MAINPID=`, …) that the service manager would act on.
fn one_line(status: &str) -> String {
    crate::text::one_line(status, crate::text::MAX_STATUS)
}

/// Send one datagram, with `fds` attached, to a `NOTIFY_SOCKET` value.
/// Whether a notification waits for room in the service manager's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// Wait for room, at most [`MUST_ARRIVE_WAIT`]: readiness, reloading, stopping, stored
    /// descriptors must arrive, but a service manager that stopped reading must not hold the
    /// sender (the root's one thread) for ever.
    Wait,
    /// Dropped when the queue is full (`WouldBlock`): a status the next one supersedes.
    UnlessFull,
}

/// The longest a notification that must arrive waits for room in the service manager's
/// queue (`SO_SNDTIMEO`); systemd reads its queue at once, so only a manager that stopped
/// reading ever makes a sender wait this long, and then the notification is dropped, said.
const MUST_ARRIVE_WAIT: Duration = Duration::from_secs(1);

fn send_datagram(
    target: &std::ffi::OsStr,
    msg: &[u8],
    fds: &[std::os::fd::RawFd],
) -> std::io::Result<()> {
    send_datagram_as(target, msg, fds, Delivery::Wait)
}

fn send_datagram_as(
    target: &std::ffi::OsStr,
    msg: &[u8],
    fds: &[std::os::fd::RawFd],
    delivery: Delivery,
) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, socket, AddressFamily, ControlMessage, MsgFlags};
    use nix::sys::socket::{SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let bytes = target.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => UnixAddr::new_abstract(name)?,
        None => UnixAddr::new(std::path::Path::new(target))?,
    };
    let socket = socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    if delivery == Delivery::Wait {
        use nix::sys::time::TimeValLike;
        let timeout = nix::sys::time::TimeVal::milliseconds(
            i64::try_from(MUST_ARRIVE_WAIT.as_millis()).unwrap_or(i64::MAX),
        );
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::SendTimeout, &timeout)?;
    }
    let iov = [std::io::IoSlice::new(msg)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    let sent = sendmsg(
        socket.as_raw_fd(),
        &iov,
        cmsgs,
        match delivery {
            Delivery::Wait => MsgFlags::MSG_NOSIGNAL,
            Delivery::UnlessFull => MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        },
        Some(&addr),
    )?;
    if sent != msg.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "incomplete notification",
        ));
    }
    Ok(())
}

/// The longest `FDNAME=` systemd takes.
const MAX_FD_NAME: usize = 255;

/// `name` as an `FDNAME=` value: systemd refuses ':' (the separator of `LISTEN_FDNAMES`),
/// control characters and non-ASCII, so those bytes and '%' are written `%XX`. `None` when
/// the result is longer than systemd takes.
pub fn encode_fd_name(name: &str) -> Option<String> {
    use std::fmt::Write;
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b == b'%' || b == b':' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
    (!out.is_empty() && out.len() <= MAX_FD_NAME).then_some(out)
}

/// The name [`encode_fd_name`] encoded; `None` for what it never writes.
pub fn decode_fd_name(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The descriptors the service manager passed us at start (`LISTEN_FDS`, from 3 on, meant
/// for us: `LISTEN_PID` is our pid), with their decoded `LISTEN_FDNAMES`, now ours (and
/// close-on-exec). Descriptors whose names are not ours are returned with the name
/// systemd gave them. Empty when nothing was passed. At most `limit` are taken (what the
/// caller's own store keeps: more are never ours; systemd's store holds 4,096 by default).
pub fn listen_fds(vars: &ServiceManagerVars, limit: usize) -> Vec<(String, std::os::fd::OwnedFd)> {
    let for_us = vars.listen_pid == Some(std::process::id());
    let count = vars.listen_fds;
    if !for_us || count <= 0 {
        return Vec::new();
    }
    let mut names = vars.listen_fdnames.split(':');
    let mut fds = Vec::new();
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    for fd in 3..3i32.saturating_add(count.min(limit)) {
        let name = names.next().unwrap_or("unknown");
        let name = decode_fd_name(name).unwrap_or_else(|| name.to_owned());
        match crate::os::take_inherited_fd(fd).and_then(|owned| {
            crate::os::set_cloexec(&owned)?;
            Ok(owned)
        }) {
            Ok(owned) => fds.push((name, owned)),
            Err(e) => tracing::warn!("LISTEN_FDS names descriptor {fd}, which is not open: {e}"),
        }
    }
    fds
}

#[cfg(test)]
mod tests {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};

    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn watchdog_keepalives_at_half_the_interval() {
        let name = format!("kres-upward-watchdog-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind");
        let n =
            UpwardNotifier::to_socket(format!("@{name}")).with_watchdog(Duration::from_millis(40));
        let task = n.spawn_watchdog().expect("a keepalive task");
        let received = tokio::task::spawn_blocking(move || (receive(&socket), receive(&socket)))
            .await
            .expect("join");
        task.abort();
        assert_eq!(
            received,
            ("WATCHDOG=1\n".to_owned(), "WATCHDOG=1\n".to_owned())
        );
        assert!(
            UpwardNotifier::to_socket("@x").spawn_watchdog().is_none(),
            "no keepalives unless asked for"
        );
    }

    /// A service manager that reads nothing: statuses beyond its queue are dropped instead of
    /// blocking the sender (the root's one thread), and the first ones still arrive.
    #[test]
    fn statuses_never_wait_for_a_service_manager_that_does_not_read() {
        let name = format!("kres-upward-full-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind");
        let n = UpwardNotifier::to_socket(format!("@{name}"));
        let (done_tx, done) = std::sync::mpsc::channel();
        // Far more than any datagram queue (net.unix.max_dgram_qlen, 10 by default).
        std::thread::spawn(move || {
            for i in 0..2000 {
                n.status(&format!("status {i}"));
            }
            let _ = done_tx.send(());
        });
        done.recv_timeout(Duration::from_secs(60))
            .expect("every status sent or dropped, none waited");
        assert_eq!(receive(&socket), "STATUS=status 0\n");
    }

    /// A service manager that stopped reading: readiness and reloading wait a bounded time
    /// for room, then are dropped, so the sender (the root's one thread) goes on.
    #[test]
    fn readiness_waits_a_bounded_time_for_a_service_manager_that_does_not_read() {
        let name = format!("kres-upward-stuck-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind");
        let n = UpwardNotifier::to_socket(format!("@{name}"));
        let (done_tx, done) = std::sync::mpsc::channel();
        // Past any datagram queue (net.unix.max_dgram_qlen, 10 by default), in the order of a
        // reload's notifications.
        std::thread::spawn(move || {
            for i in 0..8 {
                n.reloading(&format!("reload {i}"));
                n.ready(&format!("ready {i}"));
            }
            let _ = done_tx.send(());
        });
        done.recv_timeout(Duration::from_secs(120))
            .expect("every notification sent or dropped after a bounded wait");
        assert!(receive(&socket).starts_with("RELOADING=1\n"));
    }

    #[test]
    fn fd_names_encode_what_systemd_refuses() {
        for name in [
            "api",
            "sock 0 udp 0 127.0.0.1:53",
            "sock 12 tls 1 [::1]:853",
            "100% odd\tname\u{e9}",
        ] {
            let encoded = encode_fd_name(name).expect("encodable");
            assert!(
                encoded
                    .bytes()
                    .all(|b| (0x20..0x7f).contains(&b) && b != b':'),
                "{encoded:?}"
            );
            assert_eq!(decode_fd_name(&encoded).as_deref(), Some(name));
        }
        assert_eq!(
            encode_fd_name("sock 0 udp 0 127.0.0.1:53").as_deref(),
            Some("sock 0 udp 0 127.0.0.1%3A53")
        );
        assert_eq!(encode_fd_name(""), None);
        assert_eq!(
            encode_fd_name(&":".repeat(86)),
            None,
            "longer than 255 encoded"
        );
        assert_eq!(decode_fd_name("bad%zz"), None);
        assert_eq!(decode_fd_name("cut%3"), None);
    }

    #[test]
    fn descriptors_go_to_the_store_only_when_it_keeps_them() {
        use std::os::fd::AsFd;
        let name = format!("kres-upward-fdstore-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind");
        let kept = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket to keep");
        let receive_with_fds = |socket: &UnixDatagram| {
            let mut buf = [0u8; 4096];
            let packet = crate::os::recv_packet(socket.as_fd(), &mut buf).expect("a datagram");
            (
                String::from_utf8_lossy(&buf[..packet.len]).into_owned(),
                packet.fds.len(),
            )
        };
        // Not offered (no FDSTORE): nothing sent; the next datagram is the status after it.
        let plain = UpwardNotifier::to_socket(format!("@{name}"));
        assert_eq!(plain.fd_store_capacity(), 0);
        plain.store_fd("api", kept.as_fd());
        plain.remove_stored_fd("api");
        plain.status("after");
        assert_eq!(receive(&socket), "STATUS=after\n");

        let store = UpwardNotifier::to_socket(format!("@{name}")).with_fd_store(16);
        store.store_fd("sock 0 udp 0 127.0.0.1:53", kept.as_fd());
        assert_eq!(
            receive_with_fds(&socket),
            (
                "FDSTOREREMOVE=1\nFDNAME=sock 0 udp 0 127.0.0.1%3A53\n".to_owned(),
                0
            ),
            "what was kept under the name before is replaced"
        );
        assert_eq!(
            receive_with_fds(&socket),
            (
                "FDSTORE=1\nFDNAME=sock 0 udp 0 127.0.0.1%3A53\n".to_owned(),
                1
            )
        );
        store.remove_stored_fd("api");
        assert_eq!(
            receive_with_fds(&socket),
            ("FDSTOREREMOVE=1\nFDNAME=api\n".to_owned(), 0)
        );
        assert_eq!(
            UpwardNotifier::disabled()
                .with_fd_store(16)
                .fd_store_capacity(),
            0,
            "nowhere to send"
        );
    }

    #[test]
    fn abstract_and_path_sockets() {
        let name = format!("kres-upward-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let abstract_socket = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        let n = UpwardNotifier::to_socket(format!("@{name}"));
        n.ready("Ready");
        assert_eq!(receive(&abstract_socket), "READY=1\nSTATUS=Ready\n");
        n.reloading("Reloading");
        let msg = receive(&abstract_socket);
        assert!(msg.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{msg}");
        assert!(msg.ends_with("STATUS=Reloading\n"), "{msg}");

        let path = std::env::temp_dir().join(format!("kres-upward-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let path_socket = UnixDatagram::bind(&path).expect("bind path");
        UpwardNotifier::to_socket(&path).stopping("Stopping");
        assert_eq!(receive(&path_socket), "STOPPING=1\nSTATUS=Stopping\n");
        // A status cannot carry another assignment: its newline is no line break upward.
        UpwardNotifier::to_socket(&path).status("up\nMAINPID=1\nREADY=1");
        assert_eq!(
            receive(&path_socket),
            "STATUS=up\u{fffd}MAINPID=1\u{fffd}READY=1\n"
        );
        // Nor a status handed over by another process.
        let forwarded = Upward::Status("ok\nSTOPPING=1".into()).bounded(crate::text::MAX_STATUS);
        UpwardNotifier::to_socket(&path).send_upward(&forwarded);
        assert_eq!(receive(&path_socket), "STATUS=ok\u{fffd}STOPPING=1\n");
        let _ = std::fs::remove_file(&path);
        // Disabled: nothing to send, no error.
        UpwardNotifier::disabled().ready("x");
    }
}
