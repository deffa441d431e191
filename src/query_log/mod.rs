//! The query log: the answers kresd's workers send through their dnstap module, kept by the
//! manager process in a ring for `kresctl querylog` and `kresctl top`.
//!
//! The workers connect to `<rundir>/query-log.sock` ([`SOCKET_FILE`]), which the manager
//! process binds, for the workers' user only, before any worker starts with the log on, and
//! removes when it is turned off (`intake`). What they send is untrusted: peers are checked
//! (`intake`), each stream is one worker's (`reader`), frames are bounded (`frames`), decoded
//! (`dnstap`) and reduced to an [`Entry`] each; nothing of it reaches the root. kresd's side never waits for us: its dnstap module hands frames to
//! libfstrm's queue, written by a thread of its own, and drops what does not fit when the
//! reader lags; the answers it drops are counted here from the workers' own answer counts
//! (`QueryLogStatus::missed`).
//!
//! `select` answers the readers (filters, top lists); the ring and the live followers are in
//! [`QueryLog`], a cheap handle the reader and the API share. The ring is bounded three ways,
//! by the configuration: in entries, in bytes (each entry's heap estimated from its name,
//! [`Entry::footprint`]) and in age (entries older than `max-age` are dropped on every push
//! and read, and by the marks' task every 50 ms). Turning the log off empties it and ends the
//! followers' streams; a narrower client prefix applies to the entries already held.
//!
//! Two more inputs and one output: `marks` reads the workers' cache marks from
//! `<rundir>/query-log-marks.sock` (each datagram with its sender's credentials, `access`
//! deciding who may write) and joins them to the answers by client, port and message ID (an
//! answer waits at most 250 ms, both sides bounded); `relay` passes kresd's frames on to the
//! operator's `logging.dnstap` socket as a Frame Streams writer, through a byte-bounded queue,
//! never waiting for the consumer.

pub mod access;
pub mod dnstap;
pub mod frames;
pub mod intake;
pub mod marks;
pub mod reader;
pub mod relay;
pub mod select;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::config::{DnstapSchema, QueryLogSchema};
use crate::wire::query_log::{LoggedAnswer, QueryLogStatus};
use dnstap::Transport;

/// The socket in the rundir the workers' dnstap module writes to.
pub const SOCKET_FILE: &str = "query-log.sock";

/// Answers a live follower may fall behind by before it misses some.
const LIVE_BACKLOG: usize = 4096;

/// How often refused peers and frames are told in the log at most.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(60);

/// The bytes glibc's malloc takes for a request of `n` bytes: 8 of header, rounded up to 16,
/// at least 32.
const fn malloc_chunk(n: usize) -> usize {
    let chunk = (n + 8 + 15) & !15;
    if chunk < 32 {
        32
    } else {
        chunk
    }
}

/// One answer kept: about 100 bytes and its name.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// When it was sent, microseconds since the epoch (kresd's clock).
    pub time_us: u64,
    /// The client, cut to the configured prefix.
    pub client: IpAddr,
    /// How the client asked.
    pub transport: Transport,
    /// The question's name, lowercase and absolute.
    pub name: Box<str>,
    /// The question's type.
    pub qtype: u16,
    /// The answer's (extended) rcode.
    pub rcode: u16,
    /// From the query's arrival to the answer, when both times are known.
    pub latency_us: Option<u64>,
    /// Records in the answer section.
    pub answers: u16,
    /// The Extended DNS Error's info code.
    pub ede: Option<u16>,
    /// The worker's number, when it said.
    pub worker: Option<u32>,
    /// Whether the answer came from the cache, when its mark came (`marks`).
    pub cached: Option<bool>,
}

impl Entry {
    /// The bytes an entry with a name of `name_len` bytes takes in the ring: its slot in the
    /// ring, its shared allocation (two counters and the entry) and its name's, each as
    /// malloc rounds it. An estimate, never below the truth for the ring itself; the live
    /// followers' queue and the lists made for a request come on top.
    pub fn footprint(name_len: usize) -> usize {
        std::mem::size_of::<Held>()
            + malloc_chunk(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Entry>())
            + if name_len == 0 {
                0
            } else {
                malloc_chunk(name_len)
            }
    }

    /// As the API shows it.
    pub fn to_wire(&self) -> LoggedAnswer {
        LoggedAnswer {
            time: self.time_us as f64 / 1e6,
            client: self.client.to_string(),
            transport: self.transport.as_str().to_owned(),
            name: self.name.to_string(),
            qtype: dnstap::qtype_name(self.qtype),
            rcode: select::rcode_name(self.rcode),
            latency_ms: self.latency_us.map(|us| us as f64 / 1e3),
            answers: self.answers,
            ede: self.ede,
            worker: self.worker.map(|w| crate::service::WorkerId(w).name()),
            cached: self.cached,
        }
    }
}

/// The query log: the ring, its settings, its tallies and the live followers.
#[derive(Clone)]
pub struct QueryLog {
    /// The ring and its tallies.
    shared: Arc<Shared>,
    /// The frames passed on to the operator's own dnstap socket.
    relay: relay::Relay,
}

/// The state behind the handle.
struct Shared {
    /// Everything, under one short-held lock.
    ring: Mutex<Ring>,
    /// Answers and cache marks waiting for each other (taken before `ring`, never inside).
    join: Mutex<marks::Join>,
}

/// What the lock guards.
struct Ring {
    /// The newest answers, oldest first.
    entries: VecDeque<Held>,
    /// The sum of the entries' footprints.
    bytes: usize,
    /// What the configuration sets.
    settings: Settings,
    /// What was received and missed.
    tally: Tally,
    /// Whether answers from the workers' streams and marks are kept: while the sockets are
    /// bound (`intake`), never once the log was turned off.
    accepting: bool,
    /// New entries, for the live followers; replaced (their streams end) when the log is
    /// turned off.
    live: broadcast::Sender<Arc<Entry>>,
}

/// An answer in the ring.
struct Held {
    /// The answer, shared with the live followers.
    entry: Arc<Entry>,
    /// When it was kept (our clock, so that a worker's clock cannot keep it longer).
    kept: Instant,
    /// Its [`Entry::footprint`].
    bytes: usize,
}

impl Ring {
    /// Drop what the settings no longer allow at `now`: entries older than `max_age`, then
    /// the oldest until the count and the bytes fit.
    fn prune(&mut self, now: Instant) {
        let Settings {
            capacity,
            max_age,
            max_memory,
            ..
        } = self.settings;
        while let Some(oldest) = self.entries.front() {
            let expired = now.saturating_duration_since(oldest.kept) >= max_age;
            if !expired && self.entries.len() <= capacity && self.bytes <= max_memory {
                break;
            }
            self.bytes -= oldest.bytes;
            self.entries.pop_front();
        }
        // The room a larger ring or a burst took is given back.
        let kept = self.entries.len().max(1024);
        if self.entries.capacity() > kept * 2 {
            self.entries.shrink_to(kept);
        }
    }

    /// Whether a refusal is told in the log now (at most once a [`REFUSAL_LOG_PERIOD`]).
    fn should_tell_refusal(&mut self, now: Instant) -> bool {
        let told = self.tally.refusal_told;
        if told.is_some_and(|t| now.saturating_duration_since(t) < REFUSAL_LOG_PERIOD) {
            return false;
        }
        self.tally.refusal_told = Some(now);
        true
    }
}

/// What the configuration sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Whether the workers are told to send their answers.
    pub enabled: bool,
    /// The ring's size.
    pub capacity: usize,
    /// How long an entry is kept at most.
    pub max_age: Duration,
    /// The bytes the ring's entries may take at most ([`Entry::footprint`]).
    pub max_memory: usize,
    /// Leading bits kept of an IPv4 client's address.
    pub ipv4_prefix: u8,
    /// Leading bits kept of an IPv6 client's address.
    pub ipv6_prefix: u8,
    /// Where kresd's stream goes on to: the operator's own dnstap socket (upstream's
    /// `logging.dnstap`), while the query log is on.
    pub relay: Option<relay::Target>,
}

impl Settings {
    /// The settings of a configuration (`rundir`: where a relative socket path starts).
    pub fn of(schema: &QueryLogSchema, dnstap: &DnstapSchema, rundir: &Path) -> Settings {
        let relay = match &dnstap.unix_socket {
            Some(socket) if schema.enabled && dnstap.enable => Some(relay::Target {
                socket: rundir.join(socket),
                queries: dnstap.log_queries,
                responses: dnstap.log_responses,
            }),
            _ => None,
        };
        Settings {
            enabled: schema.enabled,
            capacity: schema.entries as usize,
            max_age: schema.max_age.duration(),
            max_memory: usize::try_from(schema.max_memory.bytes()).unwrap_or(usize::MAX),
            ipv4_prefix: schema.ipv4_prefix,
            ipv6_prefix: schema.ipv6_prefix,
            relay,
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            enabled: false,
            capacity: 10_000,
            max_age: Duration::from_secs(24 * 3600),
            max_memory: 64 << 20,
            ipv4_prefix: 32,
            ipv6_prefix: 128,
            relay: None,
        }
    }
}

/// Counts since this manager process started.
#[derive(Debug, Default)]
struct Tally {
    /// Answers kept.
    received: u64,
    /// Frames not read.
    malformed: u64,
    /// Connections and datagrams refused for their sender's uid.
    refused_peers: u64,
    /// Frames refused for claiming another worker than their stream's.
    refused_frames: u64,
    /// When a refusal was last told in the log.
    refusal_told: Option<Instant>,
    /// Workers' streams open now.
    streams: u64,
    /// Why no stream can come (the socket could not be bound), if so.
    inactive_reason: Option<String>,
    /// Answers live followers fell behind by.
    followers_lagged: u64,
    /// Per worker whose stream is open: answers received, and the baseline its misses count
    /// from (as many as streams are open at most: freed when the worker's last one closes).
    workers: BTreeMap<u32, WorkerTally>,
}

/// One worker's answers, received and counted by the worker itself.
#[derive(Debug, Default, Clone, Copy)]
struct WorkerTally {
    /// Its streams open now.
    streams: u32,
    /// Answers of this worker kept.
    received: u64,
    /// (the worker's answer count, answers received) when the baseline was taken.
    baseline: Option<(u64, u64)>,
}

impl Default for QueryLog {
    fn default() -> QueryLog {
        QueryLog::new(Settings::default())
    }
}

impl QueryLog {
    pub fn new(settings: Settings) -> QueryLog {
        let (live, _) = broadcast::channel(LIVE_BACKLOG);
        let relay = relay::Relay::default();
        relay.retarget(settings.relay.clone());
        QueryLog {
            shared: Arc::new(Shared {
                ring: Mutex::new(Ring {
                    entries: VecDeque::new(),
                    bytes: 0,
                    settings,
                    tally: Tally::default(),
                    accepting: false,
                    live,
                }),
                join: Mutex::new(marks::Join::default()),
            }),
            relay,
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        // A panic while holding the lock leaves a consistent ring (every step is one push or
        // pop), so a poisoned lock is taken as it is.
        self.shared
            .ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Apply a configuration's settings: a smaller ring (in entries, bytes or age) drops its
    /// oldest entries; the client prefixes apply to the entries held; another relay target
    /// starts with an empty queue. Turned off, the log forgets every answer, held or waiting
    /// for its mark, and its followers' streams end.
    pub fn configure(&self, settings: Settings) {
        self.configure_at(settings, Instant::now());
    }

    fn configure_at(&self, settings: Settings, now: Instant) {
        self.relay.retarget(settings.relay.clone());
        let enabled = settings.enabled;
        if !enabled {
            self.join().clear();
        }
        let mut ring = self.ring();
        ring.settings = settings;
        if !enabled {
            ring.accepting = false;
            ring.entries = VecDeque::new();
            ring.bytes = 0;
            ring.live = broadcast::channel(LIVE_BACKLOG).0;
            return;
        }
        let (v4, v6) = (ring.settings.ipv4_prefix, ring.settings.ipv6_prefix);
        for held in &mut ring.entries {
            let prefix = if held.entry.client.is_ipv4() { v4 } else { v6 };
            let masked = select::mask(held.entry.client, prefix);
            if masked != held.entry.client {
                let mut entry = (*held.entry).clone();
                entry.client = masked;
                held.entry = Arc::new(entry);
            }
        }
        ring.prune(now);
    }

    fn join(&self) -> MutexGuard<'_, marks::Join> {
        // Every step of the join leaves it consistent, as the ring's.
        self.shared
            .join
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether answers from the workers are kept (`intake`: while the sockets are bound).
    pub fn set_accepting(&self, accepting: bool) {
        self.ring().accepting = accepting;
    }

    /// An answer from a worker's stream (`key`: its client, port and ID): kept now, or once
    /// its cache mark comes (at most [`marks::ANSWER_WAIT`] later); dropped unless
    /// accepting.
    pub fn arrive(&self, key: dnstap::QueryKey, entry: Entry, now: std::time::Instant) {
        if !self.ring().accepting {
            return;
        }
        let out = self.join().on_answer(key, entry, now);
        if let Some(entry) = out {
            self.keep(entry, now);
        }
    }

    /// Cache marks from a worker: the answers that waited for them are kept.
    pub fn on_marks(
        &self,
        marks: impl Iterator<Item = (dnstap::QueryKey, bool)>,
        now: std::time::Instant,
    ) {
        let out: Vec<Entry> = {
            let mut join = self.join();
            marks
                .filter_map(|(key, cached)| join.on_mark(key, cached, now))
                .collect()
        };
        for entry in out {
            self.keep(entry, now);
        }
    }

    /// The answers that waited long enough for their marks are kept, their cache use
    /// unknown; the entries past their age are dropped.
    pub fn expire_waiting(&self, now: std::time::Instant) {
        let out = self.join().expire(now);
        for entry in out {
            self.keep(entry, now);
        }
        self.ring().prune(now);
    }

    /// An answer from the workers, kept unless the log stopped accepting meanwhile.
    fn keep(&self, entry: Entry, now: Instant) {
        self.push_if(entry, now, |ring| ring.accepting);
    }

    /// Keep an answer (its client cut to the configured prefix) and tell the followers.
    pub fn push(&self, entry: Entry) {
        self.push_if(entry, Instant::now(), |_| true);
    }

    /// Keep an answer at `now` when `kept` says so of the ring.
    fn push_if(&self, mut entry: Entry, now: Instant, kept: impl FnOnce(&Ring) -> bool) {
        let mut ring = self.ring();
        if !kept(&ring) {
            return;
        }
        let settings = &ring.settings;
        let prefix = if entry.client.is_ipv4() {
            settings.ipv4_prefix
        } else {
            settings.ipv6_prefix
        };
        entry.client = select::mask(entry.client, prefix);
        ring.tally.received += 1;
        if let Some(tally) = entry.worker.and_then(|w| ring.tally.workers.get_mut(&w)) {
            tally.received += 1;
        }
        let bytes = Entry::footprint(entry.name.len());
        let entry = Arc::new(entry);
        ring.entries.push_back(Held {
            entry: entry.clone(),
            kept: now,
            bytes,
        });
        ring.bytes += bytes;
        ring.prune(now);
        if ring.live.receiver_count() > 0 {
            let _ = ring.live.send(entry);
        }
    }

    /// The queue to the operator's own dnstap socket.
    pub fn relay(&self) -> &relay::Relay {
        &self.relay
    }

    /// No stream can come, and why (the reader's socket could not be bound).
    pub fn set_inactive(&self, reason: String) {
        self.ring().tally.inactive_reason = Some(reason);
    }

    /// Streams can come again (the socket is bound).
    pub fn clear_inactive(&self) {
        self.ring().tally.inactive_reason = None;
    }

    /// A connection or datagram from `peer` (a uid the workers do not run as) was refused:
    /// counted, and told in the log at most once a minute.
    pub fn refuse_peer(&self, what: &str, peer: &dyn std::fmt::Display) {
        let mut ring = self.ring();
        ring.tally.refused_peers += 1;
        if ring.should_tell_refusal(Instant::now()) {
            tracing::warn!(
                "query log: refused {what} from {peer}, not the workers' user ({} refused so far; told at most once a minute)",
                ring.tally.refused_peers
            );
        }
    }

    /// A frame claiming another worker than its stream's was refused: counted, and told in
    /// the log at most once a minute.
    pub fn refuse_frame(&self, stream: &str, claimed: &str) {
        let mut ring = self.ring();
        ring.tally.refused_frames += 1;
        if ring.should_tell_refusal(Instant::now()) {
            tracing::warn!(
                "query log: refused a frame of the stream of worker {stream:?} claiming worker {claimed:?} ({} refused so far; told at most once a minute)",
                ring.tally.refused_frames
            );
        }
    }

    /// A frame that was not read.
    pub fn count_malformed(&self) {
        self.ring().tally.malformed += 1;
    }

    /// A worker's stream opened (`1`) or closed (`-1`).
    fn count_stream(&self, delta: i64) {
        let mut ring = self.ring();
        ring.tally.streams = ring.tally.streams.saturating_add_signed(delta);
    }

    /// Followers lagged behind by `n` answers.
    pub fn count_lagged(&self, n: u64) {
        self.ring().tally.followers_lagged += n;
    }

    /// A stream of worker `w` opened: its tally is kept while one is open.
    pub fn open_worker(&self, w: u32) {
        self.ring().tally.workers.entry(w).or_default().streams += 1;
    }

    /// A stream of worker `w` closed: its tally is freed with its last stream.
    pub fn close_worker(&self, w: u32) {
        let mut ring = self.ring();
        if let Some(tally) = ring.tally.workers.get_mut(&w) {
            tally.streams = tally.streams.saturating_sub(1);
            if tally.streams == 0 {
                ring.tally.workers.remove(&w);
            }
        }
    }

    /// Workers with a tally now (as many as workers' streams are open at most).
    pub fn workers_tallied(&self) -> usize {
        self.ring().tally.workers.len()
    }

    /// Worker `w` counted `answered` answers now: its misses count from here (nothing when
    /// its stream closed meanwhile).
    fn set_baseline(&self, w: u32, answered: u64) {
        let mut ring = self.ring();
        if let Some(tally) = ring.tally.workers.get_mut(&w) {
            tally.baseline = Some((answered, tally.received));
        }
    }

    /// The workers whose misses can be counted.
    pub fn workers_with_baseline(&self) -> Vec<u32> {
        self.ring()
            .tally
            .workers
            .iter()
            .filter(|(_, t)| t.baseline.is_some())
            .map(|(w, _)| *w)
            .collect()
    }

    /// The ring, past its age pruned.
    fn pruned_ring(&self) -> MutexGuard<'_, Ring> {
        let mut ring = self.ring();
        ring.prune(Instant::now());
        ring
    }

    /// Every entry, oldest first. The entries are shared with the ring: the lock is held
    /// only to pick them (a pointer each), never to count, copy or serialise them, so a
    /// reader of a large ring does not hold up the workers' stream.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.pruned_ring()
            .entries
            .iter()
            .map(|h| h.entry.clone())
            .collect()
    }

    /// The newest `limit` entries that `filter` passes, oldest first, shared with the ring
    /// as [`QueryLog::entries`].
    pub fn newest(&self, filter: &select::Filter, limit: usize) -> Vec<Arc<Entry>> {
        let mut out: Vec<Arc<Entry>> = {
            let ring = self.pruned_ring();
            ring.entries
                .iter()
                .rev()
                .map(|h| &h.entry)
                .filter(|e| filter.matches(e))
                .take(limit)
                .cloned()
                .collect()
        };
        out.reverse();
        out
    }

    /// Every answer from now on (the stream ends when the log is turned off).
    pub fn follow(&self) -> broadcast::Receiver<Arc<Entry>> {
        self.ring().live.subscribe()
    }

    /// Live followers now.
    pub fn followers(&self) -> usize {
        self.ring().live.receiver_count()
    }

    /// Whether the configuration has the log on.
    pub fn enabled(&self) -> bool {
        self.ring().settings.enabled
    }

    /// The status; `answered` is each worker's own answer count now (for the misses).
    pub fn status(&self, answered: &BTreeMap<u32, u64>) -> QueryLogStatus {
        let ring = self.pruned_ring();
        let s = &ring.settings;
        let missed = ring
            .tally
            .workers
            .iter()
            .filter_map(|(w, t)| {
                let (base_answered, base_received) = t.baseline?;
                let answered = answered.get(w)?.saturating_sub(base_answered);
                Some(answered.saturating_sub(t.received - base_received))
            })
            .sum();
        let inactive_reason = ring.tally.inactive_reason.clone().filter(|_| s.enabled);
        QueryLogStatus {
            enabled: s.enabled,
            inactive_reason,
            capacity: s.capacity as u64,
            held: ring.entries.len() as u64,
            received: ring.tally.received,
            malformed: ring.tally.malformed,
            held_bytes: ring.bytes as u64,
            max_memory: s.max_memory as u64,
            max_age_seconds: s.max_age.as_secs(),
            refused_peers: ring.tally.refused_peers,
            refused_frames: ring.tally.refused_frames,
            streams: ring.tally.streams,
            missed,
            workers_counted: ring
                .tally
                .workers
                .values()
                .filter(|t| t.baseline.is_some())
                .count() as u64,
            followers_lagged: ring.tally.followers_lagged,
            relay: self.relay.status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(client: &str, worker: Option<u32>) -> Entry {
        Entry {
            time_us: 1,
            client: client.parse().unwrap(),
            transport: Transport::Udp,
            name: "a.test.".into(),
            qtype: 1,
            rcode: 0,
            latency_us: Some(1500),
            answers: 1,
            ede: None,
            worker,
            cached: None,
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_cuts_clients() {
        let log = QueryLog::new(Settings {
            capacity: 3,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            ..Settings::default()
        });
        for i in 1..=5 {
            log.push(entry(&format!("192.0.2.{i}"), Some(0)));
        }
        log.push(entry("2001:db8:1:2::9", Some(0)));
        let all: Vec<_> = log
            .newest(&select::Filter::default(), 10)
            .iter()
            .map(|e| e.to_wire())
            .collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].client, "192.0.2.0");
        assert_eq!(all[2].client, "2001:db8:1::");
        assert_eq!(all[2].latency_ms, Some(1.5));
        log.configure(Settings {
            enabled: true,
            capacity: 1,
            ..Settings::default()
        });
        assert_eq!(log.newest(&select::Filter::default(), 10).len(), 1);
        assert_eq!(log.status(&BTreeMap::new()).received, 6);
    }

    #[test]
    fn misses_count_from_the_baseline() {
        let log = QueryLog::default();
        log.open_worker(1);
        log.push(entry("127.0.0.2", Some(1)));
        log.set_baseline(1, 10);
        for _ in 0..5 {
            log.push(entry("127.0.0.2", Some(1)));
        }
        // The worker answered 8 since its baseline; 5 reached the log.
        assert_eq!(log.status(&BTreeMap::from([(1, 18)])).missed, 3);
        assert_eq!(log.workers_with_baseline(), vec![1]);
    }

    fn named(name: &str) -> Entry {
        Entry {
            name: name.into(),
            ..entry("192.0.2.1", None)
        }
    }

    fn on(settings: Settings) -> Settings {
        Settings {
            enabled: true,
            ..settings
        }
    }

    #[test]
    fn entries_older_than_the_max_age_are_dropped() {
        let age = Duration::from_secs(10);
        let log = QueryLog::new(on(Settings {
            max_age: age,
            ..Settings::default()
        }));
        let t0 = Instant::now();
        // (kept at, pruned at, held after)
        let rows = [
            (t0, t0, 1),
            (t0 + Duration::from_secs(5), t0 + Duration::from_secs(9), 2),
            (t0 + Duration::from_secs(6), t0 + age, 2),
            (t0 + Duration::from_secs(7), t0 + Duration::from_secs(16), 1),
            (t0 + Duration::from_secs(8), t0 + Duration::from_secs(30), 0),
        ];
        for (kept, pruned, held) in rows {
            log.push_if(named("a.test."), kept, |_| true);
            log.expire_waiting(pruned);
            assert_eq!(log.ring().entries.len(), held, "pruned at {pruned:?}");
        }
        // Reads prune too: an entry kept longer ago than the age is not shown.
        let long_ago = Instant::now().checked_sub(age * 2).expect("uptime");
        log.push_if(named("old.test."), long_ago, |_| true);
        assert!(log.newest(&select::Filter::default(), 10).is_empty());
        assert_eq!(log.status(&BTreeMap::new()).held, 0);
    }

    #[test]
    fn the_ring_is_bounded_in_bytes() {
        let hostile = "\\255".repeat(255);
        // (names pushed, max-memory in footprints of the longest, entries held)
        let rows: [(&[&str], usize, usize); 3] = [
            (&["a.test.", "b.test.", "c.test."], 3, 3),
            (&[&hostile, &hostile, &hostile, &hostile], 2, 2),
            (&["a.test.", &hostile, &hostile, "b.test."], 2, 2),
        ];
        for (names, footprints, held) in rows {
            let longest = names.iter().map(|n| n.len()).max().unwrap_or(0);
            let log = QueryLog::new(on(Settings {
                max_memory: Entry::footprint(longest) * footprints,
                ..Settings::default()
            }));
            for name in names {
                log.push(named(name));
            }
            let status = log.status(&BTreeMap::new());
            assert_eq!(status.held, held as u64, "{names:?}");
            let bytes: usize = names[names.len() - held..]
                .iter()
                .map(|n| Entry::footprint(n.len()))
                .sum();
            assert_eq!(status.held_bytes, bytes as u64, "{names:?}");
            assert!(status.held_bytes <= status.max_memory);
        }
    }

    #[test]
    fn an_entrys_footprint_is_at_least_its_parts() {
        for len in [0, 1, 7, 24, 255, 1020] {
            let footprint = Entry::footprint(len);
            assert!(
                footprint >= len + std::mem::size_of::<Entry>() + std::mem::size_of::<Held>(),
                "{len}: {footprint}"
            );
            assert!(footprint <= len + 256, "{len}: {footprint}");
        }
    }

    #[tokio::test]
    async fn turned_off_the_log_forgets_everything_and_ends_its_followers() {
        let log = QueryLog::new(on(Settings::default()));
        log.set_accepting(true);
        let key = dnstap::QueryKey {
            client: "192.0.2.1".parse().unwrap(),
            port: 53,
            id: 1,
        };
        log.arrive(key, named("a.test."), Instant::now());
        let mut follower = log.follow();
        log.arrive(key, named("b.test."), Instant::now());
        assert_eq!(log.status(&BTreeMap::new()).held, 2);
        log.configure(Settings::default());
        let status = log.status(&BTreeMap::new());
        assert_eq!((status.held, status.held_bytes), (0, 0));
        // The follower gets what was sent before, then its stream ends.
        assert_eq!(
            follower.recv().await.expect("sent before").name.as_ref(),
            "b.test."
        );
        assert_eq!(
            follower.recv().await.map(|e| e.name.clone()),
            Err(broadcast::error::RecvError::Closed)
        );
        // Nothing from the workers is kept afterwards.
        log.arrive(key, named("c.test."), Instant::now());
        log.on_marks([(key, true)].into_iter(), Instant::now());
        assert_eq!(log.status(&BTreeMap::new()).held, 0);
    }

    #[test]
    fn a_narrower_prefix_applies_to_the_entries_held() {
        // (ipv4-prefix, ipv6-prefix) → the clients shown
        let rows: [((u8, u8), [&str; 2]); 3] = [
            ((32, 128), ["192.0.2.77", "2001:db8:1:2::9"]),
            ((24, 56), ["192.0.2.0", "2001:db8:1::"]),
            // Wider again: what was cut stays cut.
            ((32, 128), ["192.0.2.0", "2001:db8:1::"]),
        ];
        let log = QueryLog::new(on(Settings::default()));
        log.push(entry("192.0.2.77", None));
        log.push(entry("2001:db8:1:2::9", None));
        for ((v4, v6), clients) in rows {
            log.configure(on(Settings {
                ipv4_prefix: v4,
                ipv6_prefix: v6,
                ..Settings::default()
            }));
            let shown: Vec<String> = log
                .newest(&select::Filter::default(), 10)
                .iter()
                .map(|e| e.client.to_string())
                .collect();
            assert_eq!(shown, clients, "/{v4} /{v6}");
        }
    }

    #[test]
    fn a_workers_tally_lives_as_long_as_its_streams() {
        let log = QueryLog::default();
        // (step, tallies after)
        type Step = &'static dyn Fn(&QueryLog);
        let rows: [(Step, usize); 6] = [
            (&|l| l.open_worker(1), 1),
            (&|l| l.open_worker(1), 1),
            (&|l| l.push(entry("127.0.0.2", Some(7))), 1),
            (&|l| l.close_worker(1), 1),
            (&|l| l.close_worker(1), 0),
            (&|l| l.close_worker(2), 0),
        ];
        for (i, (step, tallies)) in rows.into_iter().enumerate() {
            step(&log);
            assert_eq!(log.workers_tallied(), tallies, "step {i}");
        }
    }

    #[test]
    fn refusals_are_counted() {
        let log = QueryLog::default();
        log.refuse_peer("a stream", &"uid 65534");
        log.refuse_peer("a stream", &"uid 65534");
        log.refuse_frame("1", "2");
        let status = log.status(&BTreeMap::new());
        assert_eq!((status.refused_peers, status.refused_frames), (2, 1));
    }
}
