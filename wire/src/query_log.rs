//! What the query log's routes answer (`GET /query-log`, `/query-log/stream`,
//! `/query-log/status`, `/top/{kind}`), shared by the API and kresctl.

use serde::{Deserialize, Serialize};

/// One answer of the query log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LoggedAnswer {
    /// When the answer was given, seconds since the epoch (microsecond precision).
    pub time: f64,
    /// The client's address, cut to the configured prefix (`/24` keeps `192.0.2.0`).
    pub client: String,
    /// `udp`, `tcp`, `dot`, `doh`, `doq` or `other`.
    pub transport: String,
    /// The question's name, lowercase and absolute.
    pub name: String,
    /// The question's type (`A`, `TYPE65280`).
    pub qtype: String,
    /// The answer's rcode (`NOERROR`, `SERVFAIL`, …).
    pub rcode: String,
    /// From the query's arrival to the answer, in milliseconds, when kresd told both.
    pub latency_ms: Option<f64>,
    /// Records in the answer section.
    pub answers: u16,
    /// The Extended DNS Error's info code, when the answer carries one (6: DNSSEC bogus).
    pub ede: Option<u16>,
    /// The worker that answered (`kresd0`), when it said.
    pub worker: Option<String>,
    /// Whether the answer came from the cache (local data too: kresd answers it as from the
    /// cache), when the worker said.
    #[serde(default)]
    pub cached: Option<bool>,
}

/// One line of a top list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TopEntry {
    /// The client, name or type.
    pub key: String,
    /// Answers that had it, within the window and the ring.
    pub count: u64,
}

/// A top list: the most frequent keys of the answers within the window, exact within the
/// ring (the ring holds the last `entries` answers; an older one is counted by no list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TopList {
    /// `clients`, `names`, `servfail`, `nxdomain`, `bogus` or `qtypes`.
    pub kind: String,
    /// The window in seconds; `null`: the whole ring.
    pub window: Option<f64>,
    /// Answers the list was counted from (in the window, of the kind).
    pub counted: u64,
    /// Keys by descending count (ties by key).
    pub entries: Vec<TopEntry>,
}

/// What the query log holds and has seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueryLogStatus {
    /// Whether the configuration has the workers send their answers.
    pub enabled: bool,
    /// Why no answer comes although `enabled`, if that is known.
    pub inactive_reason: Option<String>,
    /// The ring's size.
    pub capacity: u64,
    /// Answers in the ring now.
    pub held: u64,
    /// Answers received since this manager process started.
    pub received: u64,
    /// Datagrams, or parts of them, that were not batches of records this log reads.
    pub malformed: u64,
    /// The bytes the ring's answers take (estimated from their names' lengths).
    #[serde(default)]
    pub held_bytes: u64,
    /// The most the ring's answers may take (`max-memory`).
    #[serde(default)]
    pub max_memory: u64,
    /// How long an answer is kept at most (`max-age`), in seconds.
    #[serde(default)]
    pub max_age_seconds: u64,
    /// Datagrams refused because their sender did not run as the workers' user (nor root,
    /// nor the manager's).
    #[serde(default)]
    pub refused_peers: u64,
    /// Answers the workers gave that never reached the log (a worker drops a batch when the
    /// reader lags or is away; the answer itself is never delayed): the running workers' own
    /// counts of the records they dropped, since they started.
    pub missed: u64,
    /// Workers whose dropped count is known.
    pub workers_counted: u64,
    /// Answers the live streams' followers lagged behind and did not get.
    pub followers_lagged: u64,
}

/// The top lists: one type for the API's path, kresctl's argument and the selection.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TopKind {
    /// Clients by answers.
    Clients,
    /// Names by answers.
    Names,
    /// Names by SERVFAIL answers.
    Servfail,
    /// Names by NXDOMAIN answers.
    Nxdomain,
    /// Names by answers that failed DNSSEC validation (an Extended DNS Error of DNSSEC).
    Bogus,
    /// Types by answers.
    Qtypes,
}

impl TopKind {
    /// The list's name in paths and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            TopKind::Clients => "clients",
            TopKind::Names => "names",
            TopKind::Servfail => "servfail",
            TopKind::Nxdomain => "nxdomain",
            TopKind::Bogus => "bogus",
            TopKind::Qtypes => "qtypes",
        }
    }
}
