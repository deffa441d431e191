//! `knot-resolver`: the daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use knot_resolver::config::{LogLevel, LogTarget};
use knot_resolver::daemon::{logging, LogArgs};
use knot_resolver::manager::listen::SocketOwner;

/// Knot Resolver: supervisor and manager of kresd workers.
#[derive(Parser)]
#[command(name = "knot-resolver", version = knot_resolver::VERSION, disable_version_flag = true)]
struct Args {
    /// Configuration file(s); several are deep-merged in order.
    #[arg(short = 'c', long = "config", num_args = 1.., default_value = knot_resolver::daemon::DEFAULT_CONFIG)]
    config: Vec<PathBuf>,
    /// Let kresd bind its own listening sockets, as under upstream's manager, instead of the
    /// daemon binding them and passing them to the workers (also `KRES_KRESD_BINDS_SOCKETS=1`).
    /// Sockets then close while their worker restarts, and kresd needs the privilege to bind
    /// port 53.
    #[arg(long = "kresd-binds-sockets")]
    kresd_binds_sockets: bool,
    /// Run kresd, the policy-loader and kres-cache-gc as this user (and its group) while the
    /// daemon keeps running as root (also `KRES_WORKER_USER`). The daemon binds the listening
    /// sockets before, so kresd needs no privilege for port 53. The rundir and the cache
    /// directory must be writable by that user.
    #[arg(long = "worker-user", value_name = "USER")]
    worker_user: Option<String>,
    /// Run as the manager process of a `knot-resolver` root process (set by the daemon
    /// itself; never needed on a command line).
    #[arg(long = "manager-process", hide = true)]
    manager_process: bool,
    /// Print the version and exit.
    #[arg(short = 'V', long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,
    /// Startup logging level before the configuration is loaded (then `logging.level`).
    #[arg(long = "loglevel", value_name = "LEVEL", default_value = "notice",
          value_parser = ["debug", "info", "notice", "warning", "error", "critical"])]
    loglevel: String,
    /// Startup logging target before the configuration is loaded; what `logging.target:
    /// from-arg` (the default) means. Under systemd, `stdout` and `stderr` go to the journal
    /// natively too.
    #[arg(long = "logtarget", value_name = "TARGET", default_value = "stdout",
          value_parser = ["stdout", "stderr", "syslog"])]
    logtarget: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let log = LogArgs {
        level: logging::level_from_arg(&args.loglevel).unwrap_or(LogLevel::Notice),
        target: logging::target_from_arg(&args.logtarget).unwrap_or(LogTarget::Stdout),
    };
    knot_resolver::config::set_logtarget_arg(log.target);
    let env = std::env::var_os(knot_resolver::daemon::KRESD_BINDS_SOCKETS_VAR)
        .is_some_and(|v| !v.is_empty() && v != "0");
    let owner = if args.kresd_binds_sockets || env {
        SocketOwner::Kresd
    } else {
        SocketOwner::Daemon
    };
    let worker_user = args.worker_user.or_else(|| {
        std::env::var(knot_resolver::daemon::WORKER_USER_VAR)
            .ok()
            .filter(|v| !v.is_empty())
    });
    if args.manager_process {
        return knot_resolver::daemon::manager_process::run(args.config, owner, worker_user, log);
    }
    knot_resolver::daemon::run(knot_resolver::daemon::Invocation {
        config_files: args.config,
        worker_user,
        log,
        args: std::env::args_os().skip(1).collect(),
    })
}
