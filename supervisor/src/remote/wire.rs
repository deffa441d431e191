//! What travels on a link: the link itself (`SOCK_SEQPACKET`, whole messages of bounded
//! size with descriptors attached) and the closed sets of messages each side sends.

use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::Interest;

use super::MAX_MESSAGE;
use crate::call::{Answer, Call, SupervisorError};
use crate::os;
use crate::snapshot::{ProcessSnapshot, Snapshot};
use crate::upward::Upward;

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

#[cfg(test)]
mod tests {
    use super::*;

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
