//! Passing kresd's dnstap stream on to the operator's own dnstap socket (upstream's
//! `logging.dnstap`) while the query log reads it: kresd has one dnstap stream, so with both
//! configured the workers write to the query log's socket and the manager process writes what
//! the operator asked for to theirs.
//!
//! The consumer is the operator's program and is trusted with nothing: the manager connects,
//! offers `protobuf:dnstap.Dnstap` (READY), needs its ACCEPT within [`HANDSHAKE_TIMEOUT`],
//! sends START, and then only writes. Frames wait in a [`Relay`] queue bounded in bytes
//! ([`MAX_QUEUED_BYTES`]); a frame that does not fit is dropped and counted, so a consumer that
//! never shakes hands, stops reading or is away slows nothing: not the workers (they never
//! wait for the query log's reader), not the reader (it never waits for the queue). A lost
//! connection is retried with a growing pause ([`RETRY_FIRST`] … [`RETRY_MAX`]); the frames
//! queued meanwhile go to the next consumer.
//!
//! What is passed on follows upstream's options, as the dnstap convention reads them: client
//! queries only with `log-queries`, answers only with `log-responses` (kresd itself sends a
//! query frame without its message when `log-queries` is off, upstream #150; here such a
//! frame is never sent), never an empty frame, and without the identity the query log's
//! configuration gives kresd (upstream's sets none).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::UnixStream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::dnstap::{self, Decoded};
use super::frames::{self, FrameError};
use crate::wire::query_log::RelayStatus;

/// Bytes of frames waiting for the consumer at most; more are dropped.
pub const MAX_QUEUED_BYTES: usize = 2 * 1024 * 1024;
/// How long the consumer may take to accept the stream.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the consumer may take to answer our STOP when the relay ends.
const FINISH_TIMEOUT: Duration = Duration::from_secs(1);
/// The first pause before connecting again.
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest pause before connecting again.
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Frames taken from the queue at once, written before the next flush.
const BATCH: usize = 256;

/// Where kresd's stream goes on to, and which of its frames (upstream's `logging.dnstap`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The operator's socket (relative paths from the rundir, as kresd reads them).
    pub socket: PathBuf,
    /// Pass client queries on (`log-queries`).
    pub queries: bool,
    /// Pass answers on (`log-responses`).
    pub responses: bool,
}

impl Target {
    /// Whether a decoded frame is one the operator asked for.
    fn wants(&self, decoded: &Decoded) -> bool {
        match decoded {
            Decoded::Query { .. } => self.queries,
            Decoded::Response(_) => self.responses,
        }
    }
}

/// The queue between the query log's reader and the consumer's connection, and its counts: a
/// cheap handle.
#[derive(Clone, Default)]
pub struct Relay {
    /// The queue and its counts.
    shared: Arc<Shared>,
}

/// What the handle shares.
#[derive(Default)]
struct Shared {
    /// Everything, under one short-held lock.
    state: Mutex<State>,
    /// Rung when a frame is queued.
    queued: Notify,
}

/// What the lock guards.
#[derive(Default)]
struct State {
    /// Where frames go now; `None`: nowhere, nothing is queued.
    target: Option<Target>,
    /// Frames waiting, oldest first, as sent (without the Frame Streams length).
    frames: VecDeque<Vec<u8>>,
    /// Their bytes.
    bytes: usize,
    /// Whether a consumer accepted the stream and it is open now.
    connected: bool,
    /// Frames written since this manager process started.
    relayed: u64,
    /// Frames dropped: the queue was full.
    dropped: u64,
    /// Connections that completed the handshake.
    connections: u64,
    /// Why the last connection failed or ended.
    last_error: Option<String>,
}

impl Relay {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every step under the lock leaves the state consistent: a poisoned lock is taken as
        // it is.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Set where frames go; a new target starts with an empty queue (the counts stay).
    pub fn retarget(&self, target: Option<Target>) {
        let mut state = self.state();
        if state.target != target {
            state.target = target;
            state.frames.clear();
            state.bytes = 0;
            state.connected = false;
            state.last_error = None;
        }
    }

    /// A frame the reader decoded: queued when the operator asks for its kind and it fits,
    /// else dropped (counted when it was wanted). Never waits.
    pub fn offer(&self, frame: &[u8], decoded: &Decoded) {
        let mut state = self.state();
        if !state.target.as_ref().is_some_and(|t| t.wants(decoded)) {
            return;
        }
        let Some(frame) = dnstap::without_identity(frame).filter(|f| !f.is_empty()) else {
            return;
        };
        if state.bytes + frame.len() > MAX_QUEUED_BYTES {
            state.dropped += 1;
            return;
        }
        state.bytes += frame.len();
        state.frames.push_back(frame);
        drop(state);
        self.shared.queued.notify_one();
    }

    /// Up to [`BATCH`] frames, oldest first.
    fn take(&self) -> Vec<Vec<u8>> {
        let mut state = self.state();
        let n = state.frames.len().min(BATCH);
        let batch: Vec<Vec<u8>> = state.frames.drain(..n).collect();
        state.bytes -= batch.iter().map(Vec::len).sum::<usize>();
        batch
    }

    /// The relay's state, when there is a target.
    pub fn status(&self) -> Option<RelayStatus> {
        let state = self.state();
        let target = state.target.as_ref()?;
        Some(RelayStatus {
            socket: target.socket.display().to_string(),
            connected: state.connected,
            relayed: state.relayed,
            dropped: state.dropped,
            queued: state.frames.len() as u64,
            connections: state.connections,
            last_error: state.last_error.clone(),
        })
    }

    fn set_connected(&self, connected: bool) {
        let mut state = self.state();
        state.connected = connected;
        if connected {
            state.connections += 1;
        }
    }

    fn set_error(&self, e: &FrameError) {
        self.state().last_error = Some(e.to_string());
    }

    fn count_relayed(&self, n: usize) {
        self.state().relayed += n as u64;
    }
}

/// Pass the queue on to `target` until `stop`: connect, shake hands, write; again after a
/// pause when the consumer is away, refuses or breaks the stream.
pub async fn run(relay: Relay, target: Target, stop: CancellationToken) {
    let mut pause = RETRY_FIRST;
    loop {
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            connected = connect(&target.socket) => connected,
        };
        match outcome {
            Ok(stream) => {
                relay.set_connected(true);
                pause = RETRY_FIRST;
                let ended = stream_to(&relay, stream, &stop).await;
                relay.set_connected(false);
                match ended {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::debug!("dnstap relay to {}: {e}", target.socket.display());
                        relay.set_error(&e);
                    }
                }
            }
            Err(e) => {
                tracing::debug!("dnstap relay to {}: {e}", target.socket.display());
                relay.set_error(&e);
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// A connection to the consumer, its handshake done.
async fn connect(socket: &std::path::Path) -> Result<UnixStream, FrameError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let mut stream = UnixStream::connect(socket).await?;
        frames::offer(&mut stream).await?;
        Ok(stream)
    })
    .await
    .map_err(|_| {
        FrameError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the consumer did not accept the stream in time",
        ))
    })?
}

/// Write queued frames to an accepted stream until it breaks (an error) or `stop` (STOP sent,
/// the consumer's FINISH waited for briefly: `Ok`).
async fn stream_to(
    relay: &Relay,
    stream: UnixStream,
    stop: &CancellationToken,
) -> Result<(), FrameError> {
    let mut out = BufWriter::new(stream);
    loop {
        let batch = relay.take();
        if batch.is_empty() {
            // A consumer that stops reading holds the flush: the stop must end it too.
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                flushed = out.flush() => flushed?,
            }
            tokio::select! {
                () = stop.cancelled() => {
                    let mut stream = out.into_inner();
                    let _ = tokio::time::timeout(FINISH_TIMEOUT, frames::stop(&mut stream)).await;
                    return Ok(());
                }
                () = relay.shared.queued.notified() => continue,
            }
        }
        let n = batch.len();
        let written = async {
            for frame in &batch {
                out.write_all(&(frame.len() as u32).to_be_bytes()).await?;
                out.write_all(frame).await?;
            }
            Ok::<(), std::io::Error>(())
        };
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            written = written => written?,
        }
        relay.count_relayed(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query_log::dnstap::QueryKey;

    fn query() -> Decoded {
        Decoded::Query {
            key: QueryKey {
                client: "127.0.0.2".parse().unwrap(),
                port: 1,
                id: 1,
            },
            time_us: None,
        }
    }

    fn target(queries: bool) -> Target {
        Target {
            socket: "/nowhere".into(),
            queries,
            responses: true,
        }
    }

    /// A dnstap envelope: identity (field 1) "7", type (field 15) 1.
    const FRAME: &[u8] = &[0x0a, 1, b'7', 0x78, 1];

    #[test]
    fn only_wanted_frames_are_queued_and_the_queue_is_bounded() {
        let relay = Relay::default();
        relay.offer(FRAME, &query());
        assert_eq!(relay.status(), None, "no target, nothing kept");
        relay.retarget(Some(target(false)));
        relay.offer(FRAME, &query());
        assert_eq!(relay.status().unwrap().queued, 0, "queries not asked for");
        relay.retarget(Some(target(true)));
        relay.offer(FRAME, &query());
        assert_eq!(relay.take(), vec![vec![0x78, 1]], "without the identity");
        let big = [0x78, 1].repeat(MAX_QUEUED_BYTES / 4 + 1);
        relay.offer(&big, &query());
        relay.offer(&big, &query());
        let status = relay.status().unwrap();
        assert_eq!((status.queued, status.dropped), (1, 1));
        relay.retarget(None);
        assert_eq!(relay.status(), None);
    }

    #[tokio::test]
    async fn a_consumer_that_stops_reading_costs_frames_never_a_wait() {
        let socket =
            std::env::temp_dir().join(format!("kres-relay-stall-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let relay = Relay::default();
        let target = Target {
            socket: socket.clone(),
            queries: true,
            responses: true,
        };
        relay.retarget(Some(target.clone()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(relay.clone(), target, stop.clone()));
        // It accepts the stream, then reads nothing more.
        let (mut stream, _) = listener.accept().await.unwrap();
        frames::accept(&mut stream).await.unwrap();
        let frame = [0x78, 1].repeat(512);
        let mut offered = 0u64;
        // Until the socket's buffers and the relay's queue are full: each offer returns at
        // once, so this loop ends (a relay that waited for the consumer would hang it).
        while relay.status().unwrap().dropped == 0 {
            relay.offer(&frame, &query());
            offered += 1;
            tokio::task::yield_now().await;
        }
        let status = relay.status().unwrap();
        assert!(status.connected, "{status:?}");
        assert!(status.queued > 0 && status.relayed < offered, "{status:?}");
        stop.cancel();
        task.await.unwrap();
        drop(stream);
        let _ = std::fs::remove_file(&socket);
    }

    #[tokio::test]
    async fn frames_reach_a_consumer_that_accepts() {
        let socket = std::env::temp_dir().join(format!("kres-relay-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let relay = Relay::default();
        relay.retarget(Some(Target {
            socket: socket.clone(),
            queries: true,
            responses: true,
        }));
        relay.offer(FRAME, &query());
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            relay.clone(),
            relay.state().target.clone().unwrap(),
            stop.clone(),
        ));
        let (mut stream, _) = listener.accept().await.unwrap();
        frames::accept(&mut stream).await.unwrap();
        assert_eq!(
            frames::read_frame(&mut stream).await.unwrap(),
            Some(frames::Frame::Data(vec![0x78, 1]))
        );
        stop.cancel();
        assert!(matches!(
            frames::read_frame(&mut stream).await.unwrap(),
            Some(frames::Frame::Control(c)) if c.kind == frames::ControlKind::Stop
        ));
        frames::finish(&mut stream).await.unwrap();
        task.await.unwrap();
        let status = relay.status().unwrap();
        assert_eq!((status.relayed, status.connections), (1, 1));
        assert!(!status.connected);
        let _ = std::fs::remove_file(&socket);
    }
}
