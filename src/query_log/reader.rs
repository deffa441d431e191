//! The reading end of the workers' dnstap streams: the socket, bound before any worker
//! starts (kresd's dnstap module connects and shakes hands while its configuration loads,
//! and serves without the log when nobody answers), one task per worker's stream, and the
//! pairing of a query with its answer for the latency.
//!
//! A stream is read as fast as it comes, through a buffer; a stream that breaks the protocol
//! is closed (kresd reconnects on its own). Every frame that decodes is also offered to the
//! relay to the operator's own dnstap socket (`relay`), which never makes the reader wait.
//! The workers' answer counts, asked once per worker through its control socket, are the
//! baselines its missed entries are counted from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::dnstap::{self, Decoded, QueryKey};
use super::frames::{self, Frame, FrameError};
use super::{Entry, QueryLog, SOCKET_FILE};
use crate::service::WorkerId;

/// Streams read at once; more are closed at once (a worker has one).
const MAX_STREAMS: usize = 256;
/// How long a writer may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a stream is read at once: frames are read from this buffer, not with a read
/// of their own (two per frame, four per answer, unbuffered). Measured with
/// `bench/run.sh query_log`: the reader's CPU per 100,000 answers 415 ms unbuffered, 180 ms
/// buffered.
const READ_BUFFER: usize = 64 * 1024;
/// Queries waiting for their answers on one stream; past that the oldest are forgotten (their
/// answers come without a latency).
const MAX_PENDING: usize = 16_384;
/// The Lua a worker evaluates for its clients' requests, those its dnstap module logs: all
/// but the internal ones (priming, trust-anchor updates; `answer.total` counts those too).
/// It loads `stats` as the lazy metrics do.
pub const ANSWERED_EXPR: &str =
    "(function() if stats == nil then modules.load('stats') end return stats.get('request.total') - stats.get('request.internal') end)()";
/// How long a worker may take to tell its answer count.
const ANSWERED_TIMEOUT: Duration = Duration::from_secs(2);

/// Bind `<rundir>/query-log.sock`, replacing a file left by an earlier manager process.
pub fn bind(rundir: &Path) -> std::io::Result<UnixListener> {
    let path = rundir.join(SOCKET_FILE);
    super::remove_stale_socket(&path)?;
    UnixListener::bind(&path)
}

/// Read every worker's stream into `log` until `stop`.
pub async fn serve(
    listener: UnixListener,
    log: QueryLog,
    rundir: PathBuf,
    stop: CancellationToken,
) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("query log: accepting a stream: {e}");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_STREAMS {
            open.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        let (log, rundir, stop, open) = (log.clone(), rundir.clone(), stop.clone(), open.clone());
        tokio::spawn(async move {
            log.count_stream(1);
            tokio::select! {
                () = stop.cancelled() => {}
                result = read_stream(stream, &log, &rundir) => {
                    if let Err(e) = result {
                        tracing::debug!("query log: stream closed: {e}");
                    }
                }
            }
            log.count_stream(-1);
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// One worker's stream, from the handshake to its end.
async fn read_stream(stream: UnixStream, log: &QueryLog, rundir: &Path) -> Result<(), FrameError> {
    let mut stream = tokio::io::BufReader::with_capacity(READ_BUFFER, stream);
    tokio::time::timeout(HANDSHAKE_TIMEOUT, frames::accept(&mut stream))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let mut pairing = Pairing::default();
    let mut asked_baseline = std::collections::BTreeSet::new();
    loop {
        match frames::read_frame(&mut stream).await? {
            None => return Ok(()),
            Some(Frame::Control(c)) if c.kind == frames::ControlKind::Stop => {
                return frames::finish(&mut stream).await;
            }
            Some(Frame::Control(_)) => log.count_malformed(),
            Some(Frame::Data(data)) => match dnstap::decode(&data) {
                Ok(decoded) => {
                    log.relay().offer(&data, &decoded);
                    if let Some((key, entry)) = pairing.on(decoded) {
                        if let Some(w) = entry.worker {
                            if !log.has_baseline(w) && asked_baseline.insert(w) {
                                tokio::spawn(take_baseline(log.clone(), rundir.to_owned(), w));
                            }
                        }
                        log.arrive(key, entry, std::time::Instant::now());
                    }
                }
                Err(_) => log.count_malformed(),
            },
        }
    }
}

/// Ask worker `w` for its answer count and make it the baseline of its misses.
async fn take_baseline(log: QueryLog, rundir: PathBuf, w: u32) {
    if let Some(n) = answered(&rundir, w).await {
        log.set_baseline(w, n);
    }
}

/// Worker `w`'s own count of its answers, if it tells.
pub async fn answered(rundir: &Path, w: u32) -> Option<u64> {
    let path = WorkerId(w).control_socket(rundir);
    match crate::control::command(&path, ANSWERED_EXPR, ANSWERED_TIMEOUT).await {
        Ok(v) => v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)),
        Err(e) => {
            tracing::debug!("query log: answer count of kresd{w}: {e}");
            None
        }
    }
}

/// The queries of one stream waiting for their answers, by client, port and ID.
#[derive(Default)]
struct Pairing {
    pending: HashMap<QueryKey, Option<u64>>,
}

impl Pairing {
    /// A decoded frame in: an answer comes out as an entry (with its key), with its latency
    /// when its query's time is known.
    fn on(&mut self, decoded: Decoded) -> Option<(QueryKey, Entry)> {
        match decoded {
            Decoded::Query { key, time_us } => {
                if self.pending.len() >= MAX_PENDING {
                    self.pending.clear();
                }
                self.pending.insert(key, time_us);
                None
            }
            Decoded::Response(r) => {
                let query_time = r
                    .query_time_us
                    .or_else(|| self.pending.remove(&r.key).flatten());
                let latency_us = query_time.and_then(|q| r.time_us.checked_sub(q));
                let entry = Entry {
                    time_us: r.time_us,
                    client: r.key.client,
                    transport: r.transport,
                    name: r.name.into_boxed_str(),
                    qtype: r.qtype,
                    rcode: r.rcode,
                    latency_us,
                    answers: r.answers,
                    ede: r.ede,
                    worker: r.worker.as_deref().and_then(|w| w.parse().ok()),
                    cached: None,
                };
                Some((r.key, entry))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query_log::dnstap::{Response, Transport};

    fn key(id: u16) -> QueryKey {
        QueryKey {
            client: "127.0.0.2".parse().unwrap(),
            port: 4000,
            id,
        }
    }

    fn response(id: u16, time_us: u64) -> Decoded {
        Decoded::Response(Response {
            worker: Some("1".into()),
            key: key(id),
            transport: Transport::Tcp,
            time_us,
            query_time_us: None,
            name: "a.test.".into(),
            qtype: 1,
            rcode: 0,
            answers: 1,
            ede: None,
        })
    }

    #[test]
    fn answers_pair_with_their_queries() {
        let mut p = Pairing::default();
        assert_eq!(
            p.on(Decoded::Query {
                key: key(7),
                time_us: Some(1_000)
            }),
            None
        );
        let (k, e) = p.on(response(7, 3_500)).unwrap();
        assert_eq!(k, key(7));
        assert_eq!((e.latency_us, e.worker), (Some(2_500), Some(1)));
        // Unpaired: no latency; the query's time was used once.
        assert_eq!(p.on(response(7, 4_000)).unwrap().1.latency_us, None);
        assert!(p.pending.is_empty());
    }
}
