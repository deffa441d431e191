//! The query log's socket in the rundir, `query-log.sock` (`records`), and who may write to
//! it. It exists only while the configuration has the log on: bound before any worker starts
//! with it on (the manager's executor calls [`Intake::prepare`] before it starts workers of a
//! new configuration), removed once a configuration with it off is running
//! ([`Intake::follow`]); while it is off, nothing of the log is bound, spawned or allocated
//! but this handle.
//!
//! What comes in is untrusted, so the socket's file is the workers' only: ours and mode 0600
//! when the workers run as we do, 0660 with the workers' group when they run as another user
//! (`--worker-user`), given through `supervisor::os::bind_unix_private` as the API's socket
//! is. A file mode admits every member of that group, so the kernel's word on each datagram
//! is checked as well (`SCM_CREDENTIALS`, `SO_PASSCRED` on the socket): only the workers'
//! uid, root and ours are read ([`Access`](super::access::Access)).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::access::Access;
use super::records::{self, WorkerOf};
use super::{QueryLog, SOCKET_FILE};
use kres_config::KresConfig;

/// The socket bound or not, as the configuration says; a cheap handle the manager's executor
/// and the configuration's follower share.
#[derive(Clone)]
pub struct Intake {
    /// Where the records go.
    log: QueryLog,
    /// Who may write.
    access: Access,
    /// Which worker a sender is.
    worker_of: WorkerOf,
    /// The daemon's stop: the reader ends with it.
    stop: CancellationToken,
    /// Where the reader runs: the owner's tasks, waited for at its stop.
    tasks: TaskTracker,
    /// The socket while bound.
    bound: Arc<Mutex<Option<Bound>>>,
}

/// The socket bound, and what stops its reader.
struct Bound {
    /// The rundir it is in.
    rundir: PathBuf,
    /// Stops the reader.
    token: CancellationToken,
}

impl Intake {
    /// Nothing bound yet; the reader, once bound, runs on `tasks` until `stop`, and tells
    /// each batch's worker by `worker_of`.
    pub fn new(
        log: QueryLog,
        access: Access,
        worker_of: WorkerOf,
        tasks: TaskTracker,
        stop: CancellationToken,
    ) -> Intake {
        Intake {
            log,
            access,
            worker_of,
            stop,
            tasks,
            bound: Arc::default(),
        }
    }

    fn bound(&self) -> MutexGuard<'_, Option<Bound>> {
        // Every step leaves the state whole: a poisoned lock is taken as it is.
        self.bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Before workers of `cfg` start: the socket bound when `cfg` has the log on. Never
    /// unbinds (the workers running may still send).
    pub fn prepare(&self, cfg: &KresConfig) {
        if cfg.monitoring.query_log.enabled {
            self.open(&cfg.rundir);
        }
    }

    /// `cfg` runs: the socket bound when it has the log on, removed when not (also one an
    /// earlier manager process left).
    pub fn follow(&self, cfg: &KresConfig) {
        if cfg.monitoring.query_log.enabled {
            self.open(&cfg.rundir);
        } else {
            self.close();
            remove_socket(&cfg.rundir.join(SOCKET_FILE));
        }
    }

    /// Whether the socket is bound.
    pub fn is_bound(&self) -> bool {
        self.bound().is_some()
    }

    /// Bind the socket in `rundir` unless it is; a socket that cannot be bound is logged and
    /// said by the log's status.
    fn open(&self, rundir: &Path) {
        let mut bound = self.bound();
        if bound.as_ref().is_some_and(|b| b.rundir == rundir) {
            return;
        }
        self.close_locked(&mut bound);
        let socket = match records::bind(rundir, &self.access) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::error!("query log: cannot bind its socket: {e}");
                self.log
                    .set_inactive(format!("the query log's socket could not be bound: {e}"));
                return;
            }
        };
        let token = self.stop.child_token();
        self.log.clear_inactive();
        self.log.set_accepting(true);
        self.tasks.spawn(records::serve(
            socket,
            self.log.clone(),
            self.access.clone(),
            self.worker_of.clone(),
            token.clone(),
        ));
        *bound = Some(Bound {
            rundir: rundir.to_owned(),
            token,
        });
    }

    /// Stop reading and remove the socket's file.
    fn close(&self) {
        let mut bound = self.bound();
        self.close_locked(&mut bound);
    }

    fn close_locked(&self, bound: &mut Option<Bound>) {
        let Some(b) = bound.take() else {
            return;
        };
        self.log.set_accepting(false);
        b.token.cancel();
        remove_socket(&b.rundir.join(SOCKET_FILE));
    }
}

/// Remove the socket at `path`, if a socket is there (the rundir is not the workers' to
/// write, but nothing else is ever removed).
fn remove_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!("query log: cannot remove {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who runs as whom, and what the sockets are then.
    struct Row {
        us: (u32, u32),
        workers: Option<(u32, u32)>,
        group: u32,
        mode: u32,
        admitted: &'static [u32],
        refused: &'static [u32],
    }

    #[test]
    fn the_sockets_are_for_the_workers_user_only() {
        let rows = [
            Row {
                us: (0, 0),
                workers: None,
                group: 0,
                mode: 0o600,
                admitted: &[0],
                refused: &[65534, 1000],
            },
            Row {
                us: (0, 0),
                workers: Some((998, 997)),
                group: 997,
                mode: 0o660,
                admitted: &[0, 998],
                refused: &[65534, 997],
            },
            Row {
                us: (998, 997),
                workers: Some((998, 997)),
                group: 997,
                mode: 0o600,
                admitted: &[0, 998],
                refused: &[65534],
            },
            Row {
                us: (1000, 1000),
                workers: None,
                group: 1000,
                mode: 0o600,
                admitted: &[0, 1000],
                refused: &[998],
            },
        ];
        for row in rows {
            let access = Access::of(row.us, row.workers);
            let file = access.file();
            let which = format!("{:?} {:?}", row.us, row.workers);
            assert_eq!(
                (file.uid, file.gid, file.mode),
                (row.us.0, row.group, row.mode),
                "{which}"
            );
            for uid in row.admitted {
                assert!(access.admits(*uid), "{uid} for {which}");
            }
            for uid in row.refused {
                assert!(!access.admits(*uid), "{uid} for {which}");
            }
        }
    }

    fn config(rundir: &Path, enabled: bool) -> KresConfig {
        let raw = serde_json::json!({
            "rundir": rundir,
            "monitoring": {"query-log": {"enabled": enabled}},
        });
        let ctx = kres_config::ValidationContext {
            resolve_root: "/".into(),
            checks: kres_config::PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        kres_config::validate(&raw, &ctx).expect("valid")
    }

    #[tokio::test]
    async fn the_sockets_exist_only_while_the_log_is_on() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("kres-intake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let files = [dir.join(SOCKET_FILE)];
        // A socket an earlier manager process left is removed while the log is off.
        drop(std::os::unix::net::UnixListener::bind(&files[0]).expect("stale"));
        let log = QueryLog::default();
        let tasks = TaskTracker::new();
        let intake = Intake::new(
            log.clone(),
            Access::for_workers(None),
            Arc::new(|_| None),
            tasks.clone(),
            CancellationToken::new(),
        );
        let (off, on) = (config(&dir, false), config(&dir, true));
        // (step, bound after)
        let rows: [(&str, bool); 5] = [
            ("follow off", false),
            ("prepare off", false),
            ("prepare on", true),
            ("follow on", true),
            ("follow off", false),
        ];
        for (step, bound) in rows {
            match step {
                "follow off" => intake.follow(&off),
                "prepare off" => intake.prepare(&off),
                "prepare on" => intake.prepare(&on),
                _ => intake.follow(&on),
            }
            assert_eq!(intake.is_bound(), bound, "{step}");
            if bound {
                // Bound again ("prepare on", then "follow on"): still the one reader.
                assert_eq!(tasks.len(), 1, "{step}: the readers");
            }
            for file in &files {
                let meta = std::fs::symlink_metadata(file);
                assert_eq!(meta.is_ok(), bound, "{step}: {}", file.display());
                if let Ok(meta) = meta {
                    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{step}");
                }
            }
        }
        // Turned off: the reader ended.
        tasks.close();
        tokio::time::timeout(std::time::Duration::from_secs(10), tasks.wait())
            .await
            .expect("the reader ends once the log is off");
        std::fs::remove_dir_all(&dir).ok();
    }
}
