//! The management HTTP API, served on a unix socket or TCP. One `app(state)` builds the
//! router, so tests drive it without a socket; handlers read snapshots (the current config,
//! the process table) and never lock the manager; changes go to the manager as commands.

pub mod config;
pub mod error;
pub mod events;
pub mod guard;
pub mod pointer;
pub mod roles;
pub mod server;
pub mod upgrade;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

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
    /// Relative paths in configurations sent to the API resolve against this directory (the
    /// first configuration file's).
    pub resolve_root: std::path::PathBuf,
    /// The ETag and JSON text of the current configuration, computed once per version.
    pub rendered: config::RenderedCache,
    /// What every request is checked against: the client's role (by unix peer credentials
    /// or bearer token) and, over TCP, Host and Origin.
    pub guard: std::sync::Arc<guard::Guard>,
    /// How the last in-place upgrade of the daemon ended, as the root told this manager.
    pub upgrade: Option<std::sync::Arc<upgrade::UpgradeRecord>>,
    /// What the resolver does, for `GET /events`.
    pub events: crate::events::EventLog,
}

/// The whole API, with its body-size and time limits, ready to serve or to call in tests.
pub fn app(state: ApiState) -> Router {
    let router = Router::new()
        .route("/", get(root))
        .route("/v1/config", config_routes())
        .route("/v1/config/{*pointer}", config_routes())
        .route("/reload", post(|s| reload(s, Restart::WhenNeeded)))
        .route("/reload/force", post(|s| reload(s, Restart::Always)))
        .route("/renew", post(|s| renew(s, Restart::WhenNeeded)))
        .route("/renew/force", post(|s| renew(s, Restart::Always)))
        .route("/schema", get(schema))
        .route("/schema/ui", get(schema_ui))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/stop", post(stop))
        .route("/drain", post(drain))
        .route("/upgrade", get(upgrade::status).post(upgrade::begin))
        .route("/processes", get(processes_all))
        .route("/processes/{kind}", get(processes))
        .route("/events", get(events::follow))
        .route("/debug/panic-manager", post(panic_manager))
        .route("/debug/crash-manager/{how}", post(crash_manager))
        .route("/metrics", get(metrics_redirect))
        .route("/metrics/json", get(metrics_json))
        .route("/metrics/prometheus", get(metrics_prometheus))
        .route("/cache/clear", post(cache_clear))
        .layer(axum::middleware::from_fn_with_state(
            state.guard.clone(),
            guard::check,
        ))
        .with_state(state);
    server::with_limits(router)
}

async fn root() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"msg": "Knot Resolver Manager is running! The configuration endpoint is at /config", "status": "RUNNING", "version": crate::build_version()}),
    )
}

/// `/v1/config` and below: one handler per method (`get` answers `HEAD` too).
fn config_routes() -> axum::routing::MethodRouter<ApiState> {
    get(config::get)
        .put(config::put)
        .delete(config::delete)
        .patch(config::patch)
}

/// `POST /reload[/force]`: synchronous; an invalid file or a rejected configuration is an
/// error response (upstream answers 200 and only logs).
async fn reload(State(state): State<ApiState>, restart: Restart) -> Result<Response, ApiError> {
    state.manager.reload(restart, Origin::Api).await?;
    Ok((StatusCode::OK, "Reloading...").into_response())
}

/// `POST /renew[/force]`: apply the running configuration again.
async fn renew(State(state): State<ApiState>, restart: Restart) -> Result<Response, ApiError> {
    state.manager.renew(restart, Origin::Api).await?;
    Ok((StatusCode::OK, "Renewing configuration...").into_response())
}

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

/// A self-contained page that renders `/schema` as a tree; no external site is involved.
async fn schema_ui() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("schema_ui.html"),
    )
        .into_response()
}

/// Alive while a worker is running: the API answers, and DNS can be answered. Draining and
/// stopping resolvers are alive as long as they serve.
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

/// Ready when every configured worker is running and ready and we are neither draining nor
/// stopping.
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

/// `POST /drain`: the root turns readiness off, keeps serving for its drain period, then
/// stops everything (as on SIGTERM).
async fn drain(State(state): State<ApiState>) -> Result<Response, ApiError> {
    state
        .supervisor
        .drain()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    Ok((StatusCode::OK, "Draining...").into_response())
}

async fn stop(State(state): State<ApiState>) -> Response {
    state.stop.cancel();
    (StatusCode::OK, "Shutting down...").into_response()
}

async fn panic_manager(State(state): State<ApiState>) -> Result<Response, ApiError> {
    if !state.fault_injection {
        return Err(ApiError::NotFound);
    }
    if !state.manager.panic().await {
        return Err(ApiError::Unavailable("manager is not running".into()));
    }
    Ok((StatusCode::OK, "manager panic requested").into_response())
}

/// Fault injection: crash the manager process the way a bug would: a stack overflow (as a
/// parser recursing on input nested too deeply), a segmentation fault, an abort. The root
/// replaces the process.
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

#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    let frame = std::hint::black_box([n; 64]);
    recurse(frame[0].wrapping_add(1)).wrapping_add(frame[63])
}

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

async fn metrics_json(State(state): State<ApiState>) -> Response {
    let stats = collect_stats(&state).await;
    json_response(StatusCode::OK, &Value::Object(stats))
}

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
    Ok(json_response(StatusCode::OK, &result))
}

async fn processes_all(state: State<ApiState>) -> Result<Response, ApiError> {
    processes(state, Path("all".to_owned())).await
}

/// `GET /processes[/{kind}]`: the supervisor's table with upstream's `type` and `status`.
async fn processes(
    State(state): State<ApiState>,
    Path(kind): Path<String>,
) -> Result<Response, ApiError> {
    let filter = match kind.as_str() {
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
    let list: Vec<Value> = snapshot
        .processes
        .iter()
        .filter(|p| filter.is_none_or(|k| ServiceKind::of(p) == Some(k)))
        .map(|p| {
            let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                let kind = ServiceKind::of(p).map_or("UNKNOWN", ServiceKind::upstream_type);
                m.insert("type".into(), Value::String(kind.into()));
                m.insert(
                    "status".into(),
                    Value::String(service::upstream_status(p.state).into()),
                );
            }
            v
        })
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(list)))
}

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
