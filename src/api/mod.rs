//! The management HTTP API, served on a unix socket or TCP. One `app(state)` builds the
//! router, so tests drive it without a socket; handlers read snapshots (the current config,
//! the process table) and never lock the manager; changes go to the manager as commands.
//! Every route is registered once, in `routes()`, with its OpenAPI description (`openapi`).

pub mod admission;
pub mod config;
pub mod error;
pub mod events;
pub mod failures;
pub mod guard;
pub mod openapi;
pub mod pointer;
pub mod roles;
pub mod server;
pub mod upgrade;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use supervisor::SupervisorHandle;

use crate::events::Origin;
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;
use crate::service::{self, ServiceKind};
use error::ApiError;

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
    /// Whether `POST /debug/panic-manager` is enabled (tests of manager recovery only).
    pub fault_injection: bool,
    /// How configurations sent to the API are validated: relative paths resolve against the
    /// first configuration file's directory.
    pub validation: crate::config::ValidationContext,
    /// The ETag and JSON text of the current configuration, computed once per version.
    pub rendered: config::RenderedCache,
    /// What every request is checked against: the client's role (by unix peer credentials
    /// or bearer token) and, over TCP, Host and Origin.
    pub guard: std::sync::Arc<guard::Guard>,
    /// How the last in-place upgrade of the daemon ended, as the root told this manager.
    pub upgrade: Option<std::sync::Arc<crate::wire::upgrade::UpgradeRecord>>,
    /// The manager process's failures before this incarnation, as the root recorded them
    /// (shown on the manager's entry of `/processes`).
    pub process_failures: Option<std::sync::Arc<failures::ProcessFailureRecord>>,
    /// What the resolver does, for `GET /events`.
    pub events: crate::events::EventLog,
}

/// The whole API, with its body-size and time limits, ready to serve or to call in tests.
pub fn app(state: ApiState) -> Router {
    let (router, _) = routes().split_for_parts();
    let router = server::with_change_places(router)
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
pub fn routes() -> OpenApiRouter<ApiState> {
    use utoipa::OpenApi;
    OpenApiRouter::with_openapi(openapi::Base::openapi())
        .routes(routes!(root))
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
        .routes(routes!(reload))
        .routes(routes!(reload_force))
        .routes(routes!(renew))
        .routes(routes!(renew_force))
        .routes(routes!(schema))
        .routes(routes!(schema_ui))
        .routes(routes!(openapi::serve))
        .routes(routes!(livez))
        .routes(routes!(readyz))
        .routes(routes!(stop))
        .routes(routes!(drain))
        .routes(routes!(upgrade::status, upgrade::begin))
        .routes(routes!(processes_all))
        .routes(routes!(processes))
        .routes(routes!(events::follow))
        .routes(routes!(panic_manager))
        .routes(routes!(crash_manager))
        .routes(routes!(metrics_redirect))
        .routes(routes!(metrics_json))
        .routes(routes!(metrics_prometheus))
        .routes(routes!(cache_clear))
}

/// What `GET /` answers.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ManagerStatus {
    /// Upstream's greeting.
    msg: &'static str,
    /// Always `RUNNING`.
    status: &'static str,
    /// The version of the running daemon (`6.x.y`, `+label` when the build has one).
    version: String,
}

/// Whether the manager runs, and its version.
#[utoipa::path(
    get,
    path = "/",
    tag = "status",
    responses((status = 200, description = "The manager runs.", body = ManagerStatus)),
)]
async fn root() -> Response {
    json_value(
        StatusCode::OK,
        &ManagerStatus {
            msg: "Knot Resolver Manager is running! The configuration endpoint is at /config",
            status: "RUNNING",
            version: crate::build_version(),
        },
    )
}

/// Read the configuration files again and apply them.
///
/// Synchronous: answers once the change is applied. An invalid file or a rejected
/// configuration is an error answer (upstream answers 200 and only logs).
#[utoipa::path(
    post,
    path = "/reload",
    tag = "control",
    responses(
        (status = 200, description = "Applied.", body = String, content_type = "text/plain",
         example = "Reloading..."),
        (status = 400, description = "A file does not parse, the configuration is invalid, or \
the manager refused it (an immutable section changed, the canary or the policy-loader failed, a \
socket could not be bound, a rolling restart was rolled back).", body = String,
         content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String, content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
async fn reload(state: State<ApiState>) -> Result<Response, ApiError> {
    reload_with(state, Restart::WhenNeeded).await
}

/// Read the configuration files again and apply them, restarting every worker.
#[utoipa::path(
    post,
    path = "/reload/force",
    tag = "control",
    responses(
        (status = 200, description = "Applied.", body = String, content_type = "text/plain",
         example = "Reloading..."),
        (status = 400, description = "As for `POST /reload`.", body = String,
         content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String, content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
async fn reload_force(state: State<ApiState>) -> Result<Response, ApiError> {
    reload_with(state, Restart::Always).await
}

/// `POST /reload[/force]`.
async fn reload_with(
    State(state): State<ApiState>,
    restart: Restart,
) -> Result<Response, ApiError> {
    state.manager.reload(restart, Origin::Api).await?;
    Ok((StatusCode::OK, "Reloading...").into_response())
}

/// Apply the running configuration again.
#[utoipa::path(
    post,
    path = "/renew",
    tag = "control",
    responses(
        (status = 200, description = "Applied.", body = String, content_type = "text/plain",
         example = "Renewing configuration..."),
        (status = 400, description = "The manager refused it (the canary or the \
policy-loader failed, a socket could not be bound, a rolling restart was rolled back).",
         body = String, content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String, content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
async fn renew(state: State<ApiState>) -> Result<Response, ApiError> {
    renew_with(state, Restart::WhenNeeded).await
}

/// Apply the running configuration again, restarting every worker.
#[utoipa::path(
    post,
    path = "/renew/force",
    tag = "control",
    responses(
        (status = 200, description = "Applied.", body = String, content_type = "text/plain",
         example = "Renewing configuration..."),
        (status = 400, description = "As for `POST /renew`.", body = String,
         content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String, content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
async fn renew_force(state: State<ApiState>) -> Result<Response, ApiError> {
    renew_with(state, Restart::Always).await
}

/// `POST /renew[/force]`.
async fn renew_with(State(state): State<ApiState>, restart: Restart) -> Result<Response, ApiError> {
    state.manager.renew(restart, Origin::Api).await?;
    Ok((StatusCode::OK, "Renewing configuration...").into_response())
}

/// The configuration's JSON schema.
#[utoipa::path(
    get,
    path = "/schema",
    tag = "schema",
    responses((status = 200, description = "A JSON Schema (draft 2020-12) of the \
configuration; the same as `#/components/schemas/KresConfig` of this document.", body = Object)),
)]
async fn schema() -> Response {
    let text = serde_json::to_string_pretty(&crate::config::json_schema()).unwrap_or_default();
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
async fn schema_ui() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("schema_ui.html"),
    )
        .into_response()
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
async fn livez(State(state): State<ApiState>) -> Response {
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
async fn readyz(State(state): State<ApiState>) -> Response {
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
async fn drain(State(state): State<ApiState>) -> Result<Response, ApiError> {
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
async fn stop(State(state): State<ApiState>) -> Response {
    state.stop.cancel();
    (StatusCode::OK, "Shutting down...").into_response()
}

/// Fault injection: panic the manager task (it is restarted in-process).
#[utoipa::path(
    post,
    path = "/debug/panic-manager",
    tag = "fault-injection",
    responses(
        (status = 200, description = "The panic was requested.", body = String,
         content_type = "text/plain"),
        (status = 404, description = "Fault injection is off (the daemon runs without \
`KRES_FAULT_INJECTION`); empty body."),
        (status = 503, description = "The manager task is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
async fn panic_manager(State(state): State<ApiState>) -> Result<Response, ApiError> {
    if !state.fault_injection {
        return Err(ApiError::NotFound);
    }
    if !state.manager.panic().await {
        return Err(ApiError::Unavailable("manager is not running".into()));
    }
    Ok((StatusCode::OK, "manager panic requested").into_response())
}

/// Fault injection: crash the manager process the way a bug would.
///
/// A stack overflow (as a parser recursing on input nested too deeply), a segmentation fault,
/// an abort. The root replaces the process; the request gets no answer (the connection closes).
#[utoipa::path(
    post,
    path = "/debug/crash-manager/{how}",
    tag = "fault-injection",
    params(("how" = inline(CrashKind), Path, description = "How the manager process dies.")),
    responses(
        (status = 404, description = "Fault injection is off, or `how` is none of the kinds; \
empty body."),
        (status = 500, description = "The process survived its segmentation fault.",
         body = String, content_type = "text/plain"),
    ),
)]
async fn crash_manager(
    State(state): State<ApiState>,
    axum::extract::Path(how): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    if !state.fault_injection {
        return Err(ApiError::NotFound);
    }
    tracing::warn!("fault injection: crashing the manager process ({how})");
    match how.as_str() {
        "overflow" => {
            let n = recurse(std::hint::black_box(1));
            Ok((StatusCode::OK, n.to_string()).into_response())
        }
        "segfault" => {
            // The first SIGSEGV is taken by Rust's stack-overflow handler, which restores the
            // default action; the second ends the process as a real fault would.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
            Err(ApiError::Failed(
                "the process survived its segmentation fault".into(),
            ))
        }
        "abort" => std::process::abort(),
        _ => Err(ApiError::NotFound),
    }
}

/// How `POST /debug/crash-manager/{how}` crashes the manager process.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)] // Only described: the handler matches the path's text.
enum CrashKind {
    Overflow,
    Segfault,
    Abort,
}

#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    let frame = std::hint::black_box([n; 64]);
    recurse(frame[0].wrapping_add(1)).wrapping_add(frame[63])
}

/// Upstream's metrics path: redirects to `/metrics/json`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "metrics",
    responses((status = 301, description = "See `/metrics/json`.",
               headers(("Location" = String, description = "`/metrics/json`")))),
)]
async fn metrics_redirect() -> Response {
    (
        StatusCode::MOVED_PERMANENTLY,
        [(header::LOCATION, "/metrics/json")],
    )
        .into_response()
}

async fn collect_stats(state: &ApiState) -> serde_json::Map<String, Value> {
    let cfg = state.manager.config();
    let ids = service::running_workers(&state.supervisor.snapshot());
    crate::metrics::collect(&cfg.model.rundir, &ids, cfg.model.monitoring.metrics).await
}

/// Every running worker's statistics, by worker.
#[utoipa::path(
    get,
    path = "/metrics/json",
    tag = "metrics",
    responses((status = 200, description = "An object with one member per running worker \
(`kresd:kresd0`, …), each kresd's `stats` as kresd reports them; a worker that does not answer \
is left out.", body = Object)),
)]
async fn metrics_json(State(state): State<ApiState>) -> Response {
    let stats = collect_stats(&state).await;
    json_value(StatusCode::OK, &stats)
}

/// Statistics in Prometheus's text format, with the supervisor's own.
#[utoipa::path(
    get,
    path = "/metrics/prometheus",
    tag = "metrics",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4.",
               body = String, content_type = "text/plain; version=0.0.4")),
)]
async fn metrics_prometheus(State(state): State<ApiState>) -> Response {
    let stats = collect_stats(&state).await;
    let text = crate::metrics::render_prometheus(&stats, &state.supervisor.snapshot());
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Clear the cache (shared by every worker), or part of it.
#[utoipa::path(
    post,
    path = "/cache/clear",
    tag = "control",
    request_body(content = Object, content_type = "application/json", description = "Upstream's \
cache-clear request: `name` (a domain name), `exact-name` (boolean), `rr-type` (an RR type, with \
`exact-name`), `chunk-size` (a positive integer); every member optional. An empty body clears \
everything."),
    responses(
        (status = 200, description = "kresd's answer to `cache.clear()`.", body = Object),
        (status = 400, description = "The body is not JSON, or not a valid request.",
         body = String, content_type = "text/plain"),
        (status = 413, description = "The body is larger than the limit.", body = String,
         content_type = "text/plain"),
        (status = 500, description = "The worker's control socket failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "No worker is running.", body = String,
         content_type = "text/plain"),
    ),
)]
async fn cache_clear(
    State(state): State<ApiState>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let request: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("request processing error:\n{e}")))?
    };
    let clear = crate::cache_clear::CacheClear::from_json(&request).map_err(|errors| {
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

/// Every supervised process.
#[utoipa::path(
    get,
    path = "/processes",
    tag = "status",
    responses((status = 200, description = "The process table.", body = Vec<ProcessEntry>)),
)]
async fn processes_all(state: State<ApiState>) -> Result<Response, ApiError> {
    processes_of(state, "all").await
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
async fn processes(state: State<ApiState>, Path(kind): Path<String>) -> Result<Response, ApiError> {
    processes_of(state, &kind).await
}

/// Which processes `GET /processes/{kind}` lists.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)] // Only described: the handler matches the path's text.
enum ProcessFilter {
    All,
    Kresd,
    Gc,
}

/// One process of `GET /processes`: the supervisor's snapshot with upstream's `type` and
/// `status`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ProcessEntry<'a> {
    #[serde(flatten)]
    process: &'a supervisor::ProcessSnapshot,
    /// Upstream's kind: `KRESD`, `GC`, `POLICY_LOADER`, or `UNKNOWN`.
    r#type: &'static str,
    /// Upstream's status: `RUNNING`, `FATAL`, `EXITED`, `UNEXPECTED`, or `UNKNOWN`.
    status: &'static str,
    /// On the manager's entry only: how often the manager process and its task failed, and
    /// when a task waiting in its restart backoff runs again.
    #[serde(skip_serializing_if = "Option::is_none")]
    failures: Option<failures::ManagerFailures>,
}

/// `GET /processes[/{kind}]`: the supervisor's table with upstream's `type` and `status`.
async fn processes_of(State(state): State<ApiState>, kind: &str) -> Result<Response, ApiError> {
    let filter = match kind {
        "all" => None,
        "kresd" => Some(ServiceKind::Kresd),
        "gc" => Some(ServiceKind::CacheGc),
        other => {
            return Err(ApiError::BadRequest(format!(
                "Invalid process type '{other}'"
            )))
        }
    };
    let snapshot = state.supervisor.snapshot();
    let manager_failures =
        failures::ManagerFailures::of(state.process_failures.as_deref(), &state.manager.health());
    let list: Vec<ProcessEntry> = snapshot
        .processes
        .iter()
        .filter(|p| filter.is_none_or(|k| ServiceKind::of(p) == Some(k)))
        .map(|p| ProcessEntry {
            process: p,
            r#type: ServiceKind::of(p).map_or("UNKNOWN", ServiceKind::upstream_type),
            status: service::upstream_status(p.state),
            failures: (ServiceKind::of(p) == Some(ServiceKind::Manager))
                .then(|| manager_failures.clone()),
        })
        .collect();
    Ok(json_value(StatusCode::OK, &list))
}

/// A serialisable value as a JSON answer.
pub(crate) fn json_value(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
