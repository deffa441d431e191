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

/// One subscribed list (`GET /rpz/lists`): where it comes from and how its last fetch went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RpzList {
    /// The list's name (its file's name without the extension).
    pub name: String,
    /// Where it is fetched from.
    pub url: String,
    /// The RPZ zone kresd loads, compiled from it.
    pub file: String,
    /// `rpz`, `hosts`, `domains` or `adblock`.
    pub format: String,
    /// The action of every name (`nxdomain`, `nodata`, `passthru`); none: the list's own.
    pub action: Option<String>,
    /// Entries of the version in force (none before the first fetch).
    pub entries: Option<u64>,
    /// Lines of it skipped (rules and names that cannot be used).
    pub skipped: Option<u64>,
    /// When it was last fetched, successfully or not (Unix time, seconds).
    pub last_fetch: Option<f64>,
    /// When a fetch last succeeded (Unix time, seconds).
    pub last_success: Option<f64>,
    /// `changed`, `unchanged`, or the last failure's label.
    pub result: Option<String>,
    /// Why the last fetch failed, in words.
    pub error: Option<String>,
    /// When it is fetched next (Unix time, seconds).
    pub next_refresh: Option<f64>,
    /// The server's ETag of the version in force.
    pub etag: Option<String>,
    /// Failed fetches since the start.
    pub failures: u64,
}

/// Which subscribed list decides a name (`GET /rpz/check`), without a query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RpzCheck {
    /// The name asked about (lower case, no final dot).
    pub name: String,
    /// The list that decides it; none: no list has it, it resolves normally.
    pub list: Option<String>,
    /// The entry of that list that matches (`*.name` for the names under `name`).
    pub entry: Option<String>,
    /// `nxdomain`, `nodata`, or `passthru` (an allowlist decides: it resolves normally).
    pub action: Option<String>,
    /// Blocklists that list it too but are overridden by the allowlist.
    pub overridden: Vec<String>,
    /// The client asked for, when one was.
    #[serde(default)]
    pub client: Option<String>,
    /// The tags its views give it (none when no client was asked for).
    #[serde(default)]
    pub client_tags: Option<Vec<String>>,
    /// Lists not consulted: their tags are none of the client's.
    #[serde(default)]
    pub not_for_client: Vec<String>,
}
