//! The `knot-resolver` program: the root process (`root`) and the manager process it runs
//! (`manager_process`, the same binary with [`MANAGER_FLAG`]), and what the two agree on: the
//! link's descriptor number, the names in the root's fd store, the environment variables both
//! read, and how both log.
//!
//! Dependencies go one way: this module uses `api`, `watchdog` and `manager`; none of them
//! uses it.
//!
//! Both processes have one shape (restore, start, serve a stream of one closed event enum,
//! stop): `root` (`start`, `serve`, `keeper`: the manager process kept running and its
//! failure streak, `handover`, `stop`, `lock`, `rundir`) and `manager_process` (`restore`
//! what the root kept, `start`, `lifecycle`: the serve loop and its pure `Lifecycle`). Beside
//! them: `cli` (the command line, upstream's options and ours), `recovery` (what the fd store
//! carries from a failed manager process to the next: its failures, the reload doorbell,
//! kresd's version), `upgrade` (the in-place upgrade's `RootImage` and probe) and `logging`
//! (a compact format on a terminal or pipe, journald natively under systemd or with target
//! `syslog`; the manager process follows every applied `logging`).

pub mod cli;
pub mod logging;
pub mod manager_process;
pub mod recovery;
pub mod root;
pub mod upgrade;

use std::os::fd::RawFd;

pub use root::{run, Invocation};

/// The default configuration file, as upstream.
pub const DEFAULT_CONFIG: &str = "/etc/knot-resolver/config.yaml";

/// Set (to anything) to enable `POST /debug/panic-manager`, for tests of manager recovery.
pub use kres_wire::environment::FAULT_INJECTION_VAR;

/// Set (to anything but `0` or empty) to let kresd bind its own listening sockets, like the
/// `--kresd-binds-sockets` flag.
pub use kres_wire::environment::KRESD_BINDS_SOCKETS_VAR;

/// Set (to anything but `0` or empty) to leave the workers' reuseport groups to the kernel's
/// hash, like the `--no-steering` flag.
pub use kres_wire::environment::NO_STEERING_VAR;

/// Environment form of `--worker-user`.
pub use kres_wire::environment::WORKER_USER_VAR;

/// Environment form of `--api-admin-group`.
pub use kres_wire::environment::API_ADMIN_GROUP_VAR;

/// Environment form of `--api-read-only-group`.
pub use kres_wire::environment::API_READ_ONLY_GROUP_VAR;

/// Seconds without an answer after which the manager counts as hung.
pub use kres_wire::environment::MANAGER_HANG_VAR;

/// The hidden command-line flag that makes `knot-resolver` the manager process.
pub const MANAGER_FLAG: &str = "--manager-process";

/// The descriptor number of the link to the root process.
pub const LINK_FD: RawFd = 3;

/// Fd store name of the API's listening socket.
pub const STORED_API: &str = "api";

/// Fd store name of the running configuration (JSON in a sealed memfd).
pub const STORED_CONFIG: &str = "config";

/// The logging options of the command line (`--loglevel`, `--logtarget`).
#[derive(Debug, Clone, Copy)]
pub struct LogArgs {
    pub level: kres_config::LogLevel,
    pub target: kres_config::LogTarget,
}

/// Why a user or a group could not be found.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("no user named {0:?}")]
    NoUser(String),
    #[error("no group named {0:?}")]
    NoGroup(String),
    #[error("cannot look up {kind} {name:?}: {source}")]
    Database {
        /// `user` or `group`.
        kind: &'static str,
        name: String,
        #[source]
        source: nix::Error,
    },
}

/// The uid and gid of `name`, from the user database.
pub fn resolve_user(name: &str) -> Result<supervisor::Credentials, LookupError> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(supervisor::Credentials {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }),
        Ok(None) => Err(LookupError::NoUser(name.to_owned())),
        Err(source) => Err(LookupError::Database {
            kind: "user",
            name: name.to_owned(),
            source,
        }),
    }
}

/// What `--worker-user` (resolved to `requested`) means for this process: the workers'
/// credentials when we can switch to them (we are root) or already are them (the manager
/// process of a root that switched it); `None` when we are another unprivileged user, who
/// cannot switch (an arbitrary UID given by the container runtime, as OpenShift and
/// Kubernetes' restricted profile do): every process then runs as we do.
pub fn reachable_worker_user(
    requested: supervisor::Credentials,
) -> Option<supervisor::Credentials> {
    let euid = nix::unistd::geteuid();
    (euid.is_root() || euid.as_raw() == requested.uid).then_some(requested)
}

/// Why the groups of the API's roles cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiGroupsError {
    #[error("{option}: {source}")]
    Lookup {
        /// The option that named the group.
        option: &'static str,
        #[source]
        source: LookupError,
    },
    #[error("--api-admin-group and --api-read-only-group name the same group")]
    SameGroup,
    #[error(
        "--api-admin-group and --api-read-only-group apply to the API's unix socket; \
         it listens on TCP, where {} and {} give the roles",
        crate::api::guard::TOKEN_FILE_VAR,
        crate::api::guard::READ_ONLY_TOKEN_FILE_VAR
    )]
    OverTcp,
}

/// The groups of the API's roles on its unix socket, by name, as the command line or the
/// environment gave them.
#[derive(Debug, Clone, Default)]
pub struct ApiGroupNames {
    /// `--api-admin-group` or [`API_ADMIN_GROUP_VAR`].
    pub admin: Option<String>,
    /// `--api-read-only-group` or [`API_READ_ONLY_GROUP_VAR`].
    pub read_only: Option<String>,
}

impl ApiGroupNames {
    /// The groups as ids, for an API at the endpoint `management` names. An unknown group, the
    /// same group for both roles, or groups for an API that listens on TCP (where the
    /// bearer tokens give the roles) are errors, so that the resolver does not start with
    /// less protection than the operator asked for.
    pub fn resolve(
        &self,
        management: &kres_config::ManagementSchema,
    ) -> Result<crate::api::roles::ApiGroups, ApiGroupsError> {
        let gid = |option: &'static str, name: &Option<String>| {
            name.as_deref()
                .map(|n| {
                    resolve_group(n).map_err(|source| ApiGroupsError::Lookup { option, source })
                })
                .transpose()
        };
        let groups = crate::api::roles::ApiGroups {
            admin: gid("--api-admin-group", &self.admin)?,
            read_only: gid("--api-read-only-group", &self.read_only)?,
        };
        if groups.admin.is_some() && groups.admin == groups.read_only {
            return Err(ApiGroupsError::SameGroup);
        }
        if groups.any() && management.unix_socket.is_none() {
            return Err(ApiGroupsError::OverTcp);
        }
        Ok(groups)
    }
}

/// The gid of the group `name`, from the group database.
pub fn resolve_group(name: &str) -> Result<u32, LookupError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(LookupError::NoGroup(name.to_owned())),
        Err(source) => Err(LookupError::Database {
            kind: "group",
            name: name.to_owned(),
            source,
        }),
    }
}
