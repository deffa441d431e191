//! `GET /rpz`: the RPZ zones kept by zone transfer — per zone its file, primaries, stored
//! serial, last transfer (kind, time, duration, bytes, records, result), next refresh, when
//! it expires and whether it expired — as the event log told them (the same tally as the `knot_resolver_rpz_*`
//! series, so the two always agree).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{json_value, ApiState};
use crate::wire::rpz::RpzZone;

/// The RPZ zones kept by zone transfer, by name.
#[utoipa::path(
    get,
    path = "/rpz",
    tag = "status",
    responses((status = 200, description = "The zones kept by zone transfer (none: `[]`).",
               body = Vec<RpzZone>)),
)]
pub(super) async fn zones(State(state): State<ApiState>) -> Response {
    json_value(StatusCode::OK, &state.control_plane.rpz_zones())
}
