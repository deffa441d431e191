//! `POST /upgrade` and `GET /upgrade`: the in-place upgrade of the daemon. The root process
//! re-executes its binary (possibly a newer version) keeping its pid, every worker and every
//! socket; the manager process, which serves this API, is started anew from the new binary in
//! its course. So a `POST` only says whether the upgrade begins (the new binary passed its
//! probe); how it ended is the [`UpgradeRecord`] the root hands every later manager, served by
//! `GET /upgrade` beside the running version.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;

use super::error::ApiError;
use super::{json_value, ApiState};
use kres_wire::upgrade::UpgradeRecord;

/// What `GET /upgrade` answers.
#[derive(Serialize, utoipa::ToSchema)]
pub struct UpgradeStatus<'a> {
    /// The running version.
    version: String,
    /// How the last upgrade ended; `null` when none was tried since the daemon started.
    last: Option<&'a UpgradeRecord>,
}

/// What `POST /upgrade` answers when the upgrade begins.
#[derive(Serialize, utoipa::ToSchema)]
pub struct UpgradeBegun {
    msg: &'static str,
    /// The version running before.
    from: String,
    /// The generation the upgrade will have in `GET /upgrade`.
    generation: u32,
}

/// The running version, and how the last in-place upgrade ended.
#[utoipa::path(
    get,
    path = "/upgrade",
    tag = "status",
    responses((status = 200, description = "The version and the last upgrade.",
               body = UpgradeStatus)),
)]
pub(super) async fn status(State(state): State<ApiState>) -> Response {
    json_value(
        StatusCode::OK,
        &UpgradeStatus {
            version: crate::build_version(),
            last: state.upgrade.as_deref(),
        },
    )
}

/// Upgrade in place: the daemon re-executes its binary (a newer version installed there).
///
/// The pid, every worker and every socket stay. The answer only says whether the upgrade
/// begins (the new binary passed its probe); `GET /upgrade` says how it ended.
#[utoipa::path(
    post,
    path = "/upgrade",
    tag = "control",
    responses(
        (status = 202, description = "The new binary passed its probe; the upgrade begins.",
         body = UpgradeBegun),
        (status = 409, description = "Refused before anything stopped (the new binary failed \
its probe); the reason in the body.", body = String, content_type = "text/plain"),
        (status = 503, description = "The daemon cannot be asked now.", body = String,
         content_type = "text/plain"),
    ),
)]
pub(super) async fn begin(State(state): State<ApiState>) -> Result<Response, ApiError> {
    match state.supervisor.request_reexec().await {
        Ok(()) => Ok(json_value(
            StatusCode::ACCEPTED,
            &UpgradeBegun {
                msg: "upgrading: the daemon re-executes its binary; GET /upgrade says how it ended",
                from: crate::build_version(),
                generation: state.upgrade.as_ref().map_or(0, |r| r.generation) + 1,
            },
        )),
        Err(supervisor::SupervisorError::Refused(why)) => Err(ApiError::Conflict(why)),
        Err(e) => Err(ApiError::Unavailable(e.to_string())),
    }
}
