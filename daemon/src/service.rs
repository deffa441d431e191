//! Who is who in the process table: the kinds of services the resolver runs and the identity of
//! a kresd worker. The supervisor knows services by strings (it knows processes, not DNS);
//! this module is the one place that turns those strings into types and back, so no other
//! module builds `"kresd{N}"` or compares a state with `"running"`.

use std::fmt;
use std::path::{Path, PathBuf};

use supervisor::{ProcessSnapshot, ProcessState, Snapshot};

/// What a supervised service is, as `kind` in the supervisor's table and `/processes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceKind {
    /// A kresd worker serving DNS (`kresd0`, `kresd1`, …).
    Kresd,
    /// A kresd started only to prove a new configuration, without sockets, then removed.
    Canary,
    /// The one-shot kresd that fills the rules database.
    PolicyLoader,
    /// `kres-cache-gc`.
    CacheGc,
    /// The manager process (in the root's table only).
    Manager,
    /// The binary of an in-place upgrade, asked whether it can adopt the running processes
    /// (in the root's table only, for a moment).
    UpgradeProbe,
}

impl ServiceKind {
    /// Every kind, for tests and listings.
    pub const ALL: [ServiceKind; 6] = [
        ServiceKind::Kresd,
        ServiceKind::Canary,
        ServiceKind::PolicyLoader,
        ServiceKind::CacheGc,
        ServiceKind::Manager,
        ServiceKind::UpgradeProbe,
    ];

    /// The string the supervisor's table carries.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Kresd => "kresd",
            ServiceKind::Canary => "canary",
            ServiceKind::PolicyLoader => "policy-loader",
            ServiceKind::CacheGc => "gc",
            ServiceKind::Manager => "manager",
            ServiceKind::UpgradeProbe => "upgrade-probe",
        }
    }

    /// The kind a table entry says it is; `None` for one this crate did not register.
    pub fn parse(kind: &str) -> Option<ServiceKind> {
        ServiceKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The kind of a process in a snapshot.
    pub fn of(process: &ProcessSnapshot) -> Option<ServiceKind> {
        ServiceKind::parse(&process.kind)
    }

    /// Upstream's `type` in `/processes` (its supervisord program groups).
    pub fn upstream_type(self) -> &'static str {
        match self {
            ServiceKind::Kresd => "KRESD",
            ServiceKind::CacheGc => "GC",
            ServiceKind::PolicyLoader => "POLICY_LOADER",
            // Upstream runs neither: its manager is not supervised, and it has no canary.
            ServiceKind::Canary | ServiceKind::Manager | ServiceKind::UpgradeProbe => "UNKNOWN",
        }
    }

    /// Whether the resolver needs this service running all the time (a failure of it is the
    /// resolver's failure).
    pub fn is_essential(self) -> bool {
        matches!(self, ServiceKind::Kresd | ServiceKind::CacheGc)
    }
}

impl fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The service name of the canary.
pub const CANARY: &str = "canary";
/// The service name of the policy-loader.
pub const POLICY_LOADER: &str = "policy-loader";
/// The service name of the cache garbage collector.
pub const CACHE_GC: &str = "cache-gc";
/// The service name of the manager process in the root's table.
pub const MANAGER: &str = "manager";
/// The service name of an upgrade's probe in the root's table.
pub const UPGRADE_PROBE: &str = "upgrade-probe";

/// A kresd worker's number: `SYSTEMD_INSTANCE`, the `N` of `kresdN`, its configuration file
/// and its control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerId(pub u32);

/// Prefix of worker service names and configuration files.
const WORKER_PREFIX: &str = "kresd";

impl WorkerId {
    /// Workers `0..count`.
    pub fn all(count: u32) -> impl DoubleEndedIterator<Item = WorkerId> {
        (0..count).map(WorkerId)
    }

    /// The service name, `kresd{N}`.
    pub fn name(self) -> String {
        format!("{WORKER_PREFIX}{}", self.0)
    }

    /// The worker a service name belongs to (`kresd7` → 7); `None` for any other name.
    pub fn from_name(name: &str) -> Option<WorkerId> {
        digits(name.strip_prefix(WORKER_PREFIX)?).map(WorkerId)
    }

    /// The worker whose generated configuration file has this name (`kresd7.conf` → 7).
    pub fn from_config_file_name(name: &str) -> Option<WorkerId> {
        WorkerId::from_name(name.strip_suffix(".conf")?)
    }

    /// Its generated Lua configuration, `<rundir>/kresd{N}.conf`.
    pub fn config_file(self, rundir: &Path) -> PathBuf {
        rundir.join(format!("{}.conf", self.name()))
    }

    /// Its control socket, `<rundir>/control/{N}` (bound by the generated Lua).
    pub fn control_socket(self, rundir: &Path) -> PathBuf {
        rundir.join("control").join(self.0.to_string())
    }

    /// Upstream's id in metrics (JSON key and `instance_id` label): `kresd:kresd{N}`.
    pub fn instance_id(self) -> String {
        format!("kresd:{}", self.name())
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{WORKER_PREFIX}{}", self.0)
    }
}

/// A decimal number without sign or leading `+` (`u32::from_str` would take `+7`).
fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Workers registered in the table (any state), in order.
pub fn workers(snapshot: &Snapshot) -> Vec<WorkerId> {
    workers_where(snapshot, |_| true)
}

/// Workers that are running and ready, in order (adopted workers included).
pub fn running_workers(snapshot: &Snapshot) -> Vec<WorkerId> {
    workers_where(snapshot, |p| p.state == ProcessState::Running)
}

fn workers_where(snapshot: &Snapshot, keep: impl Fn(&ProcessSnapshot) -> bool) -> Vec<WorkerId> {
    let mut ids: Vec<WorkerId> = snapshot
        .processes
        .iter()
        .filter(|p| ServiceKind::of(p) == Some(ServiceKind::Kresd) && keep(p))
        .filter_map(|p| WorkerId::from_name(&p.name))
        .collect();
    ids.sort_unstable();
    ids
}

/// Essential services the supervisor gave up on (start limit hit, readiness timeouts).
pub fn failed_essentials(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .processes
        .iter()
        .filter(|p| p.state == ProcessState::Failed)
        .filter(|p| ServiceKind::of(p).is_some_and(ServiceKind::is_essential))
        .map(|p| p.name.clone())
        .collect()
}

/// Upstream's `status` in `/processes` (supervisord's process states).
pub fn upstream_status(state: ProcessState) -> &'static str {
    match state {
        ProcessState::Running => "RUNNING",
        ProcessState::Failed => "FATAL",
        ProcessState::Exited => "EXITED",
        ProcessState::Backoff => "UNEXPECTED",
        ProcessState::Idle | ProcessState::Starting | ProcessState::Stopping => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_strings() {
        for kind in ServiceKind::ALL {
            assert_eq!(ServiceKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(ServiceKind::parse("supervisord"), None);
    }

    #[test]
    fn worker_names_and_files_parse_back_and_nothing_else_does() {
        let rundir = Path::new("/run/knot-resolver");
        for id in [0, 7, 255, u32::MAX] {
            let w = WorkerId(id);
            assert_eq!(WorkerId::from_name(&w.name()), Some(w));
            let file = w.config_file(rundir);
            let file_name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            assert_eq!(WorkerId::from_config_file_name(file_name), Some(w));
        }
        for name in [
            "kresd",
            "kresd+1",
            "kresd-1",
            "kresd1a",
            "kresd99999999999",
            "canary",
            "cache-gc",
            "xkresd1",
        ] {
            assert_eq!(WorkerId::from_name(name), None, "{name}");
        }
        assert_eq!(WorkerId::from_config_file_name("kresd1.conf.tmp"), None);
        assert_eq!(WorkerId::from_config_file_name("kresd.conf"), None);
        assert_eq!(
            WorkerId(3).control_socket(rundir),
            Path::new("/run/knot-resolver/control/3")
        );
        assert_eq!(WorkerId(3).instance_id(), "kresd:kresd3");
    }
}
