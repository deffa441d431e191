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
    /// The newest document the node holds back because a staged rollout has not reached it.
    #[serde(default)]
    pub held: Option<i64>,
    /// How the node's answers fared after it applied a staged document.
    #[serde(default)]
    pub soak: Option<Soak>,
}

/// A node's SERVFAIL share before and after it applied the document of a staged rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Soak {
    /// The document's revision.
    pub revision: i64,
    /// SERVFAIL answers per answer before it (since the workers started).
    pub servfail_before: f64,
    /// The same over the soak time after it (absent while the node still soaks it).
    pub servfail_after: Option<f64>,
    /// The answers the share after it counts.
    pub answers_after: u64,
    /// `true`: the share did not rise by more than the rollout allows; `false`: it did;
    /// absent while the node still soaks it.
    pub passed: Option<bool>,
}

/// A staged rollout of the fleet's document (`<prefix>/config-rollout`, written in the same
/// transaction as the document): the nodes get it wave by wave, the first wave being the
/// canary; a node not yet admitted keeps running what it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rollout {
    /// The SHA-256 (hex) of the document it stages: a document written later is not staged.
    pub document: String,
    /// The document's revision, once known (the store gives it with the write).
    #[serde(default)]
    pub revision: Option<i64>,
    /// The revision of the document before it.
    pub previous: Option<i64>,
    /// The node that took the change and moves the rollout on.
    pub driver: String,
    /// The nodes, wave by wave; a node in no wave (it joined later) gets it at the end.
    pub waves: Vec<Vec<String>>,
    /// How many waves are admitted (at least 1).
    pub admitted: usize,
    /// When the last wave was admitted (Unix seconds).
    pub admitted_at: f64,
    pub state: RolloutState,
    /// Why it halted.
    #[serde(default)]
    pub halted: Option<String>,
    /// How long a node's answers are watched after it applied, before the next wave.
    pub soak_seconds: f64,
    /// The most a node's SERVFAIL share may rise over the soak (0.05: five points).
    pub max_servfail_rise: f64,
    /// How long a wave may take to apply before the rollout halts.
    pub wave_timeout_seconds: f64,
}

/// Where a staged rollout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutState {
    /// Waves are admitted one after the other.
    Rolling,
    /// A node refused it, its SERVFAIL share rose, or a wave took too long: no more waves.
    Halted,
    /// Every wave was admitted: every node runs it.
    Done,
}

impl Rollout {
    /// Whether `node` may run the staged document now.
    pub fn admits(&self, node: &str) -> bool {
        self.state == RolloutState::Done
            || self
                .waves
                .iter()
                .take(self.admitted)
                .any(|wave| wave.iter().any(|n| n == node))
    }
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
    /// The staged rollout of the newest document, if it was staged.
    #[serde(default)]
    pub rollout: Option<Rollout>,
    /// The JSON pointers the answering node's own file sets (they win over the fleet's
    /// document there), at most [`MAX_EXPLAINED`].
    #[serde(default)]
    pub own: Vec<String>,
    /// The pointers where the fleet's newest document sets a value the answering node does
    /// not run (its own file or the node-local rule decides there), at most [`MAX_EXPLAINED`].
    #[serde(default)]
    pub shadowed: Vec<String>,
}

/// The most pointers `FleetStatus::own` and `shadowed` list.
pub const MAX_EXPLAINED: usize = 1000;

impl FleetStatus {
    /// The nodes that do not run the newest document.
    pub fn stragglers(&self) -> Vec<&FleetNode> {
        self.nodes
            .iter()
            .filter(|n| self.newest.is_some() && n.revision != self.newest)
            .collect()
    }
}

/// What a staged change of the configuration answers (202): the fleet's new revision and the
/// waves the nodes get it in (the first is the canary).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Staged {
    pub revision: i64,
    pub waves: Vec<Vec<String>>,
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
