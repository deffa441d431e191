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
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Spawn `argv` in its own process group with exactly the environment `env`, stdin from
/// /dev/null, and stdout/stderr into fresh pipes. `keep_fds` are descriptors passed on at the
/// same numbers (cleared of close-on-exec in the child only); everything else we hold is
/// close-on-exec. Signal mask and dispositions are reset by std before exec.
pub fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
    keep_fds: &[RawFd],
    user: Option<crate::spec::Credentials>,
) -> io::Result<Spawned> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    if let Some(c) = user {
        // std clears supplementary groups (as root), then setgid, then setuid, in the child.
        cmd.uid(c.uid).gid(c.gid);
    }
    if !keep_fds.is_empty() {
        let keep = keep_fds.to_vec();
        // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which
        // is async-signal-safe; it allocates nothing (the Vec was built before fork).
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &keep {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn()?;
    let pid =
        Pid::from_raw(i32::try_from(child.id()).map_err(|_| io::Error::other("pid out of range"))?);
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no stdout pipe"))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| io::Error::other("no stderr pipe"))?;
    // `child` is dropped without waiting: reaping belongs to `reap_one` alone.
    Ok(Spawned {
        pid,
        stdout: stdout.into(),
        stderr: stderr.into(),
    })
}

/// Close a descriptor that arrived with a notification datagram.
pub fn close_received_fd(fd: RawFd) {
    // SAFETY: the kernel just installed this descriptor for us in recvmsg; nothing else owns
    // it, so taking ownership and dropping it closes it exactly once.
    drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
}

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

/// Set or clear `O_NONBLOCK` on a descriptor we own.
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags))?;
    let _ = fd.as_raw_fd();
    Ok(())
}
