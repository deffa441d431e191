//! `knot-resolver`: the daemon.

use std::process::ExitCode;
use std::time::Duration;

use kres_config::{LogLevel, LogTarget};
use kres_daemon::daemon::cli::Args;
use kres_daemon::daemon::manager_process::{self, ManagerInvocation, WatchConfig};
use kres_daemon::daemon::{logging, LogArgs};
use kres_daemon::manager::listen::{SocketOwner, Steering};
use kres_wire::environment::Environment;

fn main() -> ExitCode {
    let args = Args::parse_as_invoked();
    if let Some(format) = args.upgrade_probe {
        return kres_daemon::daemon::upgrade::probe(format);
    }
    let log = LogArgs {
        level: logging::level_from_arg(&args.loglevel).unwrap_or(LogLevel::Notice),
        target: logging::target_from_arg(&args.logtarget).unwrap_or(LogTarget::Stdout),
    };
    // The environment, read here once: everything below is given what it needs of it.
    let env = Environment::from_vars(std::env::vars_os());
    let steering = if args.no_steering || env.no_steering {
        Steering::Off
    } else {
        Steering::Live
    };
    let owner = if args.kresd_binds_sockets || env.kresd_binds_sockets {
        SocketOwner::Kresd
    } else {
        SocketOwner::Daemon(steering)
    };
    let worker_user = args.worker_user.or_else(|| env.worker_user.clone());
    let api_groups = kres_daemon::daemon::ApiGroupNames {
        admin: args.api_admin_group.or_else(|| env.api_admin_group.clone()),
        read_only: args
            .api_read_only_group
            .or_else(|| env.api_read_only_group.clone()),
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
            env,
        });
    }
    kres_daemon::daemon::run(kres_daemon::daemon::Invocation {
        config_files: args.config,
        worker_user,
        api_groups,
        log,
        drain_period: Duration::from_secs(args.drain_period.into()),
        args: std::env::args_os().skip(1).collect(),
        env,
    })
}
