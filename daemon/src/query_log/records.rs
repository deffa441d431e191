//! The workers' answers as they send them: batches of compact binary records, one datagram a
//! batch, to `<rundir>/query-log.sock` ([`SOCKET_FILE`]; the Lua side is `lua::query_log`),
//! read into [`Entry`]s.
//!
//! A datagram is a [`BATCH_HEADER`]-byte header (a magic number, the worker's number, its
//! records, and the records the worker dropped so far because no reader took them) and the
//! records, each a [`RECORD_HEADER`]-byte fixed part followed by the question's name in wire
//! form, padded to 8 bytes. Everything is in the host's byte order (sender and reader share
//! the host). Datagrams are untrusted: only the workers' user, root and ours are read
//! (`SCM_CREDENTIALS`, [`Access`]), descriptors passed with one are never installed, and a
//! record is read only when whole, its name a valid one; anything else ends the datagram's
//! reading and is counted as malformed. Which worker sent a batch is the kernel's word, not
//! the batch's: the sender's pid looked up in the supervisor's table ([`WorkerOf`]). A batch
//! from a process that is no worker (any process of the workers' user can send) is logged
//! with no worker, and the dropped count it claims is not taken. A record is read into the ring's packed form
//! (`packed`): its name stays in wire form, lowercased, with the batch's other names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use domain::base::Name;
use tokio::net::UnixDatagram;
use tokio_util::sync::CancellationToken;

use super::access::Access;
use super::packed::{Fields, Packed};
use super::{QueryLog, SOCKET_FILE};

pub use kres_wire::query_log_format::{
    BATCH_HEADER, DROPPED_FUNCTION, MAGIC, MAX_DATAGRAM, RECORD_HEADER,
};

/// Workers whose dropped count is kept at most.
const MAX_WORKERS: usize = 256;

/// The worker a process is, by its pid (`None`: no worker), from the supervisor's table.
pub type WorkerOf = std::sync::Arc<dyn Fn(i32) -> Option<u32> + Send + Sync>;

pub use super::packed::Transport;

/// A batch, read.
#[derive(Debug, Default, PartialEq)]
pub struct Batch {
    /// The worker that sent it, as the kernel tells the sender (`None`: no worker).
    pub worker: Option<u32>,
    /// The records the worker dropped so far (its own count).
    pub dropped: u64,
    /// The records read, in order.
    pub records: Vec<Packed>,
    /// Their names in wire form, lowercase, one after the other in the records' order.
    pub names: Vec<u8>,
    /// Whether something past the header was not read (a short or bad record).
    pub malformed: bool,
}

/// Why a datagram was not read at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("a datagram of {0} bytes, shorter than a batch's header")]
    Short(usize),
    #[error("a datagram with the magic number {0:#x}, not a batch of records")]
    Magic(u32),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(bytes)
}

/// Read a datagram. At most as many records as its header says, each whole with a valid name;
/// the first that is not ends the reading (`malformed`).
pub fn read(datagram: &[u8], sender: Option<u32>) -> Result<Batch, BatchError> {
    let mut batch = Batch::default();
    read_into(datagram, &mut batch, sender)?;
    Ok(batch)
}

/// [`read`] into `batch`, whose buffers are used again (the reader reads every datagram
/// into one: nothing is allocated per datagram once they are large enough). `sender` is the
/// worker that sent it (`None`: a process that is no worker); the number the batch claims
/// is not taken.
pub fn read_into(
    datagram: &[u8],
    batch: &mut Batch,
    sender: Option<u32>,
) -> Result<(), BatchError> {
    batch.records.clear();
    batch.names.clear();
    if datagram.len() < BATCH_HEADER {
        return Err(BatchError::Short(datagram.len()));
    }
    let magic = u32_at(datagram, 0);
    if magic != MAGIC {
        return Err(BatchError::Magic(magic));
    }
    let count = u32_at(datagram, 8) as usize;
    let dropped = u64_at(datagram, 16);
    let mut rest = &datagram[BATCH_HEADER..];
    let mut malformed = false;
    while batch.records.len() < count {
        match record(rest, sender, &mut batch.names) {
            Some((packed, len)) => {
                batch.records.push(packed);
                rest = rest.get(len..).unwrap_or_default();
            }
            None => {
                malformed = true;
                break;
            }
        }
    }
    batch.worker = sender;
    batch.dropped = dropped;
    batch.malformed = malformed || !rest.is_empty();
    Ok(())
}

impl Batch {
    /// Its entries, in order.
    pub fn entries(&self) -> Vec<super::Entry> {
        super::packed::entries(&self.records, &self.names)
    }
}

/// One record at the front of `b`: it packed, its name (lowercase) added to `names`, and its
/// length with padding; `None` (and `names` as it was) when it is not whole or says what no
/// answer says.
fn record(b: &[u8], worker: Option<u32>, names: &mut Vec<u8>) -> Option<(Packed, usize)> {
    let fixed = b.get(..RECORD_HEADER)?;
    let name_len = usize::from(fixed[43]);
    let len = (RECORD_HEADER + name_len).next_multiple_of(8);
    let wire = b.get(RECORD_HEADER..RECORD_HEADER + name_len)?;
    let client = match fixed[40] {
        4 => IpAddr::V4(Ipv4Addr::new(fixed[24], fixed[25], fixed[26], fixed[27])),
        6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&fixed[24..40]).ok()?)),
        _ => return None,
    };
    let start = u64_at(fixed, 0);
    let latency = u32_at(fixed, 8);
    let latency_us = (start != 0 && latency != u32::MAX).then_some(u64::from(latency));
    let ede = i32::from_ne_bytes([fixed[20], fixed[21], fixed[22], fixed[23]]);
    // A valid uncompressed name (no label past its end, no compression pointer).
    Name::from_slice(wire).ok()?;
    let fields = Fields {
        time_us: start.saturating_add(latency_us.unwrap_or(0)),
        client,
        transport: Transport::of(fixed[41]),
        qtype: u16_at(fixed, 14),
        rcode: u16_at(fixed, 16),
        latency_us,
        answers: u16_at(fixed, 18),
        ede: u16::try_from(ede).ok(),
        worker,
        cached: match fixed[42] {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        },
    };
    let at = names.len();
    names.extend_from_slice(wire);
    names[at..].make_ascii_lowercase();
    Some((Packed::new(&fields, fixed[43]), len))
}

/// Bind `<rundir>/query-log.sock` with `access` (replacing a socket or a link left by an
/// earlier manager process), its datagrams carrying their senders' credentials.
pub fn bind(rundir: &Path, access: &Access) -> std::io::Result<UnixDatagram> {
    let socket =
        supervisor::os::bind_unix_private(&rundir.join(SOCKET_FILE), access.file(), |p| {
            std::os::unix::net::UnixDatagram::bind(p)
        })?;
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::PassCred, &true)?;
    socket.set_nonblocking(true)?;
    UnixDatagram::from_std(socket)
}

/// One datagram into `buf`: its length and its sender's uid and pid (from the kernel; `None`
/// when it gave none). Room is made for the credentials alone: descriptors a sender passes
/// with a datagram are then never installed here (the kernel closes them and says the
/// control data was cut, which reads as no credentials).
fn receive(socket: &UnixDatagram, buf: &mut [u8]) -> std::io::Result<(usize, Option<(u32, i32)>)> {
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
    let peer = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            ControlMessageOwned::ScmCredentials(cred) => Some((cred.uid(), cred.pid())),
            _ => None,
        })
    });
    Ok((msg.bytes, peer))
}

/// Read the workers' batches into `log` (those of a sender `access` admits, each worker's
/// told by `worker_of`) until `stop`.
pub async fn serve(
    socket: UnixDatagram,
    log: QueryLog,
    access: Access,
    worker_of: WorkerOf,
    stop: CancellationToken,
) {
    // One byte more than a batch may be: a longer datagram is seen as cut.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    // Every datagram is read into this one (its buffers grow to a datagram's worth once).
    let mut batch = Batch {
        records: Vec::with_capacity(MAX_DATAGRAM / RECORD_HEADER),
        names: Vec::with_capacity(MAX_DATAGRAM),
        ..Batch::default()
    };
    loop {
        let received = tokio::select! {
            () = stop.cancelled() => return,
            received = socket.async_io(tokio::io::Interest::READABLE, || receive(&socket, &mut buf)) => received,
        };
        match received {
            Ok((n, Some((uid, pid)))) if access.admits(uid) => {
                match read_into(&buf[..n.min(MAX_DATAGRAM)], &mut batch, worker_of(pid)) {
                    Ok(()) => {
                        if batch.malformed || n > MAX_DATAGRAM {
                            log.count_malformed();
                        }
                        log.on_batch(&batch, Instant::now());
                    }
                    Err(_) => log.count_malformed(),
                }
            }
            Ok((_, peer)) => log.refuse_peer(
                "a datagram",
                &peer.map_or_else(
                    || "an unknown sender".to_owned(),
                    |(u, _)| format!("uid {u}"),
                ),
            ),
            Err(e) => {
                tracing::debug!("query log: reading the workers' records: {e}");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
}

/// How long a worker may take to tell its dropped count.
const DROPPED_TIMEOUT: Duration = Duration::from_secs(2);

/// Worker `w`'s own count of the records it dropped (`lua::query_log`), if it tells.
pub async fn dropped(rundir: &Path, w: crate::service::WorkerId) -> Option<u64> {
    let f = DROPPED_FUNCTION;
    // A global of the worker's configuration: looked up as the configuration's own code
    // would (kresd runs it in an environment of its own, not in `_G` itself).
    let expr = format!("({f} and {f}() or 0)");
    match crate::control::command(&w.control_socket(rundir), &expr, DROPPED_TIMEOUT).await {
        Ok(v) => v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)),
        Err(e) => {
            tracing::debug!("query log: dropped count of {}: {e}", w.name());
            None
        }
    }
}

/// The workers' dropped counts, bounded in the workers kept.
#[derive(Debug, Default)]
pub struct Dropped {
    /// Per worker, the count its last batch told (a worker's batches come in order; a
    /// worker started again counts from zero, and its batches say so).
    by_worker: std::collections::BTreeMap<u32, u64>,
}

impl Dropped {
    /// Worker `w` told `n` in its latest batch.
    pub fn tell(&mut self, w: u32, n: u64) {
        if let Some(kept) = self.by_worker.get_mut(&w) {
            *kept = n;
        } else if self.by_worker.len() < MAX_WORKERS {
            self.by_worker.insert(w, n);
        }
    }

    /// The sum of the counts, and the workers counted: what the batches told, replaced by
    /// what `now` (read from the workers themselves) says where it says.
    pub fn merged(&self, now: &std::collections::BTreeMap<u32, u64>) -> (u64, u64) {
        let mut all = self.by_worker.clone();
        all.extend(now);
        (all.values().sum(), all.len() as u64)
    }

    /// Forget every count (the log was turned off: its workers are replaced).
    pub fn clear(&mut self) {
        self.by_worker.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as a worker writes it.
    struct Rec<'a> {
        addr: &'a [u8],
        family: u8,
        name: &'a [u8],
        cached: u8,
        start: u64,
        latency: u32,
    }

    impl Rec<'_> {
        fn bytes(&self) -> Vec<u8> {
            let mut r = vec![0u8; RECORD_HEADER];
            r[0..8].copy_from_slice(&self.start.to_ne_bytes());
            r[8..12].copy_from_slice(&self.latency.to_ne_bytes());
            r[12..14].copy_from_slice(&4000u16.to_ne_bytes());
            r[14..16].copy_from_slice(&28u16.to_ne_bytes());
            r[16..18].copy_from_slice(&16u16.to_ne_bytes());
            r[18..20].copy_from_slice(&2u16.to_ne_bytes());
            r[20..24].copy_from_slice(&(-1i32).to_ne_bytes());
            r[24..24 + self.addr.len()].copy_from_slice(self.addr);
            r[40] = self.family;
            r[41] = 3;
            r[42] = self.cached;
            r[43] = self.name.len() as u8;
            r.extend_from_slice(self.name);
            r.resize(r.len().next_multiple_of(8), 0);
            r
        }
    }

    fn batch(worker: u32, count: u32, records: &[Vec<u8>]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(MAGIC.to_ne_bytes());
        b.extend(worker.to_ne_bytes());
        b.extend(count.to_ne_bytes());
        b.extend([0u8; 4]);
        b.extend(7u64.to_ne_bytes());
        for r in records {
            b.extend(r);
        }
        b
    }

    const A_TEST: &[u8] = b"\x01A\x04TeSt\x00";

    fn good() -> Rec<'static> {
        Rec {
            addr: &[127, 0, 0, 2],
            family: 4,
            name: A_TEST,
            cached: 1,
            start: 1_000_000,
            latency: 250,
        }
    }

    #[test]
    fn a_batch_reads_into_entries() {
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        let hostile = b"\x04a\x00.\xff\x00";
        let records = [
            good().bytes(),
            Rec {
                addr: &v6,
                family: 6,
                name: hostile,
                cached: 0,
                start: 0,
                latency: u32::MAX,
            }
            .bytes(),
        ];
        let read = read(&batch(3, 2, &records), Some(3)).expect("a batch");
        assert_eq!(
            (read.worker, read.dropped, read.malformed),
            (Some(3), 7, false)
        );
        let entries = read.entries();
        let e = &entries[0];
        assert_eq!(e.client, "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(e.name.as_ref(), "a.test.");
        assert_eq!((e.qtype, e.rcode, e.answers, e.ede), (28, 16, 2, None));
        assert_eq!((e.time_us, e.latency_us), (1_000_250, Some(250)));
        assert_eq!(
            (e.transport, e.cached, e.worker),
            (Transport::Dot, Some(true), Some(3))
        );
        // A batch read into again holds the new datagram's records only.
        let mut again = super::read(&batch(3, 2, &records), Some(3)).expect("a batch");
        read_into(&batch(5, 1, &records[1..]), &mut again, Some(5)).expect("a batch");
        assert_eq!(
            again,
            super::read(&batch(5, 1, &records[1..]), Some(5)).expect("a batch")
        );
        let e = &entries[1];
        assert_eq!(e.client, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(e.name.as_ref(), "a\\000\\.\\255.");
        assert_eq!((e.latency_us, e.cached), (None, Some(false)));
    }

    /// The worker is who sent the batch, not who it says it is: a batch claiming worker 3
    /// from worker 1 is worker 1's, from a process that is no worker no one's.
    #[test]
    fn a_batch_is_the_senders_whatever_number_it_claims() {
        let claims_3 = batch(3, 1, &[good().bytes()]);
        let from_1 = read(&claims_3, Some(1)).expect("a batch");
        assert_eq!(from_1.worker, Some(1));
        assert_eq!(from_1.entries()[0].worker, Some(1));
        let from_another = read(&claims_3, None).expect("a batch");
        assert_eq!(from_another.worker, None);
        assert_eq!(from_another.entries()[0].worker, None);
        assert_eq!(
            from_another.records.len(),
            1,
            "its answers are still logged"
        );
    }

    #[test]
    fn what_is_not_a_whole_record_is_not_read() {
        let good = good().bytes();
        let bad_family = Rec {
            family: 5,
            ..Rec { ..self::good() }
        }
        .bytes();
        // A label running past the name's end; a compression pointer.
        let bad_name = Rec {
            name: b"\x05a\x00",
            ..self::good()
        }
        .bytes();
        let pointer = Rec {
            name: b"\xc0\x0c",
            ..self::good()
        }
        .bytes();
        let mut cut = good.clone();
        cut.truncate(RECORD_HEADER + 2);
        // (records, count claimed, entries read, malformed)
        let rows: [(Vec<Vec<u8>>, u32, usize, bool); 7] = [
            (vec![good.clone()], 1, 1, false),
            (vec![good.clone(), bad_family], 2, 1, true),
            (vec![bad_name, good.clone()], 2, 0, true),
            (vec![pointer], 1, 0, true),
            (vec![good.clone(), cut], 2, 1, true),
            (vec![good.clone(), good.clone()], 1, 1, true),
            (vec![good.clone()], u32::MAX, 1, true),
        ];
        for (i, (records, count, entries, malformed)) in rows.into_iter().enumerate() {
            let read = read(&batch(0, count, &records), Some(0)).expect("a batch");
            assert_eq!(
                (read.records.len(), read.malformed),
                (entries, malformed),
                "row {i}"
            );
        }
        assert_eq!(read(&[0u8; 10], Some(0)), Err(BatchError::Short(10)));
        assert_eq!(read(&[0u8; 30], Some(0)), Err(BatchError::Magic(0)));
    }

    #[test]
    fn dropped_counts_are_bounded_and_the_latest_wins() {
        let mut d = Dropped::default();
        d.tell(1, 5);
        // Worker 1 started again: it counts from zero.
        d.tell(1, 3);
        assert_eq!(d.merged(&Default::default()), (3, 1));
        for w in 0..(MAX_WORKERS as u32 * 2) {
            d.tell(w + 10, 1);
        }
        assert_eq!(d.by_worker.len(), MAX_WORKERS);
        // What the workers say now replaces what their batches told.
        let (sum, workers) = d.merged(&std::collections::BTreeMap::from([(1, 9)]));
        assert_eq!(
            (sum, workers),
            (9 + MAX_WORKERS as u64 - 1, MAX_WORKERS as u64)
        );
    }

    #[tokio::test]
    async fn each_datagram_says_who_sent_it() {
        let dir = std::env::temp_dir().join(format!("kres-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let access = Access::for_workers(None);
        let socket = bind(&dir, &access).expect("bind");
        let path = dir.join(SOCKET_FILE);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let sender = std::os::unix::net::UnixDatagram::unbound().expect("sender");
        let sent = batch(0, 1, &[good().bytes()]);
        sender.send_to(&sent, &path).expect("send");
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let (n, peer) = socket
            .async_io(tokio::io::Interest::READABLE, || receive(&socket, &mut buf))
            .await
            .expect("receive");
        assert_eq!(n, sent.len());
        let (uid, pid) = peer.expect("credentials");
        assert_eq!(uid, nix::unistd::geteuid().as_raw());
        assert_eq!(pid, i32::try_from(std::process::id()).expect("a pid"));
        assert!(access.admits(uid));
        std::fs::remove_dir_all(&dir).ok();
    }
}
