//! Unix sockets bound privately: created in a private directory with their owner and mode
//! set, then renamed into place, so that nobody can connect or swap the file in between.

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use nix::errno::Errno;

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
}
