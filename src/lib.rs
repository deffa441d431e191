//! Knot Resolver's control plane: configuration, Lua generation, the manager, the management
//! API and the `kresctl` client. Process supervision lives in the `supervisor` crate; this
//! crate knows Knot Resolver and never calls `waitpid`.

pub mod api;
pub mod config;
pub mod daemon;
pub mod kresctl;
pub mod lua;
pub mod manager;

/// The version reported by `-V`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
