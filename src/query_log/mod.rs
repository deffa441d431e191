//! The query log: the answers kresd's workers send through their dnstap module, kept by the
//! manager process in a ring for `kresctl querylog` and `kresctl top`.
//!
//! The workers connect to `<rundir>/query-log.sock` ([`SOCKET_FILE`]), which the manager
//! process binds before any worker starts (`reader`). What they send is untrusted: frames
//! are bounded (`frames`), decoded (`dnstap`) and reduced to an [`Entry`] each; nothing of it
//! reaches the root. kresd's side never waits for us: its dnstap module hands frames to
//! libfstrm's queue, written by a thread of its own, and drops what does not fit when the
//! reader lags; the answers it drops are counted here from the workers' own answer counts
//! (`QueryLogStatus::missed`).
//!
//! `select` answers the readers (filters, top lists); the ring and the live followers are in
//! [`QueryLog`], a cheap handle the reader and the API share.

pub mod dnstap;
pub mod frames;
pub mod marks;
pub mod reader;
pub mod relay;
pub mod select;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::broadcast;

use crate::config::{DnstapSchema, QueryLogSchema};
use crate::wire::query_log::{LoggedAnswer, QueryLogStatus};
use dnstap::Transport;

/// The socket in the rundir the workers' dnstap module writes to.
pub const SOCKET_FILE: &str = "query-log.sock";

/// Remove the socket file at `path` left by an earlier manager process, if any, so that it
/// can be bound again.
fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Answers a live follower may fall behind by before it misses some.
const LIVE_BACKLOG: usize = 4096;

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
    /// New entries, for the live followers.
    live: broadcast::Sender<Arc<Entry>>,
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
    entries: VecDeque<Arc<Entry>>,
    /// What the configuration sets.
    settings: Settings,
    /// What was received and missed.
    tally: Tally,
}

/// What the configuration sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Whether the workers are told to send their answers.
    pub enabled: bool,
    /// The ring's size.
    pub capacity: usize,
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
    /// Workers' streams open now.
    streams: u64,
    /// Why no stream can come (the socket could not be bound), if so.
    inactive_reason: Option<String>,
    /// Answers live followers fell behind by.
    followers_lagged: u64,
    /// Per worker: answers received, and the baseline its misses count from.
    workers: BTreeMap<u32, WorkerTally>,
}

/// One worker's answers, received and counted by the worker itself.
#[derive(Debug, Default, Clone, Copy)]
struct WorkerTally {
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
                    settings,
                    tally: Tally::default(),
                }),
                join: Mutex::new(marks::Join::default()),
            }),
            relay,
            live,
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

    /// Apply a configuration's settings: a smaller ring drops its oldest entries; another
    /// relay target starts with an empty queue.
    pub fn configure(&self, settings: Settings) {
        self.relay.retarget(settings.relay.clone());
        let mut ring = self.ring();
        let capacity = settings.capacity;
        ring.settings = settings;
        let excess = ring.entries.len().saturating_sub(capacity);
        ring.entries.drain(..excess);
        if ring.entries.capacity() > capacity.saturating_mul(2) {
            ring.entries.shrink_to(capacity);
        }
    }

    fn join(&self) -> MutexGuard<'_, marks::Join> {
        // Every step of the join leaves it consistent, as the ring's.
        self.shared
            .join
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An answer from a worker's stream (`key`: its client, port and ID): kept now, or once
    /// its cache mark comes (at most [`marks::ANSWER_WAIT`] later).
    pub fn arrive(&self, key: dnstap::QueryKey, entry: Entry, now: std::time::Instant) {
        let out = self.join().on_answer(key, entry, now);
        if let Some(entry) = out {
            self.push(entry);
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
            self.push(entry);
        }
    }

    /// The answers that waited long enough for their marks are kept, their cache use unknown.
    pub fn expire_waiting(&self, now: std::time::Instant) {
        let out = self.join().expire(now);
        for entry in out {
            self.push(entry);
        }
    }

    /// Keep an answer (its client cut to the configured prefix) and tell the followers.
    pub fn push(&self, mut entry: Entry) {
        let entry = {
            let mut ring = self.ring();
            let settings = &ring.settings;
            let capacity = settings.capacity;
            let prefix = if entry.client.is_ipv4() {
                settings.ipv4_prefix
            } else {
                settings.ipv6_prefix
            };
            entry.client = select::mask(entry.client, prefix);
            ring.tally.received += 1;
            if let Some(w) = entry.worker {
                ring.tally.workers.entry(w).or_default().received += 1;
            }
            if ring.entries.len() >= capacity {
                ring.entries.pop_front();
            }
            let entry = Arc::new(entry);
            ring.entries.push_back(entry.clone());
            entry
        };
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(entry);
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

    /// Whether worker `w` has its baseline.
    fn has_baseline(&self, w: u32) -> bool {
        self.ring()
            .tally
            .workers
            .get(&w)
            .is_some_and(|t| t.baseline.is_some())
    }

    /// Worker `w` counted `answered` answers now: its misses count from here.
    fn set_baseline(&self, w: u32, answered: u64) {
        let mut ring = self.ring();
        let tally = ring.tally.workers.entry(w).or_default();
        tally.baseline = Some((answered, tally.received));
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

    /// Every entry, oldest first. The entries are shared with the ring: the lock is held
    /// only to pick them (a pointer each), never to count, copy or serialise them, so a
    /// reader of a large ring does not hold up the workers' stream.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.ring().entries.iter().cloned().collect()
    }

    /// The newest `limit` entries that `filter` passes, oldest first, shared with the ring
    /// as [`QueryLog::entries`].
    pub fn newest(&self, filter: &select::Filter, limit: usize) -> Vec<Arc<Entry>> {
        let mut out: Vec<Arc<Entry>> = {
            let ring = self.ring();
            ring.entries
                .iter()
                .rev()
                .filter(|e| filter.matches(e))
                .take(limit)
                .cloned()
                .collect()
        };
        out.reverse();
        out
    }

    /// Every answer from now on.
    pub fn follow(&self) -> broadcast::Receiver<Arc<Entry>> {
        self.live.subscribe()
    }

    /// Live followers now.
    pub fn followers(&self) -> usize {
        self.live.receiver_count()
    }

    /// The status; `answered` is each worker's own answer count now (for the misses).
    pub fn status(&self, answered: &BTreeMap<u32, u64>) -> QueryLogStatus {
        let ring = self.ring();
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
            capacity: 1,
            ..Settings::default()
        });
        assert_eq!(log.newest(&select::Filter::default(), 10).len(), 1);
        assert_eq!(log.status(&BTreeMap::new()).received, 6);
    }

    #[test]
    fn misses_count_from_the_baseline() {
        let log = QueryLog::default();
        log.push(entry("127.0.0.2", Some(1)));
        log.set_baseline(1, 10);
        for _ in 0..5 {
            log.push(entry("127.0.0.2", Some(1)));
        }
        // The worker answered 8 since its baseline; 5 reached the log.
        assert_eq!(log.status(&BTreeMap::from([(1, 18)])).missed, 3);
        assert_eq!(log.workers_with_baseline(), vec![1]);
        assert!(!log.has_baseline(0));
    }
}
