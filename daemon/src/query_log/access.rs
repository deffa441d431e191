//! Who may write to the query log's sockets (`intake` binds them, `reader` and `marks` check
//! each peer): the files' owner, group and mode, and the uids whose streams and datagrams are
//! read — the workers', root and the manager's own.

/// Who the sockets are for: their file's owner, group and mode, and the uids let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The files' owner (us).
    owner: u32,
    /// The files' group: ours, or the workers' when they run as another user.
    group: u32,
    /// The files' mode: 0600, or 0660 for the workers' group.
    mode: u32,
    /// The uids whose streams and datagrams are read: the workers', root and ours.
    admitted: Vec<u32>,
}

impl Access {
    /// For workers running as `workers` (`None`: as this process), this process being who it
    /// is.
    pub fn for_workers(workers: Option<supervisor::Credentials>) -> Access {
        let us = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        Access::of(us, workers.map(|c| (c.uid, c.gid)))
    }

    /// For workers running as `workers` (uid, gid), this process as `us`.
    pub(super) fn of(us: (u32, u32), workers: Option<(u32, u32)>) -> Access {
        let (uid, gid) = us;
        let mut admitted = vec![0, uid];
        let (group, mode) = match workers.filter(|(w, _)| *w != uid) {
            Some((w_uid, w_gid)) => {
                admitted.push(w_uid);
                (w_gid, 0o660)
            }
            None => (gid, 0o600),
        };
        admitted.sort_unstable();
        admitted.dedup();
        Access {
            owner: uid,
            group,
            mode,
            admitted,
        }
    }

    /// Sockets for us that let only `uids` in (tests of the refusal).
    #[cfg(test)]
    pub fn admitting(uids: &[u32]) -> Access {
        Access {
            admitted: uids.to_vec(),
            ..Access::of(
                (
                    nix::unistd::geteuid().as_raw(),
                    nix::unistd::getegid().as_raw(),
                ),
                None,
            )
        }
    }

    /// Whether a peer of `uid` is read.
    pub fn admits(&self, uid: u32) -> bool {
        self.admitted.contains(&uid)
    }

    /// The files' owner, group and mode.
    pub fn file(&self) -> supervisor::os::SocketAccess {
        supervisor::os::SocketAccess {
            uid: self.owner,
            gid: self.group,
            mode: self.mode,
        }
    }
}
