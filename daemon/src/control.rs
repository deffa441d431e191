//! The control-socket client for kresd workers. Each worker binds `<rundir>/control/<N>`; we
//! connect, read its `> ` prompt, switch the connection to `__json` mode, send one Lua
//! expression and read the length-prefixed (4 bytes, big-endian) reply. Commands go to all
//! workers concurrently, each with its own timeout, so one stuck worker delays nobody.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::service::WorkerId;

/// Largest reply we accept from a worker, unless the caller sets a smaller bound.
pub const MAX_REPLY: usize = 64 * 1024 * 1024;

/// How long one command may take, connection included.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot talk to {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} did not answer within {timeout:?}")]
    Timeout { path: PathBuf, timeout: Duration },
    #[error("{path} sent an oversize reply ({len} bytes)")]
    Oversize { path: PathBuf, len: usize },
    #[error("a control command must be one line")]
    MultiLine,
}

/// Evaluate `expr` in the worker behind `path`. The reply is JSON when kresd could encode the
/// result, otherwise its text (an error message, for instance).
pub async fn command(path: &Path, expr: &str, timeout: Duration) -> Result<Value, ControlError> {
    command_within(path, expr, timeout, MAX_REPLY).await
}

/// [`command`], refusing a reply longer than `max_reply` bytes (before reading it).
pub async fn command_within(
    path: &Path,
    expr: &str,
    timeout: Duration,
    max_reply: usize,
) -> Result<Value, ControlError> {
    if expr.contains('\n') {
        return Err(ControlError::MultiLine);
    }
    let io = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    let exchange = async {
        let mut s = UnixStream::connect(path).await.map_err(io)?;
        let mut prompt = [0u8; 2];
        s.read_exact(&mut prompt).await.map_err(io)?;
        let mut request = Vec::with_capacity(expr.len() + 8);
        request.extend_from_slice(b"__json\n");
        request.extend_from_slice(expr.as_bytes());
        request.push(b'\n');
        s.write_all(&request).await.map_err(io)?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.map_err(io)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > max_reply {
            return Err(ControlError::Oversize {
                path: path.to_owned(),
                len,
            });
        }
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.map_err(io)?;
        Ok(match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(ControlError::Timeout {
            path: path.to_owned(),
            timeout,
        }),
    }
}

/// Evaluate `expr` in every worker of `ids`, concurrently. Failures are per worker.
pub async fn command_all(
    rundir: &Path,
    ids: &[WorkerId],
    expr: &str,
) -> Vec<(WorkerId, Result<Value, ControlError>)> {
    command_all_within(rundir, ids, expr, MAX_REPLY).await
}

/// [`command_all`], each reply at most `max_reply` bytes.
pub async fn command_all_within(
    rundir: &Path,
    ids: &[WorkerId],
    expr: &str,
    max_reply: usize,
) -> Vec<(WorkerId, Result<Value, ControlError>)> {
    let calls = ids.iter().map(|&id| {
        let path = id.control_socket(rundir);
        async move {
            let reply = command_within(&path, expr, COMMAND_TIMEOUT, max_reply).await;
            (id, reply)
        }
    });
    futures_util::future::join_all(calls).await
}
