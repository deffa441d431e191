//! Descriptor hygiene: close-on-exec for everything not meant for a child, descriptors
//! inherited or lent taken over, doorbell pipes.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};

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

/// A duplicate (close-on-exec) of a descriptor a caller lent us for as long as a service
/// exists ([`crate::SupervisorHandle::add`]).
pub fn duplicate_raw(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the borrow lives only for this call; the caller of `add` keeps `fd` open for as
    // long as the service exists, and this runs while it is being registered. A descriptor
    // that is not open makes the duplication fail with EBADF.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    borrowed.try_clone_to_owned()
}
