//! Starting a child: its own process group, an explicit environment, the descriptors it is
//! handed at the numbers it expects, death with its parent, and a switch of user that keeps
//! the capability to bind service ports where asked.

use std::ffi::OsString;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::unistd::Pid;

use super::MAX_PASSED_FDS;

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
