//! The in-place upgrade of the root process (`SIGUSR2`, `POST /upgrade`): `execve` of the
//! binary at the daemon's original path, possibly a newer version, in the same process. The
//! pid stays, so every child stays ours; what the new image needs travels as a [`RootImage`]
//! (JSON in a sealed memfd) and the descriptors it names (the supervisor's table, the fd store
//! with the API and DNS sockets, the rundir lock), left open across the `execve`.
//!
//! Falling back: before anything is stopped, the new binary must pass a probe
//! (`knot-resolver --upgrade-probe FORMAT` exits 0 when it can adopt images of FORMAT); an
//! `execve` that fails returns here and the old image adopts its own table again; a new image
//! that cannot read what it was given re-executes the old binary, kept open as a descriptor
//! since its start (the file on disk may have been replaced), with the same image.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use supervisor::handover::SupervisorImage;

use kres_config::{LogLevel, LogTarget};
use kres_wire::environment::Environment;

/// The environment variable that tells a new image where its state is: `STATE:FALLBACK`, the
/// descriptor of the image's memfd and that of the old binary (`-` when there is none to fall
/// back to, i.e. this is the fallback already). Children never see it.
pub use crate::manager::specs::UPGRADE_STATE_VAR as STATE_VAR;

/// The format of [`RootImage`]; a binary adopts images of its own format only.
pub const STATE_FORMAT: u32 = 1;

/// The hidden flag of the probe.
pub const PROBE_FLAG: &str = "--upgrade-probe";

/// The largest image read back.
const MAX_IMAGE: u64 = 64 << 20;

/// Fd store name of the record of the last upgrade (JSON in a sealed memfd), which every
/// manager incarnation reads (`GET /upgrade`).
pub const STORED_UPGRADE: &str = "upgrade";

/// Why a new image cannot adopt the state it was given.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{STATE_VAR}={0:?} is not STATE:FALLBACK")]
    NotStateAndFallback(String),
    #[error("{STATE_VAR}: {0:?} is not a descriptor")]
    NotADescriptor(String),
    #[error("{STATE_VAR}: {what}: {source}")]
    Inherited {
        /// `the state` or `the old binary`.
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the upgrade state: {0}")]
    Read(#[source] io::Error),
    #[error("the upgrade state has {0} bytes")]
    TooLarge(u64),
    #[error("the upgrade state: {0}")]
    Damaged(#[source] serde_json::Error),
    #[error("the upgrade state is of format {0}, this binary adopts {STATE_FORMAT}")]
    Format(u32),
    #[error("{0}")]
    Closed(#[source] io::Error),
    #[error("refused by fault injection")]
    RefusedByFaultInjection,
}

/// What the root process hands its next image.
#[derive(Debug, Serialize, Deserialize)]
pub struct RootImage {
    pub format: u32,
    /// The version that wrote it.
    pub version: String,
    /// The binary to re-execute at the next upgrade: the daemon's original path.
    pub exe: PathBuf,
    /// Our command line, the program name included.
    pub argv: Vec<OsString>,
    pub rundir: PathBuf,
    /// Where the manager process runs (the directory we were started in).
    pub manager_cwd: Option<PathBuf>,
    /// The API's socket file, removed at the stop (`None` for a TCP endpoint).
    pub api_socket: Option<PathBuf>,
    /// The log level and target the configuration set at start-up.
    pub log_level: LogLevel,
    pub log_target: LogTarget,
    /// The rundir lock (`knot-resolver.pid`, locked with `flock`).
    pub lock_fd: Option<RawFd>,
    /// The fd store, by name.
    pub store: Vec<(String, RawFd)>,
    pub supervisor: SupervisorImage,
    /// Manager incarnations so far, and upgrades tried so far.
    pub incarnations: u32,
    pub generation: u32,
}

/// Answer the probe: exit 0 when this binary adopts images of `format`.
pub fn probe(format: u32) -> std::process::ExitCode {
    if format == STATE_FORMAT {
        println!(
            "knot-resolver {} adopts upgrade state format {STATE_FORMAT}",
            crate::build_version()
        );
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!(
            "knot-resolver {} adopts upgrade state format {STATE_FORMAT}, not {format}",
            crate::build_version()
        );
        std::process::ExitCode::from(1)
    }
}

/// Where a new image finds its state, from [`STATE_VAR`].
pub struct Inherited {
    pub state: OwnedFd,
    /// The old binary, unless this is the fallback already.
    pub fallback: Option<OwnedFd>,
}

/// Whether this process is the new image of an upgrade (`env` has [`STATE_VAR`]): its state
/// and fallback, taken.
pub fn inherited(env: &Environment) -> Option<Result<Inherited, StateError>> {
    let value = env.upgrade_state.as_deref()?;
    Some(parse_var(value))
}

fn parse_var(value: &str) -> Result<Inherited, StateError> {
    let (state, fallback) = value
        .split_once(':')
        .ok_or_else(|| StateError::NotStateAndFallback(value.to_owned()))?;
    let number = |s: &str| {
        s.parse::<RawFd>()
            .ok()
            .filter(|&fd| fd > 2)
            .ok_or_else(|| StateError::NotADescriptor(s.to_owned()))
    };
    let take = |fd, what| {
        supervisor::os::take_inherited_fd(fd)
            .map_err(|source| StateError::Inherited { what, source })
    };
    let state = take(number(state)?, "the state")?;
    let fallback = match fallback {
        "-" => None,
        f => Some(take(number(f)?, "the old binary")?),
    };
    for fd in std::iter::once(&state).chain(fallback.as_ref()) {
        supervisor::os::set_cloexec(fd).map_err(StateError::Closed)?;
    }
    Ok(Inherited { state, fallback })
}

/// Whether the tests asked new images to refuse their state (`KRES_FAULT_INJECTION`
/// containing `refuse-upgrade-state`), to prove the fallback to the old binary. The fallback
/// itself (no further fallback) never refuses.
pub fn refusal_injected(env: &Environment) -> bool {
    env.fault_injected("refuse-upgrade-state")
}

/// Read an image from its memfd.
pub fn read_image(fd: &OwnedFd) -> Result<RootImage, StateError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd.try_clone().map_err(StateError::Closed)?);
    let len = file.metadata().map_err(StateError::Closed)?.len();
    if len > MAX_IMAGE {
        return Err(StateError::TooLarge(len));
    }
    let mut bytes = vec![0u8; usize::try_from(len).map_err(|_| StateError::TooLarge(len))?];
    file.read_exact_at(&mut bytes, 0)
        .map_err(StateError::Read)?;
    let image: RootImage = serde_json::from_slice(&bytes).map_err(StateError::Damaged)?;
    if image.format != STATE_FORMAT {
        return Err(StateError::Format(image.format));
    }
    Ok(image)
}

/// Check every descriptor the image names is open, before any is taken.
pub fn check_descriptors(image: &RootImage) -> Result<(), StateError> {
    let named = image
        .lock_fd
        .into_iter()
        .chain(image.store.iter().map(|(_, fd)| *fd))
        .chain(std::iter::once(image.supervisor.notify_fd));
    for fd in named {
        supervisor::os::check_open(fd).map_err(StateError::Closed)?;
    }
    Ok(())
}

/// The binary we run, opened now: what a failed upgrade falls back to, whatever becomes of
/// the file at its path.
pub fn open_own_binary() -> io::Result<OwnedFd> {
    std::fs::File::open("/proc/self/exe").map(OwnedFd::from)
}

/// Replace this process's image with `exe`, passing `image` and `fallback` (the old binary,
/// or `None` for no further fallback) through [`STATE_VAR`], in `env`. Every descriptor the
/// image names must already be open without close-on-exec. Returns only on failure, with every
/// descriptor it opened closed again.
pub fn exec(
    exe: &std::path::Path,
    image: &RootImage,
    fallback: Option<&OwnedFd>,
    env: &Environment,
) -> io::Error {
    match prepare(image, fallback, env) {
        Ok((state, env)) => {
            let Ok(path) = CString::new(exe.as_os_str().as_bytes()) else {
                return io::Error::other("the binary's path holds a NUL byte");
            };
            let argv = match cstrings(image.argv.iter().map(|a| a.as_bytes().to_vec())) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let Err(e) = nix::unistd::execve(&path, &argv, &env);
            drop(state);
            io::Error::from(e)
        }
        Err(e) => e,
    }
}

/// Re-execute the old binary (`fallback`) with the same image, marked as the last resort, in
/// `env`.
pub fn exec_fallback(
    fallback: &OwnedFd,
    image_fd: OwnedFd,
    argv: &[OsString],
    env: &Environment,
) -> io::Error {
    if let Err(e) = supervisor::os::clear_cloexec(fallback.as_fd())
        .and_then(|()| supervisor::os::clear_cloexec(image_fd.as_fd()))
    {
        return e;
    }
    let env = match environment(env, &format!("{}:-", image_fd.as_raw_fd())) {
        Ok(env) => env,
        Err(e) => return e,
    };
    let argv = match cstrings(argv.iter().map(|a| a.as_bytes().to_vec())) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let Err(e) = nix::unistd::fexecve(fallback.as_fd(), &argv, &env);
    io::Error::from(e)
}

/// The image's memfd (open across `execve`) and the new image's environment.
fn prepare(
    image: &RootImage,
    fallback: Option<&OwnedFd>,
    env: &Environment,
) -> io::Result<(OwnedFd, Vec<CString>)> {
    let text = serde_json::to_vec(image).map_err(io::Error::other)?;
    let state = supervisor::os::sealed_memfd("knot-resolver-upgrade", &text)?;
    supervisor::os::clear_cloexec(state.as_fd())?;
    let fallback = match fallback {
        Some(fd) => {
            supervisor::os::clear_cloexec(fd.as_fd())?;
            fd.as_raw_fd().to_string()
        }
        None => "-".to_owned(),
    };
    let env = environment(env, &format!("{}:{fallback}", state.as_raw_fd()))?;
    Ok((state, env))
}

/// `env` with [`STATE_VAR`] set to `value`.
fn environment(env: &Environment, value: &str) -> io::Result<Vec<CString>> {
    let vars = env
        .vars_except(&[STATE_VAR])
        .into_iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            kv
        })
        .chain(std::iter::once(format!("{STATE_VAR}={value}").into_bytes()));
    cstrings(vars)
}

fn cstrings(items: impl Iterator<Item = Vec<u8>>) -> io::Result<Vec<CString>> {
    items
        .map(|b| CString::new(b).map_err(io::Error::other))
        .collect()
}

/// Leave `fd` open for the next image and give up owning it; its number goes in the image.
/// (Clearing close-on-exec on a descriptor we hold cannot fail; if it did, the next image
/// would not find it, refuse the image and fall back to this binary.)
pub fn pass_on(fd: OwnedFd) -> RawFd {
    if let Err(e) = supervisor::os::clear_cloexec(fd.as_fd()) {
        tracing::error!(
            "cannot keep descriptor {} open across execve: {e}",
            fd.as_raw_fd()
        );
    }
    fd.into_raw_fd()
}

/// Take back a descriptor passed on (by this image after a failed `execve`, or by the next).
pub fn take_back(fd: RawFd) -> io::Result<OwnedFd> {
    let fd = supervisor::os::take_inherited_fd(fd)?;
    supervisor::os::set_cloexec(&fd)?;
    Ok(fd)
}

/// A record of how an upgrade ended, as a sealed memfd for the fd store.
pub fn record(record: &kres_wire::upgrade::UpgradeRecord) -> io::Result<OwnedFd> {
    let text = serde_json::to_vec(record).map_err(io::Error::other)?;
    supervisor::os::sealed_memfd("knot-resolver-upgrade-record", &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_variable_names_two_descriptors_or_a_last_resort() {
        for bad in ["", "5", "x:-", "1:-", "-1:-", "5:x", ":"] {
            assert!(parse_var(bad).is_err(), "{bad:?}");
        }
    }
}
