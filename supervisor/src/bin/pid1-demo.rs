//! The smallest init built on the supervisor, for the PID 1 test (`tests/pid1.rs`): run one
//! notify service, reap whatever is orphaned into us, and on SIGTERM or SIGINT stop everything
//! and exit 0 (1 if a process had to be killed).
//!
//! Usage: `pid1-demo NOTIFY_SOCKET PROGRAM [ARGS…]`, typically under
//! `unshare --pid --fork --mount-proc`. Logs go to stderr.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_tokio::Signals;
use supervisor::{Readiness, ServiceSpec, Supervisor, SupervisorOptions};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .init();
    let mut args = std::env::args_os().skip(1);
    let (Some(socket), argv) = (args.next(), args.collect::<Vec<OsString>>()) else {
        eprintln!("usage: pid1-demo NOTIFY_SOCKET PROGRAM [ARGS…]");
        return ExitCode::from(2);
    };
    if argv.is_empty() {
        eprintln!("usage: pid1-demo NOTIFY_SOCKET PROGRAM [ARGS…]");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot build the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(serve(PathBuf::from(socket), argv))
}

async fn serve(socket: PathBuf, argv: Vec<OsString>) -> ExitCode {
    tracing::info!(pid1 = supervisor::os::is_pid1(), "starting");
    if let Err(e) = supervisor::os::cloexec_inherited_fds(&[]) {
        tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
    }
    // As PID 1 a signal without a handler is dropped: handlers go in before anything else.
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let (sup, actor) = match Supervisor::start(SupervisorOptions {
        notify_socket: socket,
        notify_senders: None,
        line_levels: supervisor::output::levels_by_stream,
    }) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start the supervisor: {e}");
            return ExitCode::from(1);
        }
    };
    let mut spec = ServiceSpec::new("child", "demo", argv);
    spec.readiness = Readiness::Notify {
        timeout: Duration::from_secs(30),
    };
    spec.stop.timeout = Duration::from_secs(5);
    // The child's environment is explicit: it only needs PATH (and gets NOTIFY_SOCKET).
    spec.env = std::env::vars_os().filter(|(k, _)| k == "PATH").collect();
    let started = async {
        sup.add(spec, Vec::new()).await?;
        sup.start("child").await
    };
    match started.await {
        Ok(pid) => tracing::info!(pid = pid.as_raw(), "demo child ready"),
        Err(e) => {
            tracing::error!("demo child did not start: {e}");
            let _ = sup.shutdown().await;
            return ExitCode::from(1);
        }
    }
    let signal = signals.next().await;
    tracing::info!(?signal, "stopping");
    let report = sup.shutdown().await;
    let _ = actor.await;
    match report {
        Ok(r) if r.unclean.is_empty() => {
            tracing::info!("stopped cleanly");
            ExitCode::SUCCESS
        }
        Ok(r) => {
            tracing::warn!(unclean = ?r.unclean, "stopped, some processes were killed");
            ExitCode::from(1)
        }
        Err(e) => {
            tracing::error!("shutdown failed: {e}");
            ExitCode::from(1)
        }
    }
}
