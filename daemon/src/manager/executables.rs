//! The programs the manager runs and as whom: where they are (`kres_wire::programs`), the user
//! they run as (`knot-resolver --worker-user` sets `run_as`) and the environment they start
//! from.

use std::ffi::OsString;
use std::path::PathBuf;

pub use kres_wire::programs::{self, kresd_version, version_of, VersionError, VERSION_TIMEOUT};

use kres_wire::environment::Environment;

#[derive(Debug, Clone)]
pub struct Executables {
    pub kresd: PathBuf,
    pub cache_gc: PathBuf,
    /// The user every child runs as, when the daemon runs as root and was told to drop
    /// them to an unprivileged user; `None` runs them as ourselves.
    pub run_as: Option<supervisor::Credentials>,
    /// The environment every child starts from: ours, without what belongs to our own
    /// service manager (`NOTIFY_SOCKET`, `WATCHDOG_*`, `LISTEN_*`).
    pub base_env: Vec<(OsString, OsString)>,
}

impl Executables {
    /// The programs `env` names or its `PATH` finds, run as ourselves, in `env`.
    pub fn discover(env: &Environment) -> Self {
        Executables {
            kresd: programs::kresd(env),
            cache_gc: programs::cache_gc(env),
            run_as: None,
            base_env: super::specs::child_base_env(env),
        }
    }
}
