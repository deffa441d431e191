//! `GET /rpz`: the RPZ zones kept by zone transfer — per zone its file, primaries, stored
//! serial, last transfer (kind, time, duration, bytes, records, result), next refresh, when
//! it expires and whether it expired — as the event log told them (the same tally as the `knot_resolver_rpz_*`
//! series, so the two always agree).
//!
//! `GET /rpz/lists`, `POST /rpz/lists/refresh` and `GET /rpz/check`: the subscribed lists
//! (URL, entries, skipped lines, last fetch and its result, next refresh, ETag), a fetch
//! now, and which list decides a name — answered by the lists' task (`rpz::lists`).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{json_value, ApiError, ApiState};
use crate::rpz::lists::ListsError;
use kres_wire::rpz::{RpzCheck, RpzList, RpzZone};

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

/// The subscribed lists, in the configuration's order.
#[utoipa::path(
    get,
    path = "/rpz/lists",
    tag = "status",
    responses((status = 200, description = "The subscribed lists (none: `[]`).",
               body = Vec<RpzList>)),
)]
pub(super) async fn lists(State(state): State<ApiState>) -> Response {
    json_value(StatusCode::OK, &state.rpz_lists.status())
}

/// Which list `?name=` names, if any.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// The list (every list when absent).
    name: Option<String>,
}

/// Fetch a list (every list without `?name=`) now; answers once the fetches are done and
/// what they brought is in force.
#[utoipa::path(
    post,
    path = "/rpz/lists/refresh",
    tag = "control",
    params(ListQuery),
    responses((status = 200, description = "The lists after the fetch.", body = Vec<RpzList>),
              (status = 404, description = "No list has the name.")),
)]
pub(super) async fn refresh(
    State(state): State<ApiState>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let lists = state.rpz_lists.refresh(query.name).await.map_err(refused)?;
    Ok(json_value(StatusCode::OK, &lists))
}

/// The name `?name=` asks about.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CheckQuery {
    /// A domain name.
    name: String,
    /// A client's address: only the lists its views' tags select are consulted.
    client: Option<String>,
}

/// Which subscribed list (or allowlist) decides a name, without a query.
#[utoipa::path(
    get,
    path = "/rpz/check",
    tag = "status",
    params(CheckQuery),
    responses((status = 200, description = "The list deciding the name (none: no list has it).",
               body = RpzCheck),
              (status = 400, description = "Not a domain name.")),
)]
pub(super) async fn check(
    State(state): State<ApiState>,
    Query(query): Query<CheckQuery>,
) -> Result<Response, ApiError> {
    let answer = state
        .rpz_lists
        .check(&query.name, query.client.as_deref())
        .await
        .map_err(refused)?;
    Ok(json_value(StatusCode::OK, &answer))
}

/// The API's error for what the lists' task said.
fn refused(e: ListsError) -> ApiError {
    match e {
        ListsError::NoSuchList(_) => ApiError::Absent(e.to_string()),
        ListsError::BadName(_) | ListsError::BadClient(_) => ApiError::BadRequest(e.to_string()),
        ListsError::NotRunning | ListsError::File(_) => ApiError::Conflict(e.to_string()),
    }
}
