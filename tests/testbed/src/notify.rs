//! A stand-in for systemd's notify socket: tests hand its path to the daemon as
//! `NOTIFY_SOCKET` and wait for `READY=1`, `STOPPING=1` and friends with a timeout.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

pub struct NotifyListener {
    socket: UnixDatagram,
    path: PathBuf,
    /// Every message received so far.
    pub received: Vec<String>,
}

impl NotifyListener {
    pub fn bind(path: &Path) -> Result<NotifyListener> {
        let _ = std::fs::remove_file(path);
        let socket = UnixDatagram::bind(path)?;
        // Let an unprivileged daemon send to it.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        Ok(NotifyListener {
            socket,
            path: path.to_owned(),
            received: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wait for a message with a line equal to `line` among those received after the first
    /// `seen` messages (`received.len()` taken before the action that should cause it).
    pub fn wait_for_after(&mut self, seen: usize, line: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self
                .received
                .iter()
                .skip(seen)
                .find(|m| m.lines().any(|l| l == line))
            {
                return Ok(m.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "no new {line:?} notification within {timeout:?}; got {:?}",
                    &self.received[seen.min(self.received.len())..]
                );
            }
            self.receive_one(left)?;
        }
    }

    /// Wait for a message with a line starting with `prefix` (a `STATUS=` whose figures vary);
    /// returns that line.
    pub fn wait_for_prefix(&mut self, prefix: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self
                .received
                .iter()
                .flat_map(|m| m.lines())
                .find(|l| l.starts_with(prefix));
            if let Some(line) = found {
                return Ok(line.to_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "no notification starting {prefix:?} within {timeout:?}; got {:?}",
                    self.received
                );
            }
            self.receive_one(left)?;
        }
    }

    /// Read every message waiting into `received`, as a service manager does (a sender to
    /// a full queue would wait: `net.unix.max_dgram_qlen` is 10 unless systemd raised it).
    pub fn drain(&mut self) -> Result<()> {
        let mut buf = vec![0u8; 8192];
        self.socket.set_nonblocking(true)?;
        let drained = loop {
            match self.socket.recv(&mut buf) {
                Ok(n) => self
                    .received
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(e.into()),
            }
        };
        self.socket.set_nonblocking(false)?;
        drained
    }

    /// Read one message into `received`, waiting at most `timeout` (no error on timeout).
    fn receive_one(&mut self, timeout: Duration) -> Result<()> {
        let mut buf = vec![0u8; 8192];
        self.socket.set_read_timeout(Some(timeout))?;
        match self.socket.recv(&mut buf) {
            Ok(n) => {
                self.received
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Wait for a message that has a line equal to `line`; returns that message.
    pub fn wait_for(&mut self, line: &str, timeout: Duration) -> Result<String> {
        if let Some(m) = self.received.iter().find(|m| m.lines().any(|l| l == line)) {
            return Ok(m.clone());
        }
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 8192];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "no {line:?} notification within {timeout:?}; got {:?}",
                    self.received
                );
            }
            self.socket.set_read_timeout(Some(left))?;
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                    self.received.push(msg.clone());
                    if msg.lines().any(|l| l == line) {
                        return Ok(msg);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    bail!(
                        "no {line:?} notification within {timeout:?}; got {:?}",
                        self.received
                    )
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for NotifyListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
