//! What runs, and how it does: `GET /` (the manager's greeting and version), and the probes
//! `/livez` (a worker serves) and `/readyz` (every configured worker is ready, and the resolver
//! neither drains nor stops). Each reads the supervisor's snapshot and the running
//! configuration; none asks anything of the manager.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::{json_value, ApiState};
use crate::service;

/// What `GET /` answers.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ManagerStatus {
    /// Upstream's greeting.
    msg: &'static str,
    /// Always `RUNNING`.
    status: &'static str,
    /// The version of the running daemon (`+label` when the build has one).
    version: String,
    /// The version of the kresd the workers run (`kresd --version`); `null` until it is known
    /// or when it cannot be told.
    kresd_version: Option<String>,
}

/// Whether the manager runs, and its version.
#[utoipa::path(
    get,
    path = "/",
    tag = "status",
    responses((status = 200, description = "The manager runs.", body = ManagerStatus)),
)]
pub(super) async fn root(State(state): State<ApiState>) -> Response {
    json_value(
        StatusCode::OK,
        &ManagerStatus {
            msg: "Knot Resolver Manager is running! The configuration endpoint is at /config",
            status: "RUNNING",
            version: crate::build_version(),
            kresd_version: state.kresd_version.get().cloned(),
        },
    )
}

/// Liveness: alive while a worker is running.
///
/// The API answers, and DNS can be answered. Draining and stopping resolvers are alive as long
/// as they serve.
#[utoipa::path(
    get,
    path = "/livez",
    tag = "status",
    responses(
        (status = 200, description = "Alive.", body = String, content_type = "text/plain",
         example = "alive: 2 workers running\n"),
        (status = 503, description = "No worker is running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub(super) async fn livez(State(state): State<ApiState>) -> Response {
    let snapshot = state.supervisor.snapshot();
    let running = service::running_workers(&snapshot).len();
    if running > 0 {
        (
            StatusCode::OK,
            format!("alive: {running} workers running\n"),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not alive: no worker is running\n",
        )
            .into_response()
    }
}

/// Readiness: every configured worker runs and is ready, and the resolver is neither
/// draining nor stopping.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "status",
    responses(
        (status = 200, description = "Ready.", body = String, content_type = "text/plain",
         example = "ready: 2/2 workers\n"),
        (status = 503, description = "Not ready: stopping, draining, or fewer workers ready \
than configured.", body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn readyz(State(state): State<ApiState>) -> Response {
    let snapshot = state.supervisor.snapshot();
    let wanted = state.manager.config().model.workers as usize;
    let ready = service::running_workers(&snapshot).len();
    let not_ready = |why: String| (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    if snapshot.shutting_down {
        not_ready("not ready: stopping\n".into())
    } else if snapshot.draining {
        not_ready(format!(
            "not ready: draining ({ready}/{wanted} workers answering)\n"
        ))
    } else if ready < wanted {
        not_ready(format!("not ready: {ready}/{wanted} workers\n"))
    } else {
        (StatusCode::OK, format!("ready: {ready}/{wanted} workers\n")).into_response()
    }
}
