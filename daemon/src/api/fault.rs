//! Fault injection, for the tests of the manager's recovery: panic the manager task, or crash
//! the manager process the way a bug would. The routes exist, in the router and in the
//! OpenAPI document, only when the daemon was started with `KRES_FAULT_INJECTION`
//! (`ApiState::fault_injection`); otherwise they are 404 as any path no route serves.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::params::{PathParam, PathValue};
use super::ApiState;

/// Whether the fault-injection routes are served (and described).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultInjection {
    /// Production: no such route.
    #[default]
    Off,
    /// Tests of the manager's recovery (`KRES_FAULT_INJECTION` set).
    On,
}

/// Fault injection: panic the manager task (it is restarted in-process).
#[utoipa::path(
    post,
    path = "/debug/panic-manager",
    tag = "fault-injection",
    responses(
        (status = 200, description = "The panic was requested.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager task is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub(super) async fn panic_manager(State(state): State<ApiState>) -> Result<Response, ApiError> {
    if !state.manager.panic().await {
        return Err(ApiError::Unavailable("manager is not running".into()));
    }
    Ok((StatusCode::OK, "manager panic requested").into_response())
}

/// Fault injection: crash the manager process the way a bug would.
///
/// A stack overflow (as a parser recursing on input nested too deeply), a segmentation fault,
/// an abort. The root replaces the process; the request gets no answer (the connection closes).
#[utoipa::path(
    post,
    path = "/debug/crash-manager/{how}",
    tag = "fault-injection",
    params(("how" = inline(CrashKind), Path, description = "How the manager process dies.")),
    responses(
        (status = 404, description = "`how` is none of the kinds; empty body."),
        (status = 500, description = "The process survived its segmentation fault.",
         body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn crash_manager(
    PathParam(how): PathParam<CrashKind>,
) -> Result<Response, ApiError> {
    let name = format!("{how:?}").to_ascii_lowercase();
    tracing::warn!("fault injection: crashing the manager process ({name})");
    match how {
        CrashKind::Overflow => {
            let n = recurse(std::hint::black_box(1));
            Ok((StatusCode::OK, n.to_string()).into_response())
        }
        CrashKind::Segfault => {
            // The first SIGSEGV is taken by Rust's stack-overflow handler, which restores the
            // default action; the second ends the process as a real fault would.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
            Err(ApiError::Failed(
                "the process survived its segmentation fault".into(),
            ))
        }
        CrashKind::Abort => std::process::abort(),
    }
}

/// How `POST /debug/crash-manager/{how}` crashes the manager process.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CrashKind {
    Overflow,
    Segfault,
    Abort,
}

impl PathValue for CrashKind {
    /// No such kind: the route is not there (as when fault injection is off).
    fn refused(_: &str) -> ApiError {
        ApiError::NotFound
    }
}

#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    let frame = std::hint::black_box([n; 64]);
    recurse(frame[0].wrapping_add(1)).wrapping_add(frame[63])
}
