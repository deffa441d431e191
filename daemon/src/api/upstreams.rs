//! `GET /upstreams`: the configured forward targets and the upstream addresses the workers
//! used recently, with the round-trip times kresd's `stats.upstreams()` keeps and the
//! workers' tallies of queries sent and answers received (`lua::counts`), merged over the
//! workers (asked through their control sockets, as the metrics are).

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::{json_value, ApiState};
use crate::config::{ForwardServer, KresConfig};
use crate::service::WorkerId;
use crate::wire::upstreams::{ForwardTarget, UpstreamAddress, Upstreams};

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
    // Their RTT samples and tallies, loading `stats` and the counting layer as the lazy
    // metrics do.
    let expr = format!("{}()", crate::lua::counts::UPSTREAMS_FUNCTION);
    let replies = crate::control::command_all(&config.model.rundir, &ids, &expr).await;
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
        counted_since: counted_since(&answered),
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

/// One address merged over the workers.
#[derive(Default)]
struct Merged {
    /// RTT samples, milliseconds.
    samples: Vec<f64>,
    /// Queries sent, answers received, answers with an error rcode.
    sent: u64,
    answered: u64,
    errors: u64,
    /// Workers that hold samples or tallies of it.
    workers: Vec<String>,
}

/// The workers' replies merged by address: `{rtt = stats.upstreams(), tallies = {...}}` (a
/// worker still running the Lua of an older manager answers `stats.upstreams()` alone);
/// anything else in a reply is passed over.
fn merge(replies: &[(WorkerId, Value)]) -> Vec<UpstreamAddress> {
    let mut by_address: BTreeMap<String, Merged> = BTreeMap::new();
    for (id, reply) in replies {
        let (rtt, tallies) = match reply.get("rtt") {
            Some(rtt) => (rtt, reply.get("tallies")),
            None => (reply, None),
        };
        let mut seen: Vec<String> = Vec::new();
        for (address, samples) in rtt.as_object().into_iter().flatten() {
            let samples: Vec<f64> = match samples {
                Value::Array(a) => a.iter().filter_map(Value::as_f64).collect(),
                Value::Object(o) => o.values().filter_map(Value::as_f64).collect(),
                _ => continue,
            };
            if samples.is_empty() {
                continue;
            }
            by_address
                .entry(address.clone())
                .or_default()
                .samples
                .extend(samples);
            seen.push(address.clone());
        }
        for (key, tally) in tallies.and_then(Value::as_object).into_iter().flatten() {
            let Some(address) = address_of_key(key) else {
                continue;
            };
            let count = |field: &str| tally.get(field).and_then(Value::as_u64).unwrap_or(0);
            let merged = by_address.entry(address.clone()).or_default();
            merged.sent += count("sent");
            merged.answered += count("answered");
            merged.errors += count("errors");
            seen.push(address);
        }
        seen.sort_unstable();
        seen.dedup();
        for address in seen {
            if let Some(merged) = by_address.get_mut(&address) {
                merged.workers.push(id.name());
            }
        }
    }
    by_address
        .into_iter()
        .map(|(address, m)| {
            let n = m.samples.len();
            let (avg, min, max) = if n == 0 {
                (None, None, None)
            } else {
                (
                    Some(m.samples.iter().sum::<f64>() / n as f64),
                    Some(m.samples.iter().copied().fold(f64::INFINITY, f64::min)),
                    Some(m.samples.iter().copied().fold(0.0, f64::max)),
                )
            };
            UpstreamAddress {
                address,
                samples: n as u64,
                rtt_avg_ms: avg,
                rtt_min_ms: min,
                rtt_max_ms: max,
                queries: m.sent,
                answered: m.answered,
                unanswered: m.sent.saturating_sub(m.answered),
                error_answers: m.errors,
                workers: m.workers,
            }
        })
        .collect()
}

/// Since when every worker that told counts: the latest of their `since`s (a worker of an
/// older manager tells none).
fn counted_since(replies: &[(WorkerId, Value)]) -> Option<f64> {
    replies
        .iter()
        .filter_map(|(_, reply)| reply.get("since").and_then(Value::as_f64))
        .reduce(f64::max)
}

/// The address a tally's key names: its bytes in hex, 4 (IPv4) or 16 (IPv6), as kresd's
/// `stats.upstreams()` would write it.
fn address_of_key(key: &str) -> Option<String> {
    if !key.is_ascii() || !key.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Vec<u8> = key
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()?;
    let address: IpAddr = match bytes.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(address.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn samples_and_tallies_merge_over_workers() {
        let replies = vec![
            (
                WorkerId(0),
                json!({"rtt": {"127.0.0.1": [2, 4], "::1": []},
                       "tallies": {"7f000001": {"sent": 3, "answered": 2, "errors": 1},
                                   "7f000002": {"sent": 4, "answered": 0, "errors": 0}}}),
            ),
            (
                WorkerId(1),
                // A worker of an older manager: the samples alone.
                json!({"127.0.0.1": {"1": 6}, "x": "garbage"}),
            ),
            (
                WorkerId(2),
                json!({"rtt": [], "tallies": {"7f00000": {"sent": 1}, "zz000001": {"sent": 1},
                       "00000000000000000000000000000001": {"sent": 5, "answered": 5}}}),
            ),
            (WorkerId(3), json!("not a table")),
        ];
        let merged = merge(&replies);
        let addresses: Vec<&str> = merged.iter().map(|a| a.address.as_str()).collect();
        assert_eq!(addresses, ["127.0.0.1", "127.0.0.2", "::1"]);
        let a = &merged[0];
        assert_eq!(
            (a.samples, a.rtt_avg_ms, a.rtt_min_ms, a.rtt_max_ms),
            (3, Some(4.0), Some(2.0), Some(6.0))
        );
        assert_eq!(
            (a.queries, a.answered, a.unanswered, a.error_answers),
            (3, 2, 1, 1)
        );
        assert_eq!(a.workers, ["kresd0", "kresd1"]);
        // Never answered: no RTT, every query unanswered.
        let dead = &merged[1];
        assert_eq!((dead.samples, dead.rtt_avg_ms), (0, None));
        assert_eq!((dead.queries, dead.unanswered), (4, 4));
        assert_eq!(merged[2].workers, ["kresd2"]);
        assert_eq!((merged[2].queries, merged[2].unanswered), (5, 0));
    }
}
