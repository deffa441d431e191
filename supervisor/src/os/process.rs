//! Processes as the supervisor sees them: becoming their subreaper, reaping them (the
//! process's only `waitpid`), signalling their groups.

use std::io;

use nix::errno::Errno;
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
