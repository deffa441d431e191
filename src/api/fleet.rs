//! `GET /fleet`: the fleet as this node reads it from etcd (`crate::fleet`): the newest
//! document's revision and every node's record, for `kresctl fleet status`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::{json_value, ApiState};
use crate::wire::fleet::FleetStatus;

/// The fleet's nodes: which document revision each runs, which it refused and why, its
/// workers and version.
#[utoipa::path(
    get,
    path = "/fleet",
    tag = "status",
    responses(
        (status = 200, description = "The newest document's revision and every node's record.", body = FleetStatus),
        (status = 404, description = "This node is in no fleet (no `fleet` in its configuration).", body = String, content_type = "text/plain"),
        (status = 503, description = "etcd cannot be read now.", body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn fleet(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let Some(membership) = &state.fleet else {
        return Err(ApiError::Absent(
            "this node is in no fleet (no `fleet` in its configuration)".into(),
        ));
    };
    let status = membership
        .status()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the fleet's store: {e}")))?;
    Ok(json_value(StatusCode::OK, &status))
}
