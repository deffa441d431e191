//! Child output: each child's stdout and stderr are drained continuously into tracing events
//! that carry the child's name and pid. Lines are decoded lossily and cut at a bounded length,
//! so no child can block on a full pipe or make us allocate without limit.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

/// Longest line emitted as one event; longer ones are split.
pub const MAX_LINE: usize = 4096;

/// Lines kept per service for error reports (`SupervisorHandle::output_tail`).
pub const TAIL_LINES: usize = 20;

/// The longest line kept in a tail, in bytes: a tail is small enough for one message on a
/// link ([`crate::remote`]), whatever the process wrote.
pub const TAIL_LINE: usize = 1024;

/// The last lines a service wrote, shared between its drain tasks and the actor.
pub type Tail = Arc<Mutex<VecDeque<String>>>;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The level a child's output line is logged at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputLevel {
    Error,
    Warn,
    Info,
}

/// Decides the level of each output line of every child, from the line (cut at
/// [`MAX_LINE`]) and its stream. It must read a bounded prefix of the line only: it runs in
/// the supervisor's process on what children wrote.
pub type LineLevels = fn(&str, Stream) -> OutputLevel;

/// The levels when nothing is known of what children write: standard error is a warning,
/// standard output information.
pub fn levels_by_stream(_line: &str, stream: Stream) -> OutputLevel {
    match stream {
        Stream::Stdout => OutputLevel::Info,
        Stream::Stderr => OutputLevel::Warn,
    }
}

/// One output stream of one process of a service, and what its lines go to.
pub struct Lines {
    /// The service's name and the process's pid, on every line logged.
    pub name: String,
    pub pid: Pid,
    pub stream: Stream,
    /// The service's last lines, for [`crate::SupervisorHandle::output_tail`].
    pub tail: Tail,
    /// The level each line is logged at.
    pub levels: LineLevels,
}

/// Drain `fd` until EOF (every writer, grandchildren included, has closed it), or until `stop`
/// fires (the supervisor hands the pipe to its next process image).
pub async fn drain(fd: OwnedFd, lines: Lines, stop: CancellationToken) {
    let (name, pid) = (&lines.name, lines.pid.as_raw());
    if let Err(e) = crate::os::set_nonblocking(&fd) {
        tracing::warn!(name, pid, error = %e, "cannot read child output");
        return;
    }
    let mut rx = match pipe::Receiver::from_owned_fd(fd) {
        Ok(rx) => rx,
        Err(e) => {
            tracing::warn!(name, pid, error = %e, "cannot read child output");
            return;
        }
    };
    let mut pending: Vec<u8> = Vec::with_capacity(256);
    let mut buf = [0u8; 8192];
    loop {
        let read = tokio::select! {
            read = rx.read(&mut buf) => read,
            () = stop.cancelled() => break,
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(name, pid, error = %e, "child output closed");
                break;
            }
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                lines.emit(&pending);
                pending.clear();
            } else {
                pending.push(b);
                if pending.len() >= MAX_LINE {
                    lines.emit(&pending);
                    pending.clear();
                }
            }
        }
    }
    if !pending.is_empty() {
        lines.emit(&pending);
    }
}

impl Lines {
    /// Log one line at its level and keep it in the tail.
    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        let (name, pid, stream) = (&self.name, self.pid.as_raw(), self.stream.as_str());
        match (self.levels)(text, self.stream) {
            OutputLevel::Error => {
                tracing::error!(target: "child", name, pid, stream, "{text}");
            }
            OutputLevel::Warn => {
                tracing::warn!(target: "child", name, pid, stream, "{text}");
            }
            OutputLevel::Info => {
                tracing::info!(target: "child", name, pid, stream, "{text}");
            }
        }
        if let Ok(mut t) = self.tail.lock() {
            if t.len() >= TAIL_LINES {
                t.pop_front();
            }
            // Cut where it is received: what is kept is bounded, one printable line.
            t.push_back(crate::text::one_line(text, TAIL_LINE));
        }
    }
}
