//! `GET /upstreams`: the configured forward targets and the upstream addresses the workers
//! used recently, with the round-trip times kresd's `stats.upstreams()` keeps, merged over
//! the workers (asked through their control sockets, as the metrics are).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::{json_value, ApiState};
use crate::config::{ForwardServer, KresConfig};
use crate::service::WorkerId;
use crate::wire::upstreams::{ForwardTarget, UpstreamAddress, Upstreams};

/// The Lua a worker evaluates: its upstreams' RTT samples (loading `stats` as the lazy
/// metrics do).
const UPSTREAMS_EXPR: &str =
    "(function() if stats == nil then modules.load('stats') end return stats.upstreams() end)()";

/// The forward targets and the upstreams used recently, with their round-trip times.
#[utoipa::path(
    get,
    path = "/upstreams",
    tag = "status",
    responses((status = 200, description = "Forward targets and upstream addresses.", body = Upstreams)),
)]
pub(super) async fn upstreams(State(state): State<ApiState>) -> Response {
    json_value(StatusCode::OK, &gather(&state).await)
}

/// The forward targets, and the workers' upstreams merged (also for the Prometheus text).
pub(super) async fn gather(state: &ApiState) -> Upstreams {
    let config = state.manager.config();
    let ids = crate::service::running_workers(&state.supervisor.snapshot());
    let replies = crate::control::command_all(&config.model.rundir, &ids, UPSTREAMS_EXPR).await;
    let mut silent = Vec::new();
    let mut answered = Vec::new();
    for (id, reply) in replies {
        match reply {
            Ok(value) => answered.push((id, value)),
            Err(e) => {
                tracing::debug!(worker = %id, "upstreams: {e}");
                silent.push(id.name());
            }
        }
    }
    Upstreams {
        forwards: forwards(&config.model),
        addresses: merge(&answered),
        workers_silent: silent,
    }
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

/// The workers' `stats.upstreams()` replies (address → RTT samples in milliseconds) merged
/// by address; anything else in a reply is passed over.
fn merge(replies: &[(WorkerId, Value)]) -> Vec<UpstreamAddress> {
    let mut by_address: BTreeMap<&str, (Vec<f64>, Vec<String>)> = BTreeMap::new();
    for (id, reply) in replies {
        let Some(map) = reply.as_object() else {
            continue;
        };
        for (address, samples) in map {
            let samples: Vec<f64> = match samples {
                Value::Array(a) => a.iter().filter_map(Value::as_f64).collect(),
                Value::Object(o) => o.values().filter_map(Value::as_f64).collect(),
                _ => continue,
            };
            if samples.is_empty() {
                continue;
            }
            let entry = by_address.entry(address.as_str()).or_default();
            entry.0.extend(samples);
            entry.1.push(id.name());
        }
    }
    by_address
        .into_iter()
        .map(|(address, (samples, workers))| {
            let n = samples.len() as f64;
            UpstreamAddress {
                address: address.to_owned(),
                samples: samples.len() as u64,
                rtt_avg_ms: samples.iter().sum::<f64>() / n,
                rtt_min_ms: samples.iter().copied().fold(f64::INFINITY, f64::min),
                rtt_max_ms: samples.iter().copied().fold(0.0, f64::max),
                workers,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn samples_merge_over_workers() {
        let replies = vec![
            (
                WorkerId(0),
                json!({"127.0.0.1#53001": [2, 4], "::1#53": []}),
            ),
            (
                WorkerId(1),
                json!({"127.0.0.1#53001": {"1": 6}, "x": "garbage"}),
            ),
            (WorkerId(2), json!("not a table")),
        ];
        let merged = merge(&replies);
        assert_eq!(merged.len(), 1);
        let a = &merged[0];
        assert_eq!(a.address, "127.0.0.1#53001");
        assert_eq!(
            (a.samples, a.rtt_avg_ms, a.rtt_min_ms, a.rtt_max_ms),
            (3, 4.0, 2.0, 6.0)
        );
        assert_eq!(a.workers, ["kresd0", "kresd1"]);
    }
}
