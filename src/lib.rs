//! Knot Resolver's control plane: configuration, Lua generation, the manager, the management
//! API and the `kresctl` client. Process supervision lives in the `supervisor` crate; this
//! crate knows Knot Resolver and never calls `waitpid`.

#![forbid(unsafe_code)]

pub mod api;
pub mod cache_clear;
pub mod config;
pub mod control;
pub mod daemon;
pub mod etag;
pub mod events;
pub mod kresctl;
pub mod lua;
pub mod manager;
pub mod metrics;
pub mod service;
pub mod watchdog;

/// The version reported by `-V`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

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
