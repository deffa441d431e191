//! Sealed memory-backed files: a state handed to a later incarnation that nobody can alter
//! meanwhile.

use std::io;
use std::os::fd::OwnedFd;

use nix::fcntl::{fcntl, FcntlArg};

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
