//! How an in-place upgrade ended: the record the root process writes into its fd store after
//! adopting its state (`daemon::root`), every later manager process reads back
//! (`daemon::manager_process`), announces once on `/events` (`events`) and serves on
//! `GET /upgrade` (`api::upgrade`).

use serde::{Deserialize, Serialize};

/// How the last upgrade ended, as the root records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct UpgradeRecord {
    /// Upgrades tried since the daemon started (1 for the first).
    pub generation: u32,
    pub outcome: UpgradeOutcome,
    /// The version that ran before, and the one that runs now (the same after a failure).
    pub from: String,
    pub to: String,
    /// When it ended, seconds since the epoch.
    pub at: u64,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The manager incarnation that starts first after it: the one that announces it on
    /// `/events` (0 in records of versions before it).
    #[serde(default)]
    pub first_incarnation: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradeOutcome {
    Upgraded,
    Failed,
}

/// The largest record read back.
pub const MAX_RECORD: usize = 64 * 1024;

impl UpgradeRecord {
    /// A record as JSON text, `None` when it does not parse or is too large.
    pub fn parse(bytes: &[u8]) -> Option<UpgradeRecord> {
        super::parse_bounded(bytes, MAX_RECORD)
    }
}
