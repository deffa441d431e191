//! The supervisor's plain data, apart from the supervisor itself: what it publishes (the
//! process table, how a process ended) and what it is told (the user to run a child as, the
//! variables a service manager sets). A reader of the table (the management API's client, the
//! wire types) needs these and nothing of spawning, reaping or signals; the `supervisor`
//! crate re-exports each where it has always been.

pub mod snapshot;

pub use snapshot::{ProcessSnapshot, ProcessState, Snapshot};

use std::time::Duration;

use nix::sys::signal::Signal;

/// How a process ended. Death by signal is kept apart from exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal number.
    Signaled { signal: i32, core_dumped: bool },
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(code) => write!(f, "exit code {code}"),
            ExitStatus::Signaled {
                signal,
                core_dumped,
            } => {
                let name = Signal::try_from(*signal)
                    .map(|s| s.as_str())
                    .unwrap_or("unknown signal");
                write!(f, "killed by {name} ({signal})")?;
                if *core_dumped {
                    write!(f, ", core dumped")?;
                }
                Ok(())
            }
        }
    }
}

/// A user and group id to run a child as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
}

/// What the service manager tells us through the environment: where to notify
/// (`NOTIFY_SOCKET`), the watchdog (`WATCHDOG_USEC`, meant for us when `WATCHDOG_PID` is
/// unset or ours), how many descriptors it keeps (`FDSTORE`) and the descriptors it passed
/// (`LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`). Read once by the binary; the library
/// never reads the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceManagerVars {
    pub notify_socket: Option<std::ffi::OsString>,
    pub watchdog: Option<Duration>,
    pub fd_store: usize,
    pub listen_pid: Option<u32>,
    pub listen_fds: i32,
    pub listen_fdnames: String,
}

impl ServiceManagerVars {
    /// The variables found by `get` (the first of a name, as getenv(3) finds it), for the
    /// process `pid`.
    pub fn read(get: impl Fn(&str) -> Option<std::ffi::OsString>, pid: u32) -> Self {
        let text = |name: &str| get(name).and_then(|v| v.into_string().ok());
        let number = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
        let watchdog_for_us = number("WATCHDOG_PID").is_none_or(|p| p == u64::from(pid));
        ServiceManagerVars {
            notify_socket: get("NOTIFY_SOCKET").filter(|s| !s.is_empty()),
            watchdog: number("WATCHDOG_USEC")
                .filter(|&usec| usec > 0 && watchdog_for_us)
                .map(Duration::from_micros),
            fd_store: text("FDSTORE").and_then(|n| n.parse().ok()).unwrap_or(0),
            listen_pid: text("LISTEN_PID").and_then(|p| p.parse().ok()),
            listen_fds: text("LISTEN_FDS").and_then(|n| n.parse().ok()).unwrap_or(0),
            listen_fdnames: text("LISTEN_FDNAMES").unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)], pid: u32) -> ServiceManagerVars {
        ServiceManagerVars::read(
            |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            },
            pid,
        )
    }

    #[test]
    fn the_service_managers_variables_are_read_as_systemd_means_them() {
        assert_eq!(vars(&[], 7), ServiceManagerVars::default());
        let v = vars(
            &[
                ("NOTIFY_SOCKET", "@sd"),
                ("WATCHDOG_USEC", "4000000"),
                ("FDSTORE", "12"),
                ("LISTEN_PID", "7"),
                ("LISTEN_FDS", "2"),
                ("LISTEN_FDNAMES", "api:dns"),
            ],
            7,
        );
        assert_eq!(
            v.notify_socket.as_deref(),
            Some(std::ffi::OsStr::new("@sd"))
        );
        assert_eq!(v.watchdog, Some(Duration::from_secs(4)));
        assert_eq!((v.fd_store, v.listen_pid, v.listen_fds), (12, Some(7), 2));
        assert_eq!(v.listen_fdnames, "api:dns");
        // a watchdog meant for another process, an empty socket, junk numbers
        let v = vars(
            &[
                ("NOTIFY_SOCKET", ""),
                ("WATCHDOG_USEC", "4000000"),
                ("WATCHDOG_PID", "8"),
                ("FDSTORE", "many"),
            ],
            7,
        );
        assert_eq!((v.notify_socket, v.watchdog, v.fd_store), (None, None, 0));
        assert_eq!(vars(&[("WATCHDOG_USEC", "0")], 7).watchdog, None);
        assert_eq!(
            vars(&[("WATCHDOG_USEC", "1000"), ("WATCHDOG_PID", "7")], 7).watchdog,
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn an_exit_status_reads_as_an_operator_would_say_it() {
        let rows = [
            (ExitStatus::Code(0), "exit code 0"),
            (ExitStatus::Code(1), "exit code 1"),
            (
                ExitStatus::Signaled {
                    signal: 9,
                    core_dumped: false,
                },
                "killed by SIGKILL (9)",
            ),
            (
                ExitStatus::Signaled {
                    signal: 11,
                    core_dumped: true,
                },
                "killed by SIGSEGV (11), core dumped",
            ),
            (
                ExitStatus::Signaled {
                    signal: 999,
                    core_dumped: false,
                },
                "killed by unknown signal (999)",
            ),
        ];
        for (status, text) in rows {
            assert_eq!(status.to_string(), text, "{status:?}");
        }
    }
}
