//! `GET /schema` (the configuration's JSON schema, as upstream serves it) and `GET /schema/ui`
//! (a self-contained page that renders it as a tree).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// The configuration's JSON schema.
#[utoipa::path(
    get,
    path = "/schema",
    tag = "schema",
    responses((status = 200, description = "A JSON Schema (draft 2020-12) of the \
configuration; the same as `#/components/schemas/KresConfig` of this document.", body = Object)),
)]
pub(super) async fn schema() -> Response {
    let text = serde_json::to_string_pretty(&kres_config::json_schema()).unwrap_or_default();
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        text,
    )
        .into_response()
}

/// A page that renders `/schema` as a tree.
///
/// Self-contained: no external site is involved.
#[utoipa::path(
    get,
    path = "/schema/ui",
    tag = "schema",
    responses((status = 200, description = "An HTML page.", body = String,
               content_type = "text/html")),
)]
pub(super) async fn schema_ui() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("schema_ui.html"),
    )
        .into_response()
}
