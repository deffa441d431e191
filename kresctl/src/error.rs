//! What a kresctl command fails with: [`ClientError`] for everything a command can meet (the
//! socket, the API's answers, the files it reads) and [`WriteError`] for standard output. In
//! a module of their own so that the client and the printing both use them and neither the
//! other.

use std::path::PathBuf;

use kres_wire::environment::{READ_ONLY_TOKEN_FILE_VAR, TOKEN_FILE_VAR};

/// The largest answer kresctl reads (a configuration of a million entries fits).
pub const MAX_RESPONSE: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("invalid socket URL {0:?}")]
    BadUrl(String),
    #[error("Failed to connect to {target}: {source}\n{hint}")]
    Connect {
        target: String,
        source: std::io::Error,
        /// What to do about it, for this cause (`client::connect_hint`).
        hint: String,
    },
    /// 401: the API over TCP asks for a bearer token, and none or a wrong one was sent.
    #[error("unauthorized: {}\nThe API asks for a bearer token: name a file holding the admin token in \
             {TOKEN_FILE_VAR} (or the read-only token in {READ_ONLY_TOKEN_FILE_VAR}); see \
             kresctl --help", .0.trim_end())]
    Unauthorized(String),
    #[error("request failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("request failed: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("status: {status}\nbody:\n{body}")]
    Status { status: u16, body: String },
    /// 403: the client's role (by its uid and groups, or its bearer token) may not do this.
    #[error("permission denied: {}", .0.trim_end())]
    Forbidden(String),
    #[error("invalid JSON from the API: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("invalid request:\n{0}")]
    Invalid(String),
    #[error("no answer within {} s", .0.as_secs())]
    Timeout(std::time::Duration),
    #[error("the answer exceeds {MAX_RESPONSE} bytes")]
    TooLarge,
    /// The server lacks a route of ours (upstream's manager).
    #[error("{0}")]
    NotOffered(String),
    /// The request was carried out and did not succeed (an upgrade that failed).
    #[error("{0}")]
    Failed(String),
    /// `config diff` found differences: exit 1 as diff(1) does, with nothing more to say
    /// than the differences printed.
    #[error("")]
    Differences,
    /// `GET /events` answered 404: upstream's manager, or a version of ours before it.
    #[error("the resolver's management API does not offer /events (it is upstream's manager or an older knot-resolver); there are no events to follow")]
    NoEvents,
    /// The event stream broke off or carried something that is not one.
    #[error("event stream: {0}")]
    EventStream(String),
    /// Standard output could not be written (closed: the command ends quietly).
    #[error("{0}")]
    Output(#[from] WriteError),
}

impl ClientError {
    /// The error of an answer with a status that is no success.
    pub fn from_status(status: u16, body: String) -> ClientError {
        match status {
            401 => ClientError::Unauthorized(body),
            403 => ClientError::Forbidden(body),
            _ => ClientError::Status { status, body },
        }
    }
}

/// Why standard output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Its reader is gone (`kresctl events | head -3`): not a failure, there is nobody left
    /// to tell anything; the command ends quietly with exit 0.
    #[error("standard output is closed")]
    Closed,
    #[error("cannot write to standard output: {0}")]
    Io(#[source] std::io::Error),
}
