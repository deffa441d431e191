//! The reading end of the workers' dnstap streams: the socket, bound before any worker
//! starts (kresd's dnstap module connects and shakes hands while its configuration loads,
//! and serves without the log when nobody answers), one task per worker's stream, and the
//! pairing of a query with its answer for the latency.
//!
//! A connection is refused at once unless its peer (`SO_PEERCRED`) runs as the workers'
//! user, root or ours ([`Access`]), and when as many streams are open as the configuration
//! has workers and a small margin ([`Admission`]). A stream is one worker's: the first
//! answer's identity is its worker for the stream's life, and frames claiming another are
//! refused (counted); the worker's tally is freed when its stream closes.
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

use super::access::Access;
use super::dnstap::{self, Decoded, QueryKey};
use super::frames::{self, Frame, FrameError};
use super::{Entry, QueryLog, SOCKET_FILE};
use crate::service::WorkerId;

/// Who may open a stream, and how many at once.
#[derive(Clone)]
pub struct Admission {
    /// The uids let in.
    pub access: Access,
    /// Streams read at once (the configured workers and a margin); more are closed at once.
    pub limit: Arc<AtomicUsize>,
}
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

/// Bind `<rundir>/query-log.sock` with `access` (replacing a socket or a link left by an
/// earlier manager process; `crate::api::server::bind_unix`'s way).
pub fn bind(rundir: &Path, access: &Access) -> std::io::Result<UnixListener> {
    let listener =
        supervisor::os::bind_unix_private(&rundir.join(SOCKET_FILE), access.file(), |p| {
            std::os::unix::net::UnixListener::bind(p)
        })?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

/// Read every admitted worker's stream into `log` until `stop`.
pub async fn serve(
    listener: UnixListener,
    log: QueryLog,
    rundir: PathBuf,
    admission: Admission,
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
        // The kernel's credentials of the peer, as the API's accept loop reads them (its
        // `unix_peer` is in a layer above this one and asks for the groups too).
        let peer = stream.peer_cred();
        if !peer
            .as_ref()
            .is_ok_and(|cred| admission.access.admits(cred.uid()))
        {
            drop(stream);
            let who = match peer {
                Ok(cred) => format!("uid {} pid {:?}", cred.uid(), cred.pid()),
                Err(e) => format!("a peer of unknown credentials ({e})"),
            };
            log.refuse_peer("a stream", &who);
            continue;
        }
        if open.fetch_add(1, Ordering::Relaxed) >= admission.limit.load(Ordering::Relaxed) {
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
    let mut worker = StreamWorker::new(log);
    loop {
        match frames::read_frame(&mut stream).await? {
            None => return Ok(()),
            Some(Frame::Control(c)) if c.kind == frames::ControlKind::Stop => {
                return frames::finish(&mut stream).await;
            }
            Some(Frame::Control(_)) => log.count_malformed(),
            Some(Frame::Data(data)) => match dnstap::decode(&data) {
                Ok(decoded) => {
                    if let Decoded::Response(r) = &decoded {
                        match worker.claim(r.worker.as_deref()) {
                            Claim::Refused => continue,
                            Claim::First(Some(w)) => {
                                tokio::spawn(take_baseline(log.clone(), rundir.to_owned(), w));
                            }
                            Claim::First(None) | Claim::Same => {}
                        }
                    }
                    log.relay().offer(&data, &decoded);
                    if let Some((key, entry)) = pairing.on(decoded) {
                        log.arrive(key, entry, std::time::Instant::now());
                    }
                }
                Err(_) => log.count_malformed(),
            },
        }
    }
}

/// What a frame's identity is to its stream.
#[derive(Debug, PartialEq)]
enum Claim {
    /// The stream's first answer: its worker from now on (the number, when it is one).
    First(Option<u32>),
    /// The stream's worker again.
    Same,
    /// Another worker: the frame is refused.
    Refused,
}

/// The worker a stream is, fixed by its first answer's identity; its tally in the log is
/// kept while the stream lives (freed on drop, however the stream ends).
struct StreamWorker<'a> {
    /// Where the worker's tally is kept.
    log: &'a QueryLog,
    /// The first answer's identity, once it came.
    identity: Option<Option<Box<str>>>,
}

impl<'a> StreamWorker<'a> {
    fn new(log: &'a QueryLog) -> StreamWorker<'a> {
        StreamWorker {
            log,
            identity: None,
        }
    }

    /// An answer claims to be `identity`'s.
    fn claim(&mut self, identity: Option<&str>) -> Claim {
        match &self.identity {
            None => {
                self.identity = Some(identity.map(Box::from));
                let w = worker_number(identity);
                if let Some(w) = w {
                    self.log.open_worker(w);
                }
                Claim::First(w)
            }
            Some(fixed) if fixed.as_deref() == identity => Claim::Same,
            Some(fixed) => {
                self.log
                    .refuse_frame(fixed.as_deref().unwrap_or(""), identity.unwrap_or(""));
                Claim::Refused
            }
        }
    }
}

impl Drop for StreamWorker<'_> {
    fn drop(&mut self) {
        if let Some(w) = self
            .identity
            .as_ref()
            .and_then(|i| worker_number(i.as_deref()))
        {
            self.log.close_worker(w);
        }
    }
}

/// The worker number an identity names, when it is one.
fn worker_number(identity: Option<&str>) -> Option<u32> {
    identity.and_then(|w| w.parse().ok())
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
                    worker: worker_number(r.worker.as_deref()),
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

    #[test]
    fn a_stream_is_the_worker_its_first_answer_names() {
        let log = QueryLog::default();
        // (identity claimed, what it is to the stream, tallies)
        let rows: [(Option<&str>, Claim, usize); 5] = [
            (Some("1"), Claim::First(Some(1)), 1),
            (Some("1"), Claim::Same, 1),
            (Some("2"), Claim::Refused, 1),
            (None, Claim::Refused, 1),
            (Some("1"), Claim::Same, 1),
        ];
        {
            let mut worker = StreamWorker::new(&log);
            for (identity, claim, tallies) in rows {
                assert_eq!(worker.claim(identity), claim, "{identity:?}");
                assert_eq!(log.workers_tallied(), tallies, "{identity:?}");
            }
        }
        assert_eq!(log.workers_tallied(), 0, "freed with the stream");
        assert_eq!(log.status(&Default::default()).refused_frames, 2);
        // A stream whose first answer names no worker: only unnamed answers pass.
        let mut unnamed = StreamWorker::new(&log);
        assert_eq!(unnamed.claim(None), Claim::First(None));
        assert_eq!(unnamed.claim(Some("0")), Claim::Refused);
        assert_eq!(log.workers_tallied(), 0);
    }

    /// A reader in a fresh directory, admitting `access`, at most `limit` streams.
    fn reading(name: &str, access: Access, limit: usize) -> (QueryLog, PathBuf, CancellationToken) {
        let dir = std::env::temp_dir().join(format!("kres-reader-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log = QueryLog::default();
        let listener = bind(&dir, &access).expect("bind");
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            log.clone(),
            dir.clone(),
            Admission {
                access,
                limit: Arc::new(AtomicUsize::new(limit)),
            },
            stop.clone(),
        ));
        (log, dir, stop)
    }

    /// Whether the reader closed `stream` (it reads the end of the stream).
    async fn closed(stream: &mut UnixStream) -> bool {
        use tokio::io::AsyncReadExt;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await;
        matches!(read, Ok(Ok(0)))
    }

    #[tokio::test]
    async fn a_peer_of_another_uid_is_refused_at_once() {
        let us = nix::unistd::geteuid().as_raw();
        let (log, dir, stop) = reading("refused", Access::admitting(&[us + 1]), 4);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join(SOCKET_FILE))
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        for _ in 0..3 {
            let mut stream = UnixStream::connect(dir.join(SOCKET_FILE))
                .await
                .expect("connect");
            assert!(
                closed(&mut stream).await,
                "a refused peer's stream is closed"
            );
        }
        let status = log.status(&Default::default());
        assert_eq!((status.refused_peers, status.streams), (3, 0));
        stop.cancel();
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn streams_beyond_the_limit_are_closed_at_once() {
        let (log, dir, stop) = reading("limit", Access::for_workers(None), 1);
        let _first = UnixStream::connect(dir.join(SOCKET_FILE))
            .await
            .expect("connect");
        let opened = tokio::time::timeout(Duration::from_secs(5), async {
            while log.status(&Default::default()).streams < 1 {
                tokio::task::yield_now().await;
            }
        });
        assert!(opened.await.is_ok(), "the first stream is read");
        let mut second = UnixStream::connect(dir.join(SOCKET_FILE))
            .await
            .expect("connect");
        assert!(closed(&mut second).await, "the second stream is closed");
        assert_eq!(log.status(&Default::default()).refused_peers, 0);
        stop.cancel();
        std::fs::remove_dir_all(&dir).ok();
    }
}
