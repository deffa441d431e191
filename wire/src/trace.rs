//! `GET /trace/{name}/{type}`: one query resolved on one worker with kresd's request tracing,
//! its verbose log and final answer, read back by `kresctl trace`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One traced resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Trace {
    /// The worker that resolved the query (`kresd0`, …).
    pub worker: String,
    /// The name asked, as kresd was given it (IDNA names in punycode).
    pub name: String,
    /// The RR type asked (class IN).
    pub r#type: String,
    /// The answer's rcode (`NOERROR`, `NXDOMAIN`, `SERVFAIL`, …); none when kresd dropped
    /// the answer.
    pub rcode: Option<String>,
    /// The answer section's records, one per line, in presentation format.
    pub answer: Vec<String>,
    /// kresd's verbose log of the request, one line per entry, as the worker wrote it.
    pub log: Vec<String>,
    /// Whether the log was cut at its size limit (later lines are missing).
    pub truncated: bool,
    /// How long the resolution took as the manager saw it, in milliseconds.
    pub elapsed_ms: u64,
}
