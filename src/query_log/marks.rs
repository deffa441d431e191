//! Whether each answer came from the cache: the marks the workers send in batches to
//! `<rundir>/query-log-marks.sock` ([`MARKS_FILE`]; the Lua side is `lua::cache_marks`),
//! joined to the answers of the dnstap stream by client, port and message ID.
//!
//! The two arrive in either order: kresd's dnstap thread and the marks' timer each send when
//! they will. [`Join`] holds whichever comes first: a mark waits up to [`MARK_KEPT`] for its
//! answer, an answer up to [`ANSWER_WAIT`] for its mark (then it is kept with the cache use
//! unknown). An answer waits only while marks are coming at all (some in the last
//! [`MARKS_SILENT`]): workers of an older manager send none. Both sides are bounded, their
//! maps and their queues in arrival order alike (a key sent again and again costs one place).
//! Datagrams are untrusted: only whole records are read, any other byte passes over. The
//! socket's file is for the workers' user only (`intake`), and each datagram carries its
//! sender's credentials from the kernel (`SO_PASSCRED`): one from another uid is dropped
//! and counted, descriptors passed with it are closed.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::net::UnixDatagram;
use tokio_util::sync::CancellationToken;

use super::access::Access;
use super::dnstap::QueryKey;
use super::{Entry, QueryLog};

/// The socket in the rundir the workers send their marks to.
pub const MARKS_FILE: &str = "query-log-marks.sock";

/// The bytes of one record: the client's address (16, an IPv4 one in the first 4), its port
/// and the answer's message ID (native order, 2 each), the address family (4 or 6), whether
/// the answer came from the cache (1 or 0), 2 bytes of padding.
pub const RECORD_SIZE: usize = 24;

/// How long an answer waits for its mark.
pub const ANSWER_WAIT: Duration = Duration::from_millis(250);

/// How long a mark waits for its answer (kresd's dnstap thread may hold an answer for a
/// second when traffic is light).
pub const MARK_KEPT: Duration = Duration::from_secs(3);

/// With no mark for this long, answers are kept at once, their cache use unknown.
pub const MARKS_SILENT: Duration = Duration::from_secs(2);

/// Marks, and answers, held at most (at 100,000 answers a second, 250 ms is 25,000).
const MAX_HELD: usize = 65_536;

/// How often the waiting answers are looked at.
const TICK: Duration = Duration::from_millis(50);

/// The largest datagram read (a worker sends at most 256 records, 6 KiB).
const MAX_DATAGRAM: usize = 64 * 1024;

/// The marks in a datagram: (the answer's key, whether it came from the cache). A record
/// with another family than 4 or 6, and any bytes short of a record, are passed over.
pub fn records(datagram: &[u8]) -> impl Iterator<Item = (QueryKey, bool)> + '_ {
    datagram.chunks_exact(RECORD_SIZE).filter_map(|r| {
        let client = match r[20] {
            4 => IpAddr::V4(Ipv4Addr::new(r[0], r[1], r[2], r[3])),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&r[..16]).ok()?)),
            _ => return None,
        };
        let port = u16::from_ne_bytes([r[16], r[17]]);
        let id = u16::from_ne_bytes([r[18], r[19]]);
        Some((QueryKey { client, port, id }, r[21] != 0))
    })
}

/// Marks and answers, each waiting for the other.
#[derive(Default)]
pub struct Join {
    /// Marks whose answer has not come, by key, with when they came.
    marks: HashMap<QueryKey, (bool, Instant)>,
    /// Their keys in arrival order, for expiry (a key marked again is expired by its newest).
    mark_order: VecDeque<(Instant, QueryKey)>,
    /// Answers waiting for their mark, by key.
    answers: HashMap<QueryKey, (Entry, Instant)>,
    /// Their keys in arrival order.
    answer_order: VecDeque<(Instant, QueryKey)>,
    /// When the last mark came.
    last_mark: Option<Instant>,
}

impl Join {
    /// An answer came: out at once when its mark is here (with its cache use) or when no
    /// marks are coming (unknown); otherwise it waits.
    pub fn on_answer(&mut self, key: QueryKey, mut entry: Entry, now: Instant) -> Option<Entry> {
        if let Some((cached, _)) = self.marks.remove(&key) {
            entry.cached = Some(cached);
            return Some(entry);
        }
        let marks_coming = self
            .last_mark
            .is_some_and(|t| now.saturating_duration_since(t) < MARKS_SILENT);
        if !marks_coming || self.answers.len() >= MAX_HELD || self.answer_order.len() >= MAX_HELD {
            return Some(entry);
        }
        // The same key twice within the wait (a client reusing its port and ID): the earlier
        // answer goes out unknown.
        let earlier = self.answers.insert(key, (entry, now));
        self.answer_order.push_back((now, key));
        earlier.map(|(entry, _)| entry)
    }

    /// A mark came: out goes its answer when it waited; otherwise the mark waits.
    pub fn on_mark(&mut self, key: QueryKey, cached: bool, now: Instant) -> Option<Entry> {
        self.last_mark = Some(now);
        if let Some((mut entry, _)) = self.answers.remove(&key) {
            entry.cached = Some(cached);
            return Some(entry);
        }
        if self.marks.len() >= MAX_HELD || self.mark_order.len() >= MAX_HELD {
            self.expire_marks(now, true);
        }
        self.marks.insert(key, (cached, now));
        self.mark_order.push_back((now, key));
        None
    }

    /// The answers that waited [`ANSWER_WAIT`], out with their cache use unknown, oldest
    /// first; marks older than [`MARK_KEPT`] are forgotten, and the room a burst took is
    /// given back once it has passed.
    pub fn expire(&mut self, now: Instant) -> Vec<Entry> {
        self.expire_marks(now, false);
        shrink(&mut self.marks, &mut self.mark_order);
        shrink(&mut self.answers, &mut self.answer_order);
        let mut out = Vec::new();
        while let Some(&(at, key)) = self.answer_order.front() {
            if now.saturating_duration_since(at) < ANSWER_WAIT {
                break;
            }
            self.answer_order.pop_front();
            if let Some((entry, came)) = self.answers.remove(&key) {
                if came == at {
                    out.push(entry);
                } else {
                    self.answers.insert(key, (entry, came));
                }
            }
        }
        out
    }

    /// Forget marks older than [`MARK_KEPT`] (and, with `one_more`, at least the oldest one).
    fn expire_marks(&mut self, now: Instant, mut one_more: bool) {
        while let Some(&(at, key)) = self.mark_order.front() {
            if !one_more && now.saturating_duration_since(at) < MARK_KEPT {
                break;
            }
            self.mark_order.pop_front();
            if self.marks.get(&key).is_some_and(|(_, came)| *came == at) {
                self.marks.remove(&key);
                one_more = false;
            }
        }
    }

    /// Forget every mark and waiting answer (the log was turned off).
    pub fn clear(&mut self) {
        *self = Join::default();
    }

    /// Marks and answers held now.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        (self.marks.len(), self.answers.len())
    }
}

/// Give back a map's and its order's room when they hold less than an eighth of it (a
/// burst's high-water mark would otherwise stay for good).
fn shrink<V>(map: &mut HashMap<QueryKey, V>, order: &mut VecDeque<(Instant, QueryKey)>) {
    const KEPT: usize = 1024;
    if map.capacity() > KEPT && map.len() < map.capacity() / 8 {
        map.shrink_to(KEPT.max(map.len() * 2));
    }
    if order.capacity() > KEPT && order.len() < order.capacity() / 8 {
        order.shrink_to(KEPT.max(order.len() * 2));
    }
}

/// Bind `<rundir>/query-log-marks.sock` with `access` (replacing a socket or a link left by
/// an earlier manager process), its datagrams carrying their senders' credentials.
pub fn bind(rundir: &Path, access: &Access) -> std::io::Result<UnixDatagram> {
    let socket = supervisor::os::bind_unix_private(&rundir.join(MARKS_FILE), access.file(), |p| {
        std::os::unix::net::UnixDatagram::bind(p)
    })?;
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::PassCred, &true)?;
    socket.set_nonblocking(true)?;
    UnixDatagram::from_std(socket)
}

/// One datagram into `buf`: its length and its sender's uid (from the kernel; `None` when
/// it gave none). Room is made for the credentials alone: descriptors a sender passes with
/// a datagram are then never installed here (the kernel closes them and says the control
/// data was cut, which reads as no credentials).
fn receive(socket: &UnixDatagram, buf: &mut [u8]) -> std::io::Result<(usize, Option<u32>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixCredentials};
    use std::os::fd::AsRawFd;
    let mut space = nix::cmsg_space!(UnixCredentials);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let uid = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            ControlMessageOwned::ScmCredentials(cred) => Some(cred.uid()),
            _ => None,
        })
    });
    Ok((msg.bytes, uid))
}

/// Read the workers' marks into `log` (those of a sender `access` admits), and let the
/// answers that waited long enough out, until `stop`.
pub async fn serve(socket: UnixDatagram, log: QueryLog, access: Access, stop: CancellationToken) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => log.expire_waiting(Instant::now()),
            received = socket.async_io(tokio::io::Interest::READABLE, || receive(&socket, &mut buf)) => match received {
                Ok((n, Some(uid))) if access.admits(uid) => {
                    log.on_marks(records(&buf[..n]), Instant::now());
                }
                Ok((_, uid)) => log.refuse_peer(
                    "a cache marks' datagram",
                    &uid.map_or_else(|| "an unknown sender".to_owned(), |u| format!("uid {u}")),
                ),
                Err(e) => {
                    tracing::debug!("query log: reading the cache marks: {e}");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query_log::dnstap::Transport;

    fn key(id: u16) -> QueryKey {
        QueryKey {
            client: "127.0.0.2".parse().unwrap(),
            port: 4000,
            id,
        }
    }

    fn entry(id: u16) -> Entry {
        Entry {
            time_us: u64::from(id),
            client: "127.0.0.2".parse().unwrap(),
            transport: Transport::Udp,
            name: "a.test.".into(),
            qtype: 1,
            rcode: 0,
            latency_us: None,
            answers: 1,
            ede: None,
            worker: Some(0),
            cached: None,
        }
    }

    fn record(client: &[u8], family: u8, port: u16, id: u16, cached: bool) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_SIZE];
        r[..client.len()].copy_from_slice(client);
        r[16..18].copy_from_slice(&port.to_ne_bytes());
        r[18..20].copy_from_slice(&id.to_ne_bytes());
        r[20] = family;
        r[21] = u8::from(cached);
        r
    }

    #[test]
    fn records_read_whole_and_known_only() {
        let mut datagram = record(&[127, 0, 0, 2], 4, 4000, 7, true);
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        datagram.extend(record(&v6, 6, 53, 9, false));
        datagram.extend(record(&[1, 2, 3, 4], 5, 1, 1, true));
        datagram.extend([1, 2, 3]);
        let read: Vec<(QueryKey, bool)> = records(&datagram).collect();
        assert_eq!(
            read,
            [
                (key(7), true),
                (
                    QueryKey {
                        client: "::1".parse().unwrap(),
                        port: 53,
                        id: 9
                    },
                    false
                )
            ]
        );
    }

    #[test]
    fn marks_and_answers_meet_in_either_order() {
        let t0 = Instant::now();
        let mut j = Join::default();
        // No mark seen yet: an answer goes out at once, unknown.
        assert_eq!(
            j.on_answer(key(1), entry(1), t0).map(|e| e.cached),
            Some(None)
        );
        // The mark first, then its answer.
        assert!(j.on_mark(key(2), true, t0).is_none());
        let e = j.on_answer(key(2), entry(2), t0).expect("out");
        assert_eq!((e.time_us, e.cached), (2, Some(true)));
        // The answer first (marks are coming), then its mark.
        assert!(j.on_answer(key(3), entry(3), t0).is_none());
        let e = j.on_mark(key(3), false, t0).expect("out");
        assert_eq!((e.time_us, e.cached), (3, Some(false)));
        assert_eq!(j.held(), (0, 0));
    }

    #[test]
    fn waiting_answers_and_marks_expire() {
        let t0 = Instant::now();
        let mut j = Join::default();
        j.on_mark(key(100), true, t0);
        assert!(j.on_answer(key(4), entry(4), t0).is_none());
        assert!(j.expire(t0 + ANSWER_WAIT / 2).is_empty());
        let out = j.expire(t0 + ANSWER_WAIT);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].time_us, out[0].cached), (4, None));
        assert_eq!(j.held(), (1, 0));
        j.expire(t0 + MARK_KEPT);
        assert_eq!(j.held(), (0, 0));
        // Marks silent for long: answers no longer wait.
        let later = t0 + MARKS_SILENT + MARK_KEPT;
        assert!(j.on_answer(key(5), entry(5), later).is_some());
    }

    #[test]
    fn a_key_twice_lets_the_earlier_answer_out() {
        let t0 = Instant::now();
        let mut j = Join::default();
        j.on_mark(key(100), true, t0);
        assert!(j.on_answer(key(6), entry(6), t0).is_none());
        let earlier = j.on_answer(key(6), entry(60), t0).expect("out");
        assert_eq!((earlier.time_us, earlier.cached), (6, None));
        let e = j.on_mark(key(6), true, t0).expect("out");
        assert_eq!((e.time_us, e.cached), (60, Some(true)));
        // The stale order entry of the first answer does not let anything out twice.
        assert!(j.expire(t0 + ANSWER_WAIT).is_empty());
    }

    #[test]
    fn the_room_of_a_burst_is_given_back() {
        let t0 = Instant::now();
        let mut j = Join::default();
        for id in 0..20_000u16 {
            j.on_mark(key(id), true, t0);
        }
        let burst = j.marks.capacity();
        j.expire(t0 + MARK_KEPT);
        assert_eq!(j.held(), (0, 0));
        assert!(
            j.marks.capacity() < burst / 8,
            "{} of {burst}",
            j.marks.capacity()
        );
        assert!(
            j.mark_order.capacity() <= 2048,
            "{}",
            j.mark_order.capacity()
        );
    }

    #[test]
    fn held_marks_are_bounded() {
        let t0 = Instant::now();
        let mut j = Join::default();
        for i in 0..(MAX_HELD + 10) {
            let k = QueryKey {
                client: "127.0.0.3".parse().unwrap(),
                port: (i / 65_536) as u16,
                id: (i % 65_536) as u16,
            };
            j.on_mark(k, false, t0);
        }
        assert!(j.held().0 <= MAX_HELD, "{:?}", j.held());
    }

    #[test]
    fn a_key_sent_again_and_again_takes_one_place() {
        let t0 = Instant::now();
        let mut j = Join::default();
        for _ in 0..(MAX_HELD * 2) {
            j.on_mark(key(1), true, t0);
        }
        assert!(j.mark_order.len() <= MAX_HELD, "{}", j.mark_order.len());
        // Answers of one key, waiting for marks that never come.
        for i in 0..(MAX_HELD * 2) {
            j.on_answer(key(2), entry(i as u16), t0);
        }
        assert!(j.answer_order.len() <= MAX_HELD, "{}", j.answer_order.len());
        assert!(j.held().1 <= 1);
        j.clear();
        assert_eq!(j.held(), (0, 0));
        assert!(j.mark_order.is_empty() && j.answer_order.is_empty());
    }

    #[tokio::test]
    async fn each_datagram_says_who_sent_it() {
        let dir = std::env::temp_dir().join(format!("kres-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let access = Access::for_workers(None);
        let socket = bind(&dir, &access).expect("bind");
        let path = dir.join(MARKS_FILE);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let sender = std::os::unix::net::UnixDatagram::unbound().expect("sender");
        sender
            .send_to(&record(&[127, 0, 0, 2], 4, 4000, 7, true), &path)
            .expect("send");
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let (n, uid) = socket
            .async_io(tokio::io::Interest::READABLE, || receive(&socket, &mut buf))
            .await
            .expect("receive");
        assert_eq!(n, RECORD_SIZE);
        assert_eq!(uid, Some(nix::unistd::geteuid().as_raw()));
        assert!(access.admits(uid.unwrap()));
        std::fs::remove_dir_all(&dir).ok();
    }
}
