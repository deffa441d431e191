//! Files the manager keeps in the rundir for the processes it runs: generated Lua written
//! atomically and safely against links planted by the workers' user, stale shared memory
//! removed, and what is left cleaned up at shutdown.

use std::path::Path;

use crate::service::WorkerId;

/// Mode of the files the workers read: they may hold secrets (custom Lua, TLS settings).
const GENERATED_MODE: u32 = 0o640;

/// Remove the worker configurations we generated in the rundir, and the query log's socket
/// (at shutdown).
pub fn remove_generated_files(rundir: &Path) {
    remove(&rundir.join(crate::query_log::SOCKET_FILE));
    let Ok(entries) = std::fs::read_dir(rundir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_worker_conf = name
            .to_str()
            .and_then(WorkerId::from_config_file_name)
            .is_some();
        if is_worker_conf {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Remove a file the manager generated or that workers share; a missing one is fine.
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// Remove a generated file without waiting for its pages to be freed (the policy-loader's
/// Lua of a large configuration is tens of megabytes, milliseconds to free): it is renamed
/// out of the way at once, under a name of its own, and removed on the runtime's blocking
/// pool (here, outside a runtime).
pub fn remove_soon(path: &Path) {
    let (Some(dir), Some(name), Ok(suffix)) = (path.parent(), path.file_name(), random_hex(8))
    else {
        return remove(path);
    };
    let mut gone = std::ffi::OsString::from(".");
    gone.push(name);
    gone.push(format!(".{suffix}.old"));
    let gone = dir.join(gone);
    match std::fs::rename(path, &gone) {
        Ok(()) => match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || remove(&gone))),
            Err(_) => remove(&gone),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => remove(path),
    }
}

pub use kres_wire::random_hex;

/// A fresh name for a temporary sibling of the file `name`: `.NAME.RANDOM.TAG`, which
/// nobody can plant a link at in advance.
pub fn fresh_sibling_name(
    name: &std::ffi::OsStr,
    tag: &str,
) -> std::io::Result<std::ffi::OsString> {
    let suffix = random_hex(8)?;
    let mut fresh = std::ffi::OsString::from(".");
    fresh.push(name);
    fresh.push(format!(".{suffix}.{tag}"));
    Ok(fresh)
}

/// Create the file `name` in `dir` for writing: exclusively (nothing already there, a link
/// included, is opened, followed or truncated) and close-on-exec. `mode` is narrowed by the
/// umask.
pub fn create_exclusive(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    mode: u32,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    Ok(openat(
        dir,
        name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode),
    )?)
}

/// Write `path` whole and atomically, safe against links planted in its directory (the
/// workers' user may write there): a fresh temporary name is created exclusively without
/// following links, relative to the directory opened without following a link either, then
/// renamed over `path`. Mode 0640, group `group` (the workers') when given.
pub fn write_file_as(path: &Path, text: &str, group: Option<u32>) -> std::io::Result<()> {
    use nix::fcntl::{open, renameat, OFlag};
    use nix::sys::stat::Mode;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other("not a file path"));
    };
    let dir = open(
        dir,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    )?;
    let tmp = fresh_sibling_name(name, "tmp")?;
    let fd = create_exclusive(&dir, &tmp, GENERATED_MODE)?;
    let written = (|| -> std::io::Result<()> {
        if let Some(gid) = group {
            nix::unistd::fchown(&fd, None, Some(nix::unistd::Gid::from_raw(gid)))?;
        }
        // The mode is set on the descriptor: the umask may have narrowed it.
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(GENERATED_MODE))?;
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        renameat(&dir, tmp.as_os_str(), &dir, name)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = nix::unistd::unlinkat(
            &dir,
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        return Err(e);
    }
    Ok(())
}
