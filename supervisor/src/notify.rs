//! The sd_notify protocol, receiving side: the datagram socket our children report to, and
//! the parser of their messages.
//!
//! Following systemd's `notify_recv`: the socket is bound before the first spawn, carries
//! `SO_PASSCRED` so the kernel attaches the sender's credentials, and every datagram is read
//! with `MSG_CMSG_CLOEXEC`. Messages that were truncated, carry no credentials, have an
//! embedded NUL or are not UTF-8 are dropped with a log line; received file descriptors are
//! closed. Nothing a child sends can make us panic.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::sys::socket::{setsockopt, sockopt};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// Largest datagram we accept, like systemd's NOTIFY_BUFFER_MAX.
pub const NOTIFY_BUFFER_MAX: usize = 4096;

/// One parsed sd_notify message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Notification {
    pub ready: bool,
    pub reloading: bool,
    pub stopping: bool,
    pub status: Option<String>,
    pub errno: Option<i32>,
    pub main_pid: Option<i32>,
    pub watchdog: Option<WatchdogPing>,
    pub watchdog_usec: Option<u64>,
    pub extend_timeout_usec: Option<u64>,
    pub monotonic_usec: Option<u64>,
    pub exit_status: Option<i32>,
    /// Keys we do not act on (FDSTORE, BARRIER, X_…), kept for logs.
    pub other: Vec<String>,
}

/// A `WATCHDOG=` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogPing {
    /// `WATCHDOG=1`: keepalive.
    Alive,
    /// `WATCHDOG=trigger`: the process asks to be treated as hung.
    Trigger,
}

/// Why a datagram was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MalformedNotification {
    #[error("empty message")]
    Empty,
    #[error("message contains a NUL byte")]
    EmbeddedNul,
    #[error("message is not UTF-8")]
    NotUtf8,
    #[error("line {0:?} is not KEY=VALUE")]
    NotAssignment(String),
}

impl Notification {
    /// Parse newline-separated `KEY=VALUE` lines. Unknown keys are kept in `other`; values of
    /// known keys that do not parse are ignored as systemd does.
    pub fn parse(payload: &[u8]) -> Result<Notification, MalformedNotification> {
        if payload.is_empty() {
            return Err(MalformedNotification::Empty);
        }
        if payload.contains(&0) {
            return Err(MalformedNotification::EmbeddedNul);
        }
        let text = std::str::from_utf8(payload).map_err(|_| MalformedNotification::NotUtf8)?;
        let mut n = Notification::default();
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            let Some((key, value)) = line.split_once('=') else {
                return Err(MalformedNotification::NotAssignment(truncate(line)));
            };
            match key {
                "READY" => n.ready |= value == "1",
                "RELOADING" => n.reloading |= value == "1",
                "STOPPING" => n.stopping |= value == "1",
                "STATUS" => n.status = Some(value.to_owned()),
                "ERRNO" => n.errno = value.parse().ok(),
                "MAINPID" => n.main_pid = value.parse().ok().filter(|p: &i32| *p > 0),
                "WATCHDOG" => {
                    n.watchdog = match value {
                        "1" => Some(WatchdogPing::Alive),
                        "trigger" => Some(WatchdogPing::Trigger),
                        _ => None,
                    }
                }
                "WATCHDOG_USEC" => n.watchdog_usec = value.parse().ok(),
                "EXTEND_TIMEOUT_USEC" => n.extend_timeout_usec = value.parse().ok(),
                "MONOTONIC_USEC" => n.monotonic_usec = value.parse().ok(),
                "EXIT_STATUS" => n.exit_status = value.parse().ok(),
                _ => n.other.push(truncate(line)),
            }
        }
        Ok(n)
    }
}

fn truncate(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A datagram that passed the transport checks, with the sender's pid.
#[derive(Debug)]
pub struct Received {
    pub pid: Pid,
    pub payload: Vec<u8>,
}

/// The socket children send their notifications to.
pub struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    /// Whether dropping it removes the socket's file: not once it was handed to the next
    /// process image, which keeps receiving on it.
    remove_on_drop: bool,
}

impl NotifySocket {
    /// Bind a datagram socket at `path` (a stale socket or a link there is replaced) that our
    /// user, and the members of `senders` when given, may send to (mode 0600 or 0620). The
    /// file gets its owner and mode before it appears at `path`
    /// ([`os::bind_unix_private`](crate::os::bind_unix_private)), so nothing planted in a
    /// directory the children can write is ever followed.
    pub fn bind(path: &Path, senders: Option<u32>) -> io::Result<NotifySocket> {
        let access = crate::os::SocketAccess {
            uid: nix::unistd::geteuid().as_raw(),
            gid: senders.unwrap_or_else(|| nix::unistd::getegid().as_raw()),
            mode: if senders.is_some() { 0o620 } else { 0o600 },
        };
        // std opens sockets close-on-exec.
        let socket = crate::os::bind_unix_private(path, access, |p| {
            std::os::unix::net::UnixDatagram::bind(p)
        })?;
        socket.set_nonblocking(true)?;
        setsockopt(&socket, sockopt::PassCred, &true)?;
        Ok(NotifySocket {
            socket: UnixDatagram::from_std(socket)?,
            path: path.to_owned(),
            remove_on_drop: true,
        })
    }

    /// A socket bound at `path` by an earlier image of this process (its options, credentials
    /// passing included, and any datagram queued meanwhile come with it).
    pub fn from_fd(fd: std::os::fd::OwnedFd, path: PathBuf) -> io::Result<NotifySocket> {
        let socket = std::os::unix::net::UnixDatagram::from(fd);
        socket.set_nonblocking(true)?;
        Ok(NotifySocket {
            socket: UnixDatagram::from_std(socket)?,
            path,
            remove_on_drop: true,
        })
    }

    /// A descriptor of the socket for the next process image; this one no longer removes the
    /// file when dropped.
    pub fn hand_over(&mut self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        let fd = self.socket.as_fd().try_clone_to_owned()?;
        self.remove_on_drop = false;
        Ok(fd)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wait for the next datagram that passes the transport checks. Rejected datagrams are
    /// logged and skipped.
    pub async fn recv(&self) -> io::Result<Received> {
        loop {
            self.socket.readable().await?;
            match self
                .socket
                .try_io(Interest::READABLE, || receive_one(&self.socket))
            {
                Ok(Some(received)) => return Ok(received),
                Ok(None) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Take one datagram if one is queued, without waiting.
    pub fn try_recv(&self) -> io::Result<Option<Received>> {
        loop {
            match self
                .socket
                .try_io(Interest::READABLE, || receive_one(&self.socket))
            {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Read one datagram. `Ok(None)` means it was read and dropped.
fn receive_one(fd: &impl AsFd) -> io::Result<Option<Received>> {
    // One byte more than the maximum, so an oversize datagram shows as truncated either way.
    let mut buf = [0u8; NOTIFY_BUFFER_MAX + 1];
    let packet = crate::os::recv_packet(fd.as_fd(), &mut buf)?;
    let (len, truncated, pid) = (packet.len, packet.truncated, packet.sender);
    // Received descriptors are ours to close; we keep none of them.
    let fds_received = packet.fds.len();
    drop(packet.fds);
    if truncated || len > NOTIFY_BUFFER_MAX {
        tracing::warn!(len, "dropping oversize or truncated notification");
        return Ok(None);
    }
    if fds_received > 0 {
        tracing::warn!(
            fds_received,
            "closed file descriptors sent with a notification"
        );
    }
    match pid {
        Some(pid) if pid > 0 => Ok(Some(Received {
            pid: Pid::from_raw(pid),
            payload: buf[..len].to_vec(),
        })),
        _ => {
            tracing::warn!("dropping notification without sender credentials");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(payload: &[u8], expected: Result<Notification, MalformedNotification>) {
        assert_eq!(
            Notification::parse(payload),
            expected,
            "payload {:?}",
            String::from_utf8_lossy(payload)
        );
    }

    #[test]
    fn parses_the_vocabulary() {
        check(
            b"READY=1",
            Ok(Notification {
                ready: true,
                ..Default::default()
            }),
        );
        check(
            b"READY=1\n",
            Ok(Notification {
                ready: true,
                ..Default::default()
            }),
        );
        check(b"READY=0", Ok(Notification::default()));
        check(
            b"RELOADING=1\nMONOTONIC_USEC=123456\nSTATUS=reloading config",
            Ok(Notification {
                reloading: true,
                monotonic_usec: Some(123456),
                status: Some("reloading config".into()),
                ..Default::default()
            }),
        );
        check(
            b"STOPPING=1",
            Ok(Notification {
                stopping: true,
                ..Default::default()
            }),
        );
        check(
            b"STATUS=a=b",
            Ok(Notification {
                status: Some("a=b".into()),
                ..Default::default()
            }),
        );
        check(
            b"ERRNO=2",
            Ok(Notification {
                errno: Some(2),
                ..Default::default()
            }),
        );
        check(
            b"MAINPID=42",
            Ok(Notification {
                main_pid: Some(42),
                ..Default::default()
            }),
        );
        check(b"MAINPID=0", Ok(Notification::default()));
        check(b"MAINPID=x", Ok(Notification::default()));
        check(
            b"WATCHDOG=1",
            Ok(Notification {
                watchdog: Some(WatchdogPing::Alive),
                ..Default::default()
            }),
        );
        check(
            b"WATCHDOG=trigger",
            Ok(Notification {
                watchdog: Some(WatchdogPing::Trigger),
                ..Default::default()
            }),
        );
        check(
            b"WATCHDOG_USEC=5000000",
            Ok(Notification {
                watchdog_usec: Some(5_000_000),
                ..Default::default()
            }),
        );
        check(
            b"EXTEND_TIMEOUT_USEC=10",
            Ok(Notification {
                extend_timeout_usec: Some(10),
                ..Default::default()
            }),
        );
        check(
            b"EXIT_STATUS=3",
            Ok(Notification {
                exit_status: Some(3),
                ..Default::default()
            }),
        );
        check(
            b"X_CUSTOM=1\nFDSTORE=1",
            Ok(Notification {
                other: vec!["X_CUSTOM=1".into(), "FDSTORE=1".into()],
                ..Default::default()
            }),
        );
        check(
            b"STATUS=x\nREADY=1",
            Ok(Notification {
                ready: true,
                status: Some("x".into()),
                ..Default::default()
            }),
        );
    }

    #[test]
    fn rejects_garbage() {
        check(b"", Err(MalformedNotification::Empty));
        check(b"READY=1\0", Err(MalformedNotification::EmbeddedNul));
        check(b"\xff\xfe", Err(MalformedNotification::NotUtf8));
        check(
            b"READY",
            Err(MalformedNotification::NotAssignment("READY".into())),
        );
        let long = "x".repeat(1000);
        match Notification::parse(long.as_bytes()) {
            Err(MalformedNotification::NotAssignment(s)) => assert!(s.len() < 80),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn receives_with_credentials_and_drops_oversize() {
        let dir = std::env::temp_dir().join(format!("notify-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("sock");
        let sock = NotifySocket::bind(&path, None).expect("bind");
        let client = std::os::unix::net::UnixDatagram::unbound().expect("client");
        client
            .send_to(&vec![b'a'; NOTIFY_BUFFER_MAX + 10], &path)
            .expect("send big");
        client.send_to(b"READY=1", &path).expect("send");
        let got = sock.recv().await.expect("recv");
        assert_eq!(got.pid.as_raw(), std::process::id() as i32);
        assert_eq!(got.payload, b"READY=1");
        assert!(sock.try_recv().expect("try_recv").is_none());
        drop(sock);
        assert!(!path.exists(), "socket file removed on drop");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
