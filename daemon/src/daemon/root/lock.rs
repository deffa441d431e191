//! The rundir lock of the root process: the pid file, held with `flock` for the process's
//! life, created and opened so that it is never written through a link or into a file that is
//! not ours.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::{DaemonError, PID_FILE_NAME};

/// The rundir lock: `knot-resolver.pid`, held with `flock` for the life of the root process
/// (two starters at the same instant never both run; the kernel drops the lock when its holder
/// dies, so a stale file, or a pid in it reused by another process, never blocks a start).
/// It holds our pid for operators; it is removed on drop.
pub(super) struct RundirLock {
    path: PathBuf,
    /// `None` once handed to the next image, which removes the file at its stop.
    file: Option<std::fs::File>,
}

impl RundirLock {
    pub(super) fn acquire(rundir: &Path) -> Result<RundirLock, DaemonError> {
        use std::io::{Read, Seek, Write};
        let path = rundir.join(PID_FILE_NAME);
        let mut file = open_pid_file(&path).map_err(|source| DaemonError::Rundir {
            path: rundir.to_owned(),
            source,
        })?;
        if !supervisor::os::try_lock_exclusive(&file)? {
            let mut holder = String::new();
            let _ = Read::by_ref(&mut file).take(32).read_to_string(&mut holder);
            return Err(DaemonError::Locked(
                rundir.to_owned(),
                holder.trim().to_owned(),
            ));
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        Ok(RundirLock {
            path,
            file: Some(file),
        })
    }

    /// The lock an earlier image of this process held (same pid, same lock).
    pub(super) fn adopt(rundir: &Path, fd: OwnedFd) -> RundirLock {
        RundirLock {
            path: rundir.join(PID_FILE_NAME),
            file: Some(std::fs::File::from(fd)),
        }
    }

    /// The locked file, for the next image; the file stays.
    pub(super) fn into_fd(mut self) -> Option<OwnedFd> {
        self.file.take().map(OwnedFd::from)
    }
}

/// Open the pid file for locking and writing, never through a link and never into a file
/// that is not ours: a file there is used only when it is a regular file of our user with a
/// single link (a stale one of an earlier run); anything else (a link, a hard link to another
/// file, someone else's file, a fifo) is removed and the file created anew with `O_EXCL`.
fn open_pid_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let ours = |meta: &std::fs::Metadata| {
        meta.is_file() && meta.uid() == nix::unistd::geteuid().as_raw() && meta.nlink() == 1
    };
    for _ in 0..4 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if ours(&meta) => {
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                    .open(path)
                {
                    // Checked again through the descriptor: the name may have been replaced
                    // since the `lstat`.
                    Ok(file) if ours(&file.metadata()?) => return Ok(file),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {}
                    Err(e) => return Err(e),
                }
                tracing::warn!("replacing {}, which is not our pid file", path.display());
                remove_if_present(path)?;
            }
            Ok(meta) if meta.is_dir() => {
                return Err(std::io::Error::other(format!(
                    "{} is a directory",
                    path.display()
                )))
            }
            Ok(meta) => {
                if meta.is_file() && held_by_another(path)? {
                    // Another resolver's lock, running as another user: keep out of its way
                    // (the caller's own lock attempt reports who holds it).
                    return std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                        .open(path);
                }
                tracing::warn!("replacing {}, which is not our pid file", path.display());
                remove_if_present(path)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(path)
                {
                    Ok(file) => return Ok(file),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} keeps being replaced",
        path.display()
    )))
}

/// Whether the regular file at `path` is locked by a live process (opened read-only, never
/// through a link, only to ask).
fn held_by_another(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(file.metadata()?.is_file() && !supervisor::os::try_lock_exclusive(&file)?)
}

/// Remove `path` (never what a link there points to); already gone is fine.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Drop for RundirLock {
    fn drop(&mut self) {
        if self.file.is_none() {
            return;
        }
        // Still locked by us while we remove it.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::TempDir;
    use super::*;

    #[test]
    fn the_pid_file_never_writes_through_a_link_or_into_a_file_not_ours() {
        use std::os::unix::fs::MetadataExt;
        let dir = TempDir::new("pidfile");
        let target = dir.0.join("precious");
        std::fs::write(&target, "keep me").expect("target");
        let pid_file = dir.0.join(PID_FILE_NAME);
        std::os::unix::fs::symlink(&target, &pid_file).expect("plant a link");
        let lock = RundirLock::acquire(&dir.0).expect("lock through a planted link");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
        let meta = std::fs::symlink_metadata(&pid_file).expect("stat");
        assert!(meta.is_file(), "the link was replaced by our own file");
        assert_eq!(
            std::fs::read_to_string(&pid_file).expect("pid file").trim(),
            std::process::id().to_string()
        );
        drop(lock);
        // A hard link to another file is never truncated.
        std::fs::hard_link(&target, &pid_file).expect("plant a hard link");
        let lock = RundirLock::acquire(&dir.0).expect("lock beside a hard link");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
        assert_eq!(std::fs::metadata(&target).expect("stat").nlink(), 1);
        drop(lock);
    }

    #[test]
    fn a_pid_file_locked_by_another_process_is_reported_not_replaced() {
        let dir = TempDir::new("pidfile-held");
        let held = RundirLock::acquire(&dir.0).expect("first");
        match RundirLock::acquire(&dir.0) {
            Err(DaemonError::Locked(_, holder)) => {
                assert_eq!(holder, std::process::id().to_string())
            }
            other => panic!("expected the lock to be held, got {:?}", other.err()),
        }
        drop(held);
        RundirLock::acquire(&dir.0).expect("free again");
    }
}
