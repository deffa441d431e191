//! Advisory locks on files (`flock`), dropped by the kernel when their holder dies.

use std::io;

use nix::errno::Errno;

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
