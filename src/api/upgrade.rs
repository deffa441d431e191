//! `POST /upgrade` and `GET /upgrade`: the in-place upgrade of the daemon. The root process
//! re-executes its binary (possibly a newer version) keeping its pid, every worker and every
//! socket; the manager process, which serves this API, is started anew from the new binary in
//! its course. So a `POST` only says whether the upgrade begins (the new binary passed its
//! probe); how it ended is the [`UpgradeRecord`] the root hands every later manager, served by
//! `GET /upgrade` beside the running version.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::ApiError;
use super::{json_response, ApiState};

/// How the last upgrade ended, as the root records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
        if bytes.len() > MAX_RECORD {
            return None;
        }
        serde_json::from_slice(bytes).ok()
    }
}

/// `GET /upgrade`: the running version and how the last upgrade ended.
pub(super) async fn status(State(state): State<ApiState>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "version": crate::build_version(),
            "last": state.upgrade.as_deref(),
        }),
    )
}

/// `POST /upgrade`: ask the root to re-execute itself; 202 once the new binary passed its
/// probe and the upgrade begins, 409 with the reason when it does not.
pub(super) async fn begin(State(state): State<ApiState>) -> Result<Response, ApiError> {
    match state.supervisor.request_reexec().await {
        Ok(()) => Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({
                "msg": "upgrading: the daemon re-executes its binary; GET /upgrade says how it ended",
                "from": crate::build_version(),
                "generation": state.upgrade.as_ref().map_or(0, |r| r.generation) + 1,
            }),
        )),
        Err(supervisor::SupervisorError::Refused(why)) => Err(ApiError::Conflict(why)),
        Err(e) => Err(ApiError::Unavailable(e.to_string())),
    }
}
