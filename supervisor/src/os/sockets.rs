//! What a socket is and who is on its other end: its `SO_REUSEPORT` group, its identity,
//! what waits in its queues, its peer's supplementary groups.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What kind of socket a descriptor is and where it listens, if it is a bound IP socket: the
/// key of its `SO_REUSEPORT` group (sockets of one group share type and local address).
pub fn socket_group(fd: BorrowedFd<'_>) -> Option<(SocketType, std::net::SocketAddr)> {
    use nix::sys::socket::{getsockname, getsockopt, sockopt, SockType, SockaddrStorage};
    if !getsockopt(&fd, sockopt::ReusePort).ok()? {
        return None;
    }
    let kind = match getsockopt(&fd, sockopt::SockType).ok()? {
        SockType::Datagram => SocketType::Datagram,
        SockType::Stream => SocketType::Stream,
        _ => return None,
    };
    let local: SockaddrStorage = getsockname(fd.as_raw_fd()).ok()?;
    let addr = if let Some(v4) = local.as_sockaddr_in() {
        std::net::SocketAddr::from(std::net::SocketAddrV4::from(*v4))
    } else if let Some(v6) = local.as_sockaddr_in6() {
        std::net::SocketAddr::from(std::net::SocketAddrV6::from(*v6))
    } else {
        return None;
    };
    Some((kind, addr))
}

/// The two kinds of socket a reuseport group can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SocketType {
    /// UDP: the group is joined at `bind`.
    Datagram,
    /// TCP: the group is joined at `listen`.
    Stream,
}

/// The identity of the open socket behind a descriptor (its inode), which every duplicate
/// shares.
pub fn socket_inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(nix::sys::stat::fstat(fd)?.st_ino)
}

/// What waits in a socket for its owner to take: for a UDP socket the size of the next
/// datagram (`FIONREAD`, 0 when none), for a listening TCP socket the length of its accept
/// queue (`TCP_INFO`'s `tcpi_unacked` means that on a listener).
pub fn queued(fd: BorrowedFd<'_>, kind: SocketType) -> io::Result<u64> {
    match kind {
        SocketType::Datagram => {
            let mut n: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int through the pointer, which is valid for the
            // call; the descriptor is borrowed.
            let rc =
                unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, std::ptr::addr_of_mut!(n)) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(u64::try_from(n).unwrap_or(0))
        }
        SocketType::Stream => {
            // SAFETY: `tcp_info` is plain old data; all zeroes is a valid value.
            let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            // SAFETY: the kernel writes at most `len` bytes into `info`, which is valid and
            // that large, and stores the length it wrote in `len`; the descriptor is borrowed.
            let rc = unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_INFO,
                    std::ptr::addr_of_mut!(info).cast(),
                    &mut len,
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(u64::from(info.tcpi_unacked))
        }
    }
}

/// `SO_PEERGROUPS` (Linux 4.13): libc does not export it for Linux yet. SPARC numbers its
/// socket options apart from the generic ones.
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_PEERGROUPS: libc::c_int = 0x003d;
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_PEERGROUPS: libc::c_int = 59;

/// The most supplementary groups a process can have (`NGROUPS_MAX` on Linux).
const MAX_PEER_GROUPS: usize = 65_536;

/// The supplementary groups of the process at the other end of a connected unix socket, as
/// they were when it connected (`SO_PEERGROUPS`). Fails with `ENOPROTOOPT` on kernels older
/// than 4.13.
pub fn peer_groups(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    loop {
        let mut len = libc::socklen_t::try_from(groups.len() * std::mem::size_of::<libc::gid_t>())
            .map_err(|_| io::Error::from_raw_os_error(libc::ERANGE))?;
        // SAFETY: the kernel writes at most `len` bytes into `groups`, which is valid and that
        // large, and stores the length it wrote (or, with ERANGE, the length it needs) in
        // `len`; the descriptor is borrowed, so it is open.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let wanted =
            usize::try_from(len).unwrap_or(usize::MAX) / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(wanted);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE)
            || wanted <= groups.len()
            || wanted > MAX_PEER_GROUPS
        {
            return Err(e);
        }
        groups.resize(wanted, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_peer_of_a_socket_pair_has_our_supplementary_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let mut theirs = peer_groups(a.as_fd()).expect("SO_PEERGROUPS");
        let mut ours: Vec<u32> = nix::unistd::getgroups()
            .expect("getgroups")
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        theirs.sort_unstable();
        ours.sort_unstable();
        assert_eq!(theirs, ours);
    }
}
