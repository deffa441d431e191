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
//! [`QueryLog`], a cheap handle the reader and the API share. The ring holds its answers
//! packed (`packed`: a fixed record each, the names in wire form in one arena), and makes an
//! [`Entry`] of one only for a reader. It is bounded three ways, by the configuration: in
//! entries, in bytes (a record and its name, [`Entry::footprint`]) and in age (entries older
//! than `max-age` are dropped on every batch and read). Turning the log off empties it and ends the followers' streams; a narrower
//! client prefix applies to the entries already held.

pub mod access;
pub mod intake;
pub mod packed;
pub mod records;
pub mod select;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use kres_config::QueryLogSchema;
use kres_wire::query_log::{LoggedAnswer, QueryLogStatus};
use records::Transport;

pub use kres_wire::query_log_format::SOCKET_FILE;

/// Answers a live follower may fall behind by before it misses some.
const LIVE_BACKLOG: usize = 4096;

/// How often refused peers are told in the log at most.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(60);

/// The fewest bytes the ring's names' arena grows by.
const MIN_GROWTH: usize = 256;

/// The bytes of names the arena first makes room for, per slot of the ring: a little less
/// than a short name takes (`www.example.com.` takes 17), so that it grows once or twice by
/// a quarter rather than keeps room it does not use.
const NAME_ROOM: usize = 16;

/// One answer, as readers and followers see it (the ring holds it packed, `packed`).
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
    /// The bytes an entry whose name takes `wire_len` bytes in wire form takes in the ring:
    /// its record and its name in the arena. The room the ring's buffers keep for growth,
    /// the live followers' queue and the lists made for a request come on top.
    pub fn footprint(wire_len: usize) -> usize {
        std::mem::size_of::<packed::Packed>() + wire_len
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
    records: VecDeque<packed::Packed>,
    /// Their names in wire form, one after the other in the records' order.
    names: VecDeque<u8>,
    /// What the records' `kept_ns` count from.
    epoch: Instant,
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

/// Nanoseconds from `epoch` to `at` (negative before it).
fn since_epoch(epoch: Instant, at: Instant) -> i64 {
    match at.checked_duration_since(epoch) {
        Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        None => i64::try_from(epoch.duration_since(at).as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

impl Ring {
    /// Keep an answer (its client cut to the configured prefix) and tell the followers; the
    /// caller prunes. `wire` is its name, lowercase, as long as the record says.
    fn keep(&mut self, mut record: packed::Packed, wire: &[u8], now: Instant) {
        let client = record.client();
        let prefix = if client.is_ipv4() {
            self.settings.ipv4_prefix
        } else {
            self.settings.ipv6_prefix
        };
        record.set_client(select::mask(client, prefix));
        record.kept_ns = since_epoch(self.epoch, now);
        self.tally.received += 1;
        // A full ring makes room first, so that it never grows past its capacity.
        while self.records.len() >= self.settings.capacity.max(1) {
            self.drop_oldest();
        }
        let slots = self.settings.slots();
        if self.records.len() == self.records.capacity() {
            // Every slot at once: a large ring is a mapping of its own whose pages come as
            // they are written, never copied as it grows, and leaving no holes in the heap.
            let more = slots.saturating_sub(self.records.len()).max(1);
            self.records.reserve_exact(more);
        }
        if self.names.capacity() - self.names.len() < wire.len() {
            // By a quarter rather than doubled: a full ring keeps little room it does not use.
            let room = if self.names.capacity() == 0 {
                slots.saturating_mul(NAME_ROOM)
            } else {
                self.names.len() / 4
            };
            self.names
                .reserve_exact(room.max(MIN_GROWTH).max(wire.len()));
        }
        self.records.push_back(record);
        self.names.extend(wire);
        self.bytes += Entry::footprint(wire.len());
        if let Some(live) = &self.live {
            if live.receiver_count() == 0 {
                self.live = None;
            } else {
                let _ = live.send(Arc::new(record.entry(wire)));
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
        let max_age_ns = i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX);
        let now_ns = since_epoch(self.epoch, now);
        while let Some(oldest) = self.records.front() {
            let expired = now_ns.saturating_sub(oldest.kept_ns) >= max_age_ns;
            if !expired && self.records.len() <= capacity && self.bytes <= max_memory {
                break;
            }
            self.drop_oldest();
        }
        // The room a larger ring (or longer names) took is given back.
        let slots = self.settings.slots();
        if self.records.capacity() > slots.max(self.records.len()) {
            self.records.shrink_to(slots.max(self.records.len()));
        }
        let names = self.names.len();
        if self.names.capacity() > (names * 2).max(slots.saturating_mul(NAME_ROOM)) {
            self.names.shrink_to(names + names / 4);
        }
    }

    /// Drop the oldest record and its name.
    fn drop_oldest(&mut self) {
        if let Some(oldest) = self.records.pop_front() {
            self.bytes -= Entry::footprint(oldest.name_len());
            self.names.drain(..oldest.name_len().min(self.names.len()));
        }
    }

    /// The records and their names, copied out (the lock is held only for the copy).
    fn snapshot(&self) -> packed::Snapshot {
        let (front, back) = self.names.as_slices();
        let mut names = Vec::with_capacity(self.names.len());
        names.extend_from_slice(front);
        names.extend_from_slice(back);
        packed::Snapshot {
            records: self.records.iter().copied().collect(),
            names,
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
    /// The records the ring holds at most: its capacity, or fewer when its memory cannot
    /// hold that many of the shortest.
    fn slots(&self) -> usize {
        let by_memory = self.max_memory / Entry::footprint(1);
        self.capacity.min(by_memory).max(1)
    }

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
                records: VecDeque::new(),
                names: VecDeque::new(),
                epoch: Instant::now(),
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
            ring.records = VecDeque::new();
            ring.names = VecDeque::new();
            ring.bytes = 0;
            ring.tally.dropped.clear();
            ring.live = None;
            return;
        }
        let (v4, v6) = (ring.settings.ipv4_prefix, ring.settings.ipv6_prefix);
        for record in &mut ring.records {
            let client = record.client();
            let prefix = if client.is_ipv4() { v4 } else { v6 };
            record.set_client(select::mask(client, prefix));
        }
        ring.prune(now);
    }

    /// Whether answers from the workers are kept (`intake`: while the sockets are bound).
    pub fn set_accepting(&self, accepting: bool) {
        self.ring().accepting = accepting;
    }

    /// A batch from worker `batch.worker`: its answers kept (unless the log stopped
    /// accepting), its dropped count noted (a worker's only); the entries past their age are
    /// dropped.
    pub fn on_batch(&self, batch: &records::Batch, now: Instant) {
        let mut ring = self.ring();
        if !ring.accepting {
            return;
        }
        if let Some(worker) = batch.worker {
            ring.tally.dropped.tell(worker, batch.dropped);
        }
        let mut at = 0;
        for record in &batch.records {
            let end = at + record.name_len();
            ring.keep(*record, batch.names.get(at..end).unwrap_or_default(), now);
            at = end;
        }
        ring.prune(now);
    }

    /// Keep an answer (its client cut to the configured prefix) and tell the followers; one
    /// whose name does not read as a name is not kept.
    pub fn push(&self, entry: Entry) {
        self.push_at(&entry, Instant::now());
    }

    /// Keep an answer at `now`.
    fn push_at(&self, entry: &Entry, now: Instant) {
        let Some((record, wire)) = packed::Packed::of(entry) else {
            return;
        };
        let mut ring = self.ring();
        ring.keep(record, &wire, now);
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

    /// Every entry, oldest first. The lock is held only to copy the packed records and
    /// names out (a few bytes each), never to make entries of them, count or serialise
    /// them, so a reader of a large ring does not hold up the workers' batches.
    pub fn entries(&self) -> Vec<Entry> {
        let snapshot = self.pruned_ring().snapshot();
        snapshot.entries()
    }

    /// The newest `limit` entries that `filter` passes, oldest first, read as
    /// [`QueryLog::entries`].
    pub fn newest(&self, filter: &select::Filter, limit: usize) -> Vec<Entry> {
        let snapshot = self.pruned_ring().snapshot();
        let mut out: Vec<Entry> = snapshot
            .newest_first()
            .filter(|e| filter.matches(e))
            .take(limit)
            .collect();
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
            held: ring.records.len() as u64,
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
            log.push_at(&named("a.test."), kept);
            log.ring().prune(pruned);
            assert_eq!(log.ring().records.len(), held, "pruned at {pruned:?}");
        }
        // Reads prune too: an entry kept longer ago than the age is not shown.
        let long_ago = Instant::now().checked_sub(age * 2).expect("uptime");
        log.push_at(&named("old.test."), long_ago);
        assert!(log.newest(&select::Filter::default(), 10).is_empty());
        assert_eq!(log.status(&BTreeMap::new()).held, 0);
    }

    #[test]
    fn the_ring_is_bounded_in_bytes() {
        // The longest name there is (255 bytes in wire form), every byte escaped as text.
        let label = |n: usize| "\\255".repeat(n);
        let hostile = format!("{}.{}.{}.{}.", label(63), label(63), label(63), label(61));
        let wire_len = |name: &str| packed::Packed::of(&named(name)).expect("a name").1.len();
        assert_eq!(wire_len(&hostile), 255);
        // (names pushed, max-memory in footprints of the longest, entries held)
        let rows: [(&[&str], usize, usize); 3] = [
            (&["a.test.", "b.test.", "c.test."], 3, 3),
            (&[&hostile, &hostile, &hostile, &hostile], 2, 2),
            (&["a.test.", &hostile, &hostile, "b.test."], 2, 2),
        ];
        for (names, footprints, held) in rows {
            let longest = names.iter().map(|n| wire_len(n)).max().unwrap_or(0);
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
                .map(|n| Entry::footprint(wire_len(n)))
                .sum();
            assert_eq!(status.held_bytes, bytes as u64, "{names:?}");
            assert!(status.held_bytes <= status.max_memory);
        }
    }

    #[test]
    fn a_full_ring_keeps_little_room_it_does_not_use() {
        // (capacity, answers pushed)
        let rows = [(10_000, 10_000), (10_000, 25_000), (300, 1000), (1, 3)];
        for (capacity, pushed) in rows {
            let log = QueryLog::new(on(Settings {
                capacity,
                ..Settings::default()
            }));
            for i in 0..pushed {
                log.push(named(&format!("f{i}.fill.test.")));
            }
            let ring = log.ring();
            assert_eq!(ring.records.len(), capacity);
            assert_eq!(ring.records.capacity(), capacity, "{capacity}");
            let names: usize = ring.records.iter().map(|r| r.name_len()).sum();
            assert_eq!(ring.names.len(), names);
            assert!(ring.names.capacity() <= names + names / 4 + MIN_GROWTH);
            assert_eq!(ring.bytes, capacity * 48 + names);
        }
    }

    #[tokio::test]
    async fn turned_off_the_log_forgets_everything_and_ends_its_followers() {
        let log = QueryLog::new(on(Settings::default()));
        log.set_accepting(true);
        let batch = |name: &str| {
            let (record, names) = packed::Packed::of(&named(name)).expect("a name");
            records::Batch {
                worker: Some(0),
                dropped: 3,
                records: vec![record],
                names,
                malformed: false,
            }
        };
        log.on_batch(&batch("a.test."), Instant::now());
        let mut follower = log.follow();
        log.on_batch(&batch("b.test."), Instant::now());
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
        log.on_batch(&batch("c.test."), Instant::now());
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
