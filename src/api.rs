//! The management HTTP API, served on a unix socket or TCP. One `app(state)` builds the
//! router, so tests drive it without a socket; handlers read snapshots (the current config,
//! the process table) and never lock the manager.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use supervisor::SupervisorHandle;

use crate::config::LoadedConfig;

/// What the handlers can see and do.
#[derive(Clone)]
pub struct ApiState {
    /// The configuration currently applied.
    pub config: watch::Receiver<Arc<LoadedConfig>>,
    /// The supervisor, for the process table.
    pub supervisor: SupervisorHandle,
    /// Cancelled by `POST /stop`: the daemon shuts down.
    pub stop: CancellationToken,
}

pub fn app(state: ApiState) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/v1/config", get(config_get_root))
        .route("/v1/config/{*pointer}", get(config_get))
        .route("/stop", post(stop))
        .route("/processes", get(processes_all))
        .route("/processes/{kind}", get(processes))
        .with_state(state)
}

async fn root() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"msg": "Knot Resolver Manager is running! The configuration endpoint is at /config", "status": "RUNNING"}),
    )
}

async fn config_get_root(State(state): State<ApiState>) -> Response {
    let cfg = state.config.borrow().clone();
    json_response(StatusCode::OK, &cfg.raw)
}

async fn config_get(State(state): State<ApiState>, Path(pointer): Path<String>) -> Response {
    let cfg = state.config.borrow().clone();
    match cfg.raw.pointer(&format!("/{pointer}")) {
        Some(v) => json_response(StatusCode::OK, v),
        None => (
            StatusCode::NOT_FOUND,
            format!("no configuration at /{pointer}\n"),
        )
            .into_response(),
    }
}

async fn stop(State(state): State<ApiState>) -> Response {
    state.stop.cancel();
    (StatusCode::OK, "Shutting down...").into_response()
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
                    Value::String(upstream_status(p.state).into()),
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

fn json_response(status: StatusCode, value: &Value) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Serve the API on a unix socket until `shutdown` fires.
pub async fn serve_unix(
    path: &std::path::Path,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
