//! The `knot-resolver` daemon: the root process, the manager process and what runs in it (the
//! manager task, the management API, the watchdog, RPZ, the query log, the fleet node).
//! Process supervision lives in the `supervisor` crate, the configuration in `kres-config`,
//! the Lua in `kres-lua`, what the daemon and `kresctl` exchange in `kres-wire`; this crate
//! knows Knot Resolver, never calls `waitpid`, and knows nothing of `kresctl`.

#![forbid(unsafe_code)]

pub mod api;
pub mod control;
pub mod daemon;
pub mod etag;
pub mod events;
pub mod fleet;
pub mod manager;
pub mod metrics;
pub mod query_log;
pub mod rpz;
pub mod service;
pub mod trace;
pub mod watchdog;

pub use kres_wire::version::{build_version, BUILD_LABEL_MARKER, VERSION};

/// Run `main` to completion on a single-threaded runtime, as every process of ours does (the
/// blocking parts have threads of their own). Exit code 1, said on stderr as `program`, when
/// the runtime cannot start.
pub fn block_on(
    program: &str,
    main: impl std::future::Future<Output = std::process::ExitCode>,
) -> std::process::ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(main),
        Err(e) => {
            eprintln!("{program}: cannot start the async runtime: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
