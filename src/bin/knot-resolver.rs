//! `knot-resolver`: the daemon.

use std::process::ExitCode;
use std::time::Duration;

use knot_resolver::config::{LogLevel, LogTarget};
use knot_resolver::daemon::cli::Args;
use knot_resolver::daemon::manager_process::{self, ManagerInvocation, WatchConfig};
use knot_resolver::daemon::{logging, LogArgs};
use knot_resolver::manager::listen::{SocketOwner, Steering};

fn main() -> ExitCode {
    let args = Args::parse_as_invoked();
    if let Some(format) = args.upgrade_probe {
        return knot_resolver::daemon::upgrade::probe(format);
    }
    let log = LogArgs {
        level: logging::level_from_arg(&args.loglevel).unwrap_or(LogLevel::Notice),
        target: logging::target_from_arg(&args.logtarget).unwrap_or(LogTarget::Stdout),
    };
    let set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0");
    let steering = if args.no_steering || set(knot_resolver::daemon::NO_STEERING_VAR) {
        Steering::Off
    } else {
        Steering::Live
    };
    let owner = if args.kresd_binds_sockets || set(knot_resolver::daemon::KRESD_BINDS_SOCKETS_VAR) {
        SocketOwner::Kresd
    } else {
        SocketOwner::Daemon(steering)
    };
    let from_env = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
    let worker_user = args
        .worker_user
        .or_else(|| from_env(knot_resolver::daemon::WORKER_USER_VAR));
    let api_groups = knot_resolver::daemon::ApiGroupNames {
        admin: args
            .api_admin_group
            .or_else(|| from_env(knot_resolver::daemon::API_ADMIN_GROUP_VAR)),
        read_only: args
            .api_read_only_group
            .or_else(|| from_env(knot_resolver::daemon::API_READ_ONLY_GROUP_VAR)),
    };
    if args.manager_process {
        return manager_process::run(ManagerInvocation {
            files: args.config,
            socket_owner: owner,
            worker_user,
            api_groups,
            log,
            watch_config: if args.watch_config {
                WatchConfig::On
            } else {
                WatchConfig::Off
            },
            worker_hang_timeout: (args.worker_hang_timeout > 0)
                .then(|| Duration::from_secs(args.worker_hang_timeout.into())),
        });
    }
    knot_resolver::daemon::run(knot_resolver::daemon::Invocation {
        config_files: args.config,
        worker_user,
        api_groups,
        log,
        drain_period: Duration::from_secs(args.drain_period.into()),
        args: std::env::args_os().skip(1).collect(),
    })
}
