//! `SOCK_SEQPACKET` links: whole messages with descriptors attached (`SCM_RIGHTS`) and the
//! sender's credentials, and buffers sized for the largest message.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// A connected pair of `SOCK_SEQPACKET` sockets (message boundaries kept, end of file seen
/// when the peer is gone), both close-on-exec and non-blocking.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )
    .map_err(io::Error::from)
}

/// What the kernel keeps of a `SOCK_SEQPACKET` send buffer for itself: it refuses a packet
/// longer than the send buffer less these bytes (`EMSGSIZE`, `unix_dgram_sendmsg`).
const SEQPACKET_OVERHEAD: usize = 32;

/// Size both buffers of a `SOCK_SEQPACKET` socket for packets of `packet` bytes and return
/// the longest packet it can send now. Privileged, `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` go past
/// `net.core.wmem_max`/`rmem_max`; otherwise the kernel caps what we ask at those limits
/// (and doubles it, for its own bookkeeping). The buffers stay with the socket when it is
/// handed to another process.
pub fn size_packet_buffers(fd: BorrowedFd<'_>, packet: usize) -> io::Result<usize> {
    use nix::sys::socket::{setsockopt, sockopt};
    let wanted = packet + SEQPACKET_OVERHEAD;
    if setsockopt(&fd, sockopt::SndBufForce, &wanted).is_err() {
        setsockopt(&fd, sockopt::SndBuf, &wanted)?;
    }
    if setsockopt(&fd, sockopt::RcvBufForce, &wanted).is_err() {
        setsockopt(&fd, sockopt::RcvBuf, &wanted)?;
    }
    packet_capacity(fd)
}

/// The longest packet a `SOCK_SEQPACKET` socket can send, from its send buffer.
pub fn packet_capacity(fd: BorrowedFd<'_>) -> io::Result<usize> {
    use nix::sys::socket::{getsockopt, sockopt};
    let sndbuf = getsockopt(&fd, sockopt::SndBuf)?;
    Ok(sndbuf.saturating_sub(SEQPACKET_OVERHEAD))
}

/// Send one packet with `fds` attached, without blocking and without SIGPIPE.
pub fn send_packet(fd: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(data)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() {
        &[]
    } else {
        &[ControlMessage::ScmRights(fds)]
    };
    let sent = sendmsg::<()>(
        fd.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        None,
    )
    .map_err(io::Error::from)?;
    if sent != data.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "packet cut short"));
    }
    Ok(())
}

/// One received packet or datagram: its length in the buffer, the descriptors that came with
/// it (ours to keep or drop), the sender's pid when the socket passes credentials, and whether
/// data or descriptors did not fit (the packet must then be refused).
pub struct Packet {
    pub len: usize,
    pub fds: Vec<OwnedFd>,
    pub sender: Option<i32>,
    pub truncated: bool,
}

/// The most descriptors one packet may carry.
pub const MAX_PACKET_FDS: usize = 64;

/// Receive one packet without blocking; `len == 0` without descriptors is the end of file
/// (on a stream or seqpacket socket).
pub fn recv_packet(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Packet> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixCredentials};
    let mut cmsg = nix::cmsg_space!(UnixCredentials, [RawFd; MAX_PACKET_FDS]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        fd.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let truncated = msg
        .flags
        .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
    let len = msg.bytes;
    let mut fds = Vec::new();
    let mut sender = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmRights(raw) => {
                    for fd in raw {
                        // SAFETY: the kernel just installed this descriptor for us
                        // (close-on-exec) in recvmsg; nothing else owns it.
                        fds.push(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
                    }
                }
                ControlMessageOwned::ScmCredentials(creds) => sender = Some(creds.pid()),
                _ => {}
            }
        }
    }
    Ok(Packet {
        len,
        fds,
        sender,
        truncated,
    })
}
