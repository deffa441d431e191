//! The command line of `knot-resolver`: upstream 6.5's options (`-c/--config`, `--loglevel`,
//! `--logtarget`, `-V`, `-h`) with their meaning, and ours as additions.

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

/// The other name upstream 6.5 ships its manager under. Here it is a link to this binary and
/// runs the whole daemon, as `knot-resolver` does, with the same options.
pub const MANAGER_NAME: &str = "kres-manager";

/// Knot Resolver: supervisor and manager of kresd workers.
#[derive(Parser, Debug)]
#[command(name = "knot-resolver", version = crate::VERSION, disable_version_flag = true)]
pub struct Args {
    /// Configuration file(s); several are deep-merged in order.
    #[arg(short = 'c', long = "config", num_args = 1.., default_value = crate::daemon::DEFAULT_CONFIG)]
    pub config: Vec<PathBuf>,
    /// Let kresd bind its own listening sockets, as under upstream's manager, instead of the
    /// daemon binding them and passing them to the workers (also `KRES_KRESD_BINDS_SOCKETS=1`).
    /// Sockets then close while their worker restarts, and kresd needs the privilege to bind
    /// port 53.
    #[arg(long = "kresd-binds-sockets")]
    pub kresd_binds_sockets: bool,
    /// Do not steer queries away from workers that are dead, restarting, stopping or not yet
    /// ready (also `KRES_NO_STEERING=1`): the kernel's hash spreads them over every worker's
    /// sockets, and a worker's share waits in its queue until it is back; stopping a worker
    /// does not wait for its queues to empty. Without effect with `--kresd-binds-sockets`.
    #[arg(long = "no-steering")]
    pub no_steering: bool,
    /// Run kresd, the policy-loader and kres-cache-gc as this user (and its group) while the
    /// daemon keeps running as root (also `KRES_WORKER_USER`). The daemon binds the listening
    /// sockets before, so kresd needs no privilege for port 53. The rundir and the cache
    /// directory must be writable by that user.
    #[arg(long = "worker-user", value_name = "USER")]
    pub worker_user: Option<String>,
    /// Members of this group (primary or supplementary) may do everything through the API's
    /// unix socket, like root and the daemon's own user (also `KRES_API_ADMIN_GROUP`). Once
    /// this or `--api-read-only-group` is given, a client in neither group gets 403.
    #[arg(long = "api-admin-group", value_name = "GROUP")]
    pub api_admin_group: Option<String>,
    /// Members of this group may only read through the API's unix socket: the configuration,
    /// the schema, metrics, processes, events, the upgrade status and health (also
    /// `KRES_API_READ_ONLY_GROUP`). The socket file is given to this group (mode 0660), so
    /// its members can connect. Over TCP, the file named by `KRES_API_READ_ONLY_TOKEN_FILE`
    /// holds the read-only bearer token instead.
    #[arg(long = "api-read-only-group", value_name = "GROUP")]
    pub api_read_only_group: Option<String>,
    /// On SIGTERM/SIGINT or `kresctl drain`, first turn `/readyz` to 503 and keep answering
    /// DNS for this many seconds (so load balancers, Kubernetes endpoints or anycast routing
    /// steer traffic away), then stop. A second signal stops at once. Default 0: stop at once.
    #[arg(long = "drain-period", value_name = "SECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub drain_period: u32,
    /// Watch the configuration files themselves and reload when one changes (also a
    /// Kubernetes ConfigMap mount, which is replaced through a symlink). Off by default, as
    /// upstream, where only `kresctl reload` and SIGHUP re-read them.
    #[arg(long = "watch-config")]
    pub watch_config: bool,
    /// Ask every running kresd a trivial question on its control socket; one that does not
    /// answer within this many seconds (stopped, looping in Lua, deadlocked) is killed and
    /// restarted, with the reason in `/processes` and the log. 0 turns the check off.
    #[arg(long = "worker-hang-timeout", value_name = "SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub worker_hang_timeout: u32,
    /// Run as the manager process of a `knot-resolver` root process (set by the daemon
    /// itself; never needed on a command line).
    #[arg(long = "manager-process", hide = true)]
    pub manager_process: bool,
    /// Exit 0 when this binary can adopt the running processes from a state of this format
    /// (asked by the daemon of its new binary before an in-place upgrade).
    #[arg(long = "upgrade-probe", value_name = "FORMAT", hide = true)]
    pub upgrade_probe: Option<u32>,
    /// Print the version and exit.
    #[arg(short = 'V', long = "version", action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// Startup logging level before the configuration is loaded (then `logging.level`).
    #[arg(long = "loglevel", value_name = "LEVEL", default_value = "notice",
          value_parser = ["debug", "info", "notice", "warning", "error", "critical"])]
    pub loglevel: String,
    /// Startup logging target before the configuration is loaded; what `logging.target:
    /// from-arg` (the default) means. Under systemd, `stdout` and `stderr` go to the journal
    /// natively too.
    #[arg(long = "logtarget", value_name = "TARGET", default_value = "stdout",
          value_parser = ["stdout", "stderr", "syslog"])]
    pub logtarget: String,
}

impl Args {
    /// The command line of this process, parsed under the name it was started as: as
    /// `kres-manager` (upstream 6.5's name, a link to this binary) the usage and the help
    /// name `kres-manager`; any other name is `knot-resolver`. Exits on a bad command line
    /// or after `--help`/`--version`, as `parse` does.
    pub fn parse_as_invoked() -> Self {
        let as_manager = std::env::args_os().next().is_some_and(|arg0| {
            std::path::Path::new(&arg0).file_name() == Some(std::ffi::OsStr::new(MANAGER_NAME))
        });
        let mut command = Self::command();
        if as_manager {
            command = command
                .name(MANAGER_NAME)
                .bin_name(MANAGER_NAME)
                .about("Knot Resolver: supervisor and manager of kresd workers (kres-manager is upstream 6.5's other name for knot-resolver).");
        }
        let matches = command.get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}
