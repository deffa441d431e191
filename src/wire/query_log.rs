//! What the query log's routes answer (`GET /query-log`, `/query-log/stream`,
//! `/query-log/status`, `/top/{kind}`), shared by the API and kresctl.

use serde::{Deserialize, Serialize};

/// One answer of the query log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LoggedAnswer {
    /// When the answer was sent, seconds since the epoch (microsecond precision).
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
    /// cache); absent when the worker's mark of it did not come (dropped while the reader
    /// was stopped, or a worker of an older manager).
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
    /// Frames that were not dnstap answers or queries this log reads.
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
    /// Connections to the query log's socket, and cache marks' datagrams, refused because
    /// their sender did not run as the workers' user (nor root, nor the manager's).
    #[serde(default)]
    pub refused_peers: u64,
    /// Frames refused because they claimed another worker than the one whose stream they
    /// came on (a stream's worker is the one its first answer named).
    #[serde(default)]
    pub refused_frames: u64,
    /// Workers' streams open now.
    pub streams: u64,
    /// Answers the workers sent that never reached the log (kresd drops an entry when the
    /// reader lags; the answer itself is never delayed): per worker, the answers it counted
    /// minus those received, since its stream opened (counted while the stream is open).
    pub missed: u64,
    /// Workers whose misses are counted (their answer count known since their stream began).
    pub workers_counted: u64,
    /// Answers the live streams' followers lagged behind and did not get.
    pub followers_lagged: u64,
    /// kresd's stream passed on to the operator's own dnstap socket (`logging.dnstap`), when
    /// configured.
    #[serde(default)]
    pub relay: Option<RelayStatus>,
}

/// kresd's dnstap stream passed on to the operator's socket (`logging.dnstap.unix-socket`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RelayStatus {
    /// The operator's socket.
    pub socket: String,
    /// Whether a consumer accepted the stream and it is open now.
    pub connected: bool,
    /// Frames written to the consumer since this manager process started.
    pub relayed: u64,
    /// Frames dropped because the buffer for the consumer (2 MiB) was full: the consumer was
    /// away, slow, or had not accepted the stream. kresd and the query log never wait for it.
    pub dropped: u64,
    /// Frames waiting for the consumer now.
    pub queued: u64,
    /// Connections the consumer accepted since this manager process started.
    pub connections: u64,
    /// Why the last connection failed or ended.
    pub last_error: Option<String>,
}
