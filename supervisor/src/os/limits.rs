//! Resource limits: the open-descriptor limit read and raised to its hard limit.

use std::io;

/// The limit on open descriptors (`RLIMIT_NOFILE`) before and after [`raise_open_files_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesLimit {
    /// The soft limit the process was started with.
    pub was: u64,
    /// The soft limit now in force (the hard limit, unless raising failed).
    pub now: u64,
}

/// Raise the soft limit on open descriptors to the hard limit. The soft limit that services
/// start with (1,024 under systemd and most runtimes) exists for programs that still use
/// `select(2)`; nothing here does, and the root holds two descriptors of every listening
/// socket of every worker. Children inherit the raised limit.
pub fn raise_open_files_limit() -> io::Result<OpenFilesLimit> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= hard {
        return Ok(OpenFilesLimit {
            was: soft,
            now: soft,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(OpenFilesLimit {
        was: soft,
        now: hard,
    })
}

/// The soft limit on open descriptors now in force.
pub fn open_files_limit() -> io::Result<u64> {
    let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    Ok(soft)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .expect("getrlimit");
        let raised = raise_open_files_limit().expect("raise");
        assert_eq!(raised.now, hard);
        assert_eq!(open_files_limit().expect("read"), hard);
    }
}
