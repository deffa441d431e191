//! `/metrics`: the workers' statistics, collected over their control sockets in one round
//! per scrape (`crate::metrics::collect`), as JSON by worker or in Prometheus's text format
//! with the supervisor's own series, the control plane's (`crate::metrics::ControlPlane`),
//! the query log's counts and the upstreams' round-trip times (`crate::metrics::observed`),
//! rendered off the runtime's thread; `GET /metrics` redirects to the JSON, as upstream's
//! does.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{json_value, ApiState};
use crate::service;
use kres_config::MetricsMode;

/// Upstream's metrics path: redirects to `/metrics/json`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "metrics",
    responses((status = 301, description = "See `/metrics/json`.",
               headers(("Location" = String, description = "`/metrics/json`")))),
)]
pub(super) async fn metrics_redirect() -> Response {
    (
        StatusCode::MOVED_PERMANENTLY,
        [(header::LOCATION, "/metrics/json")],
    )
        .into_response()
}

/// One scrape of the running workers, as `mode` asks them.
pub(super) async fn collect_stats(
    state: &ApiState,
    mode: MetricsMode,
) -> crate::metrics::Collected {
    let cfg = state.manager.config();
    let ids = service::running_workers(&state.supervisor.snapshot());
    crate::metrics::collect(&cfg.model.rundir, &ids, mode).await
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
pub(super) async fn metrics_json(State(state): State<ApiState>) -> Response {
    let mode = state.manager.config().model.monitoring.metrics;
    let collected = collect_stats(&state, mode).await;
    json_value(StatusCode::OK, &collected.stats_json())
}

/// Statistics in Prometheus's text format, with the supervisor's and the control plane's own.
#[utoipa::path(
    get,
    path = "/metrics/prometheus",
    tag = "metrics",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4.",
               body = String, content_type = "text/plain; version=0.0.4")),
)]
pub(super) async fn metrics_prometheus(State(state): State<ApiState>) -> Response {
    let config = state.manager.config();
    let collected = collect_stats(&state, config.model.monitoring.metrics).await;
    let rendered = state.rendered.of(&config).await;
    let snapshot = state.supervisor.snapshot();
    let query_log = state.query_log.status(&collected.query_log_dropped());
    let fleet = state.fleet.as_ref().map(|fleet| {
        let running = crate::service::running_workers(&snapshot).len() as u64;
        fleet.record(running, u64::from(config.model.workers))
    });
    let control_plane = state.control_plane.clone();
    let kresd_version = state.kresd_version.get().cloned();
    let text = crate::manager::off_thread(move || {
        let upstreams = collected.upstream_addresses();
        let now = crate::metrics::Current {
            snapshot: &snapshot,
            etag: &rendered.etag,
            workers: config.model.workers,
            kresd_version: kresd_version.as_deref(),
            query_log: Some(&query_log),
            upstreams: &upstreams,
            fleet: fleet.as_ref(),
        };
        crate::metrics::render_prometheus(&collected, &control_plane, &now)
    })
    .await;
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
