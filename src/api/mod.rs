//! The management HTTP API, served on a unix socket or TCP. One `app(state)` builds the
//! router, so tests drive it without a socket; handlers read snapshots (the current config,
//! the process table) and never lock the manager; changes go to the manager as commands.

pub mod config;
pub mod guard;
pub mod pointer;
pub mod server;

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use supervisor::SupervisorHandle;

use crate::config::LoadedConfig;
use crate::manager::task::{ChangeError, ManagerCommand};

/// What the handlers can see and do.
#[derive(Clone)]
pub struct ApiState {
    /// The configuration currently applied.
    pub config: watch::Receiver<Arc<LoadedConfig>>,
    /// The supervisor, for the process table.
    pub supervisor: SupervisorHandle,
    /// Cancelled by `POST /stop`: the daemon shuts down.
    pub stop: CancellationToken,
    /// Commands to the manager task.
    pub manager: mpsc::Sender<ManagerCommand>,
    /// Whether `POST /debug/panic-manager` is enabled (tests of manager recovery only).
    pub fault_injection: bool,
    /// Relative paths in configurations sent to the API resolve against this directory (the
    /// first configuration file's).
    pub resolve_root: std::path::PathBuf,
    /// The ETag and JSON text of the current configuration, computed once per version.
    pub rendered: config::RenderedCache,
    /// What requests over TCP are checked against (Host, Origin, bearer token).
    pub tcp_guard: std::sync::Arc<guard::TcpGuard>,
}

/// The whole API, with its body-size and time limits, ready to serve or to call in tests.
pub fn app(state: ApiState) -> Router {
    let router = Router::new()
        .route("/", get(root))
        .route("/v1/config", any(config::root))
        .route("/v1/config/{*pointer}", any(config::at))
        .route("/reload", post(|s| change(s, Change::Reload, false)))
        .route("/reload/force", post(|s| change(s, Change::Reload, true)))
        .route("/renew", post(|s| change(s, Change::Renew, false)))
        .route("/renew/force", post(|s| change(s, Change::Renew, true)))
        .route("/schema", get(schema))
        .route("/schema/ui", get(schema_ui))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/stop", post(stop))
        .route("/processes", get(processes_all))
        .route("/processes/{kind}", get(processes))
        .route("/debug/panic-manager", post(panic_manager))
        .route("/debug/crash-manager/{how}", post(crash_manager))
        .route("/metrics", get(metrics_redirect))
        .route("/metrics/json", get(metrics_json))
        .route("/metrics/prometheus", get(metrics_prometheus))
        .route("/cache/clear", post(cache_clear))
        .layer(axum::middleware::from_fn_with_state(
            state.tcp_guard.clone(),
            guard::check,
        ))
        .with_state(state);
    server::with_limits(router)
}

async fn root() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"msg": "Knot Resolver Manager is running! The configuration endpoint is at /config", "status": "RUNNING"}),
    )
}

#[derive(Clone, Copy)]
enum Change {
    Reload,
    Renew,
}

/// `POST /reload[/force]`, `/renew[/force]`: synchronous; an invalid file or a rejected
/// configuration is an error response (upstream answers 200 and only logs).
async fn change(State(state): State<ApiState>, kind: Change, force: bool) -> Response {
    let (reply, result) = tokio::sync::oneshot::channel();
    let command = match kind {
        Change::Reload => ManagerCommand::Reload { force, reply },
        Change::Renew => ManagerCommand::Renew { force, reply },
    };
    if state.manager.send(command).await.is_err() {
        return config::change_error(ChangeError::Unavailable);
    }
    match result.await {
        Ok(Ok(_)) => {
            let text = match kind {
                Change::Reload => "Reloading...",
                Change::Renew => "Renewing configuration...",
            };
            (StatusCode::OK, text).into_response()
        }
        Ok(Err(e)) => config::change_error(e),
        Err(_) => config::change_error(ChangeError::Unavailable),
    }
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

async fn livez() -> Response {
    (StatusCode::OK, "alive\n").into_response()
}

/// Ready when every configured worker is running and ready and we are not stopping.
async fn readyz(State(state): State<ApiState>) -> Response {
    let snapshot = state.supervisor.snapshot();
    let wanted = state.config.borrow().model.workers as usize;
    let ready = crate::metrics::running_worker_ids(&snapshot).len();
    if !snapshot.shutting_down && ready >= wanted {
        (StatusCode::OK, format!("ready: {ready}/{wanted} workers\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {ready}/{wanted} workers\n"),
        )
            .into_response()
    }
}

async fn stop(State(state): State<ApiState>) -> Response {
    state.stop.cancel();
    (StatusCode::OK, "Shutting down...").into_response()
}

async fn panic_manager(State(state): State<ApiState>) -> Response {
    if !state.fault_injection {
        return StatusCode::NOT_FOUND.into_response();
    }
    match state.manager.send(ManagerCommand::Panic).await {
        Ok(()) => (StatusCode::OK, "manager panic requested").into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "manager is not running").into_response(),
    }
}

/// Fault injection: crash the manager process the way a bug would: a stack overflow (as a
/// parser recursing on input nested too deeply), a segmentation fault, an abort. The root
/// replaces the process.
async fn crash_manager(
    State(state): State<ApiState>,
    axum::extract::Path(how): axum::extract::Path<String>,
) -> Response {
    if !state.fault_injection {
        return StatusCode::NOT_FOUND.into_response();
    }
    tracing::warn!("fault injection: crashing the manager process ({how})");
    match how.as_str() {
        "overflow" => {
            let n = recurse(std::hint::black_box(1));
            (StatusCode::OK, n.to_string()).into_response()
        }
        "segfault" => {
            // The first SIGSEGV is taken by Rust's stack-overflow handler, which restores the
            // default action; the second ends the process as a real fault would.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSEGV);
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        "abort" => std::process::abort(),
        _ => StatusCode::NOT_FOUND.into_response(),
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
    let cfg = state.config.borrow().clone();
    let ids = crate::metrics::running_worker_ids(&state.supervisor.snapshot());
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

async fn cache_clear(State(state): State<ApiState>, body: axum::body::Bytes) -> Response {
    let request: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("request processing error:\n{e}"),
                )
                    .into_response()
            }
        }
    };
    let clear = match crate::cache_clear::CacheClear::from_json(&request) {
        Ok(c) => c,
        Err(errors) => {
            let text = format!(
                "Configuration validation error detected:\n\t{}\n",
                errors.join("\n\t")
            );
            return (StatusCode::BAD_REQUEST, text).into_response();
        }
    };
    let rundir = state.config.borrow().model.rundir.clone();
    let Some(&id) = crate::metrics::running_worker_ids(&state.supervisor.snapshot()).first() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no running worker to clear the cache\n",
        )
            .into_response();
    };
    let path = crate::control::socket_path(&rundir, id);
    match crate::control::command(&path, &clear.render_lua(), crate::control::COMMAND_TIMEOUT).await
    {
        Ok(result) => json_response(StatusCode::OK, &result),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("request processing failed:\n{e}\n"),
        )
            .into_response(),
    }
}

async fn processes_all(state: State<ApiState>) -> Response {
    processes(state, Path("all".to_owned())).await
}

async fn processes(State(state): State<ApiState>, Path(kind): Path<String>) -> Response {
    let filter: Option<&str> = match kind.as_str() {
        "all" => None,
        "kresd" => Some(crate::manager::KIND_KRESD),
        "gc" => Some(crate::manager::KIND_GC),
        other => {
            return (
                StatusCode::BAD_REQUEST,
                format!("Invalid process type '{other}'"),
            )
                .into_response()
        }
    };
    let snapshot = state.supervisor.snapshot();
    let list: Vec<Value> = snapshot
        .processes
        .iter()
        .filter(|p| filter.is_none_or(|k| p.kind == k))
        .map(|p| {
            let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("type".into(), Value::String(upstream_type(&p.kind).into()));
                m.insert(
                    "status".into(),
                    Value::String(upstream_status(p.state.as_str()).into()),
                );
            }
            v
        })
        .collect();
    json_response(StatusCode::OK, &Value::Array(list))
}

fn upstream_type(kind: &str) -> &'static str {
    match kind {
        crate::manager::KIND_KRESD => "KRESD",
        crate::manager::KIND_GC => "GC",
        crate::manager::KIND_POLICY_LOADER => "POLICY_LOADER",
        _ => "UNKNOWN",
    }
}

fn upstream_status(state: &str) -> &'static str {
    match state {
        "running" => "RUNNING",
        "failed" => "FATAL",
        "exited" => "EXITED",
        "backoff" => "UNEXPECTED",
        _ => "UNKNOWN",
    }
}

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
