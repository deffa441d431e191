//! What a call to the store can fail with, in the words a caller acts on: a compare-and-swap
//! that lost ([`Error::Conflict`]), a store that cannot be reached or has no quorum within the
//! call's timeout ([`Error::Timeout`]), a refusal from etcd
//! ([`Error::Server`]), or an answer we will not take ([`Error::TooLarge`],
//! [`Error::Malformed`]). Options that cannot work are refused before any call
//! ([`ConfigError`]).

use std::path::PathBuf;
use std::time::Duration;

/// A call to the store that did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `put_if`'s comparison failed: the key's modification revision is `current`
    /// (`None`: the key is absent).
    #[error("the key changed meanwhile (its revision is now {})", revision_text(*.current))]
    Conflict { current: Option<i64> },
    /// No endpoint took the call within the timeout (none reachable, or none with a
    /// quorum behind it); `last` is what the last try met. A write that timed out after it
    /// was sent may still be applied: read it back.
    #[error("{call}: no etcd endpoint took the call within {after:?} (last: {last})")]
    Timeout {
        call: &'static str,
        after: Duration,
        last: String,
    },
    /// The connection failed after the request was sent: whether a write was applied is
    /// unknown (read it back).
    #[error("{call} at {endpoint}: the connection failed after the request was sent: {reason}")]
    Interrupted {
        call: &'static str,
        endpoint: String,
        reason: String,
    },
    /// etcd refused the call (`code` is its gRPC status code).
    #[error("{call} at {endpoint}: etcd answered code {code}: {message}")]
    Server {
        call: &'static str,
        endpoint: String,
        code: i64,
        message: String,
    },
    /// An answer, or a value in it, over the bound this client keeps.
    #[error("{what}: over {limit} bytes, refused (values are bounded to keep the process small)")]
    TooLarge { what: String, limit: usize },
    /// An answer that is not what etcd's JSON gateway sends.
    #[error("{what}: {reason}")]
    Malformed { what: String, reason: String },
    /// The lease is gone (expired or revoked): its records went with it.
    #[error("lease {id:x} has expired")]
    LeaseExpired { id: i64 },
}

fn revision_text(current: Option<i64>) -> String {
    match current {
        Some(r) => r.to_string(),
        None => "absent: the key was deleted".to_owned(),
    }
}

impl Error {
    pub(crate) fn malformed(what: impl Into<String>, reason: impl ToString) -> Error {
        Error::Malformed {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

/// Options that cannot make a working client.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no etcd endpoint given")]
    NoEndpoints,
    #[error("more than {max} etcd endpoints")]
    TooManyEndpoints { max: usize },
    #[error("etcd endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("TLS: {0}")]
    Tls(String),
}
