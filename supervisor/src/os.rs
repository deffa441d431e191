//! Every raw system call the supervisor makes, in one place: becoming a subreaper, reaping,
//! signalling process groups, spawning, and file-descriptor hygiene. The rest of the crate
//! sees typed results only.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::spec::ExitStatus;

/// Make orphaned descendants our children, so we can reap them and nothing escapes.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Whether we are the init process of our PID namespace.
pub fn is_pid1() -> bool {
    std::process::id() == 1
}

/// Reap one exited child, if any, without blocking. This is the only `waitpid` of the
/// process: every child, ours or an adopted orphan, is reaped here.
pub fn reap_one() -> io::Result<Option<(Pid, ExitStatus)>> {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => return Ok(Some((pid, ExitStatus::Code(code)))),
            Ok(WaitStatus::Signaled(pid, signal, core_dumped)) => {
                return Ok(Some((
                    pid,
                    ExitStatus::Signaled {
                        signal: signal as i32,
                        core_dumped,
                    },
                )))
            }
            // Stopped/continued children are not exits; keep looking.
            Ok(WaitStatus::StillAlive) => return Ok(None),
            Ok(_) => continue,
            Err(Errno::ECHILD) => return Ok(None),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Send `signal` to the process group led by `pid`. A group that is already gone is not an
/// error. Callers only pass pids they have not reaped yet, so the group id cannot have been
/// reused.
pub fn signal_group(pid: Pid, signal: Signal) -> io::Result<()> {
    match killpg(pid, signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether any process, zombies included, is still in the process group `pgid`. Zombies
/// count until they are reaped, so an empty group means every member was reaped.
pub fn group_exists(pgid: Pid) -> bool {
    // Signal 0 checks existence and permission without sending anything. EPERM means the
    // group exists but is not ours to signal.
    !matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// A process we started, with the read ends of its output pipes.
pub struct Spawned {
    pub pid: Pid,
    /// The read ends of its output pipes, when its output is captured.
    pub output: Option<(OwnedFd, OwnedFd)>,
}

/// A descriptor handed to a child: `ours` appears in the child as `child` (the same number
/// when they are equal), without close-on-exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdPass {
    pub ours: RawFd,
    pub child: RawFd,
}

/// Spawn `argv` in its own process group with exactly the environment `env`, stdin from
/// /dev/null, and stdout/stderr into fresh pipes. `pass` are descriptors placed in the child
/// at the numbers it expects; everything else we hold is close-on-exec. Signal mask and
/// dispositions are reset by std before exec. The child is killed (SIGKILL) if we die, checked
/// right after the request against the race of dying before it.
pub fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
    pass: &[FdPass],
    user: Option<(crate::spec::Credentials, crate::spec::KeptCapabilities)>,
    output: crate::spec::Output,
) -> io::Result<Spawned> {
    let mut cmd = command(argv, env, cwd, output)?;
    // Not root and already these credentials: there is nothing to switch (nor could we).
    let euid = nix::unistd::geteuid();
    let user = user.filter(|(c, _)| {
        euid.is_root() || c.uid != euid.as_raw() || c.gid != nix::unistd::getegid().as_raw()
    });
    // Capabilities to keep through a switch of user: then the switch is ours, in the child.
    let mut switch = None;
    match user {
        Some((c, crate::spec::KeptCapabilities::None)) => {
            // std clears supplementary groups (as root), then setgid, then setuid.
            cmd.uid(c.uid).gid(c.gid);
        }
        Some((c, crate::spec::KeptCapabilities::BindServicePorts)) => {
            switch = Some((c, 1u32 << CAP_NET_BIND_SERVICE));
        }
        None => {}
    }
    let no_new_privs = user.is_some();
    let pass = pass.to_vec();
    // Descriptors are first moved above every number involved, so that placing one can never
    // overwrite another that is still to be placed.
    let above = pass
        .iter()
        .flat_map(|p| [p.ours, p.child])
        .max()
        .unwrap_or(2)
        .max(2)
        + 1;
    let parent = nix::unistd::getpid().as_raw();
    // SAFETY: the closure runs in the forked child before exec (after std changed the
    // credentials, so the parent-death signal is not cleared by that change) and only calls
    // prctl, getppid, fcntl and dup2, which are async-signal-safe; it allocates nothing (the
    // Vec was built before fork and is only read).
    unsafe {
        cmd.pre_exec(move || {
            // A change of credentials clears the parent-death signal: it comes first.
            if let Some((c, kept)) = switch {
                switch_user_keeping(c, kept)?;
            }
            if no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            die_with_parent(parent)?;
            place_descriptors(&pass, above)
        });
    }
    let mut child = cmd.spawn()?;
    let pid =
        Pid::from_raw(i32::try_from(child.id()).map_err(|_| io::Error::other("pid out of range"))?);
    let output = match (child.stdout.take(), child.stderr.take()) {
        (Some(out), Some(err)) => Some((out.into(), err.into())),
        _ => None,
    };
    // `child` is dropped without waiting: reaping belongs to `reap_one` alone.
    Ok(Spawned { pid, output })
}

/// The command for `argv` in its own process group, with exactly `env`, no standard input,
/// and its output captured or not.
fn command(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
    output: crate::spec::Output,
) -> io::Result<Command> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(0);
    if output == crate::spec::Output::Captured {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    Ok(cmd)
}

/// In a forked child: be SIGKILLed when `parent` dies, and end now if it already did.
/// Only async-signal-safe system calls.
///
/// # Safety
/// Called between fork and exec only.
unsafe fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl and getppid touch only this process; _exit ends it without running
    // anything of the parent's state.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
        // We may have died between fork and prctl: then nobody will send the signal.
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
    Ok(())
}

/// In a forked child: place each of `pass` at its number, not close-on-exec, first moving
/// every descriptor that must move above `above`. Only async-signal-safe system calls, and
/// no allocation.
///
/// # Safety
/// Called between fork and exec only (it overwrites descriptors by number).
unsafe fn place_descriptors(pass: &[FdPass], above: RawFd) -> io::Result<()> {
    let mut moved = [0 as RawFd; MAX_PASSED_FDS];
    if pass.len() > MAX_PASSED_FDS {
        return Err(io::Error::from_raw_os_error(libc::EMFILE));
    }
    // SAFETY: fcntl and dup2 on descriptor numbers; the numbers we overwrite are the ones
    // the child is to receive, and the originals were first moved out of their way.
    unsafe {
        for (slot, p) in moved.iter_mut().zip(pass) {
            if p.ours == p.child {
                *slot = p.ours;
                continue;
            }
            let fd = libc::fcntl(p.ours, libc::F_DUPFD_CLOEXEC, above);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            *slot = fd;
        }
        for (&from, p) in moved.iter().zip(pass) {
            if from == p.child {
                let flags = libc::fcntl(from, libc::F_GETFD);
                if flags < 0 || libc::fcntl(from, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(from, p.child) < 0 {
                // dup2 leaves the new descriptor without close-on-exec.
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// `CAP_NET_BIND_SERVICE` (linux/capability.h).
const CAP_NET_BIND_SERVICE: u32 = 10;

/// `_LINUX_CAPABILITY_VERSION_3`: capability sets of two 32-bit words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`, one of the two words of each set.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// In a forked child, as root: become `c` (no supplementary groups) keeping exactly the
/// capabilities of the low word `kept`, as effective, permitted, inheritable and ambient
/// capabilities, so they survive `execve`. Only async-signal-safe system calls.
///
/// # Safety
/// Called between fork and exec only (it changes the calling process's credentials).
unsafe fn switch_user_keeping(c: crate::spec::Credentials, kept: u32) -> io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: plain system calls on this process's own credentials; `header` and `data` live
    // on this stack frame for the duration of `capset`, which only reads them.
    unsafe {
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0))?;
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(c.gid, c.gid, c.gid))?;
        check(libc::setresuid(c.uid, c.uid, c.uid))?;
        let header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [
            CapData {
                effective: kept,
                permitted: kept,
                inheritable: kept,
            },
            CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        let r = libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr());
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        for cap in 0..32u32 {
            if kept & (1 << cap) != 0 {
                check(libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    libc::c_ulong::from(cap),
                    0,
                    0,
                ))?;
            }
        }
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0))?;
    }
    Ok(())
}

/// The most descriptors one child can be handed.
pub const MAX_PASSED_FDS: usize = 1024;

/// Mark every inherited descriptor above stderr close-on-exec, except `keep`, so that our
/// children inherit only what we mean them to.
pub fn cloexec_inherited_fds(keep: &[RawFd]) -> io::Result<()> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let name = entry?.file_name();
        if let Some(fd) = name.to_str().and_then(|s| s.parse::<RawFd>().ok()) {
            if fd > 2 && !keep.contains(&fd) {
                fds.push(fd);
            }
        }
    }
    for fd in fds {
        // SAFETY: the descriptor number came from /proc/self/fd a moment ago; the borrow lives
        // only for this fcntl call. A descriptor that closed in between (the read_dir handle
        // itself) makes fcntl fail with EBADF, which we ignore.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        match fcntl(borrowed, FcntlArg::F_GETFD) {
            Ok(flags) => {
                let flags = FdFlag::from_bits_truncate(flags) | FdFlag::FD_CLOEXEC;
                fcntl(borrowed, FcntlArg::F_SETFD(flags))?;
            }
            Err(Errno::EBADF) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Set `FD_CLOEXEC` on a descriptor we own.
pub fn set_cloexec(fd: &OwnedFd) -> io::Result<()> {
    let flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD)?) | FdFlag::FD_CLOEXEC;
    fcntl(fd, FcntlArg::F_SETFD(flags))?;
    Ok(())
}

/// Set or clear `O_NONBLOCK` on a descriptor we own.
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags))?;
    let _ = fd.as_raw_fd();
    Ok(())
}

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

/// A copy of a memory-backed file holding `data`, sealed against every change (a state the
/// next incarnation of a service reads back, which nobody can alter meanwhile).
pub fn sealed_memfd(name: &str, data: &[u8]) -> io::Result<OwnedFd> {
    use nix::fcntl::SealFlag;
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
    let mut file = std::fs::File::from(fd);
    io::Write::write_all(&mut file, data)?;
    // Whoever receives it reads from the start (the offset is shared with every copy).
    io::Seek::rewind(&mut file)?;
    let fd = OwnedFd::from(file);
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SEAL
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE,
        ),
    )?;
    Ok(fd)
}

/// A pipe used as a doorbell: both ends close-on-exec and non-blocking, so ringing never
/// waits (a write that finds the pipe full finds the bell rung already) and the side that
/// answers reads every ring at once. Returns (read end, write end).
pub fn doorbell_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?)
}

/// Whether descriptor `fd` is open (an error saying which one when it is not).
pub fn check_open(fd: RawFd) -> io::Result<()> {
    // SAFETY: the borrow lives only for this fcntl call, which tells whether `fd` is open.
    fcntl(unsafe { BorrowedFd::borrow_raw(fd) }, FcntlArg::F_GETFD)
        .map(drop)
        .map_err(|e| io::Error::other(format!("descriptor {fd}: {e}")))
}

/// Clear `FD_CLOEXEC` on `fd`, so that it stays open across our own `execve` (an in-place
/// upgrade hands it to the next image of this process).
pub fn clear_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD)?) - FdFlag::FD_CLOEXEC;
    fcntl(fd, FcntlArg::F_SETFD(flags))?;
    Ok(())
}

/// Take ownership of descriptor `fd`, inherited from our parent at a known number; an error
/// if it is not open.
pub fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the borrow lives only for this fcntl call, which tells whether `fd` is open.
    fcntl(unsafe { BorrowedFd::borrow_raw(fd) }, FcntlArg::F_GETFD)?;
    // SAFETY: `fd` is open, and by the protocol with our parent nothing else in this process
    // owns it: it was inherited at this number for us to take.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Lock `file` exclusively without waiting (`flock`); false when another holds it. The lock
/// lives as long as the open file description, and the kernel drops it when its holder dies.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    match nix::fcntl::Flock::lock(
        file.try_clone()?,
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    ) {
        Ok(lock) => {
            // The lock belongs to the open file description that `file` shares; keep it
            // when the clone closes.
            std::mem::forget(lock);
            Ok(true)
        }
        Err((_, Errno::EWOULDBLOCK)) => Ok(false),
        Err((_, e)) => Err(e.into()),
    }
}

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

/// Attach a classic BPF program to the `SO_REUSEPORT` group of `fd` (`SO_ATTACH_REUSEPORT_CBPF`):
/// from now on the kernel picks the group's socket whose index the program returns (an index
/// out of range falls back to its hash). `program` must be a valid classic BPF program.
pub fn attach_reuseport_program(
    fd: BorrowedFd<'_>,
    program: &[libc::sock_filter],
) -> io::Result<()> {
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads the instructions (it copies them in).
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `len` initialised instructions that outlive the call; the
    // option value is exactly a `sock_fprog`, and the kernel copies the program before
    // returning. The descriptor is borrowed, so it is open.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::addr_of!(fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Detach the program of `fd`'s `SO_REUSEPORT` group: the kernel's hash picks again. A group
/// without a program is not an error.
pub fn detach_reuseport_program(fd: BorrowedFd<'_>) -> io::Result<()> {
    let zero: libc::c_int = 0;
    // SAFETY: the option value is an int that outlives the call; the descriptor is borrowed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DETACH_REUSEPORT_BPF,
            std::ptr::addr_of!(zero).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
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

/// A duplicate (close-on-exec) of a descriptor a caller lent us for as long as a service
/// exists ([`crate::SupervisorHandle::add`]).
pub fn duplicate_raw(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the borrow lives only for this call; the caller of `add` keeps `fd` open for as
    // long as the service exists, and this runs while it is being registered. A descriptor
    // that is not open makes the duplication fail with EBADF.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    borrowed.try_clone_to_owned()
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

/// The limit on open descriptors (`RLIMIT_NOFILE`) before and after [`raise_open_files_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesLimit {
    /// The soft limit the process was started with.
    pub was: u64,
    /// The soft limit now in force (the hard limit, unless raising failed).
    pub now: u64,
}

/// Raise the soft limit on open descriptors to the hard limit. The soft limit that services
/// start with (1,024 under systemd and most runtimes) exists for programs that still use
/// `select(2)`; nothing here does, and the root holds two descriptors of every listening
/// socket of every worker. Children inherit the raised limit.
pub fn raise_open_files_limit() -> io::Result<OpenFilesLimit> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= hard {
        return Ok(OpenFilesLimit {
            was: soft,
            now: soft,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(OpenFilesLimit {
        was: soft,
        now: hard,
    })
}

/// The soft limit on open descriptors now in force.
pub fn open_files_limit() -> io::Result<u64> {
    let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    Ok(soft)
}

/// Who a unix socket's file belongs to and who may connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits of the socket's file (connecting needs write permission).
    pub mode: u32,
}

/// Bind a unix socket at `path` with `access`, never following a link that someone who can
/// write `path`'s directory planted there, and never leaving a moment when the socket is
/// reachable with other owners or permissions.
///
/// The socket is bound in a fresh directory only we can write (mode 0700, checked through its
/// descriptor), given its owner and mode there through that descriptor, then renamed over
/// `path` (`rename` replaces a link or a stale socket; it never follows one). A directory
/// swapped in under the same name between our `mkdir` and `bind` makes every step through our
/// descriptor fail: the socket is then closed and an error returned. A regular file or a
/// directory at `path` is an error naming it (a configuration mistake, not something to
/// overwrite).
pub fn bind_unix_private<S>(
    path: &Path,
    access: SocketAccess,
    bind: impl FnOnce(&Path) -> io::Result<S>,
) -> io::Result<S> {
    use nix::fcntl::{open, renameat, AtFlags, OFlag};
    use nix::sys::stat::{fchmodat, fstat, fstatat, FchmodatFlags, Mode, SFlag};
    use nix::unistd::{fchownat, unlinkat, Gid, Uid, UnlinkatFlags};

    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file in a directory", path.display()),
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() || meta.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Ok(_) | Err(_) => {}
    }
    let private = make_private_dir(parent)?;
    let dir = match open(
        &private,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(e) => {
            let _ = std::fs::remove_dir(&private);
            return Err(e.into());
        }
    };
    let outcome = (|| {
        let meta = fstat(&dir)?;
        if meta.st_uid != nix::unistd::geteuid().as_raw() || meta.st_mode & 0o077 != 0 {
            return Err(io::Error::other(format!(
                "{} was replaced by someone else's directory",
                private.display()
            )));
        }
        // A unix socket's path is short (108 bytes); the directory's descriptor names the
        // same place in fewer when the path grew too long.
        let mut at = private.join(name);
        if at.as_os_str().len() >= SUN_PATH_MAX {
            at = Path::new("/proc/self/fd")
                .join(dir.as_raw_fd().to_string())
                .join(name);
        }
        let socket = bind(&at)?;
        // From here on only our directory's descriptor names the file: whoever can write the
        // parent cannot reach into it.
        let meta = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if SFlag::from_bits_truncate(meta.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
            return Err(io::Error::other(format!(
                "{} is not the socket we bound",
                private.join(name).display()
            )));
        }
        fchownat(
            &dir,
            name,
            Some(Uid::from_raw(access.uid)),
            Some(Gid::from_raw(access.gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        fchmodat(
            &dir,
            name,
            Mode::from_bits_truncate(access.mode),
            FchmodatFlags::FollowSymlink,
        )?;
        renameat(&dir, name, nix::fcntl::AT_FDCWD, path)?;
        Ok(socket)
    })();
    if outcome.is_err() {
        let _ = unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir);
    }
    drop(dir);
    let _ = std::fs::remove_dir(&private);
    outcome
}

/// Whether a unix socket whose address (`getsockname`) is `bound` is the one
/// [`bind_unix_private`] bound for `path`: the kernel keeps the address it was bound at, in
/// the private directory beside `path`, or under `/proc/self/fd` when that was too long.
pub fn bound_for(bound: &Path, path: &Path) -> bool {
    if bound == path {
        return true;
    }
    let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
        return false;
    };
    let Some(private) = bound.parent() else {
        return false;
    };
    let named = bound.file_name() == Some(name);
    let beside = private.parent() == Some(parent)
        && private
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PRIVATE_DIR_PREFIX));
    let by_descriptor = private
        .parent()
        .is_some_and(|p| p == Path::new("/proc/self/fd"));
    named && (beside || by_descriptor)
}

/// How the private directories of [`bind_unix_private`] begin.
const PRIVATE_DIR_PREFIX: &str = ".bind-";

/// Room for a path in `sockaddr_un` (108 bytes with its terminating NUL).
const SUN_PATH_MAX: usize = 108;

/// A new directory in `parent` that only we can enter (its name is new: an existing one, ours
/// from a crash or planted, is never reused).
fn make_private_dir(parent: &Path) -> io::Result<std::path::PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut last = None;
    for attempt in 0..8u32 {
        let candidate = parent.join(format!(
            "{PRIVATE_DIR_PREFIX}{:08x}",
            nanos ^ std::process::id().rotate_left(16) ^ attempt.wrapping_mul(0x9e37_79b9)
        ));
        match nix::unistd::mkdir(&candidate, nix::sys::stat::Mode::S_IRWXU) {
            Ok(()) => return Ok(candidate),
            Err(Errno::EEXIST) => last = Some(Errno::EEXIST),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(
        || io::Error::other("no directory name left"),
        io::Error::from,
    ))
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

    /// A scratch directory of the test's own.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kres-os-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    #[test]
    fn a_private_bind_replaces_a_planted_link_and_never_touches_its_target() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = scratch("link");
        let target = dir.join("precious");
        std::fs::write(&target, "secret").expect("target");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("mode");
        let path = dir.join("api.sock");
        std::os::unix::fs::symlink(&target, &path).expect("plant a link");
        let access = SocketAccess {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw() + 1,
            mode: 0o660,
        };
        let listener =
            bind_unix_private(&path, access, |p| std::os::unix::net::UnixListener::bind(p))
                .expect("bind");
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        assert_eq!(meta.mode() & 0o7777, 0o660);
        assert_eq!(meta.gid(), access.gid);
        let precious = std::fs::metadata(&target).expect("target stat");
        assert_eq!(
            precious.mode() & 0o7777,
            0o600,
            "the link's target keeps its mode"
        );
        assert_eq!(precious.gid(), nix::unistd::getegid().as_raw());
        let bound = listener.local_addr().expect("address");
        assert!(bound_for(bound.as_pathname().expect("a path"), &path));
        assert!(!bound_for(&dir.join("other/api.sock"), &path));
        assert!(!bound_for(&dir.join(".bind-1/other.sock"), &path));
        // It is the socket we listen on, and nothing of the private directory is left.
        let _client = std::os::unix::net::UnixStream::connect(&path).expect("connect");
        listener.accept().expect("accept");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_private_bind_refuses_to_replace_a_regular_file_and_cleans_up() {
        let dir = scratch("file");
        let path = dir.join("api.sock");
        std::fs::write(&path, "not a socket").expect("file");
        let access = SocketAccess {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            mode: 0o600,
        };
        let err = bind_unix_private(&path, access, |p| std::os::unix::net::UnixListener::bind(p))
            .expect_err("a regular file stays");
        assert!(err.to_string().contains("api.sock"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("kept"),
            "not a socket"
        );
        // A failing bind leaves no private directory behind.
        let err = bind_unix_private(&dir.join("other.sock"), access, |_| {
            Err::<(), _>(io::Error::other("refused"))
        })
        .expect_err("bind fails");
        assert_eq!(err.to_string(), "refused");
        assert_eq!(std::fs::read_dir(&dir).expect("list").count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .expect("getrlimit");
        let raised = raise_open_files_limit().expect("raise");
        assert_eq!(raised.now, hard);
        assert_eq!(open_files_limit().expect("read"), hard);
    }
}
