//! The sd_notify protocol, sending side: what we tell our own service manager (systemd)
//! about the resolver as a whole. `NOTIFY_SOCKET` is read once, at construction, and never
//! passed on to children (their environment is built explicitly). Both filesystem paths and
//! Linux abstract addresses (`@name`) are supported; messages are formatted by `sd-notify`.

use std::time::Duration;

use sd_notify::NotifyState;

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
    /// The same notification with its status text cut to `max` bytes.
    pub fn bounded(&self, max: usize) -> Upward {
        let cut = |s: &String| {
            let mut s = s.clone();
            crate::remote::truncate_utf8(&mut s, max);
            s
        };
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
}

impl UpwardNotifier {
    pub fn from_env() -> Self {
        UpwardNotifier {
            target: std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty()),
            forward: None,
            watchdog: sd_notify::watchdog_enabled(),
        }
    }

    /// A notifier sending to `socket` (a path, or `@name` for an abstract address).
    pub fn to_socket(socket: impl Into<std::ffi::OsString>) -> Self {
        UpwardNotifier {
            target: Some(socket.into()),
            forward: None,
            watchdog: None,
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
        }
    }

    /// A notifier that hands every notification to `tx` (the link to the main process).
    pub fn forwarding(tx: tokio::sync::mpsc::UnboundedSender<Upward>) -> Self {
        UpwardNotifier {
            target: None,
            forward: Some(tx),
            watchdog: None,
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
        let Some(target) = &self.target else { return };
        let mut msg = String::new();
        for s in states {
            msg.push_str(&s.to_string());
            msg.push('\n');
        }
        if let Err(e) = send_datagram(target, msg.as_bytes()) {
            tracing::warn!(error = %e, "cannot notify the service manager");
        }
    }

    pub fn ready(&self, status: &str) {
        if self.forwarded(|| Upward::Ready(status.to_owned())) {
            return;
        }
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    pub fn status(&self, status: &str) {
        if self.forwarded(|| Upward::Status(status.to_owned())) {
            return;
        }
        self.send(&[NotifyState::Status(status)]);
    }

    /// `RELOADING=1` with the `MONOTONIC_USEC` systemd needs to accept it; follow with
    /// [`ready`](Self::ready) when done.
    pub fn reloading(&self, status: &str) {
        if self.forwarded(|| Upward::Reloading(status.to_owned())) {
            return;
        }
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now, NotifyState::Status(status)]),
            Err(e) => tracing::warn!(error = %e, "cannot read the monotonic clock"),
        }
    }

    pub fn stopping(&self, status: &str) {
        if self.forwarded(|| Upward::Stopping(status.to_owned())) {
            return;
        }
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
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
    /// returned task is aborted.
    pub fn spawn_watchdog(&self) -> Option<tokio::task::JoinHandle<()>> {
        let interval = self.watchdog?;
        self.target.as_ref()?;
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tick.tick().await;
                me.send(&[NotifyState::Watchdog]);
            }
        }))
    }
}

/// Send one datagram to a `NOTIFY_SOCKET` value.
fn send_datagram(target: &std::ffi::OsStr, msg: &[u8]) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = target.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(target))?,
    };
    let socket = UnixDatagram::unbound()?;
    let sent = socket.send_to_addr(msg, &addr)?;
    if sent != msg.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "incomplete notification",
        ));
    }
    Ok(())
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
        let _ = std::fs::remove_file(&path);
        // Disabled: nothing to send, no error.
        UpwardNotifier::disabled().ready("x");
    }
}
