//! `GET /ui`: a live status page for the operator on one host, served by the daemon itself
//! (HTML, CSS and JS embedded in the binary; nothing is fetched from another host). The page
//! follows `/events` as its one stream, reads `/processes`, `/metrics/json`, `/upstreams`, the
//! top lists and the query log on a schedule of its own (none of it while the page is hidden),
//! and shows the admin controls only to the admin role (`/ui/whoami`). The API refuses their
//! actions to readers anyway: the page hides what the guard forbids, it enforces nothing.
//!
//! The page's files carry no data, so they are served to any client the guard lets
//! through on Host and Origin, without a token: a browser must load the page before it can
//! ask for the token (kept in the page's memory, sent as a header, never in a URL or the
//! HTML). Every answer carries a strict Content-Security-Policy: scripts and styles only from
//! these routes, requests only to this origin, no frames.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Serialize;

use super::roles::Role;
use super::{json_value, ApiState};

/// What a page of ours may load, and who may frame it: nothing but this origin, nobody.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// The page.
const PAGE: &str = include_str!("ui/index.html");
/// Its script.
const SCRIPT: &str = include_str!("ui/app.js");
/// Its style.
const STYLE: &str = include_str!("ui/app.css");
/// Its icon.
const ICON: &str = include_str!("ui/favicon.svg");

/// An embedded file with the page's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The status page.
///
/// Served without a token (it holds no data): the page asks for one when the API wants it.
#[utoipa::path(
    get,
    path = "/ui",
    tag = "status",
    security(()),
    responses((status = 200, description = "An HTML page (its script and style at \
`/ui/app.js` and `/ui/app.css`), with a Content-Security-Policy that allows nothing but this \
origin.", body = String, content_type = "text/html")),
)]
pub(super) async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// The status page's script.
#[utoipa::path(
    get,
    path = "/ui/app.js",
    tag = "status",
    security(()),
    responses((status = 200, description = "JavaScript.", body = String,
               content_type = "text/javascript")),
)]
pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// The status page's style.
#[utoipa::path(
    get,
    path = "/ui/app.css",
    tag = "status",
    security(()),
    responses((status = 200, description = "CSS.", body = String, content_type = "text/css")),
)]
pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// The status page's icon.
#[utoipa::path(
    get,
    path = "/ui/favicon.svg",
    tag = "status",
    security(()),
    responses((status = 200, description = "SVG.", body = String, content_type = "image/svg+xml")),
)]
pub(super) async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}

/// What `GET /ui/whoami` answers.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WhoAmI {
    /// The client's role: `admin` or `read-only`.
    role: &'static str,
    /// The running configuration's ETag (as `GET /v1/config` sends it).
    etag: String,
    /// Configurations this manager process has run: 1 for the one it started with, one more
    /// per applied change that changed a section (`knot_resolver_config_generation`).
    generation: u64,
    /// The number of workers the running configuration asks for.
    workers: u32,
    /// The `Last-Event-ID` that replays every event the log still keeps (`<epoch>-0`).
    events_from: String,
    /// The version of the running daemon.
    version: String,
    /// Whether this node is in a fleet (`GET /fleet` answers then).
    fleet: bool,
}

/// The client's role and what the status page needs to start.
#[utoipa::path(
    get,
    path = "/ui/whoami",
    tag = "status",
    responses((status = 200, description = "The client's role, the configuration's ETag and \
generation, the workers configured, where the event log starts.", body = WhoAmI)),
)]
pub(super) async fn whoami(
    State(state): State<ApiState>,
    role: Option<Extension<Role>>,
) -> Response {
    let config = state.manager.config();
    let rendered = state.rendered.of(&config).await;
    let role = match role {
        Some(Extension(Role::Admin)) => Role::Admin,
        Some(Extension(Role::ReadOnly)) | None => Role::ReadOnly,
    };
    json_value(
        StatusCode::OK,
        &WhoAmI {
            role: role.as_str(),
            etag: rendered.etag.clone(),
            generation: state.control_plane.generation(),
            workers: config.model.workers,
            events_from: format!("{}-0", state.events.epoch()),
            version: crate::build_version(),
            fleet: state.fleet.is_some(),
        },
    )
}
