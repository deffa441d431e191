//! What operators ask the resolver to do: `POST /reload` and `POST /renew` (the manager applies
//! the files or the running configuration again, `/force` restarting every worker), `/drain`
//! and `/stop` (through the supervisor), and `/cache/clear` (through a worker's control
//! socket).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::config::AppliedAnswer;
use super::error::ApiError;
use super::{json_value, responses, ApiState};
use crate::events::Origin;
use crate::manager::plan::{Restart, Stage};
use crate::service;
use kres_wire::change::ReloadSummary;

/// Read the configuration files again and apply them.
///
/// Synchronous: answers once the change is applied. An invalid file or a rejected
/// configuration is an error answer (upstream answers 200 and only logs).
#[utoipa::path(post, path = "/reload", tag = "control", responses(responses::Reload))]
pub(super) async fn reload(
    state: State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    reapply(state, Reapply::Reload, Restart::WhenNeeded, &headers).await
}

/// Read the configuration files again and apply them, restarting every worker.
#[utoipa::path(
    post,
    path = "/reload/force",
    tag = "control",
    responses(responses::Reload)
)]
pub(super) async fn reload_force(
    state: State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    reapply(state, Reapply::Reload, Restart::Always, &headers).await
}

/// Apply the running configuration again.
#[utoipa::path(post, path = "/renew", tag = "control", responses(responses::Renew))]
pub(super) async fn renew(
    state: State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    reapply(state, Reapply::Renew, Restart::WhenNeeded, &headers).await
}

/// Apply the running configuration again, restarting every worker.
#[utoipa::path(
    post,
    path = "/renew/force",
    tag = "control",
    responses(responses::Renew)
)]
pub(super) async fn renew_force(
    state: State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    reapply(state, Reapply::Renew, Restart::Always, &headers).await
}

/// What `POST /reload` and `POST /renew` have the manager apply again.
#[derive(Clone, Copy)]
enum Reapply {
    /// The configuration files, read again.
    Reload,
    /// The running configuration.
    Renew,
}

/// `POST /reload[/force]` and `POST /renew[/force]`: upstream's text, or, when the client
/// asks for JSON (`Accept`), what was done (and which changes made through the API a reload
/// undid).
async fn reapply(
    State(state): State<ApiState>,
    what: Reapply,
    restart: Restart,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let answer = AppliedAnswer::from_headers(headers);
    let (text, summary) = match what {
        Reapply::Reload => {
            let reloaded = state.manager.reload(restart, Origin::Api).await?;
            let summary = ReloadSummary {
                change: reloaded.plan.summary(Stage::Applied),
                discarded: reloaded.discarded,
            };
            ("Reloading...", summary)
        }
        Reapply::Renew => {
            let plan = state.manager.renew(restart, Origin::Api).await?;
            let summary = ReloadSummary {
                change: plan.summary(Stage::Applied),
                discarded: Vec::new(),
            };
            ("Renewing configuration...", summary)
        }
    };
    Ok(match answer {
        AppliedAnswer::Empty => (StatusCode::OK, text).into_response(),
        AppliedAnswer::Summary => json_value(StatusCode::OK, &summary),
    })
}

/// Drain, then stop.
///
/// The daemon turns readiness off, keeps serving for its drain period (`--drain-period`), then
/// stops everything (as on SIGTERM).
#[utoipa::path(
    post,
    path = "/drain",
    tag = "control",
    responses(
        (status = 200, description = "Draining begins.", body = String,
         content_type = "text/plain", example = "Draining..."),
        (status = 503, description = "The supervisor cannot be reached.", body = String,
         content_type = "text/plain"),
    ),
)]
pub(super) async fn drain(State(state): State<ApiState>) -> Result<Response, ApiError> {
    state
        .supervisor
        .drain()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    Ok((StatusCode::OK, "Draining...").into_response())
}

/// Stop the resolver: every worker, the cache GC, the manager.
#[utoipa::path(
    post,
    path = "/stop",
    tag = "control",
    responses((status = 200, description = "Stopping begins.", body = String,
               content_type = "text/plain", example = "Shutting down...")),
)]
pub(super) async fn stop(State(state): State<ApiState>) -> Response {
    state.stop.cancel();
    (StatusCode::OK, "Shutting down...").into_response()
}

/// Clear the cache (shared by every worker), or part of it.
#[utoipa::path(
    post,
    path = "/cache/clear",
    tag = "control",
    request_body(content = Object, content_type = "application/json", description = "Upstream's \
cache-clear request: `name` (a domain name), `exact-name` (boolean), `rr-type` (an RR type, with \
`exact-name`), `chunk-size` (a positive integer); every member optional: `{}` clears everything. \
A body is required, as upstream's manager requires one."),
    responses(
        (status = 200, description = "kresd's answer to `cache.clear()`.", body = Object),
        (status = 400, description = "The body is missing, not JSON, or not a valid request.",
         body = String, content_type = "text/plain"),
        (status = 413, description = "The body is larger than the limit.", body = String,
         content_type = "text/plain"),
        (status = 500, description = "The worker's control socket failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "No worker is running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub(super) async fn cache_clear(
    State(state): State<ApiState>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest(
            "request processing error:\nthe body is empty: a JSON object is expected ({} clears \
everything)"
                .into(),
        ));
    }
    let request: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("request processing error:\n{e}")))?;
    let clear = kres_lua::cache_clear::CacheClear::from_json(&request).map_err(|errors| {
        ApiError::BadRequest(format!(
            "Configuration validation error detected:\n\t{}",
            errors.join("\n\t")
        ))
    })?;
    let rundir = state.manager.config().model.rundir.clone();
    let Some(&id) = service::running_workers(&state.supervisor.snapshot()).first() else {
        return Err(ApiError::Unavailable(
            "no running worker to clear the cache".into(),
        ));
    };
    let path = id.control_socket(&rundir);
    let result =
        crate::control::command(&path, &clear.render_lua(), crate::control::COMMAND_TIMEOUT)
            .await
            .map_err(|e| ApiError::Failed(e.to_string()))?;
    Ok(json_value(StatusCode::OK, &result))
}
