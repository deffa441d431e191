//! `GET /rpz`: the RPZ zones kept by zone transfer, as the event log tells them (their
//! stored serial, last transfer, next refresh, when they expire and whether they expired, whether kresd loads them), read back
//! by `kresctl rpz`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One RPZ zone kept by zone transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RpzZone {
    /// The zone's name (absolute, lower case).
    pub zone: String,
    /// Where the zone is kept, and what kresd's policy-loader reads.
    pub file: String,
    /// The primaries, asked in this order.
    pub primaries: Vec<String>,
    /// The serial of the stored zone; none before the first transfer.
    pub serial: Option<u32>,
    /// The last refresh, successful or not.
    pub last_transfer: Option<RpzTransfer>,
    /// When the last successful refresh ended (Unix time, seconds).
    pub last_success: Option<f64>,
    /// When the zone is refreshed next (Unix time, seconds), NOTIFYs aside.
    pub next_refresh: Option<f64>,
    /// When the zone expires with no successful refresh meanwhile (Unix time, seconds): the
    /// last success plus the SOA's expire time (past once `expired`); none while no SOA is
    /// known.
    #[serde(default)]
    pub expires: Option<f64>,
    /// Whether the SOA's expire time passed with no successful refresh: the stored policy is
    /// still served.
    pub expired: bool,
    /// Why kresd cannot load the stored zone, when it cannot: the policy-loader left it out
    /// (the rest of the policy is in force), and it is transferred whole again.
    #[serde(default)]
    pub broken: Option<String>,
}

/// One refresh of a zone, from one primary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RpzTransfer {
    /// `axfr`, `ixfr` or `up-to-date` (for a failure: what was attempted, `axfr` or `ixfr`).
    pub kind: String,
    /// The primary asked.
    pub primary: String,
    /// When it ended (Unix time, seconds).
    pub time: f64,
    /// How long it took, in seconds (none for a failure).
    pub duration: Option<f64>,
    /// Bytes of DNS messages received.
    pub bytes: Option<u64>,
    /// Records received.
    pub records: Option<u64>,
    /// `success`, or the failure's label (`timeout`, `too-large`, `tsig`, `refused`, …).
    pub result: String,
    /// Why it failed, in words.
    pub error: Option<String>,
}
