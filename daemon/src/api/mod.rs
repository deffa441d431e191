//! The management HTTP API, served on a unix socket or TCP. One `app(state)` builds the
//! router, so tests drive it without a socket; handlers read snapshots (the current config,
//! the process table) and never lock the manager; changes go to the manager as commands.
//! Every route is registered once, in `routes()`, with its OpenAPI description (`openapi`).
//!
//! Handlers by family: `status` (`/`, probes), `config` (`/v1/config`), `control` (reload,
//! renew, drain, stop, cache), `trace` (one query traced), `query_log` and `upstreams` (what
//! the workers answered, and whom they asked), `upgrade`, `events`, `stats` (`/metrics`),
//! `schema`, `ui` (the status page), `fault` (fault injection) and the process table here. What they share: `responses` (the answers
//! several routes give, each described once), `params` (typed path parameters), `error`
//! (`ApiError`), and around every route `guard`, `roles`, `admission` and `server`.
//!
//! Also: `rpz` (`/rpz`, the zones kept by zone transfer), `fleet` (`/fleet` and
//! `/fleet/rollback`, read from the fleet's store), `failures` (the manager's failures on its
//! process entry), `pointer` (JSON Pointer and JSON Patch over the raw document, hand-written
//! so that each fault is named), `heavy` (the large or slow reads, a few at a time) and `openapi`
//! (`GET /openapi.json`, finished with what the layers add: the guard's 401/403/421, the time
//! limit's 503, `HEAD` beside every `GET`).

pub mod admission;
pub mod config;
pub mod control;
pub mod error;
pub mod events;
pub mod failures;
pub mod fault;
pub mod fleet;
pub mod guard;
pub mod heavy;
pub mod openapi;
pub mod params;
pub mod pointer;
pub mod query_log;
pub mod responses;
pub mod roles;
pub mod rpz;
pub mod schema;
pub mod server;
pub mod stats;
pub mod status;
pub mod trace;
pub mod ui;
pub mod upgrade;
pub mod upstreams;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use supervisor::SupervisorHandle;

use crate::manager::ManagerHandle;
use crate::service::{self, ServiceKind};
use error::ApiError;
use kres_wire::processes::ProcessEntry;
use params::{PathParam, PathValue};

/// What the handlers can see and do.
#[derive(Clone)]
pub struct ApiState {
    /// The supervisor, for the process table.
    pub supervisor: SupervisorHandle,
    /// Cancelled by `POST /stop` (the daemon shuts down) and when this manager process stops
    /// (event streams end with it).
    pub stop: CancellationToken,
    /// The manager: the configuration it runs, and changes to it.
    pub manager: ManagerHandle,
    /// Whether the fault-injection routes (`POST /debug/…`) are served (tests of manager
    /// recovery only).
    pub fault_injection: fault::FaultInjection,
    /// How configurations sent to the API are validated: relative paths resolve against the
    /// first configuration file's directory.
    pub validation: kres_config::ValidationContext,
    /// The ETag and JSON text of the current configuration, computed once per version.
    pub rendered: config::RenderedCache,
    /// What every request is checked against: the client's role (by unix peer credentials
    /// or bearer token) and, over TCP, Host and Origin.
    pub guard: std::sync::Arc<guard::Guard>,
    /// How the last in-place upgrade of the daemon ended, as the root told this manager.
    pub upgrade: Option<std::sync::Arc<kres_wire::upgrade::UpgradeRecord>>,
    /// The manager process's failures before this incarnation, as the root recorded them
    /// (shown on the manager's entry of `/processes`).
    pub process_failures: Option<std::sync::Arc<kres_wire::failures::ProcessFailureRecord>>,
    /// What the resolver does, for `GET /events`.
    pub events: crate::events::EventLog,
    /// The subscribed RPZ lists' task: their status, refreshes and checks (`/rpz/lists`).
    pub rpz_lists: crate::rpz::lists::ListsHandle,
    /// The control plane's series for `/metrics/prometheus`, tallied from `events`.
    pub control_plane: crate::metrics::ControlPlane,
    /// The version of the kresd the workers run (`kresd --version`), once it is known.
    pub kresd_version: std::sync::Arc<std::sync::OnceLock<String>>,
    /// The workers' answers, for `/query-log` and `/top`.
    pub query_log: crate::query_log::QueryLog,
    /// The places of the reads that are large or slow (query log lists, traces).
    pub heavy: heavy::HeavyReads,
    /// The node's place in its fleet, when it has one (`GET /fleet`).
    pub fleet: Option<std::sync::Arc<crate::fleet::Membership>>,
}

/// The whole API, with its body-size and time limits, ready to serve or to call in tests.
pub fn app(state: ApiState) -> Router {
    let (router, _) = routes(state.fault_injection).split_for_parts();
    let router = server::with_change_places(router.fallback(no_route))
        .layer(axum::middleware::from_fn_with_state(
            state.guard.clone(),
            guard::check,
        ))
        .with_state(state);
    server::with_limits(router)
}

/// Every route the API serves, each with its description: `routes!` routes a handler at the
/// path and methods of its `#[utoipa::path]` and adds that description to the document, so
/// the router and `GET /openapi.json` come from this one registration. Never add a route with
/// `.route()`: it would be served undocumented (`tests/api_openapi.rs` finds it).
///
/// The fault-injection routes are registered only when `faults` is on: the production
/// document describes no route the server does not serve.
pub fn routes(faults: fault::FaultInjection) -> OpenApiRouter<ApiState> {
    use utoipa::OpenApi;
    let registered = OpenApiRouter::with_openapi(openapi::Base::openapi())
        .routes(routes!(status::root))
        .routes(routes!(
            config::get_document,
            config::put_document,
            config::delete_document,
            config::patch_document
        ))
        .routes(routes!(
            config::get_value,
            config::put_value,
            config::delete_value,
            config::patch_value
        ))
        .routes(routes!(control::reload))
        .routes(routes!(control::reload_force))
        .routes(routes!(control::renew))
        .routes(routes!(control::renew_force))
        .routes(routes!(schema::schema))
        .routes(routes!(schema::schema_ui))
        .routes(routes!(openapi::serve))
        .routes(routes!(status::livez))
        .routes(routes!(status::readyz))
        .routes(routes!(control::stop))
        .routes(routes!(control::drain))
        .routes(routes!(upgrade::status, upgrade::begin))
        .routes(routes!(processes_all))
        .routes(routes!(processes))
        .routes(routes!(events::follow))
        .routes(routes!(stats::metrics_redirect))
        .routes(routes!(stats::metrics_json))
        .routes(routes!(stats::metrics_prometheus))
        .routes(routes!(control::cache_clear))
        .routes(routes!(rpz::zones))
        .routes(routes!(rpz::lists))
        .routes(routes!(rpz::refresh))
        .routes(routes!(rpz::check))
        .routes(routes!(trace::trace))
        .routes(routes!(query_log::query_log_entries))
        .routes(routes!(query_log::query_log_stream))
        .routes(routes!(query_log::query_log_status))
        .routes(routes!(query_log::top_list))
        .routes(routes!(upstreams::upstreams))
        .routes(routes!(fleet::fleet))
        .routes(routes!(fleet::rollback))
        .routes(routes!(ui::page))
        .routes(routes!(ui::script))
        .routes(routes!(ui::style))
        .routes(routes!(ui::icon))
        .routes(routes!(ui::whoami));
    match faults {
        fault::FaultInjection::Off => registered,
        fault::FaultInjection::On => registered
            .routes(routes!(fault::panic_manager))
            .routes(routes!(fault::crash_manager)),
    }
}

/// Every supervised process.
#[utoipa::path(
    get,
    path = "/processes",
    tag = "status",
    responses((status = 200, description = "The process table.", body = Vec<ProcessEntry>)),
)]
async fn processes_all(state: State<ApiState>) -> Response {
    processes_of(state, ProcessFilter::All)
}

/// The supervised processes of one kind.
#[utoipa::path(
    get,
    path = "/processes/{kind}",
    tag = "status",
    params(("kind" = inline(ProcessFilter), Path, description = "Which processes.")),
    responses(
        (status = 200, description = "The processes of that kind.", body = Vec<ProcessEntry>),
        (status = 400, description = "An unknown kind.", body = String,
         content_type = "text/plain", example = "Invalid process type 'x'\n"),
    ),
)]
async fn processes(state: State<ApiState>, PathParam(kind): PathParam<ProcessFilter>) -> Response {
    processes_of(state, kind)
}

/// Which processes `GET /processes/{kind}` lists.
#[derive(Clone, Copy, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
enum ProcessFilter {
    All,
    Kresd,
    Gc,
}

impl ProcessFilter {
    /// The kind of process listed; `None` for all of them.
    fn kind(self) -> Option<ServiceKind> {
        match self {
            ProcessFilter::All => None,
            ProcessFilter::Kresd => Some(ServiceKind::Kresd),
            ProcessFilter::Gc => Some(ServiceKind::CacheGc),
        }
    }
}

impl PathValue for ProcessFilter {
    /// Upstream's words.
    fn refused(text: &str) -> ApiError {
        ApiError::BadRequest(format!("Invalid process type '{text}'"))
    }
}

/// `GET /processes[/{kind}]`: the supervisor's table with upstream's `type` and `status`.
fn processes_of(State(state): State<ApiState>, filter: ProcessFilter) -> Response {
    let filter = filter.kind();
    let snapshot = state.supervisor.snapshot();
    let manager_failures =
        failures::manager_failures(state.process_failures.as_deref(), &state.manager.health());
    let list: Vec<ProcessEntry> = snapshot
        .processes
        .iter()
        .filter(|p| filter.is_none_or(|k| ServiceKind::of(p) == Some(k)))
        .map(|p| ProcessEntry {
            process: with_failures(p, state.process_failures.as_deref()),
            r#type: ServiceKind::of(p)
                .map_or("UNKNOWN", ServiceKind::upstream_type)
                .to_owned(),
            status: service::upstream_status(p.state).to_owned(),
            failures: (ServiceKind::of(p) == Some(ServiceKind::Manager))
                .then(|| manager_failures.clone()),
        })
        .collect();
    json_value(StatusCode::OK, &list)
}

/// A process of the table as `/processes` shows it: the manager's entry, which the root adds
/// anew for every incarnation, counts the restarts and shows the last exit of the
/// incarnations before it, as the root recorded them.
fn with_failures(
    process: &supervisor::ProcessSnapshot,
    record: Option<&kres_wire::failures::ProcessFailureRecord>,
) -> supervisor::ProcessSnapshot {
    let mut process = process.clone();
    if let (Some(ServiceKind::Manager), Some(record)) = (ServiceKind::of(&process), record) {
        process.restarts = process.restarts.saturating_add(record.restarts);
        process.last_exit = process.last_exit.or(record.last_exit);
    }
    process
}

/// The answer to a path no route serves: 404, saying so; a configuration path whose pointer
/// lacks its leading `/` (`/v1/configworkers`, from `kresctl config get -p workers`) is told
/// what it meant.
async fn no_route(uri: axum::http::Uri) -> Response {
    /// The most of the path quoted back.
    const QUOTED: usize = 200;
    let path = uri.path();
    let quoted: String = path.chars().take(QUOTED).collect();
    let text = match path.strip_prefix("/v1/config") {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => {
            let rest: String = rest.chars().take(QUOTED).collect();
            format!("no route for {quoted}: a JSON pointer starts with '/' (/v1/config/{rest})\n")
        }
        _ => format!("no route for {quoted}\n"),
    };
    (StatusCode::NOT_FOUND, text).into_response()
}

/// A serialisable value as a JSON answer.
pub(crate) fn json_value(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
