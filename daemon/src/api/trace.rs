//! `GET /trace/{name}/{type}` (the shape of Knot Resolver 5's `/trace/:name/:type`): one
//! query resolved on the first running worker with kresd's request tracing, its verbose log
//! and final answer (`crate::trace`). Admin only: it makes the resolver resolve what the
//! caller names, and the log shows the resolver's inner workings.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::{json_value, ApiState};
use crate::service;
use crate::trace::{TraceError, TraceQuery};
use kres_wire::trace::Trace;

/// The query of a trace.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TraceParams {
    /// How long to wait for the answer, in seconds (default 5, at most 60).
    timeout: Option<f64>,
}

/// Trace one query: resolve it on one worker with kresd's request tracing, and answer its
/// verbose log and final answer. The workers' log level is not changed; the log is limited
/// to 256 KiB (`truncated` says when it was cut).
#[utoipa::path(
    get,
    path = "/trace/{name}/{type}",
    tag = "control",
    params(
        ("name" = String, Path, description = "The domain name to resolve."),
        ("type" = String, Path, description = "The RR type (`A`, `AAAA`, `MX`, …; class IN)."),
        TraceParams,
    ),
    responses(
        (status = 200, description = "The trace: the worker, the query, the answer's rcode and \
records, kresd's log of the request.", body = Trace),
        (status = 400, description = "Not a domain name, an unknown RR type or a timeout out of \
range.", body = String, content_type = "text/plain"),
        (status = 500, description = "The worker's control socket failed, or kresd refused the \
query.", body = String, content_type = "text/plain"),
        (status = 429, description = "As many traces as may run at once (4) are running; \
`Retry-After` says when to try again.", body = String, content_type = "text/plain",
         headers(("Retry-After" = u32, description = "Seconds to wait."))),
        (status = 503, description = "No worker is running.", body = String,
         content_type = "text/plain"),
        (status = 504, description = "The worker did not answer within the timeout.",
         body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn trace(
    State(state): State<ApiState>,
    Path((name, rr_type)): Path<(String, String)>,
    Query(params): Query<TraceParams>,
) -> Result<Response, ApiError> {
    let query = TraceQuery::new(&name, &rr_type).map_err(|e| refusal(e.into()))?;
    let timeout = match params.timeout {
        None => crate::trace::DEFAULT_TIMEOUT,
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero() && *d <= crate::trace::MAX_TIMEOUT)
            .ok_or_else(|| refusal(TraceError::InvalidTimeout))?,
    };
    // Held until the trace ends: a worker resolves for each, for up to a minute.
    let _place = state.heavy.trace()?;
    let rundir = state.manager.config().model.rundir.clone();
    let Some(&id) = service::running_workers(&state.supervisor.snapshot()).first() else {
        return Err(ApiError::Unavailable(
            "no running worker to trace with".into(),
        ));
    };
    let traced: Trace = crate::trace::run(
        &id.control_socket(&rundir),
        &id.to_string(),
        &query,
        crate::trace::TraceLimits::with_timeout(timeout),
    )
    .await
    .map_err(refusal)?;
    Ok(json_value(StatusCode::OK, &traced))
}

/// A failed trace as an answer: the caller's mistakes are 400, a trace with no answer in time
/// 504, the rest 500.
fn refusal(e: TraceError) -> ApiError {
    match e {
        TraceError::Query(_) | TraceError::InvalidTimeout => ApiError::BadRequest(e.to_string()),
        TraceError::TimedOut(_) => ApiError::TimedOut(e.to_string()),
        other => ApiError::Failed(kres_wire::error_line(&other)),
    }
}
