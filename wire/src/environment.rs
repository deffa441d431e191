//! The process environment, read once where a binary starts (`src/bin/`) and passed down as an
//! [`Environment`]: library code never reads `std::env`, so what a process was started with is
//! one value that a test can build, and a variable's meaning is parsed in one place.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

/// Set (to anything) by the tests of recovery: the daemon serves the routes that make it fail
/// and does what the value's words ask (`slow-keeper`, `refuse-upgrade-state`).
pub const FAULT_INJECTION_VAR: &str = "KRES_FAULT_INJECTION";
/// `--kresd-binds-sockets` (set and neither empty nor `0`).
pub const KRESD_BINDS_SOCKETS_VAR: &str = "KRES_KRESD_BINDS_SOCKETS";
/// `--no-steering` (set and neither empty nor `0`).
pub const NO_STEERING_VAR: &str = "KRES_NO_STEERING";
/// `--worker-user`.
pub const WORKER_USER_VAR: &str = "KRES_WORKER_USER";
/// `--api-admin-group`.
pub const API_ADMIN_GROUP_VAR: &str = "KRES_API_ADMIN_GROUP";
/// `--api-read-only-group`.
pub const API_READ_ONLY_GROUP_VAR: &str = "KRES_API_READ_ONLY_GROUP";
/// Seconds the manager may answer no ping before the root counts it as hung.
pub const MANAGER_HANG_VAR: &str = "KRES_MANAGER_HANG_TIMEOUT";
/// The manager process's address-space limit, in MiB.
pub const MEMORY_MAX_VAR: &str = "KRES_MANAGER_MEMORY_MAX";
/// An `EnvFilter` directive that, when it parses, overrides every log level.
pub const LOG_OVERRIDE_VAR: &str = "KRES_LOG";
/// The file holding the API's admin bearer token.
pub const TOKEN_FILE_VAR: &str = "KRES_API_TOKEN_FILE";
/// The file holding the API's read-only bearer token.
pub const READ_ONLY_TOKEN_FILE_VAR: &str = "KRES_API_READ_ONLY_TOKEN_FILE";
/// Seconds the policy-loader may run.
pub const POLICY_LOADER_TIMEOUT_VAR: &str = "KRES_POLICY_LOADER_TIMEOUT";
/// Where a new image of an upgrade finds its state (`<state fd>:<fallback fd or ->`).
pub const UPGRADE_STATE_VAR: &str = "KRES_UPGRADE_STATE";
/// kresd's path, instead of the one looked up.
pub const KRESD_EXECUTABLE_VAR: &str = "KRES_KRESD_EXECUTABLE";
/// kres-cache-gc's path, instead of the one looked up.
pub const CACHE_GC_EXECUTABLE_VAR: &str = "KRES_CACHE_GC_EXECUTABLE";
/// systemd's `<device>:<inode>` of the journal stream our standard streams may be.
pub const JOURNAL_STREAM_VAR: &str = "JOURNAL_STREAM";

/// What the process environment says, parsed. Values that do not parse are as if unset (the
/// built-in default applies), as each variable's reader did before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Every variable, in order: what children inherit (less what was meant for us alone) and
    /// what the new image of an upgrade is given.
    pub vars: Vec<(OsString, OsString)>,
    /// [`FAULT_INJECTION_VAR`], when set (even empty).
    pub fault_injection: Option<String>,
    /// [`NO_STEERING_VAR`] set and neither empty nor `0`.
    pub no_steering: bool,
    /// [`KRESD_BINDS_SOCKETS_VAR`] set and neither empty nor `0`.
    pub kresd_binds_sockets: bool,
    /// [`WORKER_USER_VAR`], unless empty.
    pub worker_user: Option<String>,
    /// [`API_ADMIN_GROUP_VAR`], unless empty.
    pub api_admin_group: Option<String>,
    /// [`API_READ_ONLY_GROUP_VAR`], unless empty.
    pub api_read_only_group: Option<String>,
    /// [`MANAGER_HANG_VAR`], a number of seconds.
    pub manager_hang_after: Option<Duration>,
    /// [`MEMORY_MAX_VAR`], a number of MiB.
    pub manager_memory_max_mib: Option<u64>,
    /// [`LOG_OVERRIDE_VAR`].
    pub log_override: Option<String>,
    /// [`TOKEN_FILE_VAR`], unless empty.
    pub token_file: Option<PathBuf>,
    /// [`READ_ONLY_TOKEN_FILE_VAR`], unless empty.
    pub read_only_token_file: Option<PathBuf>,
    /// [`POLICY_LOADER_TIMEOUT_VAR`], a number of seconds.
    pub policy_loader_timeout: Option<Duration>,
    /// [`UPGRADE_STATE_VAR`].
    pub upgrade_state: Option<String>,
    /// [`KRESD_EXECUTABLE_VAR`] (even empty).
    pub kresd_executable: Option<PathBuf>,
    /// [`CACHE_GC_EXECUTABLE_VAR`] (even empty).
    pub cache_gc_executable: Option<PathBuf>,
    /// `PATH`, where programs are looked for.
    pub path: Option<OsString>,
    /// [`JOURNAL_STREAM_VAR`].
    pub journal_stream: Option<OsString>,
    /// The configuration's `KRES_LOGTARGET`, which `logging.target: from-arg` means for the
    /// offline tools.
    pub logtarget: Option<String>,
    /// What the service manager (systemd) passes: `NOTIFY_SOCKET`, `WATCHDOG_*`, `FDSTORE`,
    /// `LISTEN_*`.
    pub service_manager: supervisor_types::ServiceManagerVars,
}

impl Environment {
    /// The environment made of `vars` (a binary passes `std::env::vars_os()`).
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Environment {
        let vars: Vec<(OsString, OsString)> = vars.into_iter().collect();
        let raw = |name: &str| {
            // the first, as getenv(3) finds it
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_os_str())
        };
        let text = |name: &str| raw(name).and_then(OsStr::to_str).map(str::to_owned);
        let non_empty = |name: &str| text(name).filter(|v| !v.is_empty());
        let file = |name: &str| raw(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let flag = |name: &str| raw(name).is_some_and(|v| !v.is_empty() && v != "0");
        let seconds = |name: &str| {
            text(name)
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs)
        };
        Environment {
            fault_injection: text(FAULT_INJECTION_VAR),
            no_steering: flag(NO_STEERING_VAR),
            kresd_binds_sockets: flag(KRESD_BINDS_SOCKETS_VAR),
            worker_user: non_empty(WORKER_USER_VAR),
            api_admin_group: non_empty(API_ADMIN_GROUP_VAR),
            api_read_only_group: non_empty(API_READ_ONLY_GROUP_VAR),
            manager_hang_after: seconds(MANAGER_HANG_VAR),
            manager_memory_max_mib: text(MEMORY_MAX_VAR).and_then(|v| v.parse().ok()),
            log_override: text(LOG_OVERRIDE_VAR),
            token_file: file(TOKEN_FILE_VAR),
            read_only_token_file: file(READ_ONLY_TOKEN_FILE_VAR),
            policy_loader_timeout: seconds(POLICY_LOADER_TIMEOUT_VAR),
            upgrade_state: text(UPGRADE_STATE_VAR),
            kresd_executable: raw(KRESD_EXECUTABLE_VAR).map(PathBuf::from),
            cache_gc_executable: raw(CACHE_GC_EXECUTABLE_VAR).map(PathBuf::from),
            path: raw("PATH").map(OsStr::to_owned),
            journal_stream: raw(JOURNAL_STREAM_VAR).map(OsStr::to_owned),
            logtarget: text(kres_config::LOGTARGET_ENV_VAR),
            service_manager: supervisor_types::ServiceManagerVars::read(
                |name| raw(name).map(OsStr::to_owned),
                std::process::id(),
            ),
            vars,
        }
    }

    /// The variables less those named in `private`.
    pub fn vars_except(&self, private: &[&str]) -> Vec<(OsString, OsString)> {
        self.vars
            .iter()
            .filter(|(k, _)| !private.iter().any(|p| k == p))
            .cloned()
            .collect()
    }

    /// Whether the tests of recovery asked for the fault `word` ([`FAULT_INJECTION_VAR`]
    /// containing it).
    pub fn fault_injected(&self, word: &str) -> bool {
        self.fault_injection
            .as_deref()
            .is_some_and(|v| v.contains(word))
    }
}

/// Whether our standard error is the journal's stream (a command run by systemd, such as
/// `ExecReload=kresctl reload`): lines written there may carry a `<N>` priority prefix.
/// `journal_stream` is the environment's `JOURNAL_STREAM`.
pub fn stderr_is_journal(journal_stream: Option<&OsStr>) -> bool {
    connected_to_journal(std::io::stderr().as_fd(), journal_stream)
}

/// Whether `fd` is the stream `journal_stream` (`JOURNAL_STREAM`: `<device>:<inode>`) names.
pub fn connected_to_journal(
    fd: std::os::fd::BorrowedFd<'_>,
    journal_stream: Option<&OsStr>,
) -> bool {
    let Some(value) = journal_stream else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::from_vars(vars.iter().map(|(k, v)| (k.into(), v.into())))
    }

    #[test]
    fn each_variable_is_parsed_as_its_reader_did() {
        let e = env(&[
            (NO_STEERING_VAR, "1"),
            (KRESD_BINDS_SOCKETS_VAR, "0"),
            (WORKER_USER_VAR, ""),
            (API_ADMIN_GROUP_VAR, "wheel"),
            (MANAGER_HANG_VAR, "7"),
            (MEMORY_MAX_VAR, "lots"),
            (POLICY_LOADER_TIMEOUT_VAR, "30"),
            (TOKEN_FILE_VAR, ""),
            (READ_ONLY_TOKEN_FILE_VAR, "/etc/ro.token"),
            (FAULT_INJECTION_VAR, ""),
            (KRESD_EXECUTABLE_VAR, "/opt/kresd"),
        ]);
        assert!(e.no_steering);
        assert!(!e.kresd_binds_sockets);
        assert_eq!(e.worker_user, None);
        assert_eq!(e.api_admin_group.as_deref(), Some("wheel"));
        assert_eq!(e.manager_hang_after, Some(Duration::from_secs(7)));
        assert_eq!(e.manager_memory_max_mib, None);
        assert_eq!(e.policy_loader_timeout, Some(Duration::from_secs(30)));
        assert_eq!(e.token_file, None);
        assert_eq!(
            e.read_only_token_file.as_deref(),
            Some(std::path::Path::new("/etc/ro.token"))
        );
        // set but empty: fault injection is on, with no particular fault
        assert_eq!(e.fault_injection.as_deref(), Some(""));
        assert!(!e.fault_injected("slow-keeper"));
        assert_eq!(
            e.kresd_executable.as_deref(),
            Some(std::path::Path::new("/opt/kresd"))
        );
        assert_eq!(e.cache_gc_executable, None);
    }

    #[test]
    fn children_inherit_every_variable_but_the_private_ones() {
        let e = env(&[("PATH", "/bin"), ("NOTIFY_SOCKET", "/run/n"), ("LANG", "C")]);
        let kept: Vec<_> = e
            .vars_except(&["NOTIFY_SOCKET"])
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kept, ["PATH", "LANG"]);
        assert_eq!(e.path.as_deref(), Some(OsStr::new("/bin")));
    }
}
