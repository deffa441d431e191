//! The sd_notify protocol, receiving side: the datagram socket our children report to, and
//! the parser of their messages.
//!
//! Following systemd's `notify_recv`: the socket is bound before the first spawn, carries
//! `SO_PASSCRED` so the kernel attaches the sender's credentials, and every datagram is read
//! with `MSG_CMSG_CLOEXEC`. Messages that were truncated, carry no credentials, have an
//! embedded NUL or are not UTF-8 are dropped; received file descriptors are closed on a
//! thread of their own ([`DescriptorCloser`]: a close can block). Nothing a child sends can
//! make us panic, and no amount of it costs more than one log line a second ([`NoiseLog`]).

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::net::UnixDatagram;
use tokio::time::Instant;

use crate::text::{self, MAX_STATUS};

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
                // Cut and made one line here, where it is received: whatever keeps or passes
                // it on (snapshots, the link, systemd) gets bounded, printable text.
                "STATUS" => n.status = Some(text::one_line(value, MAX_STATUS)),
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
    /// The sender, as the kernel says (`SO_PASSCRED`): whose notification it is.
    pub pid: Pid,
    /// The message, at most [`NOTIFY_BUFFER_MAX`] bytes, not yet parsed.
    pub payload: Vec<u8>,
    /// Descriptors that came with it: never kept, to be closed off the actor
    /// ([`DescriptorCloser`]).
    pub descriptors: Vec<OwnedFd>,
}

/// One datagram read from the socket.
#[derive(Debug)]
pub enum Datagram {
    /// It passed the transport checks; its content is the reader's to judge.
    Received(Received),
    /// It did not: why, who sent it when the kernel said, and the descriptors it carried.
    Refused {
        why: Noise,
        sender: Option<Pid>,
        descriptors: Vec<OwnedFd>,
    },
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

    /// Wait for the next datagram.
    pub async fn recv(&self) -> io::Result<Datagram> {
        loop {
            self.socket.readable().await?;
            match self
                .socket
                .try_io(Interest::READABLE, || receive_one(&self.socket))
            {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => return result,
            }
        }
    }

    /// Take one datagram if one is queued, without waiting.
    pub fn try_recv(&self) -> io::Result<Option<Datagram>> {
        match self
            .socket
            .try_io(Interest::READABLE, || receive_one(&self.socket))
        {
            Ok(datagram) => Ok(Some(datagram)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
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

/// Read one datagram and check how it came: whole, with the sender's credentials.
fn receive_one(fd: &impl AsFd) -> io::Result<Datagram> {
    // One byte more than the maximum, so an oversize datagram shows as truncated either way.
    let mut buf = [0u8; NOTIFY_BUFFER_MAX + 1];
    let packet = crate::os::recv_packet(fd.as_fd(), &mut buf)?;
    let sender = packet.sender.filter(|&pid| pid > 0).map(Pid::from_raw);
    let descriptors = packet.fds;
    if packet.truncated || packet.len > NOTIFY_BUFFER_MAX {
        return Ok(Datagram::Refused {
            why: Noise::Oversize,
            sender,
            descriptors,
        });
    }
    Ok(match sender {
        Some(pid) => Datagram::Received(Received {
            pid,
            payload: buf[..packet.len].to_vec(),
            descriptors,
        }),
        None => Datagram::Refused {
            why: Noise::NoCredentials,
            sender,
            descriptors,
        },
    })
}

/// Something on the notify socket that is not a notification of one of our services: a
/// flood of it must cost a bounded amount of log and work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noise {
    /// A datagram from a process that is no service's main process.
    UnknownSender,
    /// A datagram of a service that is not of the protocol ([`MalformedNotification`]).
    Malformed,
    /// A datagram longer than [`NOTIFY_BUFFER_MAX`], or cut short by the kernel.
    Oversize,
    /// A datagram without the sender's credentials.
    NoCredentials,
    /// A descriptor that came with a datagram (counted per descriptor); it was closed.
    Descriptor,
}

impl Noise {
    const ALL: [Noise; 5] = [
        Noise::UnknownSender,
        Noise::Malformed,
        Noise::Oversize,
        Noise::NoCredentials,
        Noise::Descriptor,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// What a count of it is, in a summary.
    fn counted(self) -> &'static str {
        match self {
            Noise::UnknownSender => "datagrams from processes that are not services",
            Noise::Malformed => "malformed datagrams",
            Noise::Oversize => "oversize or truncated datagrams",
            Noise::NoCredentials => "datagrams without sender credentials",
            Noise::Descriptor => "descriptors received and closed",
        }
    }
}

impl fmt::Display for Noise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Noise::UnknownSender => "not one of our services",
            Noise::Malformed => "malformed",
            Noise::Oversize => "oversize or truncated",
            Noise::NoCredentials => "no sender credentials",
            Noise::Descriptor => "descriptors attached",
        })
    }
}

/// How often noise may be logged: one line per period at most.
pub const NOISE_LOG_PERIOD: Duration = Duration::from_secs(1);

/// Counts noise and says when to log it: the first noise after a quiet period at once, with an
/// example, and then one summary per [`NOISE_LOG_PERIOD`] at most, with counts by kind. Pure
/// (the caller passes the time), so it is tested with a fake clock.
#[derive(Debug, Default)]
pub struct NoiseLog {
    /// Noise counted since the last line, by [`Noise::index`].
    counts: [u64; Noise::ALL.len()],
    /// The first noise counted since the last line, described, so that a summary names one
    /// sender and one cause an operator can look up.
    example: Option<String>,
    /// When the last line was logged: what the next one counts began then.
    since: Option<Instant>,
    /// No line before this instant: the last one was logged less than a period before.
    quiet_until: Option<Instant>,
}

/// One line of noise to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoiseReport {
    /// Counts by [`Noise::index`].
    counts: [u64; Noise::ALL.len()],
    /// What the counts cover; `None` for a first noise logged at once.
    over: Option<Duration>,
    /// One noise of those counted, described.
    example: String,
}

impl NoiseReport {
    /// How many of `noise` this line counts.
    pub fn count(&self, noise: Noise) -> u64 {
        self.counts[noise.index()]
    }
}

impl fmt::Display for NoiseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("notify socket noise")?;
        if let Some(over) = self.over {
            write!(f, " in the last {:.1} s", over.as_secs_f64())?;
        }
        let mut separator = ": ";
        for noise in Noise::ALL {
            let n = self.count(noise);
            if n > 0 {
                write!(f, "{separator}{n} {}", noise.counted())?;
                separator = ", ";
            }
        }
        write!(f, " (for example {})", self.example)
    }
}

impl NoiseLog {
    /// Count `count` of `noise` at `now`; `example` describes it (called only when the
    /// noise is kept as the example). Returns the line to log now, if one is due now.
    pub fn record(
        &mut self,
        noise: Noise,
        count: u64,
        example: impl FnOnce() -> String,
        now: Instant,
    ) -> Option<NoiseReport> {
        if count == 0 {
            return None;
        }
        self.counts[noise.index()] += count;
        if self.example.is_none() {
            self.example = Some(example());
        }
        self.flush(now)
    }

    /// When the counted noise is to be logged, if any is counted and it was not logged at
    /// once.
    pub fn due(&self) -> Option<Instant> {
        if self.counts.iter().all(|&n| n == 0) {
            return None;
        }
        self.quiet_until
    }

    /// The line to log at `now`, if noise is counted and a line may be logged.
    pub fn flush(&mut self, now: Instant) -> Option<NoiseReport> {
        if self.counts.iter().all(|&n| n == 0) {
            return None;
        }
        if self.quiet_until.is_some_and(|until| now < until) {
            return None;
        }
        let report = NoiseReport {
            counts: std::mem::take(&mut self.counts),
            // The first line has no period behind it; every later one counts since the last.
            over: self.since.map(|since| now.saturating_duration_since(since)),
            example: self.example.take().unwrap_or_default(),
        };
        self.since = Some(now);
        self.quiet_until = Some(now + NOISE_LOG_PERIOD);
        Some(report)
    }
}

/// The most batches of descriptors waiting for the closer thread; beyond, batches are closed
/// on the runtime's blocking pool.
const CLOSER_QUEUE: usize = 1024;

/// Closes descriptors that came with notifications on a thread of its own: a close can block
/// (the last reference to a socket with `SO_LINGER`, a file on a FUSE mount whose server does
/// not answer), and the actor, which reaps and answers commands, must never wait on one.
pub struct DescriptorCloser {
    /// The closer thread's queue; it ends when this is dropped.
    queue: std::sync::mpsc::SyncSender<Vec<OwnedFd>>,
}

impl DescriptorCloser {
    /// Start the closer thread.
    pub fn start() -> io::Result<DescriptorCloser> {
        let (queue, batches) = std::sync::mpsc::sync_channel::<Vec<OwnedFd>>(CLOSER_QUEUE);
        std::thread::Builder::new()
            .name("notify-fd-closer".into())
            .spawn(move || {
                for batch in batches {
                    drop(batch);
                }
            })?;
        Ok(DescriptorCloser { queue })
    }

    /// Close `descriptors` without blocking the caller. When the closer thread is stuck and
    /// its queue full, they go to the runtime's blocking pool (which has its own bound on
    /// threads).
    pub fn close(&self, descriptors: Vec<OwnedFd>) {
        use std::sync::mpsc::TrySendError;
        if descriptors.is_empty() {
            return;
        }
        match self.queue.try_send(descriptors) {
            Ok(()) => {}
            Err(TrySendError::Full(batch) | TrySendError::Disconnected(batch)) => {
                drop(tokio::task::spawn_blocking(move || drop(batch)));
            }
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
        // A status is cut and made one line where it is received.
        let hostile = format!("STATUS={}", "\x01".repeat(4000));
        let Ok(Notification {
            status: Some(status),
            ..
        }) = Notification::parse(hostile.as_bytes())
        else {
            panic!("a status");
        };
        assert!(status.len() <= MAX_STATUS, "{} bytes", status.len());
        assert!(status.chars().all(|c| c == char::REPLACEMENT_CHARACTER));
        check(
            b"STATUS=a\tb\rc",
            Ok(Notification {
                status: Some("a b\u{fffd}c".into()),
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

    #[test]
    fn noise_is_logged_at_once_then_summarised_at_most_once_a_period() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut log = NoiseLog::default();
        let first = log
            .record(Noise::UnknownSender, 1, || "pid 7".into(), at(0))
            .expect("the first noise is logged at once");
        assert_eq!(
            first.to_string(),
            "notify socket noise: 1 datagrams from processes that are not services (for example \
             pid 7)"
        );
        assert_eq!(log.due(), None, "nothing left to log");
        // A flood within the period is counted, not logged.
        for i in 0..10_000u64 {
            let noise = if i % 2 == 0 {
                Noise::UnknownSender
            } else {
                Noise::Malformed
            };
            let line = log.record(noise, 1, || format!("pid {i}"), at(1 + i / 100));
            assert_eq!(line, None, "datagram {i}");
        }
        assert_eq!(
            log.record(Noise::Descriptor, 3, || "pid x".into(), at(200)),
            None
        );
        assert_eq!(log.due(), Some(at(1000)));
        assert_eq!(log.flush(at(999)), None);
        let summary = log
            .flush(at(1000))
            .expect("a summary once the period is over");
        assert_eq!(
            summary.to_string(),
            "notify socket noise in the last 1.0 s: 5000 datagrams from processes that are not \
             services, 5000 malformed datagrams, 3 descriptors received and closed (for example \
             pid 0)"
        );
        assert_eq!(log.due(), None);
        assert_eq!(log.flush(at(5000)), None, "nothing counted, nothing logged");
        // Noise right after a summary waits for the next period.
        assert_eq!(
            log.record(Noise::Oversize, 1, || "pid 9".into(), at(1500)),
            None
        );
        assert_eq!(log.due(), Some(at(2000)));
        let late = log.flush(at(2300)).expect("due");
        assert_eq!(late.count(Noise::Oversize), 1);
        // After a quiet spell, noise is logged at once again.
        let again = log
            .record(Noise::NoCredentials, 1, || "no pid".into(), at(9000))
            .expect("logged at once");
        assert_eq!(
            again.to_string(),
            "notify socket noise in the last 6.7 s: 1 datagrams without sender credentials (for \
             example no pid)"
        );
    }

    #[test]
    fn a_flood_of_twelve_seconds_costs_at_most_thirteen_lines() {
        let t0 = Instant::now();
        let mut log = NoiseLog::default();
        let mut lines = 0;
        let mut counted = 0;
        // A datagram every 10 µs; the actor flushes whenever it wakes for the log.
        for tick in 0..1_200_000u64 {
            let now = t0 + Duration::from_micros(tick * 10);
            if log.due().is_some_and(|due| due <= now) {
                if let Some(line) = log.flush(now) {
                    lines += 1;
                    counted += line.count(Noise::UnknownSender);
                }
            }
            if let Some(line) = log.record(Noise::UnknownSender, 1, || "pid 1".into(), now) {
                lines += 1;
                counted += line.count(Noise::UnknownSender);
            }
        }
        if let Some(line) = log.flush(t0 + Duration::from_secs(13)) {
            lines += 1;
            counted += line.count(Noise::UnknownSender);
        }
        assert!(lines <= 13, "{lines} lines");
        assert_eq!(counted, 1_200_000, "every datagram counted once");
    }

    #[tokio::test]
    async fn receives_with_credentials_and_refuses_oversize() {
        let dir = std::env::temp_dir().join(format!("notify-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("sock");
        let sock = NotifySocket::bind(&path, None).expect("bind");
        let client = std::os::unix::net::UnixDatagram::unbound().expect("client");
        client
            .send_to(&vec![b'a'; NOTIFY_BUFFER_MAX + 10], &path)
            .expect("send big");
        client.send_to(b"READY=1", &path).expect("send");
        let me = Pid::from_raw(std::process::id() as i32);
        match sock.recv().await.expect("recv") {
            Datagram::Refused {
                why: Noise::Oversize,
                sender,
                descriptors,
            } => {
                assert_eq!(sender, Some(me));
                assert!(descriptors.is_empty());
            }
            other => panic!("expected an oversize datagram, got {other:?}"),
        }
        match sock.recv().await.expect("recv") {
            Datagram::Received(got) => {
                assert_eq!(got.pid, me);
                assert_eq!(got.payload, b"READY=1");
            }
            other => panic!("expected READY=1, got {other:?}"),
        }
        assert!(sock.try_recv().expect("try_recv").is_none());
        drop(sock);
        assert!(!path.exists(), "socket file removed on drop");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_closer_closes_off_the_calling_thread() {
        let closer = DescriptorCloser::start().expect("closer");
        let (read, write) = nix::unistd::pipe().expect("pipe");
        closer.close(vec![write]);
        // The read end sees the end of file once the closer closed the only write end.
        let mut file = std::fs::File::from(read);
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut rest).expect("end of file");
        assert!(rest.is_empty());
    }
}
