//! Steering programs: classic BPF attached to a `SO_REUSEPORT` group picks the socket each
//! datagram or connection goes to.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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
