//! What `GET /upstreams` answers, shared by the API and kresctl.

use serde::{Deserialize, Serialize};

/// The configured forward targets and the upstream addresses the workers used recently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Upstreams {
    /// The `forward` rules of the configuration: subtrees and their targets.
    pub forwards: Vec<ForwardTarget>,
    /// Every upstream address kresd's `stats.upstreams()` holds samples of, merged over the
    /// workers, by address.
    pub addresses: Vec<UpstreamAddress>,
    /// Workers that did not tell (not running, or no answer on their control socket).
    pub workers_silent: Vec<String>,
}

/// One `forward` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForwardTarget {
    /// The subtrees forwarded.
    pub subtrees: Vec<String>,
    /// The targets' addresses as configured (`address[@port]`).
    pub servers: Vec<String>,
}

/// One upstream address and the round-trip times kresd measured to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpstreamAddress {
    /// The address as kresd names it.
    pub address: String,
    /// RTT samples held over all workers (kresd keeps the most recent ones).
    pub samples: u64,
    /// Their mean, minimum and maximum, in milliseconds.
    pub rtt_avg_ms: f64,
    pub rtt_min_ms: f64,
    pub rtt_max_ms: f64,
    /// The workers that used it.
    pub workers: Vec<String>,
}
