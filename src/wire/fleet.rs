//! What `GET /fleet` answers and what each node publishes of itself in etcd, shared by the
//! manager and kresctl.

use serde::{Deserialize, Serialize};

/// One node as it published itself (`<prefix>/nodes/<node>`, under a lease: a node that
/// stops renewing it disappears).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FleetNode {
    /// The node's name (`fleet.node`).
    pub node: String,
    /// The store revision of the fleet's document the node runs; absent before it ran one.
    pub revision: Option<i64>,
    /// The newest document the node refused, and why (it runs its last good one).
    pub refused: Option<RefusedRevision>,
    /// Workers running, and configured.
    pub workers_running: u64,
    pub workers: u64,
    /// The daemon's version.
    pub version: String,
    /// When the node last applied a document of the fleet (Unix seconds).
    pub changed_at: Option<f64>,
    /// Why the node cannot read the fleet's document now, if it cannot.
    pub store_error: Option<String>,
    /// The newest document revision the node has seen (run or refused).
    #[serde(default)]
    pub newest_seen: Option<i64>,
    /// How many nodes' records the node saw in the store when it last looked.
    #[serde(default)]
    pub nodes_seen: Option<u64>,
}

/// A document revision a node refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RefusedRevision {
    pub revision: i64,
    pub reason: String,
}

/// The fleet as one node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FleetStatus {
    /// The node answering.
    pub node: String,
    /// The key prefix of the fleet.
    pub prefix: String,
    /// The store revision of the fleet's newest document (absent: none written yet).
    pub newest: Option<i64>,
    /// Every node that published itself, by name.
    pub nodes: Vec<FleetNode>,
}

impl FleetStatus {
    /// The nodes that do not run the newest document.
    pub fn stragglers(&self) -> Vec<&FleetNode> {
        self.nodes
            .iter()
            .filter(|n| self.newest.is_some() && n.revision != self.newest)
            .collect()
    }
}

/// What `POST /fleet/rollback` did: the document before `replaced` written again as
/// `revision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RolledBack {
    /// The revision of the document that was replaced.
    pub replaced: i64,
    /// The new revision, holding the document before it.
    pub revision: i64,
}
