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
pub mod kresctl;
pub mod lua;
pub mod manager;
pub mod metrics;
pub mod service;
pub mod watchdog;

/// The version reported by `-V`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
