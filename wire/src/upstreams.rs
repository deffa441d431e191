//! What `GET /upstreams` answers, shared by the API and kresctl.

use serde::{Deserialize, Serialize};

/// The configured forward targets and the upstream addresses the workers used recently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Upstreams {
    /// The `forward` rules of the configuration: subtrees and their targets.
    pub forwards: Vec<ForwardTarget>,
    /// Every upstream address kresd's `stats.upstreams()` holds samples of or the workers
    /// sent queries to, merged over the workers, by address.
    pub addresses: Vec<UpstreamAddress>,
    /// Workers that did not tell (not running, or no answer on their control socket).
    pub workers_silent: Vec<String>,
    /// Since when the tallies (`queries`, `unanswered`, `error_answers`) count, Unix seconds:
    /// the latest of the moments the workers that told began counting (their first look at
    /// the statistics or the upstreams, a restart, or their start with
    /// `monitoring.metrics: always`). Absent when no worker said.
    #[serde(default)]
    pub counted_since: Option<f64>,
}

/// One `forward` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForwardTarget {
    /// The subtrees forwarded.
    pub subtrees: Vec<String>,
    /// The targets' addresses as configured (`address[@port]`).
    pub servers: Vec<String>,
}

/// One upstream address: the round-trip times kresd measured to it and the workers' tallies
/// of the queries sent to it and the answers received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpstreamAddress {
    /// The address as kresd names it (no port).
    pub address: String,
    /// RTT samples held over all workers (kresd keeps the most recent answers').
    pub samples: u64,
    /// Their mean, minimum and maximum, in milliseconds; absent with no sample (an upstream
    /// that never answered).
    pub rtt_avg_ms: Option<f64>,
    pub rtt_min_ms: Option<f64>,
    pub rtt_max_ms: Option<f64>,
    /// Queries sent to it (each retry counts) since the workers started counting: their
    /// first look at the statistics or the upstreams, or their start with
    /// `monitoring.metrics: always`.
    #[serde(default)]
    pub queries: u64,
    /// Answers received of those.
    #[serde(default)]
    pub answered: u64,
    /// Queries not answered: timed out, or the connection failed (`queries - answered`; the
    /// few still waiting for their answer count here too).
    #[serde(default)]
    pub unanswered: u64,
    /// Answers received with an rcode other than NOERROR and NXDOMAIN (SERVFAIL, REFUSED,
    /// FORMERR, ...).
    #[serde(default)]
    pub error_answers: u64,
    /// The workers that used it.
    pub workers: Vec<String>,
}
