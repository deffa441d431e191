//! The query log: the answers kresd's workers tell through a Lua layer of our own
//! (`lua::query_log`), kept by the manager process in a ring for `kresctl querylog` and
//! `kresctl top`.
//!
//! Each worker writes a compact binary record per answer into a batch and sends the batch as
//! one datagram to `<rundir>/query-log.sock` ([`SOCKET_FILE`]) when it is full or 50 ms old;
//! the manager process binds that socket, for the workers' user only, before any worker
//! starts with the log on, and removes it when the log is turned off (`intake`). What comes
//! is untrusted: senders are checked (`access`), records are bounded and read whole
//! (`records`) and reduced to an [`Entry`] each; nothing of it reaches the root. kresd never
//! waits for us: the worker's socket is non-blocking, and a batch that finds no room (a slow
//! or stopped reader) or no reader is dropped and counted by the worker itself; those counts,
//! in each batch and read from the workers, are the log's misses (`QueryLogStatus::missed`).
//!
//! `select` answers the readers (filters, top lists); the ring and the live followers are in
//! [`QueryLog`], a cheap handle the reader and the API share. The ring is bounded three ways,
//! by the configuration: in entries, in bytes (each entry's heap estimated from its name,
//! [`Entry::footprint`]) and in age (entries older than `max-age` are dropped on every batch
//! and read). Turning the log off empties it and ends the followers' streams; a narrower
//! client prefix applies to the entries already held.

pub mod access;
pub mod dnstap;
pub mod frames;
pub mod intake;
pub mod records;
pub mod select;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::config::QueryLogSchema;
use crate::wire::query_log::{LoggedAnswer, QueryLogStatus};
use records::Transport;

pub use crate::wire::query_log_format::SOCKET_FILE;

/// Answers a live follower may fall behind by before it misses some.
const LIVE_BACKLOG: usize = 4096;

/// How often refused peers are told in the log at most.
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
    /// When it was answered, microseconds since the epoch (kresd's clock).
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
    /// Whether the answer came from the cache, when the worker said.
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
            qtype: qtype_name(self.qtype),
            rcode: select::rcode_name(self.rcode),
            latency_ms: self.latency_us.map(|us| us as f64 / 1e3),
            answers: self.answers,
            ede: self.ede,
            worker: self.worker.map(|w| crate::service::WorkerId(w).name()),
            cached: self.cached,
        }
    }
}

/// A type's mnemonic (`A`, `TYPE65280`).
pub fn qtype_name(qtype: u16) -> String {
    domain::base::iana::Rtype::from_int(qtype).to_string()
}

/// The query log: the ring, its settings, its tallies and the live followers.
#[derive(Clone)]
pub struct QueryLog {
    /// Everything, under one short-held lock.
    shared: Arc<Mutex<Ring>>,
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
    /// Whether answers from the workers are kept: while the socket is bound (`intake`),
    /// never once the log was turned off.
    accepting: bool,
    /// New entries, for the live followers: made by the first follower (its backlog is
    /// 4,096 slots, about 160 KiB, which a log nobody follows does not hold), dropped with
    /// the last one and when the log is turned off (their streams end).
    live: Option<broadcast::Sender<Arc<Entry>>>,
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
    /// Keep an answer (its client cut to the configured prefix) and tell the followers; the
    /// caller prunes.
    fn keep(&mut self, mut entry: Entry, now: Instant) {
        let prefix = if entry.client.is_ipv4() {
            self.settings.ipv4_prefix
        } else {
            self.settings.ipv6_prefix
        };
        entry.client = select::mask(entry.client, prefix);
        self.tally.received += 1;
        let bytes = Entry::footprint(entry.name.len());
        let entry = Arc::new(entry);
        self.entries.push_back(Held {
            entry: entry.clone(),
            kept: now,
            bytes,
        });
        self.bytes += bytes;
        if let Some(live) = &self.live {
            if live.receiver_count() == 0 {
                self.live = None;
            } else {
                let _ = live.send(entry);
            }
        }
    }

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
}

impl Settings {
    /// The settings of a configuration.
    pub fn of(schema: &QueryLogSchema) -> Settings {
        Settings {
            enabled: schema.enabled,
            capacity: schema.entries as usize,
            max_age: schema.max_age.duration(),
            max_memory: usize::try_from(schema.max_memory.bytes()).unwrap_or(usize::MAX),
            ipv4_prefix: schema.ipv4_prefix,
            ipv6_prefix: schema.ipv6_prefix,
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
        }
    }
}

/// Counts since this manager process started.
#[derive(Debug, Default)]
struct Tally {
    /// Answers kept.
    received: u64,
    /// Datagrams, or their parts, not read.
    malformed: u64,
    /// Datagrams refused for their sender's uid.
    refused_peers: u64,
    /// When a refusal was last told in the log.
    refusal_told: Option<Instant>,
    /// Why no batch can come (the socket could not be bound), if so.
    inactive_reason: Option<String>,
    /// Answers live followers fell behind by.
    followers_lagged: u64,
    /// The records each worker dropped, as its batches told.
    dropped: records::Dropped,
}

impl Default for QueryLog {
    fn default() -> QueryLog {
        QueryLog::new(Settings::default())
    }
}

impl QueryLog {
    pub fn new(settings: Settings) -> QueryLog {
        QueryLog {
            shared: Arc::new(Mutex::new(Ring {
                entries: VecDeque::new(),
                bytes: 0,
                settings,
                tally: Tally::default(),
                accepting: false,
                live: None,
            })),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        // A panic while holding the lock leaves a consistent ring (every step is one push or
        // pop), so a poisoned lock is taken as it is.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Apply a configuration's settings: a smaller ring (in entries, bytes or age) drops its
    /// oldest entries; the client prefixes apply to the entries held. Turned off, the log
    /// forgets every answer and the workers' dropped counts, and its followers' streams end.
    pub fn configure(&self, settings: Settings) {
        self.configure_at(settings, Instant::now());
    }

    fn configure_at(&self, settings: Settings, now: Instant) {
        let enabled = settings.enabled;
        let mut ring = self.ring();
        ring.settings = settings;
        if !enabled {
            ring.accepting = false;
            ring.entries = VecDeque::new();
            ring.bytes = 0;
            ring.tally.dropped.clear();
            ring.live = None;
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

    /// Whether answers from the workers are kept (`intake`: while the sockets are bound).
    pub fn set_accepting(&self, accepting: bool) {
        self.ring().accepting = accepting;
    }

    /// A batch from worker `batch.worker`: its answers kept (unless the log stopped
    /// accepting), its dropped count noted; the entries past their age are dropped.
    pub fn on_batch(&self, batch: records::Batch, now: Instant) {
        let mut ring = self.ring();
        if !ring.accepting {
            return;
        }
        ring.tally.dropped.tell(batch.worker, batch.dropped);
        for entry in batch.entries {
            ring.keep(entry, now);
        }
        ring.prune(now);
    }

    /// Keep an answer (its client cut to the configured prefix) and tell the followers.
    pub fn push(&self, entry: Entry) {
        self.push_if(entry, Instant::now(), |_| true);
    }

    /// Keep an answer at `now` when `kept` says so of the ring.
    fn push_if(&self, entry: Entry, now: Instant, kept: impl FnOnce(&Ring) -> bool) {
        let mut ring = self.ring();
        if !kept(&ring) {
            return;
        }
        ring.keep(entry, now);
        ring.prune(now);
    }

    /// No batch can come, and why (the reader's socket could not be bound).
    pub fn set_inactive(&self, reason: String) {
        self.ring().tally.inactive_reason = Some(reason);
    }

    /// Batches can come again (the socket is bound).
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

    /// A datagram, or a part of one, that was not read.
    pub fn count_malformed(&self) {
        self.ring().tally.malformed += 1;
    }

    /// Followers lagged behind by `n` answers.
    pub fn count_lagged(&self, n: u64) {
        self.ring().tally.followers_lagged += n;
    }

    /// The ring, past its age pruned.
    fn pruned_ring(&self) -> MutexGuard<'_, Ring> {
        let mut ring = self.ring();
        ring.prune(Instant::now());
        ring
    }

    /// Every entry, oldest first. The entries are shared with the ring: the lock is held
    /// only to pick them (a pointer each), never to count, copy or serialise them, so a
    /// reader of a large ring does not hold up the workers' batches.
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
        self.ring()
            .live
            .get_or_insert_with(|| broadcast::channel(LIVE_BACKLOG).0)
            .subscribe()
    }

    /// Live followers now.
    pub fn followers(&self) -> usize {
        self.ring()
            .live
            .as_ref()
            .map_or(0, broadcast::Sender::receiver_count)
    }

    /// Whether the configuration has the log on.
    pub fn enabled(&self) -> bool {
        self.ring().settings.enabled
    }

    /// The status; `dropped` is each worker's own count of the records it dropped, as read
    /// from it now (the batches tell it too).
    pub fn status(&self, dropped: &BTreeMap<u32, u64>) -> QueryLogStatus {
        let ring = self.pruned_ring();
        let s = &ring.settings;
        let (missed, workers_counted) = ring.tally.dropped.merged(dropped);
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
            missed,
            workers_counted,
            followers_lagged: ring.tally.followers_lagged,
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
            log.ring().prune(pruned);
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
        let batch = |name: &str| records::Batch {
            worker: 0,
            dropped: 3,
            entries: vec![named(name)],
            malformed: false,
        };
        log.on_batch(batch("a.test."), Instant::now());
        let mut follower = log.follow();
        log.on_batch(batch("b.test."), Instant::now());
        let status = log.status(&BTreeMap::new());
        assert_eq!((status.held, status.missed), (2, 3));
        log.configure(Settings::default());
        let status = log.status(&BTreeMap::new());
        assert_eq!((status.held, status.held_bytes, status.missed), (0, 0, 0));
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
        log.on_batch(batch("c.test."), Instant::now());
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
    fn the_followers_backlog_is_held_only_while_followed() {
        let log = QueryLog::new(on(Settings::default()));
        let follower = log.follow();
        assert!(log.ring().live.is_some(), "made by the first follower");
        log.push(named("a.test."));
        assert!(log.ring().live.is_some(), "kept while followed");
        drop(follower);
        log.push(named("b.test."));
        assert!(log.ring().live.is_none(), "dropped with the last follower");
        assert_eq!(log.followers(), 0);
    }

    #[test]
    fn refusals_are_counted() {
        let log = QueryLog::default();
        log.refuse_peer("a stream", &"uid 65534");
        log.refuse_peer("a stream", &"uid 65534");
        let status = log.status(&BTreeMap::new());
        assert_eq!(status.refused_peers, 2);
    }
}
