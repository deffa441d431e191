//! `GET /upstreams`: the configured forward targets and the upstream addresses the workers
//! used recently, with the round-trip times kresd's `stats.upstreams()` keeps and the
//! workers' tallies of queries sent and answers received (`lua::counts`), merged over the
//! workers (`crate::metrics::upstreams`), from the same one-round scrape as the metrics.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{json_value, ApiState};
use kres_config::{ForwardServer, KresConfig, MetricsMode};
use kres_wire::upstreams::{ForwardTarget, Upstreams};

/// The forward targets and the upstreams used recently, with their round-trip times.
#[utoipa::path(
    get,
    path = "/upstreams",
    tag = "status",
    responses((status = 200, description = "Forward targets and upstream addresses.", body = Upstreams)),
)]
pub(super) async fn upstreams(State(state): State<ApiState>) -> Response {
    let config = state.manager.config();
    // The workers are asked as the lazy metrics ask them (loading `stats` and the counting
    // layer) whatever `monitoring.metrics` says: the operator asked for this page.
    let mode = match config.model.monitoring.metrics {
        MetricsMode::ManagerOnly => MetricsMode::Lazy,
        mode @ (MetricsMode::Lazy | MetricsMode::Always) => mode,
    };
    let collected = super::stats::collect_stats(&state, mode).await;
    let forwards = forwards(&config.model);
    crate::manager::off_thread(move || json_value(StatusCode::OK, &collected.upstreams(forwards)))
        .await
}

/// The `forward` rules of `cfg`.
fn forwards(cfg: &KresConfig) -> Vec<ForwardTarget> {
    cfg.forward
        .iter()
        .flatten()
        .map(|f| ForwardTarget {
            subtrees: f.subtree.iter().map(ToString::to_string).collect(),
            servers: f
                .servers
                .iter()
                .flat_map(|s| match s {
                    ForwardServer::Address(a) => vec![a.to_string()],
                    ForwardServer::Server(s) => s.address.iter().map(ToString::to_string).collect(),
                })
                .collect(),
        })
        .collect()
}
